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

from ckptcli.format.decode import Budget, Decoder
from ckptcli.format.decode import _check_key as _check_key
from ckptcli.format.encode import Encoder, ListTree
from ckptcli.format.ev import (
    EXT_BIGINT,
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_NAMES,
    EXT_REF,
    EXT_STR,
    OBJ_DATA,
    OBJ_NODE,
    TREE_KINDS,
    Encoded,
    Ext,
    LazyBytes,
    ObjectSink,
    ObjectSource,
    array_header,
    bigint_to_bytes,
    bytes_ev,
    check_tree_node,
    deep_recursion,
    is_finite_number,
    map_header,
    packable,
    parse_tree_node,
    unpack_ev,
    walk_references,
)

__all__ = [
    "EXT_BIGINT",
    "EXT_BYTES",
    "EXT_LIST",
    "EXT_MAP",
    "EXT_NAMES",
    "EXT_REF",
    "EXT_STR",
    "OBJ_DATA",
    "OBJ_NODE",
    "TREE_KINDS",
    "Budget",
    "Decoder",
    "Encoded",
    "Encoder",
    "Ext",
    "LazyBytes",
    "ListTree",
    "ObjectSink",
    "ObjectSource",
    "array_header",
    "bigint_to_bytes",
    "bytes_ev",
    "check_tree_node",
    "deep_recursion",
    "is_finite_number",
    "map_header",
    "packable",
    "parse_tree_node",
    "unpack_ev",
    "walk_references",
]
