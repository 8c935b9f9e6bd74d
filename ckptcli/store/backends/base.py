"""The object-storage contract every store backend implements (docs/design.md, "Backends").

A store is a set of objects named by '/'-separated paths relative to the store root
(ckptcli.store.layout computes every one of them). The contract is what object storage
(S3, GCS, Azure, and the local file system made to behave like them) can do, nothing
more: read an object whole or a range of it, put an object whole, put it only if
nothing is there yet, replace it only if it is still the version read (compare-and-swap
on an ETag), stream a large object in parts that become visible all at once, list a
prefix, delete, stat. There is no rename, no append and no lock: a store builds those
from these operations (refs move by compare-and-swap, locks are objects).

Visibility and durability, on every backend: a put, a put_if_absent or a committed
writer is visible whole or not at all to every reader once it returns, and durable as
the backend's medium is (the local backend syncs the file and its directory).
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from ckptcli.errors import NotFoundError

__all__ = ["ObjectBackend", "ObjectInfo", "ObjectWriter"]


@dataclass(frozen=True)
class ObjectInfo:
    """What `stat` and `list` say about one object."""

    path: str  #: relative to the store root
    size: int  #: bytes
    etag: str  #: a token that changes whenever the object's bytes are replaced


class ObjectWriter(ABC):
    """A large object written in parts (multipart upload). Nothing is visible under its
    path until `commit` returns; `abort` (or leaving a `with` block by an exception)
    leaves nothing behind that a reader can see."""

    @abstractmethod
    def write(self, data: bytes | memoryview) -> None:
        """Args: the next bytes. Raises: StoreIOError."""

    @abstractmethod
    def commit(self) -> ObjectInfo:
        """Makes the object visible, whole, under its path (replacing what was there).
        Returns: its ObjectInfo. Raises: StoreIOError (then nothing is visible)."""

    @abstractmethod
    def abort(self) -> None:
        """Discards what was written; idempotent, never raises for a missing part."""

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()


class ObjectBackend(ABC):
    """Moves a store's objects. Paths are '/'-separated, relative to the store root,
    never start with '/' and never hold '..' or empty parts (callers take them from
    ckptcli.store.layout; a backend may refuse others with InvalidInputError)."""

    #: the store's location as the user can be shown it (a URL or a path; never a secret)
    url: str = ""
    #: whether put_if_absent and put_if_match are atomic against other hosts' writers.
    #: Where they are not, a store serialises its ref moves under its lock instead.
    conditional_writes: bool = True

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Args: path. Returns: the object's bytes. Raises: NotFoundError, StoreIOError."""

    @abstractmethod
    def get_range(self, path: str, offset: int, length: int) -> bytes:
        """Args: path, offset >= 0, length >= 0. Returns: the bytes [offset,
        offset+length), fewer at the object's end, b"" past it. Raises: NotFoundError,
        StoreIOError."""

    def get_view(self, path: str) -> bytes | memoryview:
        """As `get`, possibly as a read-only view rather than a copy (`get_range_view`)."""
        return self.get(path)

    def get_range_view(self, path: str, offset: int, length: int) -> bytes | memoryview:
        """As `get_range`, for a caller that only slices the result: a client that
        receives into a buffer of its own may return a read-only view of it rather than
        a copy (megabytes copied under the interpreter lock, which the threads reading
        beside it wait for)."""
        return self.get_range(path, offset, length)

    @abstractmethod
    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        """Args: path; limit: None to read the object whole, else read at most its first
        `limit` (>= 0) bytes (one ranged read: a planted object of any size costs at most
        that much). Returns: (bytes, etag) of one version, read together (the etag is the
        one of the object those bytes came from; with a limit, `len(bytes) == limit` when
        the object is that long or longer). Raises: NotFoundError, StoreIOError,
        InvalidInputError (a negative limit)."""

    @abstractmethod
    def stat(self, path: str) -> ObjectInfo:
        """Args: path. Returns: its ObjectInfo. Raises: NotFoundError, StoreIOError."""

    @abstractmethod
    def put(self, path: str, data: bytes) -> ObjectInfo:
        """Args: path, the whole object. Replaces what was there, visible whole or not
        at all. Returns: the new ObjectInfo. Raises: StoreIOError."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Args: path, the whole object. Writes it only where nothing is at `path`.
        Returns: True if this call wrote it, False if an object was already there (not
        an error: a content-named object that exists is the same object). Raises:
        StoreIOError."""

    @abstractmethod
    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        """Compare-and-swap. Args: path, the whole object, the etag the caller read
        (None: the caller saw no object). Writes only if the object at `path` is still
        that version (still absent, for None). Returns: the new ObjectInfo, or None when
        another writer got there first (re-read and decide again). Raises: StoreIOError."""

    @abstractmethod
    def open_writer(self, path: str) -> ObjectWriter:
        """Args: path. Returns: a writer for a large object streamed in parts (see
        ObjectWriter). Raises: StoreIOError."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Args: a directory-like prefix ("packs/", "refs/latest/"; "" for all).
        Returns: every object whose path starts with it, at any depth, sorted by path.
        Raises: StoreIOError."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Args: path. Removes the object; a missing one is not an error. Raises: StoreIOError."""

    def exists(self, path: str) -> bool:
        """Args: path. Returns: whether an object is there. Raises: StoreIOError."""
        try:
            self.stat(path)
        except NotFoundError:
            return False
        return True

    def list_paths(self, prefix: str) -> builtins.list[str]:
        """Args: a prefix. Returns: the paths `list(prefix)` yields."""
        return [info.path for info in self.list(prefix)]

    def check_bucket(self) -> None:  # noqa: B027 - most backends have no bucket to check
        """Asked when the store's config is not at its URL, to tell a missing bucket (or
        container) from a prefix that holds no store. Raises: NoBucketError when the
        bucket the URL names does not exist. A backend without buckets does nothing, and
        so does one that cannot tell (no permission to list, say): the caller then
        reports no store there."""

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Releases connections and handles; the backend is not used afterwards."""
