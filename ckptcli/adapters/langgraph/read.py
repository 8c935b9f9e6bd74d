"""Reading LangGraph list values back from the store without decoding every item.

A message list is stored as a LIST chunk tree whose sealed part is shared by every
later checkpoint of the thread (`format.values.ListTree`). Reading a thread's history
therefore need not decode n items per checkpoint: `ListReader.keys` gives a list's
item EVs (its items' identities: an item's EV is its object id, or its few inline
bytes) by walking only the tree's nodes, the nodes it has seen recently kept in a
byte-bounded LRU, and the saver decodes only the items its logs do not already hold
(`CkptSaver._log_blob`).

Every node read is checked as `Decoder` checks it (kinds, levels, totals), and a
list's declared length is charged to the decode budget before its nodes are walked,
so a hostile tree costs what a `Decoder` would allow and no more.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgpack

from ckptcli.errors import CorruptError
from ckptcli.format import limits
from ckptcli.format.values import (
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    Decoder,
    Ext,
    check_tree_node,
    packable,
    parse_tree_node,
    unpack_ev,
)

_PACK = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_REF_HEAD = b"\xc7\x20\x02"  # ext 8, 32 bytes, type 2 (REF)
_KEY_OVERHEAD = 72  # what the cache counts per item besides its EV's bytes (a bytes object and a list slot)


def item_key(raw: Any) -> bytes:
    """The EV bytes of an unpacked list item (references as they were written)."""
    if type(raw) is Ext and raw.code == EXT_REF:
        return _REF_HEAD + raw.oid
    return bytes(_PACK(packable(raw)))


class ListReader:
    """Item EVs of stored lists, the tree nodes read recently kept (at most `max_bytes`
    of them, least recently used dropped first)."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._nodes: OrderedDict[bytes, tuple[int, int, list[bytes], int]] = OrderedDict()  # id -> level, total, keys, cost
        self.hits = self.misses = 0  # for tests and benchmarks

    def clear(self) -> None:
        self._nodes.clear()
        self.held = 0

    def channels(self, dec: Decoder, ev: bytes, where: str) -> dict[str, Any]:
        """The memory section's map of channel -> unpacked EV (references left as Ext)."""
        raw = self.deref(dec, unpack_ev(ev, where), where)
        if type(raw) is Ext and raw.code == EXT_MAP:
            out: dict[str, Any] = {}
            for k, v in dec.tree_items(raw.oid, EXT_MAP):
                if k in out:
                    raise CorruptError(f"{where}: map key {k!r} appears twice")
                out[k] = v
            raw = out
        if type(raw) is not dict:
            raise CorruptError(f"{where}: its memory section is not a map of channels")
        return raw

    def keys(self, dec: Decoder, raw: Any, where: str) -> list[bytes] | None:
        """The item EVs of a channel's value when it is a list (None when it is not)."""
        raw = self.deref(dec, raw, where)
        if type(raw) is list:
            dec.budget.take(0, len(raw) + 1)
            return [item_key(x) for x in raw]
        if type(raw) is not Ext or raw.code != EXT_LIST:
            return None
        root = self._node(raw.oid, None, None, dec)
        dec.budget.take(0, root[1] + 1)  # the declared length, checked against the nodes as they are read
        return self._walk(raw.oid, root, dec)

    def deref(self, dec: Decoder, raw: Any, where: str) -> Any:
        """`raw` with the references in front of it followed (at most MAX_DEPTH)."""
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF:
            hops += 1
            if hops > limits.MAX_DEPTH:
                raise CorruptError(f"{where}: references chain deeper than {limits.MAX_DEPTH} levels")
            raw = unpack_ev(dec.source.get(raw.oid), f"object {raw.oid.hex()[:12]}")
        return raw

    def _node(self, oid: bytes, want_level: int | None, want_total: int | None, dec: Decoder) -> tuple[int, int, Any]:
        """(level, total, children) of a node, read (and checked) once while cached."""
        hit = self._nodes.get(oid)
        if hit is not None:
            level, total = hit[0], hit[1]
            if (want_level is not None and level != want_level) or (want_total is not None and total != want_total):
                raise CorruptError(
                    f"object {oid.hex()[:12]}: tree level {level} holding {total}, its parent expects {want_level} holding {want_total}"
                )
            return hit[0], hit[1], None
        return parse_tree_node(dec.source.get(oid), EXT_LIST, oid, want_level, want_total)

    def _walk(self, oid: bytes, node: tuple[int, int, Any], dec: Decoder) -> list[bytes]:
        hit = self._nodes.get(oid)
        if hit is not None:
            self._nodes.move_to_end(oid)
            self.hits += 1
            return hit[2]
        self.misses += 1
        level, total, children = node
        keys = self._children(oid, level, children, dec)
        if len(keys) != total:  # pragma: no cover - check_tree_node makes totals add up
            raise CorruptError(f"object {oid.hex()[:12]}: holds {len(keys)} items, declares {total}")
        cost = sum(len(k) for k in keys) + _KEY_OVERHEAD * (len(keys) + 1)
        if cost <= self.max_bytes // 4:  # one huge node does not empty the cache
            self._nodes[oid] = (level, total, keys, cost)
            self.held += cost
            while self.held > self.max_bytes:
                _oid, (_l, _t, _k, old) = self._nodes.popitem(last=False)
                self.held -= old
        return keys

    def _children(self, oid: bytes, level: int, children: Any, dec: Decoder) -> list[bytes]:
        if level == 0:
            return [item_key(x) for x in children]
        out: list[bytes] = []
        for count, child in children:
            if isinstance(child, bytes):
                out += self._walk(child, self._node(child, level - 1, count, dec), dec)
            else:  # the embedded open tail (see Encoder._item_tree)
                sub_level, _t, sub = check_tree_node(
                    child, EXT_LIST, f"object {oid.hex()[:12]} (embedded node)", want_total=count, below=level
                )
                out += self._children(oid, sub_level, sub, dec)
        return out
