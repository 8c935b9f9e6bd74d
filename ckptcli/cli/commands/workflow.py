"""ckpt workflow ls|show|rollback: durable workflows (ckptcli.workflow) as recorded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe, short, user_output_to_stderr
from ckptcli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.workflow import RollbackPlan, WorkflowStatus

ACTIONS = ("ls", "show", "rollback")


def journal_dir_path(text: str) -> Path:
    """The parser of --journal-dir: an empty path is refused (Path("") is ".", a directory
    nobody named)."""
    if not text:
        raise typer.BadParameter("the directory is empty: give the directory the workflows' journals are in, e.g. --journal-dir ./journals")
    return Path(text)


@app.command(
    epilog=exit_status(
        ExitCode.FAILURE,
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.UNSAFE_PATH,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.CONFLICT,
    )
)
def workflow(
    action: Annotated[str, typer.Argument(metavar="ACTION", help="ls (every durable workflow), show ID, or rollback ID --to REF.")],
    workflow_id: Annotated[str | None, typer.Argument(metavar="[ID]", help="The workflow's id (its subject is workflow:ID).")] = None,
    to: Annotated[
        str | None, typer.Option("--to", metavar="REF", help="rollback: the checkpoint to go back to (an id, a tag, workflow:ID~N).")
    ] = None,
    run: Annotated[bool, typer.Option("--run", help="rollback: run the compensations (without it, only list them).")] = False,
    journal_dir: Annotated[
        Path | None,
        typer.Option(
            "--journal-dir", metavar="DIR", parser=journal_dir_path, help="Where the workflows' journals are (default: <store>/workflows)."
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Durable workflows (ckptcli.workflow): list them, show one's steps (those in doubt
    with their idempotency keys), or roll one back to a checkpoint: list the compensations
    of the steps completed after it, newest first, and with --run run them, each recorded,
    exactly once even when a rollback is killed and run again. A compensation is found by
    the name the workflow recorded (module:function; the current directory is importable).
    Exits 1 when a compensation raises or calls sys.exit() (run the rollback again to go
    on), 9 while the workflow runs, 11 when another rollback is unfinished. --journal-dir
    must be the directory the workflow was run with: one that does not exist (3), is not a
    directory (4), is a link (8), is empty (2), is not the store's workflows directory
    when that holds the workflow's journal (4), or is not the directory the store
    recorded at the workflow's first run (4; leaving it out too) is refused; ls lists
    every workflow, each with its journal in the store's workflows directory if it is
    there, else in --journal-dir (one whose recorded directory is another is listed from
    its latest checkpoint, with a warning). A journal or lock file that is a symbolic link (8), or a FIFO, socket
    or device (5), is refused, never read or written through; so is a damaged journal
    header (5).

    Examples:

      ckpt workflow ls

      ckpt workflow show order-1042 --json

      ckpt workflow rollback order-1042 --to workflow:order-1042~1

      ckpt workflow rollback order-1042 --to 4482dc7acb1a --run
    """
    from ckptcli import workflow as wf
    from ckptcli.checkpoint import refuse_url

    if journal_dir is not None:
        refuse_url(journal_dir, "--journal-dir")
    if action not in ACTIONS:
        raise UsageError(
            f"unknown action {action!r}", hint="use ckpt workflow ls, ckpt workflow show ID or ckpt workflow rollback ID --to REF"
        )
    if action == "ls":
        if workflow_id is not None or to is not None or run:
            raise UsageError("ckpt workflow ls takes no ID, --to or --run")
        found = wf.list_workflows(open_store(store), journal_dir=journal_dir)
        if as_json:
            emit_json([_summary(s) for s in found])
            return
        _print_list(found)
        return
    if workflow_id is None:
        raise UsageError(f"ckpt workflow {action} needs a workflow ID", hint=f"e.g. ckpt workflow {action} order-1042")
    if action == "show":
        if to is not None or run:
            raise UsageError("--to and --run are for ckpt workflow rollback")
        st = wf.status(open_store(store), workflow_id, journal_dir=journal_dir)
        if as_json:
            emit_json(st.to_json())
            return
        _print_status(st)
        return
    if to is None:
        raise UsageError(
            "ckpt workflow rollback needs --to REF", hint=f"e.g. ckpt workflow rollback {workflow_id} --to workflow:{workflow_id}~1"
        )
    from ckptcli.schema.migrations import cwd_importable

    cwd_importable()  # a compensation recorded as module:function loads from the project's directory, as replay --check's code does
    with user_output_to_stderr():  # the compensations (and their modules) print on stderr, never into --json
        plan = wf.rollback(open_store(store), workflow_id, to, execute=run, journal_dir=journal_dir)
    if as_json:
        emit_json(plan.to_json())
        return
    _print_plan(plan)


def _summary(s: WorkflowStatus) -> dict[str, Any]:
    return {
        "id": s.workflow_id,
        "type": s.type,
        "status": s.status,
        "steps_done": sum(1 for x in s.steps if x.status == "ok"),
        "in_doubt": len(s.in_doubt),
        "runs": s.runs,
        "checkpoint": s.checkpoint,
    }


def _print_list(found: list[WorkflowStatus]) -> None:
    con = out()
    if not found:
        con.print("no durable workflows", markup=False)
        return
    rows = [("ID", "STATUS", "STEPS", "IN DOUBT", "RUNS", "TYPE")]
    for s in found:
        sm = _summary(s)
        rows.append((s.workflow_id, s.status, str(sm["steps_done"]), str(sm["in_doubt"]), str(s.runs), s.type or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        con.print(safe("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()), markup=False)


def _brief(value: Any, width: int = 48) -> str:
    from ckptcli.cli.output import json_text
    from ckptcli.format.jsonview import to_json

    text = json_text(to_json(value))
    return text if len(text) <= width else text[: width - 3] + "..."


def _printer() -> Any:
    con = out()

    def p(text: str) -> None:
        con.print(safe(text), markup=False)

    return p


def _print_status(s: WorkflowStatus) -> None:
    p = _printer()
    p(f"workflow:{s.workflow_id}  {s.status}  type {s.type or '-'}  runs {s.runs}  steps done {s.pointer}")
    p(f"checkpoint {short(s.checkpoint) if s.checkpoint else '-'}  seq {s.seq}" + (f"  journal {s.journal}" if s.journal else ""))
    for st in s.steps:
        mark = {"ok": "done", "error": "FAILED", "pending": "IN DOUBT"}.get(st.status, st.status)
        tail = _brief(st.result) if st.status == "ok" else (st.error or "")
        p(f"  {st.pos:>4}  {st.name}  {mark}  attempts {st.attempts}  key {st.key}  {tail}".rstrip())
    for st in s.in_doubt:
        p(f"in doubt: step {st.name} (position {st.pos}) key {st.key}: it began and has no result; a re-run runs it again with this key")
    if s.variables:
        p("variables: " + _brief(s.variables, 200))
    if s.status == "done":
        p("result: " + _brief(s.result, 200))
    if s.error:
        p(f"error: {s.error.get('type')}: {s.error.get('message')}")


def _print_plan(plan: RollbackPlan) -> None:
    p = _printer()
    verb = "rolled back" if plan.executed else "would roll back"
    kept = "no step stays done" if plan.pointer == 0 else "step 1 stays done" if plan.pointer == 1 else f"steps 1-{plan.pointer} stay done"
    p(f"workflow:{plan.workflow_id} {verb} to {short(plan.to)} (seq {plan.to_seq}; {kept})")
    if not plan.compensations:
        p("  no step completed after it")
    for c in plan.compensations:
        what = c.compensate or "(not importable by name: pass it to ckptcli.workflow.rollback(compensations=...))"
        if c.status == "none":
            what = "(no compensation)"
        p(f"  {c.pos:>4}  {c.step}  {c.status}  key {c.key}  {what}")
    for st in plan.in_doubt:
        p(f"  in doubt: step {st.name} (position {st.pos}) key {st.key}: not compensated (whether it happened is unknown)")
    if not plan.executed and any(c.status not in ("done", "none") for c in plan.compensations):
        p(f"run them: ckpt workflow rollback {plan.workflow_id} --to {short(plan.to)} --run")
