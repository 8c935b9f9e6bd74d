"""The log of LangGraph's memory store as one process reads and writes it (`MemoryLog`):
``<store>/langgraph/store/<gen>.log``, a header and framed records from a base record
naming a snapshot (a ckpt checkpoint), and the items it holds in memory. The caller
holds the store's ``langgraph-store`` lock (shared to read, exclusive to write).
formats/langgraph-store.md is the format.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Any

import msgpack

from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    HEADER_V2,
    MAGIC,
    PROCESS_SALT,
    Buffer,
    Hole,
    frame,
    mapped,
    pwrite_all,
    scan_records,
)
from ckptcli.adapters.langgraph.store_items import Items, Rec, expiry
from ckptcli.adapters.langgraph.store_log import (
    SNAPSHOT_BRANCH,
    SNAPSHOT_VERSION,
    base_of,
    damaged_tail,
    decode_value,
    generations,
    log_name,
    record_problem,
)
from ckptcli.errors import CkptError, CorruptError, LimitExceededError, StoreIOError
from ckptcli.store.backend import create_temp, fsync_dir
from ckptcli.store.repository import Store

__all__ = ["MAX_BATCH_BYTES", "MemoryLog"]

MAX_BATCH_BYTES = 256 * 1024 * 1024  # a batch is one log record, at most this big


class MemoryLog:
    """The newest log of the memory store in directory `dir` of `store`, read into `data`
    (namespace -> key -> item) up to `offset`; `fsync`: "always" or "never"."""

    def __init__(self, store: Store, dir: Path, fsync: str, branch: str = SNAPSHOT_BRANCH) -> None:
        self.store = store
        self.dir = dir
        self.branch = branch  # the branch that keeps the live log's snapshot from prune
        self.fsync = fsync
        self.fd = -1
        self.gen = -1
        self.next_log = ""
        self.salt = b""
        self.offset = 0
        self.data: Items = {}
        self.next_seq = 0
        self.ttl_items = 0
        self.warned_tail: tuple[str, int] = ("", 0)  # the damaged last record warned about

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def path(self, gen: int) -> Path:
        return self.dir / log_name(gen)

    def open_newest(self, cleanup: bool = False) -> None:
        """Read the newest log from its base (under a lock); with `cleanup` (exclusive
        lock), create the first log when there is none and remove older ones."""
        gens = generations(self.dir)
        if not gens:
            if not cleanup:
                raise CorruptError(f"the LangGraph store's log in {self.dir} is gone", hint="reopen the CkptStore")
            self.create_log(0, None)
            gens = [0]
        gen = gens[-1]
        path = self.path(gen)
        aside = f"move it out of {self.dir} (nothing there was removed; the next older log is then read) or restore the store from a backup"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise CorruptError(f"the LangGraph store's newest log {path} is not a regular file", hint=aside) from None
            raise StoreIOError(f"cannot open the LangGraph store's log {path}: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CorruptError(f"the LangGraph store's newest log {path} is not a regular file", hint=aside)
            head = os.pread(fd, HEADER_V2, 0)
            if head[: len(MAGIC)] != MAGIC or len(head) < HEADER_V2:
                raise CorruptError(f"the LangGraph store's newest log {path} is not a LangGraph store log (bad header)", hint=aside)
            salt = head[len(MAGIC) :]
            data = mapped(fd)  # under the lock no one cuts it; a huge (sparse) log costs no memory
        except OSError as exc:
            os.close(fd)
            raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        records, end = self.read_records(data, path, salt, HEADER_V2)
        snap = base_of([rec for _, rec in records[:1]])
        if isinstance(snap, str):
            os.close(fd)
            raise CorruptError(f"the LangGraph store's newest log {path} is damaged: {snap}", hint=aside)
        try:
            items = self.load_snapshot(snap, path)
        except BaseException:
            os.close(fd)
            raise
        before = (self.data, self.next_seq, self.ttl_items)
        self.data, self.next_seq, self.ttl_items = items, 0, 0
        try:
            for recs in items.values():
                for r in recs.values():
                    self.next_seq = max(self.next_seq, r.seq + 1)
                    self.ttl_items += r.ttl is not None
            for at, rec in records[1:]:
                self.apply(rec, path, at)
        except BaseException:
            os.close(fd)
            self.data, self.next_seq, self.ttl_items = before
            raise
        if cleanup:  # only now that the newest log reads: the older ones were left by a killed compaction
            for old in gens[:-1]:
                with contextlib.suppress(OSError):
                    self.path(old).unlink()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd, self.gen, self.salt, self.offset = fd, gen, salt, end
        self.next_log = str(self.path(gen + 1))
        if cleanup and snap is not None:
            # the branch keeps the live log's base from prune; a compaction killed between
            # its snapshot and its new log left the branch on a snapshot no log starts from
            try:
                if self.store.read_ref(f"refs/branches/{self.branch}") != snap:
                    self.store.set_branch(self.branch, snap)
            except CkptError as exc:
                self.store.warn(f"cannot point the branch {self.branch} at the LangGraph store's snapshot {snap.hex()[:12]}: {exc.message}")

    def read_records(self, data: Buffer, path: Path, salt: bytes, start: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """The records of `data` (the whole log) from offset `start` on, each with its
        offset, and where they end; a hole (damage with records after it) is read past
        with a warning."""

        def hole(h: Hole) -> None:
            if h.gave_up:
                raise CorruptError(
                    f"the LangGraph store's log {path} is damaged at offset {h.at}: "
                    "it holds more forged or damaged record headers than a reader looks through",
                    hint=f"move it out of {self.dir} (nothing there was removed) or restore the store from a backup",
                )
            self.store.warn(
                f"LangGraph store log {path}: {h.length} unreadable byte(s) at offset {h.at} (damage); "
                "the memories recorded there are lost, the records after them are read"
            )

        out: list[tuple[int, dict[str, Any]]] = []
        end = start
        for at, rec, rec_end in scan_records(data, start, salt, hole):
            out.append((at, rec))
            end = rec_end
        # what follows is a record torn by a killed writer, or a damaged last one: the end
        if damaged_tail(data, end) and self.warned_tail != (str(path), end):
            self.warned_tail = (str(path), end)  # once, not at every batch
            self.store.warn(
                f"LangGraph store log {path}: the last record, at offset {end}, is damaged (its CRC does not check): "
                "the memories recorded in it are lost"
            )
        return out, end

    def load_snapshot(self, snap: bytes | None, path: Path) -> Items:
        items: Items = {}
        if snap is None:
            return items
        from ckptcli.checkpoint import Checkpoint

        try:
            doc = Checkpoint(self.store, snap).section("memory")
        except CkptError as exc:
            raise CorruptError(
                f"the LangGraph store's log {path} starts from checkpoint {snap.hex()[:12]}, which cannot be read: {exc.message}",
                hint="run `ckpt verify`; restore the store from a backup",
            ) from None
        try:
            if doc.get("langgraph-store") != SNAPSHOT_VERSION:
                raise ValueError("unknown snapshot version")
            for ns_entry in doc["namespaces"]:
                ns = tuple(ns_entry["namespace"])
                if not ns or not all(type(x) is str for x in ns):
                    raise ValueError("bad namespace")
                recs = items.setdefault(ns, {})
                for it in ns_entry["items"]:
                    value = it["value"]
                    if type(value) is not dict or type(it["key"]) is not str:
                        raise ValueError("bad item")
                    raw = msgpack.packb(value, use_bin_type=True)
                    recs[it["key"]] = Rec(
                        value,
                        raw,
                        int(it["created_ns"]),
                        int(it["updated_ns"]),
                        it["ttl"],
                        it["expires_ns"],
                        int(it["seq"]),
                        it.get("vectors"),
                    )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptError(
                f"checkpoint {snap.hex()[:12]} is not a LangGraph store snapshot ({exc})", hint="restore the store from a backup"
            ) from None
        return items

    def create_log(self, gen: int, snapshot: bytes | None) -> None:
        """Write the log of generation `gen`, whole or not at all: header and base record."""
        data = MAGIC + PROCESS_SALT + frame({"op": "base", "snapshot": snapshot}, PROCESS_SALT)
        tmp: Path | None = None
        try:
            name, fd = create_temp(self.dir, suffix=".tmp", mode=0o644)
            tmp = self.dir / name
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path(gen))
            tmp = None
            fsync_dir(self.dir)
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise StoreIOError(f"cannot write the LangGraph store's log {self.path(gen)}: {exc.strerror}") from None

    def keep_damaged_tail(self, data: Buffer) -> None:
        """Before the bytes of `data` (the whole log) after the last intact record (at
        `_offset`) are cut: if they are a damaged record (all its bytes there, its CRC
        bad) rather than a torn one, warn and copy the log aside as ``<name>.damaged``
        (`ckpt verify` reports the copy)."""
        if not damaged_tail(data, self.offset):
            return
        path = self.path(self.gen)
        kept = path.with_name(path.name + DAMAGED_SUFFIX)
        try:
            name, fd = create_temp(self.dir, suffix=".tmp", mode=0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(self.dir / name, kept)
            fsync_dir(self.dir)
        except OSError as exc:
            raise StoreIOError(
                f"the LangGraph store's log {path} ends with a damaged record, and it cannot be copied aside to {kept}: {exc.strerror}",
                hint="nothing was written; free space or fix permissions, or copy the log aside yourself",
            ) from None
        self.store.warn(
            f"LangGraph store log {path}: the last record, at offset {self.offset}, is damaged (its CRC does not check); "
            f"the memories recorded in it are lost; the log was copied to {kept}"
        )

    def append(self, rec: dict[str, Any], sync: bool = True) -> None:
        data = frame(rec, self.salt)
        if len(data) > MAX_BATCH_BYTES:
            raise LimitExceededError(
                f"one batch of puts takes {len(data)} bytes, more than the {MAX_BATCH_BYTES} a batch may write",
                hint="put the items in several batches",
            )
        start = self.offset
        try:
            pwrite_all(self.fd, data, start)
            if sync and self.fsync == "always":
                os.fdatasync(self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)  # no half record stays behind
            raise StoreIOError(
                f"cannot write the LangGraph store's log {self.path(self.gen)}: {exc.strerror}", hint="nothing of this batch was kept"
            ) from None
        self.offset = start + len(data)
        self.apply(rec)

    def apply(self, rec: dict[str, Any], path: Path | None = None, at: int = 0) -> None:
        """Apply one record of the log to the items in memory (every process applies the
        same records in the same order, so they all hold the same items). A record read
        from the log (`path`, at offset `at`) is checked first: a malformed one (a bug or
        a hand edit; a crash leaves none) is refused before anything of it is applied."""
        op = rec.get("op")
        values: list[dict[str, Any] | None] = []
        if path is not None:
            why = record_problem(rec, values=False)
            if why is None and op == "put":
                values = [None if it[2] is None else decode_value(it[2]) for it in rec["items"]]
                if any(v is None and it[2] is not None for v, it in zip(values, rec["items"], strict=True)):
                    why = "an item's value is not a msgpack map with string keys"
            if why is not None:
                raise CorruptError(
                    f"the LangGraph store's log {path} is damaged: the record at offset {at} is malformed ({why})",
                    hint="run `ckpt verify`; restore the store from a backup",
                )
        if op == "put":
            touched: list[tuple[str, ...]] = []
            for i, (ns_l, key, value, created, updated, ttl, expires, seq, vectors) in enumerate(rec["items"]):
                ns = tuple(ns_l)
                recs = self.data.get(ns)
                if recs is None:
                    recs = self.data[ns] = {}
                old = recs.get(key)
                if old is not None:
                    self.ttl_items -= old.ttl is not None
                if value is None:
                    recs.pop(key, None)
                    touched.append(ns)
                    continue
                v = values[i] if values else None
                r = Rec(v if v is not None else msgpack.unpackb(value, raw=False), value, created, updated, ttl, expires, seq, vectors)
                if old is not None and old.seq != seq:  # a new item where an expired one was: it goes last
                    del recs[key]
                recs[key] = r  # an update keeps its place
                self.ttl_items += ttl is not None
                self.next_seq = max(self.next_seq, seq + 1)
            for ns in touched:  # a namespace left empty goes (it comes back at the end)
                if ns in self.data and not self.data[ns]:
                    del self.data[ns]
        elif op == "touch":
            t = rec["t"]
            for ns_l, key in rec["k"]:
                hit = self.data.get(tuple(ns_l), {}).get(key)
                if hit is not None and hit.ttl is not None:
                    hit.expires = expiry(t, hit.ttl)

    def refresh(self, writing: bool) -> None:
        """Take in what other processes wrote since this one last looked (under a lock)."""
        try:
            st = os.fstat(self.fd)
            newer = os.path.exists(self.next_log)  # a str: this runs before every batch
        except OSError as exc:
            raise StoreIOError(f"cannot read the LangGraph store's log {self.path(self.gen)}: {exc.strerror}") from None
        if st.st_nlink == 0 or newer:  # another process compacted: read the new generation from its base
            self.open_newest()
            return
        if st.st_size <= self.offset:
            return
        try:
            data = mapped(self.fd)  # under the lock (no one cuts it), mapped: a huge tail costs no memory
        except OSError as exc:
            raise StoreIOError(f"cannot read the LangGraph store's log {self.path(self.gen)}: {exc.strerror}") from None
        records, end = self.read_records(data, self.path(self.gen), self.salt, self.offset)
        for at, rec in records:
            try:
                self.apply(rec, self.path(self.gen), at)
            except CorruptError:
                self.offset = at  # the records before it are applied: not again
                raise
        self.offset = end
        if writing and self.offset < len(data):
            self.keep_damaged_tail(data)
            try:  # a record a killed writer left torn (or a damaged one, copied aside): nothing follows it
                os.ftruncate(self.fd, self.offset)
            except OSError as exc:
                raise StoreIOError(f"cannot write the LangGraph store's log {self.path(self.gen)}: {exc.strerror}") from None
