"""ckpt dump: one file of a checkpoint's blobs, to stdout or a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli.app import RefArg, StoreOpt, app, output_path
from ckptcli.cli.output import exit_status, write_output
from ckptcli.errors import ExitCode


def blob_file_path(text: str) -> str:
    """The parser of PATH: one that names nothing ("", or only slashes) is a usage error,
    said before the checkpoint is opened."""
    if not text.strip("/"):
        raise typer.BadParameter(f"the path {text!r} names no file: give NAME or NAME/sub/file (`ckpt ls-files REF` lists them)")
    return text


@app.command(
    epilog=exit_status(
        ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.IO_ERROR
    )
)
def dump(
    ref: RefArg,
    path: Annotated[
        str, typer.Argument(parser=blob_file_path, help="The file: NAME for a file blob, NAME/sub/file inside a directory blob.")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            parser=output_path,
            metavar="<path>",
            help="Write it here instead of stdout (as restore -o writes).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Write one file of a checkpoint's blobs to stdout, streamed from the store.

    The output appears only once complete (a damaged object leaves stdout empty);
    -o writes a file as `ckpt restore -o` does (a new file renamed into place; a FIFO
    or device written through). `ckpt ls-files REF` lists the paths.

    Examples:

      ckpt dump latest model.bin > model.bin

      ckpt dump 3f2a9c workspace/src/main.py | diff - src/main.py
    """
    from ckptcli import api

    ck = open_checkpoint(ref, store)
    if output is not None and str(output) != "-":
        api.refuse_output_into_source(ck, output, "the output")
    write_output(output, lambda fh: ck.write_blob(path, fh))
