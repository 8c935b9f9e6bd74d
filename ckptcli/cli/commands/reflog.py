"""ckpt reflog: every move of a ref (a subject's latest, a tag, a branch), newest first."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app, open_store
from ckptcli.cli.output import emit_json, exit_status, out, safe, short
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE))
def reflog(
    name: Annotated[
        str | None, typer.Argument(help="A subject (KIND:NAME: its latest), a tag or a branch; default: every ref.", show_default=False)
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", metavar="N", help="At most this many entries.", show_default=False)] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show how refs moved, newest first: each subject's latest, tags and branches.

    Every change of a ref (a take, a migrate, a reset, a tag, a prune, a repair) is
    appended to the store's reflog (logs/refs/..., formats/reflog.md) with the old and
    new checkpoint, the time, what moved it (the command line), the host and the pid.
    NAME@{N} names what NAME pointed at N moves ago (NAME@{0} is now), in every
    command that takes a checkpoint reference; `ckpt reset SUBJECT 'SUBJECT@{1}'` undoes
    the last move of its latest.

    --json prints a list of {"ref", "old", "new", "time", "time_ns", "reason",
    "command", "host", "pid"} (full ids; old is null for a ref created, new for one
    deleted).

    Examples:

      ckpt reflog

      ckpt reflog agent:bot

      ckpt reflog known-good --json

      ckpt reset agent:bot 'agent:bot@{1}'
    """
    st = open_store(store)
    path = st.ref_path_of(name) if name is not None else None
    entries = st.ref_log(path)
    if limit is not None:
        entries = entries[:limit]
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    if not entries:
        out().print("no ref moves recorded", markup=False)
        return
    seen: dict[str, int] = {}
    c = out()
    for e in entries:
        when = e.to_dict()["time"][:19].replace("T", " ")
        ref, reason = safe(e.ref), safe(e.reason)
        if e.old is not None and e.old == e.new:  # no move: a new checkpoint left it here
            c.print(f"{ref + ' (kept)':<{len(ref) + 4}}  {when}  {short(e.new):<12}    {'':<12}  {reason}", markup=False)
            continue
        n = seen.get(e.ref, 0)
        seen[e.ref] = n + 1
        move = f"{short(e.old) if e.old else '(new)':<12} -> {short(e.new) if e.new else '(deleted)':<12}"
        c.print(f"{ref}@{{{n}}}  {when}  {move}  {reason}", markup=False)
