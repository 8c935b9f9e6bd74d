"""The command line this process names in the records it leaves in a store: reflog
entries (formats/reflog.md) and the holder records of its locks. The CLI sets it to
`ckpt ARGS`; a library caller may too; by default it is this process's argv."""

from __future__ import annotations

import os
import shlex
import sys

__all__ = ["MAX_COMMAND", "current_command", "set_command"]

MAX_COMMAND = 500  # characters of the command line kept in a reflog entry

_command: str | None = None  # as given to set_command
_shown: str | None = None  # _command redacted, made when a record first needs it
_argv: tuple[tuple[str, ...], str] | None = None  # (sys.argv, it redacted): each take's records need it


def set_command(command: str | None) -> None:
    """What records name as the command (None: this process's argv); its secrets are
    left out when a record first asks for it (`ckpt --help` writes no record, and does
    not load the redaction rules)."""
    global _command, _shown
    _command, _shown = command, None


def _redacted(args: list[str]) -> list[str]:
    """`args` (a program's name first) without a secret: a record is kept in the store, and
    printed by `ckpt reflog` and by whoever waits for a lock. URLs and `--store-option`s as
    the backends redact them; options, `user:password` values and assignments whose names
    look secret as a captured program's command line is redacted (ckptcli/_util/redact.py)."""
    from ckptcli._util.redact import redact_argv

    if any("://" in a or a.startswith("--store-option") for a in args):
        from ckptcli.store.backends import redact_args

        args = redact_args(args)
    return redact_argv(args)


def current_command() -> str:
    global _shown
    if _command is not None:
        if _shown is None:
            _shown = shlex.join(_redacted(shlex.split(_command)))
        return _shown[:MAX_COMMAND]
    global _argv
    argv = tuple(sys.argv)
    if _argv is None or _argv[0] != argv:
        _argv = (argv, shlex.join(_redacted([os.path.basename(argv[0]) if argv else "python", *argv[1:]]))[:MAX_COMMAND])
    return _argv[1]
