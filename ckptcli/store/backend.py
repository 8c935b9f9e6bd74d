"""Where a store's files live. The layout (formats/v1.md "Store layout") is the same
on every backend; a backend only moves bytes.

The local backend writes every file as temp file + fsync + rename + directory
fsync, so a crash at any instant leaves either the old file or the new one.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import re
import secrets
import stat
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import Path
from typing import IO

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, NotFoundError, StoreIOError, UnsafePathError
from ckptcli.store import dirwalk
from ckptcli.store.layout import CACHE, JOURNAL_DIR, LOCKS, MAX_PATH_DEPTH, PACK_TARGET_MAX, STORE_DIRS, TMP, path_depth, versioned_cap
from ckptcli.store.locking import LOCK_NOTICE_AFTER as LOCK_NOTICE_AFTER  # 0.2 names here, kept for one minor release
from ckptcli.store.locking import WRITERS_DIR as WRITERS_DIR
from ckptcli.store.locking import LocalLocks, check_no_links, file_kind, linked_dir_hint, linked_file, no_links, open_unlinked
from ckptcli.store.locking import Mark as Mark
from ckptcli.store.locking import WriterMark as WriterMark
from ckptcli.store.locking import lock_holder as lock_holder
from ckptcli.store.locking import note_holder as note_holder
from ckptcli.store.oserror import io_error as io_error


def too_large(where: str, cap: int, path: str = "") -> CorruptError:
    """A file read whole (a record file, a reflog, a pack: `layout.versioned_cap`) that is
    larger than ckpt ever writes it: damaged or planted, refused before it is read into
    memory. `path`: its store path, which chooses the hint (what repairs that kind of
    file; never the command that is reading it, such as `ckpt verify`)."""
    return CorruptError(
        f"{where}: larger than {cap} bytes, more than ckpt writes in such a file (damaged, or put there by something else)",
        hint=oversized_hint(path),
    )


def oversized_hint(path: str) -> str:
    """What to do about the oversized store file at `path` (too_large)."""
    if path.startswith("refs/latest/"):
        return "`ckpt repair refs` replaces it"
    if path.startswith(("refs/tags/", "refs/branches/")):
        kind, _, name = path[len("refs/") :].partition("/")
        verb = "tag" if kind == "tags" else "branch"
        return f"delete it (`ckpt {verb} -d {name}`) and set it again"
    if path.startswith("logs/"):
        return "remove that file (a reflog is history only: nothing else needs it)"
    if path.startswith("packs/"):
        return "move that file out of the store (ckpt writes no pack that large), then run `ckpt repair index`"
    if path.startswith("index/"):
        return "`ckpt repair index` rebuilds the index from the packs"
    if path.startswith("cache/"):
        return "remove that file (a cache, rebuilt when needed)"
    if path == "config":
        return "restore the store's config file from a backup or a copy of the store"
    return "remove that file if nothing else needs it"


def output_error(exc: OSError, shown: str, path: Path | None = None) -> StoreIOError:
    """A file the user named (-o) could not be written: the system's reason, and what to
    do about `path` (None: a device or pipe written through, the reason alone)."""
    if path is None:  # a device or pipe written through: the system's reason, and the way out
        return StoreIOError(f"cannot write {shown}: {exc.strerror or exc}", hint="write to a file instead (-o FILE)")
    where = str(path.parent)
    if exc.errno == errno.ENOENT:
        hint = f"create the directory {where} first, or give another path"
    elif exc.errno == errno.ENOTDIR:
        hint = "a part of the path is a file, not a directory: give another path"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"write somewhere you may write, or check the permissions of {where}"
    elif exc.errno == errno.ENOSPC:
        hint = "free some disk space and try again"
    else:
        hint = "give another path"
    return StoreIOError(f"cannot write {shown}: {exc.strerror or exc}", hint=hint)


class Backend(ABC):
    """Moves bytes for a store. Paths are '/'-separated and relative to the store root."""

    #: finished packs committed at once (commit_temp from several threads): 1 on a local
    #: disk, where the order of fsyncs matters more than overlap; more for uploads
    commit_threads: int = 1
    #: whether refs and their reflogs move by compare-and-swap (read_versioned, then
    #: write_if_match) instead of under the store's "refs" lock: where the backend's
    #: conditional writes are atomic against every other writer
    ref_cas: bool = False
    #: requests a reader of many files keeps in flight: 0 on a local disk (reads are
    #: CPU-bound there, one thread per core); more where each read waits on the network
    fetch_threads: int = 0
    #: a pack being written is finished once it holds this many bytes: large on a local
    #: disk (fewer files); smaller on object storage, where a reader's ranged GETs cost
    #: per request and some servers read the whole object for each
    pack_target: int = PACK_TARGET_MAX
    #: whether `start_writeback` does anything (a local disk): pack writers then call it
    starts_writeback: bool = False

    @abstractmethod
    def read(self, path: str) -> bytes:
        """Args: path. Returns: the file's bytes. Raises: NotFoundError, StoreIOError."""

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Args: path, offset, length. Returns: up to `length` bytes. Raises: NotFoundError, StoreIOError."""

    def read_view(self, path: str) -> bytes | memoryview:
        """Args: path. Returns: the file's bytes, possibly as a read-only view of a
        buffer the backend received them into (no copy), for a caller that only slices
        and hashes them (`ckpt verify --read-data` reading whole packs). Raises: as `read`."""
        return self.read(path)

    def check_bucket(self) -> None:  # noqa: B027 - a directory has no bucket
        """Asked when the store's config is missing: raises NoBucketError when the URL's
        bucket (or container) does not exist (ObjectBackend.check_bucket); nothing here."""

    def start_writeback(self, handle: IO[bytes], offset: int, length: int) -> None:
        """Args: a handle from `open_temp`, a range of it written already. A hint: a
        local disk starts writing that range back now (not waiting for it), so that the
        fsync of `commit_temp` finds less to write; durability is still that fsync's.
        Elsewhere (a temporary file to upload from) it does nothing. Raises nothing."""
        return

    def prefetch(self, path: str, offset: int, length: int) -> None:
        """Args: path, offset, length: a range `read_range` will be asked for soon.
        A hint: a backend whose reads cost a request each starts fetching it now;
        a local disk does nothing. Raises nothing (the read itself reports failures)."""
        return

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Args: path, data. Writes the whole file durably or not at all. Raises: StoreIOError."""

    def write_atomic_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Args: (path, data) pairs. Each file is written as by write_atomic: after a
        crash it is there whole or not at all. A backend may make them durable together
        (fewer syncs than one write_atomic each). Raises: StoreIOError."""
        for path, data in items:
            self.write_atomic(path, data)

    def write_hint(self, path: str, data: bytes) -> None:
        """Args: path, data. Writes a cache file whole or not at all, without making it
        durable: it must survive the writer being killed, not a power cut. Backends
        without a cheaper way write it as write_atomic does. Raises: StoreIOError."""
        self.write_atomic(path, data)

    def append(self, path: str, data: bytes) -> None:
        """Args: path, data (lines, ending with a newline). Appends `data` to the file
        (created if missing) durably; a crash may leave a prefix of `data` at the end,
        never damage what was there. What follows the file's last newline (an append cut
        short) is cut off first. The caller excludes other writers. Backends without
        appends rewrite the file whole. Raises: StoreIOError; UnsafePathError when the
        file (local) is a symbolic link."""
        try:
            old = self.read(path)
        except NotFoundError:
            old = b""
        self.write_atomic(path, old[: old.rfind(b"\n") + 1] + data)

    def read_versioned(self, path: str) -> tuple[bytes | None, str | None]:
        """Args: path. Returns: (bytes, version) of the file read together, the version a
        token that changes whenever the file is replaced; (None, None) when there is no
        file. Only where `ref_cas`. Raises: StoreIOError; CorruptError for a file larger
        than ckpt writes it (`layout.versioned_cap`), refused before it is read whole."""
        raise NotImplementedError(f"{type(self).__name__} has no compare-and-swap")

    def version(self, path: str) -> str | None:
        """Args: path. Returns: the version `read_versioned` would give for the file,
        from its metadata alone (no byte of it read: for a file too large to read, which
        a compare-and-swap then replaces); None when there is no file. Only where
        `ref_cas`. Raises: StoreIOError."""
        raise NotImplementedError(f"{type(self).__name__} has no compare-and-swap")

    def write_if_match(self, path: str, data: bytes, version: str | None) -> bool:
        """Args: path, the whole file, the version read_versioned gave (None: there was
        no file). Writes only if the file is still that version (still absent, for
        None). Returns: whether it wrote; False when another writer got there first.
        Only where `ref_cas`. Raises: StoreIOError."""
        raise NotImplementedError(f"{type(self).__name__} has no compare-and-swap")

    @abstractmethod
    def open_temp(self) -> tuple[str, IO[bytes]]:
        """Returns: (temp name, writable binary file) for a large file written in pieces."""

    @abstractmethod
    def commit_temp(self, temp: str, handle: IO[bytes], path: str) -> None:
        """Args: the pair from open_temp and the final path. Durably renames. Raises: StoreIOError."""

    @abstractmethod
    def discard_temp(self, temp: str, handle: IO[bytes]) -> None:
        """Args: the pair from open_temp. Removes the temp file."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Args: a directory path. Returns: file paths below it (recursive), sorted."""

    def list_around_links(self, prefix: str, warn: Callable[[UnsafePathError], None]) -> builtins.list[str]:
        """Args: a directory path; what to call for each linked directory below it.
        Returns: list(prefix), but a directory there that is a symbolic link is passed to
        `warn` and left out rather than refused (for readers that show what they can:
        `ckpt reflog` of every ref). Only a local store has links: this default lists."""
        return self.list(prefix)

    def list_names(self, directory: str) -> builtins.list[str]:
        """Args: a directory path. Returns: the names of files directly in it (unsorted).
        Backends may override this with something faster than list()."""
        prefix = directory.rstrip("/") + "/"
        return [p[len(prefix) :] for p in self.list(directory) if "/" not in p[len(prefix) :]]

    def sizes(self, directory: str) -> dict[str, int]:
        """Args: a directory path. Returns: name -> size in bytes of the files directly in
        it (what `list_names` lists; one that cannot be sized is left out). Object
        storage answers from one listing; this default sizes each file (a stat each)."""
        prefix = directory.rstrip("/") + "/"
        out = {}
        for name in self.list_names(directory):
            try:
                out[name] = self.size(prefix + name)
            except CkptError:
                continue  # gone since the listing, or not a file: its read says what is wrong
        return out

    def read_stored_copy(self, path: str) -> bytes:
        """Args: path. Returns: the file's bytes as the store holds them now, never a
        local cache's copy (what `ckpt verify` checks, and what a copy compares). Where
        nothing is cached (a local disk) this is `read`. Raises: as `read`."""
        return self.read(path)

    def cached_copy(self, path: str) -> bytes | None:
        """Args: path. Returns: the good copy a local cache holds of the file (one whose
        bytes match its name), or None: readers on this host read that copy rather than
        the store's (`ckpt verify` says so when the store's differs). Raises nothing."""
        return None

    def replace(self, path: str, data: bytes) -> None:
        """Args: path, data. Writes the whole file as `write_atomic` does, replacing what
        is there without looking at it first: the caller has found it is not these bytes
        (a manifest found damaged is written again by `ckpt copy`), where `write_atomic`
        of a content-named file on object storage first compares what is there (its size
        and last bytes). Raises: StoreIOError."""
        self.write_atomic(path, data)

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Args: path. Returns: whether a file is there."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Args: path. Removes the file; missing is not an error."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Args: path. Returns: the file's size in bytes. Raises: NotFoundError."""

    @abstractmethod
    def lock(self, name: str, *, shared: bool, wait: float = 30.0) -> contextlib.AbstractContextManager[None]:
        """Args: lock name, shared or exclusive, seconds to wait. Raises: LockError."""

    def reading_lock(self, name: str, *, wait: float = 300.0) -> contextlib.AbstractContextManager[None]:
        """The lock `name` taken shared by a reader that writes nothing (`ckpt verify`):
        where the lock cannot be had without writing (a read-only store, no lock file
        yet), it reads without it. Raises: LockError after `wait` seconds."""
        return contextlib.nullcontext()

    def lock_state(self, name: str) -> tuple[str, str | None]:
        """Whether lock `name` is held now, without waiting and without writing: ("free",
        None), ("shared" or "exclusive", who holds it as `lock_holder` says, or None),
        ("linked", the lock file's path) where the lock file is a symbolic link (every
        command that takes it is refused), or ("unknown", None) where a backend cannot
        tell (`ckpt doctor`)."""
        return "unknown", None

    @abstractmethod
    def mark_writer(self, kind: str) -> Mark:
        """Say that a long-lived writer (a saver) is alive until the mark is closed. The
        caller holds the store lock shared, so that no removal of objects runs meanwhile.
        Args: what writes (a word). Returns: the mark. Raises: StoreIOError."""

    @abstractmethod
    def live_writers(self, exclude: Mark | None = None) -> builtins.list[str]:
        """The marks of the writers alive now but `exclude` (the caller's own); marks
        left by writers that died are removed (the caller holds the store lock
        exclusively). Returns: their names."""


def fsync_dir(path: str | Path, *, strict: bool = False) -> None:
    """fsync a directory, so that a rename or a new file in it is durable. Not every
    file system lets a directory be synced: unless `strict`, an OSError is ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if strict:
            raise


_SYNCFS: list[Callable[[int], int] | None] = []  # found on first use (ctypes costs start-up time)
_SYNC_RANGE: list[Callable[[int, int, int, int], int] | None] = []
#: sync_file_range(2)'s flag: start writing back the dirty pages of the range, do not wait
SYNC_FILE_RANGE_WRITE = 2


def _find_sync_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range(2) (Linux), or None where there is none."""
    if not _SYNC_RANGE:
        fn: Callable[[int, int, int, int], int] | None = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                f = ctypes.CDLL(None, use_errno=True).sync_file_range
                f.argtypes, f.restype = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint], ctypes.c_int
                fn = f
            except (OSError, AttributeError):
                fn = None
        _SYNC_RANGE.append(fn)
    return _SYNC_RANGE[0]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing back the dirty pages of a range of a file (sync_file_range(2) with
    SYNC_FILE_RANGE_WRITE), without waiting for them: a hint that makes a later fsync
    shorter; it does not make anything durable. Nothing where there is no such call,
    and an error is ignored (the fsync reports what matters)."""
    fn = _find_sync_range()
    if fn is not None and length > 0:
        fn(fd, offset, length, SYNC_FILE_RANGE_WRITE)


def _find_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs(2) (Linux), or None where there is none."""
    if not _SYNCFS:
        fn: Callable[[int], int] | None = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                f = ctypes.CDLL(None, use_errno=True).syncfs
                f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int
                fn = f
            except (OSError, AttributeError):
                fn = None
        _SYNCFS.append(fn)
    return _SYNCFS[0]


def syncfs(path: Path) -> bool:
    """Write everything cached of the file system holding `path` to disk (syncfs(2): one
    file-system journal commit for many files, instead of an fsync each); False when it
    cannot (no syncfs here, or it failed: the caller fsyncs file by file instead). Since
    Linux 5.8 syncfs reports a write-back error of any file of the file system."""
    fn = _find_syncfs()
    if fn is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return fn(fd) == 0
    finally:
        os.close(fd)


#: how many random names create_temp tries before it gives up
TEMP_TRIES = 64


def temp_name(token: str, suffix: str = ".tmp", prefix: str = ".ckpt-") -> str:
    """The temporary name made of a random `token` (secrets.token_hex(8))."""
    return f"{prefix}{token}{suffix}"


def create_temp(
    directory: str | Path | int,
    *,
    suffix: str = ".tmp",
    prefix: str = ".ckpt-",
    mode: int = 0o600,
    flags: int = os.O_WRONLY,
    avoid: Container[str] = (),
    on_name: Callable[[str], None] | None = None,
    token: str | None = None,
) -> tuple[str, int]:
    """Create a new, empty file under an unpredictable name in `directory` (a path or a
    directory descriptor). `on_name` is told each name before the file is created under
    it, and "" when that name was taken (not this call's file): a caller that must remove
    the file after an interrupt knows it even when the interrupt lands between the
    creation and this function's return.

    The name is `prefix` + 16 random hex digits + `suffix`, never one in `avoid` (the
    names a restore is about to write there). The file is opened with
    O_CREAT|O_EXCL|O_NOFOLLOW: whatever already holds the name (a file, a hard link, a
    symlink, dangling or not) is never opened, truncated or followed; another random
    name is tried instead, up to TEMP_TRIES times.

    Returns:
        (name, descriptor opened with `flags`).
    Raises:
        OSError: the directory refused the file, or every name tried was taken (EEXIST).
    """
    flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for i in range(TEMP_TRIES):
        name = temp_name(token if i == 0 and token else secrets.token_hex(8), suffix, prefix)
        if name in avoid:
            continue
        if on_name is not None:
            on_name(name)
        try:
            if isinstance(directory, int):
                return name, os.open(name, flags, mode, dir_fd=directory)
            return name, os.open(os.path.join(directory, name), flags, mode)
        except FileExistsError:
            if on_name is not None:
                on_name("")
            continue
        except OSError as exc:
            if on_name is not None:
                on_name("")
            if exc.errno != errno.ELOOP:  # a symlink at the name, on systems that say so
                raise
    raise FileExistsError(errno.EEXIST, f"no free temporary name after {TEMP_TRIES} random tries")


def write_file_atomic(path: Path, write: Callable[[IO[bytes]], None], what: str = "", *, through: bool = True) -> None:
    """Write the file at `path` whole or not at all, outside a store (an exported
    checkpoint, a restored document, a recorder's journal): `write` fills a new
    temporary file beside it (create_temp: random name, O_EXCL|O_NOFOLLOW; the mode of
    the file it replaces, else 0666 less the umask), which is fsynced and renamed over
    `path`; then the directory is synced. On any failure the temporary file is removed
    and `path` is as it was.

    Written through, never replaced: a path that names one of this process's open
    descriptors (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, or a link to one:
    writing there means writing to the descriptor, whatever it is open on), and a path
    that is (or links to) something other than a regular file (a FIFO, a device such as
    /dev/null, a socket). Not with `through` False (a file ckpt keeps, such as a
    journal): whatever is at `path` then, a link or a FIFO too, is replaced by the
    rename, never written through (nor waited on: a FIFO's open blocks for a reader).

    Raises:
        StoreIOError naming `what` (default: the path) for an OSError; InvalidInputError
        when `path` is a directory; what `write` raised.
    """
    with staged_file(path, write, what, through=through):
        pass


@contextlib.contextmanager
def staged_file(path: Path, write: Callable[[IO[bytes]], None], what: str = "", *, through: bool = True) -> Iterator[Path | None]:
    """`write_file_atomic` in two steps, for a file that must appear only if what the
    block does succeeds (a restore's state document, after its blobs): the file is
    written whole under its temporary name as the block starts (the name is yielded), and
    renamed over `path` when the block ends; removed, `path` untouched, when the block
    raises. A path written through (a descriptor's, a FIFO, a device: None is yielded)
    is written when the block ends. Raises: as `write_file_atomic`; what the block raised."""
    shown = what or str(path)
    fd_alias = descriptor_named(path) if through else None
    if fd_alias is not None:
        yield None
        try:
            fd = os.dup(fd_alias)
        except OSError as exc:
            raise output_error(exc, shown) from None
        _write_to(fd, write, shown)
        return
    try:
        st: os.stat_result | None = os.stat(path) if through else os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise output_error(exc, shown, path) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(f"cannot write {shown}: it is a directory", hint="give the name of a file")
    if through and st is not None and not stat.S_ISREG(st.st_mode):
        yield None
        if not _write_through(path, write, shown):  # it turned into a regular file meanwhile: replaced as usual
            write_file_atomic(path, write, what, through=through)
        return
    parent = path.parent
    tmp: Path | None = None
    try:
        name, fd = create_temp(parent, mode=0o666)
        tmp = parent / name
        if st is not None and stat.S_ISREG(st.st_mode):
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o777)  # a replaced file keeps its mode
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(exc, OSError):
            raise output_error(exc, shown, path) from None
        raise
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise output_error(exc, shown, path) from None
    fsync_dir(parent)


_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd)/(\d+)")
_STD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def descriptor_named(path: Path) -> int | None:
    """The descriptor of this process that `path` names, if any: /dev/stdout and its
    kin, /dev/fd/N, /proc/self/fd/N or /proc/<this pid>/fd/N, directly or through links
    (followed lexically: the last link of /proc/self/fd/N leads to whatever the
    descriptor is open on, which is not a path to rename over)."""
    p = os.path.abspath(path)
    own = re.compile(rf"/proc/{os.getpid()}/fd/(\d+)")
    for _ in range(16):
        if p in _STD_PATHS:
            return _STD_PATHS[p]
        m = _FD_PATH.fullmatch(p) or own.fullmatch(p)
        if m:
            return int(m.group(1))
        try:
            target = os.readlink(p)
        except OSError:
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), target))
    return None


def _write_through(path: Path, write: Callable[[IO[bytes]], None], shown: str) -> bool:
    """Write into the special file at `path` (no create, no truncate, no rename);
    False if it turned into a regular file meanwhile (then it is replaced as usual)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise output_error(exc, shown, path) from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if regular:
        os.close(fd)
        return False
    _write_to(fd, write, shown)
    return True


def _write_to(fd: int, write: Callable[[IO[bytes]], None], shown: str) -> None:
    """Write into descriptor `fd` (closed after); a failure of the last flush, at close
    (/dev/full), is the same one line as any other."""
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
    except OSError as exc:
        raise output_error(exc, shown) from None


class _Handle:
    """An open pack of LocalBackend.read_range, shared by the threads reading it: closed
    once it is dropped (evicted, or the backend closed) and no read uses it."""

    __slots__ = ("dropped", "fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.dropped = False

    def drop(self) -> None:
        self.dropped = True
        if not self.users:
            self.close()

    def close(self) -> None:
        try:  # noqa: SIM105 - no contextlib: LocalBackend.__del__ may run at interpreter shutdown, modules half gone
            os.close(self.fd)
        except OSError:
            pass


class LocalBackend(LocalLocks, Backend):
    def __init__(self, root: Path) -> None:
        self.root = root
        self._top = os.fspath(root)  # the root as a string: the per-take calls build no Path objects
        # raw descriptors of recently read packs (closed in close() or when collected)
        self._fds: dict[str, _Handle] = {}
        # directories of the store found to be no links, and none above them (`_below`)
        self._unlinked: set[str] = set()
        self._fd_lock = threading.Lock()

    def _p(self, path: str) -> Path:
        return self.root / path

    def _s(self, path: str) -> str:
        """`_p` as a string."""
        return os.path.join(self._top, path)

    def _open_regular(self, path: str) -> int:
        """A read descriptor of the store file `path`, which must be a regular file: a
        FIFO or device planted in the store is refused at once, never read (a FIFO
        would block forever)."""
        return self._open_regular_stat(path)[0]

    def check_top_dirs(self) -> None:
        """Refuse the store (UnsafePathError naming it) when one of its directories
        (layout.STORE_DIRS: manifests/, index/, packs/, refs/...) is a symbolic link:
        every read and listing below it would leave the store. One listing of the root,
        when the store is opened."""
        try:
            entries = list(os.scandir(self._top))
        except OSError:
            return  # the reads that follow say what is wrong
        for e in entries:
            if e.name in STORE_DIRS and e.is_symlink():
                check_no_links(self._top, f"{e.name}/x", reading=True)

    def _below(self, path: str) -> str:
        """`_s(path)`, once no directory between the root and `path` is a symbolic link
        (UnsafePathError naming it): a read never follows a linked manifests/, index/ or
        pack directory out of the store, as a write never does. Each directory is checked
        once for the life of the backend."""
        parent = path.rpartition("/")[0]
        if parent not in self._unlinked:
            check_no_links(self._top, path, reading=True)
            self._unlinked.add(parent)
        return self._s(path)

    def _open_regular_stat(self, path: str) -> tuple[int, os.stat_result]:
        """`_open_regular`, and the file's status. A symbolic link there is refused
        (UnsafePathError naming it), never followed: a planted link to a manifest
        elsewhere would be shown, or restored, as if the store held it."""
        fd = open_unlinked(self._below(path), os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise CorruptError(
                    f"{self._p(path)} is a directory, not a file",
                    hint=f"something other than ckpt put it in the store; remove it (rm -r {self._p(path)})",
                )
            if not stat.S_ISREG(st.st_mode):
                raise CorruptError(
                    f"{self._p(path)} is not a regular file", hint="something other than ckpt put it in the store; remove it"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def read(self, path: str) -> bytes:
        cap = versioned_cap(path)
        try:
            fd, st = self._open_regular_stat(path)
            try:
                if cap is not None and st.st_size > cap:  # refused before a byte is read
                    raise too_large(str(self._p(path)), cap, path)
                data = _read_to_end(fd, st.st_size, cap)
                if cap is not None and len(data) > cap:
                    raise too_large(str(self._p(path)), cap, path)
                return data
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise NotFoundError(f"{self._p(path)} does not exist") from None
        except OSError as exc:
            raise io_error(exc, "read", self._p(path)) from None

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            # restore and verify read from several threads: the lock is held only to find
            # (or open) the descriptor and count its users, not across the pread (the
            # threads waited on it, and on each other's wake-ups, for every object); a
            # descriptor evicted meanwhile is closed by its last user, so its number is
            # never reused by another file under a read
            with self._fd_lock:
                handle = self._fds.get(path)
                if handle is None:
                    if len(self._fds) >= 64:
                        self._evict()
                    handle = self._fds[path] = _Handle(self._open_regular(path))
                handle.users += 1
            try:
                return os.pread(handle.fd, length, offset)
            finally:
                with self._fd_lock:
                    handle.users -= 1
                    if handle.dropped and not handle.users:
                        handle.close()
        except FileNotFoundError:
            raise NotFoundError(f"{self._p(path)} does not exist") from None
        except OSError as exc:
            raise io_error(exc, "read", self._p(path)) from None

    def _forget(self, path: str) -> None:
        """Drop the descriptor read_range keeps open for `path`: the file was replaced or
        removed, so a later read_range opens what is there now, not the old file."""
        if path in self._fds:
            with self._fd_lock:
                handle = self._fds.pop(path, None)
                if handle is not None:
                    handle.drop()

    def _evict(self) -> None:
        # called with _fd_lock held: the oldest half goes
        for path in list(self._fds)[: len(self._fds) // 2]:
            self._fds.pop(path).drop()

    def close(self) -> None:
        with self._fd_lock:
            handles, self._fds = list(self._fds.values()), {}
            for handle in handles:
                handle.drop()

    def __del__(self) -> None:
        self.close()

    def write_atomic(self, path: str, data: bytes) -> None:
        # open_temp + commit_temp on the raw descriptor (no file object): every take writes
        # four or five small files this way
        temp, fd = self._temp_fd()
        try:
            _write_all(fd, data)
        except OSError as exc:
            self._discard_fd(temp, fd)
            raise io_error(exc, "write", self._p(path)) from None
        self.commit_temp(temp, fd, path)

    def write_atomic_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        # every temp file written, made durable, then all renamed, then each directory
        # fsynced once: the same guarantee as write_atomic per file. Several files are
        # made durable together by one syncfs of the store's file system (Linux) rather
        # than one fsync each (every fsync commits the file system's journal: a batch of
        # manifests of the LangGraph saver paid one commit per manifest). The system calls
        # per file are the few it needs (create, write, close, rename): the links of a
        # directory are checked once per directory, the random names drawn at once. Each
        # call lets the interpreter go and takes it back, which, beside an event loop and
        # its workers running Python, waits for them (a file create of ~27 us took ~850 us
        # in bench/langgraph_async.py's run): the LangGraph saver's commit thread writes
        # a file per manifest and per thread's ref with this.
        temps: builtins.list[tuple[str, str]] = []
        together = len(items) > 1 and _find_syncfs() is not None
        checked: dict[str, None] = {}
        dests: builtins.list[str] = []
        for path, _data in items:  # all refused before any is written
            parent = path.rpartition("/")[0]
            if parent not in checked:
                check_no_links(self._top, path)
                checked[parent] = None
            dests.append(os.path.join(self._top, path))
        if items:
            check_no_links(self._top, f"{TMP}/x")  # tmp/ itself (as `_temp_fd`)
        tmp = self._s(TMP)
        tokens = os.urandom(8 * len(items)).hex()
        try:
            for i, (dest, (_path, data)) in enumerate(zip(dests, items, strict=True)):
                # a random name created exclusively (create_temp: another one if it is taken)
                name, fd = create_temp(tmp, prefix=f"{os.getpid()}-", mode=0o666, token=tokens[16 * i : 16 * i + 16])
                temp = os.path.join(tmp, name)
                temps.append((temp, dest))
                try:
                    _write_all(fd, data)
                    if not together:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            if together and not syncfs(self.root / TMP):
                for temp, _dest in temps:  # no syncfs after all: one fsync each
                    fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            dirs: dict[str, None] = {}
            for temp, dest in temps:
                d = os.path.dirname(dest)
                if d not in dirs:
                    self._make_dirs(d)
                    dirs[d] = None
                os.replace(temp, dest)
            for path, _data in items:
                self._forget(path)
            for d in dirs:
                fsync_dir(d, strict=True)
        except OSError as exc:
            for temp, _dest in temps:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            raise io_error(exc, "write", self.root) from None

    def write_hint(self, path: str, data: bytes) -> None:
        # temp + rename, no fsync: the page cache outlives a killed process
        dest = check_no_links(self._top, path)
        temp, fd = self._temp_fd()
        try:
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            self._make_dirs(os.path.dirname(dest))
            os.replace(self._s(temp), dest)
            self._forget(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self._s(temp))
            raise io_error(exc, "write", dest) from None

    def append(self, path: str, data: bytes) -> None:
        dest = check_no_links(self._top, path)  # O_NOFOLLOW guards the file; a linked directory above it would lead out
        try:
            created = not os.path.exists(dest)
            if created:
                self._make_dirs(os.path.dirname(dest))
            # O_NOFOLLOW: a link there is named as one (UnsafePathError), never appended through
            fd = open_unlinked(dest, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)  # less the umask, as every store file
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise CorruptError(f"{dest} is not a regular file", hint="something other than ckpt put it in the store; remove it")
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # the last append was cut short: cut it off, back to the last whole line
                    os.ftruncate(fd, _after_last_newline(fd, size))
                os.write(fd, data)  # one write: O_APPEND puts it at the end as a whole
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(os.path.dirname(dest), strict=True)
        except OSError as exc:
            raise io_error(exc, "append to", dest) from None

    def open_temp(self) -> tuple[str, IO[bytes]]:
        temp, fd = self._temp_fd()
        return temp, os.fdopen(fd, "wb")

    starts_writeback = True

    def start_writeback(self, handle: IO[bytes], offset: int, length: int) -> None:
        with contextlib.suppress(OSError, ValueError):  # a handle closed meanwhile: nothing to hint
            start_writeback(handle.fileno(), offset, length)

    def _temp_fd(self) -> tuple[str, int]:
        """A new temporary file: (its store path, a descriptor open for writing)."""
        # a random name created exclusively (create_temp): a file or link planted in
        # tmp/ is never written through, another name is taken
        check_no_links(self._top, f"{TMP}/x")
        tmp = self._s(TMP)
        try:
            name, fd = create_temp(tmp, prefix=f"{os.getpid()}-", mode=0o666)
        except OSError as exc:
            raise io_error(exc, "create a temporary file in", self.root / TMP) from None
        return f"{TMP}/{name}", fd

    def planted_files(self) -> builtins.list[tuple[str, str]]:
        """Every file of the store's tree that ckpt never makes, (store path, what it is),
        sorted: a symbolic link ("a symbolic link"; ckpt follows none), a FIFO, a socket or
        a device (`file_kind`; ckpt reads and writes through none, nor waits on a FIFO).
        Walked in one pass without following any link (a linked directory is listed, not
        entered). For `ckpt verify` and `ckpt doctor`, which name each one. The LangGraph
        saver's directory (`langgraph/`) has its own checks, which say what the saver does
        with a file there that is no regular one (it skips it): its links only are here."""
        out: builtins.list[tuple[str, str]] = []
        adapters = f"{JOURNAL_DIR}/"
        # iterative, never entering a directory deeper than ckpt's own paths: a planted
        # tree thousands of levels deep is no crash (the listings name it, `list`)
        for rel, entry, _depth in dirwalk.entries(self._top, MAX_PATH_DEPTH):
            try:
                if entry.is_symlink():
                    out.append((rel, "a symbolic link"))
                elif not rel.startswith(adapters) and not entry.is_dir(follow_symlinks=False) and not entry.is_file(follow_symlinks=False):
                    out.append((rel, file_kind(entry.stat(follow_symlinks=False).st_mode)))
            except OSError:
                continue  # gone meanwhile
        return sorted(out)

    def planted_links(self) -> builtins.list[str]:
        """The symbolic links of `planted_files` (store paths, sorted)."""
        return [path for path, what in self.planted_files() if what == "a symbolic link"]

    def link_hint(self, path: str) -> str:
        """What to do about the link at store path `path` (`planted_links`): one clause."""
        at = self._s(path)
        if path.split("/")[0] in (TMP, LOCKS, CACHE):
            return f"remove the link (rm {at}): nothing ckpt needs is behind it"
        if os.path.isdir(at):
            return linked_dir_hint(self._top, at)
        return f"remove the link (rm {at}), or put the file it points to in its place"

    def temp_entries(self) -> builtins.list[tuple[str, str, float]]:
        """What tmp/ holds, one level, none of it followed: (name, kind, age in seconds
        by its own mtime), kind "file", "dir" (a real directory), "link" (a symbolic
        link, to a file, a directory or nothing: a take never writes through one,
        `create_temp` takes another name) or "other" (a FIFO, a socket...). tmp/ itself
        a link is refused (UnsafePathError), as every write there is."""
        check_no_links(self._top, f"{TMP}/x", reading=True)
        out: builtins.list[tuple[str, str, float]] = []
        now = time.time()
        try:
            with os.scandir(self._s(TMP)) as entries:
                for e in entries:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone meanwhile (its writer renamed it into place)
                    mode = st.st_mode
                    kind = "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
                    out.append((e.name, kind, now - st.st_mtime))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise io_error(exc, "list", self._s(TMP)) from None
        return sorted(out)

    def remove_temp(self, name: str) -> None:
        """Remove tmp/NAME, whatever it is, following no link: a link is unlinked (never
        what it points to), a real directory removed with what is in it, the links in it
        unlinked too (dirwalk.remove_tree works through directory descriptors, one level
        at a time without recursing: a link swapped in meanwhile is not followed either,
        and a tree of any depth is removed). Gone already is no error."""
        if "/" in name or name in ("", ".", ".."):
            raise InvalidInputError(f"refused to remove {name!r} from {TMP}/: not a name of an entry there")
        check_no_links(self._top, f"{TMP}/x")
        path = os.path.join(self._s(TMP), name)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                dirwalk.remove_tree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise io_error(exc, "remove", path) from None

    def commit_temp(self, temp: str, handle: IO[bytes] | int, path: str) -> None:
        # `handle` may be a raw descriptor too (write_atomic's)
        if isinstance(handle, int):
            self._commit_fd(temp, handle, path)
            return
        try:
            handle.flush()
        except OSError as exc:
            self.discard_temp(temp, handle)
            raise io_error(exc, "write", self._p(path)) from None
        self._commit_fd(temp, handle.fileno(), path, handle)

    def _commit_fd(self, temp: str, fd: int, path: str, handle: IO[bytes] | None = None) -> None:
        """Make the temporary file `temp` (written through `fd`, or through `handle`
        whose descriptor `fd` is; closed here either way) durable and rename it to
        `path`; then sync its directory."""
        try:
            dest = check_no_links(self._top, path)
        except UnsafePathError:
            self._discard_fd(temp, fd, handle)
            raise
        try:
            os.fsync(fd)
            if handle is not None:
                handle.close()
            else:
                os.close(fd)
            fd, handle = -1, None
            parent = os.path.dirname(dest)
            self._make_dirs(parent)
            os.replace(self._s(temp), dest)
            self._forget(path)
            fsync_dir(parent, strict=True)
        except OSError as exc:
            self._discard_fd(temp, fd, handle)
            raise io_error(exc, "write", dest) from None

    def _discard_fd(self, temp: str, fd: int, handle: IO[bytes] | None = None) -> None:
        """Close and remove the temporary file `temp` (`fd`, or `handle` when given)."""
        with contextlib.suppress(OSError):
            if handle is not None:
                handle.close()
            elif fd >= 0:
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(self._s(temp))

    def _make_dirs(self, d: str | Path) -> None:
        """Create missing directories, fsyncing each parent so the new entry is durable."""
        if not d or os.path.isdir(d):  # "": the working directory, a relative root's parent
            return
        parent = os.path.dirname(d)
        self._make_dirs(parent)
        try:
            os.mkdir(d)
        except FileExistsError:
            return
        fsync_dir(parent, strict=True)

    def discard_temp(self, temp: str, handle: IO[bytes]) -> None:
        with contextlib.suppress(OSError):
            handle.close()
        with contextlib.suppress(OSError):
            os.unlink(self._p(temp))

    def list(self, prefix: str) -> list[str]:
        """Every file under `prefix`. A directory there that is a symbolic link is refused
        (UnsafePathError, as a write through it is), not left out: a listing that missed
        refs/tags or a pack directory would let prune remove what they keep."""
        return self._list(prefix, None)

    def list_around_links(self, prefix: str, warn: Callable[[UnsafePathError], None]) -> builtins.list[str]:
        return self._list(prefix, warn)

    def _list(self, prefix: str, warn: Callable[[UnsafePathError], None] | None) -> builtins.list[str]:
        """`list`, or `list_around_links` with `warn`."""
        base = self._p(prefix)
        out: list[str] = []
        self._below(f"{prefix.rstrip('/')}/x")  # the directory listed itself, and those above it
        rel_base = os.path.relpath(base, self.root).replace(os.sep, "/")
        start = 0 if rel_base == "." else rel_base.count("/") + 1
        # iterative (an explicit stack), and no deeper than ckpt's paths there: a directory
        # at that depth holds nothing ckpt wrote and is listed itself, so that its reader
        # names it (a directory is no regular file) rather than walking a planted tree down
        limit = path_depth(rel_base) - start
        try:
            for rel, entry, depth in dirwalk.entries(os.fspath(base), limit):
                path = rel if rel_base == "." else f"{rel_base}/{rel}"
                if dirwalk.is_real_dir(entry):
                    if depth >= limit:
                        out.append(path)
                    continue
                if entry.is_symlink() and entry.is_dir():
                    try:
                        check_no_links(self._top, f"{path}/x", reading=True)
                    except UnsafePathError as exc:
                        if warn is None:
                            raise
                        warn(exc)
                        continue
                out.append(path)
        except OSError as exc:
            raise io_error(exc, "list", base) from None
        return sorted(out)

    def list_names(self, directory: str) -> builtins.list[str]:
        # everything there is listed, a link, a FIFO, a device and a subdirectory too (only
        # manifests/ is listed by name, and holds files only): never hidden, its read is
        # refused, so verify and doctor name it and ls, log and stats say they leave it out
        self._below(f"{directory.rstrip('/')}/x")
        try:
            return [e.name for e in os.scandir(self._p(directory))]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise io_error(exc, "list", self._p(directory)) from None

    def exists(self, path: str) -> bool:
        # a link there is no file of the store (never followed): a writer replaces it
        try:
            return stat.S_ISREG(os.stat(self._s(path), follow_symlinks=False).st_mode)
        except OSError as exc:
            if exc.errno in _ABSENT:
                return False
            raise
        except ValueError:
            return False

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            no_links(self.root, path).unlink()
        self._forget(path)

    def size(self, path: str) -> int:
        try:
            st = os.stat(self._s(path), follow_symlinks=False)
        except FileNotFoundError:
            raise NotFoundError(f"{self._p(path)} does not exist") from None
        if stat.S_ISLNK(st.st_mode):
            raise linked_file(self._p(path))
        return st.st_size


#: what Path.is_file takes for "no such file" (the errors pathlib ignores)
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_to_end(fd: int, size: int, cap: int | None) -> bytes:
    """The file at `fd` from its offset to its end, or its first `cap` + 1 bytes at most
    (the caller refuses more than `cap`); `size`: its size as fstat said (it may have
    grown since). Never a buffer of `cap` bytes for a small file."""
    parts: builtins.list[bytes] = []
    got = 0
    want = size + 1
    while True:
        n = want if cap is None else min(want, cap + 1 - got)
        if n <= 0:
            break
        chunk = os.read(fd, n)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
        want = 1 << 16
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _after_last_newline(fd: int, size: int) -> int:
    """The offset just after the last newline of the file (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0
