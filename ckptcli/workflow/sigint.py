"""Ctrl-C (SIGINT) in a durable workflow lands in the workflow's code, never inside ckpt's
own recording (docs/workflows.md, "Interrupting a workflow").

Python raises KeyboardInterrupt between any two bytecodes of the main thread, also in the
middle of a checkpoint: inside `ThreadPoolExecutor.submit` just after it started a worker
thread and before it registered it, the worker was never told to stop, and the
interpreter then waited for it forever at exit (the "hang or crash about 1 run in 6" of a
workflow that sends SIGINT to itself). While `workflow.run` runs in the main thread with
Python's own SIGINT handler, it installs one that holds a SIGINT that arrives while ckpt
records (a step's call or result, a variable, a checkpoint, the journal's opening and
closing) and raises KeyboardInterrupt as soon as that recording is done; in the
workflow's own code (its function, its steps) it is raised at once, as before. The
process then ends as any Python program ends on Ctrl-C (exit 130, the step that was
running in doubt), its store and journal whole. A program with its own SIGINT handler
(or SIGINT ignored) keeps it: nothing is installed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["Held", "handling", "holding"]


class _State:
    depth = 0  # recording sections entered (nested)
    pending = False  # a SIGINT arrived inside one
    installed = False


_S = _State()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _S.depth > 0:
        _S.pending = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Install the holding SIGINT handler for the block (main thread, Python's default
    handler only; nested runs share the outer one)."""
    if (
        _S.installed
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, _on_sigint)
    _S.installed = True
    try:
        yield
    finally:
        _S.installed = False
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if _S.pending:  # one held to the very end
            _S.pending = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """A section of ckpt's own recording: a SIGINT in it is raised when it ends."""
    if not _S.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    _S.depth += 1
    try:
        yield
    finally:
        _S.depth -= 1
        if _S.depth == 0 and _S.pending:
            _S.pending = False
            raise KeyboardInterrupt


class Held:
    """A Recorder whose calls are recording sections (`holding`); its attributes as the
    recorder's."""

    __slots__ = ("_rec",)

    def __init__(self, rec: Any) -> None:
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._rec, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with holding():
                return value(*args, **kwargs)

        return call
