"""ckpt init: create a store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, app
from ckptcli.cli.output import emit_json, exit_status, out
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.CONFLICT, ExitCode.IO_ERROR))
def init(
    path: Annotated[Path | None, typer.Argument(help="Store directory to create (default: ./.ckpt).", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an empty store.

    Examples:

      ckpt init                 # ./.ckpt, found from here and every subdirectory

      ckpt init /srv/ckpt       # then use --store /srv/ckpt or CKPT_STORE=/srv/ckpt
    """
    from ckptcli.api import init_store

    target = path if path is not None else Path.cwd() / ".ckpt"
    store = init_store(target)
    if as_json:
        emit_json({"store": str(target), "id": store.config.store_id.hex()})
    else:
        out().print(f"Initialized empty ckpt store in {target}", markup=False)
