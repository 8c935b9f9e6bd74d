"""Decoding EVs back into Python values (formats/v1.md "Encoded values").

Every decode is bounded: containers nest at most MAX_DEPTH deep, references at most
MAX_DEPTH + 1 deep along any path, and a `Budget` caps the total output; a node is
checked against what its parent says of it before it is used.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ckptcli.errors import CorruptError, LimitExceededError
from ckptcli.format import limits
from ckptcli.format.ev import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    EXT_STR,
    Ext,
    LazyBytes,
    ObjectSource,
    _pool,
    _workers,
    check_tree_node,
    deep_recursion,
    parse_tree_node,
    unpack_ev,
)

__all__ = ["Budget", "Decoder"]

_T = TypeVar("_T")


def _held_bytes() -> int:
    return min(limits.MAX_HELD_BYTES, limits.MAX_DECODED_BYTES)


def _held_items() -> int:
    return min(limits.MAX_HELD_ITEMS, limits.MAX_DECODED_ITEMS)


@dataclass
class Budget:
    """How much a decode may produce; shared across the objects of one checkpoint.

    The default is for decodes that hold the value in memory (a fraction of RAM,
    limits.MAX_HELD_BYTES); `Budget.streaming()` for writers that stream it and hold
    only a piece at a time (ckptcli.document), bounded by limits.MAX_DECODED_BYTES."""

    max_bytes: int = field(default_factory=_held_bytes)
    max_items: int = field(default_factory=_held_items)
    used_bytes: int = 0
    used_items: int = 0
    #: the environment variables that raise the two limits (for the error's hint)
    env: tuple[str, str] = ("CKPT_MAX_HELD_BYTES", "CKPT_MAX_HELD_ITEMS")

    @classmethod
    def streaming(cls) -> Budget:
        return cls(limits.MAX_DECODED_BYTES, limits.MAX_DECODED_ITEMS, env=("CKPT_MAX_DECODED_BYTES", "CKPT_MAX_DECODED_ITEMS"))

    def take(self, nbytes: int, items: int = 1) -> None:
        self.used_bytes += nbytes
        self.used_items += items
        if self.used_bytes > self.max_bytes or self.used_items > self.max_items:
            self.refuse(self.used_bytes, self.used_items)

    def refuse(self, nbytes: int, items: int) -> None:
        """Raise LimitExceededError if `nbytes` strings/bytes or `items` values are over."""
        if nbytes > self.max_bytes:
            raise LimitExceededError(
                f"decoded state is larger than {self.max_bytes} bytes",
                hint=f"the checkpoint is hostile or damaged; if it is genuine, raise {self.env[0]}",
            )
        if items > self.max_items:
            raise LimitExceededError(
                f"decoded state has more than {self.max_items} values",
                hint=f"the checkpoint is hostile or damaged; if it is genuine, raise {self.env[1]}",
            )


_SCALARS = (type(None), bool, int, float)


class Decoder:
    """Turns EVs back into Python values, reading objects from `source`.

    Every decode is bounded: containers nest at most MAX_DEPTH deep and references
    at most MAX_DEPTH + 1 deep along any path, and `budget` caps the total output
    (shared by every decode of this Decoder, so one checkpoint has one budget).
    """

    def __init__(self, source: ObjectSource, *, budget: Budget | None = None, lazy_bytes: bool = False) -> None:
        self.source = source
        self.budget = budget or Budget()
        self.lazy_bytes = lazy_bytes

    def decode(self, ev: bytes, where: str = "value") -> Any:
        try:
            with deep_recursion():
                return self._walk(unpack_ev(ev, where), 0, 0)
        except RecursionError:
            raise LimitExceededError(f"{where}: value nests too deeply to decode") from None
        except MemoryError:
            raise LimitExceededError(
                f"{where}: decoded state does not fit in memory (decoded {self.budget.used_bytes} bytes so far)",
                hint=f"the checkpoint is hostile or damaged; if genuine, lower {self.budget.env[0]} to fail earlier or add memory",
            ) from None

    def walk(self, raw: Any, depth: int = 0, hops: int = 0) -> Any:
        """Decode an unpacked EV (references left as Ext, as unpack_ev gives it) found
        `depth` containers and `hops` references below its section's root."""
        return self._walk(raw, depth, hops)

    def tree_items(self, oid: bytes, kind: int) -> Iterator[Any]:
        """The raw items of a LIST tree (or (key, raw value) pairs of a MAP tree), in order."""
        return self._iter_items(oid, kind)

    def deeper(self, depth: int) -> int:
        """`depth` + 1, or LimitExceededError beyond MAX_DEPTH."""
        return self._deeper(depth)

    def _deeper(self, depth: int) -> int:
        if depth >= limits.MAX_DEPTH:
            raise LimitExceededError(f"value nests deeper than {limits.MAX_DEPTH} levels")
        return depth + 1

    def _walk(self, obj: Any, depth: int, hops: int) -> Any:
        t = type(obj)
        if t is list:
            d = self._deeper(depth)
            self.budget.take(0)
            return [self._walk(x, d, hops) for x in obj]
        if t is dict:
            d = self._deeper(depth)
            self.budget.take(0)
            out = {}
            for k, v in obj.items():
                out[_check_key(k)] = self._walk(v, d, hops)
            return out
        if t is Ext:
            if hops > limits.MAX_DEPTH:
                raise LimitExceededError(f"references chain deeper than {limits.MAX_DEPTH} levels")
            return self._resolve(obj, depth, hops + 1)
        if t is str or t is bytes:
            self.budget.take(len(obj))
        elif t in _SCALARS:
            self.budget.take(0)
        else:
            raise CorruptError(f"a value of msgpack type {t.__name__} is not part of the ckpt format")
        return obj

    def _resolve(self, ref: Ext, depth: int, hops: int) -> Any:
        if ref.code == EXT_REF:
            content = self.source.get(ref.oid)
            return self._walk(unpack_ev(content, f"object {ref.oid.hex()[:12]}"), depth, hops)
        if ref.code == EXT_LIST:
            d = self._deeper(depth)
            return [self._walk(x, d, hops) for x in self._iter_items(ref.oid, EXT_LIST)]
        if ref.code == EXT_MAP:
            d = self._deeper(depth)
            out: dict[str, Any] = {}
            for k, v in self._iter_items(ref.oid, EXT_MAP):
                if k in out:
                    raise CorruptError(f"map key {k!r} appears twice in object {ref.oid.hex()[:12]}")
                out[_check_key(k)] = self._walk(v, d, hops)
            return out
        if ref.code in (EXT_BYTES, EXT_STR):
            _level, total, _children = parse_tree_node(self.source.get(ref.oid), ref.code, ref.oid)
            if self.lazy_bytes and ref.code == EXT_BYTES:
                self.budget.take(0)
                return LazyBytes(ref.oid, total)
            # charged before it is read: a tree declaring more than the budget is refused
            # unread (iter_bytes makes sure the pieces add up to exactly `total`)
            self.budget.take(total)
            data = b"".join(self.iter_bytes(ref.oid, ref.code))
            if ref.code == EXT_STR:
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    raise CorruptError(f"STR tree {ref.oid.hex()[:12]} is not valid UTF-8") from None
            return data
        raise CorruptError(f"unexpected reference kind {ref.code}")  # pragma: no cover

    def _iter_items(self, oid: bytes, kind: int, want_level: int | None = None, want_total: int | None = None) -> Iterator[Any]:
        level, _total, children = parse_tree_node(self.source.get(oid), kind, oid, want_level, want_total)
        yield from self._iter_children(level, children, kind, oid)

    def _iter_children(self, level: int, children: Any, kind: int, oid: bytes) -> Iterator[Any]:
        if level == 0:
            if kind == EXT_MAP:
                yield from children.items()
            else:
                yield from children
            return
        for count, child in children:
            if isinstance(child, bytes):
                yield from self._iter_items(child, kind, level - 1, count)
            else:  # the embedded open tail (see Encoder._item_tree)
                sub_level, _t, sub = check_tree_node(child, kind, f"object {oid.hex()[:12]} (embedded node)", want_total=count, below=level)
                yield from self._iter_children(sub_level, sub, kind, oid)

    def iter_pieces(
        self, oid: bytes, kind: int = EXT_BYTES, want_level: int | None = None, want_total: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """The (size, data id) pairs of a BYTES/STR tree in order, reading only its nodes,
        one at a time (a tree that names one node many times costs no memory here)."""
        level, _total, children = parse_tree_node(self.source.get(oid), kind, oid, want_level, want_total)
        if level == 1:
            for size, child in children:
                yield size, child
            return
        for size, child in children:
            yield from self.iter_pieces(child, kind, level - 1, size)

    def data_pieces(
        self, oid: bytes, kind: int = EXT_BYTES, want_level: int | None = None, want_total: int | None = None
    ) -> list[tuple[int, bytes]]:
        """The (size, data id) list of a BYTES/STR tree, reading only its nodes."""
        return list(self.iter_pieces(oid, kind, want_level, want_total))

    def iter_bytes(self, oid: bytes, kind: int = EXT_BYTES) -> Iterator[bytes]:
        """Stream the pieces of a BYTES/STR tree in order, each hash- and size-checked.
        Data objects are read, decompressed and checked on the thread pool (hashlib and
        zstandard release the GIL), _READ_BATCH bytes a task, up to _READ_AHEAD ahead of
        the consumer; nodes are read as needed, in the caller's thread."""
        for _n, batch in self._batches(oid, kind, _fetch_many, _READ_BATCH, _READ_AHEAD):
            yield from batch

    def write_into(self, oid: bytes, fd: int, kind: int = EXT_BYTES, advance: Callable[[int], None] | None = None) -> int:
        """Write the content of a BYTES/STR tree into the file `fd`, at offsets 0 to its
        size (pwrite); returns the size. Each piece is hash- and size-checked before it
        is written, so only checked content is ever written.

        The pieces are read, decompressed, checked and written on the thread pool,
        _WRITE_BATCH bytes a task, up to _WRITE_AHEAD ahead of this thread: each piece
        is written by the thread that checked it, while it is still in that core's
        cache (handed to another thread to write, the kernel's copy into the page cache
        read it back from memory, several times slower on a loaded machine). `advance(n)`
        is called in this thread, in order, as each task's n bytes are written; it may
        raise to stop. Whether it returns or raises, no task writes to `fd` any more
        then, so the caller may close it."""
        offset = 0
        for n, _written in self._batches(oid, kind, functools.partial(_fetch_write, fd), _WRITE_BATCH, _WRITE_AHEAD):
            offset += n
            if advance is not None:
                advance(n)
        return offset

    def _batches(
        self, oid: bytes, kind: int, task: Callable[[ObjectSource, list[tuple[int, int, bytes]]], _T], size: int, ahead: int
    ) -> Iterator[tuple[int, _T]]:
        """(content bytes, `task(source, batch)`) for consecutive batches of the (offset,
        size, id) pieces of a BYTES/STR tree, in order. Each task runs on the thread pool
        (from _FIRST_BATCH bytes, doubling up to `size`; at most _BATCH_PIECES pieces;
        up to `ahead` bytes ahead of the consumer), or here, piece by piece, without a
        pool or for one piece. One task per ~44 KiB piece cost a future, a hand-off and
        a wake-up each, and the threads waited on the GIL for every one. When this ends
        (also by an error, or the consumer stopping early) every task has finished or
        was cancelled."""
        pieces = self.iter_pieces(oid, kind)
        head = list(itertools.islice(pieces, 2))
        offset = 0
        if _workers() <= 1 or len(head) < 2:
            for n, child in itertools.chain(head, pieces):
                yield n, task(self.source, [(offset, n, child)])
                offset += n
            return
        # a store on object storage fetches what is announced on threads of its own: there
        # the pieces are announced up to _BYTES_IN_FLIGHT ahead, so that several requests
        # are in flight while the consumer writes
        prefetch = getattr(self.source, "prefetch", None)
        if prefetch is not None:
            ahead = max(ahead, _BYTES_IN_FLIGHT)
        pending: collections.deque[tuple[int, Future[_T]]] = collections.deque()
        in_flight = 0
        batch: list[tuple[int, int, bytes]] = []
        batch_bytes = 0
        # the first batches are small, so that a file of a few hundred KiB is still
        # spread over every thread of the pool; then they grow to `size`
        limit = min(size, _FIRST_BATCH)
        try:
            for n, child in itertools.chain(head, pieces):
                if prefetch is not None:
                    prefetch(child)
                batch.append((offset, n, child))
                offset += n
                batch_bytes += n
                if batch_bytes < limit and len(batch) < _BATCH_PIECES:
                    continue
                pending.append((batch_bytes, _pool().submit(task, self.source, batch)))
                in_flight += batch_bytes
                batch, batch_bytes = [], 0
                limit = min(size, 2 * limit)
                while pending and in_flight >= ahead:
                    done, fut = pending[0]
                    result = fut.result()
                    pending.popleft()
                    in_flight -= done
                    yield done, result
            if batch:
                pending.append((batch_bytes, _pool().submit(task, self.source, batch)))
            while pending:
                done, fut = pending[0]
                result = fut.result()
                pending.popleft()
                yield done, result
        finally:
            for _n, fut in pending:
                fut.cancel()
            for _n, fut in pending:  # those already running: wait (write_into's callers close the file next)
                if not fut.cancelled():
                    with contextlib.suppress(BaseException):
                        fut.exception()


#: Bytes of data objects read ahead of the consumer from a source that prefetches
#: (object storage: many requests in flight while the consumer writes).
_BYTES_IN_FLIGHT = 64 * 1024 * 1024
#: iter_bytes: content bytes a pool task reads and checks, and bytes ahead of the consumer
_READ_BATCH = 512 * 1024
_READ_AHEAD = 2 * 1024 * 1024
#: write_into: content bytes a pool task reads, checks and writes, and bytes ahead
_WRITE_BATCH = 1024 * 1024
_WRITE_AHEAD = 8 * 1024 * 1024
#: pieces of one task at most (a tree of tiny pieces), and content bytes of the first task
_BATCH_PIECES = 256
_FIRST_BATCH = 128 * 1024


def _fetch(source: ObjectSource, size: int, oid: bytes) -> bytes:
    piece = source.get(oid)
    if len(piece) != size:
        raise CorruptError(f"object {oid.hex()[:12]}: {len(piece)} bytes, its parent says {size}")
    return piece


def _fetch_many(source: ObjectSource, pieces: list[tuple[int, int, bytes]]) -> list[bytes]:
    return [_fetch(source, size, oid) for _offset, size, oid in pieces]


def _fetch_write(fd: int, source: ObjectSource, pieces: list[tuple[int, int, bytes]]) -> int:
    """Read and check each (offset, size, id) piece, then write it into `fd` at its offset."""
    for offset, size, oid in pieces:
        view = memoryview(_fetch(source, size, oid))
        at = offset
        while view:
            n = os.pwrite(fd, view, at)
            view, at = view[n:], at + n
    return len(pieces)


def _check_key(k: Any) -> str:
    if type(k) is not str:
        raise CorruptError(f"map key {k!r} is not a string")
    if len(k) > limits.MAX_KEY_BYTES // 4 and len(k.encode("utf-8")) > limits.MAX_KEY_BYTES:
        raise LimitExceededError(f"map key of {len(k.encode('utf-8'))} bytes is longer than {limits.MAX_KEY_BYTES}")
    return k
