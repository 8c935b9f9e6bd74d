"""ckpt replay: rebuild the state at a point of a checkpoint's event tail, print each
transition, or check a step function against the recording."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli.app import (
    ExcludePathOpt,
    IgnoreOrderOpt,
    JsonOpt,
    ReducersOpt,
    RefArg,
    SignificantDigitsOpt,
    StoreOpt,
    ToleranceOpt,
    app,
    tolerance_of,
)
from ckptcli.cli.output import emit_json, exit_status, json_text, out, quiet, safe, short, user_output_to_stderr
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.api import Checkpoint
    from ckptcli.history.events import Reducers
    from ckptcli.history.replay import Tail


@app.command(
    "replay",
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.NO_STORE,
        ExitCode.DIVERGED,
    ),
)
def replay_cmd(
    ref: RefArg,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="SEQ|TIME",
            help="Stop after this event: a seq number, or a time (ISO 8601, or an age such as 10m).",
            show_default=False,
        ),
    ] = None,
    step: Annotated[bool, typer.Option("--step", help="Print each event and what it changed.")] = False,
    check: Annotated[
        str | None,
        typer.Option(
            "--check",
            metavar="MODULE:FUNC",
            help="Re-run this step function over the recorded inputs and report the first divergence "
            "(a Temporal history: replay it against this MODULE:WorkflowClass).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="With --check on a Temporal history: kill a replay (exit 7) that takes longer "
            "(default 60; each runs in a process of its own).",
            show_default=False,
        ),
    ] = None,
    reducers: ReducersOpt = None,
    ignore_order: IgnoreOrderOpt = False,
    significant_digits: SignificantDigitsOpt = None,
    tolerance: ToleranceOpt = None,
    exclude_path: ExcludePathOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the state at any point of a checkpoint's event tail.

    A checkpoint with events holds a snapshot (memory, plan, tools, ext) and a tail: the
    events recorded since the previous checkpoint. Replay applies the tail's events to
    the snapshot with deterministic reducers and prints the state (its JSON view, as
    `ckpt cat` prints values) at the end of the tail, or after event --to SEQ, or after
    the last event recorded at or before --to TIME. --step prints each event and the
    changes it made (paths as in `ckpt diff`).

    A LangGraph checkpoint's pending writes are applied to its channels with the
    reducers learnt from the thread's recorded steps (add_messages, operator.add, last
    value); a write whose reducer is not known is kept as it is and named ("! not
    applied", and ext.langgraph.not_applied).

    --check MODULE:FUNC imports your step function (from the current directory too) and
    re-runs it on each recorded input event, answering its tool calls with the recorded
    results: nothing external runs again. When the checkpoint was taken in the middle of
    a step, that step is re-run from its input, in the parent's tail. It stops at the first event the function
    emits differently, or fails to emit, prints the recorded and the replayed event, and
    exits with 13. The step-function contract is in docs/replay.md. --ignore-order,
    --significant-digits, --tolerance and --exclude-path (as in `ckpt diff`, the paths
    those of the event's fields: /value/meta/ts) let an event differ in declared noise.

    On a checkpoint imported from a Temporal history (`ckpt import temporal`), --check
    MODULE:WorkflowClass replays the history with temporalio's own Replayer (offline)
    against your workflow code: a NondeterminismError is the divergence, exit 13, naming
    the event where it happened (docs/workflows.md, "The replay check in CI").

    --json prints {"id", "base_seq", "seq", "applied", "state"}; with --step, also
    "steps": [{"event", "changes"}] (changes as JSON Patch operations); with --check, the
    report {"ok", "steps", "matched", "unchecked", "partial_step", "from_seq",
    "divergence": {"seq", "input_seq", "reason", "expected", "actual"}}.

    Examples:

      ckpt replay latest

      ckpt replay agent:bot --to 42 --json | jq .state.memory

      ckpt replay 3f2a9c --step --to 2026-11-21T10:15

      ckpt replay agent:bot --check myagent.steps:step

      ckpt replay agent:bot --check myagent.steps:step --ignore-order --exclude-path '/ts$'

      ckpt replay workflow:order-42 --check myapp.workflows:OrderWorkflow
    """
    from ckptcli.history.replay import load_reducers

    if check is not None and (step or to is not None):
        from ckptcli.errors import UsageError

        raise UsageError("--check replays the whole tail", hint="leave out --step and --to")
    # checked whatever else is given: a bad value is a usage error before anything is
    # imported or read, with --check or without (where they change nothing)
    tol = tolerance_of(ignore_order, significant_digits, tolerance, exclude_path)
    red = load_reducers(reducers or [])
    if check is not None:
        from ckptcli.history.replay import load_step
        from ckptcli.schema.migrations import cwd_importable

        cwd_importable()
        temporal = _temporal(ref, store)
        if temporal is not None:
            _check_temporal(temporal, check, as_json, timeout)
            return
        with user_output_to_stderr():  # the step function's module prints on stderr, never into --json
            func = load_step(check)
        _check(open_checkpoint(ref, store), func, red, as_json, tol, name=check)
        return
    to_seq, to_time = _parse_to(to)
    tail = _tail(open_checkpoint(ref, store))
    n = tail.count_to(to_seq, to_time)  # --to checked against the tail, whichever the output
    if step:
        _steps(tail, to_seq, to_time, red, as_json)
    else:
        _state(tail, n, to_seq, to_time, red, as_json)


def _tail(ck: Checkpoint) -> Tail:
    """The checkpoint's event tail (a LangGraph checkpoint's: its writes applied to the channels)."""
    from ckptcli.history.replay import load_tail

    tail = load_tail(ck)
    if ck.manifest.layout.get("format") == "langgraph":
        from ckptcli.adapters.langgraph.replay import prepare

        tail = prepare(ck, tail)
    return tail


def _state(tail: Tail, n: int, to_seq: int | None, to_time: int | None, red: Reducers, as_json: bool) -> None:
    """The state after the first `n` events of the tail (at --to; the end by default)."""
    from ckptcli.format.jsonview import to_json
    from ckptcli.history.replay import replay

    position = tail.events[n - 1].seq if n else tail.base_seq
    state = replay(tail, to_seq=to_seq, to_time=to_time, reducers=red)
    if as_json:
        emit_json({"id": tail.id, "base_seq": tail.base_seq, "seq": position, "applied": n, "state": to_json(state)})
        return
    sys.stdout.write(json.dumps(to_json(state), indent=2, ensure_ascii=False) + "\n")
    if quiet():
        return
    sys.stderr.write(
        f"replayed {n} of {len(tail.events)} events onto the snapshot of {short(tail.id)} (seq {tail.base_seq}); state at seq {position}\n"
    )
    guessed = _inferred_reducers(tail.snapshot)
    if guessed:
        sys.stderr.write(f"reducers inferred from the thread's recorded steps, not read from the graph: {guessed}\n")


def _inferred_reducers(snapshot: Any) -> str:
    """The reducers a LangGraph replay learnt for the channels it writes, as one line
    (empty for other checkpoints): they fit every recorded step, but a custom reducer
    may fit those and differ later, so the output says they are inferred."""
    lg = snapshot.get("ext", {}).get("langgraph") if type(snapshot) is dict and type(snapshot.get("ext")) is dict else None
    reducers = lg.get("reducers") if type(lg) is dict else None
    if type(reducers) is not dict:
        return ""
    return "; ".join(f"{ch}: {' or '.join(map(str, names)) if names else 'unknown'}" for ch, names in sorted(reducers.items()))


def _parse_to(text: str | None) -> tuple[int | None, int | None]:
    """--to: a seq (digits) or a time."""
    if text is None:
        return None, None
    t = text.strip()
    if t.isdecimal() and t.isascii():
        return int(t), None
    from ckptcli._util.timeparse import parse_time
    from ckptcli.errors import InvalidInputError

    try:
        return None, parse_time(t)
    except InvalidInputError:
        raise InvalidInputError(
            f"--to {text!r} is neither a seq number nor a time", hint="give a seq (42), an ISO 8601 time (2026-11-21T10:15) or an age (10m)"
        ) from None


def _steps(tail: Any, to_seq: int | None, to_time: int | None, reducers: Any, as_json: bool) -> None:
    from ckptcli.format.jsonview import to_json
    from ckptcli.history.replay import iter_steps

    n = tail.count_to(to_seq, to_time)
    position = tail.events[n - 1].seq if n else tail.base_seq
    steps = iter_steps(tail, to_seq=to_seq, to_time=to_time, reducers=reducers)
    if as_json:
        rows = []
        state = tail.snapshot
        for s in steps:
            rows.append({"event": to_json(s.event.to_map()), "changes": [c.to_dict() for c in s.changes()]})
            state = s.after
        emit_json({"id": tail.id, "base_seq": tail.base_seq, "seq": position, "applied": n, "steps": rows, "state": to_json(state)})
        return
    from ckptcli.history.render import describe, describe_change, format_path
    from ckptcli.listing import format_time

    lines = [f"snapshot of {short(tail.id)} at seq {tail.base_seq}"]
    guessed = _inferred_reducers(tail.snapshot)
    if guessed:
        lines.append(f"  reducers inferred from the thread's recorded steps, not read from the graph: {guessed}")
    for s in steps:
        ev = s.event
        cause = f"  (cause #{ev.cause})" if ev.cause is not None else ""
        lines.append(f"#{ev.seq}  {format_time(ev.ts)}  {ev.kind}{cause}")
        changes = s.changes()
        for c in changes:
            where = format_path(c.path) or "(the state)"
            if c.path[:3] == ("ext", "langgraph", "not_applied") and c.op == "add":
                # a LangGraph write ckpt could not apply to its channel, and why
                notes = c.new.values() if len(c.path) == 3 and type(c.new) is dict else [c.new]
                lines.extend(f"    ! not applied: {n}" for n in notes)
                continue
            if c.op == "add":
                lines.append(f"    + {where}: {describe(c.new)}")
            elif c.op == "remove":
                lines.append(f"    - {where}")
            else:
                lines.append(f"    ~ {where}: {describe_change(c.old, c.new)}")
        if not changes:
            lines.append("    (no change)")
    lines.append(f"state at seq {position}: {n} events applied")
    sys.stdout.writelines(line + "\n" for line in lines)


def _check(ck: Any, func: Any, reducers: Any, as_json: bool, tolerance: Any = None, name: str | None = None) -> None:
    from ckptcli.errors import ReplayDiverged
    from ckptcli.history.replay import check

    with user_output_to_stderr():  # the step function prints on stderr, never into --json
        report = check(ck, func, reducers=reducers, tolerance=tolerance, name=name)
    if as_json:
        emit_json(report.to_dict())
    else:
        c = out()
        d = report.divergence
        if d is None and report.from_seq is None and report.last_seq == report.base_seq:
            c.print(
                f"nothing to check: checkpoint {short(report.id)} has no events after its snapshot (seq {report.base_seq})", markup=False
            )
        elif d is None:
            first = report.from_seq if report.from_seq is not None else report.base_seq + 1
            c.print(
                f"check passed: {_count(report.steps, 'step')} re-run, {_count(report.matched, 'emitted event')} matched "
                f"(checkpoint {short(report.id)}, seq {first}..{report.last_seq})",
                markup=False,
            )
        else:
            from ckptcli.format.jsonview import to_json

            c.print(f"diverged at seq {d.seq}, in the step for input seq {d.input_seq}: {safe(d.reason, backslash=False)}", markup=False)
            for label, ev in (("recorded", d.expected), ("replayed", d.actual)):
                text = json_text(to_json(ev)) if ev is not None else "(nothing: the step had ended)"
                c.print(f"  {label}: {text}", markup=False)
        if report.from_seq is not None:
            c.print(
                f"note: the tail starts inside the step for input seq {report.from_seq}: re-run from that input, in an earlier checkpoint",
                markup=False,
            )
        if report.unchecked:
            c.print(
                f"note: {report.unchecked} events at the start continue a step begun before this checkpoint: applied, not re-run",
                markup=False,
            )
        if report.partial_step is not None:
            c.print(f"note: the step for input seq {report.partial_step} runs past the end of the tail: checked up to there", markup=False)
    if report.divergence is not None:
        raise ReplayDiverged(
            f"the step function diverged from the recording at seq {report.divergence.seq}",
            hint="see above: the recorded event and the replayed one",
        )


def _temporal(ref: str, store: Any) -> Checkpoint | None:
    """The checkpoint `ref` names when it is a Temporal history's (ckpt import temporal)."""
    from ckptcli.errors import CkptError

    try:
        ck = open_checkpoint(ref, store)
    except CkptError:
        return None  # the step-function path says what is wrong with the ref
    return ck if ck.manifest.labels.get("workflow.engine") == "temporal" else None


def _check_temporal(ck: Checkpoint, spec: str, as_json: bool, timeout: float | None = None) -> None:
    """--check MODULE:WorkflowClass on a Temporal history: temporalio's Replayer replays it
    against the workflow code (ckptcli/adapters/temporal/check.py)."""
    from ckptcli.adapters.temporal.check import check_checkpoint, describe, replay_timeout
    from ckptcli.errors import ReplayDiverged

    result = check_checkpoint(ck, [spec], replay_timeout(timeout))
    if as_json:
        emit_json(result.to_dict())
    else:
        out().print(safe(describe(result), backslash=False), markup=False)
    if result.divergence is not None:
        d = result.divergence
        where = f"event {d.event_id} ({d.event_type})" if d.event_id is not None else "an event it could not locate"
        raise ReplayDiverged(f"the workflow {spec} diverged from the history at {where}", hint="see above: what Temporal's replayer said")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
