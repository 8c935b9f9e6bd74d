"""A store's operations (`Backend`) on any object-storage backend (`ObjectBackend`:
S3, GCS, Azure, memory://, fsspec), built from the contract's operations alone.

The local directory backend does these natively (temp file + rename, O_APPEND, flock);
here each one is made of what object storage can do:

- a whole-file write is a put, visible whole or not at all;
- a large file written in pieces (a pack, whose name is its hash, known only at the
  end) is spooled to a local temporary file, then uploaded under its final name (one put,
  or a multipart upload for a large one): nothing is renamed in the store;
- a ref moves, and a reflog entry is appended, by a compare-and-swap loop on its object
  (read_versioned, write_if_match), where the backend's conditional writes are atomic
  (`ref_cas`); elsewhere (fsspec) under the "refs" lock;
- a lock is a set of lock objects (ckptcli.store.objlocks), one per holder, so that it
  holds across hosts; the marks of long-lived writers are shared locks named "writers";
- index files and manifests (named by their SHA-256) are read through a local cache
  (ckptcli.store.objcache), checked against their names, so never stale;
- ranged reads of packs (immutable, content-named) go through a small cache of 8 MiB
  blocks: a restore reads a pack's objects one after another, and one request per block
  costs what one request per object would cost a thousand times over. A reader announces
  what it will read (`prefetch`), and those blocks are fetched ahead on a few threads;
  packs are kept small (`pack_target`: two blocks), so that a pack costs two requests.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import IO

from ckptcli import notices
from ckptcli._util.threads import executor
from ckptcli.errors import CkptError, ConflictError, NotFoundError, StoreIOError
from ckptcli.store import objlocks
from ckptcli.store.backend import Backend, Mark, too_large
from ckptcli.store.backends import redact
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo
from ckptcli.store.backends.paths import path_problem
from ckptcli.store.layout import CACHE, INDEX, LOCKS, LOGS, MANIFESTS, PACK_FILE_MAX, PACKS, REFS, versioned_cap
from ckptcli.store.objcache import ObjectCache

__all__ = ["ObjectMark", "ObjectStoreIO"]

#: a spooled pack this large or larger is uploaded in parts
_MULTIPART_FROM = 32 << 20
_PART = 8 << 20
#: compare-and-swap attempts of one append before giving up
_APPEND_TRIES = 50
#: ranged reads of packs are served from blocks of this size, the last _BLOCKS kept;
#: blocks a reader announces (`prefetch`) are fetched ahead, _FETCHERS at once
_BLOCK = 8 << 20
_BLOCKS = 16
_FETCHERS = 4
#: blocks fetched ahead and not read yet, at most (the rest of the cache: blocks being read)
_AHEAD = 8


#: the last bytes of an object that a write finding one at its content name compares with
#: its own, with the size: a truncated or planted object differs in one or the other
_TAIL = 4096


def _content_named(path: str) -> bool:
    """Whether `path` names an immutable object by the hash of its bytes (a pack, an
    index file, a manifest): written once, and "already there" is success when what is
    there is that object (`ObjectStoreIO._holds`)."""
    directory, _, name = path.rpartition("/")
    return directory.split("/", 1)[0] in (PACKS, INDEX, MANIFESTS) and ObjectCache.cacheable(name)


class ObjectMark:
    """A long-lived writer's mark on object storage: a shared lock named "writers"
    (`Backend.mark_writer`), refreshed while it lives, stale once its writer is gone."""

    def __init__(self, held: objlocks.HeldLock) -> None:
        self._held = held
        self.name = held.record.id

    def close(self) -> None:
        self._held.release()


class ObjectStoreIO(Backend):
    """`Backend` over an `ObjectBackend`. Paths are the store layout's, unchanged."""

    commit_threads = 3  # packs uploading at once (each one put, or a multipart upload of concurrent parts)
    fetch_threads = _FETCHERS
    pack_target = 15 << 20  # a pack, one put; two blocks (below) for a restore to read

    def __init__(self, objects: ObjectBackend, cache: ObjectCache | None = None) -> None:
        self.objects = objects
        self.ref_cas = objects.conditional_writes  # else refs move under the "refs" lock
        self.url = redact(objects.url)
        self.cache = cache
        self._blocks: collections.OrderedDict[tuple[str, int], Future[bytes | memoryview]] = collections.OrderedDict()
        self._blocks_lock = threading.Lock()
        #: keys under the store's prefix that cannot be its objects -> what is wrong (listings skip them)
        self.strange_keys: dict[str, str] = {}
        #: where to say that a listing skipped one (the Store sets its `warn`; default: the notices handler)
        self.on_strange: Callable[[str], None] | None = None
        self._listed: set[str] = set()  # the prefixes listed so far
        self._ahead: set[tuple[str, int]] = set()  # blocks fetched ahead, not read yet

    def check_bucket(self) -> None:
        self.objects.check_bucket()

    # -- reads ------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        directory, _, name = path.rpartition("/")
        if self.cache is None or directory not in (INDEX, MANIFESTS) or not ObjectCache.cacheable(name):
            return self._get(path)
        data = self.cache.get(name)
        if data is None:
            data = self._get(path)
            self.cache.put(name, data)  # kept only if its bytes are what its name says
        return data

    def read_stored_copy(self, path: str) -> bytes:
        return self._get(path)  # the bucket's bytes, whatever the cache holds

    def cached_copy(self, path: str) -> bytes | None:
        directory, _, name = path.rpartition("/")
        if self.cache is None or directory not in (INDEX, MANIFESTS) or not ObjectCache.cacheable(name):
            return None
        try:
            return self.cache.get(name)
        except CkptError:
            return None  # a cache that cannot be read holds no copy anyone reads

    def _get(self, path: str) -> bytes:
        """The object at `path`, whole; a record file or a reflog (`versioned_cap`) by a
        ranged read of one byte more than it can hold (one request, as a get), refused when larger."""
        cap = versioned_cap(path)
        if cap is None:
            return self.objects.get(path)
        if path.startswith(PACKS + "/"):
            return bytes(self._get_pack(path, cap))
        data = self.objects.get_range(path, 0, cap + 1)
        if len(data) > cap:
            raise too_large(f"{self.url}/{path}", cap, path)
        return data

    def _get_pack(self, path: str, cap: int) -> bytes | memoryview:
        """A pack whole, as a view where the backend gives one: its size asked first (a
        pack can be large: one larger than ckpt writes is refused before any byte of it
        is fetched), then one ranged read of at most `cap` + 1 bytes (an object replaced
        in between is refused after that many)."""
        if self.objects.stat(path).size > cap:
            raise too_large(f"{self.url}/{path}", cap, path)
        data = self.objects.get_range_view(path, 0, cap + 1)
        if len(data) > cap:
            raise too_large(f"{self.url}/{path}", cap, path)
        return data

    def read_view(self, path: str) -> bytes | memoryview:
        if not path.startswith(PACKS + "/"):
            return self.read(path)
        return self._get_pack(path, PACK_FILE_MAX)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if not path.startswith(PACKS + "/") or length <= 0 or length > _BLOCK:
            return self.objects.get_range(path, offset, length)
        first, last = offset // _BLOCK, (offset + length - 1) // _BLOCK
        start = offset - first * _BLOCK
        if first == last:
            return bytes(self._block(path, first)[start : start + length])  # the one copy: the object's bytes
        data = b"".join(self._block(path, b) for b in range(first, last + 1))
        return data[start : start + length]

    def prefetch(self, path: str, offset: int, length: int) -> None:
        """Start fetching the blocks of a pack range a reader announced, on the fetch
        threads; a block already cached or on its way is not asked for again."""
        if not path.startswith(PACKS + "/") or length <= 0 or length > _BLOCK:
            return
        for number in range(offset // _BLOCK, (offset + length - 1) // _BLOCK + 1):
            key = (path, number)
            with self._blocks_lock:
                if key in self._blocks:
                    continue
                if len(self._ahead) >= _AHEAD:
                    return  # enough fetched and not read yet: more would push them out of the cache
                self._ahead.add(key)
                fut: Future[bytes | memoryview] = Future()
                self._blocks[key] = fut
                self._evict()
            executor("ckpt-fetch", self.fetch_threads).submit(self._fetch_ahead, key, fut)

    def _fetch_ahead(self, key: tuple[str, int], fut: Future[bytes | memoryview]) -> None:
        with contextlib.suppress(Exception):  # in the future: the reader that waits for it raises it
            self._fetch(key, fut)

    def _evict(self) -> None:
        while len(self._blocks) > _BLOCKS:
            self._ahead.discard(self._blocks.popitem(last=False)[0])

    def _block(self, path: str, number: int) -> bytes | memoryview:
        """Block `number` of the pack at `path` (fewer bytes at its end), fetched once
        however many threads ask for it at the same time."""
        key = (path, number)
        with self._blocks_lock:
            fut = self._blocks.get(key)
            mine = fut is None
            if fut is None:
                fut = self._blocks[key] = Future()
                self._evict()
            else:
                self._blocks.move_to_end(key)
            self._ahead.discard(key)
        return self._fetch(key, fut) if mine else fut.result()

    def _fetch(self, key: tuple[str, int], fut: Future[bytes | memoryview]) -> bytes | memoryview:
        path, number = key
        try:
            data = self.objects.get_range_view(path, number * _BLOCK, _BLOCK)
        except BaseException as exc:
            with self._blocks_lock:
                if self._blocks.get(key) is fut:
                    del self._blocks[key]
                    self._ahead.discard(key)
            fut.set_exception(exc)
            raise
        fut.set_result(data)
        return data

    def list(self, prefix: str) -> builtins.list[str]:
        return self._store_paths(prefix.rstrip("/") + "/")

    def list_names(self, directory: str) -> builtins.list[str]:
        start = directory.rstrip("/") + "/"
        return [p[len(start) :] for p in self._store_paths(start) if "/" not in p[len(start) :]]

    def _store_paths(self, prefix: str) -> builtins.list[str]:
        """The paths under `prefix`, but keys that cannot be a store's objects (an empty,
        '.' or '..' part: put in the bucket by something else): each is skipped, never
        read, copied or deleted, and named once (`strange_keys`, `on_strange`)."""
        return [info.path for info in self._store_infos(prefix)]

    def _store_infos(self, prefix: str) -> Iterator[ObjectInfo]:
        """`_store_paths`, each with what the listing says of it (its size)."""
        self._listed.add(prefix)
        for info in self.objects.list(prefix):
            problem = path_problem(info.path)
            if not problem:
                yield info
            elif info.path not in self.strange_keys:
                self.strange_keys[info.path] = problem
                say = self.on_strange or notices.handler()
                if say is not None:
                    say(f"{self.url}: skipped the key {info.path!r}: not a store path ({problem}); ckpt wrote no such key")

    def sweep(self) -> dict[str, str]:
        """Lists every directory of the store's layout once (`ckpt verify`), so that keys
        no other listing reaches (`locks/a/../b`, `cache/./x`) are found too; keys at the
        top of the prefix are not listed by any command. Returns: `strange_keys`."""
        for directory in (PACKS, INDEX, MANIFESTS, REFS, LOGS, LOCKS, CACHE):
            if f"{directory}/" not in self._listed:  # what a listing of this object met is known already
                self._store_paths(f"{directory}/")
        return self.strange_keys

    def sizes(self, directory: str) -> dict[str, int]:
        """One listing (sizes come with the names), skipping the keys `_store_paths` skips."""
        start = directory.rstrip("/") + "/"
        return {name: info.size for info in self._store_infos(start) if "/" not in (name := info.path[len(start) :])}

    def exists(self, path: str) -> bool:
        return self.objects.exists(path)

    def size(self, path: str) -> int:
        return self.objects.stat(path).size

    # -- writes -----------------------------------------------------------------------
    def write_atomic(self, path: str, data: bytes) -> None:
        data = bytes(data)
        if not _content_named(path):
            self.objects.put(path, data)
        elif not self.objects.put_if_absent(path, data) and not self._holds(path, len(data), data[-_TAIL:]):
            self.objects.put(path, data)  # the same bytes by its name, whoever else writes them

    def write_atomic_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        for path, data in items:
            self.write_atomic(path, data)

    def replace(self, path: str, data: bytes) -> None:
        self.objects.put(path, bytes(data))  # a put replaces; the cache's copy, named by its hash, stays right

    def append(self, path: str, data: bytes) -> None:
        """The reflog's append: read the log and its version, put it back longer only if
        it is still that version (another host may append meanwhile), else again."""
        for _ in range(_APPEND_TRIES):
            old, etag = self.read_versioned(path)
            old = old or b""
            if self.objects.put_if_match(path, old[: old.rfind(b"\n") + 1] + data, etag) is not None:
                return
        raise ConflictError(f"{self.url}/{path}: {_APPEND_TRIES} writers appended at once; nothing was appended", hint="try again")

    def read_versioned(self, path: str) -> tuple[bytes | None, str | None]:
        """The object at `path` and its etag ((None, None) where there is none); a ref or
        a reflog (`versioned_cap`) by a ranged read of one byte more than it can hold (one
        request, as `_get`), refused when larger."""
        cap = versioned_cap(path)
        try:
            data, etag = self.objects.get_versioned(path, None if cap is None else cap + 1)
        except NotFoundError:
            return None, None
        if cap is not None and len(data) > cap:
            raise too_large(f"{self.url}/{path}", cap, path)
        return data, etag

    def version(self, path: str) -> str | None:
        try:
            return self.objects.stat(path).etag
        except NotFoundError:
            return None

    def write_if_match(self, path: str, data: bytes, version: str | None) -> bool:
        return self.objects.put_if_match(path, bytes(data), version) is not None

    def open_temp(self) -> tuple[str, IO[bytes]]:
        try:
            handle = tempfile.TemporaryFile(prefix="ckpt-upload-")  # noqa: SIM115 - the caller closes it (commit_temp, discard_temp)
        except OSError as exc:
            raise StoreIOError(f"cannot create a local temporary file to upload through: {exc.strerror}") from None
        return f"upload-{secrets.token_hex(8)}", handle

    def commit_temp(self, temp: str, handle: IO[bytes], path: str) -> None:
        try:
            handle.flush()
            size = handle.seek(0, 2)
            handle.seek(0)
            if size < _MULTIPART_FROM:
                self.write_atomic(path, handle.read())
                return
            handle.seek(size - min(size, _TAIL))
            tail = handle.read()
            handle.seek(0)
            if _content_named(path) and self._holds(path, size, tail):
                return  # the same pack, uploaded before (a copy or a take that raced this one)
            with self.objects.open_writer(path) as writer:
                while part := handle.read(_PART):
                    writer.write(part)
                writer.commit()
        except OSError as exc:
            raise StoreIOError(f"cannot read back the local copy of {path} to upload it: {exc.strerror}") from None
        finally:
            handle.close()

    def _holds(self, path: str, size: int, tail: bytes) -> bool:
        """Whether the object at content-named `path` is the one to be written there, of
        `size` bytes ending in `tail`: False when there is none, and when there is another
        (a generic fsspec store writes in place, so a write killed midway leaves a
        truncated object at the final name; or other bytes were put at that key), which
        is named in a warning: the caller writes over it. An object of the same size and
        last bytes is taken for the same; `ckpt verify --read-data` re-hashes it."""
        try:
            info = self.objects.stat(path)
        except NotFoundError:
            return False
        if info.size == size and self.objects.get_range(path, size - len(tail), len(tail)) == tail:
            return True
        say = notices.handler()
        if say is not None:
            what = f"{info.size} bytes, not {size}" if info.size != size else "other bytes"
            say(
                f"{self.url}/{path}: the object there is not the one its name says ({what}: "
                "left by a write cut short, or put there by something else); replaced it"
            )
        return False

    def discard_temp(self, temp: str, handle: IO[bytes]) -> None:
        with contextlib.suppress(OSError):
            handle.close()

    def delete(self, path: str) -> None:
        self.objects.delete(path)

    # -- locks ------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str, *, shared: bool, wait: float = 30.0) -> Iterator[None]:
        with objlocks.acquire(self.objects, not shared, wait=wait, name=name):
            yield  # released as the block ends; quietly when it fails (HeldLock.release)

    @contextlib.contextmanager
    def reading_lock(self, name: str, *, wait: float = 300.0) -> Iterator[None]:
        try:
            held = objlocks.acquire(self.objects, False, wait=wait, name=name)
        except StoreIOError as exc:  # no right to write a lock object: read without it
            notices.info(f"reading {self.url} without its lock ({exc.message})")
            yield
            return
        with held:
            yield

    def lock_state(self, name: str) -> tuple[str, str | None]:
        live = [i.record for i in objlocks.list_locks(self.objects) if i.record and i.record.name == name and not i.stale]
        if not live:
            return "free", None
        held = next((r for r in live if r.exclusive), live[0])
        return held.kind, held.holder(time.time())

    def mark_writer(self, kind: str) -> ObjectMark:
        return ObjectMark(objlocks.acquire(self.objects, False, wait=0, name="writers", command=kind))

    def live_writers(self, exclude: Mark | None = None) -> builtins.list[str]:
        live = []
        for info in objlocks.list_locks(self.objects):
            if info.record is None or info.record.name != "writers":
                continue
            if info.stale:
                self.objects.delete(info.path)  # its writer died (the caller holds the store lock exclusively)
            elif exclude is None or info.record.id != exclude.name:
                live.append(info.record.id)
        return live

    def close(self) -> None:
        self.objects.close()
