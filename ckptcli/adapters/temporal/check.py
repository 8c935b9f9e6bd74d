"""The replay check: a stored Temporal history replayed against the project's workflow
code with temporalio's own `Replayer` (`temporalio.worker.Replayer`), offline: no server,
no network, no activity runs (their results come from the history).

A replay that fails is ckpt's divergence (exit 13 at the CLI): a NondeterminismError (the
code issued other commands than the history records: an added timer, a renamed activity
where the history carries the flag that enables that check), or a workflow task that
failed otherwise while replaying. The result names the event where it happened: the one
Temporal's message names (`HistoryEvent(id: 5, ActivityTaskScheduled)`), else the first
event of the workflow task whose commands no longer match, found by replaying shorter
prefixes of the history (at most log2 of its workflow tasks more replays).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptcli.adapters.temporal.events import attributes, type_name
from ckptcli.adapters.temporal.reader import require
from ckptcli.errors import InvalidInputError, UsageError

__all__ = ["Divergence", "ReplayResult", "check_checkpoint", "check_history", "describe", "load_workflows"]

_EVENT_RE = re.compile(r"HistoryEvent\(id: (\d+), (\w+)\)")
_MESSAGE_RE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_QUOTED_RE = re.compile(r"'([^']+)'")


@dataclass
class Divergence:
    """Where the replay of a history failed."""

    event_id: int | None
    event_type: str | None
    kind: str  # "nondeterminism" or "workflow task failed"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "event_type": self.event_type, "kind": self.kind, "reason": self.reason}

    def line(self) -> str:
        where = f"event {self.event_id} ({self.event_type})" if self.event_id is not None else "an event it could not locate"
        return f"{self.kind} at {where}: {self.reason}"


@dataclass
class ReplayResult:
    """The verdict on one history."""

    workflow_id: str
    run_id: str
    workflow_type: str
    events: int
    divergence: Divergence | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "workflow_type": self.workflow_type,
            "events": self.events,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            **self.extra,
        }


def load_workflows(specs: Sequence[str]) -> list[type]:
    """`MODULE:Class` specs -> the workflow classes (the current directory importable is
    the caller's business).

    Raises:
        UsageError: a spec without `:Class`, or temporalio missing; NotFoundError: no such
        module or class; InvalidInputError: the module raised on import, or the object is
        no `@workflow.defn` class.
    """
    require()
    from temporalio.workflow import _Definition

    from ckptcli.schema.migrations import import_object

    out = []
    for spec in specs:
        if ":" not in spec:
            raise UsageError(f"--check {spec!r} is not MODULE:WorkflowClass", hint="e.g. myapp.workflows:OrderWorkflow")
        _module, cls = import_object(spec, "workflow")
        if not isinstance(cls, type) or _Definition.from_class(cls) is None:
            raise InvalidInputError(
                f"workflow {spec!r} is a {type(cls).__name__ if not isinstance(cls, type) else 'class'} without @workflow.defn",
                hint="name the class decorated with temporalio's @workflow.defn",
            )
        out.append(cls)
    return out


_RUNTIME: Any = None


def _runtime() -> Any:
    """A temporalio runtime that logs nothing (the Rust core would print each failed
    workflow task on stderr) and exports no metrics."""
    global _RUNTIME
    if _RUNTIME is None:
        from temporalio.runtime import Runtime, TelemetryConfig

        _RUNTIME = Runtime(telemetry=TelemetryConfig(logging=None, metrics=None))
    return _RUNTIME


def _replay(workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str) -> BaseException | None:
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    history = WorkflowHistory.from_json(workflow_id, {"events": list(events)})
    replayer = Replayer(workflows=list(workflows), runtime=_runtime())
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    failure: BaseException | None = result.replay_failure
    return failure


def _reason(exc: BaseException) -> str:
    text = str(exc)
    found = _MESSAGE_RE.search(text)
    reason = found.group(1).encode().decode("unicode_escape", errors="replace") if found else text
    return " ".join(reason.split())[:500]


def check_history(workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str) -> ReplayResult:
    """Replay `events` (a history as Temporal wrote it) against `workflows`.

    Args:
        workflows: the workflow classes (the Replayer picks the history's type among them).
        events: the history's events, each as the file or the store has it.
        workflow_id: the workflow's id.

    Returns:
        ReplayResult; its divergence names the event where the replay failed, or is None.

    Raises:
        UsageError: temporalio is not installed.
    """
    import time

    from temporalio.workflow import NondeterminismError

    require()
    began = time.perf_counter()
    start = attributes(events[0]) if events else {}
    wtype = start.get("workflowType", {}).get("name", "") if type(start.get("workflowType")) is dict else ""
    run_id = str(start.get("originalExecutionRunId") or "")
    out = ReplayResult(workflow_id, run_id, str(wtype), len(events))
    failure = _replay(workflows, events, workflow_id)
    if failure is not None:
        kind = "nondeterminism" if isinstance(failure, NondeterminismError) else "workflow task failed"
        reason = _reason(failure)
        eid, etype = _locate(workflows, events, workflow_id, reason)
        out.divergence = Divergence(eid, etype, kind, reason)
    out.seconds = time.perf_counter() - began
    return out


def _name(ev: dict[str, Any]) -> str:
    return type_name(ev.get("eventType")) or str(ev.get("eventType"))


def _locate(workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str, reason: str) -> tuple[int | None, str | None]:
    """The event the failure is at: named by Temporal's message, else found by replaying prefixes."""
    named = _EVENT_RE.search(reason)
    if named:
        return int(named.group(1)), named.group(2)
    cuts = [i + 1 for i, ev in enumerate(events) if _name(ev) == "WorkflowTaskStarted"]
    if not cuts:
        return None, None
    lo, hi = 0, len(cuts) - 1  # find the shortest prefix ending at a WorkflowTaskStarted that fails
    first_bad = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _replay(workflows, events[: cuts[mid]], workflow_id) is not None:
            first_bad, hi = mid, mid - 1
        else:
            lo = mid + 1
    if first_bad is None:  # only the whole history fails: the events after the last task
        window = list(range(cuts[-1], len(events)))
    else:
        prev = cuts[first_bad - 1] if first_bad > 0 else 0
        window = list(range(prev, cuts[first_bad]))
    commands = [i for i in window if not _name(events[i]).startswith("WorkflowTask")]
    for i in commands:  # the command's event whose name the message quotes (a renamed activity)
        a = attributes(events[i])
        names = {str(v.get("name")) for v in a.values() if type(v) is dict and "name" in v}
        if names & set(_QUOTED_RE.findall(reason)):
            return i + 1, _name(events[i])
    pick = commands[0] if commands else (window[0] if window else None)
    return (pick + 1, _name(events[pick])) if pick is not None else (None, None)


def check_checkpoint(ck: Any, specs: Sequence[str]) -> ReplayResult:
    """The replay check of the history up to checkpoint `ck` (a Temporal import) against
    the workflow classes `specs` (`MODULE:Class`).

    Raises:
        what load_workflows and importer.history_events raise.
    """
    from ckptcli.adapters.temporal.importer import history_events

    workflows = load_workflows(specs)
    events = list(history_events(ck))
    result = check_history(workflows, events, ck.manifest.subject.name)
    result.extra = {"id": ck.hex, "subject": str(ck.manifest.subject)}
    return result


def describe(result: ReplayResult) -> str:
    """One line for a person: the verdict on one history."""
    who = f"{result.workflow_type} {result.workflow_id} (run {result.run_id}, {result.events} events)"
    if result.divergence is None:
        return f"replay check passed: {who} replays on the workflow code without a nondeterminism error"
    return f"diverged: {who}: {result.divergence.line()}"


# -- ckpt compat --workflow ---------------------------------------------------------------------
def compat_results(specs: Sequence[str], paths: Sequence[Any], store: Any, refs: Sequence[str], subject: str | None) -> list[Any]:
    """`ckpt compat --workflow`: the replay check of each history as a compat verdict
    (as-is when it replays, incompatible with the divergence otherwise), for its report
    and JUnit output.

    Args:
        specs: the workflow classes (`MODULE:Class`, the Replayer picks by type).
        paths: history files, or directories of `*.json` history files.
        store: the open store, when `refs` names checkpoints or no path is given; else None.
        refs: checkpoints of the store; none (and no path): the last checkpoint of every
            Temporal run in the store (of `subject` only, when given).
        subject: restricts the store's runs to this subject.

    Returns:
        ckptcli.schema.compat.CompatResult, one per history.

    Raises:
        what load_workflows raises (before any history is read); NotFoundError for a
        path or ref that names nothing.
    """
    from ckptcli.adapters.temporal.reader import history_files

    workflows = load_workflows(specs)
    out: list[Any] = []
    for p in paths:
        for f in history_files(str(p)):
            out.append(_file_result(workflows, f))
    if store is not None:
        for ck in _store_checkpoints(store, refs, subject):
            out.append(_checkpoint_result(workflows, ck))
    return out


def _verdict(name: str, result: ReplayResult | None, error: BaseException | None = None, **where: Any) -> Any:
    from ckptcli.schema.compat import AS_IS, INCOMPATIBLE, CompatResult

    if result is not None and result.ok:
        return CompatResult(name, AS_IS, reason="replays on the workflow code", seconds=result.seconds, **where)
    if result is not None and result.divergence is not None:
        d = result.divergence
        problem = "nondeterminism" if d.kind == "nondeterminism" else "replay-failed"
        return CompatResult(name, INCOMPATIBLE, problem=problem, reason=d.line(), seconds=result.seconds, **where)
    message = getattr(error, "message", None) or str(error)
    return CompatResult(name, INCOMPATIBLE, problem="unreadable", reason=message, cause=error, **where)


def _file_result(workflows: Sequence[type], path: Any) -> Any:
    from ckptcli.adapters.temporal.reader import read_events
    from ckptcli.errors import CkptError

    try:
        events = [ev.raw for ev in read_events(path, check=True)]
    except CkptError as exc:
        return _verdict(str(path), None, exc)
    return _verdict(str(path), check_history(workflows, events, path.stem), subject=f"workflow:{path.stem}")


def _checkpoint_result(workflows: Sequence[type], ck: Any) -> Any:
    from ckptcli.adapters.temporal.importer import history_events
    from ckptcli.errors import CkptError

    name = f"{ck.hex[:12]} {ck.manifest.subject}"
    where = {"checkpoint": ck.hex, "subject": str(ck.manifest.subject)}
    try:
        events = list(history_events(ck))
    except CkptError as exc:
        return _verdict(name, None, exc, **where)
    return _verdict(name, check_history(workflows, events, ck.manifest.subject.name), **where)


def _store_checkpoints(store: Any, refs: Sequence[str], subject: str | None) -> list[Any]:
    """The checkpoints `refs` name, else the last one of each Temporal run in the store."""
    from ckptcli.adapters.temporal.importer import ENGINE_LABEL, RUN_LABEL
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.history.events import LABEL_SEQ, labelled_seq
    from ckptcli.listing import ListFilter, list_checkpoints

    if refs:
        return [Checkpoint(store, cid) for cid in dict.fromkeys(store.resolve(r) for r in refs)]
    best: dict[tuple[str, str], tuple[int, bytes]] = {}
    for cid, summary in list_checkpoints(store, ListFilter(subject=subject, labels={ENGINE_LABEL: "temporal"})):
        run = (str(summary.subject), summary.labels.get(RUN_LABEL, ""))
        seq = labelled_seq(summary.labels.get(LABEL_SEQ))
        if run not in best or seq > best[run][0]:
            best[run] = (seq, cid)
    return [Checkpoint(store, cid) for _run, (_seq, cid) in sorted(best.items())]
