"""The file-system steps of restoring blobs, each through directory file descriptors
with O_NOFOLLOW so that no symlink is followed: checking what the target holds against
the checkpoint, opening a directory below the target, removing a tree, and keeping a
file or directory aside under a random name. Restore itself is ckptcli.blobs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Any

from ckptcli.errors import ConflictError
from ckptcli.store.backend import TEMP_TRIES, create_temp, temp_name

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Parts = tuple[str, ...]


def _rel(parts: _Parts, name: str) -> str:
    return "/".join((*parts, name))


def _check_conflicts(dir_fd: int, entries: dict[str, Any], parts: _Parts, overwrite: bool, delete: bool = False) -> None:
    """Raise ConflictError for the first name of the checkpoint that the existing target
    does not let restore write (before anything is written). `delete`: a directory where
    the checkpoint has a file or link is what the target holds that the checkpoint does
    not, and goes (kept aside, as every file --delete removes)."""
    for name, entry in entries.items():
        kind = entry["type"]
        if kind == "skipped":
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if kind == "dir" and stat.S_ISDIR(st.st_mode):
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                _check_conflicts(fd, entry["entries"], (*parts, name), overwrite, delete)
            finally:
                os.close(fd)
        else:
            _conflict(_rel(parts, name), st, overwrite, "; nothing was written", delete)


def _conflict(rel: str, st: os.stat_result, overwrite: bool, outcome: str = "", delete: bool = False) -> None:
    if stat.S_ISDIR(st.st_mode):
        if delete:
            return
        raise ConflictError(
            f"{rel} exists as a directory in the target, where the checkpoint has a file or link",
            hint=f"remove it first, or pass --delete to remove it with what else the checkpoint does not hold{outcome}",
        )
    if not overwrite:
        raise ConflictError(
            f"{rel} already exists in the target", hint=f"pass --overwrite to replace it, or restore into an empty directory{outcome}"
        )


def _open_dir(root_fd: int, parts: _Parts) -> int:
    """A new descriptor of the directory `parts` below `root_fd`, following no symlink."""
    fd = os.dup(root_fd)
    for part in parts:
        try:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd


def _remove(dir_fd: int, name: str) -> None:
    """Remove `name` and, for a directory, everything below it (no symlink followed)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.chmod(fd, 0o700)  # a read-only directory this restore made (mode 0555) must still empty
        for child in os.listdir(fd):
            _remove(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _keep_aside(dir_fd: int, name: str, entries: dict[str, Any]) -> tuple[str, bool]:
    """A second name for the file or link `name`, random (as create_temp's, suffix
    .old): a hard link, created exclusively, so the file can be renamed over at once;
    where hard links are not possible, the file is renamed over an empty file of our
    own made by create_temp. Returns (the name, whether `name` is still there too)."""
    for _ in range(TEMP_TRIES):
        aside = temp_name(secrets.token_hex(8), ".old")
        if aside in entries:
            continue
        try:
            os.link(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            return aside, True
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
            break
    else:
        raise FileExistsError(errno.EEXIST, f"no free temporary name after {TEMP_TRIES} random tries")
    aside, fd = create_temp(dir_fd, suffix=".old", avoid=entries)
    os.close(fd)
    try:
        os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(aside, dir_fd=dir_fd)
        raise
    return aside, False


def _dir_aside(dir_fd: int, name: str, entries: dict[str, Any]) -> str:
    """Rename the directory `name` to a new random name (.old) of its own: an empty
    directory is made there exclusively first, and renamed over (rename replaces only an
    empty directory), so nothing that appears at the name meanwhile is lost."""
    for _ in range(TEMP_TRIES):
        aside = temp_name(secrets.token_hex(8), ".old")
        if aside in entries:
            continue
        try:
            os.mkdir(aside, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(aside, dir_fd=dir_fd)
            raise
        return aside
    raise FileExistsError(errno.EEXIST, f"no free temporary name after {TEMP_TRIES} random tries")
