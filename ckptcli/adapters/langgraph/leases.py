"""The LangGraph saver's thread leases on disk (the one owner of that format), for the saver,
`ckpt prune --langgraph-ttl` and `ckpt doctor`. Imports nothing of LangGraph; docs/langgraph.md
("Several processes") is the user's view and says how leases are used::

    <store>/langgraph/threads/<lease name>    17 bytes: a dirty flag (u8) and a token (16 bytes)
    <store>/langgraph/want/<lease name>.<ns>-<pid>-<random>   a waiter's hand-over request
    <store>/langgraph/recover.lock            one saver replays dead savers' journals at a time

The lease name is the first 32 hex digits of the SHA-256 of the thread id. A lease is held
while a process has an `flock` on its file; a request is flocked by its waiter while it
waits, so an unlocked one was left by a dead waiter and is removed. A lease file is removed
only while its remover holds the flock, and whoever holds the flock of a file no longer
linked opens the path again."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ckptcli.adapters.langgraph.journal import open_regular
from ckptcli.store.layout import LEASE_DIR as LEASE_DIR  # these three stay importable from here
from ckptcli.store.layout import RECOVER_LOCK as RECOVER_LOCK
from ckptcli.store.layout import WANT_DIR as WANT_DIR
from ckptcli.store.layout import lease_dir, recover_lock_file

LEASE = struct.Struct("<B16s")  # dirty flag, token


def open_recover_lock(store_dir: Path, create: bool = True) -> int | None:
    """The recovery lock's file of the store at `store_dir`, opened as a saver opens it
    to lock it (made when missing with `create`; without it, None when missing: `ckpt
    doctor` looks without making anything). Raises StoreIOError, as a saver would stop with."""
    from ckptcli.errors import StoreIOError

    path = recover_lock_file(store_dir)
    hint = "it must be a file savers can read and write (one is made when missing): move away what is there, or fix its permissions"
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if not create:
            return None
        raise StoreIOError(f"cannot open {path}: {os.strerror(errno.ENOENT)}", hint=hint) from None
    except OSError as exc:
        raise StoreIOError(f"cannot open {path}: {exc.strerror}", hint=hint) from None


def lease_name(thread: str) -> str:
    return hashlib.sha256(thread.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class Request:
    """A waiter's request that the holder of lease `lease` hand it over: a file in
    `wdir` it holds an flock on until `close` (which removes it). Raises OSError."""

    def __init__(self, wdir: Path, lease: str) -> None:
        while True:
            name = f"{lease}.{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}"
            fd = os.open(wdir / name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds it only for an instant (`live_requests`)
                if os.fstat(fd).st_nlink:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # taken for a dead waiter's before it was locked, and removed: again
        self.path, self.name, self._fd = wdir / name, name, fd

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                self.path.unlink()  # before the flock goes: never seen unlocked
            os.close(self._fd)
            self._fd = -1


def request_lease(name: str) -> str:
    """The lease an entry of the request directory asks for (an old saver's request is
    named by the lease alone)."""
    return name.partition(".")[0]


def live_requests(wdir: Path, names: Iterable[str]) -> list[str]:
    """Of the requests `names` in `wdir`, those whose waiter is alive (it holds the
    flock), oldest first; a request no waiter holds is removed (its waiter died), as is
    anything there that is no regular file. An old saver's request (named by the lease
    alone, never locked) is left alone and not counted."""
    live = []
    for name in sorted(names, key=lambda n: n.partition(".")[2]):
        if "." not in name:
            continue
        path = wdir / name
        try:
            fd = open_regular(path)
        except OSError:
            continue  # gone meanwhile: its waiter has the lease, or gave up
        if isinstance(fd, str):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        try:
            if try_flock(fd):
                with contextlib.suppress(OSError):
                    path.unlink()  # while locked: a waiter that made it just now sees it gone and makes another
            else:
                live.append(name)
        finally:
            os.close(fd)
    return live


@dataclass(frozen=True)
class LeaseState:
    name: str
    held: bool  # a live process holds it
    dirty: bool  # its last holder had puts not committed (died, if not held)


#: how a file the saver only reads is opened: never blocks (a FIFO), never follows a link
def lease_states(store_dir: Path, odd: list[tuple[str, str]] | None = None) -> list[LeaseState]:
    """Every thread lease of the store at `store_dir`, looked at without being kept: a
    lease held by another process is seen as held (its flock), one that is free is
    taken for an instant and let go. An entry that is no regular file is no lease: it
    is added to `odd` as (name, what it is)."""
    out: list[LeaseState] = []
    ldir = lease_dir(store_dir)
    if not ldir.is_dir():
        return out
    for path in sorted(ldir.iterdir()):
        try:
            fd = open_regular(path)
        except OSError:
            continue  # gone meanwhile
        if isinstance(fd, str):
            if odd is not None:
                odd.append((path.name, fd))
            continue
        try:
            held = not try_flock(fd)
            raw = os.pread(fd, LEASE.size, 0)
        except OSError:
            continue
        finally:
            os.close(fd)
        out.append(LeaseState(path.name, held, len(raw) == LEASE.size and raw[0] != 0))
    return out


def _take(path: Path) -> int:
    """The lease at `path` opened and flocked, or -1 (held by another process, or no
    lease: a FIFO, a hard link...). Made when missing (a thread imported, or written
    before leases): a saver that read it at its start finds no token and reads it again.
    One removed once it was taken (its thread deleted by a saver) is opened again."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except OSError:
            return -1
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or not try_flock(fd):
            os.close(fd)
            return -1
        if os.fstat(fd).st_nlink:
            return fd
        os.close(fd)


@contextlib.contextmanager
def hold_threads(store_dir: Path, threads: Iterable[str], renew: bool = True) -> Iterator[tuple[set[str], set[str]]]:
    """Hold the leases of `threads` that no live saver holds and no dead one left dirty
    (its journal is replayed at the next open), as a saver does before it changes a
    thread. Yields (held, in use). On exit each held lease gets a new token (`renew`),
    so that savers read those threads from the store again, and is let go."""
    ldir = lease_dir(store_dir)
    held: dict[str, int] = {}
    in_use: set[str] = set()
    try:
        for thread in sorted(set(threads)):
            if not ldir.is_dir():
                held[thread] = -1  # no saver ever opened this store: none has the thread in memory
                continue
            fd = _take(ldir / lease_name(thread))
            if fd < 0:
                in_use.add(thread)
                continue
            raw = os.pread(fd, LEASE.size, 0)
            if len(raw) == LEASE.size and raw[0] != 0:
                os.close(fd)
                in_use.add(thread)
                continue
            held[thread] = fd
        yield set(held), in_use
    finally:
        for fd in held.values():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    if renew:
                        os.pwrite(fd, LEASE.pack(0, os.urandom(16)), 0)
                    os.close(fd)
