"""The vocabulary of encoded values (EVs) shared by the encoder and the decoder: the
msgpack ext codes, object types, msgpack headers, unpacking an EV and checking a
chunk-tree node (formats/v1.md "Encoded values"). The encoder is in `format.encode`,
the decoder in `format.decode`; `format.values` re-exports all three.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, cast

import msgpack

from ckptcli.errors import CorruptError
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
    """A value already encoded (its EV bytes), placed inside a value being encoded;
    `size`: the bytes it stands for (its strings' and bytes'), counted in the encoder's
    logical_bytes (the SIZE `ckpt ls` shows) where the caller knows them."""

    ev: bytes
    size: int = 0


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


@functools.cache
def _workers() -> int:
    """Threads of the chunk pool (asked once: os.cpu_count reads /sys on each call, and
    `_pool` runs once per chunk)."""
    return min(4, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor:
    """The pool that hashes, compresses and checks data chunks."""
    from ckptcli._util.threads import executor

    return executor("ckpt-chunk", _workers())


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
