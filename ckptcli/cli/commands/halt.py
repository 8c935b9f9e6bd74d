"""ckpt halt: end a `ckpt run` supervision, after a final checkpoint."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.FAILURE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.LOCKED, ExitCode.NO_STORE))
def halt(
    subject: Annotated[str, typer.Argument(help="The supervised program's subject, process:NAME.")],
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the supervisor to end.")] = "5m",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """End the `ckpt run` supervising SUBJECT: it takes a final checkpoint, sends SIGTERM
    to the program's process group (SIGKILL 30 s later), and exits 0. Prints the final
    checkpoint's id ("none" when none could be taken). Exits 3 when no supervisor runs.

    Examples:

      ckpt halt process:sim

      ckpt halt process:sim --json
    """
    from ckptcli._util.timeparse import parse_seconds
    from ckptcli.adapters.process.supervisor import ask, process_subject

    subj = process_subject(subject)
    hexid = ask(open_store(store), subj, "halt", parse_seconds(timeout, "--timeout"))
    if as_json:
        emit_json({"subject": str(subj), "id": None if hexid == "none" else hexid})
    else:
        out().print(safe(hexid), markup=False)
