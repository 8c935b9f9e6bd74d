"""The state a LangGraph saver shares among its parts (`SaverCore`): its checkpoints in
memory and their values, the thread leases it holds, and the steps of a put that make a
checkpoint's objects and seal it. `CkptSaver` (saver.py) is the LangGraph API on top; the
committer, the recovery and the thread operations are parts that work on this core.

Locks: `_lock` (an RLock) guards every structure here; `_commit_mutex` is held by whoever
commits (the commit thread, a flush, a delete), which takes `_lock` only briefly. A
thread's lease is taken before `_lock`, never while holding it (`_owning`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.encoding import ValueCodec
from ckptcli.adapters.langgraph.holder import Lease, LeaseHolder
from ckptcli.adapters.langgraph.journal import Journal, open_regular, own_dir
from ckptcli.adapters.langgraph.layout import MSGPACK, SectionWriter, Write
from ckptcli.adapters.langgraph.leases import LEASE, lease_name
from ckptcli.adapters.langgraph.readback import Readback
from ckptcli.adapters.langgraph.resident import COMMITTED, EMPTY, LEAF, MISSING, SEALED, Blob, Entry, ItemLog, StagedSource, Staging
from ckptcli.adapters.langgraph.retention import TTL
from ckptcli.adapters.langgraph.store_index import StoreIndex
from ckptcli.errors import CkptError, StoreIOError, ThreadConflictError, UsageError
from ckptcli.format.manifest import Manifest
from ckptcli.format.values import Decoder
from ckptcli.store.backend import Mark
from ckptcli.store.layout import journal_dir, lease_dir, want_dir
from ckptcli.store.repository import Store

__all__ = ["Copies", "CopyRows", "Keys", "SaverCore"]

Keys = list[tuple[str, str, str]]  # (thread, namespace, checkpoint id) of several checkpoints
#: a thread's committed checkpoints to copy: (key, parent id, created, manifest), parents first
Copies = list[tuple[tuple[str, str, str], str | None, int, Manifest]]
CopyRows = list[tuple[tuple[str, str, str], str | None, int, bytes]]  # the same, manifest ids


class SaverCore:
    """What every part of a LangGraph saver works on (module docstring). The hooks at the
    end are `CkptSaver`'s, which hands them to its parts."""

    # set by CkptSaver.__init__ before the rest (`_init_memory`, `_init_leases`)
    serde: SerializerProtocol
    store: Store
    ttl: TTL | None
    clock: Callable[[], int]
    fsync: str
    commit_interval: float
    seal_idle: float
    resident_threads: int
    max_backlog: int
    max_journal_bytes: int
    backlog_waits: int
    trust_identity: bool
    _journal: Journal
    _thread: threading.Thread
    _stop: threading.Event
    _mark: Mark
    _local_root: Path
    _remote: bool  # the store is on object storage: leases serialize this host only (crosshost.py)

    def _init_memory(self, trust_identity: bool | str) -> None:
        self._sweeping: set[str] = set()  # threads `_holding` holds the lease of, for a delete (not let go by commits)
        self._copying = 0  # copies between their snapshot of the source and their publishing (`copy_thread`)
        self._garbage = 0  # checkpoints removed from the store whose objects no collection has looked at yet (`ThreadOps.delete`)
        self._room = threading.Condition(threading.Lock())  # puts over the bound wait here for a commit
        self._pressed = False  # a put waits: commit everything now
        self._used: OrderedDict[str, None] = OrderedDict()  # threads in memory, least recently used first
        self.evicted = 0  # threads dropped from memory so far (for tests and benchmarks)
        self._lock = threading.RLock()
        self._commit_mutex = threading.Lock()
        self._staging = Staging(self.store)
        self._writer = SectionWriter(self._staging)
        self._codec = codec = ValueCodec(self.serde, trust_identity, self._writer, self._staging)
        self._check_items, self._fast = codec.check_items, codec.fast
        # the codec's calls of the put path, bound once (no attribute hop per channel)
        self._blob_from_value = codec.blob_from_value
        self._blob_ev = codec.blob_ev
        self._entries: dict[tuple[str, str, str], Entry] = {}
        self._open: dict[tuple[str, str, str], Entry] = {}  # the entries not committed yet
        self._by_thread: dict[str, dict[str, dict[str, Entry]]] = {}  # thread -> ns -> id -> entry
        self._blobs: dict[tuple[str, str, str, Any], Blob] = {}
        # per thread, the logs of its subgraph namespaces that hold LangGraph's objects: let go of when
        # the thread is read at its root again (a new run, which LangGraph starts from get_tuple)
        self._sub_objs: dict[str, weakref.WeakSet[ItemLog]] = {}
        self._readback = readback = Readback(self.store, self._writer, self._blobs, self._fast)
        self._lists = readback.lists
        # reading back, bound once: the put and read paths call these for every checkpoint
        self._load = readback.load
        self._load_blobs = readback.load_blobs
        self._index = StoreIndex(self.store)
        self._orphan_writes: dict[tuple[str, str, str], dict[tuple[str, int], Write]] = {}
        #: delete records whose store copies are not removed yet (carried into new journals)
        self._pending_deletes: list[dict[str, Any]] = []
        self._queue: list[tuple[bytes, bytes, Entry, int]] = []  # (manifest id, manifest bytes, entry, rev)
        self._ready: list[Entry] = []  # to seal: their pending writes are complete
        self._seq = 0
        self._closed = False
        self._error: BaseException | None = None

    def _init_leases(self, lease_timeout: float) -> None:
        root = self._local_root  # the store's directory, or this host's journal directory of a remote store (hostdir.py)
        self._jdir = journal_dir(root)
        own_dir(self._jdir)
        for d in (lease_dir(root), want_dir(root)):
            own_dir(d)
        self.lease_timeout = lease_timeout
        self._holder = LeaseHolder(root, lease_timeout)
        self._leases: dict[str, Lease] = {}  # the threads this saver holds
        self._yielding: set[str] = set()  # held threads being handed over to another process (`Committer.hand_over`)
        self._seen: dict[str, bytes] = {}  # lease name -> the token this saver's view of the thread is at
        self._fence: dict[str, set[str]] = {}  # thread -> checkpoints a run here may have read stale
        self._bases: dict[str, bytes | None] = {}  # remote store: thread -> its `latest` as this saver's view has it (crosshost.py)
        self._claiming = [threading.Lock() for _ in range(16)]  # by thread: one claim at a time
        try:
            for path in self._holder.lease_dir.iterdir():  # before the index: what it holds is at least this
                fd = open_regular(path)
                if isinstance(fd, str):
                    continue  # no lease (a FIFO, a directory...): `ckpt doctor` names it
                try:
                    raw = os.pread(fd, LEASE.size, 0)
                finally:
                    os.close(fd)
                if len(raw) == LEASE.size and raw[0] == 0:
                    self._seen[path.name] = raw[1:]
        except OSError as exc:
            raise StoreIOError(f"cannot read the thread leases in {self._jdir}: {exc.strerror}") from None

    # -- hooks: CkptSaver's, handed to its parts ------------------------------------------------------
    def flush(self) -> None:
        raise NotImplementedError

    def sweep_ttl(self) -> Sequence[str]:
        raise NotImplementedError

    def _commit_locked(self) -> None:
        raise NotImplementedError

    def _rotate(self, new: Journal) -> None:
        raise NotImplementedError

    def _seal_ready(self) -> None:
        raise NotImplementedError

    def _recover_dead(self) -> None:
        raise NotImplementedError

    def _copy_manifests(self, rows: CopyRows, strict: bool = False) -> Copies | None:
        raise NotImplementedError

    def _delete_from_store(
        self, keys: Keys, threads: set[str], ids: set[bytes] | None = None, siblings: dict[Any, list[bytes]] | None = None
    ) -> None:
        raise NotImplementedError

    def _store_heads(self, threads: Sequence[str]) -> dict[str, bytes | None]:
        """Each thread's `latest` ref in the store (crosshost.store_heads; CkptSaver)."""
        raise NotImplementedError

    def _moved_elsewhere(self, thread: str, head: bytes | None) -> bool:
        """Whether another host committed `head` to `thread` (crosshost.moved_elsewhere; CkptSaver)."""
        raise NotImplementedError

    def _check(self) -> None:
        if self._closed:
            raise UsageError("this CkptSaver is closed")
        if self._error is not None:
            err, self._error = self._error, None
            if isinstance(err, CkptError):
                raise err
            raise StoreIOError(f"committing LangGraph checkpoints to {self.store.location} failed: {err}") from err

    def _seal_all(self) -> None:
        for e in sorted(self._uncommitted(), key=lambda e: e.seq):
            if e.state == LEAF:
                self._seal(e)

    def _uncommitted(self) -> list[Entry]:
        return list(self._open.values())

    @contextlib.contextmanager
    def _owning(
        self, thread: str, write: bool, target: str | None = None, child: tuple[str, str] | None = None, within_run: bool = False
    ) -> Iterator[None]:
        """Hold thread `thread`'s lease and the saver's lock. The lease is taken first,
        without the lock: waiting for another process's saver to hand the thread over
        must not stop this saver's commit thread from handing over its own. `child`: the
        (namespace, id) of the checkpoint a put of a child of `target` makes.
        `within_run`: a read inside a run (a subgraph's), which keeps what the run read
        before fenced; any other read starts from the thread as it is now."""
        while True:
            if thread not in self._leases:
                self._claim(thread, write or within_run)
            self._lock.acquire()
            if thread in self._leases and thread not in self._yielding:
                break
            yielding = thread in self._yielding
            self._lock.release()  # released by the commit thread meanwhile (or being handed over): again
            if yielding:
                time.sleep(0.001)
        try:
            if not write:
                if not within_run:
                    self._fence.pop(thread, None)  # a read: the run sees the thread as it is now
            else:
                fence = self._fence.get(thread)
                # a put with no parent read its namespace empty: a fork if it has checkpoints now
                if fence is not None and (
                    target in fence if target is not None else child is not None and bool(self._thread_entries(thread).get(child[0]))
                ):
                    if child is not None:
                        # the pending writes of the refused checkpoint are refused too, and
                        # those that came before it dropped: kept, they would wait for it,
                        # holding the thread (never handed over) for good
                        self._fence[thread].add(child[1])
                        self._orphan_writes.pop((thread, *child), None)
                    what = f"to its checkpoint {target}"
                    if target is None and child is not None:
                        what = f"a first checkpoint to namespace {child[0]!r} (read empty)"
                    raise ThreadConflictError(
                        f"thread {thread!r} was extended by another process after this saver read it: writing {what} would fork it",
                        hint=(
                            "nothing of this write was stored; run the turn again (it reads the thread as it is now), "
                            "one run at a time per thread"
                        ),
                    )
                self._mark_dirty(self._leases[thread])
            yield
        finally:
            self._lock.release()

    def _claim(self, thread: str, write: bool, wait: bool = True) -> None:
        """Take thread `thread`'s lease (asking its holder to hand it over, and waiting),
        then read the thread again from the store if another process committed to it
        since this saver last held it. `write`: a write or a subgraph's read, in the
        middle of a run that read the thread before the other process wrote; that fences
        off the checkpoints this saver knew, and the namespaces it knew empty (a put with
        no parent there would start a second root)."""
        name = lease_name(thread)
        with self._claiming[int(name[:4], 16) % len(self._claiming)]:  # one claim of a thread at a time here
            if thread not in self._leases:
                self._claim_locked(thread, name, write, wait)

    def _claim_locked(self, thread: str, name: str, write: bool, wait: bool = True) -> None:
        if self._closed:
            raise UsageError("this CkptSaver is closed")
        fd = self._holder.take(thread, name, wait)
        if fd < 0:
            return  # held by another process's saver: the caller goes without
        try:
            raw = os.pread(fd, LEASE.size, 0)
            dirty = len(raw) == LEASE.size and raw[0] != 0
            token = raw[1:] if len(raw) == LEASE.size else b""
            if dirty:  # its last holder died before committing it: its journal has the rest
                self._recover_dead()
            heads = self._store_heads([thread]) if self._remote else {}  # another host's commits (crosshost.py)
            with self._lock:
                lease = Lease(fd, name)
                lease.dirty = dirty
                # no token: a lease no saver wrote, or made again after its thread was
                # deleted and the lease removed (`_drop_lease`): what this saver has of
                # the thread may be from before the delete
                fresh = not token and not dirty and bool(self._thread_entries(thread))
                elsewhere = bool(heads) and self._moved_elsewhere(thread, heads[thread])
                if dirty or fresh or elsewhere or token != self._seen.get(name, b""):
                    known = {cid for ids in self._thread_entries(thread).values() for cid in ids}
                    self._reload_thread(thread)
                    if write:  # what the run read (nothing, if it read the thread empty) is stale
                        self._fence.setdefault(thread, set()).update(known)  # until a read starts anew (`_owning`)
                if heads:  # what this saver's commits of the thread must find in the store (crosshost.py)
                    self._bases[thread] = heads[thread]
                if fresh:  # read again: a token of its own, so that it is not read again at each take
                    with contextlib.suppress(OSError):
                        new_token = os.urandom(16)
                        os.pwrite(fd, LEASE.pack(0, new_token), 0)
                        token = new_token
                self._seen[name] = token
                self._leases[thread] = lease
        except BaseException:
            os.close(fd)
            raise

    def _drop_lease(self, thread: str) -> None:
        """Thread `thread` was deleted under its lease (caller holds the lock) and this
        saver has nothing of it: remove its lease file, unless another process's saver
        waits for it. Removed while the flock is held: a saver that waited on it finds it
        gone once it has it and opens the one at the path; one that read the thread
        before finds no token there, and reads it again (`_claim_locked`)."""
        lease = self._leases.get(thread)
        if (
            lease is None
            or self._thread_entries(thread)
            or any(key[0] == thread for key in self._orphan_writes)
            or self._holder.requests(lease.name)
        ):
            return
        path = self._holder.lease_dir / lease.name
        try:
            st, mine = os.lstat(path), os.fstat(lease.fd)
            if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
                return
            path.unlink()
        except OSError:
            return
        del self._leases[thread]
        self._seen.pop(lease.name, None)
        with contextlib.suppress(OSError):
            os.close(lease.fd)

    def _mark_dirty(self, lease: Lease) -> None:
        """Say in the lease file that this saver has puts of the thread not committed yet
        (caller holds the lock), so that whoever takes the thread after a crash of this
        process replays this saver's journal first."""
        lease.wrote = True
        if not lease.dirty:
            try:
                os.pwrite(lease.fd, LEASE.pack(1, self._seen.get(lease.name, b"").ljust(16, b"\0")), 0)
            except OSError as exc:
                raise StoreIOError(f"cannot write the thread lease {lease.name} in {self._holder.lease_dir}: {exc.strerror}") from None
            lease.dirty = True

    def _release_leases(self, everything: bool = False) -> None:
        """Let go of the threads this saver has committed all of (caller holds the lock):
        a new token tells the next holder to read the thread again. `everything`: all of
        them (closing); one with puts not committed stays marked dirty."""
        if not self._leases:
            return
        # pending writes whose checkpoint is not here (its put on its way, or refused, or
        # never to come: a run that failed) hold a thread, but not from another process
        # that asks for it: the put, if it comes, takes the thread back
        orphans = {key[0] for key in self._orphan_writes} - self._yielding
        busy = {key[0] for key in self._open} | orphans | self._sweeping
        for thread in [t for t in self._leases if everything or t not in busy]:
            lease = self._leases.pop(thread)
            if thread not in busy and (lease.wrote or lease.dirty):
                token = os.urandom(16)
                with contextlib.suppress(OSError):
                    os.pwrite(lease.fd, LEASE.pack(0, token), 0)
                    self._seen[lease.name] = token
            with contextlib.suppress(OSError):
                os.close(lease.fd)

    def _reload_thread(self, thread: str) -> None:
        """Forget what this saver has of a thread (all of it committed: it did not hold
        the thread) and read the thread's checkpoints from the store again (caller holds
        the lock)."""
        for ids in list(self._thread_entries(thread).values()):
            for e in list(ids.values()):
                self._forget_entry(e)
        for bkey in [b for b in self._blobs if b[0] == thread]:
            del self._blobs[bkey]
        self._used.pop(thread, None)
        # the objects other processes committed, and where they are now: a delete or prune
        # elsewhere rewrites packs, and an object index read before would point into one gone
        self.store.refresh_index()
        self._load_index(thread)

    def _load_index(self, thread: str | None = None) -> None:
        best = {key: max(revs, key=lambda r: (r[0], r[1])) for key, revs in self._index.keys(thread).items()}
        for key, (rev, created, cid, k) in sorted(best.items(), key=lambda kv: (kv[1][1], kv[0][2])):
            e = self._new_entry(key, k.parent_id)
            e.state, e.manifest, e.committed, e.committed_rev, e.rev, e.created_ns, e.loaded = COMMITTED, cid, cid, rev, rev, created, False
            del self._open[key]

    def _new_entry(self, key: tuple[str, str, str], parent: str | None) -> Entry:
        self._seq += 1
        e = Entry(key, parent, self._seq)
        old = self._entries.get(key)
        if old is not None:
            self._forget_entry(old)
        self._entries[key] = e
        self._open[key] = e  # not committed yet
        self._by_thread.setdefault(key[0], {}).setdefault(key[1], {})[key[2]] = e
        return e

    def _forget_entry(self, e: Entry) -> None:
        self._entries.pop(e.key, None)
        self._open.pop(e.key, None)
        by_ns = self._by_thread.get(e.key[0], {})
        ids = by_ns.get(e.key[1], {})
        ids.pop(e.key[2], None)
        if not ids:
            by_ns.pop(e.key[1], None)
        if not by_ns:
            self._by_thread.pop(e.key[0], None)

    def _blob(self, e: Entry, ch: str) -> Blob:
        """The value of channel `ch` at checkpoint `e`'s version of it."""
        self._load(e)  # a committed checkpoint's versions are read from the store first
        thread, ns, _cid = e.key
        ver = e.versions.get(ch)
        bkey = (thread, ns, ch, ver)
        b = self._blobs.get(bkey)
        if b is not None:
            return b
        # written by an ancestor, or committed: the nearest one in the store holding it
        cur: Entry | None = e
        while cur is not None:
            if cur.committed is not None:
                self._load(cur)
                if cur.versions.get(ch) == ver:
                    self._load_blobs(cur)
                    b = self._blobs.get(bkey)
                    if b is not None:
                        return b
            cur = self._entries.get((thread, ns, cur.parent)) if cur.parent else None
        return EMPTY

    def _prepare(self, e: Entry) -> None:
        """Make the objects of a checkpoint's state (every section but its events), right
        when it is put: its list values' trees are then exactly as long as its values.
        Caller holds the lock."""
        self._load(e)
        assert e.skeleton is not None and e.metadata is not None
        channel_evs: dict[str, bytes] = {}
        types: dict[str, str] = {}
        tools: list[bytes] = []
        for ch in e.versions:
            b = self._blob(e, ch)
            if b.empty:
                continue
            channel_evs[ch] = self._blob_ev(b)
            if b.log is not None:
                if b.tools_ev is not None and b.tools_ev != b"\x90":
                    tools.append(b.tools_ev)
            elif b.typed is not None and b.typed[0] != MSGPACK:
                types[ch] = b.typed[0]
        tools_ev: bytes | None = None
        if len(tools) == 1:
            tools_ev = tools[0]
        elif tools:  # tool calls in several list channels: one log of them all
            records: list[Any] = []
            for ev in tools:
                records.extend(Decoder(StagedSource(self._staging)).decode(ev))
            tools_ev = self._writer.enc.encode_root(records)
        plan_extra: list[dict[str, Any]] = []
        if "__pregel_tasks" in channel_evs:
            plan_extra = layout.send_tasks(layout.typed_view(self._blob(e, "__pregel_tasks").to_typed()))
        e.md_view = layout.typed_view(e.metadata)
        e.prepared = self._writer.sections(
            skeleton=e.skeleton, metadata=e.metadata, channel_evs=channel_evs, channel_types=types,
            tools_ev=tools_ev, versions=e.versions, plan_extra=plan_extra, metadata_view=e.md_view,
        )  # fmt: skip

    def _seal(self, e: Entry) -> None:
        """Make the manifest of a checkpoint whose pending writes are complete (its
        events), and queue it for the committer. Caller holds the lock."""
        thread, ns, cid = e.key
        parent = self._entries.get((thread, ns, e.parent)) if e.parent else None
        if parent is not None and parent.state == LEAF and parent.seq < e.seq:
            self._seal(parent)  # parents first: this manifest names its parent's
        if e.prepared is None:
            self._prepare(e)
        assert e.prepared is not None and e.metadata is not None
        p = e.prepared
        sections = {
            "memory": p["memory"],
            "plan": p["plan"],
            "tools": p["tools"],
            "events": self._writer.events(e.writes.values()),
            layout.EXT_SECTION: p[layout.EXT_SECTION],
        }
        parents = []
        if parent is not None and parent.manifest is not None:
            parents.append(parent.manifest)
        if e.manifest is not None and e.manifest not in parents:
            parents.append(e.manifest)  # the revision this one replaces
        rev = e.rev + 1
        m = layout.manifest_for(
            thread, ns, cid, e.parent, sections,
            metadata_view=e.md_view, parents=parents, created_ns=e.created_ns, rev=rev, format_version=self.store.version,
        )  # fmt: skip
        data = m.encode()
        mid = hashlib.sha256(data).digest()
        e.manifest, e.rev, e.state = mid, rev, SEALED
        self._queue.append((mid, data, e, rev))

    def _settle(self, e: Entry) -> None:
        """A checkpoint `e` was put: its parent has a child, and its grandparent, whose
        child has a child too, is ready to be sealed. (Not the parent yet: with LangGraph's
        asynchronous durability, the pending writes of a checkpoint may arrive just after
        its child is put.)"""
        thread, ns, _cid = e.key
        parent = self._entries.get((thread, ns, e.parent)) if e.parent else None
        if parent is None:
            return
        parent.has_child = True
        grand = self._entries.get((thread, ns, parent.parent)) if parent.parent else None
        if grand is not None and grand.state == LEAF and grand.has_child:
            self._ready.append(grand)  # sealed by the commit thread, soon (or by a flush)

    @property
    def backlog(self) -> int:
        """How many checkpoints are put but not committed to the store yet (what
        `max_backlog` bounds; `backlog_waits` counts the puts that waited for it)."""
        return len(self._open)

    def _over_bound(self) -> bool:
        n = len(self._open)
        return n >= self.max_backlog or (n > 0 and self._journal.size > self.max_journal_bytes)

    def _wait_for_room(self) -> None:
        """Back-pressure: while the checkpoints not committed are over the bounds
        (`max_backlog`, `max_journal_bytes`), wait for the commit thread, which then
        commits everything at once. Not on the commit thread, nor with the saver's lock
        held (the commit thread needs it)."""
        if not self._over_bound() or threading.current_thread() is self._thread or self._lock._is_owned():  # type: ignore[attr-defined]
            return
        self.backlog_waits += 1
        with self._room:
            while self._over_bound() and not self._closed and self._error is None and self._thread.is_alive():
                self._pressed = True
                self._room.wait(0.05)

    def _use(self, thread: str) -> None:
        used = self._used
        if thread in used:
            used.move_to_end(thread)
        else:
            used[thread] = None

    def _apply_put(self, rec: dict[str, Any], blobs: dict[str, Blob] | None, where: str = "put") -> Entry:
        """Install a checkpoint: a live put with its blobs made, or a journal record."""
        thread, ns, cid, parent_id = rec["t"], rec["n"], rec["i"], rec["p"]
        key = (thread, ns, cid)
        old = self._entries.get(key)
        if blobs is None and old is not None:
            return old  # replayed: in the store already, or earlier in the journals
        self._use(thread)
        if old is not None:
            self._load(old)  # its pending writes stay with the new revision
        parent = self._entries.get((thread, ns, parent_id)) if parent_id else None
        if blobs is None:
            for ch, (ver, spec) in rec["b"].items():
                base = self._blob(parent, ch) if spec[0] == "l" and spec[1] and parent is not None else None
                self._blobs[(thread, ns, ch, ver)] = self._codec.blob_from_spec(spec, base, where)
        else:
            for ch, (ver, _spec) in rec["b"].items():
                self._blobs[(thread, ns, ch, ver)] = blobs[ch]
        e = self._new_entry(key, parent_id)
        e.created_ns = rec["c"]
        e.skeleton, e.metadata = (rec["k"][0], rec["k"][1]), (rec["m"][0], rec["m"][1])
        e.versions = dict(rec["v"])
        if old is not None:  # the same checkpoint put again: a new revision; writes stay
            e.writes.update(old.writes)
            e.manifest, e.committed, e.committed_rev, e.rev = old.manifest, old.committed, old.committed_rev, old.rev
        orphans = self._orphan_writes.pop(key, None)
        if orphans:
            e.writes.update(orphans)
        self._prepare(e)
        self._settle(e)
        return e

    def _apply_writes(self, key: tuple[str, str, str], writes: list[Write]) -> None:
        self._use(key[0])
        e = self._entries.get(key)
        if e is not None:
            self._load(e)
            target = e.writes
        else:
            target = self._orphan_writes.setdefault(key, {})
        changed = False
        for w in writes:
            k = (w.task_id, w.idx)
            old = target.get(k)
            if old is not None and (w.idx >= 0 or (old.channel, old.typed, old.task_path) == (w.channel, w.typed, w.task_path)):
                continue  # as LangGraph's own savers: a regular write is kept once (a special one is replaced)
            target[k] = w
            changed = True
        if e is not None and changed:
            e.touched = time.monotonic()
            if e.state != LEAF:
                e.state = LEAF  # sealed before this write came: it is written again (a revision)
                self._open[e.key] = e

    def _drop(self, keys: Keys) -> None:
        gone: set[tuple[str, str, str]] = set(keys)
        for key in keys:
            e = self._entries.get(key)
            if e is not None:
                self._forget_entry(e)
            self._orphan_writes.pop(key, None)
        self._queue = [q for q in self._queue if q[2].key not in gone]
        emptied = {(k[0], k[1]) for k in keys if not self._thread_entries(k[0]).get(k[1])}
        for bkey in [b for b in self._blobs if (b[0], b[1]) in emptied]:
            del self._blobs[bkey]

    def _thread_entries(self, thread: str) -> dict[str, dict[str, Entry]]:
        return self._by_thread.get(thread, {})

    def _plain_metadata(self, e: Entry) -> Any:
        if e.md_plain is MISSING:
            self._load(e)
            assert e.metadata is not None
            e.md_plain = self.serde.loads_typed(e.metadata)
        return e.md_plain

    def _matches(self, e: Entry, flt: dict[str, Any]) -> bool:
        md = self._plain_metadata(e)
        return isinstance(md, dict) and all(md.get(k) == v for k, v in flt.items())

    @contextlib.contextmanager
    def _holding(self, threads: set[str], wait: bool = True, wrote: bool = True) -> Iterator[Sequence[str]]:
        """Hold the leases of `threads` for a delete, as a put holds one: each thread is
        read again first if another process wrote it, and once they are let go the other
        processes' savers read them again (a new token), so none of them goes on serving
        or extending a deleted checkpoint from its memory (`wrote` False: only if this
        saver wrote them meanwhile). Yields the threads held: all of them, or with
        `wait` False those no other process's saver holds."""
        held: list[str] = []
        try:
            for thread in sorted(threads):
                while True:
                    self._claim(thread, False, wait=wait)
                    with self._lock:
                        if thread in self._leases:  # not let go by the commit thread meanwhile
                            self._sweeping.add(thread)
                            held.append(thread)
                            break
                    if not wait:
                        break  # another process's saver holds it: in use
            yield held
        finally:
            with self._lock:
                for thread in held:
                    lease = self._leases.get(thread)
                    if lease is not None and wrote:
                        lease.wrote = True
                    self._sweeping.discard(thread)
                    if wrote:
                        self._drop_lease(thread)  # deleted: its lease goes too
                self._release_leases()

    @staticmethod
    def _writes_record(key: tuple[str, str, str], writes: list[Write]) -> dict[str, Any]:
        return {
            "op": "w",
            "t": key[0],
            "n": key[1],
            "i": key[2],
            "w": [[w.task_id, w.channel, w.typed[0], w.typed[1], w.task_path, w.idx, w.ts] for w in writes],
        }
