"""The models behind `ckpt tui`, with no UI in them: the history graph of a store, and the
timeline of a checkpoint's event tail. The TUI (ckptcli/tui) only draws what these
compute; tests/test_import_hygiene.py checks that this module imports no typer, rich or
textual, and tests/test_timeline.py exercises it without a terminal.

    >>> h = History.from_store(store)                      # doctest: +SKIP
    >>> rows = h.rows("agent:bot"); h.graph(rows)[0]        # doctest: +SKIP
    '●'
    >>> t = Timeline.open(open_checkpoint("latest", store))  # doctest: +SKIP
    >>> len(t), t.row(1).kind, t.step(1).changes            # doctest: +SKIP

**History.** Built from the store's catalog (ckptcli/store/catalog.py, what `ckpt ls`
reads), so a store of 10,000 checkpoints opens without decoding 10,000 manifests. Each
checkpoint is a `Node` with its parents, and a kind read from its metadata: a root (no
parent), a take, a merge (several parents), a fork (labels `fork.of`/`fork.at`,
formats/events.md) or a migration (a schema version other than its parent's, as
`ckpt migrate` writes). Tags, branches and each subject's latest come from the refs.
`graph()` lays a list of checkpoints out as lanes, like `git log --graph`, one row per
checkpoint: a branch shows as a lane that joins its parent's (`●─╯`), a merge as a lane
that opens (`●─╮`).

**Timeline.** A checkpoint with events (formats/events.md) is a snapshot and a tail.
The tail is the `events` section, an encoded list that is a chunk tree once it is long
(formats/v1.md "Chunk trees"); its inner nodes carry the count of items under each child,
so `LazyList` reaches item i by reading one node per level, and a 100,000-event tail is
never decoded whole: only the events shown (and those a replay goes through) are read,
with the nodes and events kept in fixed-size LRU caches. Row 0 of a timeline is the
snapshot, row r (1..n) the state after the tail's r-th event.

The state at row r is the snapshot with r events applied by the replay library's
reducers (ckptcli.history.events.Reducers: the same ones `ckpt replay` uses). Replaying from
the snapshot costs O(r); the timeline keeps the state at every `every`-th row (1,000 by
default, more for tails longer than 128,000 events so that at most 128 are kept), made
on the way whenever a replay passes such a row, and the states of the 16 rows up to the
last one asked for. A jump then costs at most `every` reducer applications once the rows
before it have been passed once, and moving the cursor by one, either way, costs one or
nothing. `state()` takes a
`should_stop` callable so that a UI can run it in a worker and abandon it when the
cursor moves on; what it made on the way is kept. Reducers share every part of a state
an event does not change, so the kept states cost far less than full copies.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import msgpack

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError, NotFoundError
from ckptcli.format import limits
from ckptcli.format.manifest import LAYOUT_SECTIONS
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    EXT_STR,
    TREE_KINDS,
    Budget,
    Decoder,
    Ext,
    ObjectSource,
    check_tree_node,
    packable,
    unpack_ev,
)
from ckptcli.history.diff import describe, describe_change, format_path
from ckptcli.history.events import (
    CHECKPOINT,
    ERROR,
    LABEL_FORK_AT,
    LABEL_FORK_OF,
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
from ckptcli.history.replay import Change, Step
from ckptcli.listing import format_time

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store
    from ckptcli.store.single import CheckpointFile

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Keep the state at every this many rows of a timeline (at least).
SNAPSHOT_EVERY = 1000
#: At most this many kept states; longer tails keep them further apart.
MAX_SNAPSHOTS = 128
#: Recently asked-for states kept besides (the cursor's neighbours).
RECENT_STATES = 16
#: Decoded events kept.
EVENT_CACHE = 4096
#: Parsed chunk-tree nodes kept (a leaf of a tail holds ~512 bytes of events).
NODE_CACHE = 512
#: How often (in reducer applications, ~1 ms) a long replay asks whether to stop; a UI's
#: `should_stop` also lets its own thread run then (see ckptcli/tui/screens/timeline.py).
STOP_CHECK_EVERY = 32


# -- a bounded cache ------------------------------------------------------------------
class LRU(Generic[K, V]):
    """A fixed-size, thread-safe least-recently-used cache."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data


# -- a list read by index ------------------------------------------------------------------
class _Node(NamedTuple):
    """A parsed LIST node: a leaf's items, or an inner node's children with the running
    totals (`ends[j]`: items under children 0..j) that locate an index by bisection."""

    level: int
    total: int
    items: list[Any]  # leaf: raw item EVs; inner: child ids (bytes) or embedded _Node
    counts: list[int]
    ends: list[int]


class LazyList:
    """The items of an encoded list, read by index without decoding the rest.

    `ev` is the list's encoded value: an inline list, a REF to one, or a LIST chunk tree.
    Item i of a tree costs one node read per level (each node is checked as formats/v1.md
    "Chunk trees" requires, and kept in an LRU cache of `node_cache` nodes); the item is
    then decoded with a budget of its own. Safe to use from several threads.

    Raises (from the constructor and `value`):
        InvalidInputError when the value is not a list; CorruptError, LimitExceededError
        for damaged or hostile data.
    """

    def __init__(self, source: ObjectSource, ev: bytes, where: str, *, node_cache: int = NODE_CACHE) -> None:
        self.source = source
        self.where = where
        self._nodes: LRU[bytes, _Node] = LRU(node_cache)
        self.nodes_read = 0
        raw = unpack_ev(ev, where)
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF:
            hops += 1
            if hops > limits.MAX_DEPTH + 1:
                raise LimitExceededError(f"{where}: references chain deeper than {limits.MAX_DEPTH} levels")
            raw = unpack_ev(source.get(raw.oid), f"{where}: object {raw.oid.hex()[:12]}")
        self._inline: list[Any] | None = None
        self._root: _Node | None = None
        self._leaf: tuple[int, int, list[Any]] | None = None
        if type(raw) is list:
            self._inline = raw
            self.total = len(raw)
        elif type(raw) is Ext and raw.code == EXT_LIST:
            self._root = self._read(raw.oid, None, None)
            self.total = self._root.total
        else:
            raise InvalidInputError(f"{where} is not a list")

    def __len__(self) -> int:
        return self.total

    def _parse(self, node: Any, where: str, want_level: int | None, want_total: int | None, below: int | None) -> _Node:
        level, total, children = check_tree_node(node, EXT_LIST, where, want_level, want_total, below)
        if level == 0:
            return _Node(0, total, children, [], [])
        items: list[Any] = []
        counts: list[int] = []
        ends: list[int] = []
        run = 0
        for count, child in children:
            if isinstance(child, bytes):
                items.append(child)
            else:  # the embedded open tail (formats/v1.md "Chunk trees")
                items.append(self._parse(child, f"{where} (embedded node)", None, count, level))
            counts.append(count)
            run += count
            ends.append(run)
        return _Node(level, total, items, counts, ends)

    def _read(self, oid: bytes, want_level: int | None, want_total: int | None) -> _Node:
        node = self._nodes.get(oid)
        where = f"{self.where}: object {oid.hex()[:12]}"
        if node is None:
            node = self._parse(unpack_ev(self.source.get(oid), where), where, want_level, want_total, None)
            self.nodes_read += 1
            self._nodes.put(oid, node)
        elif (want_level is not None and node.level != want_level) or (want_total is not None and node.total != want_total):
            raise CorruptError(f"{where}: node of level {node.level} holding {node.total}, its parent expects level {want_level} holding {want_total}")
        return node

    def raw(self, i: int) -> Any:
        """Item i as its raw EV (references not followed)."""
        if not 0 <= i < self.total:
            raise IndexError(i)
        if self._inline is not None:
            return self._inline[i]
        leaf = self._leaf  # the last leaf reached: a walk through the list stays in it
        if leaf is not None and leaf[0] <= i < leaf[1]:
            return leaf[2][i - leaf[0]]
        node = self._root
        assert node is not None
        start = 0
        while node.level > 0:
            k = bisect.bisect_right(node.ends, i - start)
            start += node.ends[k] - node.counts[k]
            child = node.items[k]
            node = child if isinstance(child, _Node) else self._read(child, node.level - 1, node.counts[k])
        self._leaf = (start, start + node.total, node.items)
        return node.items[i - start]

    def value(self, i: int) -> Any:
        """Item i, decoded (its own decode budget, the format's limits)."""
        raw = self.raw(i)
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF and hops <= limits.MAX_DEPTH:
            # an item longer than 128 bytes is a node object of its own (formats/v1.md "Ext types")
            raw = unpack_ev(self.source.get(raw.oid), f"{self.where}[{i}]: object {raw.oid.hex()[:12]}")
            hops += 1
        if _plain(raw, 0):
            # no reference inside, string keys only: the unpacked item is its value (its
            # size is bounded by the node object it came from)
            return raw
        ev = msgpack.packb(packable(raw), use_bin_type=True)
        return Decoder(self.source, budget=Budget()).decode(ev, f"{self.where}[{i}]")


_CONTAINERS = (dict, list, Ext)
_LONG_KEY = limits.MAX_KEY_BYTES // 4


def _plain(x: Any, depth: int) -> bool:
    """True when a raw EV holds no reference and only map keys the Decoder would accept
    as they are; anything else goes through the Decoder, which reports what is wrong."""
    t = type(x)
    if t is dict:
        if depth >= limits.MAX_DEPTH:
            return False
        for k, v in x.items():
            if type(k) is not str or len(k) > _LONG_KEY:
                return False
            if type(v) in _CONTAINERS and not _plain(v, depth + 1):
                return False
        return True
    if t is list:
        if depth >= limits.MAX_DEPTH:
            return False
        return all(type(v) not in _CONTAINERS or _plain(v, depth + 1) for v in x)
    return t is not Ext


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
        raise NotFoundError(f"checkpoint {ck.hex[:12]} has no event tail", hint="only checkpoints whose state has an events section have a timeline")
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


# -- rendering a difference of two states (the CLI's `replay --step` lines) ---------------------
#: Line kinds as in ckptcli.history.diff.render: "header", "section", "add", "remove", "change", "summary".
Line = tuple[str, str]


def change_line(c: Change) -> Line:
    """One change as `ckpt replay --step` prints it."""
    where = format_path(c.path) or "(the state)"
    if c.op == "add":
        return ("add", f"+ {where}: {describe(c.new)}")
    if c.op == "remove":
        return ("remove", f"- {where}: {describe(c.old)}")
    return ("change", f"~ {where}: {describe_change(c.old, c.new)}")


def render_changes(changes: list[Change], header: str) -> list[Line]:
    """Changes grouped by the part of the state they touch, then a summary line."""
    lines: list[Line] = [("header", header)]
    if not changes:
        lines.append(("summary", "no differences"))
        return lines
    counts: dict[str, dict[str, int]] = {}
    current: Any = None
    for c in changes:
        part = str(c.path[0]) if c.path else "state"
        if part != current:
            current = part
            lines.append(("section", part))
        kind, text = change_line(Change(c.op, c.path[1:], c.old, c.new)) if c.path else change_line(c)
        lines.append((kind, text))
        word = {"add": "added", "remove": "removed"}.get(c.op, "changed")
        per = counts.setdefault(part, {})
        per[word] = per.get(word, 0) + 1
    n = len(changes)
    parts = "; ".join(f"{name} " + ", ".join(f"{v:,} {k}" for k, v in c.items()) for name, c in counts.items())
    lines.append(("summary", f"{n:,} change{'s' if n != 1 else ''}: {parts}"))
    return lines


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


# -- the history of a store ---------------------------------------------------------------------------
ROOT, TAKE, MERGE, FORK, MIGRATION = "root", "take", "merge", "fork", "migration"
#: One glyph per kind of checkpoint, in the graph.
GLYPHS = {ROOT: "○", TAKE: "●", MERGE: "◉", FORK: "◆", MIGRATION: "▲"}


@dataclass(frozen=True, slots=True)
class Node:
    """A checkpoint as the history shows it (from the catalog: no sections)."""

    id: bytes
    subject: str
    parents: tuple[bytes, ...]
    created_ns: int
    labels: dict[str, str]
    message: str
    schema_version: int | str | None
    kind: str = TAKE

    @property
    def hex(self) -> str:
        return self.id.hex()

    @property
    def time(self) -> str:
        return format_time(self.created_ns)


@dataclass(frozen=True, slots=True)
class Ref:
    kind: str  # "tag", "branch" or "latest"
    name: str


@dataclass
class SubjectInfo:
    name: str
    count: int
    newest_ns: int


def _classify(node: Node, nodes: dict[bytes, Node]) -> str:
    if not node.parents:
        return ROOT
    if LABEL_FORK_OF in node.labels and LABEL_FORK_AT in node.labels:
        return FORK
    if len(node.parents) > 1:
        return MERGE
    parent = nodes.get(node.parents[0])
    if parent is not None and parent.schema_version != node.schema_version:
        return MIGRATION
    return TAKE


class History:
    """The checkpoints of a store (or of one checkpoint file), newest first, with the
    refs that name them and the kind of each."""

    def __init__(self, nodes: list[Node], refs: dict[bytes, list[Ref]], location: str = "") -> None:
        self.location = location
        by_id = {n.id: n for n in nodes}
        classified = [Node(n.id, n.subject, n.parents, n.created_ns, n.labels, n.message, n.schema_version, _classify(n, by_id)) for n in nodes]
        classified.sort(key=lambda n: (n.created_ns, n.id), reverse=True)
        self.order = classified
        self.nodes = {n.id: n for n in classified}
        self.refs = refs
        self.children: dict[bytes, list[bytes]] = {}
        for n in classified:
            for p in n.parents:
                self.children.setdefault(p, []).append(n.id)
        self._haystacks: dict[bytes, str] = {}
        self._by_subject: dict[str | None, list[Node]] = {None: classified}

    @classmethod
    def from_store(cls, store: Store) -> History:
        """Every checkpoint of `store`, from its catalog (brought up to date, as `ckpt ls` does)."""
        from ckptcli.store import catalog
        from ckptcli.store.catalog import Summary

        nodes = []
        for row in catalog.rows(store).values():
            try:
                cid, s = Summary.from_row(row)
            except (ValueError, TypeError, CkptError):
                try:
                    cid, s = row[0], Summary.of(store.manifest(row[0]))
                except CkptError:
                    continue  # a damaged manifest is verify's business
            nodes.append(Node(cid, str(s.subject), tuple(s.parents), s.created_ns, dict(s.labels), s.message, s.schema_version))
        refs: dict[bytes, list[Ref]] = {}
        for path, target in _read_refs(store).items():
            kind, _, name = path.partition("/")
            if kind == "tags":
                refs.setdefault(target, []).append(Ref("tag", name))
            elif kind == "branches":
                refs.setdefault(target, []).append(Ref("branch", name))
            elif kind == "latest":
                refs.setdefault(target, []).append(Ref("latest", name.replace("/", ":", 1)))
        return cls(nodes, refs, store.location)

    @classmethod
    def from_file(cls, f: CheckpointFile) -> History:
        """The one checkpoint of a checkpoint file."""
        m = f.manifest()
        node = Node(f.id, str(m.subject), tuple(m.parents), m.created_ns, dict(m.labels), m.message, m.schema_version)
        return cls([node], {}, str(f.path))

    def __len__(self) -> int:
        return len(self.order)

    def subjects(self) -> list[SubjectInfo]:
        """Subjects, the one with the newest checkpoint first."""
        out: dict[str, SubjectInfo] = {}
        for n in self.order:
            info = out.get(n.subject)
            if info is None:
                out[n.subject] = SubjectInfo(n.subject, 1, n.created_ns)
            else:
                info.count += 1
        return list(out.values())

    def rows(self, subject: str | None = None) -> list[Node]:
        """Checkpoints of `subject` (all when None), newest first."""
        got = self._by_subject.get(subject)
        if got is None:
            got = self._by_subject[subject] = [n for n in self.order if n.subject == subject]
        return got

    def ref_names(self, cid: bytes) -> list[Ref]:
        return self.refs.get(cid, [])

    def _haystack(self, n: Node) -> str:
        text = self._haystacks.get(n.id)
        if text is None:
            parts = [n.hex, n.subject, n.message, n.kind, n.time]
            parts.extend(f"{k}={v}" for k, v in n.labels.items())
            parts.extend(f"{r.kind}:{r.name}" for r in self.ref_names(n.id))
            text = self._haystacks[n.id] = "\n".join(parts).lower()
        return text

    def matches(self, n: Node, query: str) -> bool:
        """Every whitespace-separated term of `query` is in the checkpoint's id, subject,
        message, kind, time, labels (key=value) or refs (tag:NAME, branch:NAME), ignoring case."""
        hay = self._haystack(n)
        return all(term in hay for term in query.lower().split())

    def filter(self, rows: list[Node], query: str) -> list[Node]:
        return [n for n in rows if self.matches(n, query)] if query.strip() else rows

    def find(self, rows: list[Node], query: str, start: int, *, backwards: bool = False) -> int | None:
        """The index of the next row after `start` (before it, `backwards`) that matches,
        wrapping around; None when no row does."""
        if not rows or not query.strip():
            return None
        n = len(rows)
        for step in range(1, n + 1):
            i = (start - step) % n if backwards else (start + step) % n
            if self.matches(rows[i], query):
                return i
        return None

    def graph(self, rows: list[Node], max_lanes: int = 12) -> list[str]:
        """Lanes for `rows` (newest first), one string per row, like `git log --graph`:
        the checkpoint's glyph in its lane, `│` for lanes passing by, `╯` where a branch
        joins its parent (the fork point), `╮` where a merge's other parent opens a lane.
        A parent outside `rows` (another subject, pruned) ends its lane."""
        pos = {n.id: i for i, n in enumerate(rows)}
        lanes: list[bytes | None] = []
        out: list[str] = []
        for i, n in enumerate(rows):
            mine = [k for k, lane in enumerate(lanes) if lane == n.id]
            if mine:
                col = mine[0]
            else:
                col = lanes.index(None) if None in lanes else len(lanes)
                if col == len(lanes):
                    lanes.append(None)
            joining = mine[1:]
            later = [p for p in n.parents if pos.get(p, -1) > i]
            opening: list[int] = []
            lanes[col] = later[0] if later else None
            for k in joining:
                lanes[k] = None
            for p in later[1:]:
                if p in lanes:
                    continue
                slot = next((k for k in range(col + 1, len(lanes)) if lanes[k] is None), None)
                if slot is None:
                    lanes.append(p)
                    slot = len(lanes) - 1
                else:
                    lanes[slot] = p
                opening.append(slot)
            width = max([col, *joining, *opening, len(lanes) - 1]) + 1
            far = max([col, *joining, *opening])
            cells = []
            for k in range(width):
                if k == col:
                    ch = GLYPHS.get(n.kind, "●")
                elif k in joining:
                    ch = "╯"
                elif k in opening:
                    ch = "╮"
                elif k < len(lanes) and lanes[k] is not None:
                    ch = "│"
                elif col < k < far:
                    ch = "─"
                else:
                    ch = " "
                sep = "─" if col <= k < far else " "
                cells.append(ch + sep)
            while lanes and lanes[-1] is None:
                lanes.pop()
            text = "".join(cells).rstrip()
            if len(text) > 2 * max_lanes:
                text = text[: 2 * max_lanes - 1] + "…"
            out.append(text)
        return out


def _read_refs(store: Store) -> dict[str, bytes]:
    """The store's refs; a damaged one is left out (verify reports it)."""
    out: dict[str, bytes] = {}
    for path in store.ref_paths():
        try:
            target = store.read_ref(path)
        except CkptError:
            continue
        if target is not None:
            out[path[len("refs/") :]] = target
    return out


__all__ = [
    "GLYPHS",
    "LRU",
    "BlobEntry",
    "History",
    "LazyList",
    "Node",
    "Ref",
    "StepView",
    "Stopped",
    "SubjectInfo",
    "Timeline",
    "TimelineRow",
    "blob_listing",
    "child_keys",
    "event_summary",
    "events_root",
    "label_of",
    "render_changes",
    "section_list",
    "section_shape",
    "state_changes",
    "windows",
]
