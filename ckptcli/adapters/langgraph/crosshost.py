"""Savers on several hosts sharing a store on object storage: the thread leases are this
host's files (hostdir.py), so they serialize the processes of one host only. What the
saver does across hosts, through the store: before it extends a thread it takes (a
claim), it reads the thread's `latest` ref and reads the thread again when another host
moved it (`moved_elsewhere`); before it commits a thread's new checkpoints it reads the
ref again, and when another host committed to the thread meanwhile it does not commit
them (`refuse_forks`): they would fork the thread. The check and the commit are not one
atomic step: two hosts committing one thread within the same instant can still both get
through. docs/langgraph.md ("A store on object storage") is the user's view."""

from __future__ import annotations

from collections.abc import Iterable

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.core import SaverCore
from ckptcli.adapters.langgraph.journal import frame
from ckptcli.errors import CkptError

__all__ = ["moved_elsewhere", "refuse_forks", "store_heads"]


def store_heads(saver: SaverCore, threads: Iterable[str]) -> dict[str, bytes | None]:
    """Each thread's `latest` ref in the store (None: none, or unreadable)."""
    out: dict[str, bytes | None] = {}
    for thread in threads:
        try:
            out[thread] = saver.store.read_ref(saver.store.latest_ref(layout.subject_for(thread)))
        except CkptError:
            out[thread] = None  # damaged: `ckpt verify` says so; no sign of another host
    return out


def _known(saver: SaverCore, thread: str) -> set[bytes]:
    """The manifests of `thread` this saver wrote or read (caller holds the lock)."""
    known = set(saver._index.rows.get(thread, {}))
    for ids in saver._thread_entries(thread).values():
        for e in ids.values():
            known.update(m for m in (e.committed, e.manifest) if m is not None)
    return known


def moved_elsewhere(saver: SaverCore, thread: str, head: bytes | None) -> bool:
    """Whether the thread's store head `head` is a checkpoint this saver does not know:
    another host committed to it (caller holds the lock)."""
    return head is not None and head not in _known(saver, thread)


def refuse_forks(saver: SaverCore, heads: dict[str, bytes | None]) -> set[str]:
    """The threads of `heads` (their store heads read just before a commit) another host
    committed to since this saver read them. Their checkpoints not committed yet are
    dropped here (and in the journal: a deletion record, so that a replay does not bring
    them back), said once as a warning, and fenced off: the next put that builds on them
    raises ThreadConflictError. The thread is read again from the store (the other
    host's history). Caller holds the commit mutex and the lock."""
    forked = {t for t, head in heads.items() if moved_elsewhere(saver, t, head)}
    for thread in sorted(forked):
        keys = [key for key in saver._open if key[0] == thread]
        keys += [key for key in saver._orphan_writes if key[0] == thread and key not in keys]
        dropped = {key[2] for key in keys}
        known = {cid for ids in saver._thread_entries(thread).values() for cid in ids}
        saver._journal.append(frame({"op": "d", "k": [list(k) for k in keys], "threads": [], "ids": []}))
        saver._drop(keys)
        saver._reload_thread(thread)
        saver._fence.setdefault(thread, set()).update(known | dropped)
        saver.store.warn(
            f"thread {thread!r} was extended from another host while this saver was extending it: "
            f"{len(dropped)} checkpoint(s) put here were not committed (they would fork the thread) and are dropped; "
            "serve each thread from one host at a time (route requests by thread id)"
        )
    return forked
