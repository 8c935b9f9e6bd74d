"""ckpt ls-files: the files and directories in a checkpoint's blobs section."""

from __future__ import annotations

import stat
from typing import Annotated

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli.app import JsonOpt, RefArg, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, human_size, out, safe
from ckptcli.errors import ExitCode


@app.command(
    name="ls-files",
    epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION),
)
def ls_files(
    ref: RefArg,
    path: Annotated[str, typer.Argument(help="Only this blob or path in it (NAME/sub/dir) and what is below it.", show_default=False)] = "",
    long: Annotated[
        bool, typer.Option("--long", help="Also show mode, modification time and, for each blob, where it was taken from.")
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the blobs of a checkpoint: every file, directory and link, with its size.

    Paths are NAME/sub/file, NAME being the blob's name (`ckpt take --blob NAME=PATH`);
    --long (and --json) also give where each was taken from, which is where
    `ckpt restore --in-place` writes it back. Nothing is read but the tree itself.

    Examples:

      ckpt ls-files latest

      ckpt ls-files latest workspace/src --long

      ckpt ls-files 3f2a9c --json | jq -r '.[] | select(.type == "file") | .path'
    """
    from ckptcli.listing import format_time

    ck = open_checkpoint(ref, store)
    files = ck.list_files(path)
    if as_json:
        emit_json([f.to_dict() for f in files])
        return
    c = out()
    for f in files:
        name = safe(f.path) + ("/" if f.type == "dir" else "") + (f" -> {safe(f.target)}" if f.target else "")
        size = human_size(f.size) if f.type == "file" else "-"
        if long:
            kind = {"dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}.get(f.type, stat.S_IFREG)
            mode = stat.filemode(kind | (f.mode & 0o7777)) if f.type != "symlink" else "lrwxrwxrwx"
            when = format_time(f.mtime_ns) if f.mtime_ns else "-"
            top = "/" not in f.path and f.origin
            c.print(f"{mode}  {size:>10}  {when}  {name}" + (f"  (from {safe(f.origin)})" if top else ""), markup=False, highlight=False)
        else:
            c.print(f"{size:>10}  {name}", markup=False, highlight=False)
