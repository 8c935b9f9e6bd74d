"""ckpt help: the help of a command (as `ckpt CMD --help`), or of ckpt itself."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import app
from ckptcli.cli.output import exit_status


@app.command("help", epilog=exit_status())
def help_cmd(
    ctx: typer.Context,
    command: Annotated[str | None, typer.Argument(help="The command whose help to print; none: ckpt's own.", show_default=False)] = None,
) -> None:
    """Print the help of COMMAND, or of ckpt when none is given.

    Examples:

      ckpt help

      ckpt help take
    """
    from ckptcli.errors import UsageError

    group = ctx.parent
    assert group is not None  # always run as a subcommand of ckpt
    if command is None:
        typer.echo(group.get_help())
        return
    cmd = group.command.get_command(group, command)  # type: ignore[attr-defined]
    if cmd is None:
        raise UsageError(f"no command {command!r}", hint="`ckpt help` lists them")
    sub = cmd.make_context(command, [], parent=group, resilient_parsing=True)
    typer.echo(cmd.get_help(sub))
