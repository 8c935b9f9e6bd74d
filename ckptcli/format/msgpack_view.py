"""A readable, exact view of foreign msgpack bytes as ckpt values.

`to_view` turns msgpack that ckpt cannot store as it is (maps with non-string keys,
extension types such as LangGraph's messages) into plain values `ckpt show` and `ckpt diff`
can read, tagged with ``$map``, ``$ext`` (with ``data`` or ``raw``) and ``$msgpack``;
`from_view` turns a view back into the bytes. docs/langgraph.md ("What is stored where")
has the table; a map with a ``$`` key in a view is always a tag.

Invariants: `from_view(to_view(b)) == b`, byte for byte: `to_view` checks it and falls back
to ``{"$msgpack": <the bytes>}`` when it would not hold. Nothing is ever revived: no class
is looked up or called."""

from __future__ import annotations

import operator
from typing import Any, cast

import msgpack

from ckptcli.format.values import array_header

TAG_EXT = "$ext"
TAG_MAP = "$map"
TAG_RAW = "$msgpack"

_PACK = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_SCALARS = (str, bytes, int, float, bool, type(None))
#: A view nests at most this deep (deeper values are kept as their bytes), well inside
#: what ckpt's readers accept (formats/v1.md, Limits: 256), tags and all.
MAX_VIEW_DEPTH = 192


class _NoViewError(Exception):
    pass


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)


def to_view(data: bytes) -> Any:
    """The view of one msgpack value (see the module docstring); exact by construction."""
    try:
        obj = _unpack(data)
        view = _conv(obj, 0)
        # a view with no tags is the unpacked value itself: packing it is the check
        if (view is obj and _PACK(obj) == data) or from_view(view) == data:
            return view
    except (_NoViewError, ValueError, TypeError, OverflowError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, RecursionError):
        pass
    return {TAG_RAW: bytes(data)}


def raw_view(data: bytes) -> dict[str, bytes]:
    """The opaque view: the bytes themselves."""
    return {TAG_RAW: bytes(data)}


def _conv(o: Any, depth: int) -> Any:
    """The view of an unpacked value: the value itself (the same object) when nothing
    in it needs a tag, else a converted copy."""
    t = type(o)
    if t in _SCALARS:
        return o
    if depth >= MAX_VIEW_DEPTH:
        raise _NoViewError
    d = depth + 2  # a tag adds up to two levels
    if t is dict:
        if all(type(k) is str and not k.startswith("$") for k in o):
            same = True
            out = {}
            for k, v in o.items():
                c = _conv(v, d)
                same = same and c is v
                out[k] = c
            return o if same else out
        return {TAG_MAP: [[_conv(k, d), _conv(v, d)] for k, v in o.items()]}
    if t is list:
        items = [_conv(x, d) for x in o]
        return o if all(map(operator.is_, items, o)) else items
    if t is msgpack.ExtType:
        try:
            inner = _unpack(o.data)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return {TAG_EXT: o.code, "raw": o.data}
        return {TAG_EXT: o.code, "data": _conv(inner, d)}
    raise _NoViewError  # a msgpack timestamp, or something only this unpacker makes


def from_view(view: Any) -> bytes:
    """The msgpack bytes a view stands for."""
    t = type(view)
    if t is list:
        # an array is its header and its items' encodings: items may be opaque ($msgpack)
        return array_header(len(view)) + b"".join(from_view(x) for x in view)
    if t is dict and TAG_RAW in view:
        raw = view[TAG_RAW]
        if type(raw) is not bytes:
            raise ValueError("a $msgpack view holds no bytes")
        return raw
    return cast(bytes, _PACK(_obj(view)))


def _obj(v: Any) -> Any:
    t = type(v)
    if t is dict:
        if TAG_EXT in v:
            code = v[TAG_EXT]
            payload = v["raw"] if "raw" in v else _PACK(_obj(v.get("data")))
            return msgpack.ExtType(code, payload)
        if TAG_MAP in v:
            return {_key(_obj(k)): _obj(x) for k, x in v[TAG_MAP]}
        if TAG_RAW in v:
            raise ValueError("an opaque $msgpack view can only stand for a whole item")
        return {k: _obj(x) for k, x in v.items()}
    if t is list:
        return [_obj(x) for x in v]
    return v


def _key(k: Any) -> Any:
    if type(k) is list:
        raise ValueError("a map key that is a list")
    return k


def plain_value(view: Any) -> Any:
    """The Python value a view of plain data stands for (tags resolved; ext payloads are
    left as `msgpack.ExtType`), for values such as metadata that are read without a
    serializer."""
    if type(view) is dict and TAG_RAW in view:
        return _unpack(view[TAG_RAW])
    return _obj(view)
