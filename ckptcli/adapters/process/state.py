"""A supervised program's declared state (`ckpt run --state PATH`): which paths may be
declared, and how a checkpoint's copy of them is put back.

A declared path is a regular file or a directory (or does not exist yet: the program will
create it) under the allowed root (the program's working directory unless `--state-root`
widens it), reached without a symlink on the way: every component from the root down is
checked with lstat, and every write opens directories with O_NOFOLLOW, relative to the
one above. Restoring writes each file to a temporary name in its own directory and renames
it over the old one, so the program never sees a half-written file and nothing is written
outside the declared paths.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptcli.blobs import extra_entry
from ckptcli.errors import CkptError, InvalidInputError, UnsafePathError
from ckptcli.store.locking import file_kind

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint

__all__ = ["StatePath", "blob_name", "check_state_paths", "restore_state"]


@dataclass(frozen=True)
class StatePath:
    """One declared path: as given, absolute, and relative to the root (its parts)."""

    given: str
    path: Path
    parts: tuple[str, ...]

    @property
    def rel(self) -> str:
        return "/".join(self.parts)


def blob_name(index: int) -> str:
    """The blob name of the `index`-th declared path in a checkpoint's blobs section."""
    return f"state{index}"


def check_state_paths(given: list[str], root: Path, cwd: Path) -> list[StatePath]:
    """The declared paths, checked: each under `root`, reached through no symlink, a
    regular file, a directory, or not there yet.

    Raises:
        UnsafePathError for a path outside the root or through a symlink (or itself one);
        InvalidInputError for one that is something else (a FIFO, a device) or given twice.
    """
    root = Path(os.path.abspath(root))
    if os.path.islink(root) or not root.is_dir():
        raise InvalidInputError(f"--state-root {root} is not a directory", hint="give an existing directory (not a symlink)")
    out: list[StatePath] = []
    for item in given:
        if not item:
            raise InvalidInputError("--state '' is empty", hint="give the path of a file or directory the program writes")
        path = Path(os.path.normpath(os.path.join(cwd, item)))
        try:
            rel = path.relative_to(root)
        except ValueError:
            raise UnsafePathError(
                f"--state {item}: {path} is outside the allowed root {root}",
                hint="declare paths under the program's working directory, or widen it with --state-root DIR",
            ) from None
        parts = rel.parts
        if not parts:
            raise UnsafePathError(f"--state {item} is the allowed root {root} itself", hint="declare a file or directory inside it")
        here = root
        for i, part in enumerate(parts):
            here = here / part
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                break
            except OSError as exc:
                raise InvalidInputError(f"--state {item}: cannot read {here}: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(
                    f"--state {item}: {here} is a symlink; ckpt never follows one to or inside a declared state path",
                    hint="declare the real path",
                )
            last = i == len(parts) - 1
            if not last and not stat.S_ISDIR(st.st_mode):
                raise InvalidInputError(f"--state {item}: {here} is not a directory", hint="declare a path below directories")
            if last and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise InvalidInputError(
                    f"--state {item}: {here} is {file_kind(st.st_mode)}, neither a regular file nor a directory",
                    hint="declare the regular files or directories the program keeps its state in",
                )
        if any(p.parts[: len(parts)] == parts or parts[: len(p.parts)] == p.parts for p in out):
            raise InvalidInputError(f"--state {item} overlaps another declared path", hint="declare each file or directory once")
        out.append(StatePath(item, path, parts))
    return out


def restore_state(ck: Checkpoint, paths: list[StatePath], root: Path) -> int:
    """Put each declared path's copy in `ck` back, found by the path the checkpoint recorded
    for it (its `ext:process` section), never by position: files are written to a temporary
    name in their directory, then renamed over the old ones; a directory is made to hold
    exactly what its copy holds; a recorded path `ck` has no copy of did not exist when it
    was taken, and is removed. Returns the files written.

    Raises:
        InvalidInputError (before anything is written) when a declared path is not one the
        checkpoint recorded; UnsafePathError when a directory on the way became a symlink;
        StoreIOError, CorruptError from the store; the temporary file of a failed write is
        removed.
    """
    recorded = _recorded(ck)
    unknown = [sp.given for sp in paths if sp.rel not in recorded]
    if unknown:
        held = ", ".join(recorded) or "none"
        raise InvalidInputError(
            f"checkpoint {ck.hex[:12]} holds no copy of --state {unknown[0]} (the paths it holds: {held})",
            hint="declare the state paths the subject's checkpoints hold, or run it as a new subject",
        )
    blobs = ck.blobs()
    written = 0
    for sp in paths:
        name = recorded[sp.rel]
        entry = blobs.get(name)
        if isinstance(entry, dict):
            written += _put(ck, name, entry, root, sp.parts)
        else:
            _remove(root, sp.parts)
    return written


def _recorded(ck: Checkpoint) -> dict[str, str]:
    """Each state path `ck` recorded (relative to its root) -> the blob holding its copy."""
    try:
        view = ck.section("ext:process")
    except CkptError:
        view = None
    rels = view.get("state") if isinstance(view, dict) else None
    if not isinstance(rels, list):
        return {}
    return {rel: blob_name(i) for i, rel in enumerate(rels) if isinstance(rel, str)}


def _remove(root: Path, parts: tuple[str, ...]) -> None:
    """Remove root/parts (a file, a link, or a directory and what it holds), never following a link."""
    try:
        dfd = _open_dir(root, parts[:-1], create=False)
    except UnsafePathError:
        return  # a directory on the way is gone: so is the path
    try:
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(parts[-1], dir_fd=dfd)
        else:
            os.unlink(parts[-1], dir_fd=dfd)
    finally:
        os.close(dfd)


def _open_dir(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of root/parts..., each component opened with O_NOFOLLOW relative to the last."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise UnsafePathError(
                    f"restoring the state: {root.joinpath(*parts)} is not a directory (or is a symlink): {exc.strerror}",
                    hint="the declared state paths must stay plain directories and files",
                ) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _put(ck: Checkpoint, blob_path: str, entry: dict[str, Any], root: Path, parts: tuple[str, ...]) -> int:
    kind = entry.get("type")
    _replace_other_kind(root, parts, want_dir=kind == "dir")
    if kind == "dir":
        children = entry.get("entries")
        keep = {
            name: child
            for name, child in (children.items() if isinstance(children, dict) else ())
            if isinstance(child, dict) and isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
        }
        dfd = _open_dir(root, parts, create=True)
        try:
            # what the program made after the checkpoint (and a killed restore's temporary
            # files), and a file or directory where the checkpoint skipped a link
            gone = [name for name in os.listdir(dfd) if extra_entry(keep, name, dfd)]
        finally:
            os.close(dfd)
        for name in gone:
            _remove(root, (*parts, name))
        return sum(_put(ck, f"{blob_path}/{name}", child, root, (*parts, name)) for name, child in keep.items())
    if kind == "symlink":
        target = entry.get("target")
        if not isinstance(target, str):
            return 0
        dfd = _open_dir(root, parts[:-1], create=True)
        try:
            tmp = f".{parts[-1]}.ckpt-restore-{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            os.symlink(target, tmp, dir_fd=dfd)
            os.rename(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
        return 1
    if kind != "file":
        return 0
    dfd = _open_dir(root, parts[:-1], create=True)
    tmp = f".{parts[-1]}.ckpt-restore-{os.getpid()}"
    try:
        _sweep_temporaries(dfd, parts[-1])
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        mode = entry.get("mode")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                ck.write_blob(blob_path, f)
                f.flush()
                os.fsync(fd)
            os.fchmod(fd, (mode if isinstance(mode, int) else 0o644) & 0o777)
        finally:
            os.close(fd)
        os.rename(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    finally:
        os.close(dfd)
    return 1


def _replace_other_kind(root: Path, parts: tuple[str, ...], *, want_dir: bool) -> None:
    """Remove root/parts when it is a directory and a file is to be put there, or the other
    way round (the program changed the kind of a path since the checkpoint)."""
    try:
        dfd = _open_dir(root, parts[:-1], create=False)
    except UnsafePathError:
        return  # not there yet: made as it is put
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    finally:
        os.close(dfd)
    if stat.S_ISDIR(st.st_mode) != want_dir:
        _remove(root, parts)


def _sweep_temporaries(dfd: int, name: str) -> None:
    """Remove what a restore killed midway left beside `name` (`.NAME.ckpt-restore-PID`)."""
    prefix = f".{name}.ckpt-restore-"
    for other in os.listdir(dfd):
        if other.startswith(prefix) and other[len(prefix) :].isdigit():
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(other, dir_fd=dfd)
