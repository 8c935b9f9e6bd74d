"""The upper levels of a chunk tree (Encoder._upper_levels) are packed in one msgpack
call per node: byte for byte the nodes formats/v1.md describes, as they were built item
by item before."""

from __future__ import annotations

import hashlib
import random

import pytest

from ckptcli.format import limits
from ckptcli.format.encode import Encoder
from ckptcli.format.ev import EXT_BYTES, EXT_LIST, EXT_STR, OBJ_NODE, _packb, array_header


class _Sink:
    def __init__(self) -> None:
        self.objects: list[tuple[bytes, bytes, int]] = []

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        self.objects.append((oid, content, obj_type))


def _reference_node(kind: int, level: int, chunk: list[tuple[int, bytes]]) -> bytes:
    """A node as formats/v1.md spells it out, item by item."""
    subtotal = sum(c for c, _ in chunk)
    body = array_header(len(chunk)) + b"".join(b"\x92" + _packb(c) + _packb(o) for c, o in chunk)
    return b"\x94" + _packb(kind) + _packb(level) + _packb(subtotal) + body


@pytest.mark.parametrize("kind", [EXT_BYTES, EXT_STR, EXT_LIST])
@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 300, 5000])
def test_upper_level_nodes_are_the_nodes_of_the_format(kind: int, n: int) -> None:
    rng = random.Random(n * 7 + kind)
    # counts of every msgpack integer width, ids that are and are not boundaries
    sizes = [rng.choice([1, 100, 200, 60_000, 70_000, 5_000_000_000]) for _ in range(n)]
    entries = [(s, hashlib.sha256(rng.randbytes(8)).digest()) for s in sizes]
    sink = _Sink()
    root, top = Encoder(sink)._upper_levels(kind, entries, 1)
    # the same levels rebuilt with the item-by-item nodes
    want: list[bytes] = []
    level, layer = 1, entries
    first_node_level = 1 if kind in (EXT_BYTES, EXT_STR) else 0
    while not (len(layer) == 1 and level - 1 >= first_node_level):
        parents, start = [], 0
        for i, (_c, oid) in enumerate(layer):
            if i == len(layer) - 1 or i + 1 - start >= limits.TREE_MAX_FANOUT or (oid[1] & limits.TREE_BOUNDARY_MASK) == 0:
                content = _reference_node(kind, level, layer[start : i + 1])
                want.append(content)
                parents.append((sum(c for c, _ in layer[start : i + 1]), hashlib.sha256(content).digest()))
                start = i + 1
        layer, level = parents, level + 1
    assert [content for _oid, content, _t in sink.objects] == want
    assert all(t == OBJ_NODE and oid == hashlib.sha256(c).digest() for oid, c, t in sink.objects)
    assert (root, top) == (layer[0][1], level - 1)
