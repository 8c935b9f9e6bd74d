"""What changed between two checkpoints: hashes first, decoding only where they differ.

    >>> from ckptcli.history.diff import diff_checkpoints
    >>> d = diff_checkpoints(open_checkpoint("good", store), open_checkpoint("latest", store))  # doctest: +SKIP
    >>> d.patch()          # RFC 6902 ops turning A's state document into B's  # doctest: +SKIP
    [{'op': 'replace', 'path': '/memory/goal', 'value': 'resolve'}]

How it stays cheap. The encoding is canonical (formats/v1.md "Encoded values"): equal
values have equal encoded bytes, and a large part of a value is an object named by the
SHA-256 of its content. Both checkpoints are walked side by side from their section roots
(the manifest holds each root's EV) without decoding:

- equal encoded values, or equal object ids, are equal: skipped without reading anything;
- a REF is followed on each side (one object read) and the walk goes on inside;
- maps are aligned by key; lists by their items' encodings (common prefix and suffix,
  then difflib's matcher on the rest), each unmatched pair compared in turn;
- a chunk tree (a long list or map) is opened one level at a time, and a node whose id
  the other side's tree also holds is never opened: only the leaves on the paths of
  changed items are read. For a map, a shared node holds the same entries on both sides;
  for a list, a shared node is one token of the alignment and expands into its items only
  when the matcher leaves it unmatched;
- only where the two sides really differ (a scalar, a string, values of different kinds,
  or something added or removed) is a value decoded, with one decode budget per side.

So two checkpoints of a large state that differ in a few leaves cost a few object reads
per change, not a decode of either state. Unequal bytes do not prove a difference (a
non-canonical writer, or other writer parameters): the walk then compares the values and
reports nothing when they turn out equal. Equality is `api.states_equal`: types must
match (1, 1.0 and true differ), NaN equals NaN, 0.0 and -0.0 differ. Key order is not
compared (a JSON Patch cannot express it).

The patch is against the JSON view of the state document (formats/v1.md "JSON view",
`ckptcli.format.jsonview.to_json`): byte strings as {"$bytes": base64}, NaN and infinities as
{"$float": ...}, integers of any size as JSON integers, and a map whose only key starts
with "$" wrapped as {"$map": {...}} (paths into such a map go through "$map"). Applying
`patch()` to `to_json(A.state())` gives `to_json(B.state())`. List indices in the patch
are those of the list as the earlier operations left it (RFC 6902 applies operations in
order); `Change.path` gives a removed item's index in A instead, for people.

Blobs are not part of the state document. They are compared as a listing: one entry per
file, directory, symlink or skipped entry, keyed by its path ("work/src/a.py"), holding
metadata only (type, size, mode, and a content id: "sha256" of the content for files up
to 64 KiB stored inline, "root", the BYTES tree's root node id, for larger ones; never
the content). `blobs_patch()` is a JSON Patch of that listing. Times and inode numbers
are not compared.

deepdiff is not used here, even where hashes differ: its report is not a patch (a removed
list item has its index in A, an added one its index in B, and ordering them into valid
operations is a second diff), and its equality is not ckpt's (0.0 equals -0.0, NaN differs
from itself), so the patch would miss changes. It is the baseline that bench/diff.py
measures this walk against, and the second pass of the tolerant options (`ckptcli.history.tolerant`:
"the same apart from list order, float noise and excluded paths?"), which runs only after
this walk has found a change.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from ckptcli._util.units import human_size
from ckptcli.checkpoint import Checkpoint, names_a_file, open_checkpoint
from ckptcli.document import states_equal
from ckptcli.errors import CorruptError, LimitExceededError, NotFoundError
from ckptcli.format import limits
from ckptcli.format.jsonview import to_json
from ckptcli.format.manifest import EXT_PREFIX, LAYOUT_DOCUMENT, LAYOUT_SECTIONS
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    Budget,
    Decoder,
    Ext,
    check_tree_node,
    deep_recursion,
    packable,
    parse_tree_node,
    unpack_ev,
)
from ckptcli.store.repository import Store

PathPart = str | int
#: Above this many token pairs a list's unmatched middle is paired by position instead
#: of aligned (difflib's matcher can take quadratic time); the patch is still exact.
MAX_ALIGN_PAIRS = 25_000_000
#: Section name of an operation on the whole document (only when A and B lay their
#: documents out differently and the root itself is replaced).
WHOLE_DOCUMENT = "document"


# -- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One operation of the patch, with what people need to read it."""

    op: str  # "add", "remove" or "replace"
    section: str  # memory, plan, tools, events, ext:<ns>, ext (the ext map itself), document
    path: tuple[PathPart, ...]  # inside the section; a removed list item has its index in A
    pointer: str  # JSON Pointer of the patch operation, in the JSON view of the whole document
    old: Any = None  # the value in A (remove, replace)
    new: Any = None  # the value in B (add, replace)
    #: only there to make the next operations' paths valid (the "ext" map added empty
    #: before its namespaces, or removed after them), or to move items a keyed
    #: comparison reports instead (LangGraph's pending writes): in the patch, not in
    #: counts or text
    structural: bool = False
    #: False for a change reported by key rather than by position (a LangGraph pending
    #: write): in counts and text, not in the patch (structural operations do that part)
    in_patch: bool = True
    label: str | None = None  # what the text calls it, when its path does not say

    def patch_op(self) -> dict[str, Any]:
        if self.op == "remove":
            return {"op": "remove", "path": self.pointer}
        return {"op": self.op, "path": self.pointer, "value": to_json(self.new)}


@dataclass(frozen=True)
class BlobChange:
    """A file, directory, symlink or skipped entry of the blobs that differs."""

    op: str  # "add", "remove" or "replace"
    path: str  # "name/sub/file"
    old: dict[str, Any] | None  # listing entry in A (metadata only)
    new: dict[str, Any] | None

    def patch_op(self) -> dict[str, Any]:
        ptr = pointer((self.path,))
        if self.op == "remove":
            return {"op": "remove", "path": ptr}
        return {"op": self.op, "path": ptr, "value": self.new}


@dataclass
class DiffResult:
    a: bytes
    b: bytes
    changes: list[Change] = field(default_factory=list)
    blobs: list[BlobChange] = field(default_factory=list)
    section: str | None = None  # the only section compared, when one was asked for
    _keyed_writes: bool = False  # LangGraph's pending writes were compared by key
    #: which state each side is, when one has an event tail (stateat.StateAt.to_dict)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str | None = None  # the only JSON Pointer compared, when one was asked for

    @property
    def same(self) -> bool:
        return all(c.structural for c in self.changes) and not self.blobs

    def patch(self) -> list[dict[str, Any]]:
        """RFC 6902 operations turning the JSON view of A's state into B's (only the
        asked-for section's, when one was)."""
        return [c.patch_op() for c in self.changes if c.in_patch]

    def writes(self) -> list[dict[str, Any]] | None:
        """LangGraph's pending writes added, removed and changed, by (task id, write
        index): {"op", "task_id", "idx", "channel", "old", "new"} (a write without
        seq and ts); None when the events were not compared that way."""
        keyed = [c for c in self.changes if not c.in_patch and c.section == "events"]
        if not keyed and not self._keyed_writes:
            return None
        out = []
        for c in keyed:
            w = c.new if c.new is not None else c.old
            out.append({"op": c.op, "task_id": w["task_id"], "idx": w.get("idx", 0), "channel": w.get("channel"), "old": to_json(c.old), "new": to_json(c.new)})
        return out

    def blobs_patch(self) -> list[dict[str, Any]]:
        """RFC 6902 operations turning A's blob listing into B's."""
        return [c.patch_op() for c in self.blobs]

    def summary(self) -> dict[str, Any]:
        sections: dict[str, dict[str, int]] = {}
        for c in self.changes:
            if not c.structural:
                _count(sections.setdefault(c.section, _zero()), c.op)
        if self.blobs:
            counts = sections.setdefault("blobs", {**_zero(), "size_before": 0, "size_after": 0})
            for bc in self.blobs:
                _count(counts, bc.op)
                counts["size_before"] += _file_size(bc.old)
                counts["size_after"] += _file_size(bc.new)
        return {
            "same": self.same,
            "changes": sum(not c.structural for c in self.changes) + len(self.blobs),
            "sections": sections,
        }

    def to_dict(self, *, stat: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"a": self.a.hex(), "b": self.b.hex(), "same": self.same}
        if self.section is not None:
            out["section"] = self.section
        if self.path is not None:
            out["path"] = self.path
        if self.states:
            out["states"] = self.states
        out["summary"] = self.summary()
        if not stat:
            out["patch"] = self.patch()
            out["blobs_patch"] = self.blobs_patch()
            writes = self.writes()
            if writes is not None:
                out["writes"] = writes
        return out


def _zero() -> dict[str, int]:
    return {"added": 0, "removed": 0, "changed": 0}


def _count(counts: dict[str, int], op: str) -> None:
    counts[{"add": "added", "remove": "removed"}.get(op, "changed")] += 1


def _file_size(meta: dict[str, Any] | None) -> int:
    if meta is None or meta.get("type") != "file" or type(meta.get("size")) is not int:
        return 0
    return int(meta["size"])


def pointer(parts: tuple[PathPart, ...]) -> str:
    """A JSON Pointer (RFC 6901): "" for the whole document, "/a~1b/0" for ("a/b", 0)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


# -- opening -----------------------------------------------------------------------


def open_pair(ref_a: str, ref_b: str, *, store: Store | None = None, store_path: Any = None) -> tuple[Checkpoint, Checkpoint]:
    """Open two checkpoints by reference (see checkpoint.open_checkpoint): ids, refs, checkpoint
    files or one of each. A store is opened only when a reference needs one, and once."""
    shared = store

    def one(ref: str) -> Checkpoint:
        nonlocal shared
        if names_a_file(ref) or ref.endswith(".ckpt"):
            return open_checkpoint(ref, store_path=store_path)
        if shared is None:
            shared = Store.open(Path(store_path) if store_path is not None else None)
        return open_checkpoint(ref, shared)

    return one(ref_a), one(ref_b)


# -- the walk ----------------------------------------------------------------------

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


def section_of(path: tuple[PathPart, ...], layout: dict[str, Any]) -> tuple[str, tuple[PathPart, ...]]:
    """Which section a path of the document (`layout`: its manifest's) lies in, and the
    path inside it: the whole document of a document-layout checkpoint is its "memory"
    section; an extension's path ``ext/<ns>/...`` lies in section ``ext:<ns>``."""
    if layout.get("kind") == LAYOUT_DOCUMENT:
        return "memory", path
    if not path:
        return WHOLE_DOCUMENT, path
    if path[0] == "ext":
        return (f"{EXT_PREFIX}{path[1]}", path[2:]) if len(path) > 1 else ("ext", ())
    return str(path[0]), path[1:]


class _Walk:
    def __init__(self, a: Checkpoint, b: Checkpoint, docs: tuple[Any, Any] | None = None) -> None:
        self.a = _Side(a)
        self.b = _Side(b)
        #: the state documents to compare, when not the stored ones (stateat.StateAt.raw_parts)
        self.docs = docs
        self.layout_a = a.manifest.layout
        self.layout_b = b.manifest.layout
        self.changes: list[Change] = []
        self.blobs: list[BlobChange] = []

    # -- emitting ----------------------------------------------------------------
    def emit(self, op: str, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], old: Any = None, new: Any = None, structural: bool = False) -> None:
        section, rel = section_of(path, self.layout_a if op == "remove" else self.layout_b)
        self.changes.append(Change(op, section, rel, pointer(ptr), old, new, structural))

    # -- values ------------------------------------------------------------------
    def diff(self, ra: Any, rb: Any, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], depth: int) -> None:
        if states_equal(ra, rb):  # equal encodings or equal ids: nothing to read
            return
        ra, rb = self.a.deref(ra), self.b.deref(rb)
        if states_equal(ra, rb):
            return
        ka, kb = _kind(ra), _kind(rb)
        if ka == kb and ka:
            if depth >= limits.MAX_DEPTH:
                raise LimitExceededError(f"{self.a.where}: value nests deeper than {limits.MAX_DEPTH} levels")
            if ka == EXT_MAP:
                self._maps(ra, rb, path, ptr, depth + 1)
            else:
                self._lists(ra, rb, path, ptr, depth + 1)
            return
        va, vb = self.a.decode(ra), self.b.decode(rb)
        if not states_equal(va, vb):
            self.emit("replace", path, ptr, va, vb)

    def _maps(self, ra: Any, rb: Any, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], depth: int) -> None:
        wrap_a, wrap_b = self._dollar_key(self.a, ra), self._dollar_key(self.b, rb)
        if wrap_a != wrap_b:
            # the JSON view wraps a map whose only key starts with "$" in {"$map": ...}:
            # when only one side is wrapped, or under another key, the map is replaced whole
            va, vb = self.a.decode(ra), self.b.decode(rb)
            if not states_equal(va, vb):
                self.emit("replace", path, ptr, va, vb)
            return
        inner = (*ptr, "$map") if wrap_a is not None else ptr
        for key, xa, xb in self.map_pairs(ra, rb):
            if xa is _ABSENT:
                self.emit("add", (*path, key), (*inner, key), new=self.b.decode(xb))
            elif xb is _ABSENT:
                self.emit("remove", (*path, key), (*inner, key), old=self.a.decode(xa))
            else:
                self.diff(xa, xb, (*path, key), (*inner, key), depth)

    def _dollar_key(self, side: _Side, raw: Any) -> str | None:
        """The only key of a map when it starts with "$" (the JSON view wraps such maps)."""
        if type(raw) is dict:
            if len(raw) == 1:
                key = next(iter(raw))
                return key if isinstance(key, str) and key.startswith("$") else None
            return None
        root = side.root(raw, EXT_MAP)
        if root.total != 1:
            return None
        ((key, _v),) = side.items([root], EXT_MAP)
        return key if isinstance(key, str) and key.startswith("$") else None

    def map_pairs(self, ra: Any, rb: Any) -> list[tuple[str, Any, Any]]:
        """(key, raw in A or _ABSENT, raw in B or _ABSENT) for the keys whose values may
        differ. A tree node both sides hold has the same entries on both: never opened."""
        segs_a, segs_b = _shared_only(self.a, self.a.segments(ra, EXT_MAP), self.b, self.b.segments(rb, EXT_MAP), EXT_MAP)
        in_a = _entries(segs_a, self.a.where)
        in_b = _entries(segs_b, self.b.where)
        out: list[tuple[str, Any, Any]] = []
        for key, xa in in_a.items():
            xb = in_b.get(key, _ABSENT)
            if xb is _ABSENT or not states_equal(xa, xb):
                out.append((key, xa, xb))
        out.extend((key, _ABSENT, xb) for key, xb in in_b.items() if key not in in_a)
        return out

    def _lists(self, ra: Any, rb: Any, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], depth: int) -> None:
        segs_a, segs_b = _shared_only(self.a, self.a.segments(ra, EXT_LIST), self.b, self.b.segments(rb, EXT_LIST), EXT_LIST)
        toks_a, parts_a, pos_a = _tokens(segs_a)
        toks_b, parts_b, pos_b = _tokens(segs_b)
        for tag, i1, i2, j1, j2 in _match(toks_a, toks_b):
            if tag != "equal":
                # the items of an unmatched run; a node in it is opened (the other side
                # holds it elsewhere, or the matcher could not place it)
                items_a = self.a.items(parts_a[i1:i2], EXT_LIST)
                items_b = self.b.items(parts_b[j1:j2], EXT_LIST)
                self._runs(items_a, items_b, pos_a[i1], pos_b[j1], path, ptr, depth)

    def _runs(self, items_a: list[Any], items_b: list[Any], start_a: int, start_b: int, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], depth: int) -> None:
        """Operations for one unmatched run: A's items from index start_a become B's from
        start_b. Earlier runs are done, so the list as patched so far has B's items
        before start_b: a position in the patch is a position in B."""
        for tag, x1, x2, y1, y2 in _match([_token(x) for x in items_a], [_token(y) for y in items_b]):
            if tag == "equal":
                continue
            n, m = x2 - x1, y2 - y1
            paired = min(n, m) if tag == "replace" else 0
            for k in range(paired):
                at = start_b + y1 + k
                self.diff(items_a[x1 + k], items_b[y1 + k], (*path, at), (*ptr, at), depth)
            for k in range(paired, n):  # each removal leaves the next item at the same index
                at = start_b + y1 + paired
                self.emit("remove", (*path, start_a + x1 + k), (*ptr, at), old=self.a.decode(items_a[x1 + k]))
            for k in range(paired, m):
                at = start_b + y1 + k
                self.emit("add", (*path, at), (*ptr, at), new=self.b.decode(items_b[y1 + k]))

    # -- the state document -------------------------------------------------------
    def state(self, section: str | None) -> None:
        ma, mb = self.a.ck.manifest, self.b.ck.manifest
        kind_a, kind_b = self.layout_a.get("kind"), self.layout_b.get("kind")
        if kind_a == kind_b == LAYOUT_SECTIONS:
            self._sections(section)
            return
        if kind_a == kind_b == LAYOUT_DOCUMENT:
            if section in (None, "memory"):
                self.diff(_root(ma.sections, "memory"), _root(mb.sections, "memory"), (), (), 0)
            return
        # A and B lay their documents out differently: compare the documents whole
        self.diff(self._document(self.a), self._document(self.b), (), (), 0)
        if section is not None:
            self.changes = [c for c in self.changes if c.section == section or (c.section == "ext" and section.startswith(EXT_PREFIX))]

    def _document(self, side: _Side) -> Any:
        """The state document as a raw EV whose parts are the sections' roots."""
        if self.docs is not None:
            return self.docs[0 if side is self.a else 1]
        return _stored_document(side.ck)

    def _sections(self, section: str | None) -> None:
        da, db = self._document(self.a), self._document(self.b)
        keys = list(da) + [k for k in db if k not in da]
        for key in keys:
            if key == "ext":
                if section is None or section.startswith(EXT_PREFIX):
                    self._ext(da.get("ext"), db.get("ext"), None if section is None else section[len(EXT_PREFIX) :])
                continue
            if section is not None and key != section:
                continue
            if key not in db:
                self.emit("remove", (key,), (key,), old=self.a.decode(da[key]))
            elif key not in da:
                self.emit("add", (key,), (key,), new=self.b.decode(db[key]))
            else:
                self.diff(da[key], db[key], (key,), (key,), 0)

    def _ext(self, ea: dict[str, Any] | None, eb: dict[str, Any] | None, only: str | None) -> None:
        """The ext map: one section per namespace. When only one document has an "ext"
        key, the map itself is added (empty, then each namespace) or removed (after them)."""
        if ea is None and eb is None:
            return
        if ea is None:
            self.emit("add", ("ext",), ("ext",), new={}, structural=bool(eb))
        names = [ns for ns in (ea or {})] + [ns for ns in (eb or {}) if ns not in (ea or {})]
        for ns in names:
            if only is not None and ns != only:
                continue
            path = ("ext", ns)
            if eb is None or ns not in eb:
                self.emit("remove", path, path, old=self.a.decode((ea or {})[ns]))
            elif ea is None or ns not in ea:
                self.emit("add", path, path, new=self.b.decode(eb[ns]))
            else:
                self.diff(ea[ns], eb[ns], path, path, 1)
        if eb is None and only is None:  # (with one namespace asked for, the others stay)
            self.emit("remove", ("ext",), ("ext",), old={}, structural=bool(ea))

    # -- one path ------------------------------------------------------------------
    def at_path(self, parts: tuple[PathPart, ...]) -> None:
        """Compare the values at one path of the documents (a JSON Pointer's parts; list
        indices as ints), hash-first: a level whose two sides are equal ends it."""
        ra: Any = self._document(self.a)
        rb: Any = self._document(self.b)
        for depth, key in enumerate(parts):
            if ra is not _ABSENT and rb is not _ABSENT:
                if states_equal(ra, rb):
                    return
                ra, rb = self.a.deref(ra), self.b.deref(rb)
                if _kind(ra) == _kind(rb) == EXT_MAP:
                    # a tree node both sides hold has the same entries: the key is in the
                    # nodes that differ on either side, or its value is the same on both
                    segs_a, segs_b = _shared_only(self.a, self.a.segments(ra, EXT_MAP), self.b, self.b.segments(rb, EXT_MAP), EXT_MAP)
                    ra = _entries(segs_a, self.a.where).get(str(key), _ABSENT)
                    rb = _entries(segs_b, self.b.where).get(str(key), _ABSENT)
                    if ra is _ABSENT and rb is _ABSENT:
                        return  # equal there, or absent on both sides
                    continue
            ra = _ABSENT if ra is _ABSENT else _child(self.a, ra, key)
            rb = _ABSENT if rb is _ABSENT else _child(self.b, rb, key)
            if depth >= limits.MAX_DEPTH:
                raise LimitExceededError(f"{self.a.where}: path nests deeper than {limits.MAX_DEPTH} levels")
        if ra is _ABSENT and rb is _ABSENT:
            return
        if ra is _ABSENT:
            self.emit("add", parts, parts, new=self.b.decode(self.b.deref(rb)))
        elif rb is _ABSENT:
            self.emit("remove", parts, parts, old=self.a.decode(self.a.deref(ra)))
        else:
            self.diff(ra, rb, parts, parts, len(parts))

    # -- blobs ---------------------------------------------------------------------
    def blob_sections(self) -> None:
        ra = _root(self.a.ck.manifest.sections, "blobs", {})
        rb = _root(self.b.ck.manifest.sections, "blobs", {})
        self._blob_maps(ra, rb, "", 0)

    def _blob_maps(self, ra: Any, rb: Any, prefix: str, depth: int) -> None:
        if states_equal(ra, rb):
            return
        if depth > limits.MAX_DEPTH:
            raise LimitExceededError(f"{self.a.where}: blob directories nest deeper than {limits.MAX_DEPTH} levels")
        ra, rb = self.a.deref(ra), self.b.deref(rb)
        for side, raw in ((self.a, ra), (self.b, rb)):
            if _kind(raw) != EXT_MAP:
                raise CorruptError(f"{side.where}: blob entries at {prefix or 'the top'} are not a map")
        for name, xa, xb in self.map_pairs(ra, rb):
            path = prefix + name
            ea = None if xa is _ABSENT else self._entry(self.a, xa, path)
            eb = None if xb is _ABSENT else self._entry(self.b, xb, path)
            ma = None if ea is None else self._meta(self.a, ea)
            mb = None if eb is None else self._meta(self.b, eb)
            if ma is not None and mb is not None and ma["type"] == mb["type"]:
                if ma != mb:
                    self.blobs.append(BlobChange("replace", path, ma, mb))
                if ma["type"] == "dir":
                    self._blob_maps(_field(ea, "entries", {}), _field(eb, "entries", {}), path + "/", depth + 1)
                continue
            if ma is not None:
                self._blob_all(self.a, "remove", path, ea, ma, depth)
            if mb is not None:
                self._blob_all(self.b, "add", path, eb, mb, depth)

    def _blob_all(self, side: _Side, op: str, path: str, entry: Any, meta: dict[str, Any], depth: int) -> None:
        """An entry added or removed, and everything under it when it is a directory."""
        self.blobs.append(BlobChange(op, path, meta if op == "remove" else None, meta if op == "add" else None))
        if meta["type"] != "dir":
            return
        if depth > limits.MAX_DEPTH:
            raise LimitExceededError(f"{side.where}: blob directories nest deeper than {limits.MAX_DEPTH} levels")
        raw = side.deref(_field(entry, "entries", {}))
        if _kind(raw) != EXT_MAP:
            raise CorruptError(f"{side.where}: blob directory {path} has no entries map")
        for name, x in side.items(side.segments(raw, EXT_MAP), EXT_MAP):
            sub = path + "/" + _check_key(name, side.where)
            e = self._entry(side, x, sub)
            self._blob_all(side, op, sub, e, self._meta(side, e), depth + 1)

    def _entry(self, side: _Side, raw: Any, path: str) -> dict[str, Any]:
        entry = side.deref(raw)
        if _kind(entry) != EXT_MAP:
            raise CorruptError(f"{side.where}: blob entry {path} is not a map")
        if type(entry) is not dict:  # a tree: only a writer other than ckpt's makes one
            entry = dict(side.items(side.segments(entry, EXT_MAP), EXT_MAP))
        return {k: side.deref(v) if k != "entries" else v for k, v in entry.items()}

    def _meta(self, side: _Side, entry: dict[str, Any]) -> dict[str, Any]:
        """The listing entry: what the blob diff compares and shows (no content, no times)."""
        kind = entry.get("type")
        if not isinstance(kind, str):
            raise CorruptError(f"{side.where}: a blob entry has no type")
        meta: dict[str, Any] = {"type": kind}
        if kind == "file":
            meta["size"] = entry.get("size")
            meta["mode"] = entry.get("mode")
            data = entry.get("data")
            if type(data) is Ext and data.code == EXT_BYTES:
                meta["root"] = data.oid.hex()
            elif isinstance(data, bytes):
                meta["sha256"] = hashlib.sha256(data).hexdigest()
        elif kind == "dir":
            meta["mode"] = entry.get("mode")
        elif kind == "symlink":
            meta["target"] = entry.get("target")
        elif kind == "skipped":
            meta["reason"] = entry.get("reason")
        return {k: to_json(v) for k, v in meta.items()}


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
    from ckptcli.errors import UsageError

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


# -- entry point -------------------------------------------------------------------


def diff_checkpoints(
    a: Checkpoint, b: Checkpoint, *, section: str | None = None, path: str | None = None, snapshot: bool = False, reducers: Any = None
) -> DiffResult:
    """Compare two checkpoints (of one store, of two, or checkpoint files).

    Args:
        a, b: the checkpoints; the patch turns A's state into B's.
        section: compare only this section (memory, plan, tools, events, blobs,
            ext:<namespace>); the patch then covers that section only.
        path: compare only the value at this JSON Pointer of the state document
            ("/memory/user/name"); the patch then covers that value only.
        snapshot: compare the stored sections of checkpoints with an event tail;
            by default each side is the state AT its checkpoint, the snapshot with the
            tail applied (ckptcli.history.stateat; `reducers` for custom kinds). Sides without
            a tail are compared as stored either way, at no extra cost.
    Returns:
        DiffResult: `changes` (the state's patch operations, in order), `blobs` (the
        blob listing's), `patch()`, `blobs_patch()`, `summary()`, `to_dict()`.
    Raises:
        NotFoundError when neither checkpoint has `section`; CorruptError,
        LimitExceededError for damaged or hostile checkpoints.
    """
    if section is not None:
        have = set(a.manifest.sections) | set(b.manifest.sections)
        if section not in have:
            names = ", ".join(sorted(have)) or "none"
            raise NotFoundError(f"neither checkpoint has section {section!r} (they have: {names})")
    from ckptcli.history.stateat import state_at

    at_a = state_at(a, snapshot=snapshot, reducers=reducers, lenient=True)
    at_b = at_a if b.id == a.id and b.source is a.source else state_at(b, snapshot=snapshot, reducers=reducers, lenient=True)
    docs = None
    if at_a.applied or at_b.applied:
        docs = (at_a.raw_parts() if at_a.applied else _stored_document(a), at_b.raw_parts() if at_b.applied else _stored_document(b))
    walk = _Walk(a, b, docs)
    keyed = False
    with deep_recursion():
        if path is not None:
            walk.at_path(parse_pointer(path))
        else:
            if section != "blobs":
                walk.state(section)
                if section in (None, "events"):
                    keyed = _key_writes(walk, a, b)
            if section in (None, "blobs"):
                walk.blob_sections()
    states = {k: s.to_dict() for k, s in (("a", at_a), ("b", at_b))} if (at_a.events or at_b.events or at_a.problem or at_b.problem) else {}
    return DiffResult(a.id, b.id, walk.changes, walk.blobs, section, keyed, states, path)


WRITE_KIND = "langgraph:write"


def _writes_by_key(ck: Checkpoint) -> dict[tuple[str, int], dict[str, Any]] | None:
    """A LangGraph checkpoint's pending writes by (task id, write index), each without
    its seq and ts (where it sits in the tail); None for other events or checkpoints."""
    if ck.manifest.layout.get("format") != "langgraph" or "events" not in ck.manifest.sections:
        return None
    events = ck.section("events")
    if type(events) is not list:
        return None
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for ev in events:
        if type(ev) is not dict or ev.get("kind") != WRITE_KIND or type(ev.get("task_id")) is not str:
            return None
        key = (ev["task_id"], ev.get("idx", 0))
        if type(key[1]) is not int or key in out:
            return None
        out[key] = {k: v for k, v in ev.items() if k not in ("seq", "ts")}
    return out


def _key_writes(walk: _Walk, a: Checkpoint, b: Checkpoint) -> bool:
    """Report LangGraph's pending writes by (task id, write index), not by position: a
    write that only sits at another seq is no change. The positional operations stay
    in the patch (structural), which still turns A's events into B's exactly."""
    wa = _writes_by_key(a)
    wb = _writes_by_key(b) if wa is not None else None
    if wa is None or wb is None:
        return False
    at = next((i for i, c in enumerate(walk.changes) if c.section == "events"), len(walk.changes))
    keyed: list[Change] = []
    for key, w in wb.items():
        old = wa.get(key)
        if old is None or not states_equal(old, w):
            keyed.append(Change("add" if old is None else "replace", "events", key, "", old, w, in_patch=False, label=_write_label(w)))
    keyed.extend(Change("remove", "events", key, "", w, None, in_patch=False, label=_write_label(w)) for key, w in wa.items() if key not in wb)
    rest = [c if c.section != "events" else Change(c.op, c.section, c.path, c.pointer, c.old, c.new, True) for c in walk.changes]
    walk.changes = rest[:at] + keyed + rest[at:]
    return True


def _write_label(w: dict[str, Any]) -> str:
    return f"write {w.get('idx', 0)} of task {w['task_id']}, {w.get('channel')}"


# -- rendering for people (no UI library: the CLI colours these lines) ---------------

#: Line kinds: "header", "section", "add", "remove", "change", "summary".
Line = tuple[str, str]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
SHORT = 80  # values longer than this (as one line of text) are summarised


def format_path(parts: tuple[PathPart, ...]) -> str:
    """("user", "names", 3) -> 'user.names[3]'; keys that are not identifiers are quoted."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.match(p):
            out += ("." if out else "") + p
        else:
            out += "[" + json.dumps(p, ensure_ascii=False) + "]"
    return out


def _is_number(x: Any) -> bool:
    return type(x) is int or type(x) is float


def _num(x: int | float) -> str:
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if abs(x) >= 2**64:
        return f"<{x.bit_length()}-bit integer>"
    when = ns_time(x)
    return f"{x} ({when})" if when is not None else str(x)


def ns_time(x: int) -> str | None:
    """The UTC time of an integer that reads as one in nanoseconds since the epoch (from
    2001 to 2100: LangGraph's event `ts`, ckpt's created_ns), to the second; None for
    any other integer."""
    if type(x) is int and _NS_2001 <= x < _NS_2100:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(x // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


_NS_2001, _NS_2100 = 978_307_200 * 10**9, 4_102_444_800 * 10**9  # nanoseconds since 1970 of 2001-01-01 and 2100-01-01


def describe(value: Any, width: int = SHORT) -> str:
    """One line for a value: short values as JSON, long strings, byte strings and
    numeric arrays as summaries, containers cut at `width` characters."""
    t = type(value)
    if t is str:
        if len(value) <= width and "\n" not in value:
            return json.dumps(value, ensure_ascii=False)
        head = json.dumps(value[: width // 2], ensure_ascii=False)[:-1]
        return f'{head}…" ({len(value):,} chars)'
    if t is bytes:
        if len(value) <= 16:
            return f"<{len(value)} bytes {value.hex()}>" if value else "<0 bytes>"
        return f"<{human_size(len(value))} of bytes, sha256 {hashlib.sha256(value).hexdigest()[:12]}>"
    if t is list and len(value) > 8 and all(_is_number(x) for x in value):
        finite = [x for x in value if not (isinstance(x, float) and not math.isfinite(x))]
        if not finite:
            return f"<{len(value):,} numbers>"
        return f"<{len(value):,} numbers, min {_num(min(finite))}, max {_num(max(finite))}>"
    if t is list or t is dict:
        text = "".join(_compact(value, width + 1))
        if len(text) > width:
            noun = ("item" if t is list else "key") + ("s" if len(value) != 1 else "")
            return text[: width - 1] + f"… ({len(value):,} {noun})"
        return text
    if t is float or t is int:
        return _num(value)
    return json.dumps(value)


def _compact(value: Any, budget: int) -> Iterator[str]:
    """Compact one-line text of a value, stopping soon after `budget` characters."""
    used = 0
    stack: list[Any] = [value]
    while stack and used <= budget:
        x = stack.pop()
        if type(x) is _Text:
            piece = x.text
        elif type(x) is list and not (len(x) > 8 and all(_is_number(i) for i in x)):
            parts: list[Any] = [_Text("[")]
            for i, item in enumerate(x):
                if i:
                    parts.append(_Text(", "))
                parts.append(item)
            parts.append(_Text("]"))
            stack.extend(reversed(parts))
            continue
        elif type(x) is dict:
            parts = [_Text("{")]
            for i, (k, v) in enumerate(x.items()):
                parts.append(_Text((", " if i else "") + json.dumps(k, ensure_ascii=False) + ": "))
                parts.append(v)
            parts.append(_Text("}"))
            stack.extend(reversed(parts))
            continue
        else:
            piece = describe(x, 40)
        used += len(piece)
        yield piece


class _Text(NamedTuple):
    text: str


def describe_change(old: Any, new: Any) -> str:
    """'old -> new', with long strings and byte strings shown as where they differ."""
    if type(old) is str and type(new) is str and (len(old) > SHORT or len(new) > SHORT or "\n" in old + new):
        at = _first_difference(old, new)
        lo = max(0, at - 20)
        a = json.dumps(old[lo : at + 20], ensure_ascii=False)
        b = json.dumps(new[lo : at + 20], ensure_ascii=False)
        return f"string of {len(old):,} -> {len(new):,} chars, first difference at char {at:,}: …{a}… -> …{b}…"
    return f"{describe(old)} -> {describe(new)}"


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_PLAN_VERBS = {"add": "push", "remove": "pop"}


def render(result: DiffResult, *, stat: bool = False) -> list[Line]:
    """The diff for people, as (kind, text) lines, grouped by section."""
    lines: list[Line] = [("header", f"diff {result.a.hex()[:12]} -> {result.b.hex()[:12]}")]
    for side, name in (("a", result.a), ("b", result.b)):
        st = result.states.get(side)
        if st is not None:
            lines.append(("header", f"{side.upper()} {name.hex()[:12]}: {state_line(st)}"))
    if result.same:
        where = f" in section {result.section}" if result.section else ""
        where += f" at {result.path}" if result.path is not None else ""
        lines.append(("summary", "no differences" + where))
        return lines
    summary = result.summary()
    if stat:
        for name, counts in summary["sections"].items():
            lines.append(("section", f"{name:<12} {_counts_text(name, counts)}"))
    else:
        current = None
        for group in _groups([c for c in result.changes if not c.structural]):
            first = group[0]
            if first.section != current:
                current = first.section
                lines.append(("section", current))
            lines.append(_change_line(group))
        if result.blobs:
            lines.append(("section", "blobs"))
            lines.extend(_blob_line(bc) for bc in result.blobs)
    n = summary["changes"]
    total = f"{n:,} change{'s' if n != 1 else ''}"
    if stat:
        lines.append(("summary", f"{total} in {len(summary['sections'])} section{'s' if len(summary['sections']) != 1 else ''}"))
    else:
        lines.append(("summary", f"{total}: " + "; ".join(f"{name} {_counts_text(name, c)}" for name, c in summary["sections"].items())))
    return lines


def state_line(st: dict[str, Any]) -> str:
    """Which state a side is (stateat.StateAt.to_dict), for people."""
    if "problem" in st:
        return "stored sections (its events section does not replay)"
    if st["tail"] is None:
        return f"state at seq {st['seq']} (no event tail)"
    tail = f"tail {st['tail'][0]}..{st['tail'][1]}"
    if st["applied"]:
        return f"state at seq {st['seq']} (snapshot at seq {st['snapshot_seq']} + {tail})"
    return f"stored snapshot at seq {st['snapshot_seq']} (without {tail})"


def _counts_text(section: str, counts: dict[str, int]) -> str:
    words = {"added": "added", "removed": "removed", "changed": "changed"}
    if section == "plan":
        words = {"added": "pushed", "removed": "popped", "changed": "changed"}
    text = ", ".join(f"{counts[k]:,} {w}" for k, w in words.items() if counts.get(k))
    if section == "blobs" and (counts.get("size_before") or counts.get("size_after")):
        text += f" ({human_size(counts['size_before'])} -> {human_size(counts['size_after'])})"
    return text


def _groups(changes: list[Change]) -> Iterator[list[Change]]:
    """Changes one by one, except a run of more than 5 number-for-number replacements
    in one list, which reads better as one line."""
    i = 0
    while i < len(changes):
        c = changes[i]
        j = i + 1
        if c.op == "replace" and c.path and isinstance(c.path[-1], int) and _is_number(c.old) and _is_number(c.new):
            parent = c.path[:-1]
            while (
                j < len(changes)
                and changes[j].op == "replace"
                and changes[j].section == c.section
                and changes[j].path[:-1] == parent
                and changes[j].path and isinstance(changes[j].path[-1], int)
                and _is_number(changes[j].old)
                and _is_number(changes[j].new)
            ):
                j += 1
        if j - i > 5:
            yield changes[i:j]
        else:
            j = i + 1
            yield [c]
        i = j


def _change_line(group: list[Change]) -> Line:
    c = group[0]
    where = format_path(c.path) or "(whole section)"
    if len(group) > 1:
        parent = format_path(c.path[:-1]) or "(whole section)"
        idx = [g.path[-1] for g in group]
        deltas = [abs(g.new - g.old) for g in group if _finite(g.old) and _finite(g.new)]
        span = f"{len(group):,} numbers changed in [{idx[0]}..{idx[-1]}]"
        if deltas:
            span += f", largest change {_num(max(deltas))}"
        return ("change", f"~ {parent}: {span}")
    if c.label is not None:  # a LangGraph pending write: its value is what reads
        where = c.label
        if c.op == "replace" and {k: v for k, v in c.old.items() if k != "value"} == {k: v for k, v in c.new.items() if k != "value"}:
            return ("change", f"~ {where}: {describe_change(c.old.get('value'), c.new.get('value'))}")
        if c.op != "replace":
            return ("add" if c.op == "add" else "remove", f"{'+' if c.op == 'add' else '-'} {where}: {describe((c.new if c.op == 'add' else c.old).get('value'))}")
    if c.op == "replace":
        return ("change", f"~ {where}: {describe_change(c.old, c.new)}")
    value = c.new if c.op == "add" else c.old
    kind = "add" if c.op == "add" else "remove"
    if c.section == "plan" and c.path and isinstance(c.path[-1], int):
        return (kind, f"{_PLAN_VERBS[c.op]} {where}: {describe(value)}")
    return (kind, f"{'+' if c.op == 'add' else '-'} {where}: {describe(value)}")


def _finite(x: Any) -> bool:
    return _is_number(x) and not (isinstance(x, float) and not math.isfinite(x))


def _blob_text(meta: dict[str, Any]) -> str:
    kind = meta.get("type")
    if kind == "file":
        size = meta.get("size")
        return human_size(size) if type(size) is int else "file"
    if kind == "symlink":
        return f"symlink -> {meta.get('target')}"
    if kind == "skipped":
        return f"skipped ({meta.get('reason')})"
    if kind == "dir":
        return "directory"
    return str(kind)


def _blob_line(bc: BlobChange) -> Line:
    old, new = bc.old or {}, bc.new or {}
    path = bc.path + ("/" if (new or old).get("type") == "dir" else "")
    if bc.op == "add":
        return ("add", f"+ {path}  {_blob_text(new)}")
    if bc.op == "remove":
        return ("remove", f"- {path}  {_blob_text(old)}")
    parts = []
    if old.get("size") != new.get("size"):
        parts.append(f"{_blob_text(old)} -> {_blob_text(new)}")
    elif (old.get("sha256"), old.get("root")) != (new.get("sha256"), new.get("root")):
        parts.append(f"{_blob_text(new)}, content changed")
    if old.get("mode") != new.get("mode"):
        parts.append(f"mode {_mode(old.get('mode'))} -> {_mode(new.get('mode'))}")
    if old.get("target") != new.get("target"):
        parts.append(f"-> {old.get('target')} now -> {new.get('target')}")
    if old.get("reason") != new.get("reason"):
        parts.append(f"skipped ({new.get('reason')})")
    return ("change", f"~ {path}  {', '.join(parts) or 'changed'}")


def _mode(mode: Any) -> str:
    return f"{mode:04o}" if type(mode) is int else "none"


__all__ = [
    "BlobChange",
    "Change",
    "DiffResult",
    "describe",
    "describe_change",
    "diff_checkpoints",
    "format_path",
    "ns_time",
    "open_pair",
    "pointer",
    "render",
    "section_of",
]
