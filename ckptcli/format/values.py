"""Encoding values into content-addressed objects, and decoding them back.

An encoded value (EV) is msgpack in which some parts are references (ext types BIGINT,
REF, LIST, MAP, BYTES, STR), and long lists, maps and strings are chunk trees of node
objects: formats/v1.md, "Encoded values", "Ext types" and "Chunk trees", is the
specification; docs/design.md ("Objects, trees and why a checkpoint costs O(new data)")
the rationale.

Invariants: the writer uses the canonical form, so identical values give identical bytes
and object ids (what deduplication rests on); node boundaries are content-defined, so
appending to a long list rewrites only the last leaf and the right spine above it."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import math
import os
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple, Protocol, cast

import msgpack

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError
from ckptcli.format import limits
from ckptcli.format.framing import unpack

EXT_BIGINT = 1
EXT_REF = 2
EXT_LIST = 3
EXT_MAP = 4
EXT_BYTES = 5
EXT_STR = 6
TREE_KINDS = (EXT_LIST, EXT_MAP, EXT_BYTES, EXT_STR)
EXT_NAMES = {EXT_BIGINT: "BIGINT", EXT_REF: "REF", EXT_LIST: "LIST", EXT_MAP: "MAP", EXT_BYTES: "BYTES", EXT_STR: "STR"}

#: Object types as recorded in an index.
OBJ_DATA = 0
OBJ_NODE = 1


_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1


class ObjectSink(Protocol):
    """Where an encoder puts the objects it makes."""

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None: ...


class ObjectSource(Protocol):
    """Where a decoder reads objects from; `get` returns content whose hash was checked."""

    def get(self, oid: bytes) -> bytes: ...


class Ext(NamedTuple):
    code: int
    oid: bytes


class Encoded(NamedTuple):
    """A value already encoded (its EV bytes), placed inside a value being encoded."""

    ev: bytes


def bytes_ev(data: bytes | LazyBytes) -> bytes:
    """The EV of a byte string: inline bin, or a reference to its BYTES tree."""
    if isinstance(data, LazyBytes):
        return _ext(EXT_BYTES, data.oid)
    return _packb(bytes(data))


class LazyBytes(NamedTuple):
    """A byte string left in the store, to be streamed (see Decoder(lazy_bytes=True))."""

    oid: bytes
    size: int


def array_header(n: int) -> bytes:
    """The shortest msgpack array header for `n` items."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def map_header(n: int) -> bytes:
    """The shortest msgpack map header for `n` entries."""
    if n < 16:
        return bytes([0x80 | n])
    if n < 0x10000:
        return b"\xde" + struct.pack(">H", n)
    return b"\xdf" + struct.pack(">I", n)


_PACK = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _packb(obj: Any) -> bytes:
    return cast(bytes, _PACK(obj))


def _ext(code: int, payload: bytes) -> bytes:
    return _packb(msgpack.ExtType(code, payload))


def bigint_to_bytes(value: int) -> bytes:
    length = (value.bit_length() + 8) // 8  # +1 bit for the sign
    return value.to_bytes(length, "big", signed=True)


def packable(raw: Any) -> Any:
    """`raw` made packable by msgpack as the format writes it: integers beyond 64 bits
    as ext type 1 (BIGINT), and raw EVs' `Ext` (as unpack_ev leaves them) as the ext
    types they were (references kept as references)."""
    t = type(raw)
    if t is Ext:
        return msgpack.ExtType(raw.code, raw.oid)
    if t is int and not -(2**63) <= raw < 2**64:
        return msgpack.ExtType(EXT_BIGINT, bigint_to_bytes(raw))
    if t is list:
        return [packable(x) for x in raw]
    if t is dict:
        return {k: packable(v) for k, v in raw.items()}
    return raw


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

    def __init__(self, sink: ObjectSink, *, cdc: tuple[int, int, int] | None = None) -> None:
        self.sink = sink
        self.cdc = cdc or (limits.CDC_MIN, limits.CDC_AVG, limits.CDC_MAX)
        #: Bytes of leaf data this encoder saw (logical size), for stats.
        self.logical_bytes = 0

    # -- objects ---------------------------------------------------------------
    def _put_node(self, content: bytes) -> bytes:
        oid = hashlib.sha256(content).digest()
        self.sink.put(oid, content, OBJ_NODE)
        return oid

    def _put_data(self, content: bytes) -> bytes:
        oid = hashlib.sha256(content).digest()
        self.sink.put(oid, content, OBJ_DATA)
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
            raise LimitExceededError(f"{where or 'value'}: nesting is deeper than {limits.MAX_DEPTH} levels") from None

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
                raise self._fail(InvalidInputError(f"integer of {v.bit_length()} bits is larger than ckpt stores (8192 bits)"))
            return _ext(EXT_BIGINT, raw)
        if t is float:
            return _packb(v)
        if t is str:
            try:
                data = v.encode("utf-8")
            except UnicodeEncodeError:
                raise self._fail(InvalidInputError("string is not valid Unicode (lone surrogate)")) from None
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
            return cast(bytes, v.ev)
        if t is list or t is tuple:
            if depth >= limits.MAX_DEPTH:
                raise self._fail(LimitExceededError(f"nesting is deeper than {limits.MAX_DEPTH} levels"))
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
                raise self._fail(LimitExceededError(f"nesting is deeper than {limits.MAX_DEPTH} levels"))
            entries = []
            for k, x in v.items():
                if type(k) is not str:
                    raise self._fail(InvalidInputError(f"map key {k!r} is a {type(k).__name__}; ckpt maps need string keys"))
                try:
                    key_len = len(k.encode("utf-8"))
                except UnicodeEncodeError:
                    raise self._fail(InvalidInputError(f"map key {k!r} is not valid Unicode (lone surrogate)")) from None
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
                    body = array_header(len(chunk)) + b"".join(b"\x92" + _packb(c) + _packb(o) for c, o in chunk)
                    content = b"\x94" + _packb(kind) + _packb(level) + _packb(subtotal) + body
                    parents.append((subtotal, self._put_node(content)))
                    start = i + 1
            if level >= limits.MAX_TREE_LEVEL:  # pragma: no cover - needs > 128**15 entries
                raise LimitExceededError("value is too large for a chunk tree")
            entries = parents
            level += 1

    def _chunk_tree(self, kind: int, data: bytes) -> bytes:
        from ckptcli.format.chunker import chunk_bytes

        entries = [(len(piece), self._put_data(piece)) for piece in chunk_bytes(data, self.cdc)]
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

        parallel = hasattr(self.sink, "put_stored") and hasattr(self.sink, "has") and _workers() > 1
        entries: list[tuple[int, bytes]] = []
        held: list[memoryview] = []
        pending: collections.deque[Future[list[_Stored]]] = collections.deque()
        size = 0

        def drain(keep: int) -> None:
            while len(pending) > keep:
                for oid, n, stored in pending.popleft().result():
                    if stored is not None:
                        self.sink.put_stored(oid, OBJ_DATA, stored[0], stored[1], n)  # type: ignore[attr-defined]
                    entries.append((n, oid))

        try:
            for pieces in iter_windows(stream, self.cdc):
                got = sum(len(p) for p in pieces)
                size += got
                if on_bytes:
                    on_bytes(got)
                held.extend(pieces)
                if size <= limits.CHUNK_THRESHOLD:
                    continue
                if parallel:
                    pending.append(_pool().submit(_hash_and_compress, held, self.sink.has))  # type: ignore[attr-defined]
                    drain(_WINDOWS_IN_FLIGHT)
                else:
                    entries.extend((len(p), self._put_data(bytes(p))) for p in held)
                held = []
            drain(0)
        finally:
            for fut in pending:
                fut.cancel()
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
        self._pending: list[tuple[bytes, bytes]] = []  # (id, content) not yet given to a sink
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
            self._pending.append((oid, content))
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
        self._pending.append((oid, content))
        return oid, subtotal

    def ev(self, sink: ObjectSink) -> bytes:
        """The EV of the list as it is now; puts what it needs into `sink`."""
        n = len(self.items)
        if self._memo is not None and self._memo[0] == n:
            return self._memo[1]
        if n <= limits.TREE_MIN_ITEMS and self._bytes <= limits.TREE_MIN_BYTES:
            ev = array_header(n) + b"".join(self.items)
        else:
            tail = self.items[self._start :]
            if not self._inputs:
                root = self._leaf_node(tail)
            else:
                sealed, level = self._sealed_root()
                if tail:
                    tail_leaf = b"\x94" + _packb(EXT_LIST) + b"\x00" + _packb(len(tail)) + array_header(len(tail)) + b"".join(tail)
                    children = b"\x92" + (b"\x92" + _packb(n - len(tail)) + _packb(sealed)) + (b"\x92" + _packb(len(tail)) + tail_leaf)
                    content = b"\x94" + _packb(EXT_LIST) + _packb(level + 1) + _packb(n) + children
                    root = hashlib.sha256(content).digest()
                    self._pending.append((root, content))
                else:
                    root = sealed
            ev = _ext(EXT_LIST, root)
            for oid, content in self._pending:
                sink.put(oid, content, OBJ_NODE)
            self._pending.clear()
        self._memo = (n, ev)
        return ev

    def _leaf_node(self, chunk: list[bytes]) -> bytes:
        content = b"\x94" + _packb(EXT_LIST) + b"\x00" + _packb(len(chunk)) + array_header(len(chunk)) + b"".join(chunk)
        oid = hashlib.sha256(content).digest()
        self._pending.append((oid, content))
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


_Stored = tuple[bytes, int, "tuple[int, bytes | memoryview] | None"]  # id, raw length, (codec, stored) or None if known
_WINDOWS_IN_FLIGHT = 3  # read windows (8 MiB each) hashed/compressed ahead of the writer


def _workers() -> int:
    return min(4, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor:
    """The pool that hashes, compresses and checks data chunks."""
    from ckptcli._util.threads import executor

    return executor("ckpt-chunk", _workers())


def _hash_and_compress(pieces: list[memoryview], known: Callable[[bytes], bool]) -> list[_Stored]:
    from ckptcli.format.framing import compress

    out: list[_Stored] = []
    for piece in pieces:
        oid = hashlib.sha256(piece).digest()
        # an object the store already has need not be compressed
        out.append((oid, len(piece), None if known(oid) else compress(piece)))
    return out


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


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_BIGINT:
        if not 0 < len(data) <= limits.MAX_BIGINT_BYTES:
            raise CorruptError(f"BIGINT of {len(data)} bytes")
        return int.from_bytes(data, "big", signed=True)
    if code in (EXT_REF, EXT_LIST, EXT_MAP, EXT_BYTES, EXT_STR):
        if len(data) != 32:
            raise CorruptError(f"{EXT_NAMES[code]} reference of {len(data)} bytes, expected 32")
        return Ext(code, data)
    raise CorruptError(f"unknown msgpack ext type {code}")


def _unique_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise CorruptError("a map has the same key twice")
    return out


def unpack_ev(data: bytes, where: str) -> Any:
    """msgpack-decode one EV (or node), references left as Ext, duplicate keys refused."""
    return unpack(data, where, ext_hook=_ext_hook, pairs_hook=_unique_pairs)


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """Values may nest MAX_DEPTH containers plus as many references; each costs a few
    Python frames, more than the default limit of 1000 allows."""
    old = sys.getrecursionlimit()
    need = 8 * limits.MAX_DEPTH + 200
    if old < need:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if old < need:
            sys.setrecursionlimit(old)


def check_tree_node(
    node: Any, kind: int, where: str, want_level: int | None = None, want_total: int | None = None, below: int | None = None
) -> tuple[int, int, Any]:
    """Check an unpacked chunk-tree node and what its parent says of it; returns
    (level, total, children). `want_level`: a referenced child sits exactly one level
    down; `below`: an embedded child sits at any lower level."""
    if not (isinstance(node, list) and len(node) == 4):
        raise CorruptError(f"{where}: not a chunk-tree node")
    nkind, level, total, children = node
    if nkind != kind:
        raise CorruptError(f"{where}: expected a {EXT_NAMES[kind]} node, found kind {nkind!r}")
    if type(level) is not int or not 0 <= level <= limits.MAX_TREE_LEVEL or type(total) is not int or total < 0:
        raise CorruptError(f"{where}: bad node level or total")
    if want_level is not None and level != want_level:
        raise CorruptError(f"{where}: tree level {level}, its parent expects {want_level}")
    if below is not None and level >= below:
        raise CorruptError(f"{where}: embedded node of level {level} under a node of level {below}")
    if want_total is not None and total != want_total:
        raise CorruptError(f"{where}: node holds {total}, its parent says {want_total}")
    if kind in (EXT_BYTES, EXT_STR) and level == 0:
        raise CorruptError(f"{where}: byte-string trees start at level 1")
    if level == 0:
        ok_type = isinstance(children, dict) if kind == EXT_MAP else isinstance(children, list)
        if not ok_type or len(children) != total:
            raise CorruptError(
                f"{where}: leaf holds {len(children) if isinstance(children, (list, dict)) else '?'} items, declares {total}"
            )
        return level, total, children
    if not isinstance(children, list) or not children:
        raise CorruptError(f"{where}: node has no children")
    can_embed = kind in (EXT_LIST, EXT_MAP)
    s = 0
    last = len(children) - 1
    for i, c in enumerate(children):
        if not (isinstance(c, list) and len(c) == 2 and type(c[0]) is int and c[0] >= 0):
            raise CorruptError(f"{where}: malformed child entry")
        ref = c[1]
        if not ((isinstance(ref, bytes) and len(ref) == 32) or (can_embed and i == last and isinstance(ref, list))):
            raise CorruptError(f"{where}: malformed child entry (only the last child of a list or map node may be embedded)")
        s += c[0]
    if s != total:
        raise CorruptError(f"{where}: children sum to {s}, node declares {total}")
    return level, total, children


def parse_tree_node(
    content: bytes, kind: int, oid: bytes, want_level: int | None = None, want_total: int | None = None
) -> tuple[int, int, Any]:
    """Unpack and check a chunk-tree node object; returns (level, total, children)."""
    where = f"object {oid.hex()[:12]}"
    return check_tree_node(unpack_ev(content, where), kind, where, want_level, want_total)


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

    def iter_bytes(self, oid: bytes, kind: int = EXT_BYTES, window: int = 32) -> Iterator[bytes]:
        """Stream the pieces of a BYTES/STR tree in order, each hash- and size-checked.
        Data objects are read, decompressed and checked on the thread pool, `window`
        (and at most _BYTES_IN_FLIGHT) ahead of the consumer (hashlib and zstandard
        release the GIL); nodes are read as needed, in the caller's thread."""
        pieces = self.iter_pieces(oid, kind)
        head = list(itertools.islice(pieces, 2))
        if _workers() <= 1 or len(head) < 2:
            for size, child in itertools.chain(head, pieces):
                yield _fetch(self.source, size, child)
            return
        pending: collections.deque[tuple[int, Future[bytes]]] = collections.deque()
        in_flight = 0
        try:
            for size, child in itertools.chain(head, pieces):
                pending.append((size, _pool().submit(_fetch, self.source, size, child)))
                in_flight += size
                while pending and (len(pending) >= window or in_flight >= _BYTES_IN_FLIGHT):
                    done, fut = pending.popleft()
                    in_flight -= done
                    yield fut.result()
            while pending:
                yield pending.popleft()[1].result()
        finally:
            for _size, fut in pending:
                fut.cancel()


#: Bytes of data objects iter_bytes reads ahead of its consumer.
_BYTES_IN_FLIGHT = 64 * 1024 * 1024


def _fetch(source: ObjectSource, size: int, oid: bytes) -> bytes:
    piece = source.get(oid)
    if len(piece) != size:
        raise CorruptError(f"object {oid.hex()[:12]}: {len(piece)} bytes, its parent says {size}")
    return piece


def _check_key(k: Any) -> str:
    if type(k) is not str:
        raise CorruptError(f"map key {k!r} is not a string")
    if len(k) > limits.MAX_KEY_BYTES // 4 and len(k.encode("utf-8")) > limits.MAX_KEY_BYTES:
        raise LimitExceededError(f"map key of {len(k.encode('utf-8'))} bytes is longer than {limits.MAX_KEY_BYTES}")
    return k


def walk_references(ev_obj: Any) -> Iterator[Ext]:
    """Every reference directly inside an unpacked EV (not following them)."""
    stack = [ev_obj]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Ext:
            yield x
        elif t is list:
            stack.extend(x)
        elif t is dict:
            stack.extend(x.values())


def is_finite_number(x: Any) -> bool:
    return not (isinstance(x, float) and (math.isnan(x) or math.isinf(x)))
