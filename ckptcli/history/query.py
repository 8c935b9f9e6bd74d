"""History queries over a subject's checkpoints: `log` (`ckpt log`: which checkpoints, and
which recorded events, changed a value) and `bisect` (`ckpt bisect`: where a predicate first
turned false). The guide is docs/replay.md "History queries: log and bisect"; figures are
in docs/performance.md (`ckpt log --path`).

Invariants:
- Both speak of the state AT each checkpoint (ckptcli.history.stateat) and walk the
  first-parent history, newest first.
- `log --path` never decodes a whole state: the value at the path is reached by its
  encodings, and only a checkpoint whose tail may touch the path is replayed.
- `bisect` halves the range between a good and a bad checkpoint, then the found
  checkpoint's tail, to name the first event after which the predicate is false."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptcli.checkpoint import Checkpoint
from ckptcli.errors import CkptError, InvalidInputError, NotFoundError, UsageError, how_it_failed, user_failure
from ckptcli.format.jsonview import to_json
from ckptcli.format.manifest import EXT_PREFIX
from ckptcli.format.values import EXT_LIST, deep_recursion, unpack_ev
from ckptcli.history.change import Change, pointer
from ckptcli.history.diff import _Walk, diff_checkpoints
from ckptcli.history.events import Event, Reducers
from ckptcli.history.render import describe, describe_change
from ckptcli.history.replay import iter_steps, load_tail, same_value
from ckptcli.history.sides import _ABSENT, _child, _kind, _Side, _stored_document, parse_pointer
from ckptcli.history.stateat import EMPTY_LIST_EV, StateAt, overlaps, state_at, tail_events, touched
from ckptcli.listing import format_time

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

__all__ = [
    "BisectResult",
    "EventChange",
    "Expect",
    "LogEntry",
    "bisect",
    "first_parents",
    "load_check",
    "log",
    "max_calls",
    "parse_expect",
    "render_entry",
]

PathParts = tuple[str | int, ...]


# -- the first-parent history -------------------------------------------------------------------
def first_parents(store: Store, ref: str) -> Iterator[Checkpoint]:
    """`ref` and its first parents, newest first (stops at a root or a parent that is no
    longer in the store, e.g. pruned)."""
    cid: bytes | None = store.resolve(ref)
    while cid is not None:
        try:
            ck = Checkpoint(store, cid)
        except NotFoundError:
            return
        yield ck
        cid = ck.manifest.parents[0] if ck.manifest.parents else None


def section_path(section: str) -> PathParts:
    """The document path of a section: memory -> ("memory",), ext:NS -> ("ext", NS)."""
    if section.startswith(EXT_PREFIX):
        return ("ext", section[len(EXT_PREFIX) :])
    if section in ("memory", "plan", "tools", "events"):
        return (section,)
    raise UsageError(
        f"--section {section!r} is not a section of the state",
        hint="use memory, plan, tools, events or ext:NS (blobs: ckpt diff --section blobs)",
    )


# -- the value at one path, cheaply -----------------------------------------------------------------
class _Probe:
    """One checkpoint seen at one path: its tail's events, and the state document to walk
    (the stored one, or the state at it where a tail event may touch the path)."""

    def __init__(self, ck: Checkpoint, parts: PathParts, reducers: Reducers | None) -> None:
        self.ck = ck
        self.side = _Side(ck)  # the objects it reads, read once for both pairs it is in
        self.at: StateAt | None = None
        self.relevant = _tail_may_touch(ck, self.side, parts)
        self.doc: Any
        if self.relevant:
            self.at = state_at(ck, reducers=reducers, lenient=True)
            self.doc = self.at.raw_parts() if self.at.applied else _stored_document(ck)
        else:
            self.doc = _stored_document(ck)

    def value(self, parts: PathParts) -> Any:
        """The decoded value at `parts` (_ABSENT when there is none)."""
        side = self.side
        raw = self.doc
        for key in parts:
            raw = _child(side, raw, key)
            if raw is _ABSENT:
                return _ABSENT
        return side.decode(side.deref(raw))


def _tail_may_touch(ck: Checkpoint, side: _Side, parts: PathParts) -> bool:
    """Whether an event of the tail may change the value at `parts`. Only each event's
    kind and path are read, from the raw encoding (a message or a tool result inside an
    event is not decoded); anything unexpected counts as "may" (state_at then checks the
    tail fully and applies it)."""
    m = ck.manifest
    root = m.sections.get("events") if m.layout.get("kind") == "sections" else None
    if root is None or root == EMPTY_LIST_EV:
        return False
    raw = side.deref(unpack_ev(root, "section events"))
    if _kind(raw) != EXT_LIST:
        return True
    for item in side.items(side.segments(raw, EXT_LIST), EXT_LIST):
        item = side.deref(item)
        if type(item) is not dict or type(item.get("kind")) is not str:
            return True
        path = item.get("path")
        if path is not None and not (type(path) is list and all(type(p) is str or type(p) is int for p in path)):
            return True
        t = touched(Event(0, 0, item["kind"], {"path": path} if path is not None else {}))
        if t is not None and overlaps(t, parts):
            return True
    return False


def _may_touch(ev: Event, parts: PathParts) -> bool:
    t = touched(ev)
    return t is not None and overlaps(t, parts)


def _changes(a: _Probe, b: _Probe, parts: PathParts) -> list[Change]:
    """What differs at `parts`: both documents walked down together by hash, opening
    only the chunk-tree nodes that differ (ckptcli.history.diff)."""
    walk = _Walk(a.ck, b.ck, (a.doc, b.doc))
    walk.a, walk.b = a.side, b.side
    walk.at_path(parts)
    return [c for c in walk.changes if not c.structural]


def _changed(a: _Probe, b: _Probe, parts: PathParts) -> bool:
    return bool(_changes(a, b, parts))


# -- log -----------------------------------------------------------------------------------------------
@dataclass
class EventChange:
    """One recorded event of a tail and what it changed (under the asked path)."""

    event: Event
    changes: list[Any]  # replay.Change

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.event.seq, "ts": self.event.ts, "kind": self.event.kind, "changes": [_change_dict(c) for c in self.changes]}


@dataclass
class LogEntry:
    ck: Checkpoint
    state: StateAt | None = None
    changes: list[Change] | None = None  # from the parent's state to this one's (None: not computed)
    events: list[EventChange] | None = None

    @property
    def id(self) -> bytes:
        return self.ck.id

    def to_dict(self) -> dict[str, Any]:
        m = self.ck.manifest
        out: dict[str, Any] = {
            "id": self.ck.hex,
            "created_ns": m.created_ns,
            "subject": str(m.subject),
            "parents": [p.hex() for p in m.parents],
            "message": m.message,
            "labels": dict(m.labels),
        }
        if self.state is not None and (self.state.events or self.state.problem):
            out["state"] = self.state.to_dict()
        if self.changes is not None:
            out["changes"] = [_change_dict(c) for c in self.changes if not c.structural and c.in_patch]
        if self.events is not None:
            out["events"] = [e.to_dict() for e in self.events]
        return out


def _change_dict(c: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"op": c.op, "path": c.pointer}
    if c.op != "add":
        out["old"] = to_json(c.old)
    if c.op != "remove":
        out["new"] = to_json(c.new)
    return out


def log(
    store: Store,
    ref: str,
    *,
    path: str | None = None,
    section: str | None = None,
    patch: bool = False,
    limit: int | None = None,
    reducers: Reducers | None = None,
) -> Iterator[LogEntry]:
    """The checkpoints of `ref`'s first-parent history, newest first. With `path` (a JSON
    Pointer) or `section`, only those where the state there changed from the parent's;
    with `patch`, each with its changes and, for a recorded one, the events of its tail
    that changed something there, each with its changes. A history that ends at a
    checkpoint whose parent is not in the store (not at a root) is said through
    `store.warn`.

    Raises:
        UsageError for a bad pointer or section; NotFoundError for an unknown ref; what
        reading and replaying raise (a tail that does not replay is read as stored).
    """
    parts: PathParts | None = None
    if path is not None and section is not None:
        raise UsageError("give --path or --section, not both", hint="a --path starts with its section: /memory/...")
    if path is not None:
        parts = parse_pointer(path)
        if not parts:
            parts = None  # the whole document: every checkpoint
    elif section is not None:
        parts = section_path(section)
    shown = 0
    chain = first_parents(store, ref)
    ck = next(chain, None)
    probe = _Probe(ck, parts, reducers) if ck is not None and parts is not None else None
    with deep_recursion():
        while ck is not None and (limit is None or shown < limit):
            parent = next(chain, None)
            if parts is not None:
                assert probe is not None
                parent_probe = _Probe(parent, parts, reducers) if parent is not None else None
                changed = _changed(parent_probe, probe, parts) if parent_probe is not None else probe.value(parts) is not _ABSENT
                if changed:
                    yield _entry(ck, parent, parts, path, patch, reducers, probe, parent_probe)
                    shown += 1
                probe = parent_probe
            else:
                yield _entry(ck, parent, None, None, patch, reducers, None)
                shown += 1
            if parent is None and ck.manifest.parents:
                # not a root: its parent is gone (pruned, or dropped by `ckpt repair
                # checkpoints --drop`); the history ends here, but say it does not begin here
                store.warn(
                    f"the history of {ref} stops at {ck.hex[:12]}: its parent {ck.manifest.parents[0].hex()[:12]} is not in the store "
                    "(pruned, or dropped by `ckpt repair checkpoints --drop`); older checkpoints are not listed"
                )
            ck = parent


def _entry(
    ck: Checkpoint,
    parent: Checkpoint | None,
    parts: PathParts | None,
    path: str | None,
    patch: bool,
    reducers: Reducers | None,
    probe: _Probe | None,
    parent_probe: _Probe | None = None,
) -> LogEntry:
    if not patch:
        at = _positions(ck)  # which state: no need to apply the tail to say so
    else:
        at = probe.at if probe is not None and probe.at is not None else state_at(ck, reducers=reducers, lenient=True)
    entry = LogEntry(ck, at)
    if parts is None and not patch:
        return entry
    ptr = pointer(parts) if parts is not None else None
    if parent is not None and parts is not None and probe is not None and parent_probe is not None:
        entry.changes = _changes(parent_probe, probe, parts)  # the documents the probes already hold
    elif parent is not None:
        entry.changes = diff_checkpoints(parent, ck, path=ptr, reducers=reducers).changes
        if parts is None:
            entry.changes = [c for c in entry.changes if c.section != "events"]  # the tails differ by construction
    else:
        entry.changes = _root_changes(ck, parts, probe)
    if patch and at.applied:
        entry.events = _event_changes(at, parts, reducers)
    return entry


def _positions(ck: Checkpoint) -> StateAt:
    """The state at `ck` as far as its positions go (the tail is read, not applied)."""
    try:
        events, base = tail_events(ck)
    except CkptError as exc:
        return StateAt(ck, 0, [], False, problem=str(exc))
    return StateAt(ck, base, events, bool(events))


def _root_changes(ck: Checkpoint, parts: PathParts | None, probe: _Probe | None) -> list[Change]:
    """A root checkpoint's value at the path is added (from nothing)."""
    value = _ABSENT if parts is None or probe is None else probe.value(parts)
    if parts is None or value is _ABSENT:
        return []
    return [Change("add", tuple(parts[1:]), None, value, str(parts[0]), pointer(parts))]


def _event_changes(at: StateAt, parts: PathParts | None, reducers: Reducers | None) -> list[EventChange]:
    out: list[EventChange] = []
    for step in iter_steps(load_tail(at.ck), reducers=reducers):
        if parts is not None and not _may_touch(step.event, parts):
            continue
        changes = [c for c in step.changes() if parts is None or overlaps(tuple(c.path), parts)]
        if changes:
            out.append(EventChange(step.event, changes))
    return out


def render_entry(entry: LogEntry, *, patch: bool) -> list[tuple[str, str]]:
    """(kind, text) lines for people, like `git log`: kinds as in diff.render."""
    m = entry.ck.manifest
    lines = [("header", f"checkpoint {entry.ck.hex}"), ("summary", f"{'':2}{format_time(m.created_ns)}  {m.subject}")]
    if entry.state is not None and (entry.state.events or entry.state.problem):
        lines.append(("summary", f"{'':2}{entry.state.describe()}"))
    # a message of several lines is indented line by line, as git log does
    lines.extend(("summary", f"{'':4}{line}") for line in (m.message.split("\n") if m.message else ()))
    if patch or entry.changes is not None:
        for c in entry.changes or []:
            if not c.structural and c.in_patch:
                lines.append(_change_line(c.op, c.pointer, c.old, c.new, 2))
    if entry.events:
        for e in entry.events:
            lines.append(("section", f"{'':2}event #{e.event.seq} {e.event.kind}"))
            lines.extend(_change_line(c.op, c.pointer, c.old, c.new, 4) for c in e.changes)
    return lines


def _change_line(op: str, ptr: str, old: Any, new: Any, indent: int) -> tuple[str, str]:
    pad = " " * indent
    if op == "replace":
        return ("change", f"{pad}~ {ptr}: {describe_change(old, new)}")
    if op == "add":
        return ("add", f"{pad}+ {ptr}: {describe(new)}")
    return ("remove", f"{pad}- {ptr}: {describe(old)}")


# -- bisect --------------------------------------------------------------------------------------------
Predicate = Callable[[Checkpoint, Any], bool]


@dataclass
class Expect:
    """A predicate on the value at one path: equal to `value` (JSON view), or absent."""

    pointer: str
    value: Any = None
    missing: bool = False
    parts: PathParts = field(default=())

    def __post_init__(self) -> None:
        self.parts = parse_pointer(self.pointer)

    def holds(self, value: Any) -> bool:
        if self.missing:
            return value is _ABSENT
        return value is not _ABSENT and bool(same_value(to_json(value), self.value))

    def text(self) -> str:
        return f"{self.pointer} is missing" if self.missing else f"{self.pointer} == {json.dumps(self.value)}"


def parse_expect(spec: str) -> Expect:
    """'POINTER==JSON' -> Expect. Raises UsageError for one that is not."""
    ptr, sep, value = spec.partition("==")
    if not sep:
        raise UsageError(f"--expect {spec!r} is not POINTER==JSON", hint="e.g. --expect '/memory/status==\"ok\"'")
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise UsageError(f"--expect {spec!r}: {value!r} is not JSON ({exc})", hint='quote strings: /memory/status=="ok"') from None
    return Expect(ptr.strip(), parsed)


@dataclass
class BisectResult:
    good: bytes
    bad: bytes
    first_bad: bytes  # the first checkpoint whose state fails the predicate
    last_good: bytes  # its first parent, whose state passes
    checkpoints: int  # checkpoints in the range searched (good excluded, bad included)
    checkpoint_calls: int
    event: Event | None = None  # the first event of first_bad's tail after which it fails
    snapshot_bad: bool = False  # first_bad's snapshot already fails (a change outside its tail)
    tail_events: int = 0
    event_calls: int = 0
    what: str = ""

    @property
    def calls(self) -> int:
        return self.checkpoint_calls + self.event_calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "good": self.good.hex(),
            "bad": self.bad.hex(),
            "first_bad": self.first_bad.hex(),
            "last_good": self.last_good.hex(),
            "event": None
            if self.event is None
            else {"seq": self.event.seq, "ts": self.event.ts, "kind": self.event.kind, **to_json(self.event.fields)},
            "snapshot_bad": self.snapshot_bad,
            "predicate": self.what,
            "checkpoints": self.checkpoints,
            "tail_events": self.tail_events,
            "calls": self.calls,
            "checkpoint_calls": self.checkpoint_calls,
            "event_calls": self.event_calls,
        }


class _Counter:
    """Calls the predicate on states, counting the calls."""

    def __init__(self, expect: Expect | None, check: Callable[[Any], Any] | None, reducers: Reducers | None, name: str) -> None:
        self.expect = expect
        self.check = check
        self.reducers = reducers
        self.name = name
        self.calls = 0

    def at_checkpoint(self, ck: Checkpoint) -> bool:
        self.calls += 1
        if self.expect is not None:
            return self.expect.holds(_Probe(ck, self.expect.parts, self.reducers).value(self.expect.parts))
        return self._call(state_at(ck, reducers=self.reducers).document(events=False))

    def on_state(self, state: Any) -> bool:
        self.calls += 1
        if self.expect is not None:
            value = state
            for key in self.expect.parts:
                if type(value) is dict and str(key) in value:
                    value = value[str(key)]
                elif type(value) is list and type(key) is int and 0 <= key < len(value):
                    value = value[key]
                else:
                    value = _ABSENT
                    break
            return self.expect.holds(value)
        return self._call(state)

    def _call(self, state: Any) -> bool:
        assert self.check is not None
        try:
            return bool(self.check(state))
        except BaseException as exc:  # the user's predicate failed (sys.exit too): one line, cause kept for CKPT_DEBUG
            if not user_failure(exc):
                raise
            raise InvalidInputError(
                f"the check {self.name} {how_it_failed(exc)}", hint="a check returns true (good) or false (bad)"
            ) from exc


def load_check(spec: str) -> Callable[[Any], Any]:
    """`MODULE:FUNC` -> the predicate function (state -> true when good)."""
    from ckptcli.schema.migrations import import_object

    if ":" not in spec:
        raise UsageError(f"--check {spec!r} is not MODULE:FUNC", hint="e.g. mychecks:refund_ok")
    _module, func = import_object(spec, "check function")
    if not callable(func):
        raise InvalidInputError(f"check {spec!r} is a {type(func).__name__}, not a function")
    return func  # type: ignore[no-any-return]


def bisect(
    store: Store,
    subject: str | None,
    *,
    good: str,
    bad: str,
    expect: Expect | None = None,
    check: Callable[[Any], Any] | None = None,
    check_name: str = "check",
    reducers: Reducers | None = None,
) -> BisectResult:
    """The first checkpoint between `good` and `bad` (first parents of `bad`) whose state
    fails the predicate, and the first event of its tail after which it fails.

    The predicate is `expect` (a value at a path, or its absence) or `check(state) ->
    bool` (the state at a checkpoint, or after an event, without `events`). It is called
    on `good` and `bad` first (which must pass and fail), then about log2(n) times.

    Raises:
        UsageError for no predicate or two; NotFoundError when `good` is not a first-parent
        ancestor of `bad`, or a checkpoint is of another subject; CkptError (exit 1) when
        `good` fails or `bad` passes the predicate.
    """
    if (expect is None) == (check is None):
        raise UsageError("give one predicate: --check MODULE:FUNC, --expect POINTER==JSON or --expect-missing POINTER")
    good_id = store.resolve(good)
    bad_ck = Checkpoint(store, store.resolve(bad))
    chain: list[Checkpoint] = []
    for ck in first_parents(store, bad_ck.hex):
        if subject is not None and str(ck.manifest.subject) != subject:
            raise NotFoundError(
                f"checkpoint {ck.hex[:12]} is of {ck.manifest.subject}, not {subject}",
                hint="give --good and --bad of one subject's history",
            )
        chain.append(ck)
        if ck.id == good_id:
            break
    else:
        raise NotFoundError(
            f"--good {good} ({good_id.hex()[:12]}) is not a first-parent ancestor of --bad {bad} ({bad_ck.hex[:12]})",
            hint="ckpt log SUBJECT lists the first-parent history",
        )
    chain.reverse()  # good first, bad last
    what = expect.text() if expect is not None else check_name
    pred = _Counter(expect, check, reducers, check_name)
    with deep_recursion():
        if not pred.at_checkpoint(chain[0]):
            raise CkptError(f"the predicate ({what}) is already false at --good {chain[0].hex[:12]}", hint="pick an older --good")
        if pred.at_checkpoint(chain[-1]):
            raise CkptError(f"the predicate ({what}) holds at --bad {chain[-1].hex[:12]}", hint="pick a --bad where it fails")
        lo, hi = 0, len(chain) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pred.at_checkpoint(chain[mid]):
                lo = mid
            else:
                hi = mid
        ck_calls = pred.calls
        result = BisectResult(chain[0].id, chain[-1].id, chain[hi].id, chain[lo].id, len(chain) - 1, ck_calls, what=what)
        _bisect_tail(chain[hi], pred, result, reducers)
    result.event_calls = pred.calls - ck_calls
    return result


def _bisect_tail(ck: Checkpoint, pred: _Counter, result: BisectResult, reducers: Reducers | None) -> None:
    """Within the first bad checkpoint: position 0 is its snapshot, position j the state
    after its j-th event; the last one is known to fail, the previous checkpoint's state
    to pass."""
    try:
        tail = load_tail(ck)
    except CkptError:
        return  # no tail that replays: the checkpoint is the answer
    if not tail.events:
        return
    states = [tail.snapshot] + [s.after for s in iter_steps(tail, reducers=reducers)]
    result.tail_events = len(tail.events)
    lo, hi = -1, len(states) - 1  # -1: the previous checkpoint (passes); the last: fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        state = {k: v for k, v in states[mid].items() if k != "events"} if type(states[mid]) is dict else states[mid]
        if pred.on_state(state):
            lo = mid
        else:
            hi = mid
    if hi == 0:
        result.snapshot_bad = True
    else:
        result.event = tail.events[hi - 1]


def max_calls(checkpoints: int, tail_events: int) -> int:
    """The most predicate calls bisect makes: 2 + ceil(log2 n) over n checkpoints, plus
    ceil(log2 (m + 1)) over the m events of the found tail."""
    return 2 + math.ceil(math.log2(max(checkpoints, 1))) + (math.ceil(math.log2(tail_events + 1)) if tail_events else 0)
