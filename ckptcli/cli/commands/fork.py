"""ckpt fork: a new checkpoint from a replayed point of another's event tail."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, ReducersOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, quiet, short
from ckptcli.errors import ExitCode


@app.command(
    "fork",
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.CONFLICT,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.IO_ERROR,
    ),
)
def fork_cmd(
    ref: Annotated[str, typer.Argument(help="The checkpoint to fork: id or prefix, tag, branch, KIND:NAME, latest, REF~N.")],
    at: Annotated[int, typer.Option("--at", metavar="SEQ", help="The event to fork after (the snapshot's own seq forks before the tail).")],
    branch: Annotated[
        str | None, typer.Option("--branch", "-b", metavar="NAME", help="Also point this branch at the new checkpoint.", show_default=False)
    ] = None,
    message: Annotated[
        str | None, typer.Option("--message", "-m", metavar="TEXT", help="Message of the new checkpoint.", show_default=False)
    ] = None,
    move_latest: Annotated[
        bool, typer.Option("--move-latest", help="Also point the subject's latest at the fork (by default it stays on the newest state).")
    ] = False,
    reducers: ReducersOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fork the history: write a new checkpoint whose state is a replayed point.

    Replays REF's event tail to seq --at (as `ckpt replay REF --to SEQ` does) and writes
    a NEW checkpoint: its snapshot is that state, its tail empty, its parent REF, with
    the same subject, labels, schema version and blobs, and labels fork.of, fork.at and
    events.seq saying where it comes from. REF is never modified. The subject's latest
    stays on the newest state (a fork is an earlier point) unless --move-latest;
    --branch points a branch at the fork. A recorder opened with base=<the fork>
    carries on from there (docs/replay.md).

    --json prints {"id", "parent", "at", "subject", "branch", "latest_moved",
    "new_objects", "new_bytes"}.

    Examples:

      ckpt fork agent:bot --at 42

      ckpt fork 3f2a9c --at 17 --branch retry -m "before the bad refund"

      ckpt fork latest --at 120 --json | jq -r .id

      ckpt fork agent:bot --at 42 --move-latest   # carry on from the fork
    """
    from ckptcli.format.manifest import check_ref_name
    from ckptcli.history.replay import fork, load_reducers

    if branch is not None:
        check_ref_name(branch, "branch name")
    red = load_reducers(reducers or [])
    result = fork(open_store(store), ref, at, branch=branch, message=message, reducers=red, move_latest=move_latest)
    parent = result.manifest.parents[0].hex()
    if as_json:
        emit_json(
            {
                "id": result.hex,
                "parent": parent,
                "at": at,
                "subject": str(result.manifest.subject),
                "branch": branch,
                "latest_moved": result.latest_moved,
                "new_objects": result.new_objects,
                "new_bytes": result.new_bytes,
            }
        )
        return
    out().print(result.hex, markup=False)
    if not quiet():
        sys.stderr.write(f"forked {short(parent)} at seq {at} -> {short(result.hex)}; the original is unchanged\n")
