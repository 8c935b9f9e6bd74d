"""Walks and removals of a local store's directory tree that follow no symbolic link and
never recurse: an explicit stack, so a tree planted thousands of levels deep costs a
loop, not Python's recursion limit (os.walk and shutil.rmtree of Python 3.11 recurse
once per level). Listings stop at the depth ckpt's own paths have (layout.PATH_DEPTHS)
and name what lies deeper instead (docs/storage.md, "What ckpt keeps where")."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

#: how a directory is opened to be emptied: never through a link (O_NOFOLLOW), and only a directory
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def entries(top: str, max_depth: int) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    """Every entry below directory `top`, following no link: (its path relative to `top`,
    with "/", its DirEntry, its depth: 1 directly in `top`). A real directory at depth
    `max_depth` is yielded, not entered. A directory that cannot be listed (gone meanwhile,
    no permission) is passed over, as os.walk does."""
    stack: list[tuple[str, str, int]] = [("", top, 0)]
    while stack:
        rel, path, depth = stack.pop()
        try:
            with os.scandir(path) as it:
                found = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for e in found:
            name = f"{rel}/{e.name}" if rel else e.name
            yield name, e, depth + 1
            if depth + 1 < max_depth and is_real_dir(e):
                stack.append((name, e.path, depth + 1))


def is_real_dir(entry: os.DirEntry[str]) -> bool:
    """`entry` is a directory, not a link to one."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def remove_tree(path: str) -> None:
    """Remove the directory at `path` with everything in it, however deep, following no
    link (a link in it is unlinked, never what it points to). One directory descriptor is
    open at a time, each opened with O_NOFOLLOW from its parent's; going back up through
    "..", the parent is checked to be the directory that was left (a tree moved meanwhile
    stops the removal, OSError). Raises: OSError (FileNotFoundError: `path` is gone)."""
    fd = os.open(path, _DIR_FLAGS)
    # per level above the current directory: (its device and inode, the names of the
    # subdirectories still to remove there, the current directory's name in it)
    stack: list[tuple[tuple[int, int], list[str], str]] = []
    try:
        pending = _clear_files(fd)
        while True:
            if pending:
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    os.unlink(name, dir_fd=fd)  # no longer a directory (a link swapped in): unlinked
                    continue
                st = os.fstat(fd)
                stack.append(((st.st_dev, st.st_ino), pending, name))
                os.close(fd)
                fd = child
                pending = _clear_files(fd)
                continue
            if not stack:
                break
            ident, pending, name = stack.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:
                raise OSError(errno.EBUSY, "the directory was moved while it was being removed", path)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _clear_files(fd: int) -> list[str]:
    """Unlink everything but real directories in the directory open at `fd`; returns the
    names of those directories."""
    dirs = []
    with os.scandir(fd) as it:
        for e in it:
            try:
                mode = e.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(mode):
                dirs.append(e.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.name, dir_fd=fd)
    return dirs
