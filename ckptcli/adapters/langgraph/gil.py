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
- `breathing`: what the async methods run on their worker thread (`asyncio.to_thread`):
  the call, then the interpreter let go if it ran `BREATHE_AFTER` or more, before the
  worker hands its result over and takes its next call.

Not done, measured (bench/langgraph_gcprobe.py --async, interleaved, a loaded machine):
the saver's own two worker threads instead of `asyncio.to_thread`'s pool (no better, as
one thread per saver before it), a shorter switch interval (2 ms: no better), and a
longer `BREATHE_AFTER` (2 ms, for the commit thread's loops or for every thread's; a
one-off probe of the same workload: a commit beside busy threads took less than half
the time, the loop lag was no better; docs/performance.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BREATHE_AFTER", "Breather", "breathing"]

BREATHE_AFTER = 0.00025  # seconds of a thread's CPU time between two releases of the interpreter

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


def breathing(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, then the interpreter let go if it ran `BREATHE_AFTER` or
    more (a worker with calls queued would go on to the next one without)."""
    t0 = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        if time.thread_time() - t0 >= BREATHE_AFTER:
            time.sleep(0)
