"""Files and directories in the `blobs` section: capture, and restore that cannot escape.

A blob entry is a map (formats/v1.md "The blobs section")::

    {"type": "file", "size": int, "mode": int, "mtime_ns": int, "data": bytes,
     "ctime_ns": int, "ino": int}          (ctime_ns and ino: optional, to skip unchanged files)
    {"type": "dir", "mode": int, "mtime_ns": int, "entries": {name: entry, ...}}
    {"type": "symlink", "target": str}     (relative, no ".." component)

Restore checks every name and link target before writing anything, then writes
through directory file descriptors with O_NOFOLLOW, so neither a hostile name
(``../../x``, ``/etc/x``) nor a symlink planted in the target can lead outside it.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli._util.units import human_size
from ckptcli.errors import (
    CkptError,
    ConflictError,
    CorruptError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    StoreIOError,
    UnsafePathError,
)
from ckptcli.format.values import Decoder, Encoded, Encoder, LazyBytes, bytes_ev
from ckptcli.progress import NULL, Progress
from ckptcli.store.backend import TEMP_TRIES, create_temp, temp_name

#: the longest file name (bytes) a file system holds (NAME_MAX)
NAME_MAX = 255
#: set-uid, set-gid, sticky: restored only when asked for (keep_special_modes)
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def tree_size(path: Path) -> int:
    """Bytes of regular files under `path` (for a progress total)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    total = 0
    if stat.S_ISDIR(st.st_mode):
        for root, _dirs, files in os.walk(path):
            for f in files:
                try:
                    fst = os.lstat(os.path.join(root, f))
                except OSError:
                    continue
                if stat.S_ISREG(fst.st_mode):
                    total += fst.st_size
    return total


@dataclass
class CaptureReport:
    files: int = 0
    #: files not read again: unchanged since the parent checkpoint
    reused_files: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    #: files whose size or mtime changed while they were read: what was stored may be a
    #: mix of old and new content (a log still being appended to, a file being rewritten)
    changed: list[str] = field(default_factory=list)


def _reusable(parent: Any, st: os.stat_result) -> Any:
    """The parent's file data, if the file looks unchanged (same size, mtime, ctime and
    inode, as restic decides); None when it must be read."""
    if not (isinstance(parent, dict) and parent.get("type") == "file"):
        return None
    same = (
        parent.get("size") == st.st_size
        and parent.get("mtime_ns") == st.st_mtime_ns
        and parent.get("ctime_ns") == st.st_ctime_ns
        and parent.get("ino") == st.st_ino
    )
    data = parent.get("data")
    if not same or not isinstance(data, (bytes, LazyBytes)):
        return None
    return data


def capture(
    path: Path,
    encoder: Encoder,
    progress: Progress = NULL,
    report: CaptureReport | None = None,
    parent: Any = None,
) -> dict[str, Any]:
    """Read a file or directory tree into a blob entry (file data as BYTES chunk trees).

    `parent` is the same entry in the parent checkpoint (decoded with lazy bytes): a
    file whose size, mtime, ctime and inode match it is not read again, its data is
    referenced as it is (the objects are in the store already).
    """
    rep = report if report is not None else CaptureReport()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InvalidInputError(f"blob path {path} does not exist") from None
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        reused = _reusable(parent, st)
        if reused is not None:
            data: Any = Encoded(bytes_ev(reused))
            size = st.st_size
            rep.reused_files += 1
            progress.advance(size)
        else:
            try:
                with open(path, "rb") as fh:
                    ev, size = encoder.encode_stream(fh, progress.advance)
                    after = os.fstat(fh.fileno())
            except OSError as exc:
                raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
            data = Encoded(ev)
            if size != st.st_size or after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                rep.changed.append(f"{path} (changed while it was read: {st.st_size} bytes when opened, {after.st_size} after; {size} bytes stored)")
        rep.files += 1
        rep.bytes += size
        return {
            "type": "file",
            "size": size,
            "mode": stat.S_IMODE(st.st_mode),
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "data": data,
        }
    if stat.S_ISDIR(st.st_mode):
        entries: dict[str, Any] = {}
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise StoreIOError(f"cannot list {path}: {exc.strerror}") from None
        parent_entries = parent.get("entries") if isinstance(parent, dict) and parent.get("type") == "dir" else None
        for name in names:
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(f"file name {name!r} in {path} is not valid UTF-8; ckpt stores UTF-8 names") from None
            if len(name.encode()) > NAME_MAX:  # a file system that allows longer names: restore could not write it
                raise InvalidInputError(f"file name {name[:40]!r}... in {path} is longer than {NAME_MAX} bytes", hint="rename it; restore could not write it back")
            sub_parent = parent_entries.get(name) if isinstance(parent_entries, dict) else None
            entries[name] = capture(path / name, encoder, progress, rep, sub_parent)
        rep.dirs += 1
        return {"type": "dir", "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns, "entries": entries}
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if target.startswith("/") or ".." in target.split("/"):
            rep.skipped.append(f"{path} (symlink to {target}: only links that point down into the tree are kept)")
            return {"type": "skipped", "reason": f"symlink to {target!r} leaves the tree"}
        return {"type": "symlink", "target": target}
    rep.skipped.append(f"{path} (not a regular file, directory or symlink)")
    return {"type": "skipped", "reason": "not a regular file, directory or symlink"}


def check_component(name: Any, where: str) -> str:
    """A single path component that cannot climb out of its directory. Every name a
    POSIX file system can hold passes (a backslash is an ordinary character); refused
    are those no directory can hold: empty, '.', '..', '/' or NUL inside, more than 255
    bytes (NAME_MAX), not UTF-8."""
    try:
        size = len(name.encode()) if isinstance(name, str) else -1
    except UnicodeEncodeError:
        size = -1
    if not isinstance(name, str) or size < 0 or name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise UnsafePathError(
            f"{where}: unsafe path component {name!r} inside the checkpoint",
            hint="the checkpoint is hostile or damaged; nothing was written",
        )
    if size > NAME_MAX:
        raise UnsafePathError(
            f"{where}: file name {name[:40]!r}... inside the checkpoint is {size} bytes long, more than the {NAME_MAX} a file system allows",
            hint="nothing was written",
        )
    return name


def _check_link(target: Any, rel: str, where: str) -> None:
    """A symlink may only point down: relative, with no '..' component. Lexical checks of
    '..' are not enough, because other links of the same tree can make 'a/..' mean
    anything; a target that only descends stays inside whatever links it passes."""
    if not isinstance(target, str) or not target or target.startswith("/") or "\x00" in target or ".." in target.split("/"):
        raise UnsafePathError(
            f"{where}: symlink {rel} points to {target!r}; ckpt restores only links that point down into the tree",
            hint="nothing was written",
        )


def _check_meta(entry: dict[str, Any], rel: str, where: str) -> None:
    for key in ("mode", "mtime_ns"):
        value = entry.get(key, 0)
        if type(value) is not int:
            raise CorruptError(f"{where}: blob entry {rel} has a {key} that is not an integer: {value!r}")


def validate(entry: Any, rel: str, where: str) -> int:
    """Check a whole blob tree before anything is written; returns its byte size."""
    if not isinstance(entry, dict):
        raise CorruptError(f"{where}: blob entry {rel} is not a map")
    kind = entry.get("type")
    if kind == "file":
        data = entry.get("data")
        if not isinstance(data, (bytes, LazyBytes)):
            raise CorruptError(f"{where}: file {rel} has no data")
        size = data.size if isinstance(data, LazyBytes) else len(data)
        if entry.get("size") != size:
            raise CorruptError(f"{where}: file {rel} declares {entry.get('size')} bytes but holds {size}")
        _check_meta(entry, rel, where)
        return size
    if kind == "dir":
        children = entry.get("entries")
        if not isinstance(children, dict):
            raise CorruptError(f"{where}: directory {rel} has no entries")
        _check_meta(entry, rel, where)
        return sum(validate(child, f"{rel}/{check_component(name, where)}", where) for name, child in children.items())
    if kind == "symlink":
        _check_link(entry.get("target"), rel, where)
        return 0
    if kind == "skipped":
        return 0
    raise CorruptError(f"{where}: blob entry {rel} has unknown type {kind!r}")


@dataclass
class RestoreReport:
    """What restore_blobs wrote."""

    bytes: int = 0
    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    #: files and links moved out of the way (overwrite=True); removed once all is written
    replaced: int = 0
    #: files and directories whose set-uid, set-gid or sticky bits were not restored
    special_dropped: int = 0
    #: files and links written, as paths under the target ("NAME/sub/file"; with
    #: in_place, the absolute paths)
    written: list[str] = field(default_factory=list)
    #: what delete=True removed (files, links, whole directories), named as `written`
    deleted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "files": self.files,
            "dirs": self.dirs,
            "symlinks": self.symlinks,
            "replaced": self.replaced,
            "special_dropped": self.special_dropped,
            "written": self.written,
            "deleted": self.deleted,
        }


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Parts = tuple[str, ...]


def _rel(parts: _Parts, name: str) -> str:
    return "/".join((*parts, name))


def _check_conflicts(dir_fd: int, entries: dict[str, Any], parts: _Parts, overwrite: bool) -> None:
    """Raise ConflictError for the first name of the checkpoint that the existing target
    does not let restore write (before anything is written)."""
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
                _check_conflicts(fd, entry["entries"], (*parts, name), overwrite)
            finally:
                os.close(fd)
        else:
            _conflict(_rel(parts, name), st, overwrite, "; nothing was written")


def _conflict(rel: str, st: os.stat_result, overwrite: bool, outcome: str = "") -> None:
    if stat.S_ISDIR(st.st_mode):
        raise ConflictError(f"{rel} exists as a directory in the target, where the checkpoint has a file or link", hint=f"remove it first{outcome}")
    if not overwrite:
        raise ConflictError(f"{rel} already exists in the target", hint=f"pass --overwrite to replace it, or restore into an empty directory{outcome}")


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


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Writer:
    """Writes a validated blob tree, remembering enough to undo it.

    A directory this restore created ("fresh") holds only what it wrote, so its content
    is not recorded: undoing removes the directory. In a directory that was there,
    each name written is recorded, what it replaced is kept aside under a random name
    until the whole restore succeeded, and the old mode of the directory is kept.
    Files are written under a random temporary name (create_temp: O_EXCL|O_NOFOLLOW,
    never one of the checkpoint's names in that directory) and renamed into place.
    """

    def __init__(
        self,
        decoder: Decoder,
        progress: Progress,
        overwrite: bool,
        keep_special: bool,
        report: RestoreReport,
        *,
        delete: bool = False,
        include: Matcher | None = None,
    ) -> None:
        self.decoder = decoder
        self.progress = progress
        self.overwrite = overwrite
        self.keep_special = keep_special
        self.report = report
        self.delete = delete
        self.include = include
        #: per target: delete extras at its top level too (a whole blobs directory), how
        #: paths are shown in the report, and the blob name of each top-level name
        self.root_delete = False
        self.shown = ""
        self.top: dict[str, str] = {}
        #: paths below the target never written nor deleted (the store being read from)
        self.protect: set[_Parts] = set()
        self.current = ""
        self.created: list[tuple[_Parts, str]] = []
        self.aside: list[tuple[_Parts, str, str]] = []  # (directory, name kept aside, its own name)
        self.modes: list[tuple[_Parts, int]] = []  # existing directories whose mode was set

    def write_entries(self, dir_fd: int, entries: dict[str, Any], parts: _Parts, fresh: bool) -> None:
        for name, entry in entries.items():
            kind = entry["type"]
            if (*parts, name) in self.protect:
                continue
            self.current = _rel(parts, name)
            if kind == "file":
                self._file(dir_fd, name, entry, entries, parts, fresh)
                self.report.written.append(self.shown + self.current)
            elif kind == "dir":
                self._dir(dir_fd, name, entry, entries, parts, fresh)
            elif kind == "symlink":
                if not fresh:
                    self._clear(dir_fd, name, entries, parts, want_dir=False)
                os.symlink(entry["target"], name, dir_fd=dir_fd)
                if not fresh:
                    self.created.append((parts, name))
                self.report.symlinks += 1
                self.report.written.append(self.shown + self.current)
        if self.delete and not fresh and (parts or self.root_delete):
            self._delete_extras(dir_fd, entries, parts)

    def blob_path(self, rel: str) -> str:
        """`rel` (below this target) as the path NAME/sub/... under the blob's own name."""
        first, sep, rest = rel.partition("/")
        return self.top.get(first, first) + sep + rest

    def _delete_extras(self, dir_fd: int, entries: dict[str, Any], parts: _Parts) -> None:
        """Move aside what the directory holds that the checkpoint does not (delete=True):
        files, links (never followed) and whole directories; removed for good with the
        replaced files once everything is written, put back if the restore fails. With
        `include`, only what matches it goes."""
        own = {aside for p, aside, _name in self.aside if p == parts}
        for name in sorted(os.listdir(dir_fd)):
            if name in entries or name in own or (*parts, name) in self.protect:
                continue
            rel = _rel(parts, name)
            if self.include is not None and not self.include(self.blob_path(rel)):
                continue
            self.current = rel
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                aside = _dir_aside(dir_fd, name, entries)
            else:
                aside, linked = _keep_aside(dir_fd, name, entries)
                if linked:
                    os.unlink(name, dir_fd=dir_fd)
            self.aside.append((parts, aside, name))
            self.report.deleted.append(self.shown + rel)

    def _mode(self, entry: dict[str, Any], default: int) -> int:
        mode: int = entry.get("mode", default) & 0o7777
        if mode & SPECIAL_BITS and not self.keep_special:
            self.report.special_dropped += 1
            mode &= ~SPECIAL_BITS
        return mode

    def _clear(self, dir_fd: int, name: str, entries: dict[str, Any], parts: _Parts, *, want_dir: bool, keep: bool = False) -> os.stat_result | None:
        """Make room for `name` in an existing directory: returns the stat of a directory
        to merge into; None when the name is free, or holds a file or link that is now
        also kept aside (overwrite) and, unless `keep` (a file is renamed over it),
        removed from `name`."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if want_dir and stat.S_ISDIR(st.st_mode):
            return st
        _conflict(_rel(parts, name), st, self.overwrite)  # appeared since the check: restore_blobs undoes
        aside, linked = _keep_aside(dir_fd, name, entries)
        self.aside.append((parts, aside, name))
        self.report.replaced += 1
        if linked and not keep:
            os.unlink(name, dir_fd=dir_fd)
        return None

    def _dir(self, dir_fd: int, name: str, entry: dict[str, Any], entries: dict[str, Any], parts: _Parts, fresh: bool) -> None:
        st = None if fresh else self._clear(dir_fd, name, entries, parts, want_dir=True)
        if st is None:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            if not fresh:
                self.created.append((parts, name))
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            self.write_entries(fd, entry["entries"], (*parts, name), st is None)
            if st is not None:
                self.modes.append(((*parts, name), stat.S_IMODE(st.st_mode)))
            os.chmod(fd, self._mode(entry, 0o755))
        finally:
            os.close(fd)
        self.report.dirs += 1

    def _file(self, dir_fd: int, name: str, entry: dict[str, Any], entries: dict[str, Any], parts: _Parts, fresh: bool) -> None:
        tmp, fd = create_temp(dir_fd, avoid=entries)
        try:
            try:
                data = entry["data"]
                if isinstance(data, LazyBytes):
                    for piece in self.decoder.iter_bytes(data.oid):
                        _write_all(fd, piece)
                        self.progress.advance(len(piece))
                else:
                    _write_all(fd, data)
                    self.progress.advance(len(data))
                os.fchmod(fd, self._mode(entry, 0o644))
            finally:
                os.close(fd)
            if not fresh:
                self._clear(dir_fd, name, entries, parts, want_dir=False, keep=True)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if not fresh:
            self.created.append((parts, name))
        self.report.files += 1
        mtime = entry.get("mtime_ns")
        if isinstance(mtime, int):
            os.utime(name, ns=(mtime, mtime), dir_fd=dir_fd, follow_symlinks=False)

    def undo(self, root_fd: int) -> list[str]:
        """Remove what was written, put back what was replaced; returns what could not be undone."""
        left: list[str] = []
        for parts, name in reversed(self.created):
            try:
                fd = _open_dir(root_fd, parts)
                try:
                    _remove(fd, name)
                finally:
                    os.close(fd)
            except OSError as exc:
                left.append(f"{_rel(parts, name)} ({exc.strerror})")
        for parts, aside, name in reversed(self.aside):
            try:
                fd = _open_dir(root_fd, parts)
                try:
                    os.rename(aside, name, src_dir_fd=fd, dst_dir_fd=fd)
                    # both names of one file (nothing was renamed over it yet): rename
                    # does nothing, the second name goes
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(aside, dir_fd=fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                left.append(f"{_rel(parts, aside)}, the old {name} ({exc.strerror})")
        for parts, mode in reversed(self.modes):
            with contextlib.suppress(OSError):
                fd = _open_dir(root_fd, parts)
                try:
                    os.chmod(fd, mode)
                finally:
                    os.close(fd)
        return left

    def drop_aside(self, root_fd: int) -> None:
        """After success: remove what was replaced."""
        by_dir: dict[_Parts, list[str]] = {}
        for parts, aside, _name in self.aside:
            by_dir.setdefault(parts, []).append(aside)
        for parts, names in by_dir.items():
            with contextlib.suppress(OSError):
                fd = _open_dir(root_fd, parts)
                try:
                    for aside in names:
                        with contextlib.suppress(OSError):
                            _remove(fd, aside)  # a directory --delete moved aside, too
                finally:
                    os.close(fd)


#: Free space restore_blobs leaves on the target's file system: this much, or
#: FREE_SPACE_MARGIN_FRACTION of what it writes if more (file system overhead, other writers).
FREE_SPACE_MARGIN = 64 * 1024 * 1024
FREE_SPACE_MARGIN_FRACTION = 0.02


def free_space(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system of `path`, or of its
    nearest existing parent when it does not exist yet."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_free_space(target: Path, need: int) -> None:
    """LimitExceededError when writing `need` bytes under `target` would not leave the margin free."""
    try:
        free = free_space(target)
    except OSError:
        return  # unknown (e.g. no permission to stat): the writes themselves will tell
    margin = max(FREE_SPACE_MARGIN, int(need * FREE_SPACE_MARGIN_FRACTION))
    if need + margin > free:
        raise LimitExceededError(
            f"the blobs to restore hold {human_size(need)} ({need} bytes) but {target} has only {human_size(free)} free",
            hint="free some space, restore fewer blobs (--blob), or pass --force if the checkpoint is genuine",
        )


Matcher = Callable[[str], bool]


def make_matcher(patterns: list[str] | None) -> Matcher | None:
    """A test of paths NAME/sub/file (a blob's name first) against --include globs, or
    None for no patterns. A pattern without `/` matches any single name on the way (`*.py`
    every .py file, `src` every directory called src and what it holds); one with `/`
    matches the path from the blob name on (`w/src/*`; `*` matches `/` too). A path
    matches when it, or a directory it is in, matches."""
    if not patterns:
        return None
    pats = [p.strip("/") for p in patterns if p.strip("/")]

    def match(rel: str) -> bool:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            for pat in pats:
                if fnmatch.fnmatchcase(prefix if "/" in pat else parts[i - 1], pat):
                    return True
        return False

    return match


def filter_tree(entries: dict[str, Any], match: Matcher, prefix: str = "") -> dict[str, Any]:
    """The part of a validated blob tree whose paths (`prefix` + name) match; a directory
    that does not match is kept with only what matches below it."""
    out: dict[str, Any] = {}
    for name, entry in entries.items():
        rel = prefix + name
        if match(rel):
            out[name] = entry
        elif entry.get("type") == "dir":
            sub = filter_tree(entry["entries"], match, rel + "/")
            if sub:
                out[name] = {**entry, "entries": sub}
    return out


def check_origin(origin: Any, name: str, where: str) -> Path:
    """The absolute path blob `name` was taken from, as recorded (`origin`), checked: a
    normalized absolute path (no `.` or `..` component, no NUL), not the root.

    Raises:
        InvalidInputError when none was recorded (taken by ckpt 0.4 or older);
        UnsafePathError for anything else."""
    if origin is None:
        raise InvalidInputError(
            f"{where}: blob {name!r} does not record where it was taken from (taken by an older ckpt)",
            hint="restore it into a directory with --blobs DIR",
        )
    if not isinstance(origin, str) or not origin.startswith("/") or "\x00" in origin or os.path.normpath(origin) != origin or origin == "/" or origin.startswith("//"):
        raise UnsafePathError(f"{where}: blob {name!r} records an unusable origin {origin!r}", hint="the checkpoint is hostile or damaged; nothing was written")
    return Path(origin)


@dataclass
class _Target:
    """One directory restore_blobs writes into: the blobs directory, or (in place) the
    directory that held a blob."""

    path: Path
    entries: dict[str, Any]
    size: int
    root_delete: bool = False  # --delete removes extras at its top level too
    shown: str = ""  # prefix of the paths reported
    top: dict[str, str] = field(default_factory=dict)  # top-level name -> blob name
    root_fd: int = -1
    first_new: Path | None = None
    fresh: bool = False
    writer: _Writer | None = None


def restore_blobs(
    blobs: dict[str, Any],
    target: Path | None,
    decoder: Decoder,
    *,
    names: list[str] | None = None,
    overwrite: bool = False,
    keep_special_modes: bool = False,
    check_space: bool = True,
    progress: Progress = NULL,
    where: str = "checkpoint",
    report: RestoreReport | None = None,
    in_place: bool = False,
    delete: bool = False,
    include: list[str] | None = None,
    dry_run: bool = False,
    protect: list[Path] | None = None,
) -> int:
    """Write blob entries under `target` (created if missing); returns bytes written.

    All or nothing: every name and link is checked, and every conflict with what the
    target holds, before the first write; if writing fails, what this restore wrote
    is removed and what it replaced is put back, and the error says so (or names what
    could not be undone). Set-uid, set-gid and sticky bits are dropped unless
    `keep_special_modes` (counted in `report.special_dropped`). Unless not
    `check_space`, files that declare more bytes than the target's file system has free
    (less a margin) are refused (LimitExceededError) before anything is created.

    `in_place` (`target` None): each blob goes back to the path it was taken from
    (its `origin`), replacing what is there (overwrite). `delete`: what the target holds
    that the checkpoint does not is removed too (below each blob in place; in a blobs
    directory also beside the blobs, unless `names` chose some), moved aside until the
    rest is written, so a failed restore puts it back. `include`: only paths matching
    these globs (make_matcher) are written, and deleted. `dry_run`: nothing is written;
    `report.written`/`report.deleted` say what would be. Nothing at or below a path in
    `protect` (the store restored from) is written or deleted.
    """
    rep = report if report is not None else RestoreReport()
    chosen = {k: v for k, v in blobs.items() if names is None or k in names}
    for name, entry in chosen.items():
        validate(entry, check_component(name, where), where)
    match = make_matcher(include)
    if match is not None:
        for pat in include or []:
            # a pattern that matches nothing is most likely a typo: said, not a silent no-op
            one = make_matcher([pat])
            if one is None or not filter_tree(chosen, one):
                raise NotFoundError(
                    f"{where}: --include {pat!r} matches no path{' of blob ' + ', '.join(map(repr, names)) if names else ''}",
                    hint="paths are NAME/sub/file; `ckpt ls-files REF` lists them",
                )
        chosen = filter_tree(chosen, match)
    targets: list[_Target] = []
    if in_place:
        origins: dict[Path, str] = {}
        for name, entry in chosen.items():
            origin = check_origin(entry.get("origin"), name, where)
            for other, other_name in origins.items():
                if origin == other or other in origin.parents or origin in other.parents:
                    raise InvalidInputError(f"{where}: blobs {other_name!r} and {name!r} were taken from overlapping paths ({other}, {origin})", hint="restore one at a time with --blob NAME")
            origins[origin] = name
            size = validate(entry, name, where)
            targets.append(_Target(origin.parent, {origin.name: entry}, size, shown=str(origin.parent).rstrip("/") + "/", top={origin.name: name}))
        overwrite = True
    else:
        if target is None:
            raise InvalidInputError("restore_blobs needs a target directory, or in_place")
        size = sum(validate(entry, name, where) for name, entry in chosen.items())
        targets.append(_Target(target, chosen, size, root_delete=delete and names is None))
    total = sum(t.size for t in targets)
    if check_space and not dry_run:
        for t in targets:
            check_free_space(t.path, t.size)
    for t in targets:
        w = _Writer(decoder, progress, overwrite, keep_special_modes, rep, delete=delete, include=match)
        w.root_delete, w.shown, w.top = t.root_delete, t.shown, t.top
        real = Path(os.path.realpath(t.path))
        for p in protect or []:
            p = Path(os.path.realpath(p))
            if real in p.parents:
                w.protect.add(p.relative_to(real).parts)
        t.writer = w
    if dry_run:
        for t in targets:
            _plan_target(t, overwrite)
        rep.bytes = total
        return total
    progress.start("restoring blobs", total)
    try:
        for t in targets:
            _open_target(t)
            if not t.fresh:
                _check_conflicts(t.root_fd, t.entries, (), overwrite)
        for t in targets:
            assert t.writer is not None
            t.writer.write_entries(t.root_fd, t.entries, (), t.fresh)
        for t in targets:
            assert t.writer is not None
            t.writer.drop_aside(t.root_fd)
    except BaseException as exc:
        failed = next((t for t in reversed(targets) if t.writer is not None and t.writer.current), targets[-1])
        touched = [t for t in reversed(targets) if (t.writer is not None and t.writer.current) or t.first_new is not None]
        undone = "; ".join(_undo(t.writer, t.root_fd, t.first_new, t.path) for t in touched) or "nothing was written"
        fw = failed.writer
        if isinstance(exc, OSError):
            what = f"{fw.current} in {failed.path}" if fw is not None and fw.current else str(failed.path)
            raise StoreIOError(f"cannot write {what}: {exc.strerror}", hint=undone) from None
        if isinstance(exc, CkptError) and fw is not None and fw.current:
            exc.hint = f"{exc.hint}; {undone}" if exc.hint else undone
        raise
    finally:
        for t in targets:
            if t.root_fd >= 0:
                os.close(t.root_fd)
        progress.finish()
    rep.bytes = total
    return total


def _open_target(t: _Target) -> None:
    """Create the target's missing directories and open it (`t.root_fd`)."""
    # The user's own path is followed (as tar -C and restic --target do): `..` and links
    # in it mean what the file system says, so what exists is judged on the real path.
    target = t.path = Path(os.path.realpath(t.path))
    # The directories this restore creates are its own, and go again if it fails; the
    # target counts as fresh (no conflict possible) only if mkdir itself made it, so a
    # directory that appears meanwhile is still checked for conflicts.
    missing: list[Path] = []
    p = target
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            t.first_new = t.first_new or d
            t.fresh = d == target
        t.root_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreIOError(f"cannot use {target} as the restore target: {exc.strerror}") from None


def _plan_target(t: _Target, overwrite: bool) -> None:
    """What restoring `t` would write and delete (dry run): conflicts raise as they would."""
    assert t.writer is not None
    try:
        fd = os.open(os.path.realpath(t.path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        raise StoreIOError(f"cannot use {t.path} as the restore target: {exc.strerror}") from None
    try:
        if fd >= 0:
            _check_conflicts(fd, t.entries, (), overwrite)
        _plan(t.writer, fd, t.entries, ())
    finally:
        if fd >= 0:
            os.close(fd)


def _plan(w: _Writer, dir_fd: int, entries: dict[str, Any], parts: _Parts) -> None:
    rep = w.report
    for name, entry in entries.items():
        kind = entry["type"]
        if kind == "skipped" or (*parts, name) in w.protect:
            continue
        st = None
        if dir_fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if kind == "dir":
            rep.dirs += 1
            if st is not None and stat.S_ISDIR(st.st_mode):
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    _plan(w, fd, entry["entries"], (*parts, name))
                finally:
                    os.close(fd)
            else:
                _plan(w, -1, entry["entries"], (*parts, name))
            continue
        if st is not None:
            rep.replaced += 1
        if kind == "file":
            rep.files += 1
        else:
            rep.symlinks += 1
        rep.written.append(w.shown + _rel(parts, name))
    if w.delete and dir_fd >= 0 and (parts or w.root_delete):
        for name in sorted(os.listdir(dir_fd)):
            rel = _rel(parts, name)
            if name not in entries and (*parts, name) not in w.protect and (w.include is None or w.include(w.blob_path(rel))):
                rep.deleted.append(w.shown + rel)


def _undo(w: _Writer | None, root_fd: int, first_new: Path | None, target: Path) -> str:
    left = w.undo(root_fd) if w is not None and w.current else []
    if first_new is not None:
        try:
            parent_fd = os.open(first_new.parent, _DIR_FLAGS)
            try:
                _remove(parent_fd, first_new.name)
            finally:
                os.close(parent_fd)
        except OSError as exc:
            left.append(f"{first_new} ({exc.strerror})")
    if left:
        more = f" and {len(left) - 3} more" if len(left) > 3 else ""
        return f"the restore could not be undone entirely, left behind: {', '.join(left[:3])}{more}"
    if w is None or not w.current:
        return "nothing was written"
    if first_new is not None:
        return f"the restore was undone: {first_new} was removed again"
    return f"the restore was undone: {target} holds what it held before"


@dataclass
class FileInfo:
    """One entry of a blob tree, for listing (`ckpt ls-files`)."""

    path: str  # NAME/sub/file
    type: str  # file, dir, symlink, skipped
    size: int
    mode: int
    mtime_ns: int
    origin: str | None  # where it was taken from (None when the blob records no origin)
    target: str | None = None  # a symlink's

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def split_blob_path(path: str) -> list[str]:
    """NAME/sub/file as its components (leading, trailing and doubled slashes ignored)."""
    return [p for p in path.split("/") if p]


def find_entry(blobs: dict[str, Any], path: str, where: str) -> Any:
    """The entry at NAME/sub/file. Raises: NotFoundError naming what is there."""
    from ckptcli.errors import NotFoundError

    parts = split_blob_path(path)
    if not parts:
        raise NotFoundError(f"{where}: no blob path given", hint="give NAME or NAME/sub/file (`ckpt ls-files` lists them)")
    entries: Any = blobs
    entry: Any = None
    for i, part in enumerate(parts):
        if not isinstance(entries, dict) or part not in entries:
            have = ", ".join(list(entries)[:10]) if isinstance(entries, dict) else "nothing"
            at = "/".join(parts[:i]) or "the blobs section"
            raise NotFoundError(f"{where}: {'/'.join(parts[: i + 1])} does not exist (in {at}: {have or 'nothing'})", hint="`ckpt ls-files REF` lists the paths")
        entry = entries[part]
        entries = entry.get("entries") if isinstance(entry, dict) and entry.get("type") == "dir" else None
    return entry


def list_files(blobs: dict[str, Any], path: str = "", where: str = "checkpoint") -> list[FileInfo]:
    """Every entry of the blob trees (or of the one at `path`, and what is below it), in
    tree order, directories before their contents."""
    out: list[FileInfo] = []

    def add(rel: str, entry: Any, origin: str | None) -> None:
        if not isinstance(entry, dict):
            return
        kind = str(entry.get("type"))
        data = entry.get("data")
        size = entry.get("size") if isinstance(entry.get("size"), int) else (len(data) if isinstance(data, bytes) else 0)
        mode = entry.get("mode", 0)
        mtime = entry.get("mtime_ns", 0)
        target = entry.get("target")
        out.append(
            FileInfo(
                rel,
                kind,
                size if isinstance(size, int) else 0,
                mode if isinstance(mode, int) else 0,
                mtime if isinstance(mtime, int) else 0,
                origin,
                target if isinstance(target, str) else None,
            )
        )
        if kind == "dir" and isinstance(entry.get("entries"), dict):
            for name, child in entry["entries"].items():
                add(f"{rel}/{name}", child, f"{origin}/{name}" if origin else None)

    parts = split_blob_path(path)
    if parts:
        top = blobs.get(parts[0])
        origin = top.get("origin") if isinstance(top, dict) and isinstance(top.get("origin"), str) else None
        add("/".join(parts), find_entry(blobs, path, where), "/".join([origin, *parts[1:]]) if origin else None)
    else:
        for name, entry in blobs.items():
            origin = entry.get("origin") if isinstance(entry, dict) and isinstance(entry.get("origin"), str) else None
            add(str(name), entry, origin)
    return out
