"""ckpt export: one checkpoint as a single self-contained file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli.app import JsonOpt, StoreOpt, app, output_path
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, quiet, write_output
from ckptcli.errors import ExitCode, UsageError


@app.command(
    epilog=exit_status(ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.IO_ERROR)
)
def export(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", parser=output_path, metavar="<path>", help="File to write (e.g. agent.ckpt), or - for stdout.")
    ],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write one checkpoint as a single file that every read command accepts.

    The file is written under a new random name beside the destination and renamed
    into place once complete; a FIFO or device (/dev/stdout, /dev/null) is written
    through, never replaced; - writes to stdout, once the whole file is made (a reader
    that goes away before its end is an error, exit 12).

    Examples:

      ckpt export latest -o agent.ckpt

      ckpt export latest -o - | ssh host ckpt import -

      ckpt show agent.ckpt && ckpt verify agent.ckpt --read-data
    """
    from ckptcli import api
    from ckptcli.store.single import check_output_path

    to_stdout = str(output) == "-"
    if to_stdout and as_json:
        raise UsageError("--json prints its report on stdout, where -o - would write the checkpoint", hint="write the file with -o FILE")
    if not to_stdout:
        api.refuse_url(output, "the output")
        check_output_path(output)
    ck = open_checkpoint(ref, store)
    if to_stdout:
        size = write_output(None, lambda fh: api.export_checkpoint(ck, fh, progress=BarProgress()), whole="the checkpoint file")
    else:
        size = api.export_checkpoint(ck, output, progress=BarProgress())
    if as_json:
        emit_json({"id": ck.hex, "path": str(output), "bytes": size})
        return
    if not quiet():
        sys.stderr.write(f"exported {ck.hex[:12]} to {'stdout' if to_stdout else output} ({human_size(size)})\n")
