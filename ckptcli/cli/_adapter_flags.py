"""Flags built from the options an adapter or importer declares (ckptcli.adapters.base.Option):
`ckpt import KIND SOURCE [options]` and `ckpt capture ADAPTER TARGET [options]` parse what
follows their positional words with these."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typer._click import types as ptypes
from typer._click.core import Parameter
from typer._click.exceptions import UsageError as ClickUsageError
from typer.core import TyperArgument, TyperCommand, TyperOption

from ckptcli.errors import UsageError

#: an option's type -> the parser's (a Path is parsed as text, then made a Path)
_TYPES: dict[type, Any] = {str: ptypes.STRING, int: ptypes.INT, float: ptypes.FLOAT, Path: ptypes.STRING}

if TYPE_CHECKING:
    from ckptcli.adapters.base import Option


def flag_usage(o: Option) -> str:
    """`--name METAVAR` (or `--name` for a bool flag), as --help shows it."""
    if o.type is bool:
        return o.flag
    return f"{o.flag} {o.metavar or o.type.__name__.upper()}" + (" (repeatable)" if o.multiple else "")


def parse(command: str, declared: Sequence[Option], positional: str, what: str, args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The positional word and the declared options' values in `args`.

    Args:
        command: the command line so far ("ckpt import langgraph"), for errors.
        declared: the options.
        positional: its name in errors ("SOURCE").
        what: what it is ("a SqliteSaver database").
        args: the words after the command.

    Returns:
        (the positional word, name -> value of every declared option; multiple ones as tuples).

    Raises:
        UsageError: no positional word, an undeclared option, a value of the wrong type.
    """
    params: list[Parameter] = [TyperArgument(param_decls=["positional"], required=False)]
    for o in declared:
        decls = [o.flag, o.name]
        if o.type is bool:
            params.append(TyperOption(param_decls=decls, is_flag=True, default=bool(o.default)))
        else:
            params.append(TyperOption(param_decls=decls, type=_TYPES[o.type], multiple=o.multiple, default=o.default, metavar=o.metavar))
    known = ", ".join(flag_usage(o) for o in declared) or "none"
    cmd = TyperCommand(command, params=params, add_help_option=False)
    try:
        ctx = cmd.make_context(command, list(args))
    except ClickUsageError as exc:
        raise UsageError(f"{command}: {exc.format_message().rstrip('.')}", hint=f"its options: {known}") from None
    values = dict(ctx.params)
    word = values.pop("positional")
    if word is None:
        raise UsageError(f"`{command}` needs {what}", hint=f"{command} {positional} (its options: {known})")
    for o in declared:
        if o.multiple:
            values[o.name] = tuple(Path(v) if o.type is Path else v for v in values[o.name] or ())
        elif o.type is Path and values[o.name] is not None:
            values[o.name] = Path(values[o.name])
    return str(word), values
