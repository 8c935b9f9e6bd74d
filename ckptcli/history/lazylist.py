"""A list read by index without decoding the rest (`LazyList`), and the bounded cache it
keeps its nodes in (`LRU`).

A long list is stored as a chunk tree whose inner nodes carry the count of items under
each child (formats/v1.md "Chunk trees"), so item i costs one node read per level and a
100,000-event tail is never decoded whole. Invariants: every node read is checked as the
format requires (level, totals) before it is used; each item is decoded with a budget
of its own; both classes are safe to use from several threads.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, NamedTuple, TypeVar

import msgpack

from ckptcli.errors import CorruptError, InvalidInputError, LimitExceededError
from ckptcli.format import limits
from ckptcli.format.values import EXT_LIST, EXT_REF, Budget, Decoder, Ext, ObjectSource, check_tree_node, packable, unpack_ev

__all__ = ["LRU", "NODE_CACHE", "LazyList"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Parsed chunk-tree nodes kept (a leaf of a tail holds ~512 bytes of events).
NODE_CACHE = 512


class LRU(Generic[K, V]):
    """A fixed-size, thread-safe least-recently-used cache."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data


class _Node(NamedTuple):
    """A parsed LIST node: a leaf's items, or an inner node's children with the running
    totals (`ends[j]`: items under children 0..j) that locate an index by bisection."""

    level: int
    total: int
    items: list[Any]  # leaf: raw item EVs; inner: child ids (bytes) or embedded _Node
    counts: list[int]
    ends: list[int]


class LazyList:
    """The items of an encoded list, read by index without decoding the rest.

    `ev` is the list's encoded value: an inline list, a REF to one, or a LIST chunk tree.
    Item i of a tree costs one node read per level (each node is checked as formats/v1.md
    "Chunk trees" requires, and kept in an LRU cache of `node_cache` nodes); the item is
    then decoded with a budget of its own. Safe to use from several threads.

    Raises (from the constructor and `value`):
        InvalidInputError when the value is not a list; CorruptError, LimitExceededError
        for damaged or hostile data.
    """

    def __init__(self, source: ObjectSource, ev: bytes, where: str, *, node_cache: int = NODE_CACHE) -> None:
        self.source = source
        self.where = where
        self._nodes: LRU[bytes, _Node] = LRU(node_cache)
        self.nodes_read = 0
        raw = unpack_ev(ev, where)
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF:
            hops += 1
            if hops > limits.MAX_DEPTH + 1:
                raise LimitExceededError(f"{where}: references chain deeper than {limits.MAX_DEPTH} levels")
            raw = unpack_ev(source.get(raw.oid), f"{where}: object {raw.oid.hex()[:12]}")
        self._inline: list[Any] | None = None
        self._root: _Node | None = None
        self._leaf: tuple[int, int, list[Any]] | None = None
        if type(raw) is list:
            self._inline = raw
            self.total = len(raw)
        elif type(raw) is Ext and raw.code == EXT_LIST:
            self._root = self._read(raw.oid, None, None)
            self.total = self._root.total
        else:
            raise InvalidInputError(f"{where} is not a list")

    def __len__(self) -> int:
        return self.total

    def _parse(self, node: Any, where: str, want_level: int | None, want_total: int | None, below: int | None) -> _Node:
        level, total, children = check_tree_node(node, EXT_LIST, where, want_level, want_total, below)
        if level == 0:
            return _Node(0, total, children, [], [])
        items: list[Any] = []
        counts: list[int] = []
        ends: list[int] = []
        run = 0
        for count, child in children:
            if isinstance(child, bytes):
                items.append(child)
            else:  # the embedded open tail (formats/v1.md "Chunk trees")
                items.append(self._parse(child, f"{where} (embedded node)", None, count, level))
            counts.append(count)
            run += count
            ends.append(run)
        return _Node(level, total, items, counts, ends)

    def _read(self, oid: bytes, want_level: int | None, want_total: int | None) -> _Node:
        node = self._nodes.get(oid)
        where = f"{self.where}: object {oid.hex()[:12]}"
        if node is None:
            node = self._parse(unpack_ev(self.source.get(oid), where), where, want_level, want_total, None)
            self.nodes_read += 1
            self._nodes.put(oid, node)
        elif (want_level is not None and node.level != want_level) or (want_total is not None and node.total != want_total):
            raise CorruptError(
                f"{where}: node of level {node.level} holding {node.total}, its parent expects level {want_level} holding {want_total}"
            )
        return node

    def raw(self, i: int) -> Any:
        """Item i as its raw EV (references not followed)."""
        if not 0 <= i < self.total:
            raise IndexError(i)
        if self._inline is not None:
            return self._inline[i]
        leaf = self._leaf  # the last leaf reached: a walk through the list stays in it
        if leaf is not None and leaf[0] <= i < leaf[1]:
            return leaf[2][i - leaf[0]]
        node = self._root
        assert node is not None
        start = 0
        while node.level > 0:
            k = bisect.bisect_right(node.ends, i - start)
            start += node.ends[k] - node.counts[k]
            child = node.items[k]
            node = child if isinstance(child, _Node) else self._read(child, node.level - 1, node.counts[k])
        self._leaf = (start, start + node.total, node.items)
        return node.items[i - start]

    def value(self, i: int) -> Any:
        """Item i, decoded (its own decode budget, the format's limits)."""
        raw = self.raw(i)
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF and hops <= limits.MAX_DEPTH:
            # an item longer than 128 bytes is a node object of its own (formats/v1.md "Ext types")
            raw = unpack_ev(self.source.get(raw.oid), f"{self.where}[{i}]: object {raw.oid.hex()[:12]}")
            hops += 1
        if _plain(raw, 0):
            # no reference inside, string keys only: the unpacked item is its value (its
            # size is bounded by the node object it came from)
            return raw
        ev = msgpack.packb(packable(raw), use_bin_type=True)
        return Decoder(self.source, budget=Budget()).decode(ev, f"{self.where}[{i}]")


_CONTAINERS = (dict, list, Ext)
_LONG_KEY = limits.MAX_KEY_BYTES // 4


def _plain(x: Any, depth: int) -> bool:
    """True when a raw EV holds no reference and only map keys the Decoder would accept
    as they are; anything else goes through the Decoder, which reports what is wrong."""
    t = type(x)
    if t is dict:
        if depth >= limits.MAX_DEPTH:
            return False
        for k, v in x.items():
            if type(k) is not str or len(k) > _LONG_KEY:
                return False
            if type(v) in _CONTAINERS and not _plain(v, depth + 1):
                return False
        return True
    if t is list:
        if depth >= limits.MAX_DEPTH:
            return False
        return all(type(v) not in _CONTAINERS or _plain(v, depth + 1) for v in x)
    return t is not Ext
