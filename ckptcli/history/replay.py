"""Replay: rebuild the state at any point of a checkpoint's event tail (`replay`), check that
a step function still makes the recorded decisions (`check`), and fork a new history from
a point (`fork`). The model is formats/events.md ("Checkpoints: snapshot and tail",
"Replaying to a point", "Steps and causality"); the guide docs/replay.md.

Invariants:
- A checkpoint replays on its own: its snapshot is the state before its tail; a pruned
  parent does not matter. Positions are seqs (`to_seq`) or times (`to_time`).
- `check` runs nothing external again: recorded tool results answer tool calls, emitted
  events are compared in order with the recorded ones, and the first difference is a
  Divergence.
- A step's changes applied in order as a JSON Patch to the JSON view of `before` give
  that of `after`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptcli.errors import CkptError, InvalidInputError, NotFoundError, UsageError, how_it_failed, user_failure
from ckptcli.history.change import Change
from ckptcli.history.events import (
    ERROR,
    LABEL_FORK_AT,
    LABEL_FORK_OF,
    LABEL_RUN,
    LABEL_SEQ,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
    PathKey,
    Reducers,
    State,
    StepContext,
    ToolFailed,
    check_state,
    labelled_seq,
    make_event,
    read_tail,
)

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.history.tolerant import Tolerance
    from ckptcli.store.repository import Store
    from ckptcli.writer import TakeResult

StepFunc = Callable[[StepContext, Event], Any]


# -- the tail --------------------------------------------------------------------------------
@dataclass
class Tail:
    """A checkpoint read as snapshot + tail."""

    id: str  # hex id of the checkpoint
    snapshot: Any  # the state before the tail (a map of memory/plan/tools/ext when there are events)
    events: list[Event]
    base_seq: int  # the snapshot's position

    @property
    def last_seq(self) -> int:
        """The live position: the last event's seq (the snapshot's when the tail is empty)."""
        return self.events[-1].seq if self.events else self.base_seq

    def count_to(self, to_seq: int | None = None, to_time: int | None = None) -> int:
        """How many events of the tail replaying to `to_seq` or `to_time` applies.

        Raises:
            UsageError for both at once; NotFoundError for a seq outside this checkpoint.
        """
        if to_seq is not None and to_time is not None:
            raise UsageError("give a seq or a time to replay to, not both")
        if to_time is not None:
            n = 0
            while n < len(self.events) and self.events[n].ts <= to_time:
                n += 1
            return n
        if to_seq is None:
            return len(self.events)
        if to_seq < self.base_seq:
            raise NotFoundError(
                f"seq {to_seq} is before checkpoint {self.id[:12]}: its snapshot is at seq {self.base_seq}",
                hint="replay an earlier checkpoint (its parent) to reach it",
            )
        if to_seq > self.last_seq:
            raise NotFoundError(
                f"seq {to_seq} is after checkpoint {self.id[:12]}: its tail ends at seq {self.last_seq}", hint="replay a later checkpoint"
            )
        n = 0
        while n < len(self.events) and self.events[n].seq <= to_seq:
            n += 1
        return n


def load_tail(ck: Checkpoint) -> Tail:
    """Split a checkpoint's state document into snapshot and tail, checking the events.

    Raises:
        InvalidInputError for an events section that is not a list of valid events in
        increasing seq order, or a snapshot that is not a state; whatever reading raises.
    """
    doc = ck.state()
    where = f"checkpoint {ck.hex[:12]}"
    events: list[Event] = []
    snapshot: Any = doc
    if type(doc) is dict and "events" in doc:
        snapshot = {k: v for k, v in doc.items() if k != "events"}
        events = read_tail(doc["events"], where)
        if events:
            check_state(snapshot, f"{where}: the snapshot")
    base = events[0].seq - 1 if events else labelled_seq(ck.manifest.labels.get(LABEL_SEQ))
    return Tail(ck.hex, snapshot, events, base)


def _tail(source: Checkpoint | Tail) -> Tail:
    return source if isinstance(source, Tail) else load_tail(source)


# -- replay ------------------------------------------------------------------------------------
def replay(source: Checkpoint | Tail, *, to_seq: int | None = None, to_time: int | None = None, reducers: Reducers | None = None) -> Any:
    """The state at `to_seq` or `to_time` (default: the end of the tail, the live state).

    Raises:
        UsageError, NotFoundError (see Tail.count_to); InvalidInputError for an event that
        does not fit the state; NotFoundError for a kind no reducer is installed for.
    """
    tail = _tail(source)
    n = tail.count_to(to_seq, to_time)
    return (reducers or Reducers()).apply_all(tail.snapshot, tail.events[:n])


@dataclass(frozen=True)
class Step:
    """One transition: an event, and the states before and after it (sharing every part
    the event did not change; read-only)."""

    event: Event
    before: Any
    after: Any

    def changes(self) -> list[Change]:
        """What changed, as operations in order: applied as a JSON Patch to the JSON view of
        `before` (their pointers, `Change.to_dict`), they give the JSON view of `after`.
        Cheap: parts both states share are skipped without being compared."""
        out: list[Change] = []
        _changes(self.before, self.after, (), out)
        return out


def iter_steps(
    source: Checkpoint | Tail, *, to_seq: int | None = None, to_time: int | None = None, reducers: Reducers | None = None
) -> Iterator[Step]:
    """Each transition of the replay, in order."""
    tail = _tail(source)
    n = tail.count_to(to_seq, to_time)
    red = reducers or Reducers()
    state = tail.snapshot
    for ev in tail.events[:n]:
        after = red.apply(state, ev)
        yield Step(ev, state, after)
        state = after


def _changes(a: Any, b: Any, path: tuple[PathKey, ...], out: list[Change]) -> None:
    if a is b:
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        if _tagged(a) or _tagged(b):
            # the JSON view wraps such a map ({"$map": ...}); replaced whole, no pointer goes through it
            out.append(Change("replace", path, old=a, new=b))
            return
        for k in a:
            if k not in b:
                out.append(Change("remove", (*path, k), old=a[k]))
        for k, v in b.items():
            if k in a:
                _changes(a[k], v, (*path, k), out)
            else:
                out.append(Change("add", (*path, k), new=v))
        return
    if ta is list and tb is list:
        n = min(len(a), len(b))
        if len(a) != len(b) and not all(a[i] is b[i] or same_value(a[i], b[i]) for i in range(n)):
            out.append(Change("replace", path, old=a, new=b))
            return
        for i in range(n):
            _changes(a[i], b[i], (*path, i), out)
        for i in range(len(a) - 1, n - 1, -1):  # pops: from the end, so each index is valid in turn
            out.append(Change("remove", (*path, i), old=a[i]))
        for i in range(n, len(b)):
            out.append(Change("add", (*path, i), new=b[i]))
        return
    if not same_value(a, b, ordered=True):
        out.append(Change("replace", path, old=a, new=b))


def _tagged(m: dict[str, Any]) -> bool:
    return len(m) == 1 and next(iter(m)).startswith("$")


def same_value(a: Any, b: Any, *, ordered: bool = False) -> bool:
    """Equality of values as ckpt stores them: types must match (1, 1.0 and true differ),
    NaN equals NaN, 0.0 and -0.0 differ; map key order counts only when `ordered`."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if ta is list:
        return len(a) == len(b) and all(same_value(x, y, ordered=ordered) for x, y in zip(a, b, strict=True))
    if ta is dict:
        if len(a) != len(b) or (ordered and list(a) != list(b)):
            return False
        return all(k in b and same_value(v, b[k], ordered=ordered) for k, v in a.items())
    return bool(a == b)


# -- check ---------------------------------------------------------------------------------------
@dataclass
class Divergence:
    """Where a replayed step first did something else than the recording."""

    seq: int  # the seq of the event that differs (or would have been emitted)
    input_seq: int  # the input event whose step diverged
    reason: str
    expected: dict[str, Any] | None  # the recorded event (None: the recorded step had ended)
    actual: dict[str, Any] | None  # the replayed one (None: the replayed step had ended)

    def to_dict(self) -> dict[str, Any]:
        from ckptcli.format.jsonview import to_json

        return {
            "seq": self.seq,
            "input_seq": self.input_seq,
            "reason": self.reason,
            "expected": to_json(self.expected),
            "actual": to_json(self.actual),
        }


@dataclass
class CheckReport:
    id: str
    base_seq: int
    last_seq: int
    steps: int = 0  # input events whose step ran
    matched: int = 0  # emitted events (tool calls and results included) that matched
    unchecked: int = 0  # events emitted by a step whose input is before this tail: applied as recorded
    partial_step: int | None = None  # input seq of a last step that runs past the end of the tail
    from_seq: int | None = None  # where the check started, when before the tail (a step begun in an ancestor)
    divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ok": self.ok,
            "base_seq": self.base_seq,
            "last_seq": self.last_seq,
            "steps": self.steps,
            "matched": self.matched,
            "unchecked": self.unchecked,
            "partial_step": self.partial_step,
            "from_seq": self.from_seq,
            "divergence": self.divergence.to_dict() if self.divergence else None,
        }


class _Stop(BaseException):  # not an Exception, so a step's `except Exception` lets it through
    """Raised inside the step function to end it: a divergence was found, or the tail ended."""


def _shown(ev: Event | None) -> dict[str, Any] | None:
    """An event as a divergence shows it: kind and fields (the seq is the divergence's)."""
    if ev is None:
        return None
    return {"kind": ev.kind, **ev.fields}


def _same_event(recorded: Event, actual: Event, tolerance: Tolerance | None = None) -> bool:
    if recorded.kind != actual.kind:
        return False
    ignore = {"call_id"} if recorded.kind in (TOOL_CALL, TOOL_RESULT) else set()
    a = {k: v for k, v in recorded.fields.items() if k not in ignore}
    b = {k: v for k, v in actual.fields.items() if k not in ignore}
    if same_value(a, b):
        return True
    if tolerance is None or not tolerance.active:
        return False
    from ckptcli.history.tolerant import same_apart_from_noise  # deepdiff: only when asked for

    return same_apart_from_noise(a, b, tolerance)


class _ReplayContext(StepContext):
    """The step context of a check: emitted events are compared with the recording, tool
    calls answered from it."""

    def __init__(
        self,
        report: CheckReport,
        input_event: Event,
        state: State,
        events: list[Event],
        pos: int,
        reducers: Reducers,
        tolerance: Tolerance | None = None,
    ) -> None:
        self.input = input_event
        self._tolerance = tolerance
        self._report = report
        self._state = state
        self._events = events
        self.pos = pos
        self._reducers = reducers
        self._last_seq = input_event.seq
        self.stopped = False
        self.fatal: CkptError | None = None

    @property
    def state(self) -> State:
        return self._state

    def _here(self) -> tuple[int, Event | None]:
        """The seq the next emitted event takes, and the recorded event there if it belongs to
        this step. At the end of the tail the step is cut: stop it."""
        if self.stopped:
            raise _Stop
        if self.pos >= len(self._events):
            self._report.partial_step = self.input.seq
            self.stopped = True
            raise _Stop
        rec = self._events[self.pos]
        return rec.seq, (rec if rec.cause == self.input.seq else None)

    def diverge(self, seq: int, reason: str, expected: Event | None, actual: Event | None) -> None:
        self._report.divergence = Divergence(seq, self.input.seq, reason, _shown(expected), _shown(actual))
        self.stopped = True
        raise _Stop

    def _apply(self, ev: Event) -> State:
        try:
            self._reducers.reducer(ev.kind)
        except NotFoundError as exc:  # not the step's fault: the check cannot go on
            self.fatal = exc
            self.stopped = True
            raise _Stop from None
        return self._reducers.apply(self._state, ev)

    def _emit(self, kind: str, fields: dict[str, Any]) -> Event:
        if "cause" in fields:
            raise InvalidInputError(f"{kind}: 'cause' is set by the step context")
        seq, rec = self._here()
        fields = {**fields, "cause": self.input.seq}
        if kind == TOOL_CALL:  # call ids are the recorder's: take the recorded one
            fields["call_id"] = rec.fields["call_id"] if rec is not None and rec.kind == TOOL_CALL else call_id_for(seq)
        # as live: the event is built and applied (either may raise into the step), then compared
        actual = make_event(seq, rec.ts if rec is not None else self.input.ts, kind, fields)
        new_state = self._apply(actual)
        if rec is None:
            self.diverge(seq, f"the recorded step for input {self.input.seq} had ended; the replayed step emitted more", None, actual)
        assert rec is not None
        if not _same_event(rec, actual, self._tolerance):
            self.diverge(seq, "the replayed step emitted a different event", rec, actual)
        self._state = new_state
        self._last_seq = seq
        self.pos += 1
        self._report.matched += 1
        return rec

    def emit(self, kind: str, **fields: Any) -> Event:
        return self._emit(kind, fields)

    def tool(self, name: str, args: Any, *, key: str | None = None) -> Any:
        fields: dict[str, Any] = {"call_id": "", "tool": name, "args": args}  # call_id: see _emit
        if key is not None:
            fields["key"] = key
        call = self._emit(TOOL_CALL, fields)
        seq, res = self._here()
        if res is None or res.kind != TOOL_RESULT or res.fields.get("call_id") != call.fields["call_id"]:
            self.diverge(seq, f"the recording has no result for call {call.fields['call_id']!r} here", self._events[self.pos], None)
        assert res is not None
        self._state = self._apply(res)
        self.pos += 1
        self._report.matched += 1
        if res.fields.get("status", "ok") == "error":
            raise ToolFailed(name, str(res.fields.get("error", "failed")))
        return res.fields.get("result")

    def failed(self, exc: Exception) -> None:
        """The step raised: live, the recorder recorded an error event; compare that."""
        self._emit(ERROR, error_fields(exc))

    def returned(self) -> None:
        """The step returned: the recording must hold nothing more for it."""
        if self.pos < len(self._events) and self._events[self.pos].cause == self.input.seq:
            rec = self._events[self.pos]
            self.diverge(rec.seq, "the replayed step returned without emitting it", rec, None)


def call_id_for(seq: int) -> str:
    """The call id a step context gives the tool call recorded at `seq`."""
    return f"call-{seq}"


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The fields of the error event recorded when a step raises `exc` (live and replayed alike)."""
    return {"message": str(exc), "type": type(exc).__name__}


def check(
    source: Checkpoint | Tail,
    step: StepFunc,
    *,
    reducers: Reducers | None = None,
    tolerance: Tolerance | None = None,
    name: str | None = None,
) -> CheckReport:
    """Re-run `step` over the tail's inputs and compare what it emits with the recording.

    A checkpoint taken in the middle of a step (before a risky tool, say) starts its tail
    with the rest of that step. Given a Checkpoint, the check then starts at that step's
    input in the parent (or an earlier ancestor, as far as their tails are contiguous) and
    re-runs the whole step (`from_seq` says where). When the ancestors are not there (a
    checkpoint file, a pruned parent), or given a bare Tail, those events are applied as
    recorded and counted as `unchecked`. A last step that runs past the end of the tail is
    checked up to there (`partial_step`). With `tolerance` (ckptcli.history.tolerant.Tolerance),
    an emitted event whose fields differ from the recorded one's only in that noise
    (list order, float digits, fields whose JSON Pointer, e.g. "/result/ts", matches an
    exclusion) matches it. `name` is the step as the user named it (`ckpt replay --check
    MODULE:FUNC`), for the line that says it failed; by default its MODULE:QUALNAME.

    Raises:
        what replaying the recorded events raises (InvalidInputError, NotFoundError for a
        kind no reducer is installed for). A step that raises is not an error of the check:
        it is compared with the error event the recorder made of it live.
    """
    tail = _tail(source)
    red = reducers or Reducers()
    report = CheckReport(tail.id, tail.base_seq, tail.last_seq)
    state = tail.snapshot
    events = tail.events
    if not isinstance(source, Tail):
        begun = _step_begun_before(source, tail, red)
        if begun is not None:
            state, prefix = begun
            events = prefix + events
            report.from_seq = prefix[0].seq
    i = 0
    while i < len(events):
        ev = events[i]
        if ev.cause is not None:
            state = red.apply(state, ev)
            report.unchecked += 1
            i += 1
            continue
        state = red.apply(state, ev)
        report.steps += 1
        ctx = _ReplayContext(report, ev, state, events, i + 1, red, tolerance)
        try:
            try:
                step(ctx, ev)
            except _Stop:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's step raised: compared with the error event recorded live
                ctx.failed(exc)
            except BaseException as exc:  # sys.exit(), GeneratorExit...: no recording has them; not Ctrl-C
                if not user_failure(exc):
                    raise
                raise InvalidInputError(
                    f"the step function {name or _step_name(step)} {how_it_failed(exc)} at {ev.where()}",
                    hint="a step function returns, or raises an Exception",
                ) from exc
            else:
                ctx.returned()
        except _Stop:
            pass
        if ctx.fatal is not None:
            raise ctx.fatal
        if report.divergence is not None or report.partial_step is not None:
            break
        state = ctx.state
        i = ctx.pos
    return report


def _step_name(step: StepFunc) -> str:
    """MODULE:QUALNAME of a step function given in Python, as `--check` would name it."""
    qualname = getattr(step, "__qualname__", None)
    if qualname is None:
        return repr(step)
    module = getattr(step, "__module__", None)
    return f"{module}:{qualname}" if module else str(qualname)


#: How many ancestors a check looks through for the input of a step begun before the tail.
MAX_ANCESTORS = 64


def _step_begun_before(ck: Checkpoint, tail: Tail, red: Reducers) -> tuple[Any, list[Event]] | None:
    """When the tail starts inside a step, the state before that step's input and the
    events from the input to the tail, from the ancestors' tails; None when they cannot
    be had (no parent here, a gap between tails, the input not found)."""
    from ckptcli.checkpoint import Checkpoint

    want = tail.events[0].cause if tail.events else None
    if want is None:
        return None
    chain: list[Tail] = []
    cur, cur_tail = ck, tail
    for _ in range(MAX_ANCESTORS):
        if not cur.manifest.parents:
            return None
        try:
            parent = Checkpoint(cur.source, cur.manifest.parents[0])
            parent_tail = load_tail(parent)
        except CkptError:
            return None
        if not parent_tail.events or parent_tail.last_seq != cur_tail.base_seq:
            return None  # not the history just before: nothing to join
        chain.append(parent_tail)
        if parent_tail.base_seq < want:
            break
        cur, cur_tail = parent, parent_tail
    else:
        return None
    oldest = chain[-1]
    at = next((k for k, e in enumerate(oldest.events) if e.seq == want), None)
    if at is None or oldest.events[at].cause is not None:
        return None
    state = red.apply_all(oldest.snapshot, oldest.events[:at])
    prefix = oldest.events[at:] + [e for t in reversed(chain[:-1]) for e in t.events]
    return state, prefix


def load_step(spec: str) -> StepFunc:
    """`MODULE:FUNC` -> the step function (the current directory importable, as for
    `python -m`). Raises UsageError, NotFoundError or InvalidInputError in one line."""
    from ckptcli.schema.migrations import import_object

    if ":" not in spec:
        raise UsageError(f"--check {spec!r} is not MODULE:FUNC", hint="e.g. myagent.steps:step")
    _module, func = import_object(spec, "step function")
    if not callable(func):
        raise InvalidInputError(f"step function {spec!r} is a {type(func).__name__}, not a function")
    return func  # type: ignore[no-any-return]


def load_reducers(specs: list[str]) -> Reducers:
    """Reducers with the custom ones named by `MODULE:NAME` specs (each a mapping of
    kind -> reducer) added."""
    from ckptcli.schema.migrations import import_object

    red = Reducers()
    for spec in specs:
        if ":" not in spec:
            raise UsageError(f"--reducers {spec!r} is not MODULE:NAME", hint="NAME is a mapping of event kind -> reducer")
        _module, obj = import_object(spec, "reducers")
        red.add(obj, f"reducers {spec!r}")
    return red


# -- fork --------------------------------------------------------------------------------------------
def fork(
    store: Store,
    ref: str,
    at_seq: int,
    *,
    branch: str | None = None,
    message: str | None = None,
    reducers: Reducers | None = None,
    move_latest: bool = False,
) -> TakeResult:
    """Write a new checkpoint from a replayed point: its snapshot is the state at `at_seq`,
    its tail empty, its parent the checkpoint `ref`, which is not changed. Subject, labels
    (but the recorder's), schema version, config hash and blobs are kept; labels fork.of,
    fork.at and events.seq say where it comes from. The subject's latest stays on the
    newest state unless `move_latest` (a fork is an earlier point, not the newest); with
    `branch`, that branch points at the fork.

    Raises:
        InvalidInputError for a checkpoint file (import it first); NotFoundError for a seq
        outside the checkpoint (see Tail.count_to); what replay raises.
    """
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.store.single import CheckpointFile
    from ckptcli.writer import take

    ck = open_checkpoint(ref, store)
    if isinstance(ck.source, CheckpointFile):
        raise InvalidInputError(f"{ref} is a checkpoint file", hint="import it into the store first (ckpt import), then fork it there")
    tail = load_tail(ck)
    state = replay(tail, to_seq=at_seq, reducers=reducers)
    if type(state) is not dict:
        raise InvalidInputError(f"checkpoint {ck.hex[:12]} holds no event tail to fork from")
    doc = {k: v for k, v in state.items() if k != "ext"}
    doc["events"] = []
    if "ext" in state:
        doc["ext"] = state["ext"]
    m = ck.manifest
    labels = {k: v for k, v in m.labels.items() if k not in (LABEL_RUN, LABEL_SEQ, LABEL_FORK_OF, LABEL_FORK_AT)}
    labels.update({LABEL_FORK_OF: ck.hex, LABEL_FORK_AT: str(at_seq), LABEL_SEQ: str(at_seq)})
    return take(
        store,
        doc,
        subject=m.subject,
        parents=[ck.hex],
        labels=labels,
        message=message if message is not None else f"fork of {ck.hex[:12]} at seq {at_seq}",
        schema_version=m.schema_version,
        config_hash=m.config_hash,
        doc_format=str(m.layout.get("format", "python")),
        carry={"blobs": ck.carried("blobs")} if "blobs" in m.sections else None,
        branch=branch,
        move_latest=move_latest,
        reason=f"fork: {ck.hex[:12]} at seq {at_seq}",
    )
