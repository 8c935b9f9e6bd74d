"""What a LangGraph saver does to whole threads (`ThreadOps`): delete a thread or the
checkpoints of runs, prune, the thread TTL sweep, copy a thread, and start a thread from
any checkpoint of the store. Each works under the threads' leases, as a put does, so that
other processes' savers read the threads again. docs/langgraph.md ("Prune and delete",
"Thread TTL", "Copy a thread", "Time travel and fork").
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.committer import check_batch_after_prune
from ckptcli.adapters.langgraph.core import Copies, CopyRows, Keys, SaverCore
from ckptcli.adapters.langgraph.journal import frame
from ckptcli.adapters.langgraph.layout import MSGPACK, Key
from ckptcli.adapters.langgraph.resident import COMMITTED, LEAF, Blob
from ckptcli.errors import CorruptError, InvalidInputError
from ckptcli.format.msgpack_view import from_view

__all__ = ["ThreadOps"]

SWEEP_BATCH = 64  # expired threads removed from the store together by a TTL sweep (one removal each batch; commits between)
Siblings = dict[Any, list[bytes]]  # subject -> the store's checkpoints of its thread (`ThreadOps.siblings`)
#: and the values this saver has of it in memory, by (namespace, channel, version)
CopiedBlobs = dict[tuple[str, str, Any], Blob]


class ThreadOps:
    """Deletes, prunes, sweeps and copies threads of a saver's core. `collect_min`:
    deleted checkpoints left to collect before a delete collects (`delete`)."""

    def __init__(self, saver: SaverCore, collect_min: int) -> None:
        self.saver = saver
        self.collect_min = collect_min

    def delete_thread(self, thread_id: str) -> None:
        """`CkptSaver.delete_thread`."""
        thread = str(thread_id)
        with self.saver._lock:
            self.saver._check()
        with self.saver._holding({thread}):
            with self.saver._lock:
                keys = [e.key for ids in self.saver._thread_entries(thread).values() for e in ids.values()]
            self.delete(keys, {thread})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`CkptSaver.delete_for_runs`."""
        wanted = set(run_ids)
        if not wanted:
            return

        def chosen() -> Keys:
            with self.saver._lock:
                self.saver._check()
                keys: Keys = []
                for e in list(self.saver._entries.values()):
                    md = self.saver._plain_metadata(e)
                    if isinstance(md, dict) and md.get("run_id") in wanted:
                        keys.append(e.key)
                return keys

        with self.saver._holding({key[0] for key in chosen()}):
            self.delete(chosen(), set())

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`CkptSaver.prune`."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"unknown prune strategy {strategy!r}", hint="use keep_latest or delete")
        threads = {str(t) for t in thread_ids}
        with self.saver._lock:
            self.saver._check()
        with self.saver._holding(threads):
            with self.saver._lock:
                keys = self.prune_keys(threads, strategy)
            self.delete(keys, threads if strategy == "delete" else set(), collect=True)

    def prune_keys(self, threads: set[str], strategy: str) -> Keys:
        """What `prune` removes of `threads` (caller holds the lock)."""
        keys: Keys = []
        kept: Keys = []
        for thread in threads:
            for ids in self.saver._thread_entries(thread).values():
                newest = max(ids) if strategy == "keep_latest" else None
                keys.extend(e.key for cid, e in ids.items() if cid != newest)
                kept.extend(e.key for cid, e in ids.items() if cid == newest)
        if kept:
            rebuilt_from = self.rebuilt_from(kept)
            keys = [k for k in keys if k not in rebuilt_from]
        return keys

    def sweep_ttl(self) -> Sequence[str]:
        """`CkptSaver.sweep_ttl`."""
        from ckptcli.adapters.langgraph.retention import effective_ttl
        from ckptcli.store import catalog

        ttl = self.saver.ttl
        if ttl is None:
            return []
        now = self.saver.clock()
        with self.saver._lock:
            self.saver._check()
            newest: dict[str, int] = {}
            own: dict[str, tuple[int, tuple[float, str | None]]] = {}  # thread -> its newest own TTL
            for row in catalog.rows(self.saver.store).values():
                found = layout.key_of_row(row)
                if found is None:
                    continue
                k, summary = found
                newest[k.thread_id] = max(newest.get(k.thread_id, 0), summary.created_ns)
                mine = layout.thread_ttl(summary.labels)
                if mine is not None and summary.created_ns >= own.get(k.thread_id, (-1, mine))[0]:
                    own[k.thread_id] = (summary.created_ns, mine)
            for (thread, _ns, _cid), e in self.saver._entries.items():
                newest[thread] = max(newest.get(thread, 0), e.created_ns)
            busy = {key[0] for key in self.saver._open} | {key[0] for key in self.saver._orphan_writes}
        expired: list[tuple[int, str, float, str]] = []
        for t, ts in newest.items():
            ttl_s, strategy = effective_ttl(own[t][1] if t in own else None, ttl.ttl_s, ttl.strategy)
            if ttl_s is not None and now - ts > ttl_s * 1e9 and t not in busy:
                expired.append((ts, t, ttl_s, strategy))
        expired.sort()
        todo = expired[: ttl.sweep_limit]
        swept: list[str] = []
        for at in range(0, len(todo), SWEEP_BATCH):
            swept.extend(self.sweep_threads(todo[at : at + SWEEP_BATCH], now))
        if swept:
            self.collect()  # one collection for the whole sweep, its lock let go for the walk
        return swept

    def sweep_threads(self, batch: Sequence[tuple[int, str, float, str]], now: int) -> Sequence[str]:
        """Delete or cut down the expired threads of `batch` (ts, thread, ttl, strategy)
        that are still expired and not in use, in one removal from the store (`delete`;
        the objects are left for the sweep's collection)."""
        rules = {t: (ttl_s, strategy) for _ts, t, ttl_s, strategy in batch}
        with self.saver._holding(set(rules), wait=False) as held:
            if not held:
                return []  # other processes' savers hold them all: in use
            swept: list[str] = []
            keys: Keys = []
            deleted: set[str] = set()
            with self.saver._lock:
                busy = {key[0] for key in self.saver._open} | {key[0] for key in self.saver._orphan_writes}
                for thread in held:
                    ttl_s, strategy = rules[thread]
                    entries = [e for ids in self.saver._thread_entries(thread).values() for e in ids.values()]
                    if not entries or thread in busy or now - max(e.created_ns for e in entries) <= ttl_s * 1e9:
                        continue  # written meanwhile: no longer expired
                    mine = [e.key for e in entries] if strategy == "delete" else self.prune_keys({thread}, strategy)
                    if not mine:
                        continue  # cut down already
                    keys += mine
                    swept.append(thread)
                    if strategy == "delete":
                        deleted.add(thread)
            self.delete(keys, deleted, collect=False)
            return swept

    def rebuilt_from(self, kept: Keys) -> dict[tuple[str, str, str], str]:
        """The checkpoints that `kept` ones rebuild their delta channels from (see
        `langgraph_retention.needed`). Caller holds the lock."""
        from ckptcli.adapters.langgraph import retention

        stored_cache: dict[tuple[str, str, str], set[str]] = {}

        def parent(key: tuple[str, str, str]) -> str | None:
            e = self.saver._entries.get(key)
            return e.parent if e is not None and e.parent and (key[0], key[1], e.parent) in self.saver._entries else None

        def stored(key: tuple[str, str, str]) -> set[str]:
            got = stored_cache.get(key)
            if got is None:
                e = self.saver._entries[key]
                self.saver._load(e)
                if e.committed is not None and not e.blobs_loaded:  # the memory section's channel names, no value decoded
                    memory = self.saver.store.manifest(e.committed).sections.get("memory")
                    got = (
                        retention.map_keys(self.saver.store, memory, f"checkpoint {e.committed.hex()[:12]} section memory")
                        if memory
                        else set()
                    )
                else:
                    got = {ch for ch in e.versions if not self.saver._blob(e, ch).empty}
                stored_cache[key] = got
            return got

        def rebuilt(key: tuple[str, str, str]) -> set[str]:
            e = self.saver._entries[key]
            md = self.saver._plain_metadata(e)
            counters = md.get(retention.DELTA_COUNTERS) if isinstance(md, dict) else None
            if not isinstance(counters, dict):
                return set()
            self.saver._load(e)
            return {ch for ch in counters if ch in e.versions} - stored(key)

        return retention.needed(kept, parent, rebuilt, stored)

    def delete(self, keys: Keys, threads: set[str], collect: bool | None = None) -> None:
        """Forget `keys` (journaled first, so that a crash cannot bring them back), then
        remove their manifests, every revision, from the store. Everything that stays is
        committed first, and puts wait meanwhile; all of that reads only what is deleted
        (`prune.forget_checkpoints`), so its cost follows the deleted checkpoints, not
        the store. The objects no other checkpoint needs go in a collection (`collect`):
        now when `collect`; when None, once the checkpoints removed since the last one
        are a quarter of those the saver knows (so a delete costs, amortized, what it
        deletes); never when False (the caller collects)."""
        if not keys and not threads:
            return
        with self.saver._commit_mutex:
            with self.saver._lock:
                ids = self.store_ids(keys, threads)
                rec = {"op": "d", "k": [list(k) for k in keys], "threads": sorted(threads), "ids": sorted(ids)}
                self.saver._journal.append(frame(rec))
                # carried into every new journal until the store's copies are gone: a crash
                # in between must not bring the thread back
                self.saver._pending_deletes.append(rec)
                self.saver._drop(keys)
                self.saver._seal_all()
                self.saver._commit_locked()
                siblings = self.siblings(keys, threads)
            # the store's copies go without the lock: the entries are gone from memory
            # already, and commits wait (the commit mutex); other threads go on
            self.saver._delete_from_store(keys, threads, ids, siblings)
            with self.saver._lock:
                self.saver._pending_deletes.remove(rec)
                if collect is None:
                    collect = self.saver._garbage >= max(self.collect_min, len(self.saver._index.known or ()) // 4)
            if collect and self.saver._garbage:
                self.collect(mutex_held=True)

    def collect(self, mutex_held: bool = False) -> None:
        """Remove the objects no checkpoint of the store needs (`prune.collect`), after
        deletes that left them. The commit mutex is held (commits wait), but not the
        saver's lock while the store is walked: reads and puts of other threads go on.
        Meanwhile puts stage every object they make, even one the store has (it may be
        one that goes: the commit after writes what went); the old packs are deleted
        under the lock, when no read is under way."""
        from ckptcli.store.prune import collect

        with contextlib.nullcontext() if mutex_held else self.saver._commit_mutex:
            with self.saver._lock:
                self.saver._codec.item_memo.clear()  # their EVs may name objects that go now: made again when seen again
                self.saver._writer.forget()
                self.saver._staging.dedupe = False
                writer = None if self.saver._copying else self.saver._mark
            try:
                # a copy of a thread under way names the objects of its snapshot without
                # holding anything: they stay, as for another live saver
                gc = collect(self.saver.store, writer=writer, finishing=lambda: self.saver._lock)
            finally:
                with self.saver._lock:
                    self.saver._staging.dedupe = True
            if not gc.writers_alive:
                self.saver._garbage = 0

    def store_ids(self, keys: Keys, threads: set[str]) -> set[bytes]:
        """The store's checkpoints (every revision) of `keys` and of `threads`: what the
        saver knows of those threads' manifests, brought up to date (`StoreIndex.thread_keys`: one
        listing of the manifests' names, and only those new since it last looked read)."""
        gone: set[tuple[str, str, str]] = set(keys)
        wanted = set(threads) | {key[0] for key in keys}
        if not wanted:
            return set()
        if self.saver._index.known is None:
            self.saver._index.keys()  # the first look: the catalog
        else:
            self.saver._index.thread_keys(min(wanted))  # brings `_known_rows` up to date, for every thread
        out: set[bytes] = set()
        for thread in wanted:
            for cid, (_rev, _created, kt) in self.saver._index.rows.get(thread, {}).items():
                if thread in threads or kt[:3] in gone:
                    out.add(cid)
        return out

    def siblings(self, keys: Keys, threads: set[str]) -> Siblings:
        """The store's checkpoints of the threads of `keys` and `threads`, by subject: what
        a thread's latest moves to when its head is deleted (caller holds the lock)."""
        out: Siblings = {}
        for thread in set(threads) | {key[0] for key in keys}:
            out.setdefault(layout.subject_for(thread), []).extend(self.saver._index.rows.get(thread, {}))
        return out

    def delete_from_store(self, keys: Keys, threads: set[str], ids: set[bytes] | None = None, siblings: Siblings | None = None) -> None:
        """Remove the store's checkpoints `ids` (those of `keys` and `threads` now, for a
        delete journaled before the ids were): their manifests and refs; their objects
        are left for the next collection (`delete`)."""
        from ckptcli.store.prune import forget_checkpoints

        if ids is None or siblings is None:
            with self.saver._lock:
                ids = self.store_ids(keys, threads) if ids is None else ids
                siblings = self.siblings(keys, threads)
        ids = {cid for cid in ids if self.saver.store.backend.exists(f"manifests/{cid.hex()}")}  # a replay: some may be gone
        if ids:
            got = siblings
            removed = forget_checkpoints(self.saver.store, ids, siblings=lambda subject: got.get(subject, []))
            with self.saver._lock:
                self.saver._garbage += len(removed)
                for thread in threads | {key[0] for key in keys}:  # their refs moved here: the next commit checks
                    self.saver._bases.pop(thread, None)  # against what the saver knows (crosshost.py)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`CkptSaver.copy_thread`."""
        src, dst = str(source_thread_id), str(target_thread_id)
        with self.saver._lock:
            self.saver._check()
        if src == dst:
            return  # a thread is a copy of itself
        with self.saver._holding({src}, wrote=False):
            rows, blobs, index = self.copy_snapshot(src)
        try:
            items = self.saver._copy_manifests(rows)
            if (
                items is None
            ):  # a checkpoint of the snapshot was removed since (the source deleted or pruned): as it is now, read under its lease
                with self.saver._holding({src}, wrote=False):
                    rows, blobs, index = self.copy_snapshot(src, again=True)
                    items = self.saver._copy_manifests(rows, strict=True)
            if items:
                with self.saver._holding({dst}):  # the target's other readers read it again
                    self.copy_publish(items, blobs, index, dst)
        finally:
            with self.saver._lock:
                self.saver._copying -= 1

    def copy_snapshot(self, src: str, again: bool = False) -> tuple[CopyRows, CopiedBlobs, set[str]]:
        """Commit what this saver has of thread `src` not committed yet, then take its
        committed checkpoints: (key, parent id, created, id of the newest revision),
        parents first; the values of them this saver has in memory (shared with the
        copies, as the store's objects are); and the store's index files then. The
        caller holds the lease; from here until `copy_thread` is done, removals by this
        saver leave objects (`_copying`: not counted `again`)."""
        with self.saver._commit_mutex:
            with self.saver._lock:
                self.saver._check()
                for e in sorted(self.saver._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] == src and e.state == LEAF:
                        self.saver._seal(e)  # early, as a hand-over does: a write that comes later makes a revision
            self.saver._commit_locked()
            with self.saver._lock:
                entries = sorted((e for ids in self.saver._thread_entries(src).values() for e in ids.values()), key=lambda e: e.seq)
                rows = [(e.key, e.parent, e.created_ns, e.committed) for e in entries if e.committed is not None]
                blobs = {(ns, ch, ver): b for (t, ns, ch, ver), b in self.saver._blobs.items() if t == src}
                index = set(self.saver.store.backend.list("index"))
                if not again:
                    self.saver._copying += 1
                return rows, blobs, index

    def copy_manifests(self, rows: CopyRows, strict: bool = False) -> Copies | None:
        """The manifests of a snapshot's checkpoints (immutable: read without the lease),
        or None when one of them is gone (`strict`: NotFoundError, which says which)."""
        from ckptcli.errors import NotFoundError

        try:
            return [(key, parent, created, self.saver.store.manifest(cid)) for key, parent, created, cid in rows]
        except NotFoundError:
            if strict:
                raise
            return None

    def copy_publish(self, items: Copies, blobs: CopiedBlobs, index: set[str], dst: str) -> None:
        """Write the copies of `items` to thread `dst` as new manifests (the caller holds
        the target's lease), made durable together as a commit's are, then move the
        target's latest and take them as this saver's checkpoints of the thread. `index`:
        the store's index files when the snapshot was taken (one gone: a removal
        rewrote the packs, and every object the copies need is checked first)."""
        import dataclasses

        subject = layout.subject_for(dst)
        with self.saver._commit_mutex:
            with self.saver._lock:
                self.saver._check()
                had = bool(self.saver._thread_entries(dst))
                for e in sorted(self.saver._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] == dst and e.state == LEAF:
                        self.saver._seal(e)  # the target's own puts first: a copy of the same checkpoint is a revision of it
            if had:
                self.saver._commit_locked()
            with self.saver._lock:
                # a crash from here on leaves copies in the store that no journal names:
                # the dirty lease makes the next saver to take the thread read it again
                self.saver._mark_dirty(self.saver._leases[dst])
                made: dict[tuple[str, str], bytes] = {}
                batch: list[tuple[bytes, bytes, Key, int]] = []
                for (_src, ns, cid), parent_id, created, m in items:
                    old = self.saver._entries.get((dst, ns, cid))
                    rev = old.rev + 1 if old is not None else 1
                    parents: list[bytes] = []
                    if parent_id:
                        pmid = made.get((ns, parent_id))
                        if pmid is None:
                            pe = self.saver._entries.get((dst, ns, parent_id))
                            pmid = pe.manifest if pe is not None else None
                        if pmid is not None:
                            parents.append(pmid)
                    if old is not None and old.manifest is not None and old.manifest not in parents:
                        parents.append(old.manifest)  # the revision this one replaces
                    copy = dataclasses.replace(
                        m, subject=subject, labels=layout.relabel(m.labels, dst, rev), parents=parents, created_ns=created
                    )
                    data = copy.encode()
                    mid = hashlib.sha256(data).digest()
                    made[(ns, cid)] = mid
                    batch.append((mid, data, Key(dst, ns, cid, parent_id, rev), created))
            store = self.saver.store
            with store.backend.lock("store", shared=True):  # no removal runs meanwhile
                if index - set(store.backend.list("index")):
                    check_batch_after_prune(self.saver.store, self.saver._staging, [(mid, data) for mid, data, _k, _c in batch])
                todo = [(f"manifests/{mid.hex()}", data) for mid, data, _k, _c in batch]
                store.backend.write_atomic_many([(n, d) for n, d in todo if not store.backend.exists(n)])
                root = [(c, mid) for mid, _d, k, c in batch if not k.ns]
                nested = not root
                created, head = max(root or [(c, mid) for mid, _d, _k, c in batch])
                store.advance_latest(subject, head, created, nested=nested, log=False)
            with self.saver._lock:
                self.saver._bases.pop(dst, None)  # its ref moved here: the next commit checks against what the saver knows (crosshost.py)
                if had:
                    self.saver._reload_thread(dst)  # its values and versions as the store has them now
                else:
                    self.saver._use(dst)
                    for (ns, ch, ver), b in blobs.items():
                        self.saver._blobs[(dst, ns, ch, ver)] = b
                    for mid, _data, k, created in batch:
                        key = (dst, k.ns, k.checkpoint_id)
                        e = self.saver._new_entry(key, k.parent_id)
                        e.state, e.manifest, e.committed, e.committed_rev, e.rev, e.created_ns, e.loaded = (
                            COMMITTED,
                            mid,
                            mid,
                            k.rev,
                            k.rev,
                            created,
                            False,
                        )
                        del self.saver._open[key]
                        self.saver._index.add(mid, k.rev, created, k)

    def thread_from(self, ref: str, thread_id: str) -> RunnableConfig:
        """`CkptSaver.thread_from`."""
        with self.saver._lock:
            self.saver._check()
        with self.saver._holding({str(thread_id)}):  # as a put: other processes' savers see the new thread
            return self.start_thread(ref, str(thread_id))

    def start_thread(self, ref: str, thread: str) -> RunnableConfig:
        from ckptcli.checkpoint import open_checkpoint

        with self.saver._lock:
            ck = open_checkpoint(ref, self.saver.store)
            if layout.EXT_SECTION not in ck.manifest.sections:
                raise InvalidInputError(f"checkpoint {ck.hex[:12]} holds no LangGraph checkpoint (no {layout.EXT_SECTION} section)")
            where = f"checkpoint {ck.hex[:12]}"
            stored = layout.read_ext(
                ck.section(layout.EXT_SECTION), ck.section("events") if "events" in ck.manifest.sections else [], where
            )
            memory = ck.section("memory")
            if type(memory) is not dict:
                raise CorruptError(f"{where}: its memory section is not a map of channels")
            cid = ck.manifest.labels.get(layout.LABEL_CHECKPOINT)
            ns = ck.manifest.labels.get(layout.LABEL_NS, "")
            if cid is None:
                raise InvalidInputError(f"{where} has no {layout.LABEL_CHECKPOINT} label")
            if (thread, ns, cid) in self.saver._entries:
                raise InvalidInputError(f"thread {thread!r} has checkpoint {cid} already", hint="give a new thread id")
            specs: dict[str, Any] = {}
            for ch, ver in stored.versions.items():
                if ch not in memory:
                    specs[ch] = [ver, ["e"]]
                    continue
                tag = stored.channel_types.get(ch, MSGPACK)
                view = memory[ch]
                if tag == MSGPACK and type(view) is list and self.saver._fast:
                    specs[ch] = [ver, ["l", 0, [from_view(v) for v in view]]]
                else:
                    typed = layout.view_typed(tag, view, f"{where} channel {ch}")
                    specs[ch] = [ver, ["t", typed[0], typed[1]]]
            rec = {
                "op": "p", "t": thread, "n": ns, "i": cid, "p": None, "c": self.saver.clock(),
                "k": list(stored.skeleton), "m": list(stored.metadata), "v": stored.versions, "b": specs,
            }  # fmt: skip
            self.saver._mark_dirty(self.saver._leases[thread])
            self.saver._journal.append(frame(rec))
            self.saver._apply_put(rec, None, where)
            if stored.writes:
                self.saver._journal.append(frame(self.saver._writes_record((thread, ns, cid), stored.writes)))
                self.saver._apply_writes((thread, ns, cid), stored.writes)
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
