"""LangGraph's long-term memory store on ckpt: `CkptStore`, a `BaseStore`, sync and async.

    from ckptcli.adapters.langgraph.saver import CkptSaver
    from ckptcli.adapters.langgraph.store import CkptStore
    graph = builder.compile(checkpointer=CkptSaver.open(".ckpt"), store=CkptStore.open(".ckpt"))

One store directory holds an app's threads (the saver) and its memories (this store).
It behaves as LangGraph's `InMemoryStore` does (namespaces, get/put/delete, search with
filters and, given an ``index`` config with embeddings, semantic search; namespace
listing), and supports TTLs as LangGraph's persistent stores do. docs/langgraph.md
("Long-term memory") is the guide, formats/langgraph-store.md the layout.

How:

1. **A log shared by the processes.** Every batch that changes items is one record
   (`langgraph_journal.frame`) appended to ``<store>/langgraph/store/<gen>.log`` under the
   store's exclusive lock ``langgraph-store``, written (and, with ``fsync="always"``, the
   default, fdatasynced) before the call returns: a put that returned survives SIGKILL,
   and with "always" a power cut.
2. **Memory.** Each process keeps every item decoded in memory and, under the shared
   lock, reads what other processes appended since it last looked (one fstat when
   nothing was) before every batch: each batch sees every write that returned before it
   started, in any process.
3. **Snapshots in ckpt's own objects.** When the log grows past `compact_bytes`, the
   process writing takes a ckpt checkpoint of every live item (subject
   ``workflow:langgraph-store``, branch ``langgraph-store``, which keeps it from prune),
   starts the next generation's log with a base record naming it, and removes the old
   log. Unchanged values are stored once across snapshots; `ckpt show`, `verify` and
   `ls` see the memories as any checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import util
from pathlib import Path
from typing import Any

import msgpack
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    HEADER_V2,
    MAGIC,
    PROCESS_SALT,
    Buffer,
    Hole,
    frame,
    mapped,
    own_dir,
    pwrite_all,
    scan_records,
)
from ckptcli.adapters.langgraph.store_log import (
    LOCK_NAME,
    MAX_TTL_MINUTES,
    SNAPSHOT_BRANCH,
    SNAPSHOT_SUBJECT,
    SNAPSHOT_VERSION,
    base_of,
    damaged_tail,
    decode_value,
    generations,
    log_dir,
    log_name,
    record_problem,
)
from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError, StoreIOError, UsageError
from ckptcli.store.backend import create_temp, fsync_dir
from ckptcli.store.repository import Store

__all__ = ["CkptStore"]

FSYNC_POLICIES = ("always", "never")
#: the largest value one item may hold (msgpack-encoded); a batch is one log record, at most MAX_BATCH_BYTES
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_BATCH_BYTES = 256 * 1024 * 1024
MAX_DEPTH = 200
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_NS = 1_000_000_000
_FILTER_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

NsKey = tuple[tuple[str, ...], str]


@dataclass(slots=True)
class _Rec:
    """One item as this process holds it: the value (decoded, never handed out) and its
    msgpack bytes (decoded again for every result, so a caller's edits stay its own)."""

    value: dict[str, Any]
    raw: bytes
    created: int
    updated: int
    ttl: float | None
    expires: int | None
    seq: int
    vectors: dict[str, list[float]] | None

    def live(self, now: int) -> bool:
        return self.expires is None or self.expires > now


def _dt(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / _NS, UTC)


def _expiry(t: int, ttl: float) -> int:
    """When an item with `ttl` minutes, written or read at `t` (ns), expires: at most
    2**63-1 (a log holds 64-bit times; a reader refuses more)."""
    return min(t + int(ttl * 60 * _NS), 2**63 - 1)


def _where(ns: tuple[str, ...], key: str) -> str:
    return f"item {key!r} of namespace {ns!r}"


def _is_unicode(s: str) -> bool:
    """Whether `s` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_json(v: Any, where: str, depth: int = 0) -> None:
    """Refuse what is not a JSON value (dict with string keys, list, str, int, float,
    bool, None), naming where it is."""
    t = type(v)
    if v is None or t is bool or t is float or t is str:
        if t is str and not _is_unicode(v):
            raise InvalidInputError(f"{where}: string is not valid Unicode (lone surrogate)")
        return
    if t is int:
        if not _INT_MIN <= v <= _INT_MAX:
            raise InvalidInputError(f"{where}: integer {v} does not fit in 64 bits", hint="store it as a string")
        return
    if depth >= MAX_DEPTH:
        raise LimitExceededError(f"{where}: nesting is deeper than {MAX_DEPTH} levels")
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise InvalidInputError(f"{where}: key {k!r} is a {type(k).__name__}; keys must be strings")
            if not _is_unicode(k):
                raise InvalidInputError(f"{where}: key {k!r} is not valid Unicode (lone surrogate)")
            _check_json(x, f"{where}.{k}", depth + 1)
        return
    if t is list or t is tuple:
        for i, x in enumerate(v):
            _check_json(x, f"{where}[{i}]", depth + 1)
        return
    raise InvalidInputError(
        f"{where} is a {t.__name__}, not a JSON value",
        hint="store dicts, lists, strings, numbers, booleans and None (convert it, e.g. a datetime to an ISO string)",
    )


def _encode_value(ns: tuple[str, ...], key: str, value: Any) -> tuple[dict[str, Any], bytes]:
    where = _where(ns, key)
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where}: the value is a {type(value).__name__}, not a dict", hint="store a dict, e.g. {'text': ...}")
    d = dict(value)
    _check_json(d, f"{where}: value")
    raw: bytes = msgpack.packb(d, use_bin_type=True)
    if len(raw) > MAX_VALUE_BYTES:
        raise LimitExceededError(
            f"{where}: the value takes {len(raw)} bytes, more than the {MAX_VALUE_BYTES} an item may hold",
            hint="split it into several items, or keep large data in files and store their paths",
        )
    return msgpack.unpackb(raw, raw=False), raw


def _validate_put(op: PutOp) -> None:
    if not op.namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if op.namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
    if type(op.key) is not str:
        raise InvalidInputError(f"the key of an item of namespace {op.namespace!r} is a {type(op.key).__name__}, not a string")
    if not (_is_unicode(op.key) and all(_is_unicode(label) for label in op.namespace)):
        raise InvalidInputError(f"{_where(op.namespace, op.key)}: its key or a namespace label is not valid Unicode (lone surrogate)")
    if op.ttl is not None and (isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)) or not 0 < op.ttl <= MAX_TTL_MINUTES):
        raise InvalidInputError(f"{_where(op.namespace, op.key)}: ttl must be a number of minutes from 0 to {MAX_TTL_MINUTES} (a century) or None, not {op.ttl!r}")
    if op.index is not None and op.index is not False and not (isinstance(op.index, list) and all(type(p) is str for p in op.index)):
        raise InvalidInputError(f"{_where(op.namespace, op.key)}: index must be False, None or a list of field paths, not {op.index!r}")


def _validate_filter(flt: Any) -> None:
    if flt is None:
        return
    if not isinstance(flt, dict):
        raise InvalidInputError(f"a search filter must be a dict, not a {type(flt).__name__}")
    for k, v in flt.items():
        if type(k) is not str:
            raise InvalidInputError(f"search filter key {k!r} is not a string")
        if isinstance(v, dict) and any(type(o) is str and o.startswith("$") for o in v):
            for o in v:
                if o not in _FILTER_OPS:
                    raise InvalidInputError(f"search filter on {k!r}: unsupported operator {o!r}", hint=f"use one of {', '.join(_FILTER_OPS)}")


# -- matching, as InMemoryStore does --------------------------------------------------------


def _does_match(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = cond.path
    if len(ns) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported namespace match type {cond.match_type!r}", hint="use 'prefix' or 'suffix'")
    return all(p == "*" or k == p for k, p in pairs)


def _compare(item_value: Any, filter_value: Any) -> bool:
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, o, ov) for o, ov in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(filter_value)
            and all(_compare(i, f) for i, f in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _apply_operator(value: Any, op: str, op_value: Any) -> bool:
    if op == "$eq":
        return bool(value == op_value)
    if op == "$ne":
        return bool(value != op_value)
    a, b = _num(value), _num(op_value)
    if a is None or b is None:  # a value that is no number matches no comparison
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b  # $lte (operators are checked before the search runs)


@functools.lru_cache(maxsize=1)
def _have_numpy() -> bool:
    return util.find_spec("numpy") is not None


def _cosine(x: list[float], ys: list[list[float]]) -> list[float]:
    """Cosine similarity of `x` with each of `ys`, computed as InMemoryStore computes it."""
    if not ys:
        return []
    if _have_numpy():
        np = importlib.import_module("numpy")  # optional, as for InMemoryStore
        xa, ya = np.array(x), np.array(ys)
        xn, yn = np.linalg.norm(xa), np.linalg.norm(ya, axis=1)
        mask = yn != 0
        sims = np.zeros_like(yn)
        sims[mask] = np.dot(ya[mask], xa) / (yn[mask] * xn)
        return [float(s) for s in sims.tolist()]
    out = []
    for y in ys:
        dot = sum(a * b for a, b in zip(x, y, strict=False))
        n1 = sum(a * a for a in x) ** 0.5
        n2 = sum(a * a for a in y) ** 0.5
        out.append(dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0)
    return out


class CkptStore(BaseStore):
    """LangGraph's long-term memory store backed by a ckpt store (module docstring: how).

    Args:
        store: a Store, or the path of a store directory (or of a directory holding
            ``.ckpt/``); `open` creates it when missing. The same store a `CkptSaver`
            uses: one directory holds an app's threads and its memories.
        index: semantic search, as InMemoryStore's ``index`` ({"dims", "embed",
            "fields"}); without it a search's ``query`` is ignored.
        ttl: LangGraph's TTLConfig: ``default_ttl`` (minutes) for puts that give none,
            ``refresh_on_read`` (default True), ``sweep_interval_minutes`` (a thread
            that deletes expired items that often). Expired items are never returned,
            whether swept yet or not.
        fsync: "always" (default: a put that returned survives a power cut; one
            fdatasync per batch that writes) or "never" (it survives the process being
            killed; the OS decides when it reaches the disk).
        clock: seconds since the epoch, for timestamps and TTLs (default time.time).
        compact_bytes: the log size past which a write snapshots the items into a ckpt
            checkpoint and starts a new log.
        lock_timeout: seconds to wait for another process's batch before LockError.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        fsync: str = "always",
        clock: Callable[[], float] | None = None,
        compact_bytes: int = 16 * 1024 * 1024,
        lock_timeout: float = 30.0,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise InvalidInputError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if type(compact_bytes) is not int or compact_bytes < 4096:
            raise InvalidInputError(f"compact_bytes must be an integer >= 4096, not {compact_bytes!r}")
        if ttl is not None and not isinstance(ttl, dict):
            raise InvalidInputError(f"ttl must be a TTLConfig dict, not {type(ttl).__name__}")
        self.fsync = fsync
        self.clock = clock or time.time
        self.compact_bytes = compact_bytes
        self.lock_timeout = lock_timeout
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        if index:
            self.index_config = dict(index)
            self.embeddings = ensure_embeddings(self.index_config.get("embed"))
            self.index_config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (self.index_config.get("fields") or ["$"])
            ]
        self.store = store if isinstance(store, Store) else Store.open(Path(store))
        self._dir = log_dir(Path(self.store.location))
        self._mu = threading.RLock()
        self._closed = False
        self._fd = -1
        self._gen = -1
        self._next_log = ""
        self._salt = b""
        self._offset = 0
        self._data: dict[tuple[str, ...], dict[str, _Rec]] = {}
        self._next_seq = 0
        self._ttl_items = 0
        self._warned_tail: tuple[str, int] = ("", 0)  # the damaged last record warned about
        self._retry_at = 0  # after a compaction failed: the log size at which to try again
        self.compactions = 0  # snapshots this process took (for tests and benchmarks)
        own_dir(self._dir.parent)
        own_dir(self._dir)
        with self._mu, self._lock(shared=False):
            self._open_newest(cleanup=True)
        self._sweep_stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if ttl and ttl.get("sweep_interval_minutes"):
            self.start_ttl_sweeper()

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ".ckpt", **options: Any) -> CkptStore:
        """The memory store of the store at `path` (created as `ckpt init` would when
        there is none). Options are the constructor's."""
        from ckptcli.checkpoint import store_or_init

        return cls(store_or_init(path), **options)

    # -- closing ------------------------------------------------------------------------
    def __enter__(self) -> CkptStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CkptStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the TTL sweeper and close the log (every write is in it already)."""
        self.stop_ttl_sweeper()
        with self._mu:
            if self._closed:
                return
            self._closed = True
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = -1
            self.store.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed and self._fd >= 0:
                os.close(self._fd)

    # -- the log --------------------------------------------------------------------------
    def _lock(self, shared: bool) -> contextlib.AbstractContextManager[None]:
        return self.store.backend.lock(LOCK_NAME, shared=shared, wait=self.lock_timeout)

    def _path(self, gen: int) -> Path:
        return self._dir / log_name(gen)

    def _open_newest(self, cleanup: bool = False) -> None:
        """Read the newest log from its base (under a lock); with `cleanup` (exclusive
        lock), create the first log when there is none and remove older ones."""
        gens = generations(self._dir)
        if not gens:
            if not cleanup:
                raise CorruptError(f"the LangGraph store's log in {self._dir} is gone", hint="reopen the CkptStore")
            self._create_log(0, None)
            gens = [0]
        gen = gens[-1]
        path = self._path(gen)
        aside = f"move it out of {self._dir} (nothing there was removed; the next older log is then read) or restore the store from a backup"
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
        records, end = self._read_records(data, path, salt, HEADER_V2)
        snap = base_of([rec for _, rec in records[:1]])
        if isinstance(snap, str):
            os.close(fd)
            raise CorruptError(f"the LangGraph store's newest log {path} is damaged: {snap}", hint=aside)
        try:
            items = self._load_snapshot(snap, path)
        except BaseException:
            os.close(fd)
            raise
        before = (self._data, self._next_seq, self._ttl_items)
        self._data, self._next_seq, self._ttl_items = items, 0, 0
        try:
            for recs in items.values():
                for r in recs.values():
                    self._next_seq = max(self._next_seq, r.seq + 1)
                    self._ttl_items += r.ttl is not None
            for at, rec in records[1:]:
                self._apply(rec, path, at)
        except BaseException:
            os.close(fd)
            self._data, self._next_seq, self._ttl_items = before
            raise
        if cleanup:  # only now that the newest log reads: the older ones were left by a killed compaction
            for old in gens[:-1]:
                with contextlib.suppress(OSError):
                    self._path(old).unlink()
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd, self._gen, self._salt, self._offset = fd, gen, salt, end
        self._next_log = str(self._path(gen + 1))
        if cleanup and snap is not None:
            # the branch keeps the live log's base from prune; a compaction killed between
            # its snapshot and its new log left the branch on a snapshot no log starts from
            try:
                if self.store.read_ref(f"refs/branches/{SNAPSHOT_BRANCH}") != snap:
                    self.store.set_branch(SNAPSHOT_BRANCH, snap)
            except CkptError as exc:
                self.store.warn(f"cannot point the branch {SNAPSHOT_BRANCH} at the LangGraph store's snapshot {snap.hex()[:12]}: {exc.message}")

    def _read_records(self, data: Buffer, path: Path, salt: bytes, start: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """The records of `data` (the whole log) from offset `start` on, each with its
        offset, and where they end; a hole (damage with records after it) is read past
        with a warning."""

        def hole(h: Hole) -> None:
            if h.gave_up:
                raise CorruptError(
                    f"the LangGraph store's log {path} is damaged at offset {h.at}: it holds more forged or damaged record headers than a reader looks through",
                    hint=f"move it out of {self._dir} (nothing there was removed) or restore the store from a backup",
                )
            self.store.warn(f"LangGraph store log {path}: {h.length} unreadable byte(s) at offset {h.at} (damage); the memories recorded there are lost, the records after them are read")

        out: list[tuple[int, dict[str, Any]]] = []
        end = start
        for at, rec, rec_end in scan_records(data, start, salt, hole):
            out.append((at, rec))
            end = rec_end
        # what follows is a record torn by a killed writer, or a damaged last one: the end
        if damaged_tail(data, end) and self._warned_tail != (str(path), end):
            self._warned_tail = (str(path), end)  # once, not at every batch
            self.store.warn(f"LangGraph store log {path}: the last record, at offset {end}, is damaged (its CRC does not check): the memories recorded in it are lost")
        return out, end

    def _load_snapshot(self, snap: bytes | None, path: Path) -> dict[tuple[str, ...], dict[str, _Rec]]:
        items: dict[tuple[str, ...], dict[str, _Rec]] = {}
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
                    recs[it["key"]] = _Rec(value, raw, int(it["created_ns"]), int(it["updated_ns"]), it["ttl"], it["expires_ns"], int(it["seq"]), it.get("vectors"))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptError(f"checkpoint {snap.hex()[:12]} is not a LangGraph store snapshot ({exc})", hint="restore the store from a backup") from None
        return items

    def _create_log(self, gen: int, snapshot: bytes | None) -> None:
        """Write the log of generation `gen`, whole or not at all: header and base record."""
        data = MAGIC + PROCESS_SALT + frame({"op": "base", "snapshot": snapshot}, PROCESS_SALT)
        tmp: Path | None = None
        try:
            name, fd = create_temp(self._dir, suffix=".tmp", mode=0o644)
            tmp = self._dir / name
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self._path(gen))
            tmp = None
            fsync_dir(self._dir)
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise StoreIOError(f"cannot write the LangGraph store's log {self._path(gen)}: {exc.strerror}") from None

    def _refresh(self, writing: bool) -> None:
        """Take in what other processes wrote since this one last looked (under a lock)."""
        if self._closed:
            raise UsageError("this CkptStore is closed")
        try:
            st = os.fstat(self._fd)
            newer = os.path.exists(self._next_log)  # a str: this runs before every batch
        except OSError as exc:
            raise StoreIOError(f"cannot read the LangGraph store's log {self._path(self._gen)}: {exc.strerror}") from None
        if st.st_nlink == 0 or newer:  # another process compacted: read the new generation from its base
            self._open_newest()
            return
        if st.st_size <= self._offset:
            return
        try:
            data = mapped(self._fd)  # under the lock (no one cuts it), mapped: a huge tail costs no memory
        except OSError as exc:
            raise StoreIOError(f"cannot read the LangGraph store's log {self._path(self._gen)}: {exc.strerror}") from None
        records, end = self._read_records(data, self._path(self._gen), self._salt, self._offset)
        for at, rec in records:
            try:
                self._apply(rec, self._path(self._gen), at)
            except CorruptError:
                self._offset = at  # the records before it are applied: not again
                raise
        self._offset = end
        if writing and self._offset < len(data):
            self._keep_damaged_tail(data)
            try:  # a record a killed writer left torn (or a damaged one, copied aside): nothing follows it
                os.ftruncate(self._fd, self._offset)
            except OSError as exc:
                raise StoreIOError(f"cannot write the LangGraph store's log {self._path(self._gen)}: {exc.strerror}") from None

    def _keep_damaged_tail(self, data: Buffer) -> None:
        """Before the bytes of `data` (the whole log) after the last intact record (at
        `_offset`) are cut: if they are a damaged record (all its bytes there, its CRC
        bad) rather than a torn one, warn and copy the log aside as ``<name>.damaged``
        (`ckpt verify` reports the copy)."""
        if not damaged_tail(data, self._offset):
            return
        path = self._path(self._gen)
        kept = path.with_name(path.name + DAMAGED_SUFFIX)
        try:
            name, fd = create_temp(self._dir, suffix=".tmp", mode=0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(self._dir / name, kept)
            fsync_dir(self._dir)
        except OSError as exc:
            raise StoreIOError(
                f"the LangGraph store's log {path} ends with a damaged record, and it cannot be copied aside to {kept}: {exc.strerror}",
                hint="nothing was written; free space or fix permissions, or copy the log aside yourself",
            ) from None
        self.store.warn(f"LangGraph store log {path}: the last record, at offset {self._offset}, is damaged (its CRC does not check); the memories recorded in it are lost; the log was copied to {kept}")

    def _append(self, rec: dict[str, Any], sync: bool = True) -> None:
        data = frame(rec, self._salt)
        if len(data) > MAX_BATCH_BYTES:
            raise LimitExceededError(
                f"one batch of puts takes {len(data)} bytes, more than the {MAX_BATCH_BYTES} a batch may write",
                hint="put the items in several batches",
            )
        start = self._offset
        try:
            pwrite_all(self._fd, data, start)
            if sync and self.fsync == "always":
                os.fdatasync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)  # no half record stays behind
            raise StoreIOError(f"cannot write the LangGraph store's log {self._path(self._gen)}: {exc.strerror}", hint="nothing of this batch was kept") from None
        self._offset = start + len(data)
        self._apply(rec)

    def _apply(self, rec: dict[str, Any], path: Path | None = None, at: int = 0) -> None:
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
                recs = self._data.get(ns)
                if recs is None:
                    recs = self._data[ns] = {}
                old = recs.get(key)
                if old is not None:
                    self._ttl_items -= old.ttl is not None
                if value is None:
                    recs.pop(key, None)
                    touched.append(ns)
                    continue
                v = values[i] if values else None
                r = _Rec(v if v is not None else msgpack.unpackb(value, raw=False), value, created, updated, ttl, expires, seq, vectors)
                if old is not None and old.seq != seq:  # a new item where an expired one was: it goes last
                    del recs[key]
                recs[key] = r  # an update keeps its place
                self._ttl_items += ttl is not None
                self._next_seq = max(self._next_seq, seq + 1)
            for ns in touched:  # a namespace left empty goes (it comes back at the end)
                if ns in self._data and not self._data[ns]:
                    del self._data[ns]
        elif op == "touch":
            t = rec["t"]
            for ns_l, key in rec["k"]:
                hit = self._data.get(tuple(ns_l), {}).get(key)
                if hit is not None and hit.ttl is not None:
                    hit.expires = _expiry(t, hit.ttl)
        # other ops: written by a later version; ignored (formats/langgraph-store.md)

    # -- batches ----------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, encoded = self._prepare(ops)
        put_vecs = self._embed_puts(puts)
        query_vecs: dict[str, list[float]] = {}
        if self.embeddings is not None:
            for q in dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query):
                query_vecs[q] = list(self.embeddings.embed_query(q))
        return self._execute(ops, puts, encoded, put_vecs, query_vecs)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, encoded = self._prepare(ops)
        put_vecs: dict[NsKey, dict[str, list[float]]] = {}
        query_vecs: dict[str, list[float]] = {}
        if self.embeddings is not None:
            texts, where = self._texts(puts)
            if texts:
                put_vecs = self._place(where, await self.embeddings.aembed_documents(texts))
            queries = list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))
            if queries:
                got = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
                query_vecs = {q: list(v) for q, v in zip(queries, got, strict=True)}
        return await asyncio.to_thread(self._execute, ops, puts, encoded, put_vecs, query_vecs)

    def _prepare(self, ops: Iterable[Op]) -> tuple[list[Op], dict[NsKey, PutOp], dict[NsKey, bytes]]:
        """Check every op before anything runs (and before anything is embedded); the
        puts, last one per item wins (at the place of the first, as InMemoryStore applies
        them), and their values encoded."""
        checked: list[Op] = []
        puts: dict[NsKey, PutOp] = {}
        encoded: dict[NsKey, bytes] = {}
        for op in ops:
            if not isinstance(op, (GetOp, SearchOp, PutOp, ListNamespacesOp)):
                raise InvalidInputError(f"unknown store operation {type(op).__name__}", hint="use GetOp, PutOp, SearchOp or ListNamespacesOp")
            validate_op_namespace(op)
            if isinstance(op, (GetOp, PutOp)) and type(op.namespace) is not tuple:
                op = op._replace(namespace=tuple(op.namespace))
            if isinstance(op, SearchOp) and type(op.namespace_prefix) is not tuple:
                op = op._replace(namespace_prefix=tuple(op.namespace_prefix))
            if isinstance(op, PutOp):
                _validate_put(op)
                k = (op.namespace, op.key)
                if op.value is not None:
                    value, encoded[k] = _encode_value(op.namespace, op.key, op.value)
                    op = op._replace(value=value)
                else:
                    encoded.pop(k, None)
                puts[k] = op
            elif isinstance(op, SearchOp):
                _validate_filter(op.filter)
            checked.append(op)
        return checked, puts, encoded

    def _texts(self, puts: dict[NsKey, PutOp]) -> tuple[list[str], dict[str, list[tuple[NsKey, str]]]]:
        """The texts to embed for `puts` (each once) and where each goes: (item, path)."""
        where: dict[str, list[tuple[NsKey, str]]] = {}
        if self.index_config is None:
            return [], where
        for k, op in puts.items():
            if op.value is None or op.index is False:
                continue
            paths = self.index_config["__tokenized_fields"] if op.index is None else [(ix, tokenize_path(ix)) for ix in op.index]
            for path, field in paths:
                texts = get_text_at_path(op.value, field)
                for i, text in enumerate(texts):
                    where.setdefault(text, []).append((k, f"{path}.{i}" if len(texts) > 1 else path))
        return list(where), where

    @staticmethod
    def _place(where: dict[str, list[tuple[NsKey, str]]], vectors: list[list[float]]) -> dict[NsKey, dict[str, list[float]]]:
        if len(vectors) != len(where):
            raise InvalidInputError(f"the embedding function returned {len(vectors)} vectors for {len(where)} texts")
        out: dict[NsKey, dict[str, list[float]]] = {}
        for vec, targets in zip(vectors, where.values(), strict=True):
            v = [float(x) for x in vec]
            for k, path in targets:
                out.setdefault(k, {})[path] = v
        return out

    def _embed_puts(self, puts: dict[NsKey, PutOp]) -> dict[NsKey, dict[str, list[float]]]:
        if self.embeddings is None:
            return {}
        texts, where = self._texts(puts)
        if not texts:
            return {}
        return self._place(where, list(self.embeddings.embed_documents(texts)))

    def _execute(
        self,
        ops: list[Op],
        puts: dict[NsKey, PutOp],
        encoded: dict[NsKey, bytes],
        put_vecs: dict[NsKey, dict[str, list[float]]],
        query_vecs: dict[str, list[float]],
    ) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        touch: dict[NsKey, None] = {}
        with self._mu:
            if self._closed:
                raise UsageError("this CkptStore is closed")
            with self._lock(shared=not puts):
                self._refresh(writing=bool(puts))
                now = int(self.clock() * _NS)
                for i, op in enumerate(ops):  # reads see the store as it was before this batch's puts
                    if isinstance(op, GetOp):
                        r = self._data.get(op.namespace, {}).get(op.key)
                        if r is not None and r.live(now):
                            results[i] = Item(value=msgpack.unpackb(r.raw, raw=False), key=op.key, namespace=op.namespace, created_at=_dt(r.created), updated_at=_dt(r.updated))
                            if op.refresh_ttl and r.ttl is not None:
                                touch[(op.namespace, op.key)] = None
                    elif isinstance(op, SearchOp):
                        found = self._search(op, now, query_vecs)
                        results[i] = found
                        if op.refresh_ttl and self._ttl_items:
                            for it in found:
                                r = self._data[it.namespace][it.key]
                                if r.ttl is not None:
                                    touch[(it.namespace, it.key)] = None
                    elif isinstance(op, ListNamespacesOp):
                        results[i] = self._list_namespaces(op, now)
                if puts:
                    self._write_puts(puts, encoded, put_vecs, now, touch)
                    self._maybe_compact(now)
                    return results
            if touch:  # refresh the TTLs read: a write, under the exclusive lock
                with self._lock(shared=False):
                    self._refresh(writing=True)
                    # not synced: a refresh a power cut loses lets the item expire at its earlier time
                    self._append({"op": "touch", "t": int(self.clock() * _NS), "k": [[list(ns), key] for ns, key in touch]}, sync=False)
        return results

    def _write_puts(
        self,
        puts: dict[NsKey, PutOp],
        encoded: dict[NsKey, bytes],
        put_vecs: dict[NsKey, dict[str, list[float]]],
        now: int,
        touch: dict[NsKey, None],
    ) -> None:
        items: list[list[Any]] = []
        seq = self._next_seq
        if seq + len(puts) >= 2**63:
            raise CorruptError(
                f"the LangGraph store's log {self._path(self._gen)} names an item sequence number near 2**63: no new item can be numbered",
                hint="nothing was written; a record a writer of ckpt does not make is in the log: restore the store from a backup",
            )
        for (ns, key), op in puts.items():
            old = self._data.get(ns, {}).get(key)
            if op.value is None:
                if old is not None:
                    items.append([list(ns), key, None, 0, 0, None, None, 0, None])
                continue
            if old is not None and old.live(now):
                created, s = old.created, old.seq
            else:
                created, s, seq = now, seq, seq + 1
            ttl = None if op.ttl is None else float(op.ttl)
            expires = None if ttl is None else _expiry(now, ttl)
            items.append([list(ns), key, encoded[(ns, key)], created, now, ttl, expires, s, put_vecs.get((ns, key))])
        touched = [[list(ns), key] for ns, key in touch if (ns, key) not in puts]
        if items:
            self._append({"op": "put", "items": items})
        if touched:
            self._append({"op": "touch", "t": now, "k": touched}, sync=False)

    def _search(self, op: SearchOp, now: int, query_vecs: dict[str, list[float]]) -> list[SearchItem]:
        prefix = op.namespace_prefix
        n = len(prefix)
        scoring = bool(op.query) and self.embeddings is not None
        candidates: list[tuple[tuple[str, ...], str, _Rec]] = []
        for ns, recs in self._data.items():
            if ns[:n] != prefix:
                continue
            for key, r in recs.items():
                if not r.live(now):
                    continue
                if op.filter and not all(_compare(r.value.get(k), fv) for k, fv in op.filter.items()):
                    continue
                candidates.append((ns, key, r))

        def item(c: tuple[tuple[str, ...], str, _Rec], score: float | None = None) -> SearchItem:
            ns, key, r = c
            return SearchItem(ns, key, msgpack.unpackb(r.raw, raw=False), _dt(r.created), _dt(r.updated), score)

        qvec = query_vecs.get(op.query) if scoring and op.query else None
        if qvec is None or not candidates:
            return [item(c) for c in candidates[op.offset : op.offset + op.limit]]
        flat: list[tuple[tuple[str, ...], str, _Rec]] = []
        vecs: list[list[float]] = []
        scoreless = []
        for c in candidates:
            vs = list(c[2].vectors.values()) if c[2].vectors else []
            for v in vs:
                flat.append(c)
                vecs.append(v)
            if not vs:
                scoreless.append(c)
        scores = _cosine(qvec, vecs)
        ranked = sorted(zip(scores, flat, strict=True), key=lambda x: x[0], reverse=True)
        seen: set[NsKey] = set()
        kept: list[tuple[float | None, tuple[tuple[str, ...], str, _Rec]]] = []
        for score, c in ranked:  # each item's best vector, as InMemoryStore pools them
            k = (c[0], c[1])
            if k in seen:
                continue
            ix = len(seen)
            seen.add(k)
            if ix >= op.offset + op.limit:
                break
            if ix < op.offset:
                continue
            kept.append((score, c))
        if scoreless and len(kept) < op.limit:
            kept.extend((None, c) for c in scoreless[: op.limit - len(kept)])
        return [item(c, float(s) if s is not None else None) for s, c in kept]

    def _list_namespaces(self, op: ListNamespacesOp, now: int) -> list[tuple[str, ...]]:
        namespaces = [ns for ns, recs in self._data.items() if any(r.live(now) for r in recs.values())]
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset : op.offset + op.limit]

    # -- compaction -----------------------------------------------------------------------
    def _maybe_compact(self, now: int) -> None:
        if self._offset < max(self.compact_bytes, self._retry_at):
            return
        try:
            self._compact(now)
        except CkptError as exc:  # the batch is written: it must not look failed; a write tries again later
            self._retry_at = self._offset + self.compact_bytes
            self.store.warn(f"the LangGraph store could not compact its log {self._path(self._gen)}: {exc.message}")

    def compact(self) -> bytes:
        """Snapshot every live item into a ckpt checkpoint now and start a new log from
        it (what a write does once the log passes `compact_bytes`); returns the
        checkpoint's id. `ckpt show workflow:langgraph-store` then shows every item."""
        with self._mu, self._lock(shared=False):
            self._refresh(writing=True)
            return self._compact(int(self.clock() * _NS))

    def _compact(self, now: int) -> bytes:
        """Snapshot the live items into a ckpt checkpoint and start the next log from it
        (under the exclusive lock, after a refresh)."""
        from ckptcli.writer import take

        namespaces: list[dict[str, Any]] = []
        count = 0
        for ns, recs in self._data.items():
            live = [
                {
                    "key": key,
                    "value": r.value,
                    "created_ns": r.created,
                    "updated_ns": r.updated,
                    "ttl": r.ttl,
                    "expires_ns": r.expires,
                    "seq": r.seq,
                    **({"vectors": r.vectors} if r.vectors else {}),
                }
                for key, r in recs.items()
                if r.live(now)
            ]
            count += len(live)
            if live:
                namespaces.append({"namespace": list(ns), "items": live})
        doc = {"memory": {"langgraph-store": SNAPSHOT_VERSION, "namespaces": namespaces}}
        gen = self._gen + 1
        res = take(
            self.store,
            doc,
            subject=SNAPSHOT_SUBJECT,
            branch=SNAPSHOT_BRANCH,
            labels={"langgraph.store.generation": str(gen)},
            message=f"LangGraph memory store: {count} items",
        )
        self._create_log(gen, res.id)
        old = self._path(self._gen)
        with contextlib.suppress(OSError):
            old.unlink()
        self.compactions += 1
        self._retry_at = 0
        self._open_newest()
        return res.id

    # -- TTL --------------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete the expired items from the log now; returns how many. (They are never
        returned once expired, swept or not; a sweep frees their space.)"""
        with self._mu, self._lock(shared=False):
            self._refresh(writing=True)
            now = int(self.clock() * _NS)
            gone = [[list(ns), key, None, 0, 0, None, None, 0, None] for ns, recs in self._data.items() for key, r in recs.items() if not r.live(now)]
            if gone:
                self._append({"op": "put", "items": gone})
            return len(gone)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items every `sweep_interval_minutes` (default: the TTLConfig's,
        else 5) on a daemon thread, until close or stop_ttl_sweeper."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        self._sweep_stop.clear()

        def loop() -> None:
            while not self._sweep_stop.wait(interval * 60):
                with contextlib.suppress(CkptError):
                    self.sweep_ttl()

        self._sweeper = threading.Thread(target=loop, name="ckpt-langgraph-store-ttl", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True if it is stopped."""
        sweeper = getattr(self, "_sweeper", None)
        if sweeper is None:
            return True
        self._sweep_stop.set()
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)
