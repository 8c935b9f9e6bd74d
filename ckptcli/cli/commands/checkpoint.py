"""ckpt checkpoint: ask a running `ckpt run` supervisor for a checkpoint now."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.FAILURE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.LOCKED, ExitCode.NO_STORE))
def checkpoint(
    subject: Annotated[str, typer.Argument(help="The supervised program's subject, process:NAME.")],
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the checkpoint.")] = "5m",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask the `ckpt run` supervising SUBJECT (on this host, with this store) for a
    checkpoint now, and wait until it is taken; prints its id. Exits 3 when no
    supervisor runs (a stale record of a dead one is cleared, and what it left frozen
    is thawed), 1 when the checkpoint failed (the supervisor's log says why).

    Examples:

      ckpt checkpoint process:sim

      ckpt checkpoint process:sim --json
    """
    from ckptcli._util.timeparse import parse_seconds
    from ckptcli.adapters.process.supervisor import ask, process_subject

    subj = process_subject(subject)
    hexid = ask(open_store(store), subj, "checkpoint", parse_seconds(timeout, "--timeout"))
    if as_json:
        emit_json({"subject": str(subj), "id": hexid})
    else:
        out().print(safe(hexid), markup=False)
