"""ckpt restore: the state document, and blobs into a directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_spooled, exit_status, human_size
from ckptcli.errors import ExitCode
from ckptcli.store.backend import write_file_atomic


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.LIMIT_EXCEEDED, ExitCode.UNSAFE_PATH, ExitCode.CONFLICT, ExitCode.IO_ERROR))
def restore(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N, or a .ckpt file.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the state document here (default: stdout).", show_default=False)] = None,
    blobs_dir: Annotated[Path | None, typer.Option("--blobs", "-B", help="Restore blobs into this directory (created if missing).", show_default=False)] = None,
    blob: Annotated[list[str] | None, typer.Option("--blob", help="Only this blob; repeatable.", show_default=False)] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="json or msgpack (default: the format it was taken in).", show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace files and links that already exist in the blobs directory (kept aside until the restore succeeded).")] = False,
    keep_special_modes: Annotated[bool, typer.Option("--keep-special-modes", help="Restore set-uid, set-gid and sticky bits too (dropped by default).")] = False,
    no_state: Annotated[bool, typer.Option("--no-state", help="Do not write the state document.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Restore blobs even when they declare more bytes than the target's file system has free.")] = False,
    store: StoreOpt = None,
) -> None:
    """Restore a checkpoint: its state document, and its blobs into a directory.

    Nothing inside a checkpoint can write outside the blobs directory: names such as
    ../x or /etc/x and escaping symlinks are refused before anything is written, and
    so is a name that already exists there (unless --overwrite), and blobs larger than
    the free space there (unless --force). Files are written under new random names and
    renamed into place; links and files planted in the directory are never followed.
    If writing fails, what the restore wrote is removed again and what it replaced is
    put back. Set-uid, set-gid and sticky bits are dropped unless --keep-special-modes.

    The state document is streamed from the store (memory stays small whatever its
    size) and appears only once complete; one that decodes to more than
    CKPT_MAX_DECODED_BYTES (default 4 GiB) is refused before anything is written. -o
    writes it under a new random name beside the destination, renamed into place; a
    FIFO or device (/dev/stdout) is written through, never replaced.

    Examples:

      ckpt restore latest > state.json

      ckpt restore 3f2a9c -o state.json --blobs ./restored

      ckpt restore exported.ckpt --format msgpack -o state.msgpack
    """
    from ckptcli import api
    from ckptcli.blobs import RestoreReport

    ck = api.open_checkpoint(ref, store_path=store)
    if output is not None and not no_state:  # before anything is written
        api.refuse_output_into_source(ck, output, "the state document")
    if blobs_dir is not None:
        report = RestoreReport()
        n = ck.restore_blobs(
            blobs_dir, names=blob or None, overwrite=overwrite, keep_special_modes=keep_special_modes, force=force, report=report, progress=BarProgress()
        )
        sys.stderr.write(f"restored {human_size(n)} of blobs into {blobs_dir}\n")
        if report.special_dropped:
            sys.stderr.write(f"dropped set-uid/set-gid/sticky bits from {report.special_dropped} files; pass --keep-special-modes to keep them\n")
    if no_state:
        return
    doc_fmt = fmt or ("msgpack" if ck.manifest.layout.get("format") == "msgpack" else "json")
    if output is None:
        emit_spooled(lambda fh: ck.write_state(fh, doc_fmt))
        return
    write_file_atomic(output, lambda fh: ck.write_state(fh, doc_fmt))
