"""Savers on several hosts sharing a store on object storage: the thread leases are this
host's files (hostdir.py), so they serialize the processes of one host only. What the
saver does across hosts, through the store: when it takes up a thread (a claim) it reads
the thread's `latest` ref, reads the thread again when another host moved it
(`moved_elsewhere`), and notes the ref as its view of the thread has it (the thread's
base, `SaverCore._bases`). A commit of the thread's new checkpoints then checks, once
their objects are in the store, that the ref is still at the base (`refuse_forks`), and
moves it by compare-and-swap from that very value (`advance`): when another host moved
it meanwhile, the new checkpoints are not committed, or, when it moved between the check
and the swap, their manifests are removed again (`undo`); either way they are dropped
from the saver and its journal with a warning naming the thread (`drop_forked`). A
journal replayed on open is checked the same way (`stale_replays`). The one window left
is a saver killed between its manifests and its swap. docs/langgraph.md ("A store on
object storage") is the user's view."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable
from typing import Any

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.core import SaverCore
from ckptcli.adapters.langgraph.journal import frame
from ckptcli.adapters.langgraph.resident import Entry
from ckptcli.errors import CkptError

__all__ = [
    "ThreadForkWarning",
    "advance",
    "drop_forked",
    "moved_elsewhere",
    "refuse_forks",
    "stale_replays",
    "store_heads",
    "undo",
]


class ThreadForkWarning(UserWarning):
    """Checkpoints of a thread put on this host were dropped, not committed: another host
    committed to the thread meanwhile and they would have forked it. Given to Python's
    `warnings` (shown on stderr once per thread by default) besides `store.warnings`."""


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
    """The manifests of `thread` this saver's view of it holds (caller holds the lock):
    its checkpoints in memory, committed here or read from the store. Not every manifest
    of the thread the saver has listed (`StoreIndex.rows`): reading another thread again
    lists the new manifests of every thread, another host's commits to this one too."""
    known: set[bytes] = set()
    for ids in saver._thread_entries(thread).values():
        for e in ids.values():
            known.update(m for m in (e.committed, e.manifest) if m is not None)
    return known


def moved_elsewhere(saver: SaverCore, thread: str, head: bytes | None) -> bool:
    """Whether the thread's store head `head` is a checkpoint this saver does not know:
    another host committed to it (caller holds the lock)."""
    return head is not None and head not in _known(saver, thread)


def refuse_forks(saver: SaverCore, heads: dict[str, bytes | None]) -> set[str]:
    """The threads of `heads` (their store heads, read just before a commit) another host
    committed to since this saver's view of them: the ref is not at the thread's base
    (`SaverCore._bases`, noted when the saver took the thread up and at each of its
    commits), or, for a thread with no base, names a checkpoint the saver does not know.
    Their checkpoints not committed yet are dropped (`drop_forked`). Caller holds the
    commit mutex and the lock."""
    forked = set()
    for t, head in heads.items():
        base = saver._bases.get(t, _NONE)
        if (head != base) if base is not _NONE else moved_elsewhere(saver, t, head):
            forked.add(t)
    drop_forked(saver, forked, heads)
    return forked


_NONE: Any = object()  # no base noted


def drop_forked(saver: SaverCore, forked: Iterable[str], heads: dict[str, bytes | None]) -> None:
    """Drop the checkpoints of threads `forked` not committed yet from the saver (and
    from its journal: a deletion record, so that a replay does not bring them back), say
    it once per thread as a warning, and fence them off: the next put that builds on
    them raises ThreadConflictError. The thread is read again from the store (the other
    host's history) and its base is the head read (`heads`). Caller holds the lock."""
    for thread in sorted(forked):
        keys = [key for key in saver._open if key[0] == thread]
        keys += [key for key in saver._orphan_writes if key[0] == thread and key not in keys]
        dropped = {key[2] for key in keys}
        known = {cid for ids in saver._thread_entries(thread).values() for cid in ids}
        saver._journal.append(frame({"op": "d", "k": [list(k) for k in keys], "threads": [], "ids": []}))
        saver._drop(keys)
        saver._reload_thread(thread)
        saver._bases[thread] = heads.get(thread)
        saver._fence.setdefault(thread, set()).update(known | dropped)
        message = (
            f"thread {thread!r} was extended from another host while this saver was extending it: "
            f"{len(dropped)} checkpoint(s) put here were not committed (they would fork the thread) and are dropped; "
            "serve each thread from one host at a time (route requests by thread id)"
        )
        shown = saver.store.on_warning is None and message not in saver.store.warnings  # a library: nothing else would show it
        saver.store.warn(message)
        if shown:
            # under -W error (pytest's filterwarnings = error) warn raises: that must not
            # break the commit it is part of, which may run on the saver's commit thread
            with contextlib.suppress(ThreadForkWarning):
                warnings.warn(message, ThreadForkWarning, stacklevel=2)


def advance(saver: SaverCore, thread: str, mid: bytes, created: int, nested: bool, head: bytes | None) -> bool:
    """Move thread `thread`'s latest to its new head `mid` (created at `created`;
    `nested`: of a subgraph's namespace only) as `Store.advance_latest` does (not back
    to an older checkpoint), by compare-and-swap from `head`, the value the commit's
    check read: False, and nothing moved, when another host moved the ref since (the
    new checkpoints fork the thread: `undo`). No reflog entry: a thread's history is
    its chain of checkpoints. The base of the thread becomes the ref as left."""
    from ckptcli.store.refs import RefMovedError

    try:
        moved = saver.store.advance_latest(
            layout.subject_for(thread), mid, created, nested=nested, reason="langgraph", log=False, only_from=head
        )
    except RefMovedError:
        return False
    # not moved: the ref is still `head`, which ranks above `mid`
    saver._bases[thread] = mid if moved else head
    return True


def undo(saver: SaverCore, lost: dict[str, list[bytes]]) -> None:
    """Threads whose ref another host moved between a commit's check and its swap
    (`advance`): remove the manifests the commit wrote for them (`lost`: thread ->
    manifest ids; their objects go at the next collection), then drop them as
    `drop_forked` does. Caller holds the commit mutex, not the lock."""
    from ckptcli.store.prune import forget_checkpoints

    forget_checkpoints(saver.store, {mid for mids in lost.values() for mid in mids}, siblings=lambda _subject: [])
    heads = store_heads(saver, sorted(lost))
    with saver._lock:
        drop_forked(saver, lost, heads)


def stale_replays(saver: SaverCore, threads: Iterable[str]) -> set[str]:
    """Drop (`drop_forked`) and return, of `threads`, those whose checkpoints replayed from a dead saver's journal (not
    committed yet) another host extended meanwhile: the thread's head in the store is
    not one of them nor one they build on, and was made after the first of them (so not
    a checkpoint this host went back from, as a run from an older checkpoint does).
    Caller holds the lock."""
    out: set[str] = set()
    heads = store_heads(saver, threads)
    for thread, head in heads.items():
        if head is None:
            continue
        opened = [e for key, e in saver._open.items() if key[0] == thread and e.committed is None]
        if not opened:
            continue
        line: set[bytes] = set()
        for e in opened:  # the replayed checkpoints and their ancestors in the store
            cur: Entry | None = e
            while cur is not None:
                if cur.committed is not None:
                    if cur.committed in line:
                        break
                    line.add(cur.committed)
                if cur.manifest is not None:
                    line.add(cur.manifest)
                cur = saver._entries.get((thread, cur.key[1], cur.parent)) if cur.parent else None
        if head in line:
            continue
        row = saver._index.rows.get(thread, {}).get(head)
        created = row[1] if row is not None else None
        if created is None:
            try:
                created = saver.store.manifest(head).created_ns
            except CkptError:
                continue  # damaged: `ckpt verify` says so
        if created > min(e.created_ns for e in opened):
            out.add(thread)
    saver._bases.update(heads)
    drop_forked(saver, out, heads)
    return out
