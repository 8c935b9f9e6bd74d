"""Restoring the `blobs` section's files and directories so that they cannot escape the
target. The tree's format, capture and checks: ckptcli.blobtree.

Restore checks every name and link target before writing anything, then writes
through directory file descriptors with O_NOFOLLOW, so neither a hostile name
(``../../x``, ``/etc/x``) nor a symlink planted in the target can lead outside it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli._util.threads import executor
from ckptcli._util.units import human_size
from ckptcli.blobfs import _DIR_FLAGS, _check_conflicts, _conflict, _dir_aside, _keep_aside, _open_dir, _Parts, _rel, _remove
from ckptcli.blobtree import (
    NAME_MAX,
    CaptureReport,
    FileInfo,
    Matcher,
    capture,
    check_component,
    check_origin,
    filter_tree,
    find_entry,
    holds_files,
    list_files,
    make_matcher,
    split_blob_path,
    tree_size,
    validate,
)
from ckptcli.errors import (
    CkptError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    StoreIOError,
)
from ckptcli.format.values import Decoder, LazyBytes
from ckptcli.progress import NULL, Progress
from ckptcli.store.backend import create_temp, syncfs

# the tree's names stay importable from here (ckptcli.blobs held them all before 0.3)
__all__ = [
    "FREE_SPACE_MARGIN",
    "FREE_SPACE_MARGIN_FRACTION",
    "NAME_MAX",
    "SPECIAL_BITS",
    "CaptureReport",
    "FileInfo",
    "Matcher",
    "RestoreReport",
    "capture",
    "check_component",
    "check_free_space",
    "check_origin",
    "filter_tree",
    "find_entry",
    "free_space",
    "list_files",
    "make_matcher",
    "restore_blobs",
    "split_blob_path",
    "tree_size",
    "validate",
]

#: set-uid, set-gid, sticky: restored only when asked for (keep_special_modes)
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


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


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: files whose content is written at once, each fed from a thread of its own
#: (FILE_WRITERS threads): a large file's pieces are read, decompressed, checked and
#: written on the chunk pool (Decoder.write_into), and the next file's pieces are queued
#: there while the last of this one's are written, so the pool never waits between files
FILE_WRITERS = 2
#: files smaller than this are written on the walking thread (a hand-off costs more)
SMALL_FILE = 1024 * 1024


class _AbandonedError(Exception):
    """A writer thread's file is no longer wanted (the restore failed elsewhere)."""


@dataclass
class _Pending:
    """A file whose content is being written on a writer thread; the rest (mode, rename
    into place, mtime) is done by `_Writer.settle` on the walking thread, in order."""

    future: Future[None]
    dir_fd: int
    tmp: str
    fd: int
    finish: Callable[[], None]


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
        #: every file written and every directory written into, for durable=True where
        #: there is no syncfs: (directory, name), name "" for the directory itself
        self.to_sync: list[tuple[_Parts, str]] = []
        #: files being written on writer threads, oldest first (settled before their
        #: directory's descriptor is closed)
        self.pending: collections.deque[_Pending] = collections.deque()
        #: the temporary file being made, from before it exists until a pending entry or
        #: its rename takes it over: abandon removes it (an interrupt may land in between)
        self.making: list[tuple[int, str]] = []
        self._progress_lock = threading.Lock()
        self._stop = threading.Event()  # set by abandon: writer threads stop at the next piece

    def _advance(self, n: int) -> None:
        with self._progress_lock:  # writer threads report too; a caller's Progress need not be thread-safe
            self.progress.advance(n)

    def _content(self, fd: int, data: Any) -> None:
        """Write a file's content (on any thread)."""
        if isinstance(data, LazyBytes):

            def advance(n: int) -> None:
                if self._stop.is_set():
                    raise _AbandonedError
                self._advance(n)

            # checked pieces are written by the pool threads that checked them (pwrite)
            self.decoder.write_into(data.oid, fd, advance=advance)
        else:
            _write_all(fd, data)
            self._advance(len(data))

    def settle(self, keep: int = 0) -> None:
        """Finish the oldest pending files until `keep` remain: wait for the content, then
        mode, rename and mtime, in the order the files were started."""
        while len(self.pending) > keep:
            p = self.pending[0]
            try:
                p.future.result()
            except BaseException:
                self.abandon()
                raise
            self.pending.popleft()
            p.finish()

    def abandon(self) -> None:
        """After a failure: wait for every pending file's writer, close and remove its
        temporary file (nothing of it was renamed into place yet)."""
        if self.pending:
            self._stop.set()
        while self.pending:
            p = self.pending.popleft()
            p.future.cancel()
            with contextlib.suppress(BaseException):
                p.future.exception()
            with contextlib.suppress(OSError):
                os.close(p.fd)
            with contextlib.suppress(OSError):
                os.unlink(p.tmp, dir_fd=p.dir_fd)
        for dir_fd, name in self.making:  # gone already when its rename ran
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
        self.making.clear()

    def _note_temp(self, dir_fd: int, name: str) -> None:
        self.making[:] = [(dir_fd, name)] if name else []  # "": that name was another's, not made

    def write_entries(self, dir_fd: int, entries: dict[str, Any], parts: _Parts, fresh: bool) -> None:
        """Write `entries` into the directory `dir_fd`; every file of it is settled
        (complete, in place) when this returns, before the caller closes `dir_fd`."""
        try:
            self._write_entries(dir_fd, entries, parts, fresh)
            self.settle()
        except BaseException:
            self.abandon()  # while every directory of a pending file is still open
            raise

    def _write_entries(self, dir_fd: int, entries: dict[str, Any], parts: _Parts, fresh: bool) -> None:
        self.to_sync.append((parts, ""))
        for name, entry in entries.items():
            kind = entry["type"]
            if (*parts, name) in self.protect:
                continue
            self.current = rel = _rel(parts, name)
            if kind == "file":
                self._file(dir_fd, name, entry, entries, parts, fresh)
                self.report.written.append(self.shown + rel)
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
            self.settle()  # the temporary files of files still being written are not extras
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
            if name in own or (*parts, name) in self.protect or not extra_entry(entries, name, dir_fd):
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

    def _clear(
        self, dir_fd: int, name: str, entries: dict[str, Any], parts: _Parts, *, want_dir: bool, keep: bool = False
    ) -> os.stat_result | None:
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
        _conflict(_rel(parts, name), st, self.overwrite, delete=self.delete)  # appeared since the check: restore_blobs undoes
        if stat.S_ISDIR(st.st_mode):  # (delete) a directory where the checkpoint has a file or link
            self.aside.append((parts, _dir_aside(dir_fd, name, entries), name))
            self.report.deleted.append(self.shown + _rel(parts, name))
            return None
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
        data = entry["data"]
        current = self.current
        big = isinstance(data, LazyBytes) and int(entry.get("size", 0)) >= SMALL_FILE
        if big:
            self.settle(keep=FILE_WRITERS - 1)  # before this file's temporary exists
            self.current = current
        self.making.clear()
        tmp, fd = create_temp(dir_fd, avoid=entries, on_name=lambda n: self._note_temp(dir_fd, n))

        def finish() -> None:
            self.current = current
            self._place(dir_fd, name, tmp, fd, entry, entries, parts, fresh)

        if big:
            # its content on a writer thread, while the walk goes on to the next file
            try:
                future = executor("ckpt-restore", FILE_WRITERS).submit(self._content, fd, data)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            self.pending.append(_Pending(future, dir_fd, tmp, fd, finish))
            self.making.clear()
            return
        try:
            self._content(fd, data)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        finish()
        self.making.clear()

    def _place(
        self, dir_fd: int, name: str, tmp: str, fd: int, entry: dict[str, Any], entries: dict[str, Any], parts: _Parts, fresh: bool
    ) -> None:
        """The content of `tmp` (open as `fd`) is written: its mode, then renamed to `name`."""
        try:
            try:
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
        self.to_sync.append((parts, name))
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

    def sync(self, root_fd: int, path: Path, done: set[int]) -> None:
        """Make what was written durable: one syncfs(2) of the target's file system (once
        per file system: `done` holds the devices synced), else an fsync of each file
        written and each directory written into. Raises OSError."""
        dev = os.fstat(root_fd).st_dev
        if dev in done:
            return
        if syncfs(path):
            done.add(dev)
            return
        for parts, name in self.to_sync:
            fd = _open_dir(root_fd, parts)
            try:
                if not name:
                    os.fsync(fd)
                    continue
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
                try:
                    os.fsync(ffd)
                finally:
                    os.close(ffd)
            finally:
                os.close(fd)

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
    """LimitExceededError when writing `need` bytes under `target` would not leave the
    margin free; StoreIOError, naming the operating system's error, when `target` cannot
    be made there at all (a file system such as /proc reports 0 bytes free: the space is
    not what is wrong)."""
    try:
        free = free_space(target)
    except OSError:
        return  # unknown (e.g. no permission to stat): the writes themselves will tell
    margin = max(FREE_SPACE_MARGIN, int(need * FREE_SPACE_MARGIN_FRACTION))
    if need + margin > free:
        # before blaming the space: can the target be made there? Its first missing
        # directory is made and removed again (restore would make it anyway), nothing else
        real = Path(os.path.realpath(target))
        first, parent = None, real
        while not os.path.lexists(parent) and parent != parent.parent:
            first, parent = parent, parent.parent
        if first is None and not real.is_dir():
            raise StoreIOError(f"cannot restore into {target}: it is not a directory", hint="give a directory, or a path to create")
        if first is not None:
            try:
                os.mkdir(first)
            except FileExistsError:
                pass  # made meanwhile
            except OSError as exc:
                raise StoreIOError(
                    f"cannot create the directory {first} to restore into: {exc.strerror or exc}",
                    hint="give a directory on a file system you can write to",
                ) from None
            else:
                with contextlib.suppress(OSError):
                    os.rmdir(first)
        raise LimitExceededError(
            f"the blobs to restore hold {human_size(need)} ({need} bytes) but {target} has only {human_size(free)} free",
            hint="free some space, restore fewer blobs (--blob), or pass --force if the checkpoint is genuine",
        )


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
    durable: bool = False,
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
    `protect` (the store restored from) is written or deleted. `delete` when what was
    chosen (`names`, cut down to `include`) holds no file or link is refused
    (InvalidInputError, nothing written): it would only empty what it names.

    Durability (docs/design.md, "Restore: what it promises"): by default the files are
    in the page cache when this returns, as after `tar -x` or `restic restore`: another
    process, or this one after a crash of its own, sees all of them, but a power cut or
    kernel crash soon after may lose some. `durable`: before returning, and before what
    was replaced or deleted is dropped, everything written is on disk: one syncfs(2) of
    each target's file system (Linux), else an fsync of every file written and every
    directory written into.
    """
    rep = report if report is not None else RestoreReport()
    chosen, match = _choose(blobs, names, include, where)
    if delete and not holds_files(chosen):
        _refuse_delete_of_nothing(blobs, chosen, names, include, target, where)
    if in_place:
        targets = _in_place_targets(chosen, where)
        overwrite = True
    else:
        if target is None:
            raise InvalidInputError("restore_blobs needs a target directory, or in_place")
        size = sum(validate(entry, name, where) for name, entry in chosen.items())
        targets = [_Target(target, chosen, size, root_delete=delete and names is None)]
    total = sum(t.size for t in targets)
    if check_space and not dry_run:
        for t in targets:
            check_free_space(t.path, t.size)
    for t in targets:
        t.writer = _Writer(decoder, progress, overwrite, keep_special_modes, rep, delete=delete, include=match)
        _set_up_writer(t, t.writer, protect)
    if dry_run:
        for t in targets:
            _plan_target(t, overwrite)
        rep.bytes = total
        return total
    progress.start("restoring blobs", total)
    try:
        _write_targets(targets, overwrite, durable)
    except BaseException as exc:
        _undo_failed(targets, exc)
        raise
    finally:
        for t in targets:
            if t.root_fd >= 0:
                os.close(t.root_fd)
        progress.finish()
    rep.bytes = total
    return total


def _write_targets(targets: list[_Target], overwrite: bool, durable: bool = False) -> None:
    """Open every target and check it for conflicts, then write them all, then (durable)
    sync them, then drop what was kept aside (all targets are checked before the first
    is written)."""
    for t in targets:
        _open_target(t)
        if not t.fresh:
            _check_conflicts(t.root_fd, t.entries, (), overwrite, t.writer is not None and t.writer.delete)
    for t in targets:
        assert t.writer is not None
        t.writer.write_entries(t.root_fd, t.entries, (), t.fresh)
    if durable:
        synced: set[int] = set()
        for t in targets:
            assert t.writer is not None
            t.writer.sync(t.root_fd, t.path, synced)
    for t in targets:
        assert t.writer is not None
        t.writer.drop_aside(t.root_fd)


def _undo_failed(targets: list[_Target], exc: BaseException) -> None:
    """Undo what the failed restore wrote; raise StoreIOError for an OSError, else add
    what was undone to the hint of a CkptError raised while writing (the caller re-raises)."""
    failed = next((t for t in reversed(targets) if t.writer is not None and t.writer.current), targets[-1])
    touched = [t for t in reversed(targets) if (t.writer is not None and t.writer.current) or t.first_new is not None]
    # in place, a target is the directory that held one blob: its path is what was restored
    undone = "; ".join(_undo(t.writer, t.root_fd, t.first_new, t.path / next(iter(t.top)) if len(t.top) == 1 else t.path) for t in touched)
    undone = undone or "nothing was written"
    fw = failed.writer
    if isinstance(exc, OSError):
        what = f"{fw.current} in {failed.path}" if fw is not None and fw.current else str(failed.path)
        raise StoreIOError(f"cannot write {what}: {exc.strerror}", hint=undone) from None
    if isinstance(exc, CkptError) and fw is not None and fw.current:
        exc.hint = f"{exc.hint}; {undone}" if exc.hint else undone


def _choose(blobs: dict[str, Any], names: list[str] | None, include: list[str] | None, where: str) -> tuple[dict[str, Any], Matcher | None]:
    """The blobs to restore (all, or `names`), validated, and cut down to the paths that
    match `include`; returns them and the matcher (None without patterns)."""
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
    return chosen, match


def _refuse_delete_of_nothing(
    blobs: dict[str, Any], chosen: dict[str, Any], names: list[str] | None, include: list[str] | None, target: Path | None, where: str
) -> None:
    """Refuse --delete when what was chosen (the blobs `names`, cut down to `include`)
    holds no file: --delete removes what the selection does not hold, which is then
    everything below the directories it names, and it is never what was meant (in place,
    there may be nothing to put back). Raises InvalidInputError saying which choice
    holds nothing."""
    named = f"blob{'s' if names and len(names) > 1 else ''} {', '.join(map(repr, names or []))}"
    if include:
        of = f" of {named}" if names else ""
        patterns = " ".join(map(repr, include))
        what = f"{where}: the paths --include {patterns} selects{of} hold no files (only directories, or what the take skipped)"
        hint = "include paths that hold files (`ckpt ls-files REF` lists them), or restore without --delete"
    elif names:
        held = "holds no files (no file or link in it)" if len(names) == 1 else "hold no files (no file or link in them)"
        what = f"{where}: {named} {held}"
        hint = "choose a blob that holds files with --blob (`ckpt ls-files REF` lists them), or restore without --delete"
    else:
        why = "it was taken without --blob" if not blobs else "its blobs are empty: no file or link in them"
        what = f"{where} holds no files ({why})"
        hint = "pick a checkpoint that holds files (`ckpt ls-files REF` lists them), or restore without --delete"
    if not chosen and target is None:
        wrong = "--in-place --delete has nothing to restore and nowhere to delete from"
    elif target is None or names or include:
        wrong = "--delete would only empty the directories it restores"
    else:
        wrong = f"--delete would remove everything in {target}"
    raise InvalidInputError(f"{what}: {wrong}; nothing was restored or deleted", hint=hint)


def _in_place_targets(chosen: dict[str, Any], where: str) -> list[_Target]:
    """One target per blob restored in place: the directory that held it (its origin's
    parent). Raises InvalidInputError when two blobs were taken from overlapping paths."""
    targets: list[_Target] = []
    origins: dict[Path, str] = {}
    for name, entry in chosen.items():
        origin = check_origin(entry.get("origin"), name, where)
        for other, other_name in origins.items():
            if origin == other or other in origin.parents or origin in other.parents:
                raise InvalidInputError(
                    f"{where}: blobs {other_name!r} and {name!r} were taken from overlapping paths ({other}, {origin})",
                    hint="restore one at a time with --blob NAME",
                )
        origins[origin] = name
        size = validate(entry, name, where)
        targets.append(
            _Target(origin.parent, {origin.name: entry}, size, shown=str(origin.parent).rstrip("/") + "/", top={origin.name: name})
        )
    return targets


def _set_up_writer(t: _Target, w: _Writer, protect: list[Path] | None) -> None:
    """Give `t`'s writer what it reports and what it must not touch (`protect` below it)."""
    w.root_delete, w.shown, w.top = t.root_delete, t.shown, t.top
    real = Path(os.path.realpath(t.path))
    for p in protect or []:
        p = Path(os.path.realpath(p))
        if real in p.parents:
            w.protect.add(p.relative_to(real).parts)


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


def extra_entry(entries: dict[str, Any], name: str, dir_fd: int) -> bool:
    """Whether `name`, in the directory `dir_fd` whose checkpoint entries are `entries`, is
    not the checkpoint's (a restore with delete removes it): not among the entries, or an
    entry the take skipped (a link leaving the tree, a FIFO, a device) that is now a
    regular file or a directory. That one was written after the checkpoint, which would
    have stored it, so it is not what was skipped; a link or special file there now is
    left as it is: it may be the one skipped."""
    entry = entries.get(name)
    if entry is None:
        return True
    if entry.get("type") != "skipped":
        return False
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)


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
            _check_conflicts(fd, t.entries, (), overwrite, t.writer.delete)
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
        if st is not None and stat.S_ISDIR(st.st_mode):  # (delete: else a conflict) it goes
            rep.deleted.append(w.shown + _rel(parts, name))
        elif st is not None:
            rep.replaced += 1
        if kind == "file":
            rep.files += 1
        else:
            rep.symlinks += 1
        rep.written.append(w.shown + _rel(parts, name))
    if w.delete and dir_fd >= 0 and (parts or w.root_delete):
        for name in sorted(os.listdir(dir_fd)):
            rel = _rel(parts, name)
            if (
                (*parts, name) not in w.protect
                and (w.include is None or w.include(w.blob_path(rel)))
                and extra_entry(entries, name, dir_fd)
            ):
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
