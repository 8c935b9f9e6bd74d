"""The command line this process names in the records it leaves in a store: reflog
entries (formats/reflog.md) and the holder records of its locks. The CLI sets it to
`ckpt ARGS`; a library caller may too; by default it is this process's argv."""

from __future__ import annotations

import os
import shlex
import sys

__all__ = ["MAX_COMMAND", "current_command", "set_command"]

MAX_COMMAND = 500  # characters of the command line kept in a reflog entry

_command: str | None = None


def set_command(command: str | None) -> None:
    """What records name as the command (None: this process's argv); a URL's user info
    and the values of secret-looking `--store-option`s in it are replaced by ***."""
    global _command
    _command = None if command is None else shlex.join(_redacted(shlex.split(command)))


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
    if _command is not None:
        return _command[:MAX_COMMAND]
    return shlex.join(_redacted([os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]))[:MAX_COMMAND]
