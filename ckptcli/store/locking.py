"""Locks and writer marks of a local store (formats/v1.md, "Locks"): flocks on files
under locks/, each with a record of its holder so that a command that waits can say
who it waits for, and the marks of long-lived writers (`WriterMark`).

`LocalLocks` is the part of `LocalBackend` (backend.py) that takes them; a lock goes
with its process (the kernel drops a flock when its file is closed), so no lock file is
ever deleted.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import json
import math
import os
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ckptcli import notices
from ckptcli.errors import CorruptError, InvalidInputError, LockError, UnsafePathError, UsageError
from ckptcli.store.command import current_command
from ckptcli.store.layout import CACHE, INDEX, LOCKS, LOGS, MANIFESTS, PACKS, REFS, TMP, WRITERS, lock_path
from ckptcli.store.oserror import io_error

__all__ = [
    "LOCK_NOTICE_AFTER",
    "LocalLocks",
    "Mark",
    "WriterMark",
    "check_lock_wait",
    "check_no_links",
    "file_kind",
    "linked_dir_hint",
    "linked_file",
    "lock_holder",
    "no_linked_dirs",
    "no_links",
    "not_regular",
    "note_holder",
    "open_regular",
    "open_unlinked",
]

WRITERS_DIR = WRITERS


def no_links(root: Path, path: str) -> Path:
    """`root / path`, for a write (or removal) there, once no directory of `path` below
    `root` is a symbolic link: a store's directories (refs, manifests, locks, tmp, ...)
    are never links, and one planted there would lead the write out of the store. The
    file itself is not checked here: writers replace it (a rename) or open it with
    O_NOFOLLOW. A directory that does not exist yet is made by the writer.
    Raises: UnsafePathError naming the link."""
    check_no_links(os.fspath(root), path)
    return root / path


def check_no_links(root: str, path: str, *, reading: bool = False) -> str:
    """`no_links` on plain strings (no Path objects: every take calls it several times);
    returns the path joined to `root`. `reading`: the error says read, not write."""
    at = root
    for part in path.split("/")[:-1]:
        at = os.path.join(at, part)
        try:
            mode = os.lstat(at).st_mode
        except OSError:
            break  # not there (the writer makes it), or the write itself says what is wrong
        if stat.S_ISLNK(mode):
            raise UnsafePathError(
                f"{at} is a symbolic link; ckpt {'reads' if reading else 'writes'} nothing through it "
                f"(it would {'read' if reading else 'write'} outside the store)",
                hint=linked_dir_hint(root, at),
            )
    return os.path.join(root, path)


#: directories of a store that hold nothing a checkpoint needs (in-flight writes, local
#: locks, rebuildable caches): a link there, or below them, is removed, never replaced
_DISPOSABLE = (TMP, LOCKS, CACHE)


def linked_dir_hint(root: str, at: str) -> str:
    """What to do about the directory `at` of the store at `root`, a symbolic link: under
    tmp/, locks/ or cache/ nothing ckpt needs is behind it, so remove the link (ckpt
    makes the directory again); elsewhere (packs/, manifests/, refs/...) it may hold the
    store's data, so put a real directory holding it in its place."""
    first = os.path.relpath(at, root).split(os.sep)[0]
    if first in _DISPOSABLE:
        return f"nothing ckpt needs is behind it (something other than ckpt made it): remove the link (rm {at}); ckpt makes it again"
    return (
        "a store's directories are never links (something other than ckpt made it): replace it with a directory holding what it points to"
    )


def linked_file(path: str | os.PathLike[str]) -> UnsafePathError:
    """The error for a file ckpt keeps (a manifest, a pack, a lock file, a workflow's
    journal, in a store or beside it) that is a symbolic link, whatever it points to (a
    file, nothing, itself): never followed, as a linked directory of a store never is
    (`check_no_links`)."""
    return UnsafePathError(
        f"{os.fspath(path)} is a symbolic link; ckpt never follows a link to a file it keeps (it would read or write elsewhere)",
        hint="something other than ckpt made it: remove it, or put the file it points to in its place",
    )


def open_unlinked(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """os.open of a file of a store with O_NOFOLLOW: a symbolic link there is refused
    (`linked_file`, exit 8) rather than followed, or left to the system's "Too many
    levels of symbolic links". Raises: UnsafePathError, OSError (anything else)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise linked_file(path) from None
        raise


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO", "a socket"...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def not_regular(path: str | os.PathLike[str], mode: int) -> CorruptError:
    """The error for a file ckpt keeps (a journal, a lock file) that is something else than
    a regular file (a FIFO, a device, a socket, a directory): never read or written
    through, as a manifest that is no file is not (exit 5, docs/storage.md)."""
    return CorruptError(
        f"{os.fspath(path)} is {file_kind(mode)}, not a regular file; ckpt never reads or writes through it",
        hint="something other than ckpt put it there: remove it",
    )


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o644, *, follow: bool = False) -> int:
    """`open_unlinked` of a file that must be a regular one (a journal, a lock file): a
    symbolic link is refused (`linked_file`, exit 8), and so is anything else than a
    regular file (`not_regular`, exit 5), judged on the descriptor opened (fstat), never
    on a look before the open, which a file planted in between would pass. Opened with
    O_NONBLOCK, which changes nothing for a regular file: a FIFO planted there is never
    waited on (an open for reading or appending would block until a writer or reader
    came). `follow`: a link the user named is followed (to a regular file only).
    Raises: UnsafePathError, CorruptError, OSError (anything else)."""
    try:
        if follow:
            fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
        else:
            fd = open_unlinked(path, flags | os.O_NONBLOCK, mode)
    except OSError as exc:
        # a FIFO without a reader, or a socket, opened to write: ENXIO; a directory: EISDIR
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError:
            raise exc from None
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode) from None
        raise
    try:
        st_mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st_mode):
        os.close(fd)
        raise not_regular(path, st_mode)
    return fd


def check_lock_wait(seconds: float, option: str = "--lock-wait") -> float:
    """`seconds` as given to `option` (how long a command waits for the store lock), once
    it is a number of seconds, 0 or more (`inf`: as long as it takes); nan, which waited
    forever, and a negative number, which was taken as 0, are refused.
    Raises: UsageError naming the option (exit 2)."""
    if math.isnan(seconds) or seconds < 0:
        raise UsageError(
            f"{option} {seconds}: not a number of seconds of 0 or more",
            hint=f"give how long to wait for the store lock, e.g. {option} 300 (0: do not wait)",
        )
    return seconds


def waitable(seconds: float) -> None:
    """A library caller's lock wait (API: `prune(lock_wait=...)`): 0 or more (`inf`: as
    long as it takes); not nan, which would wait forever whatever was meant.
    Raises: InvalidInputError (exit 4)."""
    if math.isnan(seconds) or seconds < 0:
        raise InvalidInputError(f"a lock wait of {seconds} s: not a number of seconds of 0 or more", hint="give 0 or more (0: do not wait)")


def no_linked_dirs(root: Path) -> None:
    """Refuse a store (UnsafePathError, as `no_links`) where one of the directories of its
    layout, or a lock file in locks/, is a symbolic link: checked as a writer takes the
    store lock, before it writes anything (each write checks its own path as well, and
    each lock its file: a take that met a linked refs.lock only as it moved the ref had
    committed its checkpoint already)."""
    top = os.fspath(root)
    for directory in (PACKS, INDEX, MANIFESTS, REFS, LOGS, LOCKS, TMP, CACHE):
        check_no_links(top, f"{directory}/x")
    try:
        with os.scandir(os.path.join(top, LOCKS)) as entries:
            linked = sorted(e.name for e in entries if e.is_symlink())
    except OSError:
        return  # no locks/ yet (the lock makes it), or the lock itself says what is wrong
    if linked:
        raise linked_file(os.path.join(top, LOCKS, linked[0]))


class Mark(Protocol):
    """A long-lived writer's mark (`Backend.mark_writer`): a WriterMark here, a lock
    object on object storage (ckptcli.store.remote)."""

    name: str

    def close(self) -> None: ...


class WriterMark:
    """A long-lived writer's mark in the store (`Backend.mark_writer`): a file in
    ``locks/writers/`` it holds a shared flock on for as long as it lives. A writer that
    lives across commits remembers which objects the store has and writes a new
    checkpoint that names them without writing them again; so while another writer is
    alive, a removal of checkpoints leaves their objects (`ckptcli.store.prune`)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.name = path.name
        self._fd = fd

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)


class LocalLocks:
    """The locks of `LocalBackend`: `lock`, `reading_lock`, `lock_state`, `mark_writer`
    and `live_writers` (their contracts: `Backend`)."""

    root: Path

    if TYPE_CHECKING:  # provided by LocalBackend

        def _p(self, path: str) -> Path: ...

    @contextlib.contextmanager
    def reading_lock(self, name: str, *, wait: float = 300.0) -> Iterator[None]:
        try:
            fd = open_unlinked(self._p(lock_path(name)), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            yield  # no lock file (no writer ever) or none to open: nothing to wait for
            return
        try:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockError(
                            f"the store at {self.root} is locked ({name}) by another ckpt process",
                            hint="wait for it to finish and try again",
                        ) from None
                    time.sleep(0.01)
                except OSError:
                    break  # a lock that cannot be taken here (not a regular file): read without it
            yield
        finally:
            os.close(fd)

    def lock_state(self, name: str) -> tuple[str, str | None]:
        path = self._p(lock_path(name))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return "free", None  # never taken
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(path):
                return "linked", os.fspath(path)  # every command that takes it is refused
            return "unknown", None
        try:
            # shared refused: an exclusive holder; then exclusive refused: shared holders
            for mode, held in ((fcntl.LOCK_SH, "exclusive"), (fcntl.LOCK_EX, "shared")):
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                except BlockingIOError:
                    return held, lock_holder(fd)
                except OSError:
                    return "unknown", None
                fcntl.flock(fd, fcntl.LOCK_UN)
            return "free", None
        finally:
            os.close(fd)

    def mark_writer(self, kind: str) -> WriterMark:
        d = no_links(self.root, f"{WRITERS_DIR}/x").parent
        try:
            os.makedirs(d, exist_ok=True)
            path = d / f"{kind}-{os.getpid()}-{secrets.token_hex(8)}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise io_error(exc, "mark a writer in", d) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError as exc:
            os.close(fd)
            raise io_error(exc, "lock", path) from None
        return WriterMark(path, fd)

    def live_writers(self, exclude: Mark | None = None) -> builtins.list[str]:
        d = self._p(WRITERS_DIR)
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise io_error(exc, "list", d) from None
        live = []
        for name in names:
            if exclude is not None and name == exclude.name:
                continue
            try:
                fd = os.open(d / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                live.append(name)  # not a mark it can look at (a planted link...): counted, to be safe
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                live.append(name)  # held: its writer is alive
            else:
                with contextlib.suppress(OSError):
                    os.unlink(no_links(self.root, f"{WRITERS_DIR}/{name}"))  # its writer died without closing it
            finally:
                os.close(fd)
        return live

    @contextlib.contextmanager
    def lock(self, name: str, *, shared: bool, wait: float = 30.0) -> Iterator[None]:
        waitable(wait)
        if name == "store":  # every writer holds it: refused before anything is written
            no_linked_dirs(self.root)
        path = check_no_links(os.fspath(self.root), lock_path(name))
        try:
            fd = open_unlinked(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise io_error(exc, "open the lock", path) from None
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            start = time.monotonic()
            deadline = start + wait
            told = False
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now >= deadline:
                        raise LockError(
                            f"the store at {self.root} is locked ({name}) by {lock_holder(fd) or 'another ckpt process'}",
                            hint="wait for it to finish and try again",
                        ) from None
                    if not told and now - start >= LOCK_NOTICE_AFTER:
                        told = True
                        holder = lock_holder(fd) or "another ckpt process"
                        notices.info(f"waiting for the store lock ({name}) held by {holder}; up to {wait:.0f} s")
                    time.sleep(0.01)
            note_holder(fd, shared)
            yield
        finally:
            os.close(fd)  # closing releases the flock


LOCK_NOTICE_AFTER = 0.5  # seconds a command waits for a lock before it says who holds it
_HOLDER_SIZE = 512  # bytes of the holder record at the start of a lock file


def note_holder(fd: int, shared: bool) -> None:
    """Write who holds the lock into the lock file (one pwrite; formats/v1.md, "Locks"):
    a command that has to wait names the holder. Shared holders overwrite each other's
    record: it names one of them. A hint only: never synced, never a reason to fail."""
    record = json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since_ns": time.time_ns(),
            "mode": "shared" if shared else "exclusive",
            "command": _command_line(),
        },
        separators=(",", ":"),
    ).encode()[: _HOLDER_SIZE - 1]
    with contextlib.suppress(OSError):
        os.pwrite(fd, record.ljust(_HOLDER_SIZE - 1) + b"\n", 0)


def _command_line() -> str:
    return current_command()[:200]


def lock_holder(fd: int) -> str | None:
    """Who holds the lock, from its record (note_holder): "ckpt prune (pid 4242 on
    host h, since 21:50:01 UTC)", or None when the record is missing or names a
    process of this host that is gone."""
    try:
        d = json.loads(os.pread(fd, _HOLDER_SIZE, 0).decode().strip())
        pid, host, since = int(d["pid"]), str(d["host"]), int(d["since_ns"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
    when = time.strftime("%H:%M:%S UTC", time.gmtime(since / 1e9))
    command = str(d.get("command") or "")
    return f"{command + ' ' if command else ''}(pid {pid} on host {host}, since {when})"
