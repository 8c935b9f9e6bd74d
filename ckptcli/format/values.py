"""Encoding values into content-addressed objects, and decoding them back.

An *encoded value* (EV) is msgpack in which some parts are replaced by references
(msgpack ext types, formats/v1.md "Encoded values"):

    ext 1  BIGINT  signed big-endian two's-complement integer outside int64/uint64
    ext 2  REF     32-byte id of a node object whose content is an EV
    ext 3  LIST    32-byte id of the root node of a list chunk tree
    ext 4  MAP     32-byte id of the root node of a map chunk tree
    ext 5  BYTES   32-byte id of the root node of a byte-string chunk tree
    ext 6  STR     32-byte id of the root node of a UTF-8 string chunk tree

A chunk-tree node is ``[kind, level, total, children]``. For LIST and MAP, level-0
children are the items themselves (an array of EVs, or a map of key -> EV) and
``total`` counts items; for BYTES and STR, level-1 children are ``[size, data id]``
and ``total`` counts bytes. Higher levels hold ``[total, node id]`` pairs.

Node boundaries are content-defined (an entry whose hash has its low bits zero
closes a node), so appending to a long list rewrites only the last leaf and the
right spine above it: checkpoint N+1 costs O(new data + log n), never O(n).
"""

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
