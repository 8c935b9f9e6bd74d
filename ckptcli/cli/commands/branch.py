"""ckpt branch: movable lines of history."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.commands.tag import _ref_command
from ckptcli.cli.output import exit_status
from ckptcli.errors import ExitCode


@app.command(
    epilog=exit_status(
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.UNSAFE_PATH,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
    )
)
def branch(
    name: Annotated[str | None, typer.Argument(help="Branch name.", show_default=False)] = None,
    ref: Annotated[str, typer.Argument(help="Checkpoint the branch points at.")] = "latest",
    delete: Annotated[bool, typer.Option("--delete", "-d", help="Delete the branch (its checkpoints stay).")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or move a branch, list branches (no NAME), or delete one.

    `ckpt take --branch NAME` takes on a branch: its head becomes the parent and the
    branch moves to the new checkpoint.

    Examples:

      ckpt branch experiment 3f2a9c

      ckpt take state.json --branch experiment

      ckpt branch --json
    """
    _ref_command("branches", name, ref, delete, True, store, as_json)
