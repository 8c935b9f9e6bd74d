"""Process-wide thread pools, made on first use and kept idle between calls.

A forked child gets new ones: the parent's threads do not exist in the child, and a
pool that believes it has them would never run a task.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def executor(name: str, workers: int) -> ThreadPoolExecutor:
    """The pool called `name` (its threads are named after it) of this process."""
    entry = _POOLS.get(name)
    if entry is None or entry[0] != os.getpid():
        entry = (os.getpid(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name))
        _POOLS[name] = entry
    return entry[1]
