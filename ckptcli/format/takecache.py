"""What a subject's last take made of its long lists, kept so that the next take encodes
and hashes only the items that changed (docs/design.md, "The take cache").

A `SubjectCache` holds, for each list of at least `MIN_ITEMS` items reached from a
section root through map keys only (a *path*: `memory.messages`, `tools`), a `ListRecord`:
the items as plain msgpack (the snapshot every later take is checked against), each
item's EV and logical size, and the `ListTree` of the item EVs; and the packer its takes
pack with, whose buffer stays from one take to the next. `CachingEncoder`, an `Encoder`,
uses it:

- it packs the list with msgpack's C packer (`strict_types`: exact types, so `1`,
  `1.0` and `True` differ, and so do `0.0` and `-0.0`, and map keys keep their order)
  and compares the bytes with the snapshot, in the packer's buffer (no copy). Equal
  bytes are an equal value, whatever the caller did to it in place, so nothing else is
  read: the EV is the one the snapshot gave. Snapshot bytes followed by more items are
  an append: only the new items are encoded, the snapshot is extended by their bytes,
  and the `ListTree` grows by them in O(new items + log n).
- any other change (an item edited in place, one deleted or moved) packs each item on
  its own; an item whose bytes are those of an old item (at the same position, else
  anywhere) takes that item's EV; the others are encoded; the tree is built again from
  the item EVs (hashing each, as `Encoder` does, but encoding only what changed).
- a list that msgpack cannot pack exactly (a subclass, an `Encoded`, an integer beyond
  64 bits, a lone surrogate) is encoded by `Encoder` itself and not cached.

The result is byte for byte `Encoder`'s: the same EVs, the same objects put in the same
order (`ListTree.ev(encoder_order=True)`), the same logical size. The EVs reused name
objects an earlier take put into the store; whether the store still has them is the
caller's to check (`SubjectCache.check`, given the store's object index), and a record
is used only after the take that made it committed (`commit`; `discard` after a failed
take, whose objects never reached the store).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgpack

from ckptcli.format import limits
from ckptcli.format.encode import Encoder, ListTree, _PathError
from ckptcli.format.ev import EXT_BYTES, EXT_LIST, EXT_MAP, EXT_REF, EXT_STR, _packb, array_header, map_header

__all__ = ["MIN_ITEMS", "CachingEncoder", "ListRecord", "SubjectCache"]

#: Lists shorter than this are encoded as they are: cheap anyway.
MIN_ITEMS = 16

#: Estimated bytes of memory per cached item beyond its msgpack bytes (its EV, its
#: offsets and logical size, the tree's share), for the cache's bound.
ITEM_OVERHEAD = 160

Path = tuple[str, ...]


class _UncacheableError(Exception):
    """A value msgpack would not pack exactly as the encoder reads it."""


def _tuple_as_list(obj: Any) -> Any:
    # the encoder stores a tuple as a list; anything else strict_types refuses (subclasses,
    # Encoded, integers beyond 64 bits) is not cached
    if type(obj) is tuple:
        return list(obj)
    raise _UncacheableError


_PACK: Callable[[Any], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True, strict_types=True, default=_tuple_as_list).pack


def _packer() -> msgpack.Packer:
    """A packer as `_PACK`'s, whose buffer the caller reads (`getbuffer`) and resets."""
    return msgpack.Packer(use_bin_type=True, autoreset=False, strict_types=True, default=_tuple_as_list)


# everything msgpack raises for a value it cannot pack (a lone surrogate: UnicodeEncodeError)
_PACK_ERRORS = (_UncacheableError, TypeError, ValueError, OverflowError, RecursionError, MemoryError)


class ListRecord:
    """What a take made of one list: `packed` is its items as msgpack (without the
    list's header), item i ending at `ends[i]`; `logical[i]` is item i's logical size and
    `total` their sum; `tree` holds the item EVs (`tree.items`) and the nodes of the tree
    above them; `ev` is the list's EV. `packed` is a bytearray: an append extends it in
    place, in O(new items)."""

    __slots__ = ("ends", "ev", "logical", "packed", "total", "tree")

    def __init__(self, packed: bytearray, ends: list[int], logical: list[int], tree: ListTree) -> None:
        self.packed = packed
        self.ends = ends
        self.logical = logical
        self.total = sum(logical)
        self.tree = tree
        self.ev = b""

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def cost(self) -> int:
        """Bytes of memory it holds, roughly."""
        return len(self.packed) + ITEM_OVERHEAD * len(self.ends)

    def item_is(self, i: int, packed: bytes) -> bool:
        """Whether item `i` packed to exactly `packed`."""
        start = self.ends[i - 1] if i else 0
        return self.ends[i] - start == len(packed) and self.packed.startswith(packed, start)

    def item_bytes(self, i: int) -> bytes:
        return bytes(self.packed[(self.ends[i - 1] if i else 0) : self.ends[i]])

    def witnesses(self) -> list[bytes]:
        """Ids of the objects its EV names (a tree's root; every reference in an inline
        list): if the store has them, it has what they reach."""
        if len(self.ev) == 35 and self.ev[:3] == b"\xc7\x20" + bytes([EXT_LIST]):
            return [self.ev[3:]]
        return named_ids(self.ev)


_ID_EXTS = frozenset((EXT_REF, EXT_LIST, EXT_MAP, EXT_BYTES, EXT_STR))


def named_ids(ev: bytes) -> list[bytes]:
    """The ids an EV names: every ext 8 of 32 bytes of a reference type in it (a REF or a
    tree's root). A byte string that happens to hold the same bytes adds an id that is
    not one, never leaves one out."""
    out = []
    i = ev.find(b"\xc7\x20")
    while i >= 0:
        if i + 35 <= len(ev) and ev[i + 2] in _ID_EXTS:
            out.append(ev[i + 3 : i + 35])
        i = ev.find(b"\xc7\x20", i + 1)
    return out


class SubjectCache:
    """The list records of one subject in one store, and the ones the take under way is
    making (`staged`), which replace them at `commit`. One take at a time uses it: hold
    `lock` (a take that finds it held encodes without the cache)."""

    def __init__(self) -> None:
        self.lists: dict[Path, ListRecord] = {}
        self.staged: dict[Path, ListRecord] = {}
        #: lists found too large to keep: not packed again (what packing costs in memory
        #: is what keeping would)
        self.too_big: set[Path] = set()
        #: packs the lists of this subject's takes (one take at a time: under `lock`);
        #: its buffer, kept between takes, holds at least `peak` bytes
        self.packer = _packer()
        self.peak = 0
        self.lock = threading.Lock()
        #: what the records were last checked against, for the caller (the writer keeps
        #: a weak reference to the store's object index here)
        self.basis: Any = None

    @property
    def cost(self) -> int:
        return sum(r.cost for r in self.lists.values()) + self.peak

    def check(self, known: Callable[[bytes], bool]) -> None:
        """Drop every record whose objects the store no longer has (`known(id)`)."""
        for path, rec in list(self.lists.items()):
            if not all(map(known, rec.witnesses())):
                del self.lists[path]

    def commit(self, max_record_bytes: int) -> None:
        """The take committed its objects: its records are the ones to use next (those of
        lists it did not meet are dropped, and so is one over `max_record_bytes`)."""
        self.lists = {p: r for p, r in self.staged.items() if r.cost <= max_record_bytes}
        self.too_big.update(p for p in self.staged if p not in self.lists)
        self.staged = {}
        if self.peak > max_record_bytes:  # the packer's buffer grew for a list not kept: let it go
            self.packer, self.peak = _packer(), 0

    def discard(self) -> None:
        """The take failed: its objects are not in the store, and the trees it grew in
        place name them, so nothing of this subject is reused."""
        self.lists = {}
        self.staged = {}
        self.packer, self.peak = _packer(), 0


class CachingEncoder(Encoder):
    """An `Encoder` that reuses, and records into `cache.staged`, the encodings of the
    long lists on the map-key paths of each section (see the module docstring). Encode
    sections with `encode_section`; everything else is `Encoder`'s."""

    def __init__(self, sink: Any, cache: SubjectCache, *, cdc: tuple[int, int, int] | None = None, chunker: str | None = None) -> None:
        super().__init__(sink, cdc=cdc, chunker=chunker)
        self.cache = cache
        self._path: list[str] | None = None
        #: items encoded, and items reused, by this encoder (for tests and benchmarks)
        self.encoded_items = 0
        self.reused_items = 0

    def encode_section(self, value: Any, name: str) -> bytes:
        """`encode_root(value, where=name)`, with the lists under section `name` cached."""
        self._path = [name]
        try:
            return self.encode_root(value, where=name)
        finally:
            self._path = None

    def _enc(self, v: Any, depth: int) -> bytes:
        path = self._path
        if path is None:
            return Encoder._enc(self, v, depth)
        t = type(v)
        if t is dict:
            ev = self._map_on_path(v, depth, path) if depth < limits.MAX_DEPTH else None
        elif t is list or t is tuple:
            ev = self._cached_list(v, depth, path) if depth < limits.MAX_DEPTH and len(v) >= MIN_ITEMS else None
        else:
            return Encoder._enc(self, v, depth)  # a scalar; or a subclass, which comes back here as its base
        if ev is not None:
            return ev
        self._path = None  # below here nothing is cached: Encoder's own way
        try:
            return Encoder._enc(self, v, depth)
        finally:
            self._path = path

    def _map_on_path(self, v: dict[Any, Any], depth: int, path: list[str]) -> bytes | None:
        """Encoder's map, the path followed into each value; None for a map with a key
        Encoder refuses (it is encoded Encoder's way, which says why)."""
        keys = []
        for k in v:
            if type(k) is not str or len(k) > limits.MAX_KEY_BYTES:  # len: characters <= UTF-8 bytes
                return None
            try:
                kb = k.encode("utf-8")
            except UnicodeEncodeError:
                return None
            if len(kb) > limits.MAX_KEY_BYTES:
                return None
            keys.append(k)
        entries = []
        for k in keys:
            path.append(k)
            try:
                entries.append(_packb(k) + self._child(v[k], depth + 1))
            except _PathError as exc:
                exc.parts.append(f".{k}")
                raise
            finally:
                path.pop()
        return self._container(EXT_MAP, entries, map_header)

    def _cached_list(self, v: list[Any] | tuple[Any, ...], depth: int, path: list[str]) -> bytes | None:
        """The EV of a list on a path, reusing what the last take made of it; None when
        msgpack cannot pack it exactly, or it was too large to keep (then it is not
        cached)."""
        key = tuple(path)
        cache = self.cache
        if key in cache.too_big:
            return None
        packer = cache.packer  # its buffer is kept between takes: no fresh pages to fault in
        try:
            packer.pack(v)
        except _PACK_ERRORS:
            packer.reset()
            return None
        rec = cache.lists.get(key)
        n = len(v)
        self._path = None  # the items themselves are encoded Encoder's way
        try:
            # the bytearray on the left: its == compares the buffers with memcmp
            with packer.getbuffer() as whole, whole[len(array_header(n)) :] as items:
                cache.peak = max(cache.peak, len(whole))
                if rec is None:
                    rec = self._build(v, items, depth, None)
                elif rec.packed == items:
                    self.reused_items += n  # unchanged
                elif n > len(rec) and rec.packed == items[: len(rec.packed)]:
                    self._append(rec, v, items, depth)
                else:
                    rec = self._build(v, items, depth, rec)
        finally:
            self._path = path
            packer.reset()
        rec.ev = rec.tree.ev(self.sink, encoder_order=True)
        self.logical_bytes += rec.total
        cache.staged[key] = rec
        return rec.ev

    def _item(self, x: Any, i: int, depth: int) -> tuple[bytes, int]:
        """(EV as a list item, logical size) of item `i`, encoded."""
        before = self.logical_bytes
        try:
            ev = self._child(x, depth + 1)
        except _PathError as exc:
            exc.parts.append(f"[{i}]")
            raise
        self.encoded_items += 1
        size = self.logical_bytes - before
        self.logical_bytes = before
        return ev, size

    def _append(self, rec: ListRecord, v: list[Any] | tuple[Any, ...], items: memoryview, depth: int) -> None:
        """`v` (its items packed to `items`) is the record's items and more: encode the
        new ones and grow the record by them."""
        old = len(rec)
        self.reused_items += old
        end = rec.ends[-1] if old else 0
        for i in range(old, len(v)):
            x = v[i]
            end += len(_PACK(x))
            ev, size = self._item(x, i, depth)
            rec.ends.append(end)
            rec.logical.append(size)
            rec.total += size
            rec.tree.append(ev)
        rec.packed += items[len(rec.packed) :]

    def _build(self, v: list[Any] | tuple[Any, ...], items: memoryview, depth: int, old: ListRecord | None) -> ListRecord:
        """A new record of `v` (its items packed to `items`), taking the EV of each item
        that packs as one of `old`'s."""
        evs: list[bytes] = []
        logical: list[int] = []
        ends: list[int] = []
        by_bytes: dict[bytes, int] | None = None
        end = 0
        for i, x in enumerate(v):
            item_packed = _PACK(x)
            j = -1
            if old is not None:
                if i < len(old) and old.item_is(i, item_packed):
                    j = i
                else:
                    if by_bytes is None:
                        by_bytes = {}
                        for k in range(len(old) - 1, -1, -1):
                            by_bytes[old.item_bytes(k)] = k
                    j = by_bytes.get(item_packed, -1)
            if j >= 0:
                assert old is not None
                evs.append(old.tree.items[j])
                logical.append(old.logical[j])
                self.reused_items += 1
            else:
                ev, size = self._item(x, i, depth)
                evs.append(ev)
                logical.append(size)
            end += len(item_packed)
            ends.append(end)
        if old is not None and len(evs) >= len(old) and evs[: len(old)] == old.tree.items:
            tree = old.tree  # same items first (their EVs): the tree grows
            tree.extend(evs[len(old) :])
        else:
            tree = ListTree()
            tree.extend(evs)
        return ListRecord(bytearray(items), ends, logical, tree)
