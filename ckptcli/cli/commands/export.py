"""ckpt export: one checkpoint as a single self-contained file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import StoreOpt, app
from ckptcli.cli.output import BarProgress, exit_status, human_size
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.IO_ERROR))
def export(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write (e.g. agent.ckpt).")],
    store: StoreOpt = None,
) -> None:
    """Write one checkpoint as a single file that every read command accepts.

    Examples:

      ckpt export latest -o agent.ckpt

      ckpt show agent.ckpt && ckpt verify agent.ckpt --read-data
    """
    from ckptcli import api
    from ckptcli.store.single import check_output_path

    check_output_path(output)
    ck = api.open_checkpoint(ref, store_path=store)
    size = api.export_checkpoint(ck, output, progress=BarProgress())
    sys.stderr.write(f"exported {ck.hex[:12]} to {output} ({human_size(size)})\n")
