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

The user's workflow code is bounded and kept quiet: each replay runs in a process of its
own (child.py), killed after `timeout` seconds (LimitExceededError, exit 7) or at Ctrl-C
(exit 130); a BaseException its run method raises (sys.exit(), GeneratorExit) and
`os._exit()` are the user's code failing (InvalidInputError, exit 4), not a divergence
nor a hang nor a silent pass; a class of another workflow type than the history's is
refused before any replay (exit 4); what the module prints, and what the code writes to
file descriptor 1, goes to stderr, and temporalio's loggers (a traceback per failed
activation) are silenced while it runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptcli.adapters.temporal.events import attributes, type_name
from ckptcli.adapters.temporal.reader import require
from ckptcli.errors import InvalidInputError, LimitExceededError, UsageError, how_it_failed, user_failure

DEFAULT_TIMEOUT = 60.0
"""Seconds one replay of a history may take before the check gives up (`--timeout`)."""

__all__ = [
    "DEFAULT_TIMEOUT",
    "Divergence",
    "ReplayResult",
    "check_checkpoint",
    "check_history",
    "describe",
    "load_workflows",
    "replay_timeout",
]

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


def replay_timeout(seconds: float | None) -> float:
    """`--timeout` of the replay check: the seconds one replay may take (default 60).

    Raises:
        UsageError: not a finite number above 0, or above ckpt's longest duration (100 years:
        a wait that long overflows the platform's time).
    """
    import math

    from ckptcli._util.timeparse import MAX_SECONDS

    if seconds is None:
        return DEFAULT_TIMEOUT
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_SECONDS:
        raise UsageError(f"--timeout {seconds:g} is not a number of seconds above 0 (at most 100 years)", hint="e.g. --timeout 120")
    return float(seconds)


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
        module_name, sep, attr = spec.partition(":")
        if not sep or not attr or ":" in attr or any(not p.isidentifier() for p in module_name.split(".")):
            raise UsageError(f"--check {spec!r} is not MODULE:WorkflowClass", hint="e.g. myapp.workflows:OrderWorkflow")
        with _user_stdout():
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


@contextlib.contextmanager
def _user_stdout(keep_quiet: Callable[[], bool] = lambda: False) -> Any:
    """While the user's workflow module is imported or run: what it prints goes to stderr
    (stdout carries ckpt's report, `--json` included), and temporalio's loggers (which
    print each failed activation with its traceback) are silenced; they stay silenced
    when `keep_quiet()` says so at the end (a replay given up on still runs and logs)."""
    quiet = logging.getLogger("temporalio")
    hush = logging.NullHandler()
    was = quiet.propagate
    quiet.addHandler(hush)
    quiet.propagate = False
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if not keep_quiet():
            quiet.propagate = was
            quiet.removeHandler(hush)


class _Escaped(Exception):  # noqa: N818 - a carrier, not a fault
    """The user's workflow code raised a BaseException temporalio does not catch
    (sys.exit(), GeneratorExit, ...): the command fails with exit 4, not a divergence."""

    def __init__(self, exc: BaseException, how: str | None = None) -> None:
        super().__init__(how or how_it_failed(exc))
        self.exc = exc


class _Executor(concurrent.futures.ThreadPoolExecutor):
    """The Replayer's workflow-task threads: a BaseException the workflow code raises
    (sys.exit(), GeneratorExit), which temporalio does not catch and which would stop its
    event loop half-way (a replay that never ends), is kept here and handed to temporalio
    as an ordinary exception (a failed workflow task)."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="ckpt-temporal-workflow")
        self.escaped: BaseException | None = None

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        def guarded() -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:
                raise
            except BaseException as exc:  # noqa: BLE001 - sys.exit() in the workflow code, kept for the caller
                if self.escaped is None:
                    self.escaped = exc
                raise RuntimeError(f"the workflow code {how_it_failed(exc)}") from None

        return super().submit(guarded)


#: the mark of a BaseException the workflow's run raised, in the failure temporalio reports
_ESCAPED_MARK = "ckpt: the workflow code escaped: "


def _guard() -> Any:
    """A temporalio interceptor around the workflow's run: a BaseException it raises that
    is no Exception nor a cancellation (GeneratorExit, SystemExit, KeyboardInterrupt
    raised by the code itself) would end its asyncio task silently, and the replay would
    read as a divergence (the code issued no command); it is turned into a failed task
    whose message carries _ESCAPED_MARK and how the code failed."""
    import asyncio

    from temporalio.worker import ExecuteWorkflowInput, Interceptor, WorkflowInboundInterceptor

    class Inbound(WorkflowInboundInterceptor):
        async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
            try:
                return await super().execute_workflow(input)
            except (Exception, asyncio.CancelledError):
                raise
            except BaseException as exc:  # noqa: BLE001 - the user's code's, reported as exit 4
                raise RuntimeError(_ESCAPED_MARK + how_it_failed(exc)) from None

    class Guard(Interceptor):
        def workflow_interceptor_class(self, input: Any) -> Any:
            return Inbound

    return Guard()


def _replay(
    workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str, timeout: float = DEFAULT_TIMEOUT
) -> BaseException | None:
    """One replay with temporalio's Replayer, in a process of its own (child.py): killed
    after `timeout` seconds whatever the workflow code does (code blocked in C included),
    or at Ctrl-C (KeyboardInterrupt, exit 130); `os._exit()` in the code ends that
    process, not ckpt (exit 4); what the code writes to fd 1 reaches stderr.

    A class the child could not import by its `module:Class` name (defined in `__main__`,
    or inside a function: a library caller's) is replayed in this process instead, as
    `_replay_here` does: bounded by a thread, not killable.

    Returns:
        the replay's failure (NondeterminismError, or a RuntimeError with temporalio's
        message), or None when it replayed.
    """
    import json
    import os
    import subprocess

    if not all(map(_importable, workflows)):
        return _replay_here(workflows, events, workflow_id, timeout)

    from temporalio.workflow import NondeterminismError

    from ckptcli.errors import CkptError, ExitCode

    job = {
        "path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path],
        "specs": [_class_name(c) for c in workflows],
        "workflow_id": workflow_id,
        "events": list(events),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptcli.adapters.temporal.child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=False
    )
    try:
        out, _err = proc.communicate(json.dumps(job).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise LimitExceededError(
            f"the replay of {workflow_id} did not finish within {timeout:g} s (the workflow code loops or blocks?)",
            hint="fix the workflow code, or give a longer --timeout",
        ) from None
    except BaseException:  # Ctrl-C, SIGTERM: the replay goes with the command
        proc.kill()
        proc.wait()
        raise
    try:
        verdict = json.loads(out) if out else None
    except ValueError:
        verdict = None
    if type(verdict) is not dict:
        status = proc.returncode
        how = f"was killed by signal {-status}" if status < 0 else f"ended the process (exit status {status}, os._exit?)"
        raise _Escaped(RuntimeError(how), how)
    if "escaped" in verdict:
        raise _Escaped(RuntimeError(verdict["escaped"]), str(verdict["escaped"]))
    if "error" in verdict:
        err = CkptError(str(verdict["error"]))
        code = verdict.get("exit")
        err.exit_code = ExitCode(code) if type(code) is int and code in ExitCode._value2member_map_ else ExitCode.FAILURE
        raise err
    failure = verdict.get("failure")
    if not failure:
        return None
    text = str(failure.get("text", ""))
    return NondeterminismError(text) if failure.get("nondeterminism") else RuntimeError(text)


def _importable(cls: type) -> bool:
    """Whether another process can import `cls` as `module:Class` (`_class_name`)."""
    module = sys.modules.get(cls.__module__)
    return (
        cls.__module__ != "__main__"
        and getattr(module, "__file__", None) is not None
        and "." not in cls.__qualname__
        and getattr(module, cls.__qualname__, None) is cls
    )


def _replay_here(
    workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str, timeout: float = DEFAULT_TIMEOUT
) -> BaseException | None:
    """One replay with temporalio's Replayer in this process (child.py runs it), in a
    thread of its own so that it is bounded by `timeout` seconds (a loop temporalio's
    deadlock detector cannot interrupt, a BaseException that escapes its worker)."""
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    history = WorkflowHistory.from_json(workflow_id, {"events": list(events)})
    executor = _Executor()
    replayer = Replayer(workflows=list(workflows), runtime=_runtime(), workflow_task_executor=executor, interceptors=[_guard()])
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
        except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread
            box["raised"] = exc

    worker = threading.Thread(target=run, name="ckpt-temporal-replay", daemon=True)
    with _user_stdout(worker.is_alive):
        worker.start()
        worker.join(None if timeout == float("inf") else timeout)
    executor.shutdown(wait=False, cancel_futures=True)
    if executor.escaped is not None:
        if not user_failure(executor.escaped):
            raise executor.escaped  # Ctrl-C stays the interruption (exit 130)
        raise _Escaped(executor.escaped)
    if worker.is_alive():
        raise LimitExceededError(
            f"the replay of {workflow_id} did not finish within {timeout:g} s (the workflow code loops or blocks?)",
            hint="fix the workflow code, or give a longer --timeout",
        )
    if "raised" in box:
        exc = box["raised"]
        if not user_failure(exc):
            raise exc
        if isinstance(exc, Exception):
            raise exc
        raise _Escaped(exc)
    failure: BaseException | None = box["result"].replay_failure
    if failure is not None and _ESCAPED_MARK in str(failure):
        how = str(failure).split(_ESCAPED_MARK, 1)[1]
        raise _Escaped(failure, how[: how.find('"')] if '"' in how else how)
    return failure


def _reason(exc: BaseException) -> str:
    text = str(exc)
    found = _MESSAGE_RE.search(text)
    reason = found.group(1).encode().decode("unicode_escape", errors="replace") if found else text
    return " ".join(reason.split())[:500]


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _types(workflows: Sequence[type]) -> dict[str | None, type]:
    """The workflow type each class registers (None: a dynamic workflow, any type)."""
    from temporalio.workflow import _Definition

    out: dict[str | None, type] = {}
    for cls in workflows:
        defn = _Definition.from_class(cls)
        if defn is not None:
            out.setdefault(defn.name, cls)
    return out


def check_history(
    workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str, timeout: float = DEFAULT_TIMEOUT
) -> ReplayResult:
    """Replay `events` (a history as Temporal wrote it) against `workflows`.

    Args:
        workflows: the workflow classes (the Replayer picks the history's type among them).
        events: the history's events, each as the file or the store has it.
        workflow_id: the workflow's id.

    Returns:
        ReplayResult; its divergence names the event where the replay failed, or is None.

        timeout: seconds each replay may take.

    Raises:
        UsageError: temporalio is not installed. InvalidInputError: no class registers the
        history's workflow type, or the workflow code raised what temporalio does not catch
        (sys.exit(), GeneratorExit). LimitExceededError: a replay took over `timeout` s.
    """
    import time

    from temporalio.workflow import NondeterminismError

    require()
    began = time.perf_counter()
    start = attributes(events[0]) if events else {}
    wtype = start.get("workflowType", {}).get("name", "") if type(start.get("workflowType")) is dict else ""
    run_id = str(start.get("originalExecutionRunId") or "")
    out = ReplayResult(workflow_id, run_id, str(wtype), len(events))
    types = _types(workflows)
    if wtype not in types and None not in types:
        given = ", ".join(f"{_class_name(c)} registers {t!r}" for t, c in types.items())
        raise InvalidInputError(
            f"the history {workflow_id} is of workflow type {str(wtype)!r}, and no class given registers it ({given})",
            hint=f"name the class whose @workflow.defn name is {str(wtype)!r}",
        )
    try:
        failure = _replay(workflows, events, workflow_id, timeout)
        if failure is not None:
            kind = "nondeterminism" if isinstance(failure, NondeterminismError) else "workflow task failed"
            reason = _reason(failure)
            eid, etype = _locate(workflows, events, workflow_id, reason, timeout)
            out.divergence = Divergence(eid, etype, kind, reason)
    except _Escaped as exc:
        cls = types.get(str(wtype)) or types.get(None)
        who = _class_name(cls) if cls is not None else "the workflow code"
        raise InvalidInputError(
            f"the workflow {who} {exc} while replaying {workflow_id}", hint="a workflow's run method must return or raise an exception"
        ) from None
    out.seconds = time.perf_counter() - began
    return out


def _name(ev: dict[str, Any]) -> str:
    return type_name(ev.get("eventType")) or str(ev.get("eventType"))


def _locate(
    workflows: Sequence[type], events: Sequence[dict[str, Any]], workflow_id: str, reason: str, timeout: float = DEFAULT_TIMEOUT
) -> tuple[int | None, str | None]:
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
        if _replay(workflows, events[: cuts[mid]], workflow_id, timeout) is not None:
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


def check_checkpoint(ck: Any, specs: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> ReplayResult:
    """The replay check of the history up to checkpoint `ck` (a Temporal import) against
    the workflow classes `specs` (`MODULE:Class`).

    Raises:
        what load_workflows and importer.history_events raise.
    """
    from ckptcli.adapters.temporal.importer import history_events

    workflows = load_workflows(specs)
    events = list(history_events(ck))
    result = check_history(workflows, events, ck.manifest.subject.name, timeout)
    result.extra = {"id": ck.hex, "subject": str(ck.manifest.subject)}
    return result


def describe(result: ReplayResult) -> str:
    """One line for a person: the verdict on one history."""
    who = f"{result.workflow_type} {result.workflow_id} (run {result.run_id}, {result.events} events)"
    if result.divergence is None:
        return f"replay check passed: {who} replays on the workflow code without a nondeterminism error"
    return f"diverged: {who}: {result.divergence.line()}"


# -- ckpt compat --workflow ---------------------------------------------------------------------
def compat_results(
    specs: Sequence[str], paths: Sequence[Any], store: Any, refs: Sequence[str], subject: str | None, timeout: float = DEFAULT_TIMEOUT
) -> list[Any]:
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
        timeout: seconds each replay may take.

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
            out.append(_file_result(workflows, f, timeout))
    if store is not None:
        for ck in _store_checkpoints(store, refs, subject):
            out.append(_checkpoint_result(workflows, ck, timeout))
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


def _file_result(workflows: Sequence[type], path: Any, timeout: float) -> Any:
    from ckptcli.adapters.temporal.reader import read_events
    from ckptcli.errors import CkptError

    try:
        events = [ev.raw for ev in read_events(path, check=True)]
    except CkptError as exc:
        return _verdict(str(path), None, exc)
    return _verdict(str(path), check_history(workflows, events, path.stem, timeout), subject=f"workflow:{path.stem}")


def _checkpoint_result(workflows: Sequence[type], ck: Any, timeout: float) -> Any:
    from ckptcli.adapters.temporal.importer import history_events
    from ckptcli.errors import CkptError

    name = f"{ck.hex[:12]} {ck.manifest.subject}"
    where = {"checkpoint": ck.hex, "subject": str(ck.manifest.subject)}
    try:
        events = list(history_events(ck))
    except CkptError as exc:
        return _verdict(name, None, exc, **where)
    return _verdict(name, check_history(workflows, events, ck.manifest.subject.name, timeout), **where)


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
