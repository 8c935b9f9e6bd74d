"""A LangGraph saver's side of the thread leases (leases.py owns their files): taking a
thread's lease, and waiting in turn for one another process's saver holds.
docs/langgraph.md, "Several processes"."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ckptcli.adapters.langgraph.leases import Request, live_requests, request_lease, try_flock
from ckptcli.errors import LockError, StoreIOError
from ckptcli.store.layout import lease_dir, want_dir

__all__ = ["Lease", "LeaseHolder"]


class Lease:
    """A saver's hold on one thread across processes: an flock on its lease file,
    ``<store>/langgraph/threads/<hash of the thread id>``, which holds a dirty flag (set
    while the holder has puts of the thread not committed yet) and a token (new at each
    release after a commit of the thread)."""

    __slots__ = ("dirty", "fd", "name", "wrote")

    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name
        self.dirty = False  # the file says so
        self.wrote = False  # this hold put something: a new token on release


class LeaseHolder:
    """Takes the lease files of the store at `store_dir` for one saver, waiting up to
    `lease_timeout` seconds for another process's saver to hand one over."""

    def __init__(self, store_dir: Path, lease_timeout: float) -> None:
        self.lease_dir = lease_dir(store_dir)
        self.want_dir = want_dir(store_dir)
        self.lease_timeout = lease_timeout

    def take(self, thread: str, name: str, wait: bool) -> int:
        """The fd of thread `thread`'s lease file `name`, flocked: taken at once, or
        asked for and waited for (`wait`; -1 without `wait` when another process's saver
        holds it). A lease removed while the saver waited for it (its thread deleted,
        `SaverCore._drop_lease`) is opened again: the one at its path is the lease now."""
        while True:
            try:
                fd = os.open(self.lease_dir / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as exc:
                raise StoreIOError(f"cannot open the lease of thread {thread!r} in {self.lease_dir}: {exc.strerror}") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a lease is written to: never through a hard link to a file elsewhere
                os.close(fd)
                what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else f"has {st.st_nlink} hard links (a lease has one)"
                raise StoreIOError(
                    f"cannot use the lease of thread {thread!r}: {self.lease_dir / name} {what}",
                    hint="something other than ckpt put it there; remove it",
                )
            try:
                # others wait for it: queue behind them (a saver that just handed the thread
                # over, and needs it again at its next put, would take it back first otherwise)
                locked = not (wait and self.requests(name)) and try_flock(fd)
                if not locked and not wait:
                    os.close(fd)
                    return -1
                if not locked:
                    self.wait_for(thread, name, fd)
                if os.fstat(fd).st_nlink:
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # removed meanwhile

    def requests(self, name: str, names: list[str] | None = None) -> list[str]:
        """The live requests for lease `name`, oldest first (`leases.live_requests`)."""
        wdir = self.want_dir
        if names is None:
            try:
                names = os.listdir(wdir)
            except OSError:
                return []
        return live_requests(wdir, [n for n in names if request_lease(n) == name])

    def wait_for(self, thread: str, name: str, fd: int) -> None:
        """Wait until the saver holds lease `name` (fd `fd`), which another process's
        saver holds: a request of its own in the request directory, flocked while it
        waits, asks the holder to hand it over; the waiters older than this one take it
        first (for up to half of `lease_timeout`, then this one tries too: a waiter that
        stopped does not hold up the queue). LockError after `lease_timeout`."""
        try:
            request: Request | None = Request(self.want_dir, name)
        except OSError:
            request = None  # waits all the same: the holder lets go at its next commit
        try:
            start = time.monotonic()
            ahead: set[str] = set()
            served = 0
            while True:
                older = set(self.requests(name))
                if request is not None:
                    older = {r for r in older if r < request.name}
                served += len(ahead - older)  # older waiters that got it (or gave up) meanwhile
                ahead = older
                now = time.monotonic()
                if (not older or now - start > self.lease_timeout / 2) and try_flock(fd):
                    return
                if now - start > self.lease_timeout:
                    if served:
                        raise LockError(
                            f"thread {thread!r} was busy for {self.lease_timeout:g} s, not stuck: "
                            f"{served} other process(es)' saver(s) that asked for it "
                            f"before this one took it in turn (or gave up), and {len(older)} still wait ahead of this one",
                            hint=(
                                "the savers take a thread in turn, one run at a time: "
                                "serialize the runs of one thread in your app, or raise lease_timeout"
                            ),
                        )
                    queue = f" ({len(older)} other waiter(s) ahead of this one)" if older else ""
                    raise LockError(
                        f"thread {thread!r} is held by another process's CkptSaver, "
                        f"which did not hand it over within {self.lease_timeout:g} s{queue}",
                        hint="a live saver hands a thread over within a tick and a commit: check that process, or raise lease_timeout",
                    )
                time.sleep(0.002)
        finally:
            if request is not None:
                request.close()

    def old_request(self, path: Path) -> bool:
        """A request of an older version of the saver (named by the lease alone, made
        less than `lease_timeout` ago): handed over to as before."""
        try:
            return time.time() - os.lstat(path).st_mtime <= self.lease_timeout + 1
        except OSError:
            return False
