"""What changed between two checkpoints: hashes first, decoding only where they differ.

Both checkpoints are walked side by side from their section roots: equal encodings or
equal object ids are skipped unread, maps are aligned by key, lists by their items'
encodings, and a value is decoded only where the sides differ, with one decode budget per
side. Why and what it costs: docs/performance.md (`ckpt diff`).

Invariants:
- Applying `patch()` to the JSON view of A's state (formats/v1.md "JSON view") gives B's;
  its list indices are those the earlier operations left (`Change.path` has A's index).
- Equality is `ckptcli.document.states_equal`: types must match, NaN equals NaN, 0.0 and
  -0.0 differ, key order is not compared; unequal bytes that decode to equal values are no
  change. Blobs are compared by metadata and content id, never content (`blobs_patch()`).
- The tolerant options (`ckptcli.history.tolerant`) run only after this walk found a change.
The result types are in `ckptcli.history.change`, the text in `ckptcli.history.render`;
both are re-exported here."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from ckptcli.checkpoint import Checkpoint, looks_like_a_path, names_a_file, open_checkpoint
from ckptcli.document import states_equal
from ckptcli.errors import CorruptError, LimitExceededError, NotFoundError
from ckptcli.format import limits
from ckptcli.format.jsonview import to_json
from ckptcli.format.manifest import EXT_PREFIX, LAYOUT_DOCUMENT, LAYOUT_SECTIONS
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    Ext,
    deep_recursion,
)
from ckptcli.history.change import BlobChange, Change, DiffResult, PathPart, pointer
from ckptcli.history.render import SHORT as SHORT  # SHORT, Line, state_line, MAX_ALIGN_PAIRS: 0.2 names here, kept for one release
from ckptcli.history.render import Line as Line
from ckptcli.history.render import describe, describe_change, format_path, ns_time, render
from ckptcli.history.render import state_line as state_line
from ckptcli.history.sides import (
    _ABSENT,
    _check_key,
    _child,
    _entries,
    _field,
    _kind,
    _match,
    _root,
    _shared_only,
    _Side,
    _stored_document,
    _token,
    _tokens,
    parse_pointer,
)
from ckptcli.history.sides import MAX_ALIGN_PAIRS as MAX_ALIGN_PAIRS
from ckptcli.history.stateat import state_at
from ckptcli.store.repository import Store, store_location

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

#: Section name of an operation on the whole document (only when A and B lay their
#: documents out differently and the root itself is replaced).
WHOLE_DOCUMENT = "document"


# -- opening -----------------------------------------------------------------------


def open_pair(ref_a: str, ref_b: str, *, store: Store | None = None, store_path: Any = None) -> tuple[Checkpoint, Checkpoint]:
    """Open two checkpoints by reference (see checkpoint.open_checkpoint): ids, refs, checkpoint
    files or one of each. A store is opened only when a reference needs one, and once."""
    shared = store

    def one(ref: str) -> Checkpoint:
        nonlocal shared
        if names_a_file(ref) or looks_like_a_path(ref):
            return open_checkpoint(ref, store_path=store_path)
        if shared is None:
            shared = Store.open(store_location(store_path) if store_path is not None else None)
        return open_checkpoint(ref, shared)

    return one(ref_a), one(ref_b)


# -- the walk ----------------------------------------------------------------------


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
    def emit(
        self, op: str, path: tuple[PathPart, ...], ptr: tuple[PathPart, ...], old: Any = None, new: Any = None, structural: bool = False
    ) -> None:
        section, rel = section_of(path, self.layout_a if op == "remove" else self.layout_b)
        self.changes.append(Change(op, rel, old, new, section, pointer(ptr), structural))

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

    def _runs(
        self,
        items_a: list[Any],
        items_b: list[Any],
        start_a: int,
        start_b: int,
        path: tuple[PathPart, ...],
        ptr: tuple[PathPart, ...],
        depth: int,
    ) -> None:
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
            keyed.append(Change("add" if old is None else "replace", key, old, w, "events", "", in_patch=False, label=_write_label(w)))
    keyed.extend(
        Change("remove", key, w, None, "events", "", in_patch=False, label=_write_label(w)) for key, w in wa.items() if key not in wb
    )
    rest = [c if c.section != "events" else replace(c, structural=True) for c in walk.changes]
    walk.changes = rest[:at] + keyed + rest[at:]
    return True


def _write_label(w: dict[str, Any]) -> str:
    return f"write {w.get('idx', 0)} of task {w['task_id']}, {w.get('channel')}"
