"""`memory://NAME`: a store held in this process's memory, for tests and short-lived
work. Stores of the same name are the same store while the process lives. Every
operation takes one real lock, so conditional writes are atomic between threads: the
backend the race properties of the contract are proven on."""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections.abc import Iterator, Mapping

from ckptcli.errors import InvalidInputError, NotFoundError
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo, ObjectWriter
from ckptcli.store.backends.paths import check_limit, check_path, check_prefix

__all__ = ["MemoryBackend"]

_STORES: dict[str, dict[str, tuple[bytes, str]]] = {}
_LOCKS: dict[str, threading.Lock] = {}
_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_STORES_LOCK = threading.Lock()
_VERSION = itertools.count(1)


class MemoryBackend(ObjectBackend):
    """Objects in a dict shared by every MemoryBackend of the same `name`."""

    def __init__(self, name: str = "") -> None:
        self.url = f"memory://{name}"
        with _STORES_LOCK:
            self._objects = _STORES.setdefault(name, {})
            self._lock = _LOCKS.setdefault(name, threading.Lock())

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> MemoryBackend:
        """Args: `memory://NAME`, store options (it takes none). Returns: the backend of
        the store NAME. Raises: InvalidInputError."""
        scheme, sep, name = url.partition("://")
        if scheme.lower() != "memory" or not sep:
            raise InvalidInputError("not a memory:// URL", hint="write memory://NAME")
        if not _NAME.fullmatch(name):
            raise InvalidInputError(
                "a memory:// store's name is letters, digits and . _ - (up to 200)", hint="write memory://NAME, e.g. memory://tests"
            )
        if options:
            raise InvalidInputError(
                f"a memory:// store takes no store options, got {', '.join(sorted(options))}",
                hint="drop --store-option and CKPT_STORE_OPTIONS for a memory:// store",
            )
        return cls(name)

    @staticmethod
    def forget(name: str) -> None:
        """Drop the store `name` (tests start from an empty one)."""
        with _STORES_LOCK:
            _STORES.pop(name, None)
            _LOCKS.pop(name, None)

    def _info(self, path: str, data: bytes, etag: str) -> ObjectInfo:
        return ObjectInfo(path, len(data), etag)

    @staticmethod
    def _etag(data: bytes) -> str:
        # a content hash alone would repeat when the same bytes are put again; a CAS
        # must see that replacement as a new version, as S3's ETag of a new PUT does not
        # promise otherwise either
        return f"{hashlib.sha256(data).hexdigest()[:16]}-{next(_VERSION)}"

    def _must(self, path: str) -> tuple[bytes, str]:
        check_path(path, self.url)
        try:
            return self._objects[path]
        except KeyError:
            raise NotFoundError(f"{self.url}/{path}: no such object") from None

    def get(self, path: str) -> bytes:
        with self._lock:
            return self._must(path)[0]

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InvalidInputError(f"a range of {self.url}/{path} with offset {offset} and length {length}: both must be >= 0")
        with self._lock:
            return self._must(path)[0][offset : offset + length]

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        check_limit(limit, f"{self.url}/{path}")
        with self._lock:
            data, etag = self._must(path)
        return (data if limit is None else data[:limit]), etag

    def stat(self, path: str) -> ObjectInfo:
        with self._lock:
            data, etag = self._must(path)
            return self._info(path, data, etag)

    def put(self, path: str, data: bytes) -> ObjectInfo:
        check_path(path, self.url)
        data = bytes(data)
        with self._lock:
            etag = self._etag(data)
            self._objects[path] = (data, etag)
            return self._info(path, data, etag)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        check_path(path, self.url)
        data = bytes(data)
        with self._lock:
            if path in self._objects:
                return False
            self._objects[path] = (data, self._etag(data))
            return True

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        check_path(path, self.url)
        data = bytes(data)
        with self._lock:
            now = self._objects.get(path)
            if (now is None) != (etag is None) or (now is not None and now[1] != etag):
                return None
            new = self._etag(data)
            self._objects[path] = (data, new)
            return self._info(path, data, new)

    def open_writer(self, path: str) -> ObjectWriter:
        check_path(path, self.url)
        return _MemoryWriter(self, path)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        check_prefix(prefix, self.url)
        with self._lock:
            found = sorted((p, v) for p, v in self._objects.items() if p.startswith(prefix))
        for path, (data, etag) in found:
            yield self._info(path, data, etag)

    def delete(self, path: str) -> None:
        check_path(path, self.url)
        with self._lock:
            self._objects.pop(path, None)


class _MemoryWriter(ObjectWriter):
    def __init__(self, backend: MemoryBackend, path: str) -> None:
        self._backend, self._path = backend, path
        self._parts: list[bytes] | None = []

    def write(self, data: bytes | memoryview) -> None:
        if self._parts is None:
            raise ValueError("write to a committed or aborted writer")
        self._parts.append(bytes(data))

    def commit(self) -> ObjectInfo:
        if self._parts is None:
            raise ValueError("commit of a committed or aborted writer")
        data, self._parts = b"".join(self._parts), None
        return self._backend.put(self._path, data)

    def abort(self) -> None:
        self._parts = None
