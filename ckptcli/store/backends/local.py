"""`file:///path` or a plain path: the object-storage contract over a local directory,
the store root (docs/design.md, "Backends").

Every object is a regular file at its path below the root. A write goes to a new file
under `tmp/` (created exclusively, O_EXCL|O_NOFOLLOW, under a random name that starts
with the writer's pid), which is fsynced, then renamed (or, for put_if_absent, hard
linked) into place, then the directory is fsynced: a crash leaves the old object or the
new one, never a part. `list` never shows `tmp/`.

Atomicity: put_if_absent is a hard link, which fails when anything holds the name, on
every local file system, whatever process writes. Every change of what a path holds
(put, put_if_absent, put_if_match, a writer's commit, delete) happens under one lock of
the store root: a thread lock of this process and an flock on `tmp/.objects.lock`
(taken again when that file was removed meanwhile), so a compare-and-swap is atomic
against every writer that uses this backend, in any thread or process of this host
(and of other hosts where the file system's flock is shared, as NFS's is).

The ETag is the file's inode, mtime and size. Under the lock each new file gets an
mtime past the last one handed out in the store (kept in the lock file), so a
replacement always changes the ETag, even with the same bytes, the same size and an
inode reused (to a nanosecond where the file system keeps them, as ext4, XFS, Btrfs
and tmpfs do).

Never followed: a symbolic link anywhere below the root (every directory is opened
with O_NOFOLLOW from its parent's descriptor; a link at an object's name is refused).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote

from ckptcli.errors import InvalidInputError, NotFoundError, StoreIOError
from ckptcli.store.backend import create_temp, fsync_dir
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo, ObjectWriter
from ckptcli.store.backends.paths import check_limit, check_path, check_prefix
from ckptcli.store.layout import TMP
from ckptcli.store.oserror import io_error

__all__ = ["LOCK_NAME", "LocalObjects", "local_path"]

#: the lock file in `tmp/` that orders every change of the store's objects
LOCK_NAME = ".objects.lock"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
#: link() refused by the file system itself (not by a name in the way): fall back to a
#: check and a rename under the store lock
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}
_CHUNK = 1 << 30

_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_LOCK = threading.Lock()


def local_path(url: str) -> Path:
    """The directory a local location names: a plain path, or `file:///absolute/path`
    (percent-escapes decoded; `file://localhost/...` too). Raises: InvalidInputError."""
    if not url.startswith("file:"):
        return Path(url)
    rest = url[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        host, slash, rest = rest.partition("/")
        if host not in ("", "localhost") or not slash:
            raise InvalidInputError(
                f"the file URL {url!r} names a host ({host!r}) or no path",
                hint="write a local directory as file:///absolute/path, or give the path itself",
            )
        rest = "/" + rest
    if not rest.startswith("/"):
        raise InvalidInputError(f"the file URL {url!r} has a relative path", hint="write file:///absolute/path, or give the path itself")
    return Path(unquote(rest))


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


class LocalObjects(ObjectBackend):
    """The objects of the store whose root directory is `root` (made on the first write)."""

    conditional_writes = True

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.url = str(self.root)
        key = os.path.abspath(self.root)
        with _THREAD_LOCKS_LOCK:
            self._thread_lock = _THREAD_LOCKS.setdefault(key, threading.Lock())

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> LocalObjects:
        """Args: a path or file:// URL, store options (a local store takes none).
        Returns: the backend. Raises: InvalidInputError."""
        if options:
            raise InvalidInputError(
                f"a local store takes no store options, got {', '.join(sorted(options))}",
                hint="drop --store-option and CKPT_STORE_OPTIONS for a local store",
            )
        return cls(local_path(url))

    def _check(self, path: str) -> builtins.list[str]:
        """The parts of a valid object path. Raises: InvalidInputError."""
        parts = check_path(path, self.url).split("/")
        if parts[0] == TMP:
            raise InvalidInputError(
                f"refused the object path {path!r} in {self.url}: {TMP}/ holds the in-flight files of a local store",
                hint="write objects elsewhere in the store",
            )
        return parts

    # -- messages ---------------------------------------------------------------

    def _shown(self, path: str) -> str:
        return f"{self.root}/{path}" if path else str(self.root)

    def _missing(self, path: str) -> NotFoundError:
        return NotFoundError(f"{self._shown(path)}: no such object")

    def _fail(self, exc: OSError, what: str, path: str) -> StoreIOError:
        if exc.errno == errno.ELOOP:
            return self._symlink(what, path)
        return io_error(exc, what, self._shown(path))

    def _symlink(self, what: str, path: str) -> StoreIOError:
        return StoreIOError(
            f"cannot {what} {self._shown(path)}: a symbolic link is in the way, and ckpt never follows one in a store",
            hint="something other than ckpt put it in the store; remove it",
        )

    # -- directories ------------------------------------------------------------

    @contextlib.contextmanager
    def _dir(self, parts: list[str], *, create: bool, what: str, path: str) -> Iterator[int]:
        """A descriptor of the directory root/parts..., each part opened with O_NOFOLLOW
        from its parent (made, when `create`, each new one synced into its parent).
        Raises: NotFoundError when a part is missing (and not `create`), StoreIOError."""
        fd = self._root_fd(create, what, path)
        try:
            for part in parts:
                nxt = self._open_dir(fd, part, create=create, what=what, path=path)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _root_fd(self, create: bool, what: str, path: str) -> int:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the root is the user's path: followed
        try:
            return os.open(self.root, flags)
        except FileNotFoundError:
            if not create:
                raise self._missing(path) from None
        except OSError as exc:
            raise self._fail(exc, what, path) from None
        try:
            self.root.mkdir(exist_ok=True)  # the root only: a missing parent is the user's typo, not ours to make
            fsync_dir(self.root.parent)
            return os.open(self.root, flags)
        except OSError as exc:
            raise self._fail(exc, what, path) from None

    def _open_dir(self, fd: int, part: str, *, create: bool, what: str, path: str) -> int:
        try:
            try:
                return os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise self._missing(path) from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
                os.fsync(fd)
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                if self._is_link(fd, part):
                    raise self._symlink(what, path) from None
                if not create:  # a file where a directory would be: no object below it
                    raise self._missing(path) from None
            raise self._fail(exc, what, path) from None

    @staticmethod
    def _is_link(fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    @contextlib.contextmanager
    def _locked(self, tmp: int) -> Iterator[int]:
        """Holds the store's lock (threads of this process, then flock between processes);
        yields the lock file's descriptor."""
        with self._thread_lock:
            while True:
                fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=tmp)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    same = os.fstat(fd).st_ino == os.stat(LOCK_NAME, dir_fd=tmp, follow_symlinks=False).st_ino
                except FileNotFoundError:
                    same = False  # removed (a clean-up of tmp/) while we waited: lock the new one
                except BaseException:
                    os.close(fd)
                    raise
                if same:
                    break
                os.close(fd)
            try:
                yield fd
            finally:
                os.close(fd)

    @staticmethod
    def _next_mtime(lock: int) -> int:
        """An mtime past every one handed out before in this store (kept in the lock file)."""
        raw = os.pread(lock, 8, 0)
        last = int.from_bytes(raw, "big") if len(raw) == 8 else 0
        now = max(time.time_ns(), last + 1)
        os.pwrite(lock, now.to_bytes(8, "big"), 0)
        return now

    # -- reads ------------------------------------------------------------------

    def _open(self, path: str) -> tuple[int, os.stat_result]:
        """A read descriptor of the object and its stat. Raises: NotFoundError, StoreIOError."""
        parts = self._check(path)
        with self._dir(parts[:-1], create=False, what="read", path=path) as d:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=d)
            except FileNotFoundError:
                raise self._missing(path) from None
            except OSError as exc:
                raise self._fail(exc, "read", path) from None
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, st
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise self._missing(path)
        raise StoreIOError(
            f"cannot read {self._shown(path)}: not a regular file", hint="something other than ckpt put it in the store; remove it"
        )

    def _pread(self, fd: int, offset: int, length: int, path: str) -> bytes:
        parts: list[bytes] = []
        try:
            while length > 0:
                got = os.pread(fd, min(length, _CHUNK), offset)
                if not got:
                    break
                parts.append(got)
                offset += len(got)
                length -= len(got)
        except OSError as exc:
            raise self._fail(exc, "read", path) from None
        return b"".join(parts)

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        check_limit(limit, self._shown(path))
        fd, st = self._open(path)
        try:
            # the descriptor holds this version: a rename over the name does not change it
            whole = max(st.st_size, 0) + 1
            return self._pread(fd, 0, whole if limit is None else min(whole, limit), path), _etag(st)
        finally:
            os.close(fd)

    def get(self, path: str) -> bytes:
        return self.get_versioned(path)[0]

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InvalidInputError(f"a range of {self._shown(path)} with offset {offset} and length {length}: both must be >= 0")
        fd, _st = self._open(path)
        try:
            return self._pread(fd, offset, length, path)
        finally:
            os.close(fd)

    def stat(self, path: str) -> ObjectInfo:
        parts = self._check(path)
        with self._dir(parts[:-1], create=False, what="stat", path=path) as d:
            try:
                st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                raise self._missing(path) from None
            except OSError as exc:
                raise self._fail(exc, "stat", path) from None
        if stat.S_ISREG(st.st_mode):
            return ObjectInfo(path, st.st_size, _etag(st))
        if stat.S_ISDIR(st.st_mode):
            raise self._missing(path)
        if stat.S_ISLNK(st.st_mode):
            raise self._symlink("stat", path)
        raise StoreIOError(
            f"cannot stat {self._shown(path)}: not a regular file", hint="something other than ckpt put it in the store; remove it"
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        check_prefix(prefix, self.url)
        head = prefix.rpartition("/")[0]
        if head.split("/")[0] == TMP:
            return  # in-flight files are no objects
        found: builtins.list[ObjectInfo] = []
        try:
            with self._dir(head.split("/") if head else [], create=False, what="list", path=head) as d:
                self._scan(d, head, prefix, found)
        except NotFoundError:
            return
        yield from sorted(found, key=lambda info: info.path)

    def _scan(self, fd: int, rel: str, prefix: str, out: builtins.list[ObjectInfo]) -> None:
        try:
            entries = builtins.list(os.scandir(fd))
        except OSError as exc:
            raise self._fail(exc, "list", rel) from None
        for entry in entries:
            full = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if (rel != "" or entry.name != TMP) and (full + "/").startswith(prefix[: len(full) + 1]):
                        sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                        try:
                            self._scan(sub, full, prefix, out)
                        finally:
                            os.close(sub)
                elif entry.is_file(follow_symlinks=False) and full.startswith(prefix):
                    st = entry.stat(follow_symlinks=False)
                    out.append(ObjectInfo(full, st.st_size, _etag(st)))
            except FileNotFoundError:
                continue  # deleted while we looked
            except OSError as exc:
                raise self._fail(exc, "list", full) from None

    # -- writes -----------------------------------------------------------------

    def _temp(self, path: str) -> tuple[int, str, int]:
        """(descriptor of tmp/, name, write descriptor) of a new temporary file."""
        with self._dir([], create=True, what="write", path=path) as root:
            tmp = self._open_dir(root, TMP, create=True, what="write", path=path)
        try:
            name, fd = create_temp(tmp, prefix=f"{os.getpid()}-", mode=0o666)
        except OSError as exc:
            os.close(tmp)
            raise self._fail(exc, "create a temporary file for", path) from None
        return tmp, name, fd

    def _write_all(self, fd: int, data: bytes | memoryview, path: str) -> None:
        view = memoryview(data).cast("B")
        try:
            while view:
                view = view[os.write(fd, view[:_CHUNK]) :]
        except OSError as exc:
            raise self._fail(exc, "write", path) from None

    def _install(self, tmp: int, name: str, fd: int, path: str, *, mode: str, etag: str | None = None) -> ObjectInfo | None:
        """Moves the synced temporary file `name` to `path`: mode "replace" (rename),
        "absent" (link, None when something is there) or "match" (rename only while the
        object's etag is `etag`, absent for None; else None). Closes `fd`, removes the
        temporary name. Raises: StoreIOError."""
        parts = path.split("/")
        try:
            os.fsync(fd)
            with self._dir(parts[:-1], create=True, what="write", path=path) as d:
                with self._locked(tmp) as lock:
                    mtime = self._next_mtime(lock)
                    os.utime(fd, ns=(mtime, mtime))
                    if not self._place(tmp, name, d, parts[-1], path, mode=mode, etag=etag):
                        return None
                    st = os.fstat(fd)
                os.fsync(d)
            return ObjectInfo(path, st.st_size, _etag(st))
        except OSError as exc:
            raise self._fail(exc, "write", path) from None
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=tmp)
            os.close(tmp)

    def _place(self, tmp: int, name: str, d: int, final: str, path: str, *, mode: str, etag: str | None) -> bool:
        """The step under the lock: whether `name` now is the object."""
        if mode == "absent":
            try:
                os.link(name, final, src_dir_fd=tmp, dst_dir_fd=d, follow_symlinks=False)
                return True
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_LINKS:
                    raise
            etag = None  # no hard links here: the lock alone makes the check atomic
        elif mode == "replace":
            os.replace(name, final, src_dir_fd=tmp, dst_dir_fd=d)
            return True
        if self._current_etag(d, final, path) != etag:
            return False
        os.replace(name, final, src_dir_fd=tmp, dst_dir_fd=d)
        return True

    def _current_etag(self, d: int, final: str, path: str) -> str | None:
        try:
            st = os.stat(final, dir_fd=d, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise self._symlink("write", path)
        if not stat.S_ISREG(st.st_mode):
            raise StoreIOError(f"cannot write {self._shown(path)}: something other than an object is there")
        return _etag(st)

    def _put(self, path: str, data: bytes, mode: str, etag: str | None = None) -> ObjectInfo | None:
        self._check(path)
        tmp, name, fd = self._temp(path)
        try:
            self._write_all(fd, data, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=tmp)
            os.close(tmp)
            raise
        return self._install(tmp, name, fd, path, mode=mode, etag=etag)

    def put(self, path: str, data: bytes) -> ObjectInfo:
        info = self._put(path, data, "replace")
        assert info is not None  # a plain replace always lands
        return info

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self._put(path, data, "absent") is not None

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        return self._put(path, data, "match", etag)

    def open_writer(self, path: str) -> ObjectWriter:
        parts = self._check(path)
        with self._dir(parts[:-1], create=True, what="write", path=path):
            pass  # a link or a file in the way is refused now, not after the parts are sent
        return _LocalWriter(self, path, *self._temp(path))

    def delete(self, path: str) -> None:
        parts = self._check(path)
        try:
            with self._dir([], create=False, what="delete", path=path) as root:
                tmp = self._open_dir(root, TMP, create=True, what="delete", path=path)
            try:
                with self._dir(parts[:-1], create=False, what="delete", path=path) as d:
                    with self._locked(tmp), contextlib.suppress(FileNotFoundError):
                        os.unlink(parts[-1], dir_fd=d)
                    os.fsync(d)
            finally:
                os.close(tmp)
        except NotFoundError:
            return
        except OSError as exc:
            raise self._fail(exc, "delete", path) from None


class _LocalWriter(ObjectWriter):
    """Streams to a temporary file in tmp/; commit renames it into place."""

    def __init__(self, backend: LocalObjects, path: str, tmp: int, name: str, fd: int) -> None:
        self._backend, self._path = backend, path
        self._tmp, self._name, self._fd = tmp, name, fd
        self._open = True

    def write(self, data: bytes | memoryview) -> None:
        if not self._open:
            raise ValueError("write to a committed or aborted writer")
        self._backend._write_all(self._fd, data, self._path)

    def commit(self) -> ObjectInfo:
        if not self._open:
            raise ValueError("commit of a committed or aborted writer")
        self._open = False
        info = self._backend._install(self._tmp, self._name, self._fd, self._path, mode="replace")
        assert info is not None  # a plain replace always lands
        return info

    def abort(self) -> None:
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self._name, dir_fd=self._tmp)
        with contextlib.suppress(OSError):
            os.close(self._tmp)
