"""Checking a store or checkpoint file (`ckpt verify`): find every damaged file and object, and the checkpoints that need it.

Structure (default): config, every index, ref and manifest parses and matches its
checksum or name; every node object a checkpoint reaches is read and hash-checked;
every data object it names is in an index. `read_data`: every pack file is
re-hashed whole and every object in it decompressed and re-hashed, so a flipped
byte anywhere in the store is found and named.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ckptcli.errors import CkptError, CorruptError
from ckptcli.format import framing, limits
from ckptcli.format.manifest import Manifest, is_nested
from ckptcli.format.values import ObjectSource
from ckptcli.format.walk import WalkResult, walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store.backend import LocalBackend
from ckptcli.store.repository import IndexEntry, Store, pack_path, parse_entry_rows
from ckptcli.store.single import CheckpointFile

_U32 = struct.Struct(">I")


class _Source:
    """Reads objects through verify's own (tolerant) index, so one bad index file
    does not stop the rest of the check."""

    def __init__(self, store: Store, index: dict[bytes, IndexEntry]) -> None:
        self.store = store
        self.index = index

    def get(self, oid: bytes) -> bytes:
        entry = self.index.get(oid)
        if entry is None:
            raise CorruptError(f"object {oid.hex()[:12]} is missing (no index names it)")
        stored = self.store.backend.read_range(pack_path(entry.pack), entry.offset, entry.stored_len)
        where = f"object {oid.hex()[:12]} in pack {entry.pack.hex()[:12]}"
        if len(stored) != entry.stored_len:
            raise CorruptError(f"{where}: pack is truncated")
        raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
        if hashlib.sha256(raw).digest() != oid:
            raise CorruptError(f"{where}: content does not match its hash")
        return raw


@dataclass
class PackTable:
    """A whole pack file taken apart through its trailer (formats/v1.md and v2.md, "Pack files")."""

    version: int
    rows: list[list[Any]]  # [id, type, offset, stored_len, raw_len, codec] of each object that decoded
    errors: dict[int, str]  # offset -> what is wrong with the object stored there
    trailer: bytes  # the trailer record, as stored
    header: bytes = b""  # the 12-byte header, as stored (every byte of it, reserved ones too, is in the id)

    def pack_id(self) -> bytes | None:
        """The id this pack should be named by; None for a version-2 pack with a damaged
        object (its id cannot be recovered)."""
        if self.version == 1:
            return None  # the SHA-256 of the whole file: the caller has the bytes
        if self.errors:
            return None
        return framing.pack_id_v2(self.header, [r[0] for r in self.rows], self.trailer)


def read_pack(data: bytes, where: str, name: bytes | None = None) -> PackTable:
    """Take a whole pack apart: every object is checked against the trailer (version 2)
    and decompressed and hashed to recover its id. Structural damage (header, trailer,
    lengths) raises CorruptError; a damaged object is listed in `errors`.

    `name`: the pack's id as its file name gives it. A header version this ckpt does not
    read is then damage unless the name still matches the bytes (a store whose config
    this ckpt reads holds no pack of a newer version; formats/v2.md, "Stores of both
    versions")."""
    if len(data) < framing.HEADER_SIZE + 4:
        raise CorruptError(f"{where}: truncated")
    intact = None if name is None else (lambda: hashlib.sha256(data).digest() == name)
    version = framing.check_header(data, framing.KIND_PACK, where, intact=intact)
    (tlen,) = _U32.unpack_from(data, len(data) - 4)
    start = len(data) - 4 - tlen
    if start < framing.HEADER_SIZE:
        raise CorruptError(f"{where}: trailer length {tlen} does not fit")
    trailer = data[start : len(data) - 4]
    tversion, body = framing.decode_record(trailer, framing.KIND_PACK_TRAILER, f"{where} (trailer)")
    if tversion != version:
        raise CorruptError(f"{where}: a version-{tversion} trailer in a version-{version} pack")
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise CorruptError(f"{where}: trailer has no object list")
    width = 4 if version == 1 else 5
    table = PackTable(version, [], {}, trailer, bytes(data[: framing.HEADER_SIZE]))
    offset = framing.HEADER_SIZE
    for obj in objects:
        if not (isinstance(obj, list) and len(obj) == width and all(type(x) is int and x >= 0 for x in obj)):
            raise CorruptError(f"{where}: malformed trailer entry (version {version} entries have {width} elements)")
        typ, slen, rlen, codec = obj[:4]
        if offset + slen > start:
            raise CorruptError(f"{where}: trailer names more bytes than the pack holds")
        stored = data[offset : offset + slen]
        try:
            if version >= 2 and framing.stored_check(stored) != obj[4]:
                raise CorruptError(f"{where}: the object at offset {offset} does not match its check in the trailer (its stored bytes are damaged)")
            raw = framing.decompress(codec, stored, rlen, limits.MAX_OBJECT_SIZE, f"{where} at offset {offset}")
            table.rows.append([hashlib.sha256(raw).digest(), typ, offset, slen, rlen, codec])
        except CkptError as exc:
            table.errors[offset] = exc.message
        offset += slen
    if offset != start:
        raise CorruptError(f"{where}: {start - offset} bytes between the last object and the trailer")
    return table


def read_pack_table(data: bytes, where: str, name: bytes | None = None) -> list[Any]:
    """The entries of a whole pack file, rebuilt from its trailer: each object is
    decompressed and hashed to recover its id. Returns [[id, type, offset, stored_len,
    raw_len, codec], ...], the rows an index holds; a damaged object is CorruptError."""
    table = read_pack(data, where, name)
    if table.errors:
        raise CorruptError(next(iter(table.errors.values())))
    return table.rows


def verify_store(store: Store, refs: list[str] | None, *, read_data: bool, progress: Progress = NULL) -> Any:
    from ckptcli.api import Problem, VerifyReport

    rep = VerifyReport()
    backend = store.backend

    def problem(kind: str, name: str, message: str) -> Problem:
        p = Problem(kind, name, message)
        rep.problems.append(p)
        return p

    try:
        framing.decode_record(backend.read("config"), framing.KIND_CONFIG, "config")
    except CkptError as exc:
        problem("config", "config", exc.message)

    # indexes (tolerant: a damaged one is reported, its packs are read from their own tables)
    index: dict[bytes, IndexEntry] = {}
    indexed_packs: set[bytes] = set()
    for name in backend.list("index"):
        try:
            for pack_id, rows in store.read_index_file(name):
                for oid, entry in parse_entry_rows(rows, pack_id, name):
                    index.setdefault(oid, entry)
                indexed_packs.add(pack_id)
        except CkptError as exc:
            problem("index", name, exc.message)
    pack_files = {p.rsplit("/", 1)[-1]: p for p in backend.list("packs")}
    unindexed_tables: dict[bytes, list[tuple[bytes, IndexEntry]]] = {}
    for hexname, path in pack_files.items():
        try:
            pid = bytes.fromhex(hexname)
        except ValueError:
            problem("pack", path, "file name is not a pack id")
            continue
        if pid in indexed_packs:
            continue
        try:
            rows = read_pack_table(backend.read(path), path, pid)
            unindexed_tables[pid] = list(parse_entry_rows(rows, pid, path))
        except CkptError as exc:
            problem("pack", path, exc.message)
    for pid, entries in unindexed_tables.items():
        for oid, entry in entries:
            index.setdefault(oid, entry)
        if any(p.kind == "index" for p in rep.problems):
            rep.notes.append(f"pack {pid.hex()[:12]} is named by no readable index; its own table was used")
        else:
            rep.notes.append(f"pack {pid.hex()[:12]} is named by no index (left by an interrupted take; harmless)")
    for pid in indexed_packs:
        if pid.hex() not in pack_files:
            problem("pack", pack_path(pid), "pack named by an index is missing")

    if isinstance(backend, LocalBackend):  # the LangGraph saver's journals beside the store
        from ckptcli.adapters.langgraph.journal import check_journals

        for journal, message in check_journals(backend.root):
            problem("journal", str(journal), message)
        from ckptcli.adapters.langgraph.store_log import check_store_logs, log_dir

        if log_dir(backend.root).is_dir():  # LangGraph's memory store (CkptStore)
            for log, message in check_store_logs(backend.root, set(store.manifest_ids())):
                problem("journal", str(log), message)

    stale = store.stale_temps()
    if stale:
        rep.notes.append(f"{len(stale)} temporary file(s) in tmp/ were left by interrupted takes (harmless; the next take removes them)")

    # refs
    ref_targets: list[tuple[str, bytes]] = []
    for path in backend.list("refs"):
        try:
            t = store.read_ref(path)
            if t is not None:
                ref_targets.append((path, t))
        except CkptError as exc:
            problem("ref", path, exc.message)

    # the reflog (formats/reflog.md): every entry carries a checksum
    from ckptcli.store import reflog

    for path in backend.list(reflog.LOG_ROOT):
        try:
            _entries, bad_lines, torn = reflog.check(backend.read(path))
        except CkptError as exc:
            problem("reflog", path, exc.message)
            continue
        if bad_lines:
            more = f" (and {len(bad_lines) - 1} more)" if len(bad_lines) > 1 else ""
            problem("reflog", path, f"reflog entry on line {bad_lines[0]}{more} is damaged (its checksum, its syntax or a value out of range); `ckpt reflog` skips it")
        if torn:
            rep.notes.append(f"{path}: the last reflog entry was cut short by a crash (harmless: skipped, and removed by the ref's next move)")

    # manifests
    if refs is None:
        ids = store.manifest_ids()
    else:
        ids = [store.resolve(r) for r in refs]
    manifests: dict[bytes, Manifest] = {}
    for cid in ids:
        name = f"manifests/{cid.hex()}"
        try:
            data = backend.read(name)
            if hashlib.sha256(data).digest() != cid:
                raise CorruptError(f"{name}: content does not match its name (the manifest is damaged)")
            manifests[cid] = Manifest.decode(data, name)
        except CkptError as exc:
            problem("manifest", name, exc.message).checkpoints.append(cid.hex())
    all_ids = set(store.manifest_ids())
    for path, t in ref_targets:
        if t not in all_ids:
            problem("ref", path, f"points to checkpoint {t.hex()[:12]}, which does not exist")

    if refs is None:  # dangling heads: a take killed between its manifest and its ref
        from ckptcli.store.repair import dangling_heads

        latest = {m.subject: t for path, t in ref_targets if (m := manifests.get(t)) and path == store.latest_ref(m.subject)}
        moved_ns = {s: when for s in latest if (when := store.last_moved_ns(store.latest_ref(s))) is not None}
        for cid, subject, head in dangling_heads(manifests, latest, moved_ns):
            if head is not None and is_nested(manifests[head].labels) and not is_nested(manifests[cid].labels):
                rep.notes.append(
                    f"the latest ref of {subject} names {head.hex()[:12]}, a LangGraph subgraph's checkpoint, not the thread's root head "
                    f"{cid.hex()[:12]} (as an earlier ckpt wrote it; harmless: the saver's next commit moves it; `ckpt repair refs` moves it now)"
                )
                continue
            behind = f"its latest ref names {head.hex()[:12]}" if head else "it has no latest ref"
            rep.notes.append(
                f"checkpoint {cid.hex()[:12]} of {subject} is newer than its latest and not in its history ({behind}): "
                "a take was interrupted before moving the ref (harmless: the next take continues from it; `ckpt repair refs` moves latest)"
            )

    # objects reachable from each checkpoint
    src = _Source(store, index)
    walked = WalkResult()
    progress.start("checking structure", len(manifests))
    for cid, m in manifests.items():
        try:
            walk_checkpoint(src, m, result=walked, on_error=lambda *_: None)
        except CkptError as exc:
            problem("manifest", f"manifests/{cid.hex()}", exc.message).checkpoints.append(cid.hex())
        progress.advance(1)
    progress.finish()
    rep.checkpoints = len(manifests)
    rep.objects = len(walked.objects)
    bad = _structure_problems(walked, index, "no index names it")

    if read_data:
        total = sum(backend.size(p) for p in pack_files.values())
        progress.start("reading data", total)
        by_pack: dict[bytes, list[tuple[bytes, IndexEntry]]] = defaultdict(list)
        for oid, entry in index.items():
            by_pack[entry.pack].append((oid, entry))
        # Packs are checked on a thread pool (hashlib and zstandard release the GIL),
        # at most two packs in memory per worker; results are merged here, in order.
        from concurrent.futures import ThreadPoolExecutor

        def check_pack(hexname: str, path: str) -> tuple[str, str, int, str | None, dict[bytes, str]]:
            try:
                data = backend.read(path)
            except CkptError as exc:
                return hexname, path, 0, exc.message, {}
            damaged = None
            found: dict[bytes, str] = {}
            entries = by_pack.get(bytes.fromhex(hexname), [])
            is_v2 = data[:8] == framing.MAGIC_PREFIX + framing.KIND_PACK and int.from_bytes(data[8:10], "big") >= 2
            if is_v2:
                # version 2: the id covers header, object ids and trailer; the trailer's
                # checks cover the stored bytes (formats/v2.md, "Verification")
                try:
                    table = read_pack(data, path, bytes.fromhex(hexname))
                except CkptError as exc:
                    damaged = exc.message
                else:
                    if table.errors:
                        damaged = f"{len(table.errors)} damaged object(s); first: {next(iter(table.errors.values()))}"
                    elif (table.pack_id() or b"").hex() != hexname:
                        damaged = "content does not match its name (its header, trailer or an object is damaged)"
                    rows = {r[2]: r for r in table.rows}
                    for oid, entry in entries:
                        row = rows.get(entry.offset)
                        if entry.offset in table.errors:
                            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: {table.errors[entry.offset]}"
                        elif row is None or row[3] != entry.stored_len or row[5] != entry.codec or row[4] != entry.raw_len:
                            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: the index entry does not match the pack's trailer"
                        elif row[0] != oid:
                            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: content does not match its hash"
                    return hexname, path, len(data), damaged, found
            elif hashlib.sha256(data).hexdigest() != hexname:
                damaged = "content does not match its name (some byte of the pack is damaged)"
                pid = bytes.fromhex(hexname)
                for check in (lambda: read_pack_table(data, path, pid), lambda: framing.check_header(data, framing.KIND_PACK, path, intact=lambda: False)):
                    try:
                        check()
                    except CkptError as exc:
                        damaged += f"; {exc.message}"
            for oid, entry in entries:
                stored = data[entry.offset : entry.offset + entry.stored_len]
                where = f"object {oid.hex()[:12]} in pack {hexname[:12]}"
                try:
                    if len(stored) != entry.stored_len:
                        raise CorruptError(f"{where}: pack is truncated")
                    raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
                    if hashlib.sha256(raw).digest() != oid:
                        raise CorruptError(f"{where}: content does not match its hash")
                except CkptError as exc:
                    found[oid] = exc.message
            return hexname, path, len(data), damaged, found

        workers = min(4, os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-verify") as pool:
            for hexname, path, nbytes, damaged, found in pool.map(lambda item: check_pack(*item), pack_files.items()):
                rep.bytes_read += nbytes
                if damaged is not None and nbytes == 0:
                    problem("pack", path, damaged)
                elif damaged is not None:
                    p = problem("pack", path, damaged)
                    affected = {oid for oid, _e in by_pack.get(bytes.fromhex(hexname), [])}
                    p.checkpoints = _checkpoints_needing(src, manifests, affected)
                for oid, msg in found.items():
                    bad.setdefault(oid, msg)
                progress.advance(nbytes)
        progress.finish()

    if bad:
        needing = _checkpoints_per_object(src, manifests, set(bad))
        for oid, msg in sorted(bad.items()):
            p = problem("object", oid.hex(), msg)
            p.checkpoints = sorted(needing.get(oid, []))
    return rep


def _structure_problems(walked: WalkResult, entries: dict[bytes, IndexEntry], missing: str) -> dict[bytes, str]:
    """What the walk found wrong, and what it implies against the table of where objects
    are (a store's index or a file's object table): an object missing from it, or a data
    object whose size differs from what its tree node says. One function for stores and
    files, so that a file passes verify exactly when the store it is imported into would."""
    bad = {oid: msg for oid, (_s, msg) in walked.errors.items()}
    for oid in walked.objects:
        if oid in bad:
            continue
        entry = entries.get(oid)
        if entry is None:
            bad[oid] = f"object {oid.hex()[:12]} is missing ({missing})"
        elif oid in walked.data_sizes and entry.raw_len != walked.data_sizes[oid]:
            bad[oid] = f"object {oid.hex()[:12]} holds {entry.raw_len} bytes, its tree node says {walked.data_sizes[oid]}"
    return bad


def _checkpoints_per_object(src: ObjectSource, manifests: dict[bytes, Manifest], targets: set[bytes]) -> dict[bytes, list[str]]:
    out: dict[bytes, list[str]] = defaultdict(list)
    cache = _CachingSource(src)
    for cid, m in manifests.items():
        res = walk_checkpoint(cache, m, on_error=lambda *_: None)
        for oid in targets & set(res.objects):
            out[oid].append(cid.hex())
    return out


def _checkpoints_needing(src: ObjectSource, manifests: dict[bytes, Manifest], objs: set[bytes]) -> list[str]:
    per = _checkpoints_per_object(src, manifests, objs)
    return sorted({c for cs in per.values() for c in cs})


class _CachingSource:
    def __init__(self, src: ObjectSource) -> None:
        self.src = src
        self.cache: dict[bytes, bytes] = {}

    def get(self, oid: bytes) -> bytes:
        v = self.cache.get(oid)
        if v is None:
            v = self.src.get(oid)
            self.cache[oid] = v
        return v


def verify_file(f: CheckpointFile, *, read_data: bool, progress: Progress = NULL) -> Any:
    from ckptcli.api import Problem, VerifyReport

    rep = VerifyReport(checkpoints=1)
    msg = f.check_whole_file()
    if msg:
        rep.problems.append(Problem("file", str(f.path), msg, [f.id.hex()]))
    res = walk_checkpoint(f, f.manifest(), on_error=lambda *_: None)
    rep.objects = len(res.objects)
    bad = _structure_problems(res, f.entries, "the file does not hold it")
    if read_data:
        progress.start("reading data", len(f.entries))
        for oid in f.entries:
            try:
                rep.bytes_read += len(f.get(oid))
            except CkptError as exc:
                bad.setdefault(oid, exc.message)
            progress.advance(1)
        progress.finish()
    for oid, m in sorted(bad.items()):
        rep.problems.append(Problem("object", oid.hex(), m, [f.id.hex()]))
    return rep
