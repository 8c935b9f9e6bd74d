"""ckpt show: metadata and a summary of each section, or one section in full."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli._indoubt import calls_in_doubt, in_doubt_json, in_doubt_lines
from ckptcli.cli.app import JsonOpt, RefArg, SnapshotOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, human_size, json_text, out, safe
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.api import Checkpoint
    from ckptcli.history.stateat import StateAt


@app.command(
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
    )
)
def show(
    ref: RefArg,
    section: Annotated[
        str | None,
        typer.Option("--section", help="Print this section in full (memory, plan, tools, events, blobs, ext:NS).", show_default=False),
    ] = None,
    snapshot: SnapshotOpt = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="LangGraph checkpoints: print --section values exactly as stored (messages as $ext views).")
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a checkpoint's metadata and sections.

    A recorded checkpoint (one with an event tail, formats/events.md) is shown at its
    state: its snapshot with the tail applied, as `ckpt replay` gives it (a line says
    "snapshot at seq B, tail B+1..N"; --json adds "state": {"seq", "snapshot_seq",
    "tail", "events", "applied"}). --snapshot shows the stored sections instead.

    Calls in doubt (a tool call, a workflow step, an activity recorded without its result:
    it may or may not have happened) are listed under "in doubt" with their call id, tool,
    arguments (summarized, secrets redacted) and idempotency key; --json adds "in_doubt":
    [{"call_id", "tool", "args", "key", "started", "seq", "index"}] (absent when there are
    none). Reconcile them before resuming from this checkpoint (docs/workflows.md).

    Examples:

      ckpt show latest

      ckpt show 3f2a9c --section memory

      ckpt show agent:bot~2 --json

      ckpt show exported.ckpt

      ckpt show agent:bot --section memory --snapshot

    For a LangGraph checkpoint, --section prints messages as "role: text" lines (tool
    calls as "→ name(arg=...)"), a datetime or date as its ISO 8601 text in UTC, and a
    time in nanoseconds (an event's ts) as "N (2026-11-26T17:45:05Z)"; --all or --json
    print them as stored.
    """
    from ckptcli.history.stateat import state_at

    ck = open_checkpoint(ref, store)
    at = state_at(ck, snapshot=snapshot, lenient=True)
    if section is not None:
        _show_section(ck, at, section, as_json=as_json, show_all=show_all)
    else:
        info = at.summary()
        doubt = calls_in_doubt(ck, at)
        if doubt:
            info.update(in_doubt_json(doubt))
        if as_json:
            emit_json(info)
        else:
            _print_summary(info)
            for line in in_doubt_lines(doubt):
                out().print(line, markup=False, highlight=False)
    _warn_after(at.problem)


def _show_section(ck: Checkpoint, at: StateAt, section: str, *, as_json: bool, show_all: bool) -> None:
    """One section as JSON (a LangGraph checkpoint's made readable unless --all or --json)."""
    from ckptcli.format.jsonview import to_json

    if section not in ck.manifest.sections and section not in at.section_parts():
        ck.section(section)  # the usual error
    value = to_json(at.section(section, lazy_bytes=section == "blobs"))
    if as_json:
        emit_json(value)
        return
    if not show_all and "langgraph.checkpoint" in ck.manifest.labels:
        from ckptcli.adapters.langgraph.render import readable

        value = readable(value, times=True)
    out().print_json(json_text(value))


def _print_summary(info: dict[str, Any]) -> None:
    c = out()
    c.print(f"checkpoint {info['id']}", markup=False)
    c.print(f"subject    {safe(info['subject'])}", markup=False)
    c.print(f"created    {info['created']}", markup=False)
    c.print(f"parents    {' '.join(info['parents']) or '(none)'}", markup=False)
    if info["labels"]:
        c.print("labels     " + " ".join(f"{safe(k)}={safe(v)}" for k, v in info["labels"].items()), markup=False)
    if info["message"]:
        c.print(f"message    {safe(info['message'])}", markup=False)
    c.print(
        f"producer   {safe(info['producer'].get('name', '?'))} {safe(info['producer'].get('version', ''))}  (format {info['format']})",
        markup=False,
    )
    if info["schema_version"] is not None:
        c.print(f"schema     {safe(info['schema_version'])}", markup=False)
    if "state" in info and "problem" in info["state"]:
        c.print("state      stored sections (its events section does not replay: see the warning)", markup=False)
    elif "state" in info:
        st = info["state"]
        where = f"snapshot at seq {st['snapshot_seq']}, tail {st['tail'][0]}..{st['tail'][1]}"
        if st["applied"]:
            c.print(f"state      at seq {st['seq']} ({where}); sections below are at seq {st['seq']} (--snapshot: as stored)", markup=False)
        else:
            c.print(f"state      {where}; sections below are the stored snapshot at seq {st['snapshot_seq']}", markup=False)
    c.print("sections", markup=False)
    for name, d in info["sections"].items():
        extra = f"{d['items']} items, " if "items" in d else ""
        if "files" in d:
            extra += f"{d['files']} files, "
        c.print(f"  {safe(name):<12} {d['type']:<7} {extra}{human_size(d['bytes'])}", markup=False)


def _warn_after(problem: str | None) -> None:
    """A tail that does not replay: said once the output is written (an error later
    stays the one line on stderr)."""
    if problem is not None:
        from ckptcli.cli.app import warn
        from ckptcli.history.stateat import problem_warning

        warn(problem_warning(problem))
