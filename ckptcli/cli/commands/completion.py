"""ckpt completion: the shell completion script for bash, zsh, fish or PowerShell."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import app
from ckptcli.cli.output import exit_status

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


@app.command(epilog=exit_status())
def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh, fish, powershell or pwsh.")],
) -> None:
    """Print the completion script for SHELL: commands, options and file names complete
    on Tab. Load it from your shell's start-up file.

    Examples:

      ckpt completion bash > ~/.local/share/bash-completion/completions/ckpt

      echo 'eval "$(ckpt completion bash)"' >> ~/.bashrc

      ckpt completion zsh > "${fpath[1]}/_ckpt"

      ckpt completion fish > ~/.config/fish/completions/ckpt.fish
    """
    from ckptcli.errors import UsageError

    if shell not in SHELLS:
        raise UsageError(f"no completion for shell {shell!r}", hint=f"use one of {', '.join(SHELLS)}")
    from typer._completion_classes import completion_init
    from typer._completion_shared import get_completion_script

    completion_init()
    typer.echo(get_completion_script(prog_name="ckpt", complete_var="_CKPT_COMPLETE", shell=shell))
