"""A store: packs of immutable objects, their indexes, manifests and refs.

Layout (formats/v1.md "Store layout")::

    config                      store version, id, chunker parameters
    packs/<2 hex>/<64 hex>      objects, back to back, with their table at the end
    index/<64 hex>              which pack holds which object (one file per take)
    manifests/<64 hex>          one per checkpoint; the name is the checkpoint id
    refs/latest/<kind>/<name>   newest checkpoint of a subject (its newest not nested: head_order)
    refs/branches/<name>        a movable line of history
    refs/tags/<name>            a fixed name for one checkpoint
    locks/  tmp/                local coordination and in-flight writes

Order of writes in one take: packs, then the index that names them, then the
manifest (the commit point), then refs. Every file is written to tmp/, fsynced and
renamed, so a crash at any instant leaves the store readable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptcli import notices
from ckptcli.errors import (
    CkptError,
    ConflictError,
    CorruptError,
    InvalidInputError,
    LatestMovedError,
    NotFoundError,
    StoreIOError,
    StoreNotFoundError,
)
from ckptcli.format import framing, limits
from ckptcli.format.manifest import NAME_RE, Manifest, Subject, check_name, head_order
from ckptcli.store import layout, reflog
from ckptcli.store.backend import Backend, LocalBackend
from ckptcli.store.index import IndexEntry, ObjectIndex, parse_entry_rows, read_index_file, write_index
from ckptcli.store.layout import STORE_DIRNAME as STORE_DIRNAME
from ckptcli.store.layout import pack_path as pack_path
from ckptcli.store.pack import PackWriter, read_pack

PACK_TARGET_SIZE = 64 * 1024 * 1024
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class StoreConfig:
    version: int
    store_id: bytes
    created_ns: int
    cdc: tuple[int, int, int]

    def to_body(self) -> dict[str, Any]:
        mn, avg, mx = self.cdc
        return {
            "version": self.version,
            "id": self.store_id,
            "created": self.created_ns,
            "chunker": {"algorithm": "fastcdc", "min": mn, "avg": avg, "max": mx},
        }

    def encode(self) -> bytes:
        return framing.encode_record(framing.KIND_CONFIG, self.to_body(), self.version)


class Transaction:
    """An ObjectSink that writes new objects into packs; `commit` writes their index.

    Objects the store already has are skipped (that is the deduplication).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        store.refresh_index()  # callers hold the store lock: what is indexed now stays until commit
        self.known = store.index()
        self.new: dict[bytes, int] = {}
        self.pack: PackWriter | None = None
        self.packs: list[Callable[[], tuple[bytes, list[list[Any]]]]] = []
        self.new_objects = 0
        self.new_stored_bytes = 0

    def has(self, oid: bytes) -> bool:
        return oid in self.known or oid in self.new

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        if oid in self.known or oid in self.new:
            return
        if len(content) > limits.MAX_OBJECT_SIZE:  # pragma: no cover - the encoder keeps objects smaller
            raise CkptError(f"object of {len(content)} bytes exceeds the format limit")
        codec, stored = framing.compress(content)
        self.put_stored(oid, obj_type, codec, stored, len(content))

    def put_stored(self, oid: bytes, obj_type: int, codec: int, stored: bytes | memoryview, raw_len: int) -> None:
        if oid in self.known or oid in self.new:
            return
        if self.pack is None:
            self.pack = PackWriter(self.store.backend, self.store.version)
        self.pack.add(oid, obj_type, codec, stored, raw_len)
        self.new[oid] = obj_type
        self.new_objects += 1
        self.new_stored_bytes += len(stored)
        if self.pack.size >= PACK_TARGET_SIZE:
            self.packs.append(self.pack.finish())
            self.pack = None

    def commit(self) -> bytes | None:
        """Finish packs and write their index; returns the index id (None if nothing new)."""
        if self.pack is not None:
            self.packs.append(self.pack.finish())
            self.pack = None
        if not self.packs:
            return None
        packs = [wait() for wait in self.packs]
        self.packs = []
        name = write_index(self.store.backend, packs, self.store.version)
        self.store._merge_index(packs, name)
        return bytes.fromhex(name.rsplit("/", 1)[-1])

    def abort(self) -> None:
        if self.pack is not None:
            self.pack.abort()
            self.pack = None
        for wait in self.packs:  # let finished packs land (unindexed, so unreferenced) before returning
            with contextlib.suppress(Exception):
                wait()
        self.packs = []


def find_store(start: Path | None = None) -> Path:
    """The store for this directory: CKPT_STORE, else the nearest .ckpt/ above cwd, or
    the nearest directory above cwd (cwd itself too) that is a store, whatever its name
    (as `CkptSaver.open("dir")` and `ckpt init dir` make them)."""
    env = os.environ.get("CKPT_STORE")
    if env:
        return resolve_store_path(Path(env))
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        cand = d / STORE_DIRNAME
        if (cand / layout.CONFIG).is_file():
            return cand
        if (d / layout.CONFIG).is_file() and (d / layout.MANIFESTS).is_dir():
            return d
    raise StoreNotFoundError(
        f"no ckpt store in {here} or any parent directory",
        hint="run `ckpt init` here, or pass --store PATH (or set CKPT_STORE)",
    )


def resolve_store_path(path: Path) -> Path:
    if (path / layout.CONFIG).is_file():
        return path
    if (path / STORE_DIRNAME / layout.CONFIG).is_file():
        return path / STORE_DIRNAME
    raise StoreNotFoundError(f"{path} is not a ckpt store", hint="run `ckpt init` to create one, or check --store / CKPT_STORE")


def read_config(backend: Backend, where: str) -> StoreConfig:
    """The store config (formats/v1.md, "Config and refs")."""
    try:
        data = backend.read(layout.CONFIG)
    except NotFoundError:
        raise StoreNotFoundError(f"{where.removesuffix('/config')} is not a ckpt store") from None
    record_version, body = framing.decode_record(data, framing.KIND_CONFIG, where)
    try:
        ch = body["chunker"]
        if not isinstance(body["id"], bytes):
            raise TypeError("id")
        cdc = (int(ch["min"]), int(ch["avg"]), int(ch["max"]))
        config = StoreConfig(int(body["version"]), body["id"], int(body["created"]), cdc)
    except (KeyError, TypeError, ValueError):
        raise CorruptError(f"{where}: store config is malformed") from None
    if config.version != record_version:
        raise CorruptError(f"{where}: store config says version {config.version} in a version-{record_version} record")
    if not (256 <= cdc[0] <= cdc[1] <= cdc[2] <= 4 * 1024 * 1024):
        raise CorruptError(f"{where}: store config has impossible chunker sizes {cdc}")
    return config


_KEEP = object()  # write_ref: the ref's own `reset` stays
_DIGITS = re.compile(r"[0-9]+")  # N in REF~N and NAME@{N}: ASCII digits only


class Store:
    """A ckpt store on a backend. Use `Store.open(path)` or `Store.init(path)`."""

    def __init__(self, backend: Backend, config: StoreConfig, location: str) -> None:
        self.backend = backend
        self.config = config
        self.location = location
        self._index: ObjectIndex | None = None
        self._index_files: set[str] = set()
        self._indexed_packs: set[bytes] = set()  # packs a readable index file names
        self._tables_read: set[bytes] = set()  # packs whose own table was read instead
        self.damaged_index: dict[str, str] = {}  # index file -> what is wrong with it
        self._manifest_cache: dict[bytes, Manifest] = {}
        self.warnings: list[str] = []
        self.on_warning: notices.Handler | None = notices.handler()

    # -- opening -----------------------------------------------------------------
    @classmethod
    def init(cls, path: Path, version: int = limits.FORMAT_VERSION) -> Store:
        if (path / layout.CONFIG).exists():
            raise ConflictError(f"a ckpt store already exists at {path}")
        if version not in limits.READABLE_VERSIONS:
            raise InvalidInputError(f"format version {version} is not one this ckpt writes", hint=f"use one of {sorted(limits.READABLE_VERSIONS)}")
        try:
            path.mkdir(parents=True, exist_ok=True)
            for sub in layout.CREATED_DIRS:
                (path / sub).mkdir(exist_ok=True)
        except OSError as exc:
            if path.exists() and not path.is_dir():
                raise StoreIOError(f"cannot create a store at {path}: it is a file, not a directory", hint="give a new or empty directory") from None
            raise StoreIOError(f"cannot create a store at {path}: {exc.strerror}", hint="give a directory you may write to") from None
        config = StoreConfig(version, secrets.token_bytes(16), time.time_ns(), (limits.CDC_MIN, limits.CDC_AVG, limits.CDC_MAX))
        backend = LocalBackend(path)
        backend.write_atomic(layout.CONFIG, config.encode())
        return cls(backend, config, str(path))

    @classmethod
    def open(cls, path: Path | None = None) -> Store:
        root = resolve_store_path(path) if path is not None else find_store()
        backend = LocalBackend(root)
        config = read_config(backend, str(root / layout.CONFIG))
        for sub in layout.LOCAL_DIRS:
            # absent in a copied or version-controlled store; read-only stores can do without
            with contextlib.suppress(OSError):
                (root / sub).mkdir(exist_ok=True)
        return cls(backend, config, str(root))

    @property
    def version(self) -> int:
        """The format version this store writes (its config's); it reads every older one too."""
        return self.config.version

    def set_config(self, config: StoreConfig) -> None:
        """Replace the store config (a format upgrade); the caller holds the store lock exclusively."""
        self.backend.write_atomic(layout.CONFIG, config.encode())
        self.config = config

    def warn(self, message: str) -> None:
        """Something read around rather than failed on: said once, through `on_warning`."""
        if message in self.warnings:
            return
        self.warnings.append(message)
        if self.on_warning is not None:
            self.on_warning(message)

    def close(self) -> None:
        if isinstance(self.backend, LocalBackend):
            self.backend.close()

    def stale_temps(self, min_age: float = 60.0) -> list[str]:
        """Temp files left by takes that were killed: their process is gone."""
        out = []
        now = time.time()
        for name in self.backend.list(layout.TMP):
            pid_text = name.rsplit("/", 1)[-1].split("-", 1)[0]
            if not pid_text.isdigit():
                continue
            try:
                os.kill(int(pid_text), 0)
                continue  # still running (or the pid was reused): leave it
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            with contextlib.suppress(OSError):
                if now - (Path(self.location) / name).stat().st_mtime >= min_age:
                    out.append(name)
        return out

    def clean_stale_temps(self) -> int:
        stale = self.stale_temps()
        for name in stale:
            self.backend.delete(name)
        return len(stale)

    # -- objects -----------------------------------------------------------------
    def index(self) -> ObjectIndex:
        if self._index is None:
            self._index = ObjectIndex()
            self.refresh_index()
        return self._index

    def refresh_index(self) -> None:
        """Read index files written since the last look (other processes' takes). If any
        file read before has gone, a prune has rewritten the index: read it all again,
        so that nothing is deduplicated against an object the prune removed.

        A damaged index file is skipped (one warning): the objects it named are found
        through their packs' own tables when they are first missed (`read_stored`)."""
        names = self.backend.list(layout.INDEX)
        if self._index_files - set(names):
            self._index, self._index_files = ObjectIndex(), set()
            self._indexed_packs, self._tables_read, self.damaged_index = set(), set(), {}
            # a prune or a format upgrade rewrote the index; an upgrade also moved the
            # config to a newer version, which is the one to write from now on
            self.config = read_config(self.backend, f"{self.location}/{layout.CONFIG}")
        idx = self._index if self._index is not None else ObjectIndex()
        self._index = idx
        damaged: list[str] = []
        for name in names:
            if name in self._index_files:
                continue
            try:
                files = [(pack_id, list(parse_entry_rows(rows, pack_id, name))) for pack_id, rows in self.read_index_file(name)]
            except NotFoundError:
                continue  # removed since the listing (a prune): its replacement is listed too
            except CkptError as exc:
                self.damaged_index[name] = exc.message
                damaged.append(name)
                self._index_files.add(name)
                continue
            for pack_id, entries in files:
                self._indexed_packs.add(pack_id)
                for oid, entry in entries:
                    idx.setdefault(oid, entry)
            self._index_files.add(name)
        if damaged:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            self.warn(
                f"index file {damaged[0]}{more} is damaged ({self.damaged_index[damaged[0]]}); "
                "objects are found through the pack tables instead; run `ckpt repair index`"
            )

    def find_in_packs(self, oid: bytes | None = None) -> None:
        """Read the own tables of packs no readable index names, adding their objects to
        the index, until `oid` is found (every such pack when `oid` is None). Each pack is
        read once; a pack whose table cannot be read is skipped with a warning. This is
        the slow path: only a damaged index file or an object missing from the index
        leads here."""
        idx = self.index()
        for path in self.backend.list(layout.PACKS):
            if oid is not None and oid in idx:
                return
            hexname = path.rsplit("/", 1)[-1]
            try:
                pack_id = bytes.fromhex(hexname)
            except ValueError:
                continue
            if len(pack_id) != 32 or pack_id in self._indexed_packs or pack_id in self._tables_read:
                continue
            self._tables_read.add(pack_id)
            try:
                table = read_pack(self.backend.read(path), path)
                rows = list(parse_entry_rows(table.rows, pack_id, path))
            except NotFoundError:
                continue  # removed by a prune meanwhile
            except CkptError as exc:
                self.warn(f"pack {path} cannot be read through its own table ({exc.message}); run `ckpt verify --read-data`")
                continue
            for found, entry in rows:
                idx.setdefault(found, entry)

    def read_index_file(self, name: str) -> list[tuple[bytes, Any]]:
        """(pack id, rows) of each pack the index file `name` names (index.decode_index)."""
        return read_index_file(self.backend, name)

    def reset_index(self) -> None:
        """Forget the cached index (after a prune rewrote it); read again on next use."""
        self._index, self._index_files = None, set()
        self._indexed_packs, self._tables_read, self.damaged_index = set(), set(), {}

    def forget_manifest(self, cid: bytes) -> None:
        self._manifest_cache.pop(cid, None)

    def _merge_index(self, packs: list[tuple[bytes, list[list[Any]]]], name: str) -> None:
        idx = self.index()
        self._index_files.add(name)
        for pack_id, rows in packs:
            self._indexed_packs.add(pack_id)
            for oid, entry in parse_entry_rows(rows, pack_id, "new index"):
                idx.setdefault(oid, entry)

    def has(self, oid: bytes) -> bool:
        return oid in self.index()

    def read_stored(self, oid: bytes) -> tuple[IndexEntry, bytes]:
        entry = self.index().get(oid)
        if entry is None:
            # written since the index was read, by another process or host: the index
            # files not seen yet name it (a listing and the new files, nothing more)
            self.refresh_index()
            entry = self.index().get(oid)
        if entry is None:
            self.find_in_packs(oid)
            entry = self.index().get(oid)
        if entry is None:
            raise CorruptError(f"object {oid.hex()[:12]} is missing from the store", hint="run `ckpt verify` to see which checkpoints need it")
        stored = self.backend.read_range(pack_path(entry.pack), entry.offset, entry.stored_len)
        if len(stored) != entry.stored_len:
            raise CorruptError(f"pack {entry.pack.hex()[:12]} is truncated (object {oid.hex()[:12]})", hint="run `ckpt verify`")
        return entry, stored

    def get(self, oid: bytes) -> bytes:
        """The content of an object, its hash checked."""
        return self.read_checked(oid)[2]

    def read_checked(self, oid: bytes) -> tuple[IndexEntry, bytes, bytes]:
        """(index entry, stored bytes, content) of an object, its hash checked."""
        entry, stored = self.read_stored(oid)
        where = f"object {oid.hex()[:12]} in pack {entry.pack.hex()[:12]}"
        raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
        if hashlib.sha256(raw).digest() != oid:
            raise CorruptError(f"{where}: content does not match its hash (the pack is damaged)", hint="run `ckpt verify --read-data`")
        return entry, stored, raw

    def transaction(self) -> Transaction:
        return Transaction(self)

    # -- manifests ---------------------------------------------------------------
    def manifest_ids(self) -> list[bytes]:
        out = []
        for h in self.backend.list_names(layout.MANIFESTS):
            if len(h) == 64:
                try:
                    out.append(bytes.fromhex(h))
                except ValueError:
                    continue
        return out

    def manifest(self, cid: bytes) -> Manifest:
        m = self._manifest_cache.get(cid)
        if m is None:
            name = layout.manifest_path(cid)
            try:
                data = self.backend.read(name)
            except NotFoundError:
                raise NotFoundError(f"checkpoint {cid.hex()[:12]} does not exist in {self.location}") from None
            if hashlib.sha256(data).digest() != cid:
                raise CorruptError(f"{name}: content does not match its name (the manifest is damaged)", hint="run `ckpt verify`")
            m = Manifest.decode(data, name)
            self._manifest_cache[cid] = m
        return m

    def manifest_bytes(self, cid: bytes) -> bytes:
        return self.backend.read(layout.manifest_path(cid))

    def write_manifest(self, manifest: Manifest, *, note_head: bool = False) -> bytes:
        """Commit `manifest`; returns its id. `note_head`: a take that will move the
        subject's latest ref next leaves the head hint first (see `note_head`)."""
        data = manifest.encode()
        cid = hashlib.sha256(data).digest()
        if note_head:
            self.note_head(manifest.subject, cid)
        self.backend.write_atomic(layout.manifest_path(cid), data)
        self._manifest_cache[cid] = manifest
        return cid

    def add_manifest_bytes(self, data: bytes) -> bytes:
        cid = hashlib.sha256(data).digest()
        Manifest.decode(data, "imported manifest")
        if not self.backend.exists(layout.manifest_path(cid)):
            self.backend.write_atomic(layout.manifest_path(cid), data)
        return cid

    # -- refs --------------------------------------------------------------------
    def read_ref(self, path: str) -> bytes | None:
        return self.read_ref_state(path)[0]

    def read_ref_state(self, path: str) -> tuple[bytes | None, int | None]:
        """(target, reset) of the ref at `path`: `reset` is when a subject's latest was
        last moved on purpose (`ckpt reset`, a repair; formats/v1.md), None when never;
        (None, None) when there is no ref. Raises: CorruptError for a damaged ref."""
        if not self.backend.exists(path):
            return None, None
        data = self.backend.read(path)
        _v, body = framing.decode_record(data, framing.KIND_REF, path)
        target = body.get("target")
        if not (isinstance(target, bytes) and len(target) == 32):
            raise CorruptError(f"{path}: ref has no valid target")
        reset = body.get("reset")
        return target, reset if type(reset) is int and reset >= 0 else None

    def write_ref(self, path: str, target: bytes, reason: str = "update", *, log: bool = True, reset: int | object | None = _KEEP) -> None:
        """Point the ref at `path` at `target`; the caller holds the refs lock. The move
        is appended to the ref's reflog first (reflog.py), so no ref moves unrecorded;
        but not with `log` False: a writer that moves a ref at every commit of a chain
        (a LangGraph thread's latest), whose history is the chain itself. `reset`: the
        time of its last deliberate move (read_ref_state), kept in the ref itself; by
        default the ref's own is carried over (every move keeps a `ckpt reset` on record)."""
        try:
            old, kept = self.read_ref_state(path)
        except CkptError:
            old, kept = None, None  # a damaged ref: its old value is unknown
        if log and old != target:
            self.log_move(path, old, target, reason)
        if reset is _KEEP:
            reset = kept
        body: dict[str, Any] = {"target": target, "updated": time.time_ns()}
        if reset is not None:
            body["reset"] = reset
        self.backend.write_atomic(path, framing.encode_record(framing.KIND_REF, body, self.version))

    def log_move(self, path: str, old: bytes | None, new: bytes | None, reason: str) -> None:
        """Append a move of the ref at `path` to its reflog; the caller holds the refs
        lock. The reflog is history for people, which nothing else depends on: when it
        cannot be written (something else at its path, no permission, a full disk) the
        ref still moves, and this is said once (a warning) rather than failing a command
        whose checkpoint is already committed."""
        try:
            reflog.append(self.backend, path, old, new, reason)
        except CkptError as exc:
            self.warn(  # said once per log (`warn` says each message once)
                f"the reflog {layout.log_path(path)} cannot be written ({exc.message}); the ref moved without its reflog entry; "
                "make that path a writable regular file (or remove it) so later moves are recorded"
            )

    def remove_ref(self, path: str, reason: str = "delete") -> bytes | None:
        """Delete the ref at `path` (recorded in its reflog); the caller holds the refs
        lock. Returns: its old target (None if it was damaged or missing)."""
        try:
            old = self.read_ref(path)
        except CkptError:
            old = None
        if self.backend.exists(path):
            self.log_move(path, old, None, reason)
        self.backend.delete(path)
        return old

    def keep_latest(self, subject: Subject, reason: str) -> None:
        """Record in the reflog that a new checkpoint of `subject` deliberately left its
        latest where it is (an entry whose old and new are the same: a fork, a migration
        of an older checkpoint). `ckpt verify` and `ckpt repair refs` then know the
        newer checkpoint is not a take killed before it moved the ref (last_moved_ns)."""
        path = self.latest_ref(subject)
        with self.backend.lock("refs", shared=False):
            try:
                cur = self.read_ref(path)
            except CkptError:
                return
            if cur is not None:
                self.log_move(path, cur, cur, reason)

    def last_moved_ns(self, path: str) -> int | None:
        """When the ref at `path` was last moved (or deliberately kept) by this ckpt, from
        its reflog, or last reset (the ref's own `reset`, which survives a lost reflog);
        None when it has neither (a store an older ckpt wrote)."""
        entries = reflog.read(self.backend, path, self.warn)
        when = entries[-1].time_ns if entries else None
        try:
            reset = self.read_ref_state(path)[1]  # a reset is in the ref too: the reflog may be gone
        except CkptError:
            reset = None
        if reset is not None and (when is None or reset > when):
            when = reset
        return when

    def ref_log(self, path: str | None = None) -> list[reflog.Entry]:
        """The reflog of the ref at `path` ("refs/..."), or of every ref, newest first.
        A damaged entry is skipped with a warning."""
        if path is None:
            return reflog.read_all(self.backend, self.warn)
        return list(reversed(reflog.read(self.backend, path, self.warn)))

    def set_latest(self, subject: Subject, cid: bytes, reason: str = "reset") -> bytes | None:
        """Point the subject's latest at `cid`, whatever it pointed at (`ckpt reset`);
        the head hint too, so the next take's parent is `cid`. Returns: the old target."""
        path = self.latest_ref(subject)
        with self.backend.lock("refs", shared=False):
            try:
                old = self.read_ref(path)
            except CkptError:
                old = None
            self.note_head(subject, cid)
            # the ref records the reset itself: checkpoints committed before it are left
            # behind on purpose, and a take already running does not undo it
            self.write_ref(path, cid, reason, reset=time.time_ns())
        return old

    def ref_paths(self) -> list[str]:
        return self.backend.list(layout.REFS)

    def refs(self, *, strict: bool = False, prefix: str = "refs") -> dict[str, bytes]:
        """Every ref under `prefix` (path without "refs/" -> target). A damaged ref is
        left out with one warning naming it, unless `strict` (then CorruptError): a
        caller that decides what to delete by the refs (prune) must not overlook one."""
        return self._read_refs(prefix, strict)[0]

    def _read_refs(self, prefix: str, strict: bool = False) -> tuple[dict[str, bytes], int]:
        """refs(), and how many refs were left out as damaged."""
        out = {}
        damaged: list[tuple[str, str]] = []
        for path in self.backend.list(prefix):
            try:
                t = self.read_ref(path)
            except NotFoundError:
                continue  # deleted since the listing
            except CkptError as exc:
                if strict:
                    raise
                damaged.append((path, exc.message))
                continue
            if t is not None:
                out[path[len("refs/") :]] = t
        if damaged:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            todo = "run `ckpt repair refs`" if all(p.startswith("refs/latest/") for p, _m in damaged) else "run `ckpt verify`"
            self.warn(f"ref {damaged[0][0]}{more} is damaged ({damaged[0][1]}) and is left out; {todo}")
        return out, len(damaged)

    @staticmethod
    def latest_ref(subject: Subject) -> str:
        return layout.latest_ref(subject.kind, subject.name)

    def latest_state(self, subject: Subject) -> tuple[bytes | None, int | None]:
        """The subject's latest ref as read_ref_state gives it ((None, None) when it is
        missing or damaged): what a take passes back to advance_latest as `expect`."""
        try:
            return self.read_ref_state(self.latest_ref(subject))
        except CkptError:
            return None, None

    def advance_latest(
        self,
        subject: Subject,
        cid: bytes,
        created_ns: int,
        *,
        nested: bool = False,
        reason: str = "take",
        log: bool = True,
        expect: tuple[bytes | None, int | None] | None = None,
    ) -> bool:
        """Point the subject's latest at `cid` unless a newer checkpoint got there first
        (`nested`: `cid` is a nested run's, which ranks below every other; head_order).
        `expect`: the latest ref as the caller read it before building `cid`
        (latest_state); when the ref was reset since (it names another checkpoint and
        its `reset` changed), latest stays where the reset put it and LatestMovedError
        is raised: a take that was running must not undo a `ckpt reset`.
        Returns: whether latest names `cid` now."""
        path = self.latest_ref(subject)
        with self.backend.lock("refs", shared=False):
            try:
                cur, reset = self.read_ref_state(path)
            except CkptError:
                cur, reset = None, None  # a damaged ref is replaced (the take chose its parent around it)
            if expect is not None and cur is not None and cur != expect[0] and cur != cid and reset != expect[1]:
                # moved on purpose while the caller ran: `cid` stays, unreferenced, and the
                # ref's reset moves past it (so neither verify, repair refs nor the next
                # take's head hint adopts it as a take killed before its ref moved)
                self.note_head(subject, cur)
                self.log_move(path, cur, cur, f"{reason} (latest kept: it was reset while the take ran; {cid.hex()[:12]} left behind)")
                self.write_ref(path, cur, log=False, reset=time.time_ns())
                raise LatestMovedError(subject, cur, cid)
            if cur is not None and cur != cid:
                try:
                    m = self.manifest(cur)
                    if head_order(m.labels, m.created_ns) > (0 if nested else 1, created_ns):
                        return False
                except CkptError:
                    pass  # a damaged target is replaced
            self.write_ref(path, cid, reason, log=log)
            return True

    def head_hint_path(self, subject: Subject) -> str:
        return layout.head_hint_path(subject.kind, subject.name)

    def note_head(self, subject: Subject, cid: bytes) -> None:
        """Say, before a take writes its manifest, which checkpoint it is about to commit
        (`cache/heads/KIND/NAME`, 32 bytes). If the take is killed between its manifest
        (the commit point) and its ref, the next take finds the dangling checkpoint here
        in O(1) instead of scanning every manifest. A hint only: not synced (a process
        kill keeps it; a power cut may lose it, and then the history forks as it would
        without it), ignored unless it names a readable manifest of the subject."""
        with contextlib.suppress(CkptError):  # a cache: a take never fails for want of it
            self.backend.write_hint(self.head_hint_path(subject), cid)

    def head(self, subject: Subject) -> bytes | None:
        """The default parent of a new checkpoint of `subject`: its newest committed
        checkpoint. That is its latest ref, unless a take was killed between writing its
        manifest (the commit point) and moving the ref, leaving a newer checkpoint the
        ref lags behind (a dangling head); then it is that one, so the history does not
        fork. Cost: the ref and one 32-byte hint (note_head), whatever the store's size.
        A damaged ref is answered from every manifest (and said once)."""
        path = self.latest_ref(subject)
        try:
            head, reset = self.read_ref_state(path)
        except CkptError as exc:
            self.warn(f"{exc.message}; the subject's newest checkpoint is found from the manifests instead; run `ckpt repair refs`")
            newest = self.newest_of(subject)
            return newest[1] if newest is not None else None
        try:
            hint = self.backend.read(self.head_hint_path(subject))
        except CkptError:
            return head
        if len(hint) != 32 or hint == head or not self.backend.exists(layout.manifest_path(hint)):
            return head  # no take left one behind (or it was killed before its manifest)
        try:
            dangling = self.manifest(hint)
        except CkptError:
            return head
        if dangling.subject != subject or (reset is not None and dangling.created_ns <= reset):
            return head  # (one committed before latest was reset was left behind on purpose)
        if head is not None:
            with contextlib.suppress(CkptError):
                if self.manifest(head).created_ns >= dangling.created_ns:
                    return head
        return hint

    def newest_of(self, subject: Subject | None) -> tuple[int, bytes] | None:
        """(created_ns, id) of the newest readable checkpoint of `subject` (by head_order:
        the one its latest ref names) or of any (for None), from every manifest: for a
        damaged or lost ref and `ckpt repair refs`, not for every take."""
        best: tuple[int, bytes] | None = None
        rank: tuple[tuple[int, int], bytes] | None = None
        for name in self.backend.list_names(layout.MANIFESTS):
            if len(name) != 64:
                continue
            try:
                cid = bytes.fromhex(name)
                m = self.manifest(cid)
            except (ValueError, CkptError):
                continue  # not a manifest name, or damaged (verify's business)
            if subject is None:
                if best is None or (m.created_ns, cid) > best:
                    best = (m.created_ns, cid)
            elif m.subject == subject and (rank is None or (head_order(m.labels, m.created_ns), cid) > rank):
                rank, best = (head_order(m.labels, m.created_ns), cid), (m.created_ns, cid)
        return best

    def set_branch(self, name: str, cid: bytes, reason: str = "branch") -> None:
        check_name(name, "branch name")
        with self.backend.lock("refs", shared=False):
            self.write_ref(layout.branch_ref(name), cid, reason)

    def set_tag(self, name: str, cid: bytes, *, force: bool = False, reason: str = "tag") -> None:
        check_name(name, "tag name")
        path = layout.tag_ref(name)
        with self.backend.lock("refs", shared=False):
            cur = self.read_ref(path)
            if cur is not None and cur != cid and not force:
                raise ConflictError(f"tag {name!r} already points at {cur.hex()[:12]}", hint="pass --force to move it")
            self.write_ref(path, cid, reason)

    def delete_ref(self, path: str, reason: str = "delete") -> bytes | None:
        """Delete a ref; returns its old target (None if it was damaged)."""
        with self.backend.lock("refs", shared=False):
            if not self.backend.exists(path):
                raise NotFoundError(f"no ref {path[len('refs/'):]!r}")
            return self.remove_ref(path, reason)

    # -- resolving names -----------------------------------------------------------
    def resolve(self, ref: str) -> bytes:
        """A checkpoint id for an id, unique id prefix, tag, branch, KIND:NAME or `latest`,
        optionally followed by ~N (N first-parents back)."""
        base, back = ref, 0
        if "~" in ref:
            base, _, n = ref.rpartition("~")
            if not _DIGITS.fullmatch(n):
                raise InvalidInputError(f"{ref!r}: what follows '~' must be a number of steps back")
            back = int(n)
        cid = self._resolve_base(base)
        for step in range(back):
            parents = self.manifest(cid).parents
            if not parents:
                raise NotFoundError(f"{ref!r}: checkpoint {cid.hex()[:12]} has no parent ({step} steps back)")
            cid = parents[0]
        return cid

    def ref_path_of(self, name: str) -> str:
        """The ref path a name means in `ckpt reflog NAME` and NAME@{N}: KIND:NAME is the
        subject's latest; a path as the reflog prints it (latest/..., tags/...,
        branches/...) is itself; a plain name is a tag, else a branch."""
        path: str | None = None
        if name.startswith("latest/"):
            kind, _, rest = name[len("latest/") :].partition("/")
            bad = not rest
            if not bad:
                try:
                    path = self.latest_ref(Subject.parse(f"{kind}:{rest}"))
                except InvalidInputError:
                    bad = True
            if bad:
                raise InvalidInputError(f"{name!r} is not a ref path", hint="give latest/KIND/NAME as `ckpt reflog` prints it, or KIND:NAME")
        elif name.startswith(("tags/", "branches/")):
            ns, _, rest = name.partition("/")
            check_name(rest, f"{ns[:-1]} name in {name!r}")
            path = layout.ref_path(name)
        elif ":" in name:
            path = self.latest_ref(Subject.parse(name))
        else:
            check_name(name, "ref name")
            candidates = [layout.ref_path(f"{ns}/{name}") for ns in ("tags", "branches")]
        for p in [path] if path is not None else candidates:
            if self.backend.exists(p) or self.backend.exists(reflog.log_path(p)):
                return p
        raise NotFoundError(f"no such ref: {name!r} (no subject, tag or branch of that name has a ref or a reflog)", hint="see `ckpt reflog` for every ref's moves")

    def _resolve_reflog(self, ref: str) -> bytes:
        """NAME@{N}: what the ref NAME pointed at N moves ago (@{0}: now)."""
        name, _, n = ref[:-1].rpartition("@{")
        if not _DIGITS.fullmatch(n):
            raise InvalidInputError(f"{ref!r}: what is inside @{{}} must be a number of moves back")
        back = int(n)
        # newest first; "kept" entries (old == new) are no move
        entries = [e for e in self.ref_log(self.ref_path_of(name)) if e.old != e.new]
        value: str | None
        if back < len(entries):
            value = entries[back].new
        elif back == len(entries) and entries:
            value = entries[-1].old  # what it pointed at before its first recorded move
        else:
            raise NotFoundError(f"{ref!r}: the reflog of {name} has only {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}", hint=f"see `ckpt reflog {name}`")
        if value is None:
            raise NotFoundError(f"{ref!r}: {name} did not exist then", hint=f"see `ckpt reflog {name}`")
        if not self.backend.exists(f"{layout.MANIFESTS}/{value}"):
            raise NotFoundError(f"{ref!r}: checkpoint {value[:12]} is no longer in the store (pruned)")
        return bytes.fromhex(value)

    def _resolve_base(self, ref: str) -> bytes:
        if not ref:
            raise InvalidInputError("an empty checkpoint reference")
        if ref.endswith("}") and "@{" in ref:
            return self._resolve_reflog(ref)
        if ref == "latest":
            # only the subjects' latest refs are read: a damaged tag or branch is no
            # reason to refuse `latest`; a damaged latest ref or manifest is skipped
            # (with a warning) in favour of the newest readable one
            best: tuple[int, bytes] | None = None
            readable, left_out = self._read_refs("refs/latest")
            damaged = left_out > 0
            for _path, t in readable.items():
                try:
                    created = self.manifest(t).created_ns
                except NotFoundError:
                    continue  # pruned since the listing
                except CkptError as exc:
                    self.warn(f"{exc.message}; `latest` is chosen among the other subjects' latest checkpoints")
                    damaged = True
                    continue
                if best is None or created > best[0]:
                    best = (created, t)
            if best is None or damaged:
                # no readable latest ref (damaged, or something else at its path), or
                # one left out: the newest checkpoint is found from the manifests
                # themselves (only on this path: it reads every manifest)
                newest = self.newest_of(None)
                if newest is not None and (best is None or newest > best):
                    if best is None and not damaged:  # (a damaged ref was named already)
                        self.warn("no subject has a readable latest ref; `latest` was found from the manifests; run `ckpt repair refs`")
                    best = newest
            if best is None:
                raise NotFoundError(f"the store at {self.location} has no checkpoints yet", hint="take one with `ckpt take`")
            return best[1]
        if ":" in ref:
            subject = Subject.parse(ref)
            try:
                head = self.read_ref(self.latest_ref(subject))
            except CkptError as exc:
                self.warn(f"{exc.message}; the newest checkpoint of {ref} was found from the manifests instead; run `ckpt repair refs`")
                newest = self.newest_of(subject)
                if newest is not None:
                    return newest[1]
                raise
            if head is None:
                newest = self.newest_of(subject)  # a ref lost (or something else at its path)
                if newest is None:
                    raise NotFoundError(f"no checkpoints of subject {ref}")
                self.warn(f"{ref} has no latest ref; its newest checkpoint was found from the manifests; run `ckpt repair refs`")
                return newest[1]
            return head
        for ns in ("tags", "branches"):
            if NAME_RE.match(ref):
                named = self.read_ref(layout.ref_path(f"{ns}/{ref}"))
                if named is not None:
                    return named
        low = ref.lower()
        if len(low) >= 4 and all(c in "0123456789abcdef" for c in low):
            if len(low) == 64 and self.backend.exists(f"{layout.MANIFESTS}/{low}"):
                return bytes.fromhex(low)
            matches = [c for c in self.manifest_ids() if c.hex().startswith(low)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                shown = ", ".join(sorted(m.hex()[:12] for m in matches[:5]))
                raise InvalidInputError(f"{ref!r} is ambiguous: it matches {len(matches)} checkpoints ({shown})", hint="give more characters")
        raise NotFoundError(
            f"no checkpoint, tag or branch named {ref!r} in {self.location}",
            hint="see `ckpt ls` for ids, or use a tag, a branch, KIND:NAME or latest",
        )
