"""The one-line error for a system call on a store's files that failed: the system's
reason and what to do about it."""

from __future__ import annotations

import errno
from pathlib import Path

from ckptcli.errors import StoreIOError

__all__ = ["io_error"]


def io_error(exc: OSError, what: str, path: Path | str) -> StoreIOError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        hint = "free some disk space and try again; nothing was committed"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        hint = "check the permissions of the store directory"
    elif exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        hint = "something in the store is not what ckpt made there; `ckpt doctor` and `ckpt verify` say what"
    else:
        hint = "fix what the system reports and try again; `ckpt doctor` checks the store"
    return StoreIOError(f"cannot {what} {path}: {reason}", hint=hint)
