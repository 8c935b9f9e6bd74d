"""A backend wrapper that injects faults (restic's damageOnceBackend, generalised):
`FaultyBackend(inner, fail_on=N, corrupt_on=M)` counts every call of the contract
(get, get_range, get_versioned, stat, put, put_if_absent, put_if_match, open_writer,
list, delete; 1 is the first) and

* on call N raises StoreIOError before `inner` sees it (a failed put writes nothing);
* on call M flips one byte (xor 0xff, the middle one) of the bytes the call moves: of
  what a read returns (inner keeps its bytes), or of what a put writes (inner stores the
  damaged bytes). A call that moves no bytes, or an empty object, is left as it is.

`calls` records (method, path) of every call, the faulty ones included; `limits`, the
limit of each get_versioned (None: the whole object).

`conflict_once=PATH` makes the first put_if_match on PATH answer None without writing,
as if another writer had replaced the object first: a compare-and-swap loop must read
again and retry.
"""

from __future__ import annotations

from collections.abc import Iterator

from ckptcli.errors import StoreIOError
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo, ObjectWriter

__all__ = ["FaultyBackend", "flip"]


def flip(data: bytes) -> bytes:
    """`data` with its middle byte inverted (empty data stays empty)."""
    if not data:
        return data
    at = len(data) // 2
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


class FaultyBackend(ObjectBackend):
    def __init__(
        self, inner: ObjectBackend, *, fail_on: int | None = None, corrupt_on: int | None = None, conflict_once: str | None = None
    ) -> None:
        self.inner = inner
        self.fail_on, self.corrupt_on = fail_on, corrupt_on
        self.conflict_once = conflict_once
        self.url = inner.url
        self.conditional_writes = inner.conditional_writes
        self.calls: list[tuple[str, str]] = []
        self.limits: list[tuple[str, int | None]] = []

    def _call(self, method: str, path: str) -> bool:
        """Counts the call; raises on the failing one. Returns: whether to corrupt it."""
        self.calls.append((method, path))
        n = len(self.calls)
        if n == self.fail_on:
            raise StoreIOError(f"injected failure of call {n} ({method} {self.url}/{path})")
        return n == self.corrupt_on

    def get(self, path: str) -> bytes:
        bad = self._call("get", path)
        data = self.inner.get(path)
        return flip(data) if bad else data

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        bad = self._call("get_range", path)
        data = self.inner.get_range(path, offset, length)
        return flip(data) if bad else data

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        bad = self._call("get_versioned", path)
        self.limits.append((path, limit))
        data, etag = self.inner.get_versioned(path, limit)
        return (flip(data) if bad else data), etag

    def stat(self, path: str) -> ObjectInfo:
        self._call("stat", path)
        return self.inner.stat(path)

    def put(self, path: str, data: bytes) -> ObjectInfo:
        bad = self._call("put", path)
        return self.inner.put(path, flip(data) if bad else data)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        bad = self._call("put_if_absent", path)
        return self.inner.put_if_absent(path, flip(data) if bad else data)

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        bad = self._call("put_if_match", path)
        if path == self.conflict_once:
            self.conflict_once = None
            return None  # "another writer got there first"
        return self.inner.put_if_match(path, flip(data) if bad else data, etag)

    def open_writer(self, path: str) -> ObjectWriter:
        self._call("open_writer", path)
        return self.inner.open_writer(path)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._call("list", prefix)
        return self.inner.list(prefix)

    def delete(self, path: str) -> None:
        self._call("delete", path)
        self.inner.delete(path)

    def close(self) -> None:
        self.inner.close()
