"""How the LangGraph saver's threads share the interpreter with an event loop.

An async server runs every request on one thread, the event loop's. Each time that
thread comes back from `epoll` it must take the interpreter (the GIL) back; while
another thread runs Python, it waits until that thread lets go: at a blocking call, a
sleep, or after the switch interval (`sys.getswitchinterval()`, 5 ms), when the
interpreter forces a switch. So every stretch of Python another thread runs without
letting go is a wait of up to 5 ms for every request of the server: the loop lag of
bench/langgraph_async.py. The saver's threads keep those stretches short:

- `Breather`: called after each item of a long loop (sealing checkpoints, packing
  objects), it lets the interpreter go (`time.sleep(0)`) once the thread has run
  `BREATHE_AFTER` of CPU time since it last did. The commit thread's loops call it; some
  of them (sealing every idle checkpoint, or all of them under back-pressure) let go
  only at the end before.
- `AsyncWorkers`: the saver's own worker threads for its async methods, not the loop's
  default executor: at most `WORKERS` of them run the saver's Python at once, whatever
  the number of concurrent calls (`asyncio.to_thread` starts a worker per concurrent
  call, up to six on two cores, and they hand the interpreter to each other while the
  loop waits), and no saver call waits behind LangGraph's synchronous nodes or the
  application's blocking calls, which share the default executor. Each worker lets go
  after a call that ran `BREATHE_AFTER` or more.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BREATHE_AFTER", "WORKERS", "AsyncWorkers", "Breather"]

BREATHE_AFTER = 0.00025  # seconds of a thread's CPU time between two releases of the interpreter
WORKERS = 2  # the saver's async worker threads: two, so that one waiting (for a lease, for room) does not stop the other

T = TypeVar("T")


class Breather:
    """Call it after each item of a long loop of Python work: once this thread has run
    `BREATHE_AFTER` of CPU time since it last let the interpreter go here, it does
    (`time.sleep(0)`: a thread waiting for the interpreter takes it; a system call and
    no wait when none does)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since = time.thread_time()

    def __call__(self) -> None:
        now = time.thread_time()
        if now - self.since >= BREATHE_AFTER:
            time.sleep(0)
            self.since = time.thread_time()


def _breathing(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a worker, then the interpreter let go if it ran
    `BREATHE_AFTER` or more (a worker with calls queued would go on to the next one)."""
    t0 = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        if time.thread_time() - t0 >= BREATHE_AFTER:
            time.sleep(0)


class AsyncWorkers:
    """The worker threads of one saver's async methods (made at the first call, shut
    down by `close`). A call runs with the caller's context variables, as with
    `asyncio.to_thread`."""

    def __init__(self, name: str, workers: int = WORKERS) -> None:
        self._name = name
        self._workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor | None:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None and not self._closed:
                    self._pool = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
                pool = self._pool
        return pool

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on one of the workers, awaited. Once closed, in the
        caller (a closed saver's method only raises that it is closed)."""
        pool = self._executor()
        if pool is None:
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, _breathing, fn, *args, **kwargs)
        return await loop.run_in_executor(pool, call)

    def close(self) -> None:
        """Let the workers go once the calls queued are done (without waiting here: a
        saver closed from one of its own calls must not wait for itself)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
