"""The event kinds of a Temporal history (`temporal:<EventType>`) and their reducers
(registered in the `ckptcli.reducers` entry-point group as namespace ``temporal``).

Each stored event keeps the history event exactly as Temporal wrote it, under the field
``event`` (its eventId, eventTime, eventType, version, taskId and attributes, in
whichever of Temporal's JSON forms the file used), so the history can be given back as it
was. Its seq is the event id, its ts the event time.

The reducers derive the state a person asks about, in ``ext.temporal``:

- ``workflow``: the workflow's type, task queue, run id, input (from the start event);
- ``status``: running, completed, failed, canceled, terminated, timed_out, continued_as_new;
- ``pointer``: the execution pointer, ``{"event_id", "workflow_tasks"}``: the event id of
  the last completed workflow task and how many have completed;
- ``activities``: scheduled event id (a string) -> ``{"activity_id", "type", "status",
  "scheduled_event_id", "input", ...}``; status scheduled, started, cancel_requested
  (pending) or completed (with ``result``), failed, timed_out, canceled (with ``error``);
- ``timers``: timer id -> ``{"status": started|fired|canceled, "started_event_id", ...}``;
- ``children``: initiated event id -> a child workflow's id, type, status, result;
- ``signals``: the newest KEEP signals received, in order: ``{"name", "event_id",
  "input"}``; ``signals_received``: how many were received in all;
- ``last_event``: ``{"event_id", "type"}`` of the last event applied (the history's position);
- ``left_out``: kind (``signals``, ``activities``, ``timers``, ``children``) -> how many of
  its oldest closed records the state no longer holds (see below);
- ``closed``: kind -> the keys of its closed records that the state holds, in the order
  they closed (the bookkeeping of that bound);

The state is bounded: it holds every open record (a pending activity, a running timer or
child), and of the closed ones (and of the signals) the newest KEEP of each kind; an older
one is dropped, with its ``tools`` record, and counted in ``left_out``. Each record names
its events by id (``scheduled_event_id``, ``closed_event_id``, ``event_id``), and the
history in the tail keeps every event whole, so nothing is lost; what the state does not
grow with is the length of the history (a 200,000-signal history holds 1,000 signals, not
200,000 decoded inputs held in memory while it is imported and read).

and each activity is also a record of the standard ``tools`` section (formats/events.md):
``{"call_id": activity id, "tool": activity type, "args", "status": "pending", "seq",
"ts"}``, then ``status`` ``ok`` with ``result``, or ``error`` with ``error`` (as a ``tool.result``). Temporal
gives an activity no idempotency key, so the records have no ``key``.

Payloads are decoded when their encoding is ``json/plain`` (``binary/null`` is None);
any other payload (protobuf, encrypted, binary), and a JSON one that cannot be stored as
decoded (nested over MAX_PAYLOAD_DEPTH deep, a lone surrogate, an integer over 8192 bits),
is kept as Temporal wrote it, and one over 16 KiB is only summarised (its size and
encoding: the event in the tail keeps it whole).

`apply(state, event, in_place)` is the one derivation: the importer runs it in place over
the whole history; the reducers run it on a copy of the containers an event touches, so
they never change the state they are given.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

from ckptcli.adapters.temporal.longstr import LongString
from ckptcli.history.events import Event, State

__all__ = ["EVENT_TYPES", "KEEP", "KIND_PREFIX", "REDUCERS", "apply", "attributes", "decode_payloads", "kind_of", "type_name"]

KIND_PREFIX = "temporal:"

#: how many closed records of each kind (and signals) the derived state keeps: the newest
KEEP = 1000

#: every history event type of Temporal's API (temporal.api.enums.v1.EventType, without
#: UNSPECIFIED), as the PascalCase name of its kind; tests/test_temporal.py keeps it equal
#: to the installed temporalio's
EVENT_TYPES: tuple[str, ...] = (
    "WorkflowExecutionStarted",
    "WorkflowExecutionCompleted",
    "WorkflowExecutionFailed",
    "WorkflowExecutionTimedOut",
    "WorkflowTaskScheduled",
    "WorkflowTaskStarted",
    "WorkflowTaskCompleted",
    "WorkflowTaskTimedOut",
    "WorkflowTaskFailed",
    "ActivityTaskScheduled",
    "ActivityTaskStarted",
    "ActivityTaskCompleted",
    "ActivityTaskFailed",
    "ActivityTaskTimedOut",
    "ActivityTaskCancelRequested",
    "ActivityTaskCanceled",
    "TimerStarted",
    "TimerFired",
    "TimerCanceled",
    "WorkflowExecutionCancelRequested",
    "WorkflowExecutionCanceled",
    "RequestCancelExternalWorkflowExecutionInitiated",
    "RequestCancelExternalWorkflowExecutionFailed",
    "ExternalWorkflowExecutionCancelRequested",
    "MarkerRecorded",
    "WorkflowExecutionSignaled",
    "WorkflowExecutionTerminated",
    "WorkflowExecutionContinuedAsNew",
    "StartChildWorkflowExecutionInitiated",
    "StartChildWorkflowExecutionFailed",
    "ChildWorkflowExecutionStarted",
    "ChildWorkflowExecutionCompleted",
    "ChildWorkflowExecutionFailed",
    "ChildWorkflowExecutionCanceled",
    "ChildWorkflowExecutionTimedOut",
    "ChildWorkflowExecutionTerminated",
    "SignalExternalWorkflowExecutionInitiated",
    "SignalExternalWorkflowExecutionFailed",
    "ExternalWorkflowExecutionSignaled",
    "UpsertWorkflowSearchAttributes",
    "WorkflowExecutionUpdateAdmitted",
    "WorkflowExecutionUpdateAccepted",
    "WorkflowExecutionUpdateRejected",
    "WorkflowExecutionUpdateCompleted",
    "WorkflowPropertiesModifiedExternally",
    "ActivityPropertiesModifiedExternally",
    "WorkflowPropertiesModified",
    "NexusOperationScheduled",
    "NexusOperationStarted",
    "NexusOperationCompleted",
    "NexusOperationFailed",
    "NexusOperationCanceled",
    "NexusOperationTimedOut",
    "NexusOperationCancelRequested",
    "WorkflowExecutionOptionsUpdated",
    "NexusOperationCancelRequestCompleted",
    "NexusOperationCancelRequestFailed",
    "WorkflowExecutionPaused",
    "WorkflowExecutionUnpaused",
    "WorkflowExecutionTimeSkippingTransitioned",
)
_KNOWN = frozenset(EVENT_TYPES)
_UPPER = {re.sub(r"([a-z])([A-Z])", r"\1_\2", name).upper(): name for name in EVENT_TYPES}


def type_name(raw: object) -> str | None:
    """The PascalCase name of an event type as a history writes it: `ActivityTaskScheduled`
    (the older JSON) or `EVENT_TYPE_ACTIVITY_TASK_SCHEDULED` (protobuf JSON); None when it
    is no known type (an int is resolved by the caller, with temporalio's enum)."""
    if type(raw) is not str:
        return None
    if raw in _KNOWN:
        return raw
    if raw.startswith("EVENT_TYPE_"):
        return _UPPER.get(raw[len("EVENT_TYPE_") :])
    return None


def kind_of(name: str) -> str:
    """The ckpt event kind of an event type's PascalCase name."""
    return KIND_PREFIX + name


def attributes(event: dict[str, Any]) -> dict[str, Any]:
    """The `...EventAttributes` map of a history event ({} when it has none)."""
    for key, value in event.items():
        if (key.endswith("EventAttributes") or key.endswith("_event_attributes")) and type(value) is dict:
            return value
    return {}


def _get(attrs: dict[str, Any], camel: str) -> Any:
    """A field by its JSON (camelCase) name, or its protobuf (snake_case) name."""
    if camel in attrs:
        return attrs[camel]
    return attrs.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel))


def _int(value: Any) -> int | None:
    """An int64 as protobuf JSON writes it (a decimal string) or a number."""
    if type(value) is int:
        return value
    if type(value) is str and value.isdecimal() and value.isascii():
        return int(value)
    return None


def _name(value: Any) -> Any:
    """`{"name": X}` (a workflow type, an activity type, a task queue) -> X."""
    return value.get("name") if type(value) is dict else value


def _b64(text: Any) -> bytes | None:
    if type(text) is not str:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


#: a payload whose data is longer (base64 characters) is summarised in the derived state,
#: not copied: the history event keeps it whole, and the state stays small
MAX_PAYLOAD = 16 << 10


def decode_payload(payload: Any) -> Any:
    """One payload's value when its encoding is json/plain (binary/null: None); a payload
    over MAX_PAYLOAD, `{"payload_bytes": N, "encoding": E}` (the event keeps it); else the
    payload as written."""
    if type(payload) is not dict:
        return payload
    data = payload.get("data")
    if type(data) is LongString or (type(data) is str and len(data) > MAX_PAYLOAD):
        meta = payload.get("metadata")
        enc = _b64(meta.get("encoding")) if type(meta) is dict else None
        if isinstance(data, LongString):
            chars, tail = data.chars, data.tail
        else:
            chars, tail = len(data), data[-2:]
        size = chars * 3 // 4 - (2 if tail.endswith("==") else 1 if tail.endswith("=") else 0)
        return {"payload_bytes": size, "encoding": enc.decode("utf-8", "replace") if enc else None}
    meta = payload.get("metadata")
    encoding = _b64(meta.get("encoding")) if type(meta) is dict else None
    if encoding == b"binary/null":
        return None
    if encoding == b"json/plain":
        data = _b64(payload.get("data", ""))
        if data is not None:
            try:
                value = json.loads(data)
            except (ValueError, RecursionError):  # not JSON, or nested past Python's recursion limit
                return payload
            if _storable(value, MAX_PAYLOAD_DEPTH):
                return value
    return payload


#: how deep a decoded payload may nest in the derived state (it sits about 6 deep there, and
#: a checkpoint nests at most 256 deep): one nested deeper is kept as written, undecoded
MAX_PAYLOAD_DEPTH = 200


def _storable(value: Any, depth: int) -> bool:
    """Whether a decoded JSON value can be stored as it is: nested at most `depth` deep,
    its strings valid Unicode (JSON may spell a lone surrogate, `"\\ud800"`), its
    integers within 8192 bits. A payload that is not is kept as written (its base64)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        t = type(v)
        if t is dict or t is list:
            if d > depth:
                return False
            stack.extend((x, d + 1) for x in (v.values() if t is dict else v))
            if t is dict:
                stack.extend((k, d) for k in v)
        elif t is str:
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif t is int and v.bit_length() > 8192:
            return False
    return True


def decode_payloads(value: Any) -> Any:
    """`{"payloads": [...]}` -> the decoded value (one payload), a list (several), None (none)."""
    if type(value) is not dict:
        return None
    payloads = value.get("payloads")
    if type(payloads) is not list or not payloads:
        return None
    if len(payloads) == 1:
        return decode_payload(payloads[0])
    return [decode_payload(p) for p in payloads]


def _failure(attrs: dict[str, Any]) -> str:
    """The message of a failure (an activity's, a child's), for `error`."""
    failure = _get(attrs, "failure")
    if type(failure) is dict:
        message = failure.get("message")
        cause = failure.get("cause")
        if type(cause) is dict and cause.get("message"):
            return f"{message}: {cause.get('message')}" if message else str(cause.get("message"))
        if message:
            return str(message)
    return ""


# -- the derivation -------------------------------------------------------------------------
class _Target:
    """The containers one event may change: the state, its `tools`, `ext`, `ext.temporal`
    and the direct children of `ext.temporal`. In place, they are changed as they are; else
    each is copied the first time it is touched (records below them are replaced, never
    changed), so the state given is left as it was."""

    __slots__ = ("copy", "state", "t")

    def __init__(self, state: State, in_place: bool) -> None:
        self.copy = not in_place
        st = dict(state) if self.copy else state
        ext = st.get("ext")
        ext = dict(ext) if type(ext) is dict and self.copy else (ext if type(ext) is dict else {})
        st["ext"] = ext
        t = ext.get("temporal")
        t = dict(t) if type(t) is dict and self.copy else (t if type(t) is dict else {})
        ext["temporal"] = t
        self.state, self.t = st, t

    def map(self, key: str) -> dict[str, Any]:
        v = self.t.get(key)
        v = (dict(v) if self.copy else v) if type(v) is dict else {}
        self.t[key] = v
        return v

    def seq(self, key: str) -> list[Any]:
        v = self.t.get(key)
        v = (list(v) if self.copy else v) if type(v) is list else []
        self.t[key] = v
        return v

    def tools(self) -> list[Any]:
        v = self.state.get("tools")
        v = (list(v) if self.copy else v) if type(v) is list else []
        self.state["tools"] = v
        return v

    def closed(self, kind: str, key: str) -> None:
        """Note that `kind`'s record `key` closed; past KEEP closed records of the kind,
        drop the oldest (an activity's `tools` record with it) and count it in `left_out`."""
        book = self.map("closed")
        order = book.get(kind)
        order = (list(order) if self.copy else order) if type(order) is list else []
        book[kind] = order
        order.append(key)
        if len(order) <= KEEP:
            return
        old = order.pop(0)
        records = self.map(kind)
        rec = records.get(old)
        if type(rec) is dict and rec.get("closed_event_id") is not None:
            del records[old]
            if kind == "activities":
                self.drop_tool(rec.get("scheduled_event_id"))
        self.count_left_out(kind)

    def count_left_out(self, kind: str, more: int = 1) -> None:
        left = self.map("left_out")
        n = left.get(kind)
        left[kind] = (n if type(n) is int else 0) + more

    def drop_tool(self, seq: Any) -> None:
        """Remove the closed `tools` record of the call scheduled at `seq`."""
        tools = self.state.get("tools")
        if type(tools) is not list:
            return
        for i, rec in enumerate(tools):
            if type(rec) is dict and rec.get("seq") == seq and rec.get("status") != "pending":
                del self.tools()[i]
                return

    def finish_tool(self, call_id: Any, changes: dict[str, Any], seq: int, ts: int) -> None:
        """Complete the last pending record of `call_id` in `tools` (none: nothing)."""
        tools = self.state.get("tools")
        if type(tools) is not list:
            return
        for i in range(len(tools) - 1, -1, -1):
            rec = tools[i]
            if type(rec) is dict and rec.get("call_id") == call_id and rec.get("status") == "pending":
                new = {**rec, **changes, "result_seq": seq}
                if type(rec.get("ts")) is int:
                    new["duration_ns"] = max(0, ts - rec["ts"])
                self.tools()[i] = new
                return


def _update(records: dict[str, Any], key: str, **changes: Any) -> dict[str, Any] | None:
    """Replace records[key] by a copy with `changes` (absent: nothing)."""
    old = records.get(key)
    if type(old) is not dict:
        return None
    new = {**old, **changes}
    records[key] = new
    return new


def _close(w: _Target, kind: str, key: str, **changes: Any) -> dict[str, Any] | None:
    """`_update` of a record that closes (it gets a `closed_event_id`), noted as closed the
    first time (`_Target.closed`)."""
    records = w.map(kind)
    old = records.get(key)
    if type(old) is not dict:
        return None
    new = {**old, **changes}
    records[key] = new
    if old.get("closed_event_id") is None:
        w.closed(kind, key)
    return new


_CLOSED = {
    "WorkflowExecutionCompleted": "completed",
    "WorkflowExecutionFailed": "failed",
    "WorkflowExecutionTimedOut": "timed_out",
    "WorkflowExecutionCanceled": "canceled",
    "WorkflowExecutionTerminated": "terminated",
    "WorkflowExecutionContinuedAsNew": "continued_as_new",
}
_ACTIVITY_END = {"ActivityTaskFailed": "failed", "ActivityTaskTimedOut": "timed_out", "ActivityTaskCanceled": "canceled"}
_CHILD_END = {
    "ChildWorkflowExecutionCompleted": "completed",
    "ChildWorkflowExecutionFailed": "failed",
    "ChildWorkflowExecutionCanceled": "canceled",
    "ChildWorkflowExecutionTimedOut": "timed_out",
    "ChildWorkflowExecutionTerminated": "terminated",
}


def apply(state: State, name: str, event: dict[str, Any], seq: int, ts: int, *, in_place: bool) -> State:
    """The state after one history event.

    Args:
        state: the state before it (a map of memory/plan/tools/ext).
        name: the event's type, PascalCase (`ActivityTaskCompleted`).
        event: the history event as Temporal wrote it.
        seq, ts: its event id and time (ns).
        in_place: change `state`'s containers in place (the importer's fold) instead of
            copying those it touches (a reducer).

    Returns:
        the state after the event (`state` itself when in place).
    """
    w = _Target(state, in_place)
    t = w.t
    a = attributes(event)
    if name == "WorkflowExecutionStarted":
        run_id = _get(a, "originalExecutionRunId") or _get(a, "firstExecutionRunId") or ""
        t["workflow"] = {
            "type": _name(_get(a, "workflowType")),
            "task_queue": _name(_get(a, "taskQueue")),
            "run_id": run_id,
            "input": decode_payloads(_get(a, "input")),
        }
        t["status"] = "running"
        t.setdefault("pointer", {"event_id": 0, "workflow_tasks": 0})
    elif name == "WorkflowTaskCompleted":
        before = t.get("pointer")
        n = before.get("workflow_tasks", 0) if type(before) is dict else 0
        t["pointer"] = {"event_id": seq, "workflow_tasks": n + 1}
    elif name in _CLOSED:
        t["status"] = _CLOSED[name]
        if name == "WorkflowExecutionCompleted":
            t["result"] = decode_payloads(_get(a, "result"))
        elif name == "WorkflowExecutionFailed":
            t["error"] = _failure(a)
    elif name == "ActivityTaskScheduled":
        activity_id, kind = _get(a, "activityId"), _name(_get(a, "activityType"))
        args = decode_payloads(_get(a, "input"))
        w.map("activities")[str(seq)] = {
            "activity_id": activity_id,
            "type": kind,
            "status": "scheduled",
            "scheduled_event_id": seq,
            "input": args,
        }
        w.tools().append({"call_id": activity_id, "tool": kind, "args": args, "status": "pending", "seq": seq, "ts": ts})
    elif name in ("ActivityTaskStarted", "ActivityTaskCancelRequested"):
        key = str(_int(_get(a, "scheduledEventId")))
        if name == "ActivityTaskStarted":
            _update(w.map("activities"), key, status="started", attempt=_get(a, "attempt"))
        else:
            _update(w.map("activities"), key, status="cancel_requested")
    elif name == "ActivityTaskCompleted":
        result = decode_payloads(_get(a, "result"))
        rec = _close(w, "activities", str(_int(_get(a, "scheduledEventId"))), status="completed", result=result, closed_event_id=seq)
        if rec is not None:
            w.finish_tool(rec["activity_id"], {"status": "ok", "result": result}, seq, ts)
    elif name in _ACTIVITY_END:
        error = _failure(a) or name
        rec = _close(w, "activities", str(_int(_get(a, "scheduledEventId"))), status=_ACTIVITY_END[name], error=error, closed_event_id=seq)
        if rec is not None:
            w.finish_tool(rec["activity_id"], {"status": "error", "error": error}, seq, ts)
    elif name == "TimerStarted":
        timer = str(_get(a, "timerId"))
        book = t.get("closed")
        if type(book) is dict and type(book.get("timers")) is list and timer in book["timers"]:  # a timer id used again
            book = w.map("closed")
            book["timers"] = [k for k in book["timers"] if k != timer]
        w.map("timers")[timer] = {
            "status": "started",
            "started_event_id": seq,
            "start_to_fire_timeout": _get(a, "startToFireTimeout"),
        }
    elif name in ("TimerFired", "TimerCanceled"):
        status = "fired" if name == "TimerFired" else "canceled"
        _close(w, "timers", str(_get(a, "timerId")), status=status, closed_event_id=seq)
    elif name == "StartChildWorkflowExecutionInitiated":
        w.map("children")[str(seq)] = {
            "workflow_id": _get(a, "workflowId"),
            "type": _name(_get(a, "workflowType")),
            "status": "initiated",
            "initiated_event_id": seq,
            "input": decode_payloads(_get(a, "input")),
        }
    elif name == "StartChildWorkflowExecutionFailed":
        _close(w, "children", str(_int(_get(a, "initiatedEventId"))), status="start_failed", closed_event_id=seq)
    elif name == "ChildWorkflowExecutionStarted":
        execution = _get(a, "workflowExecution")
        run = _get(execution, "runId") if type(execution) is dict else None
        _update(w.map("children"), str(_int(_get(a, "initiatedEventId"))), status="started", run_id=run)
    elif name in _CHILD_END:
        changes: dict[str, Any] = {"status": _CHILD_END[name], "closed_event_id": seq}
        if name == "ChildWorkflowExecutionCompleted":
            changes["result"] = decode_payloads(_get(a, "result"))
        elif name == "ChildWorkflowExecutionFailed":
            changes["error"] = _failure(a)
        _close(w, "children", str(_int(_get(a, "initiatedEventId"))), **changes)
    elif name == "WorkflowExecutionSignaled":
        signals = w.seq("signals")
        n = t.get("signals_received")
        t["signals_received"] = (n if type(n) is int else len(signals)) + 1
        signals.append({"name": _get(a, "signalName"), "event_id": seq, "input": decode_payloads(_get(a, "input"))})
        if len(signals) > KEEP:
            w.count_left_out("signals", len(signals) - KEEP)
            del signals[: len(signals) - KEEP]
    t["last_event"] = {"event_id": seq, "type": name}
    return w.state


def _reducer(name: str) -> Callable[[State, Event], State]:
    def reduce(state: State, ev: Event) -> State:
        event = ev.fields.get("event")
        if type(event) is not dict:
            raise ValueError(f"a {KIND_PREFIX}{name} event keeps the history event under 'event'")
        return apply(state, name, event, ev.seq, ev.ts, in_place=False)

    reduce.__qualname__ = f"temporal.{name}"
    return reduce


#: kind -> reducer, one per event type (the entry point ckptcli.reducers `temporal`)
REDUCERS: dict[str, Callable[[State, Event], State]] = {kind_of(n): _reducer(n) for n in EVENT_TYPES}
