"""ckpt init: create a store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import GLOBALS, JsonOpt, app
from ckptcli.cli.output import emit_json, exit_status, out
from ckptcli.errors import ExitCode, UsageError


@app.command(epilog=exit_status(ExitCode.CONFLICT, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.IO_ERROR))
def init(
    path: Annotated[
        str | None,
        typer.Argument(help="Store directory or URL to create (default: --store, else CKPT_STORE, else ./.ckpt).", show_default=False),
    ] = None,
    format_version: Annotated[
        int | None,
        typer.Option(
            "--format-version",
            metavar="N",
            help="Container format to write (default: the newest); 1 keeps the store readable by ckpt 0.1.",
            show_default=False,
        ),
    ] = None,
    chunker: Annotated[
        str | None,
        typer.Option(
            "--chunker",
            metavar="NAME",
            help="Content-defined chunker of blob files and long strings: fastcdc2020 (default) or fastcdc, the one of stores "
            'made before there was a choice (data taken into stores of different chunkers shares no chunks: docs/design.md, "Chunkers").',
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an empty store.

    Examples:

      ckpt init                 # ./.ckpt, found from here and every subdirectory

      ckpt init /srv/ckpt       # then use --store /srv/ckpt or CKPT_STORE=/srv/ckpt

      CKPT_STORE=/srv/ckpt ckpt init   # the same (so is: ckpt --store /srv/ckpt init)

      ckpt init --format-version 1 shared/.ckpt   # for hosts still on ckpt 0.1

      ckpt init --chunker fastcdc /srv/ckpt2   # chunks as stores made before there was a choice

      ckpt init s3://team-bucket/agents   # on object storage (the s3 extra: docs/storage.md)
    """
    from ckptcli.api import init_store
    from ckptcli.format import limits
    from ckptcli.format.chunker import CHUNKERS

    if chunker is not None and chunker not in CHUNKERS:  # "" too: not the default, a mistake
        what = "is empty" if not chunker else f"{chunker!r} is not a chunker"
        raise UsageError(f"--chunker {what}", hint=f"use one of {', '.join(CHUNKERS)}, or leave it out for the default")

    # the store every other command would use: PATH, else --store before the verb, else
    # CKPT_STORE, else ./.ckpt
    from ckptcli.store.repository import same_location, store_location

    given = GLOBALS.get("store")
    if path is not None and given is not None and not same_location(path, str(given)):
        raise UsageError(f"init {path} and --store {given} name two different stores", hint="give one of them")
    env = os.environ.get("CKPT_STORE")
    target = store_location(path if path is not None else str(given) if given is not None else env if env else str(Path.cwd() / ".ckpt"))
    store = init_store(target, format_version if format_version is not None else limits.FORMAT_VERSION, chunker=chunker)
    shown = store.location
    if as_json:
        emit_json({"store": shown, "id": store.config.store_id.hex(), "format_version": store.version, "chunker": store.config.chunker})
    else:
        out().print(f"Initialized empty ckpt store in {shown}", markup=False)
