"""One checkpoint's side of the hash-first diff walk (`ckptcli.history.diff`, and the
path probes of `ckptcli.history.query`): encoded values read without decoding, chunk
trees opened one level at a time, and the tokens lists are aligned by.

Invariants: each object is read once per side (`_Side` keeps what it read); REF chains
and decodes are bounded by the format's limits and one decode budget per side; a chunk
tree node is checked as formats/v1.md "Chunk trees" requires before it is used; equal
tokens mean equal encodings (the encoding is canonical), so aligned equal items are
skipped unread. Internal to the history package (the names keep their underscore).
"""

from __future__ import annotations

import difflib
import re
from typing import Any, NamedTuple

import msgpack

from ckptcli.checkpoint import Checkpoint
from ckptcli.errors import CorruptError, LimitExceededError, UsageError
from ckptcli.format import limits
from ckptcli.format.manifest import EXT_PREFIX, LAYOUT_DOCUMENT
from ckptcli.format.values import (
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    Budget,
    Decoder,
    Ext,
    check_tree_node,
    packable,
    parse_tree_node,
    unpack_ev,
)
from ckptcli.history.change import PathPart

__all__ = ["MAX_ALIGN_PAIRS", "parse_pointer"]

#: Above this many token pairs a list's unmatched middle is paired by position instead
#: of aligned (difflib's matcher can take quadratic time); the patch is still exact.
MAX_ALIGN_PAIRS = 25_000_000

_ABSENT: Any = object()
_SCALARS = (type(None), bool, int, float)


class _Node(NamedTuple):
    """A chunk-tree node not opened yet."""

    oid: bytes
    level: int
    total: int  # entries under it


#: A run of a container's entries as the walk sees it: a node not opened, or items
#: (raw EVs for a list, (key, raw EV) pairs for a map).
_Segment = _Node | list[Any]


class _Side:
    """One checkpoint being compared: its objects, each read once, and its decode budget."""

    def __init__(self, ck: Checkpoint) -> None:
        self.ck = ck
        self.budget = Budget()
        self.decoder = Decoder(ck.source, budget=self.budget)
        self.where = f"checkpoint {ck.hex[:12]}"
        self._content: dict[bytes, bytes] = {}
        self._unpacked: dict[bytes, Any] = {}
        self._opened: dict[tuple[bytes, int], list[_Segment]] = {}

    def content(self, oid: bytes) -> bytes:
        data = self._content.get(oid)
        if data is None:
            data = self._content[oid] = self.ck.source.get(oid)
        return data

    def deref(self, raw: Any) -> Any:
        """Follow REFs until a value that is not one (reading each object once)."""
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF:
            hops += 1
            if hops > limits.MAX_DEPTH + 1:
                raise LimitExceededError(f"{self.where}: references chain deeper than {limits.MAX_DEPTH} levels")
            got = self._unpacked.get(raw.oid, _ABSENT)
            if got is _ABSENT:
                got = self._unpacked[raw.oid] = unpack_ev(self.content(raw.oid), f"{self.where}: object {raw.oid.hex()[:12]}")
            raw = got
        self.budget.take(0)
        return raw

    def decode(self, raw: Any) -> Any:
        """The value of a raw EV (as unpack_ev leaves it), through the bounded Decoder;
        a scalar is its own value (the common case when many items differ)."""
        t = type(raw)
        if t is str or t is bytes:
            self.budget.take(len(raw))
            return raw
        if t in _SCALARS:
            self.budget.take(0)
            return raw
        return self.decoder.decode(_ev_bytes(raw), self.where)

    def root(self, raw: Ext, code: int) -> _Node:
        level, total, _children = parse_tree_node(self.content(raw.oid), code, raw.oid)
        return _Node(raw.oid, level, total)

    def open(self, node: _Node, code: int) -> list[_Segment]:
        got = self._opened.get((node.oid, code))
        if got is not None:  # a side walked twice (ckpt log compares each checkpoint with both neighbours)
            return got
        level, _total, children = parse_tree_node(self.content(node.oid), code, node.oid, node.level, node.total)
        self.budget.take(0)
        got = self._opened[(node.oid, code)] = self._children(level, children, code, node.oid)
        return got

    def _children(self, level: int, children: Any, code: int, oid: bytes) -> list[_Segment]:
        if level == 0:
            items = list(children.items()) if code == EXT_MAP else list(children)
            self.budget.take(0, len(items))
            return [items]
        out: list[_Segment] = []
        for count, child in children:
            if isinstance(child, bytes):
                out.append(_Node(child, level - 1, count))
            else:  # the embedded open tail (formats/v1.md "Chunk trees")
                where = f"{self.where}: object {oid.hex()[:12]} (embedded node)"
                sub_level, _t, sub = check_tree_node(child, code, where, want_total=count, below=level)
                out.extend(self._children(sub_level, sub, code, oid))
        return out

    def segments(self, raw: Any, code: int) -> list[_Segment]:
        """The entries of a map (code EXT_MAP) or list (EXT_LIST), inline or a tree."""
        if type(raw) is dict:
            return [list(raw.items())]
        if type(raw) is list:
            return [raw]
        return [self.root(raw, code)]

    def items(self, segments: list[_Segment], code: int) -> list[Any]:
        """Every entry of `segments`, opening every node (used where nothing is shared)."""
        out: list[Any] = []
        stack = list(reversed(segments))
        while stack:
            seg = stack.pop()
            if isinstance(seg, _Node):
                stack.extend(reversed(self.open(seg, code)))
            else:
                out.extend(seg)
        return out


def _ev_bytes(raw: Any) -> bytes:
    """Re-encode a raw EV (references kept as references)."""
    return msgpack.packb(packable(raw), use_bin_type=True)  # type: ignore[no-any-return]


def _token(raw: Any) -> Any:
    """What list alignment compares items by: equal tokens are equal values."""
    t = type(raw)
    if t is Ext:
        return raw  # (code, id)
    if t is str or t is bytes:
        return (t, raw)
    if t is int or t is bool or raw is None:
        return (t, raw)
    return _ev_bytes(raw)  # floats (NaN, -0.0), lists, maps: their exact encoding


def _kind(raw: Any) -> int:
    t = type(raw)
    if t is dict or (t is Ext and raw.code == EXT_MAP):
        return EXT_MAP
    if t is list or (t is Ext and raw.code == EXT_LIST):
        return EXT_LIST
    return 0


def _shared_only(a: _Side, segs_a: list[_Segment], b: _Side, segs_b: list[_Segment], code: int) -> tuple[list[_Segment], list[_Segment]]:
    """Open the nodes of both trees, highest level first, until every node left unopened
    is one that the other tree also holds (equal ids: equal entries)."""
    while True:
        ids_a = {s.oid for s in segs_a if isinstance(s, _Node)}
        ids_b = {s.oid for s in segs_b if isinstance(s, _Node)}
        shared = ids_a & ids_b
        levels = [s.level for s in (*segs_a, *segs_b) if isinstance(s, _Node) and s.oid not in shared]
        if not levels:
            return segs_a, segs_b
        top = max(levels)
        segs_a = _open_level(a, segs_a, shared, top, code)
        segs_b = _open_level(b, segs_b, shared, top, code)


def _open_level(side: _Side, segs: list[_Segment], shared: set[bytes], level: int, code: int) -> list[_Segment]:
    out: list[_Segment] = []
    for s in segs:
        if isinstance(s, _Node) and s.level == level and s.oid not in shared:
            out.extend(side.open(s, code))
        else:
            out.append(s)
    return out


def _match(ta: list[Any], tb: list[Any]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes for two token lists: common prefix and suffix first (the usual
    append / pop / edit-in-place cases cost nothing more), the matcher on the middle."""
    n, m = len(ta), len(tb)
    p = 0
    while p < n and p < m and ta[p] == tb[p]:
        p += 1
    s = 0
    while s < n - p and s < m - p and ta[n - 1 - s] == tb[m - 1 - s]:
        s += 1
    ops: list[tuple[str, int, int, int, int]] = []
    if p:
        ops.append(("equal", 0, p, 0, p))
    mid_a, mid_b = ta[p : n - s], tb[p : m - s]
    if mid_a or mid_b:
        if not mid_a:
            ops.append(("insert", p, p, p, m - s))
        elif not mid_b:
            ops.append(("delete", p, n - s, p, p))
        elif len(mid_a) * len(mid_b) > MAX_ALIGN_PAIRS:
            ops.append(("replace", p, n - s, p, m - s))
        else:
            sm = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=len(mid_b) > 2000)
            ops.extend((tag, i1 + p, i2 + p, j1 + p, j2 + p) for tag, i1, i2, j1, j2 in sm.get_opcodes())
    if s:
        ops.append(("equal", n - s, n, m - s, m))
    return ops


def _root(sections: dict[str, bytes], name: str, default: Any = None) -> Any:
    ev = sections.get(name)
    return default if ev is None else unpack_ev(ev, f"section {name}")


def _stored_document(ck: Checkpoint) -> Any:
    """A checkpoint's stored state document as a raw EV whose parts are the sections' roots."""
    m = ck.manifest
    if m.layout.get("kind") == LAYOUT_DOCUMENT:
        return _root(m.sections, "memory")
    doc: dict[str, Any] = {}
    for key in m.layout.get("keys", []):
        if key == "ext":
            doc["ext"] = {ns: _root(m.sections, EXT_PREFIX + ns) for ns in m.layout.get("ext", []) if EXT_PREFIX + ns in m.sections}
        elif key in m.sections:
            doc[key] = _root(m.sections, key)
    return doc


def _child(side: _Side, raw: Any, key: PathPart) -> Any:
    """The raw value under `key` of a map or list (_ABSENT when there is none)."""
    raw = side.deref(raw)
    kind = _kind(raw)
    if kind == EXT_MAP:
        if type(raw) is dict:
            return raw.get(str(key), _ABSENT)
        return dict(side.items(side.segments(raw, EXT_MAP), EXT_MAP)).get(str(key), _ABSENT)
    if kind == EXT_LIST and type(key) is int:
        items = raw if type(raw) is list else side.items(side.segments(raw, EXT_LIST), EXT_LIST)
        return items[key] if 0 <= key < len(items) else _ABSENT
    return _ABSENT


def parse_pointer(text: str) -> tuple[PathPart, ...]:
    """A JSON Pointer ("/memory/a~1b/0") as path parts; digits are list indices (they
    are keys too where the value is a map). Raises UsageError for one that is not."""

    if text == "":
        return ()
    if not text.startswith("/"):
        raise UsageError(f"--path {text!r} is not a JSON Pointer", hint="start it with /, e.g. /memory/user/name")
    out: list[PathPart] = []
    for raw in text[1:].split("/"):
        if re.search("~(?![01])", raw):  # RFC 6901: ~0 and ~1 are the only escapes
            raise UsageError(
                f"--path {text!r} is not a JSON Pointer: {raw!r} has a ~ that is not ~0 or ~1",
                hint="write ~ as ~0 and / as ~1 in a key (RFC 6901)",
            )
        part = raw.replace("~1", "/").replace("~0", "~")
        out.append(int(part) if part.isdecimal() and part.isascii() and (part == "0" or not part.startswith("0")) else part)
    return tuple(out)


def _field(entry: dict[str, Any] | None, name: str, default: Any) -> Any:
    return default if entry is None else entry.get(name, default)


def _check_key(key: Any, where: str) -> str:
    if type(key) is not str:
        raise CorruptError(f"{where}: map key {key!r} is not a string")
    return key


def _entries(segs: list[_Segment], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for seg in segs:
        if isinstance(seg, _Node):
            continue
        for k, v in seg:
            if _check_key(k, where) in out:
                raise CorruptError(f"{where}: map key {k!r} appears twice")
            out[k] = v
    return out


def _tokens(segs: list[_Segment]) -> tuple[list[Any], list[_Segment], list[int]]:
    """Alignment tokens of a list's segments: a shared node is one token, an item is one.
    Returns the tokens, what each stands for (the node, or a one-item segment), and the
    index of each token's first item (plus one past the end)."""
    toks: list[Any] = []
    parts: list[_Segment] = []
    pos = [0]
    for seg in segs:
        if isinstance(seg, _Node):
            toks.append(seg)
            parts.append(seg)
            pos.append(pos[-1] + seg.total)
        else:
            for item in seg:
                toks.append(_token(item))
                parts.append([item])
                pos.append(pos[-1] + 1)
    return toks, parts, pos
