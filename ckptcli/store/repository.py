"""A store: packs of immutable objects, their indexes, manifests and refs.

Its files are named by layout.py (formats/v1.md, "Store layout"); the pack and index
formats are pack.py's and index.py's; refs are read and moved by refs.py (`Refs`).

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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ckptcli import notices
from ckptcli.errors import (
    CkptError,
    ConflictError,
    CorruptError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    StoreIOError,
    StoreNotFoundError,
    generic_hint,
)
from ckptcli.format import framing, limits
from ckptcli.format.chunker import CHUNKERS, DEFAULT_CHUNKER, LEGACY_CHUNKER
from ckptcli.format.chunker import PARAMS as CHUNKER_PARAMS
from ckptcli.format.chunker import check_params as check_chunker
from ckptcli.format.manifest import Manifest
from ckptcli.store import layout
from ckptcli.store.backend import Backend, LocalBackend
from ckptcli.store.backends import ENV_OPTIONS, cli_options, open_backend, parse_location, parse_store_options, redact
from ckptcli.store.index import (
    SNAPSHOT_HEAD_SIZE,
    Columns,
    IndexEntry,
    ObjectIndex,
    decode_snapshot,
    encode_snapshot,
    parse_entry_rows,
    read_index_file,
    row_columns,
    snapshot_size,
    write_index,
)
from ckptcli.store.layout import INDEX_SNAPSHOT
from ckptcli.store.layout import STORE_DIRNAME as STORE_DIRNAME
from ckptcli.store.layout import pack_path as pack_path
from ckptcli.store.objcache import default_cache
from ckptcli.store.pack import PackWriter, read_pack
from ckptcli.store.refs import Refs
from ckptcli.store.remote import ObjectStoreIO

_U32 = struct.Struct(">I")

#: what to do about a manifest that cannot be read (damaged bytes, or bytes that are not
#: the ones its name is the hash of): every command that meets one says it
DAMAGED_MANIFEST_HINT = (
    "restore it from a copy of the store (the file of the same name there), or remove it with "
    "`ckpt repair checkpoints --drop --force` (docs/runbooks/store-damaged.md)"
)


def damaged_manifest_hint(store: str | None = None) -> str:
    """DAMAGED_MANIFEST_HINT, its command naming `store` (for a command given two stores)."""
    if store is None:
        return DAMAGED_MANIFEST_HINT
    return DAMAGED_MANIFEST_HINT.replace("--drop --force`", f"--drop --force --store {store}`")


#: what to do about a damaged `config`: no command opens the store until it is put back
DAMAGED_CONFIG_HINT = (
    "no command can open the store until it is put back: copy `config` from a copy of the store, "
    'or make a new one (docs/runbooks/store-damaged.md, "A damaged config")'
)

#: how old (seconds, by its mtime) a temporary file of a killed writer is before the next
#: writer removes it (docs/storage.md, "tmp/")
STALE_TEMP_AGE = 60.0
#: the name `create_temp` gives by default (`.ckpt-` + 16 hex digits + `.tmp`): no pid in it
_TEMP_NAME = re.compile(r"\.ckpt-[0-9a-f]{16}\.tmp")


@dataclass(frozen=True)
class StoreConfig:
    version: int
    store_id: bytes
    created_ns: int
    cdc: tuple[int, int, int]
    #: the chunker's name (ckptcli.format.chunker.CHUNKERS): writers cut blob files and
    #: long strings with it, so that equal data chunks equally in this store
    chunker: str = LEGACY_CHUNKER

    def to_body(self) -> dict[str, Any]:
        mn, avg, mx = self.cdc
        return {
            "version": self.version,
            "id": self.store_id,
            "created": self.created_ns,
            "chunker": {"algorithm": self.chunker, "min": mn, "avg": avg, "max": mx},
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

    def raw_len(self, oid: bytes) -> int | None:
        """The length of an object the store had when the transaction began; None for
        any other (the digest cache checks the chunks it names by it)."""
        entry = self.known.get(oid)
        return entry.raw_len if entry is not None else None

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        if oid in self.known or oid in self.new:
            return
        if len(content) > limits.MAX_OBJECT_SIZE:  # pragma: no cover - the encoder keeps objects smaller
            raise CkptError(f"object of {len(content)} bytes exceeds the format limit")
        codec, stored = framing.compress(content)
        self.put_stored(oid, obj_type, codec, stored, len(content))

    def put_stored(self, oid: bytes, obj_type: int, codec: int, stored: bytes | memoryview, raw_len: int, *, again: bool = False) -> None:
        """`again`: write it even though the index names it (its pack is lost: `ckpt copy`
        sends it again; see Store.drop_index_rows)."""
        if oid in self.new or (oid in self.known and not again):
            return
        if self.pack is None:
            self.pack = PackWriter(self.store.backend, self.store.version)
        self.pack.add(oid, obj_type, codec, stored, raw_len)
        self.new[oid] = obj_type
        self.new_objects += 1
        self.new_stored_bytes += len(stored)
        if self.pack.size >= self.store.backend.pack_target:
            self.packs.append(self.pack.finish())
            self.pack = None

    def put_stored_many(self, obj_type: int, items: Sequence[tuple[bytes, int, tuple[int, bytes | memoryview, int] | None]]) -> None:
        """`put_stored` of each (id, raw length, (codec, stored bytes, their
        framing.stored_check), or None for an object known to be stored already) in
        turn, in one call (a window of chunks)."""
        known, new = self.known, self.new
        fresh: list[tuple[bytes, int, bytes | memoryview, int, int]] = []
        for oid, raw_len, stored in items:
            if stored is None or oid in known or oid in new:
                continue
            new[oid] = obj_type
            fresh.append((oid, stored[0], stored[1], raw_len, stored[2]))
        target = self.store.backend.pack_target
        i = 0
        try:
            while i < len(fresh):
                if self.pack is None:
                    self.pack = PackWriter(self.store.backend, self.store.version)
                k = self.pack.add_many(fresh, i, obj_type, target)
                self.new_objects += k - i
                self.new_stored_bytes += sum(len(f[2]) for f in fresh[i:k])
                i = k
                if self.pack.size >= target:
                    self.packs.append(self.pack.finish())
                    self.pack = None
        except BaseException:
            for f in fresh[i:]:  # not in any pack: as put_stored, only what was added is new
                new.pop(f[0], None)
            raise

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


def find_store(start: Path | None = None) -> Path | str:
    """The store for this directory: CKPT_STORE (a path or a URL), else the nearest
    .ckpt/ above cwd, or the nearest directory above cwd (cwd itself too) that is a
    store, whatever its name (as `CkptSaver.open("dir")` and `ckpt init dir` make them)."""
    env = os.environ.get("CKPT_STORE")
    if env:
        where = store_location(env)
        return where if isinstance(where, str) else resolve_store_path(where)
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


def store_location(text: str | os.PathLike[str]) -> Path | str:
    """A `--store` / CKPT_STORE value as Store.open takes it: a URL of object storage
    (`s3://...`, `memory://...`; ckptcli.store.backends) stays a string; a path or a
    `file://` URL is a Path."""
    if not isinstance(text, str):
        return Path(text)
    found = parse_location(text)
    if not found.is_local:
        return text
    if found.text[:7].lower() != "file://":
        return Path(text)
    rest = found.text[7:]
    host, slash, path = rest.partition("/")
    if host.lower() not in ("", "localhost") or not slash:
        raise InvalidInputError(
            "a file:// URL names a local directory by its absolute path", hint="write file:///srv/ckpt, or the path itself"
        )
    return Path("/" + path)


def same_location(a: str, b: str) -> bool:
    """Whether two `--store` values name one store: paths compared resolved (links,
    `..`, relative), URLs as written."""
    return _resolved(store_location(a)) == _resolved(store_location(b))


def _resolved(where: Path | str) -> str:
    return os.path.realpath(where) if isinstance(where, Path) else where


def _remote(url: str, options: Mapping[str, str] | None) -> ObjectStoreIO:
    """The store operations on the object-storage backend of `url` (store options:
    `options`, else CKPT_STORE_OPTIONS)."""
    given = options if options is not None else parse_store_options(cli_options(), os.environ.get(ENV_OPTIONS))
    return ObjectStoreIO(open_backend(url, given), default_cache())


def _refuse_occupied(io: ObjectStoreIO, url: str, options: Mapping[str, str] | None) -> None:
    """A new store at a URL goes to a prefix that holds no object (one listing, its first
    key) and lies in no store (no config object at an ancestor prefix): its objects would
    mix with other data, or an outer store's prune would take them for its own garbage.

    Raises: ConflictError, one line naming what is there."""
    listing = io.objects.list("")
    try:
        first = next(iter(listing), None)
    finally:
        close = getattr(listing, "close", None)
        if close is not None:
            close()
    if first is not None:
        if first.path == layout.CONFIG or io.objects.exists(layout.CONFIG):
            raise ConflictError(f"a ckpt store already exists at {io.url}")
        raise ConflictError(
            f"{io.url} already holds objects ({first.path!r} among them): a store is created at an empty prefix",
            hint="give a new prefix, such as " + io.url.rstrip("/") + "-ckpt",
        )
    parts = urlsplit(url)
    segments = parts.path.strip("/").split("/") if parts.path.strip("/") else []
    given = options if options is not None else parse_store_options(cli_options(), os.environ.get(ENV_OPTIONS))
    for depth in range(len(segments)):
        outer = f"{parts.scheme}://{parts.netloc}/{'/'.join(segments[:depth])}".rstrip("/")
        backend = open_backend(outer, given)
        try:
            inside = backend.exists(layout.CONFIG)
        finally:
            backend.close()
        if inside:
            raise ConflictError(
                f"{io.url} lies inside the ckpt store {redact(outer)}: a store is never created in another one",
                hint="give a prefix outside it (stores sit side by side: s3://bucket/a, s3://bucket/b)",
            )


def enclosing_store(path: Path) -> Path | None:
    """The store whose directory holds `path` (a directory that may not exist yet), the
    nearest one walking up its parents, links resolved, to the file-system root; None
    when there is none. A parent is a store when it holds a file `config` that is a
    store's config record, or `config` beside `manifests/` (a store whose config is
    damaged is still one), or no `config` but `packs/`, `index/` and `manifests/` (one
    whose config is gone): not every file named `config` (`~/.ssh/config`).

    A store made there would mix its files with the outer store's: the outer store's
    verify reports them as damage and its prune deletes them as garbage."""
    magic = framing.MAGIC_PREFIX + framing.KIND_CONFIG
    for d in Path(os.path.realpath(path)).parents:
        config = d / layout.CONFIG
        try:
            if not config.is_file():
                # a store whose config is gone is still one (`ckpt init` refuses to make
                # one there again): its packs, index and manifests say so
                if all((d / sub).is_dir() for sub in (layout.PACKS, layout.INDEX, layout.MANIFESTS)):
                    return d
                continue
            with open(config, "rb") as fh:
                head = fh.read(len(magic))
        except OSError:
            continue  # unreadable: no store this process could open either
        if head == magic or (d / layout.MANIFESTS).is_dir():
            return d
    return None


def resolve_store_path(path: Path) -> Path:
    if (path / layout.CONFIG).is_file():
        return path
    if (path / STORE_DIRNAME / layout.CONFIG).is_file():
        return path / STORE_DIRNAME
    if path.is_file():
        # a checkpoint file (or any file) given as the store: read it without --store
        raise StoreNotFoundError(
            f"{path} is a file, not a ckpt store",
            hint="a checkpoint file is read by naming it instead of a checkpoint (`ckpt show FILE`), without --store; "
            "--store / CKPT_STORE name a store's directory",
        )
    for d in (path, path / STORE_DIRNAME):
        if all((d / sub).is_dir() for sub in (layout.PACKS, layout.MANIFESTS)):  # a store that lost its config
            raise StoreNotFoundError(
                f"{d} holds a store's {layout.PACKS}/ and {layout.MANIFESTS}/ but no {layout.CONFIG}", hint=DAMAGED_CONFIG_HINT
            )
    raise StoreNotFoundError(f"{path} is not a ckpt store", hint="run `ckpt init` to create one, or check --store / CKPT_STORE")


def _looks_like_config(path: Path) -> bool:
    """Whether `path` is a regular file that starts as a ckpt config record does (a
    damaged config of a store is still a store's; a file of the user's is not)."""
    try:
        if os.path.islink(path) or not path.is_file():
            return False
        with open(path, "rb") as fh:
            head = fh.read(len(framing.MAGIC_PREFIX) + 4)
    except OSError:
        return True  # cannot tell: say a store is there, as before, rather than guess it is not
    return head == framing.MAGIC_PREFIX + framing.KIND_CONFIG


def read_config(backend: Backend, where: str) -> StoreConfig:
    """The store config (formats/v1.md, "Config and refs"). A damaged one is CorruptError
    saying what to do (DAMAGED_CONFIG_HINT); a newer ckpt's, UnsupportedVersionError."""
    try:
        return _read_config(backend, where)
    except (CorruptError, LimitExceededError) as exc:
        if generic_hint(exc):  # (`ckpt verify` cannot open the store either: never point at it)
            exc.hint = DAMAGED_CONFIG_HINT
        raise


def _read_config(backend: Backend, where: str) -> StoreConfig:
    try:
        data = backend.read(layout.CONFIG)
    except NotFoundError:
        root = where.removesuffix(f"/{layout.CONFIG}")
        if "://" not in root:
            raise StoreNotFoundError(
                f"{root} is not a ckpt store", hint="run `ckpt init` to create one, or check --store / CKPT_STORE"
            ) from None
        backend.check_bucket()  # NoBucketError: the bucket itself is missing, not just the store
        if backend.list_names(layout.MANIFESTS):  # a store that lost its config
            raise StoreNotFoundError(
                f"{root} holds a store's {layout.MANIFESTS}/ but no {layout.CONFIG} object", hint=DAMAGED_CONFIG_HINT
            ) from None
        raise StoreNotFoundError(
            f"{root} is not a ckpt store (no {layout.CONFIG} object there)",
            hint=f"run `ckpt init {root}` to create one, or check the URL, its bucket and prefix (a store's prefix holds "
            f"{layout.CONFIG}, {layout.PACKS}/, {layout.INDEX}/, {layout.MANIFESTS}/)",
        ) from None
    record_version, body = framing.decode_record(data, framing.KIND_CONFIG, where)
    try:
        ch = body["chunker"]
        if not isinstance(body["id"], bytes):
            raise TypeError("id")
        cdc = (int(ch["min"]), int(ch["avg"]), int(ch["max"]))
        algorithm = ch.get("algorithm", LEGACY_CHUNKER)
        if not isinstance(algorithm, str):
            raise TypeError("algorithm")
        config = StoreConfig(int(body["version"]), body["id"], int(body["created"]), cdc, algorithm)
    except (KeyError, TypeError, ValueError):
        raise CorruptError(f"{where}: store config is malformed") from None
    if config.version != record_version:
        raise CorruptError(f"{where}: store config says version {config.version} in a version-{record_version} record")
    if not (256 <= cdc[0] <= cdc[1] <= cdc[2] <= 4 * 1024 * 1024):
        raise CorruptError(f"{where}: store config has impossible chunker sizes {cdc}")
    if algorithm in CHUNKERS and (problem := check_chunker(algorithm, cdc)):
        raise CorruptError(f"{where}: store config has {problem}")
    # A chunker this ckpt does not know (a newer one's) leaves the store readable; a take
    # into it is refused (Encoder), as cutting with another would share no chunks.
    return config


def _parse_rows(pack_id: bytes, rows: Any, name: str) -> tuple[bytes, Columns | None, list[tuple[bytes, IndexEntry]]]:
    """One pack's rows of the index file `name`, checked: as columns (index.row_columns) when
    they are plainly well-formed, else row by row (parse_entry_rows, which raises
    CorruptError or LimitExceededError naming the row that is wrong)."""
    columns = row_columns(rows)
    if columns is not None:
        return pack_id, columns, []
    return pack_id, None, list(parse_entry_rows(rows, pack_id, name))


def _add_parsed(idx: ObjectIndex, parsed: tuple[bytes, Columns | None, list[tuple[bytes, IndexEntry]]]) -> int:
    """Add one pack's rows as _parse_rows gave them to `idx`, unsettled; returns how many."""
    pack_id, columns, entries = parsed
    if columns is not None:
        idx.add_columns(pack_id, columns, settle=False)
        return len(columns[0])
    idx.add_many(entries, settle=False)
    return len(entries)


class Store(Refs):
    """A ckpt store on a backend. Use `Store.open(path)` or `Store.init(path)`."""

    def __init__(self, backend: Backend, config: StoreConfig, location: str) -> None:
        self.backend = backend
        self.config = config
        self.location = location
        self._index: ObjectIndex | None = None
        self._index_files: set[str] = set()
        self._index_dir_seen: tuple[int, int, int] | None = None  # _index_dir_state when last listed
        self._indexed_packs: set[bytes] = set()  # packs a readable index file names
        self._tables_read: set[bytes] = set()  # packs whose own table was read instead
        self.damaged_index: dict[str, str] = {}  # index file -> what is wrong with it
        # the rows of this process's own commits, added to the index when it is next used
        # (_merge_index): a `ckpt take` ends without using it again
        self._unmerged: list[tuple[bytes, list[list[Any]]]] = []
        self._unmerged_lock = threading.Lock()
        self._manifest_cache: dict[bytes, Manifest] = {}
        self._head_orders: dict[bytes, tuple[int, int]] = {}  # (refs.py: `_head_order`)
        self.warnings: list[str] = []
        self.on_warning: notices.Handler | None = notices.handler()
        if isinstance(backend, ObjectStoreIO):
            backend.on_strange = self.warn  # a key its listings skip is said once, as the store's other warnings

    # -- opening -----------------------------------------------------------------
    @classmethod
    def init(
        cls, path: Path | str, version: int = limits.FORMAT_VERSION, options: Mapping[str, str] | None = None, *, chunker: str | None = None
    ) -> Store:
        """Create a store at `path` (a directory) or at a URL (`s3://bucket/prefix`...,
        ckptcli.store.backends). `chunker`: the content-defined chunker its writers use
        (ckptcli.format.chunker.CHUNKERS; default DEFAULT_CHUNKER). Raises: ConflictError
        (one is there), InvalidInputError, StoreIOError."""
        if version not in limits.READABLE_VERSIONS:
            raise InvalidInputError(
                f"format version {version} is not one this ckpt writes", hint=f"use one of {sorted(limits.READABLE_VERSIONS)}"
            )
        chunker = chunker or DEFAULT_CHUNKER
        if chunker not in CHUNKERS:
            raise InvalidInputError(f"unknown chunker {chunker!r}", hint=f"use one of {', '.join(CHUNKERS)}")
        config = StoreConfig(version, secrets.token_bytes(16), time.time_ns(), CHUNKER_PARAMS[chunker], chunker)
        path = store_location(path)  # a path given as a string is a local directory, with its file locks
        if isinstance(path, str):
            io = _remote(path, options)
            try:
                _refuse_occupied(io, path, options)
                if not io.objects.put_if_absent(layout.CONFIG, config.encode()):
                    raise ConflictError(f"a ckpt store already exists at {io.url}")
            except BaseException:
                io.close()
                raise
            return cls(io, config, io.url)
        if os.path.lexists(path / layout.CONFIG):
            if not _looks_like_config(path / layout.CONFIG):
                # the user's own file (or directory, or link) under the name a store's config has
                there = path / layout.CONFIG
                kind = "symbolic link" if there.is_symlink() else "directory" if there.is_dir() else "file"
                raise ConflictError(
                    f"{path} is not a ckpt store: it holds a {kind} named {layout.CONFIG} that is not a store's config "
                    "(a store made there would need that name)",
                    hint=f"give a new or empty directory, or move {path / layout.CONFIG} away",
                )
            raise ConflictError(
                f"a ckpt store already exists at {path}", hint=f"use it as it is (--store {path}), or give another directory"
            )
        if path.is_symlink() and not path.exists():
            raise StoreIOError(
                f"cannot create a store at {path}: it is a symbolic link to {os.readlink(path)}, which does not exist (a dangling link)",
                hint="create the directory it points to first, remove the link, or give another directory",
            )
        outer = enclosing_store(path)
        if outer is not None:
            raise ConflictError(
                f"{path} lies inside the ckpt store {outer}: a store is never created in another one",
                hint="give a directory outside it (stores sit side by side: /srv/a, /srv/b)",
            )
        taken = sorted(d for d in layout.STORE_DIRS if os.path.lexists(path / d))
        if taken:
            # a store's own names: what is there would be read as the store's (verify calls
            # it damage, prune deletes it as garbage, tmp/ is swept): a store whose config
            # is gone, another store, or the user's own files
            raise ConflictError(
                f"{path / taken[0]} already exists: {path} holds a store's directories without its config "
                "(a damaged store, or another one) or files of its own under the names a store uses",
                hint="give a new or empty directory, or one without any of " + ", ".join(f"{d}/" for d in sorted(layout.STORE_DIRS)),
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
            for sub in layout.CREATED_DIRS:
                (path / sub).mkdir(exist_ok=True)
        except OSError as exc:
            if path.exists() and not path.is_dir():
                raise StoreIOError(
                    f"cannot create a store at {path}: it is a file, not a directory", hint="give a new or empty directory"
                ) from None
            raise StoreIOError(f"cannot create a store at {path}: {exc.strerror}", hint="give a directory you may write to") from None
        backend = LocalBackend(path)
        backend.write_atomic(layout.CONFIG, config.encode())
        return cls(backend, config, str(path))

    @classmethod
    def open(cls, path: Path | str | None = None, options: Mapping[str, str] | None = None) -> Store:
        """Open the store at `path` (a store directory, a directory holding `.ckpt/`, or
        a URL: `store_location` tells them apart), or the one `find_store` finds."""
        where = store_location(path) if path is not None else find_store()
        if isinstance(where, str):
            io = _remote(where, options)
            try:
                return cls(io, read_config(io, f"{io.url}/{layout.CONFIG}"), io.url)
            except BaseException:
                io.close()
                raise
        root = resolve_store_path(where) if path is not None else where
        backend = LocalBackend(root)
        backend.check_top_dirs()
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

    @property
    def directory(self) -> Path | None:
        """The store's local directory; None for a store on object storage (its location
        is a URL, no path: files kept beside a store, free space, `Path` math do not apply)."""
        return Path(self.location) if isinstance(self.backend, LocalBackend) else None

    def warn(self, message: str) -> None:
        """Something read around rather than failed on: said once, through `on_warning`."""
        if message in self.warnings:
            return
        self.warnings.append(message)
        if self.on_warning is not None:
            self.on_warning(message)

    def close(self) -> None:
        if isinstance(self.backend, (LocalBackend, ObjectStoreIO)):
            self.backend.close()

    def stale_temps(self, min_age: float = STALE_TEMP_AGE) -> list[str]:
        """What killed writers left in tmp/ (store paths, `tmp/NAME`): an entry named
        `PID-...` whose process is gone, or `.ckpt-....tmp` (no process to ask), once
        it is `min_age` seconds old by its own mtime; a file, a real directory or a
        symbolic link, none of them followed (`clean_stale_temps` unlinks a link and
        removes a directory with what it holds). Anything else in tmp/ (the lock file
        of a file:// store, a link under another name) is left: prune empties tmp/."""
        if not isinstance(self.backend, LocalBackend):
            return self._stale_temp_files(min_age)
        out = []
        for name, _kind, age in self.backend.temp_entries():
            if age >= min_age and (_temp_of_dead_process(name) or _TEMP_NAME.fullmatch(name)):
                out.append(f"{layout.TMP}/{name}")
        return out

    def _stale_temp_files(self, min_age: float) -> list[str]:
        """`stale_temps` of a backend that is no local directory (files listed by name)."""
        out = []
        now = time.time()
        for name in self.backend.list(layout.TMP):
            if not _temp_of_dead_process(name.rsplit("/", 1)[-1]):
                continue
            with contextlib.suppress(OSError):
                if now - (Path(self.location) / name).stat().st_mtime >= min_age:
                    out.append(name)
        return out

    def clean_stale_temps(self) -> int:
        """Remove what killed writers left in tmp/ (`stale_temps`); how many were removed.
        A take calls this first, and never fails for what tmp/ holds: an entry that cannot
        be removed (no permission, a tree moved meanwhile) is left with one warning that
        names it, for prune (which empties tmp/) or for its owner."""
        stale = self.stale_temps()
        removed = 0
        for name in stale:
            try:
                if isinstance(self.backend, LocalBackend):
                    self.backend.remove_temp(name.split("/", 1)[1])
                else:
                    self.backend.delete(name)
            except CkptError as exc:
                self.warn(f"{exc.message}; left in place (`ckpt prune` empties {layout.TMP}/)")
                continue
            removed += 1
        return removed

    def empty_tmp(self) -> None:
        """Remove everything in tmp/ (prune, holding the store lock exclusively, so none
        of it is live): files, directories with what they hold, and symbolic links,
        unlinked, never followed."""
        if isinstance(self.backend, LocalBackend):
            for name, _kind, _age in self.backend.temp_entries():
                self.backend.remove_temp(name)
            return
        for name in self.backend.list(layout.TMP):
            self.backend.delete(name)

    # -- objects -----------------------------------------------------------------
    def index(self) -> ObjectIndex:
        if self._index is None:
            self._index = ObjectIndex()
            self.refresh_index()
        elif self._unmerged:
            self._merge_unmerged()
        return self._index

    def refresh_index(self, *, force: bool = False) -> None:
        """Read index files written since the last look (other processes' takes). If any
        file read before has gone, a prune has rewritten the index: read it all again,
        so that nothing is deduplicated against an object the prune removed.

        Only the files not seen before are read: the cost is one listing of names plus
        O(new). On a local store the listing itself is skipped while the index
        directory is as it was when last listed, and that was long enough ago to be sure
        (`_index_dir_state`); `force` lists anyway.

        A damaged index file is skipped (one warning): the objects it named are found
        through their packs' own tables when they are first missed (`read_stored`)."""
        if self._unmerged:
            self._merge_unmerged()
        state = self._index_dir_state()
        if not force and state is not None and state == self._index_dir_seen and self._index is not None:
            return
        listed = self._index_names()
        if not self._index_files.issubset(listed):
            self._index, self._index_files = ObjectIndex(), set()
            self._indexed_packs, self._tables_read, self.damaged_index = set(), set(), {}
            # a prune or a format upgrade rewrote the index; an upgrade also moved the
            # config to a newer version, which is the one to write from now on
            self.config = read_config(self.backend, f"{self.location}/{layout.CONFIG}")
        fresh = not self._index_files and not self._index
        local = isinstance(self.backend, LocalBackend)
        if fresh and (local or len(listed) >= self.SNAPSHOT_MIN_FILES):  # (on a local disk, a missing snapshot costs one open)
            self._load_snapshot(listed)
        idx = self._index if self._index is not None else ObjectIndex()
        self._index = idx
        damaged: list[str] = []
        new = sorted(listed - self._index_files)
        rows_read = 0
        for name in new:
            if local and os.path.isdir(os.path.join(self.location, name)):
                continue  # not an index file (a listing of files leaves it out too)
            try:
                files = [_parse_rows(pack_id, rows, name) for pack_id, rows in self.read_index_file(name)]
            except NotFoundError:
                continue  # removed since the listing (a prune): its replacement is listed too
            except CkptError as exc:
                self.damaged_index[name] = exc.message
                damaged.append(name)
                self._index_files.add(name)
                continue
            for parsed in files:
                self._indexed_packs.add(parsed[0])
                rows_read += _add_parsed(idx, parsed)
            self._index_files.add(name)
        idx.settle()
        self._index_dir_seen = state
        many = len(new) >= self.SNAPSHOT_MIN_FILES or (rows_read >= self.SNAPSHOT_MIN_ROWS and 4 * rows_read >= len(idx))
        if many and not self.damaged_index and state is not None:
            self._save_snapshot(state)
        if damaged:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            self.warn(
                f"index file {damaged[0]}{more} is damaged ({self.damaged_index[damaged[0]]}); "
                "objects are found through the pack tables instead; run `ckpt repair index`"
            )

    #: a process that reads this many index files at once leaves a snapshot of the whole
    #: index (cache/index-snapshot) for the next one, which reads it and the files since
    SNAPSHOT_MIN_FILES = 64
    #: ... and so does one that reads this many entry rows, a quarter of the index or more
    #: (one take of a big state: its index file is read by every restore and verify after
    #: it, where the snapshot costs a checksum and a few slices, ~15 times less)
    SNAPSHOT_MIN_ROWS = 8192

    def _load_snapshot(self, listed: set[str]) -> None:
        """Start the index from cache/index-snapshot when it is sound and every index
        file it was read from is still there (else a prune rewrote the index since)."""
        try:
            # its head first: a file it does not describe (planted, grown, a sparse
            # gigabyte) is never read whole, and one a byte longer than it says is refused
            size = snapshot_size(self.backend.read_range(INDEX_SNAPSHOT, 0, SNAPSHOT_HEAD_SIZE), len(listed))
            if size is None:
                return
            data = self.backend.read_range(INDEX_SNAPSHOT, 0, size + 1)
        except CkptError:
            return
        if len(data) != size:
            return
        got = decode_snapshot(data)
        if got is None or not got[1] <= listed:
            return
        self._index, self._index_files = got
        self._indexed_packs = set(got[0]._packs)

    def _save_snapshot(self, state: tuple[int, int, int]) -> None:
        """Write cache/index-snapshot (best effort: a read-only store has none), when the
        index directory is still as it was listed: the snapshot names exactly the files
        it holds."""
        if self._index is None:
            return
        data = encode_snapshot(self._index, self._index_files)
        if data is None or self._index_dir_state() != state:
            return
        with contextlib.suppress(CkptError, OSError):
            # a cache, checked by its checksum when read: written whole, not made durable
            self.backend.write_hint(INDEX_SNAPSHOT, data)

    def _index_names(self) -> set[str]:
        """The paths of the index files (`index/<name>`): on a local store the names in
        the directory (refresh_index skips a directory among them; anything else there is
        taken for an index file, and one that is not is damage, said once), else the
        backend's listing."""
        if not isinstance(self.backend, LocalBackend):
            return set(self.backend.list(layout.INDEX))
        try:
            # (C all the way: ~0.1 µs a name; a directory among them is skipped when read)
            return set(map(f"{layout.INDEX}/".__add__, os.listdir(os.path.join(self.location, layout.INDEX))))
        except FileNotFoundError:
            return set()
        except OSError:
            return set(self.backend.list(layout.INDEX))  # says what is wrong, as before

    #: how old (ns) the index directory's last change must be before its unchanged
    #: state is trusted to mean "no file added or removed": file-system timestamps come
    #: from a clock that lags by up to a tick, and some file systems keep whole seconds
    INDEX_DIR_SETTLED_NS = 3_000_000_000

    def _index_dir_state(self) -> tuple[int, int, int] | None:
        return self.settled_state(layout.INDEX)

    def settled_state(self, directory: str) -> tuple[int, int, int] | None:
        """A local store directory's (inode, mtime, ctime), when it changed long enough
        ago (INDEX_DIR_SETTLED_NS) that any later change (a file added, renamed in or
        removed) must show as a newer time; None when the store is not local, the
        directory cannot be read, or it changed too recently to tell (then callers list
        it). Two equal states mean the directory holds the same names."""
        if not isinstance(self.backend, LocalBackend):
            return None
        now = time.time_ns()
        try:
            st = os.stat(os.path.join(self.location, directory))
        except OSError:
            return None
        if max(st.st_mtime_ns, st.st_ctime_ns) > now - self.INDEX_DIR_SETTLED_NS:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)

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
        self._index_dir_seen = None
        with self._unmerged_lock:
            self._unmerged = []

    def forget_manifest(self, cid: bytes) -> None:
        self._manifest_cache.pop(cid, None)

    def _merge_index(self, packs: list[tuple[bytes, list[list[Any]]]], name: str) -> None:
        """The index file `name` this process just committed: its rows join the index when
        it is next used (`index()`, `refresh_index`), not now (16k rows of a big take cost
        the end of a `ckpt take` ~20 ms, for an index it never reads again)."""
        if self._index is None:
            return  # never read: the next refresh_index reads the file with the others
        self._index_files.add(name)
        with self._unmerged_lock:
            for pack_id, rows in packs:
                self._indexed_packs.add(pack_id)
                self._unmerged.append((pack_id, rows))

    def _merge_unmerged(self) -> None:
        """Add the rows _merge_index left to the index (once, whichever thread asks first)."""
        with self._unmerged_lock:
            packs, self._unmerged = self._unmerged, []
            idx = self._index
            if not packs or idx is None:
                return
            for pack_id, rows in packs:  # a column at a time: 16k rows cost ~40 ms row by row
                _add_parsed(idx, _parse_rows(pack_id, rows, "new index"))
            idx.settle()  # once for the packs of a take, not once a pack

    def has(self, oid: bytes) -> bool:
        return oid in self.index()

    def read_stored(self, oid: bytes) -> tuple[IndexEntry, bytes]:
        entry = self.index().get(oid)
        if entry is None:
            # written since the index was read, by another process or host: the index
            # files not seen yet name it (a listing and the new files, nothing more)
            self.refresh_index(force=True)
            entry = self.index().get(oid)
        if entry is None:
            self.find_in_packs(oid)
            entry = self.index().get(oid)
        if entry is None:
            raise CorruptError(
                f"object {oid.hex()[:12]} is missing from the store", hint="run `ckpt verify` to see which checkpoints need it"
            )
        try:
            stored = self.backend.read_range(pack_path(entry.pack), entry.offset, entry.stored_len)
        except NotFoundError:
            # a prune that ran since the index was read may have repacked the object: the
            # index it rewrote says where it is now; else the pack is gone, and the store
            # is damaged (exit 5, as for a damaged pack), not a name the user got wrong
            self.refresh_index(force=True)
            moved = self.index().get(oid)
            if moved is None or moved.pack == entry.pack:
                raise CorruptError(
                    f"pack {pack_path(entry.pack)} is missing from the store at {self.location} (its index names it for object "
                    f"{oid.hex()[:12]}): the store is damaged",
                    hint="run `ckpt verify` to see which checkpoints need it, and copy the pack back from a copy of the store "
                    "(docs/runbooks/store-damaged.md)",
                ) from None
            entry = moved
            stored = self.backend.read_range(pack_path(entry.pack), entry.offset, entry.stored_len)
        if len(stored) != entry.stored_len:
            raise CorruptError(f"pack {entry.pack.hex()[:12]} is truncated (object {oid.hex()[:12]})", hint="run `ckpt verify`")
        return entry, stored

    @property
    def prefetch(self) -> Callable[[bytes], None] | None:
        """On a backend that reads ahead (object storage), a call announcing that
        `get(oid)` comes soon, so that its stored bytes are fetched meanwhile, on threads
        of the backend's own; None on a local disk."""
        return self._prefetch if self.backend.fetch_threads else None

    def _prefetch(self, oid: bytes) -> None:
        entry = self.index().get(oid)
        if entry is not None:
            self.backend.prefetch(pack_path(entry.pack), entry.offset, entry.stored_len)

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
                raise CorruptError(f"{name}: content does not match its name (the manifest is damaged)", hint=DAMAGED_MANIFEST_HINT)
            try:
                m = Manifest.decode(data, name)
            except (CorruptError, LimitExceededError) as exc:  # damage; a newer format's (exit 6) keeps its own hint
                if generic_hint(exc):
                    exc.hint = DAMAGED_MANIFEST_HINT
                raise
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

    def replace_manifest_bytes(self, data: bytes) -> bytes:
        """Write the manifest `data` over whatever its path holds (one found damaged, or
        another's bytes: `ckpt copy` puts it right); returns its id."""
        cid = hashlib.sha256(data).digest()
        Manifest.decode(data, "copied manifest")
        self.backend.replace(layout.manifest_path(cid), data)
        self._manifest_cache.pop(cid, None)
        return cid

    def drop_index_rows(self, drop: dict[bytes, set[bytes]]) -> int:
        """Rewrite each index file that names, for a pack P of `drop`, an object of
        drop[P], without those rows: the objects of a lost pack that were written again
        elsewhere (`ckpt copy`), so that readers, who take the first entry of an object,
        find the new one, and no index names the lost pack for them. Each new file is
        written before the old one is deleted (a reader that misses the old file reads
        the index again, as after a prune); a damaged index file is left as it is (`ckpt
        repair index`). Returns: how many index files were rewritten."""
        rewritten = 0
        for name in sorted(self._index_names()):
            try:
                packs = self.read_index_file(name)
            except CkptError:
                continue  # gone since the listing, or damaged
            if not any(pid in drop for pid, _rows in packs):
                continue
            kept: list[tuple[bytes, list[list[Any]]]] = []
            changed = False
            try:
                for pid, rows in packs:
                    entries = list(parse_entry_rows(rows, pid, name))
                    gone = drop.get(pid, set())
                    left = [[oid, *e[1:]] for oid, e in entries if oid not in gone]
                    changed |= len(left) != len(entries)
                    if left:
                        kept.append((pid, left))
            except CkptError:
                continue
            if not changed:
                continue
            if kept:
                write_index(self.backend, kept, self.version)
            self.backend.delete(name)
            rewritten += 1
        self.reset_index()
        return rewritten

    def add_manifest_bytes(self, data: bytes) -> bytes:
        """Commit the manifest `data` (an import's, a copy's); returns its id. One its path
        holds already is kept when it is these bytes (as the store holds them, not a
        cache's copy), else written over: a damaged one is put right by importing again."""
        cid = hashlib.sha256(data).digest()
        Manifest.decode(data, "imported manifest")
        path = layout.manifest_path(cid)
        if not self.backend.exists(path):
            self.backend.write_atomic(path, data)
            return cid
        try:
            same = self.backend.read_stored_copy(path) == data
        except CkptError:
            same = False  # unreadable (a link, gone meanwhile): written again
        if not same:
            self.replace_manifest_bytes(data)
        return cid


def _temp_of_dead_process(name: str) -> bool:
    """Whether `name` (in tmp/) is `PID-...` and process PID is gone (a pid reused
    since, or one we may not signal, counts as alive: the file is left)."""
    pid_text = name.split("-", 1)[0]
    if not pid_text.isdigit() or "-" not in name:
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False
