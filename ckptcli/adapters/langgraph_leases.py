"""The LangGraph saver's thread leases on disk: where they are and what they hold (the
one owner of that format), for the saver, `ckpt prune --langgraph-ttl` and `ckpt doctor`.

Imports nothing of LangGraph. docs/langgraph.md ("Several processes") is the user's view::

    <store>/langgraph/threads/<lease name>   one per thread: 17 bytes, a dirty flag
                                             (u8: the holder has puts of the thread not
                                             committed) and a token (16 bytes, new each
                                             time a holder lets go of a thread it wrote)
    <store>/langgraph/want/<lease name>      a request that the holder hand the thread over
    <store>/langgraph/recover.lock           one saver replays dead savers' journals at a time

The lease name is the first 32 hex digits of the SHA-256 of the thread id. A lease is
*held* while a process has an `flock` on its file; whoever takes it and finds a token it
has not seen reads the thread from the store again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ckptcli.adapters.langgraph_journal import JOURNAL_DIR, open_regular

LEASE_DIR, WANT_DIR, RECOVER_LOCK = "threads", "want", "recover.lock"  # under JOURNAL_DIR
LEASE = struct.Struct("<B16s")  # dirty flag, token


def open_recover_lock(jdir: Path, create: bool = True) -> int | None:
    """The recovery lock's file in `jdir`, opened as a saver opens it to lock it (made
    when missing with `create`; without it, None when missing: `ckpt doctor` looks
    without making anything). Raises StoreIOError, as a saver would stop with."""
    from ckptcli.errors import StoreIOError

    path = jdir / RECOVER_LOCK
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
    ldir = store_dir / JOURNAL_DIR / LEASE_DIR
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


@contextlib.contextmanager
def hold_threads(store_dir: Path, threads: Iterable[str], renew: bool = True) -> Iterator[tuple[set[str], set[str]]]:
    """Hold the leases of `threads` that no live saver holds and no dead one left dirty
    (its journal is replayed at the next open), as a saver does before it changes a
    thread. Yields (held, in use). On exit each held lease gets a new token (`renew`),
    so that savers read those threads from the store again, and is let go."""
    ldir = store_dir / JOURNAL_DIR / LEASE_DIR
    held: dict[str, int] = {}
    in_use: set[str] = set()
    try:
        for thread in sorted(set(threads)):
            if not ldir.is_dir():
                held[thread] = -1  # no saver ever opened this store: none has the thread in memory
                continue
            try:
                # made when missing (a thread imported, or written before leases): a saver
                # that read it at its start sees the new token and reads it again
                fd = os.open(ldir / lease_name(thread), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
            except OSError:
                in_use.add(thread)
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a FIFO, a hard link...: no lease, the thread cannot be taken
                os.close(fd)
                in_use.add(thread)
                continue
            if not try_flock(fd):
                os.close(fd)
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
