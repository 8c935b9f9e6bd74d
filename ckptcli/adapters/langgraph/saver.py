"""ckpt as a LangGraph checkpointer: `CkptSaver`, sync and async; this module is the LangGraph
API on top of the saver's parts.

    from ckptcli.adapters.langgraph.saver import CkptSaver
    graph = builder.compile(checkpointer=CkptSaver.open(".ckpt"))

Every LangGraph checkpoint becomes one ckpt checkpoint of subject ``agent:<thread>``
(layout.py). docs/langgraph.md is the guide, docs/design.md ("The LangGraph saver") the
design, formats/langgraph-journal.md the journal. Invariants: a `put` or `put_writes` is
in this saver's journal before it returns (synced as `fsync` says) and visible to every
read at once; a thread is held by one saver at a time (holder.py), and a write from a run
that read the thread before another process extended it is refused (ThreadConflictError),
never a silent fork. The parts, lowest first: resident, lazy, encoding, readback,
store_index, holder, core, committer, recovery, threadops."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ckptcli.adapters.langgraph import crosshost, gcfreeze
from ckptcli.adapters.langgraph.committer import Committer
from ckptcli.adapters.langgraph.core import Copies, CopyRows, Keys, SaverCore
from ckptcli.adapters.langgraph.encoding import fingerprint
from ckptcli.adapters.langgraph.gil import breathing
from ckptcli.adapters.langgraph.hostdir import ToMake, is_remote, local_root, store_for
from ckptcli.adapters.langgraph.journal import JOURNAL_DIR as JOURNAL_DIR
from ckptcli.adapters.langgraph.journal import Journal
from ckptcli.adapters.langgraph.journal import Journal as _Journal  # noqa: F401 - tests import it from here
from ckptcli.adapters.langgraph.journal import frame as _frame
from ckptcli.adapters.langgraph.journal import read_journal as read_journal
from ckptcli.adapters.langgraph.layout import Write
from ckptcli.adapters.langgraph.lazy import LazyValues
from ckptcli.adapters.langgraph.leases import lease_name as _lease_name  # noqa: F401 - tests import it from here
from ckptcli.adapters.langgraph.recovery import Deletions, Recovery, lock_orphan_journals, recover_lock
from ckptcli.adapters.langgraph.resident import COMMITTED as COMMITTED
from ckptcli.adapters.langgraph.resident import LEAF as LEAF
from ckptcli.adapters.langgraph.resident import MISSING, Blob, Entry, ItemLog
from ckptcli.adapters.langgraph.retention import TTL
from ckptcli.adapters.langgraph.threadops import Siblings, ThreadOps
from ckptcli.errors import InvalidInputError
from ckptcli.store.repository import Store

__all__ = ["CkptSaver"]

FSYNC_POLICIES = ("always", "batch", "never")
ROTATE_BYTES = 4 * 1024 * 1024  # the journal is started again after a commit once it is this big (read when a saver opens)
_COLLECT_MIN = 512  # deleted checkpoints left to collect before a delete collects (`ThreadOps.delete`; read when a saver opens)
_ALIST_BATCH = 64  # tuples `alist` takes from `list` per hop to its worker thread


def _check_options(
    fsync: str, commit_interval: float, seal_idle: float, resident_threads: int, max_backlog: int, max_journal_bytes: int
) -> None:
    """InvalidInputError for a bad option of `CkptSaver`."""
    if fsync not in FSYNC_POLICIES:
        raise InvalidInputError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
    if not (commit_interval > 0 and seal_idle >= 0):
        raise InvalidInputError("commit_interval must be > 0 and seal_idle >= 0")
    if type(resident_threads) is not int or resident_threads < 0:
        raise InvalidInputError(f"resident_threads must be an integer >= 0, not {resident_threads!r}")
    for name, bound in (("max_backlog", max_backlog), ("max_journal_bytes", max_journal_bytes)):
        if type(bound) is not int or bound < 1:
            raise InvalidInputError(f"{name} must be an integer >= 1, not {bound!r}")


class CkptSaver(SaverCore, BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver backed by a ckpt store (module docstring: how).

    Args:
        store: a Store, or the path of a store directory (or of a directory holding
            ``.ckpt/``); `open` creates it when missing.
        serde: LangGraph's serializer (default JsonPlusSerializer). With the default,
            list values (messages) are stored item by item in O(new items) per put;
            any other serializer's bytes are stored whole, exactly.
        fsync: "batch" (default), "always" or "never" (module docstring).
        commit_interval: seconds between commits of sealed checkpoints to the store.
        seal_idle: seconds after which a checkpoint without a child is sealed, so that
            `ckpt ls` shows it (a later pending write makes a revision of it); 0: only
            when its child is put, and on close.
        trust_identity: True (the default): list items that are the same Python
            objects as the parent's, at the same position, are not serialized again
            if their fingerprint (the items packed natively, deep, ~1 us a message)
            is unchanged too, so an item a node edited in place is stored as edited.
            False serializes every item of every put and compares bytes (slower,
            same result). "unchecked": identity alone, no fingerprint (the fastest;
            an item edited in place is then stored as it was: only for graphs whose
            nodes never mutate state items).
        resident_threads: how many threads keep their checkpoints decoded in memory.
            Beyond that, after a commit, the threads used least recently whose
            checkpoints are all committed are dropped from memory (their records,
            values and pending writes) and read back from the store when used again,
            as after a restart: a long-running server's memory follows the threads in
            use, not every thread it ever served.
        lease_timeout: seconds to wait for another process's saver to hand a thread
            over (it does within a tick and a commit) before LockError.
        ttl: a thread time-to-live, as ``langgraph.json``'s ``checkpointer.ttl``:
            ``{"strategy": "delete" | "keep_latest", "default_ttl": minutes,
            "sweep_interval_minutes": 5, "sweep_limit": 1000}``. A thread whose last
            checkpoint is older than ``default_ttl`` is deleted, or cut down to what it
            resumes from, by the commit thread every sweep interval (`sweep_ttl`). A
            run may give its thread its own: ``thread_ttl`` (minutes, 0: never) and
            ``thread_ttl_strategy`` in its config. None (the default): threads are
            kept until deleted or pruned.
        clock: the wall clock, in nanoseconds since the epoch, that stamps puts and
            measures TTLs (`time.time_ns`; tests and simulations pass their own).
        max_backlog: back-pressure. When this many checkpoints are not committed yet
            (put, not yet in the store), or the journal has grown past
            `max_journal_bytes` with checkpoints not committed, `put` waits for the
            commit thread: it then seals and commits everything at once instead of
            waiting for the commit interval. So a burst the committer cannot keep up
            with slows the puts down a little instead of growing the journal and the
            memory without bound. Default 256.
        max_journal_bytes: the journal's bound for the back-pressure above (default
            64 MiB).
        journal_dir: for a store on object storage (``s3://...``, ``memory://...``):
            the directory on this host's disk for the journal and the thread leases
            (in its ``langgraph/``). Default: one per store URL under
            ``$XDG_STATE_HOME/ckpt/journals/`` (hostdir.py). A put is durable on this
            host once it returns; the next saver opened here with the same directory
            replays what a dead one left (for ``memory://``, which dies with its
            process, only a saver of the same process). A local store keeps them in
            itself.
        gc_freeze: True (the default): from its first put until it is closed, the
            saver keeps the objects alive at that put (the process's modules, LangGraph's
            and pydantic's, the compiled graphs) out of the cyclic garbage collector's
            full passes with `gc.freeze()`, which otherwise walk them all (50-100 ms) in
            the turn they fall into; the first put of the process runs one full
            collection before, the last saver to close runs `gc.unfreeze()`. Left alone
            in a process that disabled the collector or froze objects itself
            (gcfreeze.py). False: the collector is not touched.
    Raises:
        StoreNotFoundError, CorruptError, StoreIOError from opening the store or
        replaying a journal; InvalidInputError for a bad option (a journal_dir for a
        local store, in one, or one another store's journals are in).
    """

    def __init__(
        self,
        store: Store | ToMake | str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        fsync: str = "batch",
        commit_interval: float = 0.5,
        seal_idle: float = 1.0,
        trust_identity: bool | str = True,
        resident_threads: int = 64,
        lease_timeout: float = 30.0,
        ttl: Mapping[str, Any] | None = None,
        clock: Callable[[], int] = time.time_ns,
        max_backlog: int = 256,
        max_journal_bytes: int = 64 * 1024 * 1024,
        journal_dir: str | os.PathLike[str] | None = None,
        gc_freeze: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self.ttl = TTL.parse(ttl) if ttl is not None else None
        self.clock = clock
        _check_options(fsync, commit_interval, seal_idle, resident_threads, max_backlog, max_journal_bytes)
        self.resident_threads = resident_threads
        self.max_backlog = max_backlog
        self.max_journal_bytes = max_journal_bytes
        self.backlog_waits = 0  # puts that waited for the committer (back-pressure), for tests and benchmarks
        if trust_identity not in (True, False, "unchecked"):
            raise InvalidInputError(f"trust_identity must be True, False or 'unchecked', not {trust_identity!r}")
        if type(gc_freeze) is not bool:
            raise InvalidInputError(f"gc_freeze must be True or False, not {gc_freeze!r}")
        self._gc_pending = gc_freeze  # the hold on the collector is taken at the first put (gcfreeze.py)
        # every option is checked before the store is opened (or made, for `open`)
        self.store = store_for(store, journal_dir)
        try:
            root = local_root(self.store, journal_dir)
        except BaseException:
            if not isinstance(store, Store):
                self.store.close()
            raise
        assert root is not None
        self._local_root = root
        self._remote = is_remote(self.store)
        self.fsync = fsync
        self.commit_interval = commit_interval
        self.seal_idle = seal_idle
        self.trust_identity = bool(trust_identity)
        self._init_memory(trust_identity)
        self._init_leases(lease_timeout)
        self._committer = Committer(self, ROTATE_BYTES)
        self._recovery = Recovery(self)
        self._ops = ThreadOps(self, _COLLECT_MIN)
        self._start()

    def _start(self) -> None:
        """Mark the store as written to, replay the journals of savers that are gone, start
        this saver's journal and its commit thread."""
        # before anything of the store's objects is read: while this mark lives, removals
        # by other processes leave objects (this saver names the ones it has seen in its
        # next checkpoints without writing them again), and one running now ends first
        with self.store.backend.lock("store", shared=True, wait=300.0):  # as long as a take waits
            self._mark = self.store.backend.mark_writer("langgraph-saver")
        recovering = recover_lock(self._local_root)
        orphans = lock_orphan_journals(self._jdir)  # before ours exists: ours is not an orphan
        self._journal = Journal(self._jdir, self.fsync)
        try:
            self._load_index()
            try:
                self._recovery.recover(orphans)
            finally:
                os.close(recovering)
        except BaseException:
            self._journal.close(delete=True)
            self._mark.close()
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._committer.run, name="ckpt-langgraph-commit", daemon=True)
        self._thread.start()
        ref = weakref.ref(self)

        def _close_at_exit() -> None:
            saver = ref()
            if saver is not None:
                saver.close()

        self._atexit = _close_at_exit
        atexit.register(_close_at_exit)

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ".ckpt", **options: Any) -> CkptSaver:
        """The saver of the store at `path` (created as `ckpt init` would when there is
        none): ``builder.compile(checkpointer=CkptSaver.open(".ckpt"))``. Options are
        the constructor's."""
        return cls(ToMake(path), **options)  # made once the constructor has checked every option

    # -- context manager and closing --------------------------------------------------------
    def __enter__(self) -> CkptSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CkptSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Seal and commit everything, delete the journal, stop the commit thread.
        (Also run at interpreter exit; a saver that is never closed loses nothing either:
        the next one to open the store replays its journal.)"""
        if not self._stop_thread():
            return
        try:
            self.flush()
        finally:
            with self._lock:
                done = not self._queue and not self._staging.objects and not self._uncommitted()
                self._journal.sync()
                self._journal.close(delete=done)
                self._release_leases(everything=True)
                self._mark.close()
            self.store.close()

    def abandon(self) -> None:
        """Stop without committing anything more (what is journaled stays journaled;
        the next saver to open the store replays it)."""
        if not self._stop_thread():
            return
        with self._lock:
            self._journal.close(delete=self._journal.empty)
            self._release_leases(everything=True)
            self._mark.close()
        self.store.close()

    def _stop_thread(self) -> bool:
        """Mark the saver closed and stop its commit thread; False if it was closed already."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        gcfreeze.release(self)  # (the process's collector as it was, once no saver holds it)
        with contextlib.suppress(Exception):
            atexit.unregister(self._atexit)
        return True

    def flush(self) -> None:
        """Seal every checkpoint and commit it to the store now (close does this)."""
        with self._commit_mutex:
            with self._lock:
                self._seal_all()
            self._commit_locked()

    # -- writing and reading ---------------------------------------------------------------------------
    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """Store a checkpoint: journaled before this returns, readable at once, committed
        to the store in the background."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        cid = checkpoint["id"]
        if self._gc_pending:  # the first put: the collector's hold (its one full collection runs without the saver's lock)
            self._gc_pending = False
            if gcfreeze.hold(self) and self._closed:  # (two puts racing here count once; `_stop_thread` lets go)
                gcfreeze.release(self)
        self._wait_for_room()
        with self._owning(thread, True, parent_id, (ns, cid)):
            self._check()
            values = checkpoint["channel_values"]
            skeleton = self.serde.dumps_typed({k: v for k, v in checkpoint.items() if k != "channel_values"})
            md = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
            parent = self._entries.get((thread, ns, parent_id)) if parent_id else None
            if parent is not None:
                self._load(parent)
            blobs: dict[str, Blob] = {}
            specs: dict[str, Any] = {}
            for ch, ver in new_versions.items():
                base = self._blob(parent, ch) if parent is not None and ch in parent.versions else None
                if base is not None and base.log is None:
                    base = None
                blob, spec = self._blob_from_value(values.get(ch, MISSING), base)
                if ns and blob.log is not None:
                    self._sub_objs.setdefault(thread, weakref.WeakSet()).add(blob.log)
                blobs[ch] = blob
                specs[ch] = [ver, spec]
            rec = {
                "op": "p", "t": thread, "n": ns, "i": cid, "p": parent_id, "c": self.clock(),
                "k": list(skeleton), "m": list(md), "v": dict(checkpoint["channel_versions"]), "b": specs,
            }  # fmt: skip
            self._journal.append(_frame(rec))
            self._apply_put(rec, blobs)
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        """Store the pending writes of a task (journaled before this returns)."""
        conf = config["configurable"]
        key = (str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "", str(conf["checkpoint_id"]))
        now = self.clock()
        ws = [
            Write(task_id, ch, self.serde.dumps_typed(v), task_path, WRITES_IDX_MAP.get(ch, idx), now) for idx, (ch, v) in enumerate(writes)
        ]
        self._wait_for_room()
        with self._owning(key[0], True, key[2]):
            self._check()
            self._journal.append(_frame(self._writes_record(key, ws)))
            self._apply_writes(key, ws)

    def _tuple(self, e: Entry, config: RunnableConfig | None = None) -> CheckpointTuple:
        self._load(e)
        assert e.skeleton is not None and e.metadata is not None
        thread, ns, cid = e.key
        checkpoint = self.serde.loads_typed(e.skeleton)
        checkpoint["channel_values"] = LazyValues(self._values_loader(e))
        metadata = self.serde.loads_typed(e.metadata)
        pending = [(w.task_id, w.channel, self.serde.loads_typed(w.typed)) for w in sorted(e.writes.values(), key=Write.sort_key)]
        parent_config: RunnableConfig | None = None
        if e.parent:
            parent_config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": e.parent}}
        if config is None:
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
        return CheckpointTuple(config=config, checkpoint=checkpoint, metadata=metadata, parent_config=parent_config, pending_writes=pending)

    def _values_loader(self, e: Entry) -> Callable[[], dict[str, Any]]:
        def load() -> dict[str, Any]:
            with self._lock:
                self._load(e)  # read back from the store if its thread was dropped from memory since
                blobs = {ch: self._blob(e, ch) for ch in e.versions}
            out: dict[str, Any] = {}
            refreshed: list[ItemLog] = []
            for ch, b in blobs.items():
                if b.empty:
                    continue
                value = self.serde.loads_typed(b.to_typed())
                if b.log is not None and type(value) is list and len(value) == b.n:
                    fp = fingerprint(value) if self._check_items and b.n == len(b.log) else None
                    with self._lock:
                        b.log.objs[: b.n] = value  # the objects LangGraph holds now: its next put shares them
                        if fp is not None and b.n == len(b.log):
                            b.log.fp = fp
                    refreshed.append(b.log)
                out[ch] = value
            with self._lock:
                if not e.key[1]:
                    self._let_go_of_sub_objs(e.key[0], refreshed)
                elif refreshed:
                    self._sub_objs.setdefault(e.key[0], weakref.WeakSet()).update(refreshed)
            return out

        return load

    def _let_go_of_sub_objs(self, thread: str, keep: list[ItemLog]) -> None:
        """The thread is read at its root: a new run of it starts. The objects its
        subgraphs' logs took from the run before are nobody's now (a subgraph that
        goes on reads its state again first), only garbage the collector has to walk
        on every full pass: forget them (caller holds the lock). A put that still builds
        on such a log compares the items' bytes instead of their identity."""
        logs = self._sub_objs.pop(thread, None)
        for log in logs or ():
            if not any(log is k for k in keep):
                log.objs[:] = [None] * len(log.objs)
                log.fp = None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (its thread's newest when it names none)."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        with self._owning(thread, False, within_run=bool(ns)):  # a subgraph's read: within its run
            self._check()
            ids = self._thread_entries(thread).get(ns)
            if not ids:
                return None
            self._use(thread)
            cid = get_checkpoint_id(config)
            if cid:
                e = ids.get(cid)
                return self._tuple(e, config) if e is not None else None
            return self._tuple(ids[max(ids)])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id), filtered as LangGraph's savers
        filter them; their channel_values are decoded when first used. A thread named
        in `config` is read as it is now in the store (other processes' commits too);
        a list of every thread covers those this saver has seen."""
        one = config["configurable"].get("thread_id") if config is not None else None
        with self._owning(str(one), False) if one is not None else self._lock:
            self._check()
            if config is not None:
                conf = config["configurable"]
                threads = [str(conf["thread_id"])] if conf.get("thread_id") is not None else sorted(self._by_thread)
                want_ns = conf.get("checkpoint_ns")
                want_id = get_checkpoint_id(config)
            else:
                threads, want_ns, want_id = sorted(self._by_thread), None, None
            before_id = get_checkpoint_id(before) if before is not None else None
            found: list[tuple[str, Entry]] = []
            for thread in threads:
                for ns, ids in self._thread_entries(thread).items():
                    if want_ns is not None and ns != want_ns:
                        continue
                    for cid, e in ids.items():
                        if (want_id and cid != want_id) or (before_id and cid >= before_id):
                            continue
                        found.append((cid, e))
            found.sort(key=lambda it: it[0], reverse=True)  # newest first across namespaces, as SqliteSaver
            chosen: list[Entry] = []
            for _cid, e in found:
                if limit is not None and len(chosen) >= limit:
                    break
                if filter and not self._matches(e, filter):
                    continue
                chosen.append(e)
            tuples = [self._tuple(e) for e in chosen]
        tuples.reverse()
        while tuples:  # not held here once handed out: a caller reading every state keeps only what it keeps
            yield tuples.pop()

    # -- the parts' hooks (tests and subclasses step in here) ------------------------------------------
    def _commit_locked(self) -> None:
        """Commit what is sealed; the caller holds the commit mutex (`Committer.commit_locked`)."""
        self._committer.commit_locked()

    def _rotate(self, new: Journal) -> None:
        """Go on in journal `new` (`Committer.rotate`)."""
        self._committer.rotate(new)

    def _seal_ready(self) -> None:
        self._committer.seal_ready()

    def _recover_dead(self) -> None:
        self._recovery.recover_dead()

    def _store_heads(self, threads: Sequence[str]) -> dict[str, bytes | None]:
        return crosshost.store_heads(self, threads)

    def _moved_elsewhere(self, thread: str, head: bytes | None) -> bool:
        return crosshost.moved_elsewhere(self, thread, head)

    def _copy_manifests(self, rows: CopyRows, strict: bool = False) -> Copies | None:
        """The manifests of a copy's snapshot (`ThreadOps.copy_manifests`)."""
        return self._ops.copy_manifests(rows, strict)

    def _replay(self, rec: dict[str, Any], where: str, deletions: Deletions) -> None:
        """Replay one journal record (`Recovery.replay`; the importer's way in too)."""
        self._recovery.replay(rec, where, deletions)

    def _delete_from_store(self, keys: Keys, threads: set[str], ids: set[bytes] | None = None, siblings: Siblings | None = None) -> None:
        self._ops.delete_from_store(keys, threads, ids, siblings)

    # -- whole threads: delete, prune, TTL, copy, start from a checkpoint (`ThreadOps`) ----------------
    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of a thread, here and in the store
        (under the thread's lease: other processes' savers see it deleted). Its cost
        follows the thread, not the store: its manifests and refs go now; the objects
        only they used go at the next collection (`ThreadOps.delete`: once the deleted
        checkpoints are a quarter of the store, at a TTL sweep, `prune`, or `ckpt prune`)."""
        self._ops.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata run_id is one of `run_ids`."""
        self._ops.delete_for_runs(run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep each namespace's newest checkpoint ("keep_latest") or none ("delete").
        "keep_latest" also keeps the checkpoints the newest ones rebuild their delta
        channels from (`langgraph_retention`), so every thread reads as before."""
        self._ops.prune(thread_ids, strategy=strategy)

    def sweep_ttl(self) -> Sequence[str]:
        """Apply the saver's `ttl` now (the commit thread does every sweep interval):
        each thread whose newest checkpoint is older than its TTL (its own, given by its
        runs as ``thread_ttl``, or the saver's), the longest idle first, at most
        `sweep_limit` of them, is deleted ("delete") or cut down to what it resumes from
        ("keep_latest", as `prune`). A thread is swept under its lease, as a put is:
        one that another process's saver holds is in use, and is left for a later
        sweep; one written meanwhile is no longer expired. Returns the threads deleted
        or cut down."""
        return self._ops.sweep_ttl()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of a thread to another thread id.

        A copy of the store's checkpoints: each copy is a new manifest naming the very
        sections of its original (no value is read, decoded or written again, nothing
        goes through the journal), with its thread's subject and labels, and parents
        that are the copies of the originals' parents. The source's lease is held only
        while what this saver has of it not committed yet is committed and the ids of
        its committed checkpoints are taken (a consistent snapshot: puts to the source
        from any process carry on while the copy is made); the target's only while the
        copies are published. A checkpoint the target has already (the same id) gets
        the copy as its newest revision."""
        self._ops.copy_thread(source_thread_id, target_thread_id)

    def thread_from(self, ref: str, thread_id: str) -> RunnableConfig:
        """Start thread `thread_id` at a LangGraph checkpoint of the store named the
        ckpt way (id or prefix, tag, branch, KIND:NAME, REF~N), typically what `ckpt fork`
        made: its state, and the pending writes its snapshot and tail hold. Invoking the
        graph with the returned config (or just the thread id) resumes from there.

        Raises:
            NotFoundError for an unknown ref; InvalidInputError for a checkpoint that
            holds no LangGraph checkpoint, or a thread that has it already.
        """
        return self._ops.thread_from(ref, thread_id)

    # -- versions and async ----------------------------------------------------------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """A zero-padded counter and 32 random bits, as LangGraph's own savers make them
        but shorter (they are stored with every checkpoint). The random part keeps the
        versions of two branches from one parent apart; compared as strings they stay
        ordered, also after the 32-digit versions of a thread imported from SqliteSaver."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:016}.{random.getrandbits(32):08x}"

    # Every async method runs its sync twin on a worker thread (as aiosqlite does for
    # AsyncSqliteSaver): a put can wait for an fdatasync, a lease or the saver's lock, and
    # a read can decode a long history; none of that may stall the event loop. The worker
    # lets the interpreter go after a call that ran long enough to make the loop wait
    # (`gil.breathing`). The sync methods are thread-safe (the saver's lock); one
    # coroutine's calls stay ordered.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(breathing, self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = await asyncio.to_thread(breathing, self.list, config, filter=filter, before=before, limit=limit)
        while True:
            # a batch per hop: the thread switch costs ~50 us, a tuple far less
            batch = await asyncio.to_thread(breathing, lambda: list(itertools.islice(it, _ALIST_BATCH)))
            for item in batch:
                yield item
            if len(batch) < _ALIST_BATCH:
                return

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await asyncio.to_thread(breathing, self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(breathing, self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(breathing, self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(breathing, self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(breathing, self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(breathing, self.prune, thread_ids, strategy=strategy)
