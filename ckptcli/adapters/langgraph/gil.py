"""How the LangGraph saver's threads share the interpreter with an event loop.

An async server runs every request on one thread, the event loop's. Each time that
thread comes back from `epoll` it must take the interpreter (the GIL) back; while
another thread runs Python, it waits until that thread lets go: at a blocking call, or
after the switch interval (`sys.getswitchinterval()`, 5 ms), when the interpreter forces
a switch. A short release does not do: `time.sleep(0)` or a fast system call returns
before the waiting thread has woken up, and the releasing thread takes the interpreter
back. So a thread that runs Python with only fast calls in between (the saver's commit
thread sealing and packing checkpoints, a worker running one put after another) makes
every wake-up of the loop wait the full 5 ms: the loop lag of bench/langgraph_async.py.

- `Breather`: a pause long enough for a waiting thread to take the interpreter
  (`BREATHE_FOR`) after every `BREATHE_AFTER` of CPU time; the commit thread's loops
  call it after each checkpoint or object.
- `AsyncWorkers`: the saver's own worker threads for its async methods (not the
  loop's default executor, which LangGraph's synchronous nodes use): at most `WORKERS`
  of them run the saver's Python at once, whatever the number of concurrent calls, and
  each breathes after a call that ran `BREATHE_AFTER` or more.
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

__all__ = ["BREATHE_AFTER", "BREATHE_FOR", "WORKERS", "AsyncWorkers", "Breather"]

BREATHE_AFTER = 0.0005  # seconds of a thread's CPU time between two pauses
BREATHE_FOR = 0.0001  # a pause: a real sleep (with the timer's slack, ~0.15 ms)
WORKERS = 2  # the saver's async worker threads: two, so that one waiting (for a lease, for room) does not stop the other

T = TypeVar("T")


class Breather:
    """Call it in a long loop of Python work: every `BREATHE_AFTER` of this thread's CPU
    time it sleeps `BREATHE_FOR`, which lets a thread waiting for the interpreter in.
    The cost: at most a sixth of the thread's time, less when its work is mostly I/O
    (system calls count as CPU time; their waits do not)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since = time.thread_time()

    def __call__(self) -> None:
        now = time.thread_time()
        if now - self.since >= BREATHE_AFTER:
            time.sleep(BREATHE_FOR)
            self.since = time.thread_time()


def _breathing(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a worker, then a pause if it ran `BREATHE_AFTER` or more
    (before the worker takes its next call: the loop gets the interpreter in between)."""
    t0 = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        if time.thread_time() - t0 >= BREATHE_AFTER:
            time.sleep(BREATHE_FOR)


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
