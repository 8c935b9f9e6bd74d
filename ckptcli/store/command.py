"""The command line this process names in the records it leaves in a store: reflog
entries (formats/reflog.md) and the holder records of its locks. The CLI sets it to
`ckpt ARGS`; a library caller may too; by default it is this process's argv."""

from __future__ import annotations

import os
import sys

__all__ = ["MAX_COMMAND", "current_command", "set_command"]

MAX_COMMAND = 500  # characters of the command line kept in a reflog entry

_command: str | None = None


def set_command(command: str | None) -> None:
    """What records name as the command (None: this process's argv)."""
    global _command
    _command = command


def current_command() -> str:
    if _command is not None:
        return _command[:MAX_COMMAND]
    args = sys.argv[1:]
    if any("://" in a or a.startswith("--store-option") for a in args):  # a URL may hold a password
        from ckptcli.store.backends import redact_args

        args = redact_args(args)
    return " ".join([os.path.basename(sys.argv[0]) if sys.argv else "python", *args])[:MAX_COMMAND]
