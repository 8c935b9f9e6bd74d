"""The timeline of a checkpoint's event tail, as `ckpt tui` scrubs through it, and the
helpers that show a state as an outline; no UI here (tests/test_import_hygiene.py).

Row 0 is the snapshot, row r the state after the tail's r-th event, replayed by the same
reducers as `ckpt replay`; events are read through a `LazyList`, never the whole tail.
Invariants: the timeline keeps the state at every `every`-th row (at most MAX_SNAPSHOTS)
and the last RECENT_STATES rows asked for, so a jump costs at most `every` reducer
applications; `state()` stops when `should_stop()` says so and keeps what it made. Costs
and figures: docs/tui.md. `History`, `LazyList`, `LRU` and the change lines live in
`ckptcli.history.graph`, `.lazylist` and `.render`, and are re-exported here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptcli.errors import CkptError, InvalidInputError, NotFoundError
from ckptcli.format import limits
from ckptcli.format.manifest import LAYOUT_SECTIONS
from ckptcli.format.values import EXT_BYTES, EXT_LIST, EXT_MAP, EXT_REF, EXT_STR, TREE_KINDS, Ext, check_tree_node, unpack_ev
from ckptcli.history.change import Change
from ckptcli.history.events import (
    CHECKPOINT,
    ERROR,
    LABEL_SEQ,
    MEMORY_DELETE,
    MEMORY_SET,
    MESSAGE_APPEND,
    PLAN_POP,
    PLAN_PUSH,
    PLAN_UPDATE,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
    Owned,
    Reducers,
    check_state,
    event_from_map,
    labelled_seq,
    out_of_order,
)
from ckptcli.history.graph import FORK, GLYPHS, MERGE, MIGRATION, ROOT, TAKE, History, Node, Ref, SubjectInfo
from ckptcli.history.lazylist import LRU, NODE_CACHE, LazyList
from ckptcli.history.render import Line, change_line, describe, describe_change, format_path, render_changes
from ckptcli.history.replay import Step
from ckptcli.listing import format_time

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint

#: with what moved to ckptcli.history.graph, .lazylist and .render, re-exported where it was
__all__ = [
    "FORK",
    "GLYPHS",
    "LRU",
    "MERGE",
    "MIGRATION",
    "NODE_CACHE",
    "ROOT",
    "STOP_CHECK_EVERY",
    "TAKE",
    "BlobEntry",
    "History",
    "LazyList",
    "Line",
    "Node",
    "Ref",
    "StepView",
    "Stopped",
    "SubjectInfo",
    "Timeline",
    "TimelineRow",
    "blob_listing",
    "change_line",
    "child_keys",
    "describe",
    "describe_change",
    "event_summary",
    "events_root",
    "format_path",
    "label_of",
    "render_changes",
    "section_list",
    "section_shape",
    "state_changes",
    "tool_answers",
    "tool_status",
    "windows",
]

#: Keep the state at every this many rows of a timeline (at least).
SNAPSHOT_EVERY = 1000
#: At most this many kept states; longer tails keep them further apart.
MAX_SNAPSHOTS = 128
#: Recently asked-for states kept besides (the cursor's neighbours).
RECENT_STATES = 16
#: Decoded events kept.
EVENT_CACHE = 4096
#: How often (in reducer applications, ~1 ms) a long replay asks whether to stop; a UI's
#: `should_stop` also lets its own thread run then (see ckptcli/tui/screens/timeline.py).
STOP_CHECK_EVERY = 32


# -- the event tail ---------------------------------------------------------------------------
def _snapshot_of(ck: Checkpoint) -> Any:
    """The checkpoint's state document without `events` (and without blobs), decoded."""
    from ckptcli.document import join_document

    m = ck.manifest
    names = [n for n in m.sections if n not in ("events", "blobs")]
    sections = {n: ck.section(n) for n in names}
    return join_document(m.layout, sections)


@dataclass
class TimelineRow:
    """One row of a timeline, as a list shows it."""

    row: int
    seq: int
    ts: int | None  # None for the snapshot row
    kind: str  # the event's kind, or "snapshot"
    summary: str
    cause: int | None = None

    @property
    def time(self) -> str:
        return "" if self.ts is None else format_time(self.ts)


@dataclass
class StepView:
    """Row r of a timeline: the state before and after its event, and what changed."""

    row: int
    before: Any
    after: Any
    changes: list[Change] = field(default_factory=list)

    @property
    def changed_paths(self) -> dict[tuple[Any, ...], str]:
        """Path -> op ("add", "remove", "replace") of every change."""
        return {c.path: c.op for c in self.changes}


class Stopped(Exception):  # noqa: N818 - a signal, not an error: the caller asked to stop
    """A replay was abandoned because `should_stop()` said so."""


class Timeline:
    """A checkpoint's event tail as rows: row 0 is the snapshot (the state before the
    tail), row r the state after the tail's r-th event. Events are read lazily, states
    replayed with the replay library's reducers from the nearest kept state.

    Raises (from `open`): NotFoundError when the checkpoint has no events section;
    InvalidInputError when it is not a list, or the snapshot is not a state.
    """

    def __init__(
        self,
        events: LazyList,
        snapshot: Any,
        *,
        id: str = "",
        base_label: str | None = None,
        reducers: Reducers | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        max_snapshots: int = MAX_SNAPSHOTS,
        event_cache: int = EVENT_CACHE,
    ) -> None:
        self.id = id
        self.events = events
        self.snapshot = snapshot
        self.reducers = reducers or Reducers()
        n = len(events)
        self.every = max(snapshot_every, math.ceil(n / max(1, max_snapshots)))
        self._events: LRU[int, Event] = LRU(event_cache)
        self._snapshots: LRU[int, Any] = LRU(max_snapshots)
        self._recent: LRU[int, Any] = LRU(RECENT_STATES)
        self._broken: tuple[int, CkptError] | None = None
        self.applied = 0  # reducer applications so far (for benchmarks and tests)
        if n:
            check_state(snapshot, f"checkpoint {id[:12]}: the snapshot")
            self.base_seq = self.event(0).seq - 1
        else:
            self.base_seq = labelled_seq(base_label)

    def check(self, limit: int = 20_000) -> None:
        """Read the tail's events as a view would, so that one that does not follow
        formats/events.md is an error before anything is shown: all of them for a tail
        of up to `limit` events; for a longer one (read only where it is shown) the first
        and last `limit // 2`, the rest as they are reached.

        Raises:
            InvalidInputError naming the event, the rule and the spec section.
        """
        n = len(self.events)
        idx = range(n) if n <= limit else [*range(limit // 2), *range(n - limit // 2, n)]
        prev: int | None = None
        for i in idx:
            ev = self.event(i, keep=False)
            if prev is not None and ev.seq <= prev:
                raise out_of_order(f"checkpoint {self.id[:12]}", i, ev.seq, prev)
            prev = ev.seq

    @classmethod
    def open(cls, ck: Checkpoint, *, reducers: Reducers | None = None, **kwargs: Any) -> Timeline:
        """The timeline of checkpoint `ck`: its events section read lazily, its other
        sections (the snapshot) decoded now."""
        events = LazyList(ck.source, events_root(ck), f"checkpoint {ck.hex[:12]}: events")
        return cls(events, _snapshot_of(ck), id=ck.hex, base_label=ck.manifest.labels.get(LABEL_SEQ), reducers=reducers, **kwargs)

    def __len__(self) -> int:
        """Rows: the snapshot and one per event."""
        return len(self.events) + 1

    @property
    def last_seq(self) -> int:
        return self.event(len(self.events) - 1).seq if len(self.events) else self.base_seq

    # -- events -------------------------------------------------------------------------------
    def event(self, i: int, *, keep: bool = True) -> Event:
        """The tail's event i (0-based), read and checked on first use (and kept in the
        event cache unless `keep` is false: a long replay keeps only those near its end)."""
        ev = self._events.get(i)
        if ev is None:
            ev = event_from_map(self.events.value(i), f"checkpoint {self.id[:12]}: events[{i}]")
            if keep:
                self._events.put(i, ev)
        return ev

    def row(self, r: int) -> TimelineRow:
        if r == 0:
            return TimelineRow(0, self.base_seq, None, "snapshot", f"the state before the tail ({len(self.events):,} events)")
        ev = self.event(r - 1)
        return TimelineRow(r, ev.seq, ev.ts, ev.kind, event_summary(ev), ev.cause)

    def seq(self, r: int) -> int:
        """The position (seq) of row r."""
        return self.base_seq if r == 0 else self.event(r - 1).seq

    def row_for_seq(self, seq: int) -> int:
        """The row of the last event with seq <= `seq` (0: before the first event). A
        recorder's tail has no gaps, so row seq - base_seq is tried first (one event
        read); else a binary search (O(log n) reads: a tail is in increasing seq order)."""
        n = len(self.events)
        guess = seq - self.base_seq
        if 1 <= guess <= n and self.event(guess - 1).seq == seq:
            return guess
        if guess > n and (n == 0 or self.event(n - 1).seq <= seq):
            return n
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.event(mid).seq <= seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- states ----------------------------------------------------------------------------------
    def cached_state(self, r: int) -> Any | None:
        """The state at row r if it is at hand (no replay), else None."""
        if r == 0:
            return self.snapshot
        got = self._recent.get(r)
        return got if got is not None else self._snapshots.get(r)

    def _start_for(self, r: int) -> tuple[int, Any]:
        """The nearest kept state at or before row r."""
        best, state = 0, self.snapshot
        for k in (*self._recent.keys(), *self._snapshots.keys()):
            if best < k <= r:
                got = self.cached_state(k)
                if got is not None:
                    best, state = k, got
        return best, state

    def cost(self, r: int) -> int:
        """Reducer applications needed to get the state at row r now."""
        return r - self._start_for(r)[0]

    def state(self, r: int, should_stop: Callable[[], bool] | None = None) -> Any:
        """The state at row r.

        Raises:
            Stopped when `should_stop()` turned true on the way; InvalidInputError for an
            event that does not fit the state (or out of seq order), NotFoundError for a
            kind no reducer is installed for (and for any row after that event, at once).
        """
        if not 0 <= r < len(self):
            raise IndexError(r)
        if self._broken is not None and r > self._broken[0]:
            raise self._broken[1]
        start, state = self._start_for(r)
        owned: Owned = {}  # changed in place until a state is kept (events.Reducers.apply)
        prev = self.event(start - 1).seq if start else None
        for k in range(start, r):
            if should_stop is not None and (k - start) % STOP_CHECK_EVERY == STOP_CHECK_EVERY - 1 and should_stop():
                raise Stopped
            try:
                ev = self.event(k, keep=k >= r - EVENT_CACHE // 2)
                if prev is not None and ev.seq <= prev:
                    raise InvalidInputError(
                        f"checkpoint {self.id[:12]}: events[{k}] has seq {ev.seq}, not after the previous event's {prev}",
                        hint="a tail is in increasing seq order",
                    )
                prev = ev.seq
                state = self.reducers.apply(state, ev, owned)
            except CkptError as exc:
                self._broken = (k, exc)
                raise
            self.applied += 1
            if (k + 1) % self.every == 0:
                owned.clear()
                self._snapshots.put(k + 1, state)
            if k + 1 > r - RECENT_STATES and k + 1 != r:
                owned.clear()
                self._recent.put(k + 1, state)  # the rows just above: moving back up is free
        if r:
            self._recent.put(r, state)
        return state

    def step(self, r: int, should_stop: Callable[[], bool] | None = None) -> StepView:
        """Row r with the states around its event and the changes it made (row 0: none)."""
        if r == 0:
            return StepView(0, self.snapshot, self.snapshot, [])
        after = self.cached_state(r)
        before = self.state(r - 1, should_stop)
        if after is None:
            after = self.state(r, should_stop)
        return StepView(r, before, after, state_changes(before, after))

    def find(self, text: str, start: int, *, backwards: bool = False, should_stop: Callable[[], bool] | None = None) -> int | None:
        """The next row after `start` (before it, `backwards`) whose kind or summary
        contains `text` (case-insensitive), wrapping around; None when none does."""
        needle = text.lower()
        n = len(self)
        for step in range(1, n + 1):
            if should_stop is not None and step % STOP_CHECK_EVERY == 0 and should_stop():
                raise Stopped
            r = (start - step) % n if backwards else (start + step) % n
            row = self.row(r)
            if needle in row.kind.lower() or needle in row.summary.lower() or needle == f"#{row.seq}":
                return r
        return None

    @property
    def kept_states(self) -> int:
        return len(self._snapshots) + len(self._recent)


def events_root(ck: Checkpoint) -> bytes:
    """The encoded root of the checkpoint's event tail.

    Raises:
        NotFoundError when the checkpoint has none (no events section, or a state that
        is not laid out as sections).
    """
    ev = ck.manifest.sections.get("events")
    if ev is None or ck.manifest.layout.get("kind") != LAYOUT_SECTIONS:
        raise NotFoundError(
            f"checkpoint {ck.hex[:12]} has no event tail", hint="only checkpoints whose state has an events section have a timeline"
        )
    return ev


_NO_EVENT = Event(0, 0, CHECKPOINT, {})


def state_changes(a: Any, b: Any) -> list[Change]:
    """What turns state `a` into state `b`, as ckptcli.history.replay computes a step's changes
    (for two states that are not one event apart too: a diff of two timeline points)."""
    return Step(_NO_EVENT, a, b).changes()


def event_summary(ev: Event, width: int = 60) -> str:
    """One line for an event, by kind."""
    f = ev.fields
    try:
        if ev.kind == MEMORY_SET:
            return f"{format_path(tuple(f['path'])) or '(memory)'} = {describe(f['value'], width)}"
        if ev.kind == MEMORY_DELETE:
            return f"del {format_path(tuple(f['path']))}"
        if ev.kind == PLAN_PUSH:
            return f"push {describe(f['item'], width)}"
        if ev.kind == PLAN_POP:
            return "pop"
        if ev.kind == PLAN_UPDATE:
            where = format_path((f.get("index", -1), *f.get("path", [])))
            return f"plan{where} = {describe(f['value'], width)}"
        if ev.kind == TOOL_CALL:
            return f"{f['tool']}({describe(f['args'], width)}) {f['call_id']}"
        if ev.kind == TOOL_RESULT:
            status = f.get("status", "ok")
            tail = f.get("error", "failed") if status == "error" else describe(f.get("result"), width)
            return f"{f['call_id']} {status}: {tail}"
        if ev.kind == MESSAGE_APPEND:
            msg = f["message"]
            if isinstance(msg, dict) and "content" in msg:
                return f"{msg.get('role', '?')}: {describe(msg['content'], width)}"
            return describe(msg, width)
        if ev.kind == CHECKPOINT:
            return " ".join(str(f[k]) for k in ("id", "note") if k in f) or "checkpoint"
        if ev.kind == ERROR:
            return f"{f.get('type', 'error')}: {f['message']}"
    except (KeyError, TypeError):
        pass
    shown = {k: v for k, v in f.items() if k not in ("cause", "sender", "receiver", "msg_id")}
    return describe(shown, width)


# -- values as an outline (what a tree view of a state shows) --------------------------------------
PAGE = 100


def child_keys(value: Any) -> list[Any]:
    """The keys (map) or indices (list) of a container's children; [] for a scalar."""
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, list):
        return list(range(len(value)))
    return []


#: Children shown around each changed one of a long container (a few on each side).
AROUND = 5


def windows(n: int, focus: Iterable[int], page: int = PAGE, around: int = AROUND) -> list[tuple[int, int]]:
    """Which of a container's n children to show, as [start, end) ranges; what falls
    between is left for a "… more" placeholder. Opened by hand (no focus): the first
    `page`, or all when n <= 2 * page. Opened to show changes (focus: the changed
    children's indices): `around` children on each side of each, or all when
    n <= 4 * around, so that a step into a 20,000-message conversation adds a dozen
    tree nodes, not hundreds."""
    wanted = sorted({i for i in focus if 0 <= i < n})
    if not wanted:
        if n <= 2 * page:
            return [(0, n)] if n else []
        return [(0, page)]
    if n <= 4 * around:
        return [(0, n)]
    out: list[tuple[int, int]] = []
    for i in wanted:
        s, e = max(0, i - around), min(n, i + around + 1)
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def label_of(key: Any, value: Any, width: int = 60) -> str:
    """A tree node's text: `key: summary` ({...} / [...] with counts for containers)."""
    name = f"[{key}]" if isinstance(key, int) else str(key)
    if isinstance(value, dict):
        return f"{name} {{{len(value):,} key{'s' if len(value) != 1 else ''}}}"
    if isinstance(value, list):
        return f"{name} [{len(value):,} item{'s' if len(value) != 1 else ''}]"
    if type(value) is int:
        return f"{name}: {value}"  # describe() abbreviates long ones; a timestamp reads better whole
    return f"{name}: {describe(value, width)}"


# -- sections, cheaply ----------------------------------------------------------------------------
def section_shape(ck: Checkpoint, name: str) -> str:
    """What a section holds, from its root alone (one object read at most for a tree):
    "map, 12 keys", "list, 100,000 items", "string", ..."""
    ev = ck.manifest.sections.get(name)
    if ev is None:
        return "absent"
    where = f"checkpoint {ck.hex[:12]}: section {name}"
    raw = unpack_ev(ev, where)
    hops = 0
    while type(raw) is Ext and raw.code == EXT_REF and hops <= limits.MAX_DEPTH:
        raw = unpack_ev(ck.source.get(raw.oid), where)
        hops += 1
    if type(raw) is Ext and raw.code in TREE_KINDS:
        _level, total, _children = check_tree_node(unpack_ev(ck.source.get(raw.oid), where), raw.code, where)
        noun = {EXT_LIST: "item", EXT_MAP: "key"}.get(raw.code)
        kind = {EXT_LIST: "list", EXT_MAP: "map", EXT_BYTES: "bytes", EXT_STR: "string"}[raw.code]
        return f"{kind}, {total:,} {noun}{'s' if total != 1 else ''}" if noun else f"{kind}, {total:,} bytes"
    if type(raw) is list:
        return f"list, {len(raw):,} item{'s' if len(raw) != 1 else ''}"
    if type(raw) is dict:
        return f"map, {len(raw):,} key{'s' if len(raw) != 1 else ''}"
    return {str: "string", bytes: "bytes", int: "integer", float: "float", bool: "boolean", type(None): "null"}.get(type(raw), "value")


def tool_answers(tools: LazyList) -> dict[str, str]:
    """call id -> status of the records in a tool-call log that answer a call:
    LangGraph's tool messages ("success" or "error"; docs/langgraph.md, the tools
    section). Reads the whole log once."""
    out: dict[str, str] = {}
    for i in range(len(tools)):
        rec = tools.value(i)
        if isinstance(rec, dict) and "result" in rec and rec.get("status") in ("success", "error") and isinstance(rec.get("call_id"), str):
            out[rec["call_id"]] = rec["status"]
    return out


def tool_status(rec: dict[str, Any], answers: Callable[[], dict[str, str]]) -> str | None:
    """A tool-call record's status, "ok", "error" or "pending" (None when it does not
    say). ckpt's own records carry it; a LangGraph tool call ("called") has the status of
    the tool message answering it, `answers()` (see tool_answers), or is pending while
    none has; a LangGraph tool message has its own ("success" is ok)."""
    status = rec.get("status")
    if status in ("ok", "error", "pending"):
        return str(status)
    if status == "success":
        return "ok"
    if status == "called":
        answer = answers().get(str(rec.get("call_id")))
        return "pending" if answer is None else "ok" if answer == "success" else "error"
    return None


def section_list(ck: Checkpoint, name: str) -> LazyList | None:
    """A section that is a list, read lazily; None when it is absent or not a list."""
    ev = ck.manifest.sections.get(name)
    if ev is None:
        return None
    try:
        return LazyList(ck.source, ev, f"checkpoint {ck.hex[:12]}: section {name}")
    except InvalidInputError:
        return None


@dataclass(frozen=True)
class BlobEntry:
    """One line of a checkpoint's blob listing."""

    path: str
    type: str  # file, dir, symlink, skipped
    size: int | None = None
    mode: int | None = None
    detail: str = ""  # a symlink's target, why an entry was skipped

    @property
    def depth(self) -> int:
        return self.path.count("/")


def blob_listing(entries: dict[str, Any], limit: int = 1_000_000) -> list[BlobEntry]:
    """The files, directories, links and skipped entries of a blobs section (as
    Checkpoint.blobs() gives it: file data left in the store), depth first, in order."""
    out: list[BlobEntry] = []
    stack: list[tuple[str, Any]] = [(name, e) for name, e in reversed(list(entries.items()))]
    while stack and len(out) < limit:
        path, e = stack.pop()
        if not isinstance(e, dict):
            continue
        kind = str(e.get("type"))
        size = e.get("size") if type(e.get("size")) is int else None
        mode = e.get("mode") if type(e.get("mode")) is int else None
        detail = str(e.get("target", "")) if kind == "symlink" else str(e.get("reason", "")) if kind == "skipped" else ""
        out.append(BlobEntry(path, kind, size, mode, detail))
        sub = e.get("entries")
        if kind == "dir" and isinstance(sub, dict):
            stack.extend((f"{path}/{name}", child) for name, child in reversed(list(sub.items())))
    return out
