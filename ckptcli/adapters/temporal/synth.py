"""Long Temporal histories for benchmarks and tests, made through temporalio's own protobufs
from a real one: the activity pattern of a history (ActivityTaskScheduled, Started,
Completed, then the workflow task that follows: WorkflowTaskScheduled, Started,
Completed) repeated with fresh event ids until the history has about `events` events, then
its closing events. Written event by event (protobuf JSON, as `WorkflowHistory.to_json()`
writes each event), so a 100 MB history is never built in memory. Needs temporalio.

    python -m ckptcli.adapters.temporal.synth fixtures/temporal/test_replayer_complete_history.json 10000 out.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["synthesize", "synthesize_signals"]

_PATTERN = (
    "activity_task_scheduled_event_attributes",
    "activity_task_started_event_attributes",
    "activity_task_completed_event_attributes",
    "workflow_task_scheduled_event_attributes",
    "workflow_task_started_event_attributes",
    "workflow_task_completed_event_attributes",
)


def synthesize(source: Path, events: int, out: Path, *, result_bytes: int = 0) -> int:
    """Write to `out` a history of about `events` events made from the history `source`.

    Args:
        source: a real history whose first activity is followed by a workflow task (the
            sdk's test_replayer_complete_history.json).
        events: how many events to aim for (whole patterns of six, plus the start and end).
        out: the file to write.
        result_bytes: when > 0, each activity's result is a json/plain string of about
            this many bytes (the history grows by that much per activity).

    Returns:
        the number of events written.
    """
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import WorkflowHistory

    history = WorkflowHistory.from_json("synth", source.read_text())
    evs = list(history.events)
    kinds = [e.WhichOneof("attributes") for e in evs]
    start = next(i for i in range(len(kinds)) if tuple(kinds[i : i + 6]) == _PATTERN)
    head, pattern, tail = evs[:start], evs[start : start + 6], evs[start + 6 :]
    repeats = max(1, (events - len(head) - len(tail)) // 6)

    def events_out() -> Iterator[HistoryEvent]:
        yield from head
        for r in range(repeats):
            base = len(head) + 6 * r
            for k, proto in enumerate(pattern):
                ev = HistoryEvent()
                ev.CopyFrom(proto)
                ev.event_id = base + k + 1
                _renumber(ev, base, len(head))
                if k == 0:
                    ev.activity_task_scheduled_event_attributes.activity_id = str(r + 1)
                if k == 2 and result_bytes > 0:
                    p = ev.activity_task_completed_event_attributes.result.payloads[0]
                    p.data = json.dumps("x" * result_bytes).encode()
                    p.metadata["encoding"] = b"json/plain"
                yield ev
        last_wtc = len(head) + 6 * repeats
        for proto in tail:
            ev = HistoryEvent()
            ev.CopyFrom(proto)
            ev.event_id = last_wtc + (proto.event_id - (start + 6))
            if ev.HasField("workflow_execution_completed_event_attributes"):
                ev.workflow_execution_completed_event_attributes.workflow_task_completed_event_id = last_wtc
            yield ev

    return _write_history(out, events_out())


def synthesize_signals(source: Path, signals: int, out: Path, *, payload_bytes: int = 400) -> int:
    """Write to `out` a signal-heavy history: the first workflow task of the history
    `source` (its first four events), then `signals` WorkflowExecutionSignaled events, each
    with a json/plain string input of about `payload_bytes` bytes (signal names `sig-0` to
    `sig-9` in turn, input `"<i>:xxx..."`). The run is left running.

    Returns:
        the number of events written.
    """
    from temporalio.api.common.v1 import Payload
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import WorkflowHistory

    head = list(WorkflowHistory.from_json("synth", source.read_text()).events)[:4]

    def events_out() -> Iterator[HistoryEvent]:
        yield from head
        proto = HistoryEvent()
        proto.CopyFrom(head[-1])
        proto.ClearField("workflow_task_completed_event_attributes")
        proto.event_type = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        for i in range(signals):
            ev = HistoryEvent()
            ev.CopyFrom(proto)
            ev.event_id = len(head) + i + 1
            a = ev.workflow_execution_signaled_event_attributes
            a.signal_name = f"sig-{i % 10}"
            a.identity = "synth"
            text = f"{i}:" + "x" * max(0, payload_bytes - len(str(i)) - 3)
            a.input.payloads.append(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode()))
            yield ev

    return _write_history(out, events_out())


def _write_history(out: Path, events: Iterable[Any]) -> int:
    """Write `events` (HistoryEvent protobufs) to `out` as a history JSON, one event at a
    time (protobuf JSON, as `WorkflowHistory.to_json()` writes each); returns how many."""
    from google.protobuf.json_format import MessageToDict

    n = 0
    with out.open("w", encoding="utf-8") as f:
        f.write('{"events": [')
        for ev in events:
            f.write(("," if n else "") + "\n" + json.dumps(MessageToDict(ev), separators=(",", ":")))
            n += 1
        f.write("\n]}\n")
    return n


def _renumber(ev: Any, base: int, start: int) -> None:
    """Point the references of a pattern event at the copies of this repeat."""
    shift = base - start
    which = ev.WhichOneof("attributes")
    a = getattr(ev, which)
    for field in ("scheduled_event_id", "started_event_id"):
        if hasattr(a, field) and getattr(a, field):
            setattr(a, field, getattr(a, field) + shift)
    if hasattr(a, "workflow_task_completed_event_id"):
        a.workflow_task_completed_event_id = base  # scheduled by the workflow task before it


if __name__ == "__main__":
    print(synthesize(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])))
