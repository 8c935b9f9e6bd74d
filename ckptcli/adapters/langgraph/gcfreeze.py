"""The LangGraph saver's hold on the cyclic garbage collector (`hold`, `release`).

A process running LangGraph holds ~100,000 objects the collector tracks (LangGraph,
langchain-core, pydantic and their modules, the compiled graphs) that live as long as
it does. A full (generation 2) collection walks every one of them: 50-100 ms, several
times per 1,000 checkpoints, and the turn it falls into is the slowest of the run, with
any saver (bench/langgraph_gcprobe.py). `gc.freeze()` moves what is alive into the
permanent generation, which the collector no longer walks; objects are still freed by
their reference counts as usual, only cyclic garbage among the frozen ones waits.

A saver holds the freeze from its first put (the graphs are compiled and the process
loaded by then) until it is closed: the first put of the process runs one full
collection first (so no garbage of before is kept), then `gc.freeze()`; when the last
saver that holds it closes, `gc.unfreeze()` gives the objects back to the oldest
generation, and what became garbage meanwhile is collected as usual. A process that
disabled the collector, or froze objects itself, is left alone: it manages its
collector. The option `gc_freeze=False` turns this off for a saver (docs/langgraph.md,
"Options and limits").
"""

from __future__ import annotations

import gc
import threading

__all__ = ["hold", "holders", "release"]

_lock = threading.Lock()
_holders: set[int] = set()  # the ids of the open savers that hold the freeze
_collected = False  # the process's one full collection before a first freeze was run


def hold(owner: object) -> bool:
    """Freeze what is alive now, or count `owner` as one more holder of the freeze already
    there (once per owner). False (nothing held) when the process manages its collector
    itself: it disabled the collector, or froze objects of its own."""
    global _collected
    with _lock:
        if _holders:
            _holders.add(id(owner))
            return True
        if not gc.isenabled() or gc.get_freeze_count():
            return False
        if not _collected:  # once: a later freeze keeps the garbage it finds only until its release
            gc.collect()
            _collected = True
        gc.freeze()
        _holders.add(id(owner))
        return True


def release(owner: object) -> None:
    """`owner` (a saver) lets go of the freeze; the last holder unfreezes."""
    with _lock:
        if id(owner) not in _holders:
            return
        _holders.discard(id(owner))
        if not _holders:
            gc.unfreeze()


def holders() -> int:
    """How many open savers hold the freeze."""
    return len(_holders)
