"""ckpt import: copy a checkpoint file into the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, out
from ckptcli.errors import ExitCode


@app.command("import", epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.LIMIT_EXCEEDED, ExitCode.IO_ERROR))
def import_(
    file: Annotated[Path, typer.Argument(help="A checkpoint file made by `ckpt export`.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import a checkpoint file into the store (checked whole before anything is kept).

    Examples:

      ckpt import agent.ckpt

      ckpt import agent.ckpt --store /srv/ckpt --json
    """
    from ckptcli import api

    st = api.open_store(store)
    cid = api.import_checkpoint(st, file, progress=BarProgress())
    if as_json:
        emit_json({"id": cid.hex()})
    else:
        out().print(cid.hex(), markup=False)
