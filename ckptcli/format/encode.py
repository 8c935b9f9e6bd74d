"""Encoding values into content-addressed objects (formats/v1.md "Encoded values").

`Encoder` turns a Python value into an EV, putting every node and data object it makes
into a sink; `ListTree` keeps the EV of a list that grows at its end up to date in
O(new items), byte for byte what `Encoder` gives for the same list. Node boundaries are
content-defined, so the same items always split the same way.

This is the hot path of take: module-level names the loops read are globals of this
module (imported by name, no attribute hop per value).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import threading
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import IO, TYPE_CHECKING, Any, TypeAlias, cast

from ckptcli.errors import CkptError, InvalidInputError, LimitExceededError
from ckptcli.format import limits
from ckptcli.format.chunker import CHUNKERS, LEGACY_CHUNKER, WINDOW, WindowBuffers
from ckptcli.format.ev import (
    EXT_BIGINT,
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    EXT_STR,
    OBJ_DATA,
    OBJ_NODE,
    Encoded,
    ObjectSink,
    _ext,
    _packb,
    _pool,
    _workers,
    array_header,
    bigint_to_bytes,
    deep_recursion,
    map_header,
)

if TYPE_CHECKING:
    from ckptcli.format.digests import Digests

__all__ = ["Encoder", "ListTree"]

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

#: what to do about a value nested deeper than limits.MAX_DEPTH (a state document, a
#: section a library caller gives): ckpt stores no deeper, so the value has to change
DEPTH_HINT = (
    f"flatten it to {limits.MAX_DEPTH} levels or fewer, or keep the deep part as bytes "
    "(a blob: `ckpt take --blob NAME=PATH`, or an encoded string)"
)


def _is_boundary(digest: bytes) -> bool:
    return (digest[0] & limits.TREE_BOUNDARY_MASK) == 0


def _is_leaf_boundary(item: bytes) -> bool:
    """Close a leaf after this item with probability len(item)/TREE_LEAF_TARGET_BYTES,
    decided by the item's content so the same items always split the same way."""
    threshold = len(item) * 2**32 // limits.TREE_LEAF_TARGET_BYTES
    return int.from_bytes(hashlib.sha256(item).digest()[:4], "big") < threshold


class _PathError(Exception):
    """Carries a CkptError up the recursion while the path to the bad value is collected."""

    def __init__(self, error: CkptError, part: str) -> None:
        self.error = error
        self.parts = [part]


def _format_path(parts: list[str], keep: int = 6) -> str:
    """Where in a value an error is, as "a.b[3].c"; a deep path keeps its first and
    last `keep` steps around "…(N more)…", so the error stays one readable line."""
    steps = list(reversed(parts))
    if len(steps) > 2 * keep + 1:
        steps = [*steps[:keep], f"…({len(steps) - 2 * keep} more)…", *steps[-keep:]]
    return "".join(steps) or "(top)"


class Encoder:
    """Turns Python values into EVs, writing every object it makes to `sink`."""

    def __init__(self, sink: ObjectSink, *, cdc: tuple[int, int, int] | None = None, chunker: str | None = None) -> None:
        self.sink = sink
        self.cdc = cdc or (limits.CDC_MIN, limits.CDC_AVG, limits.CDC_MAX)
        #: the chunker's name (ckptcli.format.chunker): a store's config says which
        self.chunker = chunker or LEGACY_CHUNKER
        if self.chunker not in CHUNKERS:
            raise InvalidInputError(
                f"the store's chunker {self.chunker!r} is not one this ckpt knows ({', '.join(CHUNKERS)})",
                hint="take into this store with the newer ckpt that made it; reading it works with this one",
            )
        #: Bytes of leaf data this encoder saw (logical size), for stats.
        self.logical_bytes = 0
        #: the digest cache of a take of files (ckptcli.format.digests): the streams'
        #: chunks are hashed through it; None: with SHA-256 alone
        self.digests: Digests | None = None

    # -- objects ---------------------------------------------------------------
    def _put_node(self, content: bytes) -> bytes:
        oid = hashlib.sha256(content).digest()
        self.sink.put(oid, content, OBJ_NODE)
        return oid

    def _put_data(self, content: bytes) -> bytes:
        oid = hashlib.sha256(content).digest()
        self.sink.put(oid, content, OBJ_DATA)
        return oid

    def _put_chunk(self, piece: memoryview) -> bytes:
        """A chunk of a stream read on this thread: hashed through the digest cache when
        the take has one, as the chunk pool does."""
        if self.digests is None:
            return self._put_data(bytes(piece))
        oid = self.digests.id_of(piece)
        self.sink.put(oid, bytes(piece), OBJ_DATA)
        return oid

    # -- values ----------------------------------------------------------------
    def encode(self, value: Any, where: str = "") -> bytes:
        """Encode a value; returns its EV bytes (small: large parts became objects)."""
        try:
            with deep_recursion():
                return self._enc(value, 0)
        except _PathError as exc:
            err = exc.error
            path = (where or "") + _format_path(exc.parts)
            err.message = f"{path}: {err.message}"
            raise err from None
        except RecursionError:
            raise LimitExceededError(f"{where or 'value'}: nesting is deeper than {limits.MAX_DEPTH} levels", hint=DEPTH_HINT) from None

    def encode_root(self, value: Any, where: str = "") -> bytes:
        """Like encode, but a large result becomes its own object, so the manifest
        that holds it stays small and unchanged sections cost nothing to repeat."""
        ev = self.encode(value, where)
        if len(ev) > limits.INLINE_MAX:
            return _ext(EXT_REF, self._put_node(ev))
        return ev

    def _fail(self, error: CkptError) -> _PathError:
        return _PathError(error, "")

    def _enc(self, v: Any, depth: int) -> bytes:
        t = type(v)
        if v is None or t is bool:
            return _packb(v)
        if t is int:
            if _INT_MIN <= v <= _INT_MAX:
                return _packb(v)
            raw = bigint_to_bytes(v)
            if len(raw) > limits.MAX_BIGINT_BYTES:
                raise self._fail(
                    InvalidInputError(
                        f"integer of {v.bit_length()} bits is larger than ckpt stores (8192 bits, about 2466 digits)",
                        hint="store it as a string",
                    )
                )
            return _ext(EXT_BIGINT, raw)
        if t is float:
            return _packb(v)
        if t is str:
            try:
                data = v.encode("utf-8")
            except UnicodeEncodeError:
                raise self._fail(
                    InvalidInputError(
                        "string is not valid Unicode (a lone surrogate, which UTF-8 cannot carry)",
                        hint="fix the string where it is made (a broken \\ud800-style escape?), or store the raw bytes as bytes",
                    )
                ) from None
            self.logical_bytes += len(data)
            if len(data) > limits.CHUNK_THRESHOLD:
                return _ext(EXT_STR, self._chunk_tree(EXT_STR, data))
            return _packb(v)
        if t is bytes or t is bytearray or t is memoryview:
            data = bytes(v)
            self.logical_bytes += len(data)
            if len(data) > limits.CHUNK_THRESHOLD:
                return _ext(EXT_BYTES, self._chunk_tree(EXT_BYTES, data))
            return _packb(data)
        if t is Encoded:
            self.logical_bytes += v.size
            return cast(bytes, v.ev)
        if t is list or t is tuple:
            if depth >= limits.MAX_DEPTH:
                raise self._fail(LimitExceededError(f"nesting is deeper than {limits.MAX_DEPTH} levels", hint=DEPTH_HINT))
            items = []
            for i, x in enumerate(v):
                try:
                    items.append(self._child(x, depth + 1))
                except _PathError as exc:
                    exc.parts.append(f"[{i}]")
                    raise
            return self._container(EXT_LIST, items, array_header)
        if t is dict:
            if depth >= limits.MAX_DEPTH:
                raise self._fail(LimitExceededError(f"nesting is deeper than {limits.MAX_DEPTH} levels", hint=DEPTH_HINT))
            entries = []
            for k, x in v.items():
                if type(k) is not str:
                    raise self._fail(InvalidInputError(f"map key {k!r} is a {type(k).__name__}; ckpt maps need string keys"))
                try:
                    key_len = len(k.encode("utf-8"))
                except UnicodeEncodeError:
                    raise self._fail(
                        InvalidInputError(
                            f"map key {k!r} is not valid Unicode (a lone surrogate, which UTF-8 cannot carry)",
                            hint="fix the key where it is made (a broken \\ud800-style escape?)",
                        )
                    ) from None
                if key_len > limits.MAX_KEY_BYTES:
                    raise self._fail(InvalidInputError(f"map key of {key_len} bytes is longer than {limits.MAX_KEY_BYTES}"))
                kb = _packb(k)
                try:
                    entries.append(kb + self._child(x, depth + 1))
                except _PathError as exc:
                    exc.parts.append(f".{k}")
                    raise
            return self._container(EXT_MAP, entries, map_header)
        if isinstance(v, bool | int | float | str | bytes | list | dict):
            # subclasses (IntEnum, OrderedDict, ...): store as the base type
            for base in (bool, int, float, str, bytes, list, dict):
                if isinstance(v, base):
                    return self._enc(cast(Any, base)(v), depth)
        raise self._fail(
            InvalidInputError(f"a value of type {t.__name__} cannot be stored (use maps, lists, strings, bytes, numbers, booleans, null)")
        )

    def _child(self, x: Any, depth: int) -> bytes:
        ev = self._enc(x, depth)
        if len(ev) > limits.INLINE_MAX:
            return _ext(EXT_REF, self._put_node(ev))
        return ev

    def _container(self, kind: int, items: list[bytes], header: Callable[[int], bytes]) -> bytes:
        total = sum(len(i) for i in items)
        if len(items) <= limits.TREE_MIN_ITEMS and total <= limits.TREE_MIN_BYTES:
            return header(len(items)) + b"".join(items)
        return _ext(kind, self._item_tree(kind, items, header))

    def _leaf(self, kind: int, chunk: list[bytes], header: Callable[[int], bytes]) -> bytes:
        return b"\x94" + _packb(kind) + b"\x00" + _packb(len(chunk)) + header(len(chunk)) + b"".join(chunk)

    def _item_tree(self, kind: int, items: list[bytes], header: Callable[[int], bytes]) -> bytes:
        """Cut items into leaves at content-defined boundaries. Leaves that end at a
        boundary are *sealed* and form a tree of their own; the items after the last
        boundary (the open tail) are embedded in the root. Appending to a long list then
        rewrites the root and tail, and the sealed tree only when a leaf seals (about one
        append in eight), instead of the whole right spine on every append."""
        sealed: list[tuple[int, bytes]] = []  # (count, leaf id)
        start = 0
        leaf_bytes = 0
        for i, item in enumerate(items):
            leaf_bytes += len(item)
            if i + 1 - start >= limits.TREE_MAX_FANOUT or leaf_bytes >= limits.TREE_LEAF_MAX_BYTES or _is_leaf_boundary(item):
                chunk = items[start : i + 1]
                sealed.append((len(chunk), self._put_node(self._leaf(kind, chunk, header))))
                start = i + 1
                leaf_bytes = 0
        tail = items[start:]
        if not sealed:
            return self._put_node(self._leaf(kind, tail, header))
        root, level = self._upper_levels(kind, sealed, 1)
        if not tail:
            return root
        sealed_total = len(items) - len(tail)
        children = (
            b"\x92" + (b"\x92" + _packb(sealed_total) + _packb(root)) + (b"\x92" + _packb(len(tail)) + self._leaf(kind, tail, header))
        )
        return self._put_node(b"\x94" + _packb(kind) + _packb(level + 1) + _packb(len(items)) + children)

    def _upper_levels(self, kind: int, entries: list[tuple[int, bytes]], level: int) -> tuple[bytes, int]:
        """Group `entries` (children of level `level`) into nodes until one root remains;
        returns (root id, root level)."""
        # Item trees start with level-0 nodes; byte trees with data objects, which
        # cannot be a root, so they always get at least one level-1 node.
        first_node_level = 1 if kind in (EXT_BYTES, EXT_STR) else 0
        while True:
            if len(entries) == 1 and level - 1 >= first_node_level:
                return entries[0][1], level - 1
            parents: list[tuple[int, bytes]] = []
            start = 0
            n = len(entries)
            for i, (_total, oid) in enumerate(entries):
                if i == n - 1 or i + 1 - start >= limits.TREE_MAX_FANOUT or _is_boundary(oid[1:2]):
                    chunk = entries[start : i + 1]
                    subtotal = sum(c for c, _ in chunk)
                    # [kind, level, subtotal, [[count, id], ...]]: msgpack packs the
                    # (count, id) pairs as the 2-arrays they are, in one call
                    parents.append((subtotal, self._put_node(_packb([kind, level, subtotal, chunk]))))
                    start = i + 1
            if level >= limits.MAX_TREE_LEVEL:  # pragma: no cover - needs > 128**15 entries
                raise LimitExceededError("value is too large for a chunk tree")
            entries = parents
            level += 1

    def _chunk_tree(self, kind: int, data: bytes) -> bytes:
        from ckptcli.format.chunker import chunk_bytes

        entries = [(len(piece), self._put_data(piece)) for piece in chunk_bytes(data, self.cdc, self.chunker)]
        return self._upper_levels(kind, entries, 1)[0]

    def encode_stream(self, stream: IO[bytes], on_bytes: Callable[[int], None] | None = None) -> tuple[bytes, int]:
        """Encode a byte stream as BYTES (chunked, bounded memory); returns (EV, size).

        Same result as encode(stream.read()): up to CHUNK_THRESHOLD bytes stay inline,
        anything longer becomes a BYTES tree of exactly the chunks chunk_bytes would cut.
        When the sink can take stored objects (a store transaction), the chunks of each
        read window are hashed and compressed together on a thread pool (hashlib and
        zstandard release the GIL; one task per window keeps the hand-offs between
        threads few), in order, with a bounded number of windows in flight.
        """
        from ckptcli.format.chunker import iter_windows

        parallel = self._parallel()
        entries: list[tuple[int, bytes]] = []
        held: list[memoryview] = []
        pending: collections.deque[Future[list[_Stored]]] = collections.deque()
        size = 0

        def drain(keep: int) -> None:
            while len(pending) > keep:
                self._store_window(pending.popleft().result(), entries)

        try:
            for pieces in iter_windows(stream, self.cdc, algorithm=self.chunker):
                got = sum(len(p) for p in pieces)
                size += got
                if on_bytes:
                    on_bytes(got)
                held.extend(pieces)
                if size <= limits.CHUNK_THRESHOLD:
                    continue
                if parallel:
                    pending.append(_pool().submit(_hash_and_compress, held, self.sink.has, self.digests))  # type: ignore[attr-defined]
                    drain(_WINDOWS_IN_FLIGHT)
                else:
                    entries.extend((len(p), self._put_chunk(p)) for p in held)
                held = []
            drain(0)
        finally:
            for fut in pending:
                fut.cancel()
        return self._stream_ev(entries, held, size)

    def encode_streams(
        self, streams: Sequence[tuple[Opener, int]], on_bytes: Callable[[int], None] | None = None
    ) -> Generator[tuple[bytes, int], None, None]:
        """encode_stream of each stream in turn: yields (EV, size) of each, in order.

        `streams`: (open, expected size) of each; `open()` gives a context manager of the
        stream, entered and left on the thread that reads it (a file's fstat after its
        last read belongs in its exit). The store gets the same objects in the same order
        as from encode_stream of one stream after the other, whatever the threads' timing:
        only this thread puts objects into the sink.

        Streams expected to hold READ_AHEAD_MIN bytes or more are each read and chunked on
        a thread of their own, up to STREAMS_AT_ONCE at a time (the one being stored and
        the next ones; smaller streams are read here when their turn comes), and their
        windows go to the chunk pool as soon as they are cut. The reads and the chunker
        (which releases the GIL) of several files so run at once, while this thread only
        stores what the pool made of them. A stream read ahead cuts _AHEAD_WINDOWS
        windows and waits for its turn; the one being stored keeps _WINDOWS_IN_FLIGHT in
        flight, as encode_stream does. An error of a stream (OSError from open or read) is
        raised when its turn comes, and the streams read ahead are then stopped.
        """
        if not self._parallel():
            for opener, _size in streams:
                with opener() as fh:
                    result = self.encode_stream(fh, on_bytes)
                yield result
            return
        readers: dict[int, _ReadAhead] = {}
        stop = threading.Event()
        buffers = WindowBuffers(WINDOW, _BUFFERS)
        upcoming = (i for i, (_o, expected) in enumerate(streams) if expected >= READ_AHEAD_MIN)
        nxt = next(upcoming, None)
        try:
            for i, (opener, _size) in enumerate(streams):
                while nxt is not None and len(readers) < STREAMS_AT_ONCE:
                    readers[nxt] = _ReadAhead(streams[nxt][0], self.cdc, self.chunker, self.sink.has, stop, buffers, self.digests)  # type: ignore[attr-defined]
                    nxt = next(upcoming, None)
                reader = readers.pop(i, None)
                if reader is None:
                    with opener() as fh:
                        result = self.encode_stream(fh, on_bytes)
                else:
                    result = self._store_stream(reader, on_bytes)
                yield result
        finally:
            stop.set()
            for reader in readers.values():
                reader.close()

    # -- the stream pipeline ---------------------------------------------------
    def _parallel(self) -> bool:
        return hasattr(self.sink, "put_stored") and hasattr(self.sink, "has") and _workers() > 1

    def _store_window(self, results: list[_Stored], entries: list[tuple[int, bytes]]) -> None:
        """Put one window's hashed and compressed chunks into the sink, in order (in one
        call where the sink takes a window at once: a store transaction)."""
        many = getattr(self.sink, "put_stored_many", None)
        if many is not None:
            many(OBJ_DATA, results)
        else:
            put = self.sink.put_stored  # type: ignore[attr-defined]
            for oid, n, stored in results:
                if stored is not None:
                    put(oid, OBJ_DATA, stored[0], stored[1], n)
        entries.extend([(n, oid) for oid, n, _stored in results])

    def _store_stream(self, reader: _ReadAhead, on_bytes: Callable[[int], None] | None) -> tuple[bytes, int]:
        """Store the windows a read-ahead thread hands over, in order (encode_streams)."""
        entries: list[tuple[int, bytes]] = []
        try:
            while True:
                item = reader.take()
                if isinstance(item, _StreamEnd):
                    return self._stream_ev(entries, item.held, item.size)
                if isinstance(item, BaseException):
                    raise item
                fut, got = item
                if on_bytes:
                    on_bytes(got)
                if fut is not None:
                    self._store_window(fut.result(), entries)
        finally:
            reader.close()

    def _stream_ev(self, entries: list[tuple[int, bytes]], held: list[memoryview], size: int) -> tuple[bytes, int]:
        self.logical_bytes += size
        if not entries:
            return _packb(b"".join(held)), size
        return _ext(EXT_BYTES, self._upper_levels(EXT_BYTES, entries, 1)[0]), size


class ListTree:
    """The EV of a list that grows at its end, kept up to date in O(new items).

    `ev()` gives exactly the bytes `Encoder.encode` gives for a list of the same items
    (each item an EV as a list item has it: inline, or a REF; see `Encoder.encode_root`),
    and the same objects: leaves are cut at the same content-defined boundaries, and the
    groups of every upper level that closed at a boundary are built once, when they
    close. What changes with each append is only the open end of each level: the open
    tail (embedded in the root) and one node per level above the sealed leaves. So an
    agent's history of n messages costs O(new messages + log n) per checkpoint to
    encode, not O(n) (a full `encode` hashes every item to find the leaf boundaries).

    Nodes are handed to the sink given to `ev()` (an object already there is skipped,
    as always); leaves and closed groups are kept until the list is long enough to be a
    tree at all, so a list that stays inline leaves nothing behind.
    """

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self._bytes = 0
        self._start = 0  # the first item of the open (unsealed) leaf
        self._leaf_bytes = 0
        # per upper level k (index k - 1): its stable inputs (count, node id), the nodes of
        # level k - 1 that no append changes any more, and where its open group starts
        self._inputs: list[list[tuple[int, bytes]]] = []
        self._group_start: list[int] = []
        self._pending: list[tuple[int, bytes, bytes]] = []  # (level, id, content) not yet given to a sink
        self._memo: tuple[int, bytes] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def extend(self, items: Iterable[bytes]) -> None:
        for item in items:
            self.append(item)

    def append(self, item: bytes) -> None:
        i = len(self.items)
        self.items.append(item)
        self._bytes += len(item)
        self._leaf_bytes += len(item)
        self._memo = None
        if i + 1 - self._start >= limits.TREE_MAX_FANOUT or self._leaf_bytes >= limits.TREE_LEAF_MAX_BYTES or _is_leaf_boundary(item):
            chunk = self.items[self._start : i + 1]
            content = b"\x94" + _packb(EXT_LIST) + b"\x00" + _packb(len(chunk)) + array_header(len(chunk)) + b"".join(chunk)
            oid = hashlib.sha256(content).digest()
            self._pending.append((0, oid, content))
            self._start = i + 1
            self._leaf_bytes = 0
            self._add(1, (len(chunk), oid))

    def _add(self, level: int, entry: tuple[int, bytes]) -> None:
        """A node of level `level` - 1 that will not change: an input of `level`."""
        if len(self._inputs) < level:
            self._inputs.append([])
            self._group_start.append(0)
        inputs = self._inputs[level - 1]
        inputs.append(entry)
        start = self._group_start[level - 1]
        # Encoder._upper_levels closes a group at the fanout or after a boundary child
        if len(inputs) - start >= limits.TREE_MAX_FANOUT or _is_boundary(entry[1][1:2]):
            oid, subtotal = self._node(level, inputs[start:])
            self._group_start[level - 1] = len(inputs)
            self._add(level + 1, (subtotal, oid))

    def _node(self, level: int, chunk: list[tuple[int, bytes]]) -> tuple[bytes, int]:
        subtotal = sum(c for c, _ in chunk)
        body = array_header(len(chunk)) + b"".join(b"\x92" + _packb(c) + _packb(o) for c, o in chunk)
        content = b"\x94" + _packb(EXT_LIST) + _packb(level) + _packb(subtotal) + body
        oid = hashlib.sha256(content).digest()
        self._pending.append((level, oid, content))
        return oid, subtotal

    def ev(self, sink: ObjectSink, *, encoder_order: bool = False) -> bytes:
        """The EV of the list as it is now; puts what it needs into `sink`.

        `encoder_order`: put exactly the nodes `Encoder` puts for the whole list, in its
        order (leaves left to right, then each level above, then the root), so that a
        pack written from them is byte for byte the pack `Encoder` would write. By
        default they go in the order they were made, and a group closed above the root
        goes too (a node no tree names until the list grows)."""
        n = len(self.items)
        if self._memo is not None and self._memo[0] == n:
            return self._memo[1]
        if n <= limits.TREE_MIN_ITEMS and self._bytes <= limits.TREE_MIN_BYTES:
            ev = array_header(n) + b"".join(self.items)
        else:
            tail = self.items[self._start :]
            top = 0  # the level of the sealed tree's root: every closed group up to it is a node of the tree
            root_node: tuple[int, bytes, bytes] | None = None  # the root holding the open tail
            if not self._inputs:
                root = self._leaf_node(tail)
            else:
                sealed, top = self._sealed_root()
                if tail:
                    tail_leaf = b"\x94" + _packb(EXT_LIST) + b"\x00" + _packb(len(tail)) + array_header(len(tail)) + b"".join(tail)
                    children = b"\x92" + (b"\x92" + _packb(n - len(tail)) + _packb(sealed)) + (b"\x92" + _packb(len(tail)) + tail_leaf)
                    content = b"\x94" + _packb(EXT_LIST) + _packb(top + 1) + _packb(n) + children
                    root = hashlib.sha256(content).digest()
                    root_node = (top + 1, root, content)
                else:
                    root = sealed
            ev = _ext(EXT_LIST, root)
            later: list[tuple[int, bytes, bytes]] = []
            if encoder_order:
                # a group closed above the sealed root (its own group, closed after a
                # boundary child) is no node of this tree yet: Encoder makes it once the
                # level below has more than one node, and so is it put
                later = [p for p in self._pending if p[0] > top]
                self._pending = sorted((p for p in self._pending if p[0] <= top), key=_level_of)  # stable: left to right
            if root_node is not None:
                self._pending.append(root_node)
            for _level, oid, content in self._pending:
                sink.put(oid, content, OBJ_NODE)
            self._pending = later
        self._memo = (n, ev)
        return ev

    def _leaf_node(self, chunk: list[bytes]) -> bytes:
        content = b"\x94" + _packb(EXT_LIST) + b"\x00" + _packb(len(chunk)) + array_header(len(chunk)) + b"".join(chunk)
        oid = hashlib.sha256(content).digest()
        self._pending.append((0, oid, content))
        return oid

    def _sealed_root(self) -> tuple[bytes, int]:
        """The root of the sealed leaves, as Encoder._upper_levels builds it: the closed
        groups of each level are already nodes; only each level's open group is built."""
        carry: tuple[int, bytes] | None = None  # the open node of the level below
        level = 1
        while True:
            inputs = self._inputs[level - 1] if level <= len(self._inputs) else []
            if len(inputs) + (carry is not None) == 1:
                return (inputs[0] if inputs else carry)[1], level - 1  # type: ignore[index]
            start = self._group_start[level - 1] if level <= len(self._inputs) else 0
            group = inputs[start:] + ([carry] if carry is not None else [])
            if group:
                oid, subtotal = self._node(level, group)
                carry = (subtotal, oid)
            else:
                carry = None
            level += 1


def _level_of(pending: tuple[int, bytes, bytes]) -> int:
    return pending[0]


#: id, raw length, and (codec, stored bytes, their check) or None when the store has it
_Stored = tuple[bytes, int, "tuple[int, bytes | memoryview, int] | None"]
_WINDOWS_IN_FLIGHT = 3  # read windows (8 MiB each) hashed/compressed ahead of the writer


def _hash_and_compress(pieces: list[memoryview], known: Callable[[bytes], bool], digests: Digests | None = None) -> list[_Stored]:
    """The id, length and stored form of each chunk of a window (None: the store has it,
    so it need not be compressed).

    After a chunk that zstd could not shrink (random bytes: weights, compressed or
    encrypted files), the next one is first tried on a _SAMPLE-byte sample from its
    middle, and stored as it is unless the sample shrinks by a tenth: zstd spends
    ~20 us on each 44 KiB chunk of random bytes to find it cannot shrink it, the sample
    ~5 us. Text never pays for the test (its chunks shrink, so no sample is taken).
    The choice depends only on the window's bytes, so the same data is stored the same way.

    The check of the stored bytes a version-2 pack records (framing.stored_check) is
    taken here too, while those bytes are still in this core's cache, rather than on
    the thread that adds them to the pack.

    With `digests` (a take of files, ckptcli.format.digests), a chunk an earlier take
    hashed gets its id from there instead of SHA-256."""
    from ckptcli.format.framing import CODEC_NONE, CODEC_ZSTD, compress, stored_check

    sha256 = hashlib.sha256
    out: list[_Stored] = []
    incompressible = False
    for piece in pieces:
        oid = sha256(piece).digest() if digests is None else digests.id_of(piece)
        n = len(piece)
        if known(oid):  # an object the store already has need not be compressed
            out.append((oid, n, None))
            continue
        if incompressible and n >= 2 * _SAMPLE:
            mid = (n - _SAMPLE) // 2
            codec, packed = compress(piece[mid : mid + _SAMPLE])
            if codec != CODEC_ZSTD or len(packed) > _SAMPLE * 9 // 10:
                out.append((oid, n, (CODEC_NONE, piece, stored_check(piece))))
                continue
        codec, stored = compress(piece)
        incompressible = codec == CODEC_NONE
        out.append((oid, n, (codec, stored, stored_check(stored))))
    return out


#: bytes of a chunk tried first when the one before it did not shrink (_hash_and_compress)
_SAMPLE = 4096


#: a stream as encode_streams opens it: entered and left on the thread that reads it
Opener = Callable[[], AbstractContextManager[IO[bytes]]]
#: streams of at least this many bytes are read on a thread of their own (encode_streams);
#: smaller ones cost less to read than a hand-off between threads
READ_AHEAD_MIN = 1024 * 1024
#: streams read at once by encode_streams: the one being stored and the next ones
STREAMS_AT_ONCE = 3
#: windows a stream read ahead may have cut before its turn comes (then _WINDOWS_IN_FLIGHT)
_AHEAD_WINDOWS = 1
#: window buffers encode_streams reads into again (chunker.WindowBuffers): about as many
#: as its windows in flight and those whose raw chunks wait for the pack writer
_BUFFERS = 10


class _StreamEnd:
    """The last item a read-ahead thread hands over: the stream's size, and its pieces
    when it stayed within CHUNK_THRESHOLD (inline; none went to the pool)."""

    __slots__ = ("held", "size")

    def __init__(self, held: list[memoryview], size: int) -> None:
        self.held = held
        self.size = size


#: what a read-ahead thread hands over: (the window's task or None while the stream is
#: still within CHUNK_THRESHOLD, the bytes it covers), then a _StreamEnd or an exception
_Handed: TypeAlias = "tuple[Future[list[_Stored]] | None, int] | _StreamEnd | BaseException"


class _ReadAhead:
    """One stream read and chunked on a thread of its own (encode_streams), exactly as
    encode_stream reads it: each window's chunks go to the chunk pool as one task as
    soon as they are cut, and the task's future is handed over. The thread waits while
    `limit` items wait to be taken (holding one window more): _AHEAD_WINDOWS while
    another stream is being stored, _WINDOWS_IN_FLIGHT once this one is (`take`), so
    memory stays bounded by the window size whatever the number of streams."""

    def __init__(
        self,
        opener: Opener,
        cdc: tuple[int, int, int],
        chunker: str,
        known: Callable[[bytes], bool],
        stop: threading.Event,
        buffers: WindowBuffers,
        digests: Digests | None = None,
    ) -> None:
        self.buffers = buffers
        self.digests = digests
        self.items: collections.deque[_Handed] = collections.deque()
        self.cond = threading.Condition()
        self.limit = _AHEAD_WINDOWS
        self.stop = stop
        self.closed = False
        self.done = _read_pool().submit(self._run, opener, cdc, chunker, known)

    def _hand(self, item: _Handed) -> bool:
        """Hand an item over; False when the consumer has stopped (the thread then ends)."""
        with self.cond:
            while len(self.items) >= self.limit and not (self.closed or self.stop.is_set()):
                self.cond.wait(0.5)
            if self.closed or self.stop.is_set():
                return False
            self.items.append(item)
            self.cond.notify_all()
            return True

    def take(self) -> _Handed:
        """The next item, waiting for it (this stream is now the one being stored)."""
        with self.cond:
            if self.limit != _WINDOWS_IN_FLIGHT:
                self.limit = _WINDOWS_IN_FLIGHT
                self.cond.notify_all()
            while not self.items:
                self.cond.wait()
            item = self.items.popleft()
            self.cond.notify_all()
            return item

    def _run(self, opener: Opener, cdc: tuple[int, int, int], chunker: str, known: Callable[[bytes], bool]) -> None:
        from ckptcli.format.chunker import iter_windows

        held: list[memoryview] = []
        size = 0
        try:
            with opener() as fh:
                for pieces in iter_windows(fh, cdc, algorithm=chunker, buffers=self.buffers):
                    got = sum(len(p) for p in pieces)
                    size += got
                    held.extend(pieces)
                    if size <= limits.CHUNK_THRESHOLD:
                        if not self._hand((None, got)):
                            return
                        continue
                    fut = _pool().submit(_hash_and_compress, held, known, self.digests)
                    held = []
                    if not self._hand((fut, got)):
                        fut.cancel()
                        return
            self._hand(_StreamEnd(held, size))
        except BaseException as exc:  # noqa: BLE001 - raised on the consumer's thread when its turn comes
            self._hand(exc)

    def close(self) -> None:
        """Stop the thread if it still reads, wait for it, and drop what it handed over."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        with contextlib.suppress(BaseException):
            self.done.result()
        for item in self.items:
            if isinstance(item, tuple) and item[0] is not None:
                item[0].cancel()
        self.items.clear()


def _read_pool() -> ThreadPoolExecutor:
    """The threads that read and chunk the streams of encode_streams."""
    from ckptcli._util.threads import executor

    return executor("ckpt-read", STREAMS_AT_ONCE)
