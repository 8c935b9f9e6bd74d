"""Checking a store or checkpoint file (`ckpt verify`): find every damaged file and object, and the checkpoints that need it.

`verify_store` runs the phases in order, each adding to one `VerifyReport`:
index (every index file), packs (packs no index names, indexed packs missing),
refs (refs, the reflog, the files adapters keep beside the store), manifests (each
parses and matches its name; dangling heads), structure (every node object a
checkpoint reaches is read and hash-checked, every data object it names is indexed)
and, with `read_data`, read-data (every pack re-hashed whole, every object in it
decompressed and re-hashed, so a flipped byte anywhere is found and named).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli import plugins
from ckptcli.errors import CkptError, CorruptError, LimitExceededError, UnsupportedVersionError
from ckptcli.format import framing, limits
from ckptcli.format.ev import _pool, _workers
from ckptcli.format.manifest import Manifest, is_nested
from ckptcli.format.values import OBJ_NODE, ObjectSource
from ckptcli.format.walk import WalkResult, walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout, reflog
from ckptcli.store.backend import LocalBackend, too_large
from ckptcli.store.index import IndexEntry, decode_index, parse_entry_rows
from ckptcli.store.layout import manifest_path, pack_path, versioned_cap
from ckptcli.store.pack import PackTable as PackTable
from ckptcli.store.pack import check_pack_at, check_pack_data, read_pack_table
from ckptcli.store.pack import read_pack as read_pack
from ckptcli.store.repair import dangling_heads
from ckptcli.store.repository import DAMAGED_MANIFEST_HINT, Store
from ckptcli.store.single import CheckpointFile

__all__ = ["PHASES", "Problem", "StoreChecker", "VerifyReport", "structure_problems", "verify_file", "verify_store"]

#: a check of an adapter's files beside a store (entry-point group `ckptcli.beside_store`):
#: (store directory, the store's checkpoint ids when asked) -> [(kind, path, message)]
BesideCheck = Callable[[Path, Callable[[], Collection[bytes]]], Iterable[tuple[str, Path, str]]]

PHASES = ("index", "packs", "refs", "manifests", "structure", "read-data")


@dataclass
class Problem:
    kind: str  # pack, index, manifest, ref, reflog, config, object, file, link, special, journal (a LangGraph saver's)
    name: str  # file path or object id
    message: str
    checkpoints: list[str] = field(default_factory=list)
    #: not damage: a file a newer ckpt wrote, in a format version this one does not read
    newer_version: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "message": self.message,
            "checkpoints": self.checkpoints,
            "newer_version": self.newer_version,
        }


@dataclass
class VerifyReport:
    checkpoints: int = 0
    objects: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def only_newer(self) -> bool:
        """Whether every problem is a file of a newer format (exit 6, not damage: exit 5)."""
        return bool(self.problems) and all(p.newer_version for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checkpoints": self.checkpoints,
            "objects": self.objects,
            "bytes_read": self.bytes_read,
            "problems": [p.to_dict() for p in self.problems],
            "notes": self.notes,
        }


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


def verify_store(store: Store, refs: list[str] | None, *, read_data: bool, progress: Progress = NULL) -> VerifyReport:
    """`ckpt verify` of a store: every checkpoint (those `refs` name, when given), phase
    by phase (`PHASES`; read-data only with `read_data`)."""
    check = StoreChecker(store)
    check.config()
    check.index()
    check.packs()
    check.refs()
    check.manifests(refs)
    check.structure(progress)
    if read_data:
        check.read_data(progress)
    check.links()
    return check.finish()


class StoreChecker:
    """The state the phases of `verify_store` share: what the indexes say (read
    tolerantly), which pack files there are, which refs and manifests could be read,
    and which objects are bad so far (object id -> what is wrong)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.backend = store.backend
        self.rep = VerifyReport()
        self.entries: dict[bytes, IndexEntry] = {}
        self.indexed_packs: set[bytes] = set()
        self.pack_files: dict[str, str] = {}  # hex name -> path
        self.ref_targets: list[tuple[str, bytes]] = []
        self.decoded: dict[bytes, Manifest] = {}
        self.src = _Source(store, self.entries)
        self.bad: dict[bytes, str] = {}
        self.wrong_length: set[bytes] = set()  # those of `bad` a node names with another length

    def problem(self, kind: str, name: str, message: str) -> Problem:
        p = Problem(kind, name, message)
        self.rep.problems.append(p)
        return p

    def _stored_copy(self, path: str) -> bytes:
        """An index file or a manifest as the store holds it: never the local cache's copy
        of a remote store's (that one is right by its name, whatever the bucket holds).
        Raises: as Backend.read; CorruptError (an index file that does not match its name,
        said with `_cached`)."""
        data = self.backend.read_stored_copy(path)
        if path.startswith(layout.INDEX + "/") and hashlib.sha256(data).hexdigest() != path.rsplit("/", 1)[-1]:
            raise CorruptError(f"{path}: content does not match its name (the index file is damaged){self._cached(path)}")
        return data

    def _cached(self, path: str) -> str:
        """What to add to the report of a damaged file whose good copy this host's cache holds."""
        if self.backend.cached_copy(path) is None:
            return ""
        return (
            "; this host's object cache (CKPT_CACHE_DIR) holds a good copy, which readers here read instead, "
            "so only other hosts (or an emptied cache) see the damage"
        )

    def config(self) -> None:
        try:
            framing.decode_record(self.backend.read(layout.CONFIG), framing.KIND_CONFIG, layout.CONFIG)
        except CkptError as exc:
            self.problem("config", layout.CONFIG, exc.message)

    def index(self) -> None:
        """Every index file (tolerant: a damaged one is reported, its packs are read from their own tables)."""
        for name in self.backend.list(layout.INDEX):
            try:
                for pack_id, rows in decode_index(self._stored_copy(name), name):
                    for oid, entry in parse_entry_rows(rows, pack_id, name):
                        self.entries.setdefault(oid, entry)
                    self.indexed_packs.add(pack_id)
            except CkptError as exc:
                self.problem("index", name, exc.message)

    def packs(self) -> None:
        """Packs no index names (read through their own tables), and indexed packs that are missing."""
        self.pack_files = {}
        for p in self.backend.list(layout.PACKS):
            name = p.rsplit("/", 1)[-1]
            if p != f"{layout.PACKS}/{name[:2]}/{name}":  # never read: a pack ckpt wrote is not there
                self.problem(
                    "pack",
                    p,
                    f"not where ckpt keeps a pack ({layout.PACKS}/<first 2 hex digits>/<pack id>); ckpt wrote no such file: remove it",
                )
                continue
            self.pack_files[name] = p
        unindexed_tables: dict[bytes, list[tuple[bytes, IndexEntry]]] = {}
        for hexname, path in self.pack_files.items():
            try:
                pid = bytes.fromhex(hexname)
            except ValueError:
                self.problem("pack", path, "file name is not a pack id")
                continue
            if pid in self.indexed_packs:
                continue
            try:
                rows = read_pack_table(self.backend.read(path), path, pid)
                unindexed_tables[pid] = list(parse_entry_rows(rows, pid, path))
            except CkptError as exc:
                self.problem("pack", path, exc.message)
        index_damaged = any(p.kind == "index" for p in self.rep.problems)
        for pid, entries in unindexed_tables.items():
            for oid, entry in entries:
                self.entries.setdefault(oid, entry)
            if index_damaged:
                self.rep.notes.append(f"pack {pid.hex()[:12]} is named by no readable index; its own table was used")
            else:
                self.rep.notes.append(f"pack {pid.hex()[:12]} is named by no index (left by an interrupted take; harmless)")
        for pid in self.indexed_packs:
            if pid.hex() not in self.pack_files:
                self.problem("pack", pack_path(pid), "pack named by an index is missing")

    def refs(self) -> None:
        """The files adapters keep beside the store, temp files, refs and the reflog."""
        self._beside()
        stale = self.store.stale_temps()
        if stale:
            self.rep.notes.append(
                f"{len(stale)} temporary file(s) in tmp/ were left by interrupted takes (harmless; the next take removes them)"
            )
        for path in self.backend.list(layout.REFS):
            try:
                t = self.store.read_ref(path)
                if t is not None:
                    self.ref_targets.append((path, t))
            except UnsupportedVersionError as exc:
                self.problem("ref", path, str(exc)).newer_version = True
            except CkptError as exc:
                self.problem("ref", path, str(exc))  # with its hint: what to do about it
        self._reflog()

    def _beside(self) -> None:
        """The adapters' files beside a local store (entry-point group `ckptcli.beside_store`):
        the LangGraph saver's journals, its memory store's logs."""
        if not isinstance(self.backend, LocalBackend):
            return
        hooks: list[tuple[str, BesideCheck]] = plugins.load(plugins.BESIDE_STORE)
        for _name, hook in hooks:
            for kind, path, message in hook(self.backend.root, self.store.manifest_ids):
                self.problem(kind, str(path), message)

    def _reflog(self) -> None:
        """The reflog (formats/reflog.md): every entry carries a checksum."""
        for path in self.backend.list(layout.LOGS):
            try:
                _entries, bad_lines, torn = reflog.check(self.backend.read(path))
            except CkptError as exc:
                self.problem("reflog", path, str(exc))  # with its hint: what to do about it
                continue
            if bad_lines:
                more = f" (and {len(bad_lines) - 1} more)" if len(bad_lines) > 1 else ""
                self.problem(
                    "reflog",
                    path,
                    f"reflog entry on line {bad_lines[0]}{more} is damaged (its checksum, "
                    "its syntax or a value out of range); `ckpt reflog` skips it",
                )
            if torn:
                self.rep.notes.append(
                    f"{path}: the last reflog entry was cut short by a crash "
                    "(harmless: skipped, and removed when the next entry is recorded in this reflog)"
                )

    def manifests(self, refs: list[str] | None) -> None:
        """Every manifest (those `refs` name, when given) parses and matches its name;
        refs point at checkpoints that exist; dangling heads (all manifests only)."""
        ids = self.store.manifest_ids() if refs is None else [self.store.resolve(r) for r in refs]
        for cid in ids:
            name = manifest_path(cid)
            try:
                data = self._stored_copy(name)
                if hashlib.sha256(data).digest() != cid:
                    raise CorruptError(f"{name}: content does not match its name (the manifest is damaged){self._cached(name)}")
                self.decoded[cid] = Manifest.decode(data, name)
            except (CorruptError, LimitExceededError) as exc:
                self.problem("manifest", name, f"{exc.message}; {DAMAGED_MANIFEST_HINT}").checkpoints.append(cid.hex())
            except CkptError as exc:
                p = self.problem("manifest", name, str(exc))  # with its hint: what to do about it
                p.checkpoints.append(cid.hex())
                p.newer_version = isinstance(exc, UnsupportedVersionError)
        all_ids = set(self.store.manifest_ids())
        for path, t in self.ref_targets:
            if t not in all_ids:
                self.problem("ref", path, f"points to checkpoint {t.hex()[:12]}, which does not exist")
        if refs is None:
            self._dangling_heads()

    def _dangling_heads(self) -> None:
        """A take killed between its manifest and its ref: a note, not a problem."""
        store, manifests = self.store, self.decoded
        latest = {m.subject: t for path, t in self.ref_targets if (m := manifests.get(t)) and path == store.latest_ref(m.subject)}
        moved_ns = {s: when for s in latest if (when := store.last_moved_ns(store.latest_ref(s), quiet=True)) is not None}
        newer = {p.name for p in self.rep.problems if p.kind == "ref" and p.newer_version}
        for cid, subject, head in dangling_heads(manifests, latest, moved_ns):
            if store.latest_ref(subject) in newer:
                continue  # its latest is a newer ckpt's (named above): not a take cut short
            if head is not None and is_nested(manifests[head].labels) and not is_nested(manifests[cid].labels):
                self.rep.notes.append(
                    f"the latest ref of {subject} names {head.hex()[:12]}, a LangGraph subgraph's checkpoint, not the thread's root head "
                    f"{cid.hex()[:12]} (as an earlier ckpt wrote it; harmless: the saver's next commit moves it; "
                    "`ckpt repair refs` moves it now)"
                )
                continue
            behind = f"its latest ref names {head.hex()[:12]}" if head else "it has no latest ref"
            self.rep.notes.append(
                f"checkpoint {cid.hex()[:12]} of {subject} is newer than its latest and not in its history ({behind}): "
                "a take was interrupted before moving the ref (harmless: the next take continues from it; `ckpt repair refs` moves latest)"
            )

    def structure(self, progress: Progress) -> None:
        """Objects reachable from each checkpoint: node objects read and hash-checked, data objects indexed."""
        walked = WalkResult()
        if self.backend.fetch_threads:  # object storage: the blocks holding nodes, fetched ahead, several at once
            for entry in self.entries.values():
                if entry.obj_type == OBJ_NODE:
                    self.backend.prefetch(pack_path(entry.pack), entry.offset, entry.stored_len)
        progress.start("checking structure", len(self.decoded))
        for cid, m in self.decoded.items():
            try:
                walk_checkpoint(self.src, m, result=walked, on_error=lambda *_: None)
            except CkptError as exc:
                self.problem("manifest", manifest_path(cid), exc.message).checkpoints.append(cid.hex())
            progress.advance(1)
        progress.finish()
        self.rep.checkpoints = len(self.decoded)
        self.rep.objects = len(walked.objects)
        self.bad, self.wrong_length = structure_problems(walked, self.entries, "no index names it")

    def _size_or_0(self, path: str) -> int:
        """A pack's size for the progress bar; 0 for one that cannot be sized (a link, gone):
        its read then says what is wrong, as a damaged pack."""
        try:
            return self.backend.size(path)
        except CkptError:
            return 0

    def read_data(self, progress: Progress) -> None:
        """Every byte of every pack read and checked (`pack.check_pack_data`; on a local
        disk `pack.check_pack_at`, which reads a version-2 pack piecewise). Packs are
        checked on a thread pool (hashlib and zstandard release the GIL), each held
        whole by its worker on object storage, none held whole on a local disk; results
        are merged here, in order."""
        total = sum(self._size_or_0(p) for p in self.pack_files.values())
        progress.start("reading data", total)
        by_pack: dict[bytes, list[tuple[bytes, IndexEntry]]] = defaultdict(list)
        for oid, entry in self.entries.items():
            by_pack[entry.pack].append((oid, entry))

        def check_pack(hexname: str, path: str) -> tuple[str, str, int, str | None, dict[bytes, str]]:
            entries = by_pack.get(bytes.fromhex(hexname), [])
            try:
                if local is not None:
                    return hexname, path, *_check_local_pack(local, path, hexname, entries, chunk_pool)
                data = self.backend.read_view(path)
            except CkptError as exc:
                return hexname, path, 0, exc.message, {}
            damaged, found = check_pack_data(data, hexname, path, entries, chunk_pool)
            return hexname, path, len(data), damaged, found

        # Packs are read on `workers` threads; the objects of each are checked on the chunk
        # pool a slice at a time, so the last pack alone still keeps every core busy. On a
        # local disk the slices read their own bytes (`pack.check_pack_at`), so a pack is
        # never held whole and each byte is checked straight after it is read.
        chunk_pool = _pool() if _workers() > 1 else None
        local = self.backend if isinstance(self.backend, LocalBackend) else None
        workers = max(min(4, os.cpu_count() or 1), self.backend.fetch_threads)  # packs read at once
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-verify") as pool:
            for hexname, path, nbytes, damaged, found in pool.map(lambda item: check_pack(*item), self.pack_files.items()):
                self.rep.bytes_read += nbytes
                if damaged is not None and nbytes == 0:
                    self.problem("pack", path, damaged)
                elif damaged is not None:
                    p = self.problem("pack", path, damaged)
                    affected = {oid for oid, _e in by_pack.get(bytes.fromhex(hexname), [])}
                    p.checkpoints = _checkpoints_needing(self.src, self.decoded, affected)
                for oid, msg in found.items():
                    if oid in self.wrong_length:  # damaged too: every checkpoint that needs it is hurt
                        self.wrong_length.discard(oid)
                        self.bad[oid] = msg
                    self.bad.setdefault(oid, msg)
                progress.advance(nbytes)
        progress.finish()

    def links(self) -> None:
        """Every symbolic link, FIFO, socket or device in a local store's tree, one line
        each: ckpt makes none and reads or writes through none, and one it met already (a
        linked manifest, pack, ref or reflog, a FIFO for a manifest) is not named twice.
        Those under tmp/ are harmless (a note); the others (a linked lock file,
        cache/heads, a FIFO for a workflow's journal...) stop the commands that meet them
        (a problem of kind `link`, or `special` for the others)."""
        if not isinstance(self.backend, LocalBackend):
            return
        named = {p.name for p in self.rep.problems}
        for path, what in self.backend.planted_files():
            at = os.path.join(self.backend.root, path)
            if path in named or at in named:  # named already (a hook's check names its files by their full path)
                continue
            linked = what == "a symbolic link"
            if path.startswith(f"{layout.TMP}/"):
                never = "never followed; prune removes it" if linked else "never read or written through"
                self.rep.notes.append(f"{path} is {what} ckpt did not make (harmless: {never}): rm {at}")
            elif linked:
                self.problem("link", path, f"{at} is a symbolic link ckpt did not make and never follows; {self.backend.link_hint(path)}")
            else:
                self.problem(
                    "special",
                    path,
                    f"{at} is {what} ckpt did not make and never reads or writes through (the commands that meet it are "
                    f"refused); remove it (rm {at})",
                )

    def finish(self) -> VerifyReport:
        """The report, with a problem for each bad object naming the checkpoints that need
        it, and one for each key the listings skipped (a store on object storage: a key
        that cannot be a store object, put there by something else)."""
        sweep = getattr(self.backend, "sweep", None)
        for key, problem in (sweep() if sweep is not None else {}).items():
            self.problem("key", key, f"not a store path ({problem}), skipped by every command; ckpt wrote no such key: remove it")
        if self.bad:
            lengths = {oid: self.entries[oid].raw_len for oid in self.wrong_length}
            needing = _checkpoints_per_object(self.src, self.decoded, set(self.bad), lengths)
            for oid, msg in sorted(self.bad.items()):
                p = self.problem("object", oid.hex(), msg)
                p.checkpoints = sorted(needing.get(oid, []))
        return self.rep


def _check_local_pack(
    backend: LocalBackend, path: str, hexname: str, entries: list[tuple[bytes, IndexEntry]], pool: ThreadPoolExecutor | None
) -> tuple[int, str | None, dict[bytes, str]]:
    """(bytes checked, what is wrong with the pack, object id -> what is wrong with it) of
    a pack on a local disk, read piecewise. A pack larger than ckpt writes is refused
    before a byte of it is read, as `Backend.read` refuses it."""
    size = backend.size(path)
    cap = versioned_cap(path)
    if cap is not None and size > cap:
        raise too_large(str(backend.root / path), cap, path)

    def read(offset: int, length: int) -> bytes:
        return backend.read_range(path, offset, length)

    damaged, found = check_pack_at(read, size, hexname, path, entries, pool)
    return size, damaged, found


def structure_problems(walked: WalkResult, entries: dict[bytes, IndexEntry], missing: str) -> tuple[dict[bytes, str], set[bytes]]:
    """What the walk found wrong, and what it implies against the table of where objects
    are (a store's index or a file's object table): an object missing from it, or a data
    object whose size differs from what a tree node says (every node that names it, not
    only one). One function for stores and files, so that a file passes verify exactly
    when the store it is imported into would (and `ckpt copy` checks each checkpoint with
    it). Returns (object id -> what is wrong, the ids whose only fault is a node's length)."""
    bad = {oid: msg for oid, (_s, msg) in walked.errors.items()}
    wrong_length: set[bytes] = set()
    for oid in walked.objects:
        if oid in bad:
            continue
        entry = entries.get(oid)
        if entry is None:
            bad[oid] = f"object {oid.hex()[:12]} is missing ({missing})"
            continue
        named = walked.data_sizes.get(oid)
        if named is None or (named == entry.raw_len and oid not in walked.other_sizes):
            continue  # a node, or a chunk every node names with its length (no set built: the common case)
        # a node names it with another length than raw_len, or two nodes disagree (so one does)
        bad[oid] = _wrong_length(oid, entry.raw_len, sorted(s for s in walked.sizes_named(oid) if s != entry.raw_len))
        wrong_length.add(oid)
    return bad, wrong_length


def _wrong_length(oid: bytes, raw_len: int, wrong: list[int]) -> str:
    """A data object some tree node names with another length than it has (the node was
    written wrong; the object itself may be sound). The length is the table's (index or
    file), which --read-data confirms by decompressing the object to exactly that many bytes."""
    says = " and ".join(str(s) for s in wrong)
    return (
        f"object {oid.hex()[:12]} holds {raw_len} bytes, its tree node says {says}: a checkpoint with that node "
        "cannot be restored (the node was written wrong; the data may be sound); restore another checkpoint, or take "
        "the state again with `ckpt take --force-read` (a take reuses the tree of a file unchanged since its parent)"
    )


def _checkpoints_per_object(
    src: ObjectSource, manifests: dict[bytes, Manifest], targets: set[bytes], lengths: dict[bytes, int] | None = None
) -> dict[bytes, list[str]]:
    """The checkpoints that reach each of `targets`; for an object in `lengths` (one some
    node names with another length than it has), only those whose nodes name it so."""
    out: dict[bytes, list[str]] = defaultdict(list)
    cache = _CachingSource(src)
    lengths = lengths or {}
    for cid, m in manifests.items():
        res = walk_checkpoint(cache, m, on_error=lambda *_: None)
        for oid in targets & set(res.objects):
            if oid in lengths and res.sizes_named(oid) <= {lengths[oid]}:
                continue  # its nodes say the right length: this checkpoint restores
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


def verify_file(f: CheckpointFile, *, read_data: bool, progress: Progress = NULL) -> VerifyReport:
    """`ckpt verify` of a checkpoint file: its checksum, its structure, and with
    `read_data` every object it holds decompressed and hash-checked."""
    rep = VerifyReport(checkpoints=1)
    msg = f.check_whole_file()
    if msg:
        rep.problems.append(Problem("file", str(f.path), msg, [f.id.hex()]))
    res = walk_checkpoint(f, f.manifest(), on_error=lambda *_: None)
    rep.objects = len(res.objects)
    bad, _lengths = structure_problems(res, f.entries, "the file does not hold it")
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
