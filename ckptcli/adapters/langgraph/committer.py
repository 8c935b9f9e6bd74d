"""The LangGraph saver's committer (`Committer`): the background thread that seals the
checkpoints whose pending writes are complete and commits what is sealed every
`commit_interval` (one pack, one index, the manifests made durable together, the refs),
starts the journal again with what is not committed, hands threads over to other
processes' savers, and drops from memory what the next puts do not build on.
docs/langgraph.md ("Durability: what a crash can lose") is the user's view.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ckptcli.adapters.langgraph import crosshost, layout
from ckptcli.adapters.langgraph.core import SaverCore
from ckptcli.adapters.langgraph.gil import Breather
from ckptcli.adapters.langgraph.journal import Journal, frame
from ckptcli.adapters.langgraph.leases import request_lease
from ckptcli.adapters.langgraph.resident import COMMITTED, LEAF, SEALED, Entry, StagedSource, Staging, evict, trim
from ckptcli.errors import CkptError, StoreIOError
from ckptcli.format.manifest import Manifest
from ckptcli.store.repository import Store

__all__ = ["Committer", "check_batch_after_prune"]

TICK = 0.02  # how often the commit thread looks for checkpoints ready to seal


def check_batch_after_prune(store: Store, staging: Staging, batch: list[tuple[bytes, bytes]]) -> None:
    """Another process pruned the store while these checkpoints waited: check that
    every object they need is still there before committing them."""
    from ckptcli.format.walk import walk_checkpoint

    source = StagedSource(staging)
    for mid, data in batch:
        try:
            walk_checkpoint(source, Manifest.decode(data, f"manifest {mid.hex()[:12]}"))  # type: ignore[arg-type]
        except CkptError as exc:
            raise StoreIOError(
                f"the store at {store.location} was pruned while this saver was writing to it, "
                f"and objects its new checkpoints need are gone ({exc})",
                hint="stop the application, reopen the saver (its journal is replayed), and prune with saver.prune or when no saver runs",
            ) from None


class Committer:
    """The commit thread's work on a saver's core (`run` is the thread). `rotate_bytes`:
    the journal is started again after a commit once it is this big."""

    def __init__(self, saver: SaverCore, rotate_bytes: int) -> None:
        self.saver = saver
        self.rotate_bytes = rotate_bytes
        self.retired: list[tuple[Journal, Journal]] = []  # (old, new) of a rotation, until the old one is deleted (`retire`)

    def run(self) -> None:
        """The commit thread: seals what is ready every tick (one checkpoint at a time,
        letting the interpreter go in between, so a put never waits long for it: much of
        this runs while puts wait for their fsync), and commits every commit_interval."""
        tick = min(self.saver.commit_interval, TICK)
        last = time.monotonic()
        swept = last  # the first TTL sweep one interval after opening, as each after it
        while not self.saver._stop.wait(tick):
            try:
                if self.saver.ttl is not None and time.monotonic() - swept >= self.saver.ttl.sweep_interval_s:
                    swept = time.monotonic()
                    self.saver.sweep_ttl()
                self.saver._journal.sync()
                if self.saver._leases:
                    self.hand_over()
                self.saver._seal_ready()
                pressed = self.saver._pressed and self.saver._over_bound()  # (a put that waited may have found room since)
                if not pressed and time.monotonic() - last < self.saver.commit_interval:
                    continue
                last = time.monotonic()
                with self.saver._commit_mutex:
                    with self.saver._lock:
                        if self.saver._closed:
                            return
                        self.saver._pressed = False
                        if pressed:  # puts wait for room: everything goes now, but the heads in use
                            self.seal_pressed()
                        else:
                            self.seal_idle()
                    self.saver._commit_locked()
                self.saver._journal.reserve()
            except Exception as exc:  # noqa: BLE001 - reported by the saver's next call
                self.saver._error = exc

    def seal_ready(self) -> None:
        """Seal what was ready when the call began, one checkpoint at a time. Not what
        puts make ready meanwhile: during a burst that would go on for as long as the
        burst, and the journal sync and the commit of this tick would never come."""
        with self.saver._lock:
            todo, self.saver._ready = self.saver._ready, []
        breathe = Breather()
        for i, e in enumerate(todo):
            with self.saver._lock:
                if self.saver._closed:
                    self.saver._ready[:0] = todo[i:]
                    return
                if e.state == LEAF and self.saver._entries.get(e.key) is e:
                    self.saver._seal(e)
            breathe()

    def seal_all(self) -> None:
        """Seal every checkpoint not sealed yet (caller holds the lock), pausing as
        `seal_ready` does (the lock stays held: puts wait, an event loop does not)."""
        breathe = Breather()
        for e in sorted(self.saver._uncommitted(), key=lambda e: e.seq):
            if e.state == LEAF:
                self.saver._seal(e)
                breathe()

    def seal_pressed(self) -> None:
        """Under back-pressure (puts wait for room; caller holds the lock): seal every
        checkpoint not sealed yet but the heads in use, the checkpoints without a child
        put or written to within the commit interval. A head's pending writes (the next
        step's tasks) come after it: sealed now, it would be written again as a revision
        once they do, a second manifest for the commit thread, which is behind already
        (a sixth of the manifests of bench/langgraph_async.py's 50 conversations). Nor
        their parents: LangGraph sends a step's writes beside the put of the checkpoint
        after it, not before, so a head's parent may still get its own (what `_settle`
        waits for too). What is left makes room: two per thread and namespace in use.
        Unless they alone are half of `max_backlog`, or the journal is what is over its
        bound: then everything is sealed (`seal_all`), so that a commit always makes room."""
        sv = self.saver
        todo = sorted(sv._uncommitted(), key=lambda e: e.seq)
        now = time.monotonic()
        heads = [e for e in todo if e.state == LEAF and not e.has_child and now - e.touched < sv.commit_interval]
        parents = [sv._entries.get((e.key[0], e.key[1], e.parent)) if e.parent else None for e in heads]
        busy = {id(e): e for e in [*heads, *parents] if e is not None and e.state == LEAF}
        if len(busy) * 2 >= sv.max_backlog or sv._journal.size > sv.max_journal_bytes:
            self.seal_all()
            return
        skip = busy.keys()
        breathe = Breather()
        for e in todo:
            if e.state == LEAF and id(e) not in skip:
                sv._seal(e)
                breathe()

    def seal_idle(self) -> None:
        """Seal what has a child and got no write for a commit interval, and what has
        been idle for `seal_idle` seconds (so that `ckpt ls` shows it)."""
        now = time.monotonic()
        breathe = Breather()
        for e in sorted(self.saver._uncommitted(), key=lambda e: e.seq):
            if e.state != LEAF:
                continue
            quiet = now - e.touched
            if (e.has_child and quiet >= self.saver.commit_interval) or (self.saver.seal_idle and quiet >= self.saver.seal_idle):
                self.saver._seal(e)
                breathe()

    def commit_locked(self) -> None:
        """Commit what is sealed (the caller holds the commit mutex): one pack and index
        for the objects, then the manifests, then the refs; then the journal starts again
        if it has grown. On failure nothing is lost: it all stays queued and journaled."""
        with self.saver._lock:
            batch, self.saver._queue = self.saver._queue, []
            objects, self.saver._staging.objects = self.saver._staging.objects, {}
            self.saver._staging.inflight = objects
            if not batch and not objects:
                self.saver._release_leases()
                if len(self.saver._used) > self.saver.resident_threads:
                    self.evict()
                return
        store = self.saver.store
        remote = self.saver._remote
        heads: dict[str, bytes | None] = {}
        lost: dict[str, list[bytes]] = {}  # remote: threads whose ref another host moved in the middle (crosshost.undo)
        try:
            with store.backend.lock("store", shared=True):
                before = set(store.backend.list("index"))
                txn = store.transaction()
                breathe = Breather()
                try:
                    for oid, (typ, content) in objects.items():
                        txn.put(oid, content, typ)
                        breathe()  # let an event loop or a put waiting for the interpreter in (this loop is Python)
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
                if remote and batch:  # the check as late as it can be: the objects are in, not the manifests yet
                    batch, heads = self.refuse_forks(batch)
                if before - set(store.backend.list("index")):
                    check_batch_after_prune(self.saver.store, self.saver._staging, [(mid, data) for mid, data, _e, _rev in batch])
                newest: dict[Any, tuple[tuple[int, int], bytes]] = {}  # a thread's latest is its root head
                # the manifests of the batch made durable together (one file-system sync,
                # not one per manifest: write_atomic_many), before the refs name them. No
                # `exists` asked first (a system call per manifest, each a wait for the
                # interpreter beside an event loop's workers): one already there (a commit
                # tried again after a failure) is replaced by the same bytes, its id's
                store.backend.write_atomic_many([(f"manifests/{mid.hex()}", data) for mid, data, _e, _rev in batch])
                for mid, _data, e, _rev in batch:
                    subj = layout.subject_for(e.key[0])
                    order = (0 if e.key[1] else 1, e.created_ns)
                    if subj not in newest or order >= newest[subj][0]:
                        newest[subj] = (order, mid)
                if remote:
                    for (root, created), mid in newest.values():  # by compare-and-swap from the head the check read (crosshost.py)
                        thread = next(e.key[0] for m, _d, e, _r in batch if m == mid)
                        if not crosshost.advance(self.saver, thread, mid, created, not root, heads.get(thread)):
                            lost[thread] = [m for m, _d, e, _r in batch if e.key[0] == thread]
                else:  # every thread's ref of the commit under one refs lock, made durable together
                    store.advance_latest_many(
                        [(subj, mid, created, not root) for subj, ((root, created), mid) in newest.items()], log=False
                    )  # a thread's history is its chain: no reflog entry per commit
        except BaseException:
            with self.saver._lock:
                self.saver._queue[:0] = batch
                objects.update(self.saver._staging.objects)
                self.saver._staging.objects = objects
                self.saver._staging.inflight = {}
            raise
        if lost:  # their manifests are removed again, their checkpoints dropped (not committed)
            batch = [b for b in batch if b[2].key[0] not in lost]
            crosshost.undo(self.saver, lost)
        fresh = (
            Journal(self.saver._jdir, self.saver.fsync)
            if self.saver._journal.size > min(self.rotate_bytes, self.saver.max_journal_bytes // 2) and not self.saver._closed
            else None
        )
        with self.saver._lock:
            self.saver._staging.inflight = {}
            known, rows = self.saver._index.known, self.saver._index.rows
            for mid, _data, e, rev in batch:
                if known is not None:  # what the store holds, without reading it back (`StoreIndex.thread_keys`, `ThreadOps.store_ids`)
                    known[mid] = e.key[0]
                    rows.setdefault(e.key[0], {})[mid] = (
                        rev,
                        e.created_ns,
                        (e.key[0], e.key[1], e.key[2], e.parent, rev),
                    )  # a store_index.Row
                if rev >= e.committed_rev:
                    e.committed, e.committed_rev = mid, rev
                if e.manifest == mid and e.state == SEALED:
                    e.state = COMMITTED
                    if self.saver._open.get(e.key) is e:
                        del self.saver._open[e.key]
            if fresh is not None:
                self.saver._rotate(fresh)
            trim({e.key[0] for _mid, _data, e, _rev in batch}, self.saver._by_thread, self.saver._blobs)
            self.saver._release_leases()
            if len(self.saver._used) > self.saver.resident_threads:
                self.evict()
        self.retire()
        with self.saver._room:
            self.saver._room.notify_all()

    def refuse_forks(
        self, batch: list[tuple[bytes, bytes, Entry, int]]
    ) -> tuple[list[tuple[bytes, bytes, Entry, int]], dict[str, bytes | None]]:
        """On a store on object storage: the batch without the checkpoints of threads
        another host committed to meanwhile (`crosshost.refuse_forks`), and the heads of
        the batch's threads the check read (what `crosshost.advance` swaps from)."""
        heads = self.saver._store_heads(sorted({e.key[0] for _mid, _data, e, _rev in batch}))
        with self.saver._lock:
            forked = crosshost.refuse_forks(self.saver, heads)
        return ([b for b in batch if b[2].key[0] not in forked] if forked else batch), heads

    def evict(self) -> None:
        """Drop the least recently used threads beyond `resident_threads` whose checkpoints
        are all committed from memory (`resident.evict`; caller holds the lock)."""
        sv = self.saver
        busy = {key[0] for key in sv._open} | {key[0] for key in sv._orphan_writes}
        sv.evicted += evict(sv._used, busy, sv.resident_threads, sv._by_thread, sv._blobs, sv._sub_objs)

    def rotate(self, new: Journal) -> None:
        """Go on in journal `new`, started with what is not committed yet (caller holds the
        saver's lock). The old one is deleted by `retire`, once `new` is synced, after the
        caller lets go of the lock: the sync (an fdatasync, ~10-35 ms on a busy disk) no
        longer holds up every put and read meanwhile. Until then both journals are there
        and locked by this process; after a crash recovery replays them oldest first (by
        mtime: nothing is appended to the old one after the carry-over is appended to the
        new one, both under the lock), so the new one's records come last, as they would
        in one journal."""
        data = b"".join(frame(rec) for rec in self.carry_over())
        if data:
            new.append(data)
        old, self.saver._journal = self.saver._journal, new
        self.retired.append((old, new))

    def retire(self) -> None:
        """Delete the journals `rotate` left behind, each once the journal that replaced it
        is synced (without the saver's lock; the commit mutex held: one commit at a time)."""
        while self.retired:
            old, new = self.retired[0]
            new.sync()
            old.close(delete=True)
            self.retired.pop(0)

    def carry_over(self) -> list[dict[str, Any]]:
        recs: list[dict[str, Any]] = list(self.saver._pending_deletes)  # first: they came before what is open now
        for e in sorted(self.saver._open.values(), key=lambda e: e.seq):
            if e.committed is None:
                recs.append(self.put_record(e))
            if e.writes:
                recs.append(self.saver._writes_record(e.key, list(e.writes.values())))
        for key, writes in self.saver._orphan_writes.items():
            recs.append(self.saver._writes_record(key, list(writes.values())))
        return recs

    def put_record(self, e: Entry) -> dict[str, Any]:
        thread, ns, cid = e.key
        parent = self.saver._entries.get((thread, ns, e.parent)) if e.parent else None
        specs: dict[str, Any] = {}
        for ch, ver in e.versions.items():
            b = self.saver._blobs.get((thread, ns, ch, ver))
            if b is None:
                continue  # in the store: found through an ancestor
            pb = self.saver._blobs.get((thread, ns, ch, parent.versions.get(ch))) if parent is not None else None
            if pb is b:
                continue  # inherited: found again through the parent
            if b.empty:
                specs[ch] = [ver, ["e"]]
            elif b.log is not None:
                if pb is not None and pb.log is not None and pb.n <= b.n and pb.log.raw[: pb.n] == b.log.raw[: pb.n]:
                    specs[ch] = [ver, ["l", pb.n, b.log.raw[pb.n : b.n]]]
                else:
                    specs[ch] = [ver, ["l", 0, b.log.raw[: b.n]]]
            else:
                assert b.typed is not None
                specs[ch] = [ver, ["t", b.typed[0], b.typed[1]]]
        assert e.skeleton is not None and e.metadata is not None
        return {
            "op": "p",
            "t": thread,
            "n": ns,
            "i": cid,
            "p": e.parent,
            "c": e.created_ns,
            "k": list(e.skeleton),
            "m": list(e.metadata),
            "v": e.versions,
            "b": specs,
        }

    def hand_over(self) -> None:
        """Commit the threads another process's saver asked for, which lets their leases
        go (the commit thread, every tick while this saver holds any)."""
        wdir = self.saver._holder.want_dir
        try:
            names = os.listdir(wdir)
        except OSError:
            return
        if not names:
            return
        with self.saver._lock:
            held = {lease.name: t for t, lease in self.saver._leases.items()}
        asked = {request_lease(n) for n in names} & set(held)
        if not asked:
            return
        wanted = {held[name] for name in asked if self.saver._holder.requests(name, names) or self.saver._holder.old_request(wdir / name)}
        if not wanted:
            return
        with self.saver._commit_mutex:
            with self.saver._lock:
                if self.saver._closed:
                    return
                # no put or read of them here until they are committed and let go: a run
                # that puts back to back would keep them busy (not let go) for ever
                self.saver._yielding |= wanted
                for e in sorted(self.saver._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] in wanted and e.state == LEAF:
                        self.saver._seal(e)  # early: a pending write that comes later makes a revision
            try:
                self.saver._commit_locked()
            finally:
                with self.saver._lock:
                    self.saver._yielding -= wanted
