"""ckpt as a LangGraph checkpointer: `CkptSaver`, sync and async.

    from ckptcli.adapters.langgraph.saver import CkptSaver
    graph = builder.compile(checkpointer=CkptSaver.open(".ckpt"))

Every LangGraph checkpoint becomes one ckpt checkpoint of subject ``agent:<thread>``
(the layout is in `langgraph_layout`), so `ckpt ls`, `show`, `diff`, `replay` and `tui`
browse what the graph did. docs/langgraph.md is the guide.

How a put stays under a millisecond. A ckpt take writes and fsyncs a pack, an index and
a manifest (three files); a graph step cannot wait for that. So the saver works like a
database with a write-ahead log:

1. **The journal.** Each `put` and `put_writes` writes one record (length, CRC-32,
   msgpack) to this saver's journal in ``<store>/langgraph/`` before it returns, so a
   killed process loses nothing that was put. `fsync` says when it reaches the disk:
   ``"batch"`` (the default: the commit thread syncs the journal every 20 ms, so a power
   cut loses at most the puts of the last few tens of milliseconds), ``"always"`` (before
   the put returns: a put that returned survives a power cut; costs an fdatasync, whose
   latency the disk decides), ``"never"`` (the OS decides).
2. **Memory.** What was put is kept in memory, so every read sees every put at once;
   once committed, the threads used least recently beyond `resident_threads` are
   dropped from memory and read back from the store when used again.
3. **The store.** A checkpoint's objects are made when it is put, in O(new data): list
   values are compared with the parent's by identity, so only new items are serialized,
   converted and hashed (`ListTree` keeps the chunk tree's sealed prefix). It is *sealed*
   (its manifest made, with its pending writes as events) by the commit thread once its
   child has a child (its pending writes are complete by then), after `seal_idle` seconds
   without one, or on close; the thread commits what is sealed every `commit_interval`
   seconds: one pack, one index, the manifests (made durable together), the refs; the
   journal is then started again with what is not committed. A put that finds
   `max_backlog` checkpoints not committed waits for the commit thread, which then
   commits everything at once (back-pressure).
4. **Recovery.** Opening a store replays the journals no live saver holds (a crash),
   commits everything they hold and deletes them.
5. **Several processes.** A thread is held by one saver at a time (a lease file, flock),
   from its first use until its checkpoints are committed; another process's saver
   asks for it and the holder commits it and lets go within a tick, so every read and
   write sees the other processes' turns. A write from a run that read the thread before
   another process extended it is refused (ThreadConflictError): never a silent fork.
   docs/langgraph.md, "Several processes".

A pending write that arrives for a checkpoint already committed (a resume after a
restart) makes the checkpoint be written again, as revision 2 (label ``langgraph.rev``),
whose parents are the LangGraph parent and the revision before.

Values read back are LangGraph's own bytes, deserialized by the saver's serializer.
`list` returns checkpoints whose ``channel_values`` are decoded on first use, so that
listing a long thread does not decode every state in it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import hashlib
import itertools
import os
import random
import stat
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
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

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.encoding import ValueCodec, fingerprint
from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    JOURNAL_DIR,
    blank,
    hole_message,
    mapped,
    newer_journal,
    open_regular,
    own_dir,
    read_journal,
    record_error,
    record_where,
)
from ckptcli.adapters.langgraph.journal import Journal as _Journal
from ckptcli.adapters.langgraph.journal import frame as _frame
from ckptcli.adapters.langgraph.journal import record_problem as journal_record_problem
from ckptcli.adapters.langgraph.layout import MSGPACK, Key, SectionWriter, Write
from ckptcli.adapters.langgraph.lazy import LazyValues
from ckptcli.adapters.langgraph.leases import LEASE as _LEASE
from ckptcli.adapters.langgraph.leases import LEASE_DIR, RECOVER_LOCK, WANT_DIR, open_recover_lock
from ckptcli.adapters.langgraph.leases import Request as _Request
from ckptcli.adapters.langgraph.leases import lease_name as _lease_name
from ckptcli.adapters.langgraph.leases import live_requests as _live_requests
from ckptcli.adapters.langgraph.leases import request_lease as _request_lease
from ckptcli.adapters.langgraph.leases import try_flock as _try_flock
from ckptcli.adapters.langgraph.readback import Readback
from ckptcli.adapters.langgraph.resident import (
    COMMITTED,
    EMPTY,
    LEAF,
    MISSING,
    SEALED,
    Blob,
    Entry,
    ItemLog,
    StagedSource,
    Staging,
    unload,
)
from ckptcli.adapters.langgraph.store_index import StoreIndex
from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LockError, StoreIOError, ThreadConflictError, UsageError
from ckptcli.format.manifest import Manifest
from ckptcli.format.msgpack_view import from_view
from ckptcli.format.values import Decoder
from ckptcli.store.backend import fsync_dir
from ckptcli.store.repository import Store

__all__ = ["CkptSaver"]

FSYNC_POLICIES = ("always", "batch", "never")
ROTATE_BYTES = 4 * 1024 * 1024  # the journal is started again after a commit once it is this big
_TICK = 0.02  # how often the commit thread looks for checkpoints ready to seal
_SWEEP_BATCH = 64  # expired threads removed from the store together by a TTL sweep (one removal each batch; commits between)
_COLLECT_MIN = 512  # deleted checkpoints left to collect before a delete collects (`CkptSaver._delete`)
_RECENT_NAMESPACES = 4  # a thread in use keeps the newest values of this many subgraph namespaces in memory

_ALIST_BATCH = 64  # tuples `alist` takes from `list` per hop to its worker thread
_Keys = list[tuple[str, str, str]]
_Siblings = dict[Any, list[bytes]]  # subject -> the store's checkpoints of its thread (`CkptSaver._siblings`)
#: a journaled delete being replayed: keys, threads, and the store's checkpoints it removes (None: older records)
_Deletion = tuple[list[tuple[str, str, str]], set[str], set[bytes] | None]  # (thread, namespace, checkpoint id) of several checkpoints
#: a thread's committed checkpoints to copy: (key, parent id, created, manifest), parents first
_Copies = list[tuple[tuple[str, str, str], str | None, int, Manifest]]
_CopyRows = list[tuple[tuple[str, str, str], str | None, int, bytes]]  # the same, manifest ids
#: and the values this saver has of it in memory, by (namespace, channel, version)
_CopiedBlobs = dict[tuple[str, str, Any], "Blob"]




# -- threads shared by processes -----------------------------------------------------------
class _Lease:
    """A saver's hold on one thread across processes: an flock on its lease file,
    ``<store>/langgraph/threads/<hash of the thread id>``, which holds a dirty flag (set
    while the holder has puts of the thread not committed yet) and a token (new at each
    release after a commit of the thread). docs/langgraph.md, "Several processes"."""

    __slots__ = ("dirty", "fd", "name", "wrote")

    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name
        self.dirty = False  # the file says so
        self.wrote = False  # this hold put something: a new token on release


# -- the saver ----------------------------------------------------------------------------
class CkptSaver(BaseCheckpointSaver[str]):
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
    Raises:
        StoreNotFoundError, CorruptError, StoreIOError from opening the store or
        replaying a journal; InvalidInputError for a bad option.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
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
    ) -> None:
        super().__init__(serde=serde)
        from ckptcli.adapters.langgraph.retention import TTL

        self.ttl = TTL.parse(ttl) if ttl is not None else None
        self.clock = clock
        self._sweeping: set[str] = set()  # threads `_holding` holds the lease of, for a delete (not let go by commits)
        self._copying = 0  # copies between their snapshot of the source and their publishing (`copy_thread`)
        self._garbage = 0  # checkpoints removed from the store whose objects no collection has looked at yet (`_delete`)
        if fsync not in FSYNC_POLICIES:
            raise InvalidInputError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if not (commit_interval > 0 and seal_idle >= 0):
            raise InvalidInputError("commit_interval must be > 0 and seal_idle >= 0")
        if type(resident_threads) is not int or resident_threads < 0:
            raise InvalidInputError(f"resident_threads must be an integer >= 0, not {resident_threads!r}")
        self.resident_threads = resident_threads
        for name, bound in (("max_backlog", max_backlog), ("max_journal_bytes", max_journal_bytes)):
            if type(bound) is not int or bound < 1:
                raise InvalidInputError(f"{name} must be an integer >= 1, not {bound!r}")
        self.max_backlog = max_backlog
        self.max_journal_bytes = max_journal_bytes
        self.backlog_waits = 0  # puts that waited for the committer (back-pressure), for tests and benchmarks
        self._room = threading.Condition(threading.Lock())  # puts over the bound wait here for a commit
        self._pressed = False  # a put waits: commit everything now
        self._used: OrderedDict[str, None] = OrderedDict()  # threads in memory, least recently used first
        self.evicted = 0  # threads dropped from memory so far (for tests and benchmarks)
        self.store = store if isinstance(store, Store) else Store.open(Path(store))
        self.fsync = fsync
        self.commit_interval = commit_interval
        self.seal_idle = seal_idle
        if trust_identity not in (True, False, "unchecked"):
            raise InvalidInputError(f"trust_identity must be True, False or 'unchecked', not {trust_identity!r}")
        self.trust_identity = bool(trust_identity)
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
        self._jdir = Path(self.store.location) / JOURNAL_DIR
        own_dir(self._jdir)
        for sub in (LEASE_DIR, WANT_DIR):
            own_dir(self._jdir / sub)
        self.lease_timeout = lease_timeout
        self._leases: dict[str, _Lease] = {}  # the threads this saver holds
        self._yielding: set[str] = set()  # held threads being handed over to another process (`_hand_over`)
        self._seen: dict[str, bytes] = {}  # lease name -> the token this saver's view of the thread is at
        self._fence: dict[str, set[str]] = {}  # thread -> checkpoints a run here may have read stale
        self._claiming = [threading.Lock() for _ in range(16)]  # by thread: one claim at a time
        try:
            for path in (self._jdir / LEASE_DIR).iterdir():  # before the index: what it holds is at least this
                fd = open_regular(path)
                if isinstance(fd, str):
                    continue  # no lease (a FIFO, a directory...): `ckpt doctor` names it
                try:
                    raw = os.pread(fd, _LEASE.size, 0)
                finally:
                    os.close(fd)
                if len(raw) == _LEASE.size and raw[0] == 0:
                    self._seen[path.name] = raw[1:]
        except OSError as exc:
            raise StoreIOError(f"cannot read the thread leases in {self._jdir}: {exc.strerror}") from None
        # before anything of the store's objects is read: while this mark lives, removals
        # by other processes leave objects (this saver names the ones it has seen in its
        # next checkpoints without writing them again), and one running now ends first
        with self.store.backend.lock("store", shared=True, wait=300.0):  # as long as a take waits
            self._mark = self.store.backend.mark_writer("langgraph-saver")
        recovering = self._recover_lock()
        orphans = self._lock_orphan_journals()  # before ours exists: ours is not an orphan
        self._journal = _Journal(self._jdir, fsync)
        try:
            self._load_index()
            try:
                self._recover(orphans)
            finally:
                os.close(recovering)
        except BaseException:
            self._journal.close(delete=True)
            self._mark.close()
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ckpt-langgraph-commit", daemon=True)
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
        from ckptcli.adapters.langgraph.retention import TTL
        from ckptcli.api import store_or_init

        if options.get("ttl") is not None:
            TTL.parse(options["ttl"])  # a bad one is refused before a store is made
        return cls(store_or_init(path), **options)

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
        with contextlib.suppress(Exception):
            atexit.unregister(self._atexit)
        return True

    def flush(self) -> None:
        """Seal every checkpoint and commit it to the store now (close does this)."""
        with self._commit_mutex:
            with self._lock:
                self._seal_all()
            self._commit_locked()

    def _seal_all(self) -> None:
        for e in sorted(self._uncommitted(), key=lambda e: e.seq):
            if e.state == LEAF:
                self._seal(e)

    def _uncommitted(self) -> list[Entry]:
        return list(self._open.values())

    def _check(self) -> None:
        if self._closed:
            raise UsageError("this CkptSaver is closed")
        if self._error is not None:
            err, self._error = self._error, None
            if isinstance(err, CkptError):
                raise err
            raise StoreIOError(f"committing LangGraph checkpoints to {self.store.location} failed: {err}") from err

    # -- threads shared by processes (docs/langgraph.md, "Several processes") ------------------
    def _recover_lock(self) -> int:
        """Hold the store's recovery lock: one saver replays a dead saver's journal at a time."""
        fd = open_recover_lock(self._jdir)
        assert fd is not None  # made when missing
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            raise StoreIOError(f"cannot lock {self._jdir / RECOVER_LOCK}: {exc.strerror}") from None
        return fd

    @contextlib.contextmanager
    def _owning(self, thread: str, write: bool, target: str | None = None, child: tuple[str, str] | None = None) -> Iterator[None]:
        """Hold thread `thread`'s lease and the saver's lock. The lease is taken first,
        without the lock: waiting for another process's saver to hand the thread over
        must not stop this saver's commit thread from handing over its own. `child`: the
        (namespace, id) of the checkpoint a put of a child of `target` makes."""
        while True:
            if thread not in self._leases:
                self._claim(thread, write)
            self._lock.acquire()
            if thread in self._leases and thread not in self._yielding:
                break
            yielding = thread in self._yielding
            self._lock.release()  # released by the commit thread meanwhile (or being handed over): again
            if yielding:
                time.sleep(0.001)
        try:
            if not write:
                self._fence.pop(thread, None)  # a read: the run sees the thread as it is now
            else:
                if target is not None and target in self._fence.get(thread, ()):
                    if child is not None:
                        # the pending writes of the refused checkpoint are refused too, and
                        # those that came before it dropped: kept, they would wait for it,
                        # holding the thread (never handed over) for good
                        self._fence[thread].add(child[1])
                        self._orphan_writes.pop((thread, *child), None)
                    raise ThreadConflictError(
                        f"thread {thread!r} was extended by another process after this saver read it: writing to its checkpoint {target} would fork it",
                        hint="nothing of this write was stored; run the turn again (it reads the thread as it is now), one run at a time per thread",
                    )
                self._mark_dirty(self._leases[thread])
            yield
        finally:
            self._lock.release()

    def _claim(self, thread: str, write: bool, wait: bool = True) -> None:
        """Take thread `thread`'s lease (asking its holder to hand it over, and waiting),
        then read the thread again from the store if another process committed to it
        since this saver last held it. A write that finds that fences off the checkpoints
        this saver knew (its run read them before the other process wrote)."""
        name = _lease_name(thread)
        with self._claiming[int(name[:4], 16) % len(self._claiming)]:  # one claim of a thread at a time here
            if thread not in self._leases:
                self._claim_locked(thread, name, write, wait)

    def _claim_locked(self, thread: str, name: str, write: bool, wait: bool = True) -> None:
        if self._closed:
            raise UsageError("this CkptSaver is closed")
        fd = self._take_lease(thread, name, wait)
        if fd < 0:
            return  # held by another process's saver: the caller goes without
        try:
            raw = os.pread(fd, _LEASE.size, 0)
            dirty = len(raw) == _LEASE.size and raw[0] != 0
            token = raw[1:] if len(raw) == _LEASE.size else b""
            if dirty:  # its last holder died before committing it: its journal has the rest
                self._recover_dead()
            with self._lock:
                lease = _Lease(fd, name)
                lease.dirty = dirty
                # no token: a lease no saver wrote, or made again after its thread was
                # deleted and the lease removed (`_drop_lease`): what this saver has of
                # the thread may be from before the delete
                fresh = not token and not dirty and bool(self._thread_entries(thread))
                if dirty or fresh or token != self._seen.get(name, b""):
                    known = {cid for ids in self._thread_entries(thread).values() for cid in ids}
                    self._reload_thread(thread)
                    if write and known:
                        self._fence[thread] = known
                if fresh:  # read again: a token of its own, so that it is not read again at each take
                    with contextlib.suppress(OSError):
                        new_token = os.urandom(16)
                        os.pwrite(fd, _LEASE.pack(0, new_token), 0)
                        token = new_token
                self._seen[name] = token
                self._leases[thread] = lease
        except BaseException:
            os.close(fd)
            raise

    def _take_lease(self, thread: str, name: str, wait: bool) -> int:
        """The fd of thread `thread`'s lease file `name`, flocked: taken at once, or
        asked for and waited for (`wait`; -1 without `wait` when another process's saver
        holds it). A lease removed while this saver waited for it (its thread deleted,
        `_drop_lease`) is opened again: the one at its path is the lease now."""
        while True:
            try:
                fd = os.open(self._jdir / LEASE_DIR / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as exc:
                raise StoreIOError(f"cannot open the lease of thread {thread!r} in {self._jdir / LEASE_DIR}: {exc.strerror}") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a lease is written to: never through a hard link to a file elsewhere
                os.close(fd)
                what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else f"has {st.st_nlink} hard links (a lease has one)"
                raise StoreIOError(f"cannot use the lease of thread {thread!r}: {self._jdir / LEASE_DIR / name} {what}", hint="something other than ckpt put it there; remove it")
            try:
                # others wait for it: queue behind them (a saver that just handed the thread
                # over, and needs it again at its next put, would take it back first otherwise)
                locked = not (wait and self._requests(name)) and _try_flock(fd)
                if not locked and not wait:
                    os.close(fd)
                    return -1
                if not locked:
                    self._wait_for(thread, name, fd)
                if os.fstat(fd).st_nlink:
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # removed meanwhile

    def _drop_lease(self, thread: str) -> None:
        """Thread `thread` was deleted under its lease (caller holds the lock) and this
        saver has nothing of it: remove its lease file, unless another process's saver
        waits for it. Removed while the flock is held: a saver that waited on it finds it
        gone once it has it and opens the one at the path; one that read the thread
        before finds no token there, and reads it again (`_claim_locked`)."""
        lease = self._leases.get(thread)
        if lease is None or self._thread_entries(thread) or any(key[0] == thread for key in self._orphan_writes) or self._requests(lease.name):
            return
        path = self._jdir / LEASE_DIR / lease.name
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

    def _mark_dirty(self, lease: _Lease) -> None:
        """Say in the lease file that this saver has puts of the thread not committed yet
        (caller holds the lock), so that whoever takes the thread after a crash of this
        process replays this saver's journal first."""
        lease.wrote = True
        if not lease.dirty:
            try:
                os.pwrite(lease.fd, _LEASE.pack(1, self._seen.get(lease.name, b"").ljust(16, b"\0")), 0)
            except OSError as exc:
                raise StoreIOError(f"cannot write the thread lease {lease.name} in {self._jdir / LEASE_DIR}: {exc.strerror}") from None
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
                    os.pwrite(lease.fd, _LEASE.pack(0, token), 0)
                    self._seen[lease.name] = token
            with contextlib.suppress(OSError):
                os.close(lease.fd)

    def _requests(self, name: str, names: list[str] | None = None) -> list[str]:
        """The live requests for lease `name`, oldest first (`langgraph_leases.live_requests`)."""
        wdir = self._jdir / WANT_DIR
        if names is None:
            try:
                names = os.listdir(wdir)
            except OSError:
                return []
        return _live_requests(wdir, [n for n in names if _request_lease(n) == name])

    def _wait_for(self, thread: str, name: str, fd: int) -> None:
        """Wait until this saver holds lease `name` (fd `fd`), which another process's
        saver holds: a request of its own in the request directory, flocked while it
        waits, asks the holder to hand it over; the waiters older than this one take it
        first (for up to half of `lease_timeout`, then this one tries too: a waiter that
        stopped does not hold up the queue). LockError after `lease_timeout`."""
        try:
            request: _Request | None = _Request(self._jdir / WANT_DIR, name)
        except OSError:
            request = None  # waits all the same: the holder lets go at its next commit
        try:
            start = time.monotonic()
            ahead: set[str] = set()
            served = 0
            while True:
                older = set(self._requests(name))
                if request is not None:
                    older = {r for r in older if r < request.name}
                served += len(ahead - older)  # older waiters that got it (or gave up) meanwhile
                ahead = older
                now = time.monotonic()
                if (not older or now - start > self.lease_timeout / 2) and _try_flock(fd):
                    return
                if now - start > self.lease_timeout:
                    if served:
                        raise LockError(
                            f"thread {thread!r} was busy for {self.lease_timeout:g} s, not stuck: {served} other process(es)' saver(s) that asked for it "
                            f"before this one took it in turn (or gave up), and {len(older)} still wait ahead of this one",
                            hint="the savers take a thread in turn, one run at a time: serialize the runs of one thread in your app, or raise lease_timeout",
                        )
                    queue = f" ({len(older)} other waiter(s) ahead of this one)" if older else ""
                    raise LockError(
                        f"thread {thread!r} is held by another process's CkptSaver, which did not hand it over within {self.lease_timeout:g} s{queue}",
                        hint="a live saver hands a thread over within a tick and a commit: check that process, or raise lease_timeout",
                    )
                time.sleep(0.002)
        finally:
            if request is not None:
                request.close()

    def _old_request(self, path: Path) -> bool:
        """A request of an older version of the saver (named by the lease alone, made
        less than `lease_timeout` ago): handed over to as before."""
        try:
            return time.time() - os.lstat(path).st_mtime <= self.lease_timeout + 1
        except OSError:
            return False

    def _hand_over(self) -> None:
        """Commit the threads another process's saver asked for, which lets their leases
        go (the commit thread, every tick while this saver holds any)."""
        wdir = self._jdir / WANT_DIR
        try:
            names = os.listdir(wdir)
        except OSError:
            return
        if not names:
            return
        with self._lock:
            held = {lease.name: t for t, lease in self._leases.items()}
        asked = {_request_lease(n) for n in names} & set(held)
        if not asked:
            return
        wanted = {held[name] for name in asked if self._requests(name, names) or self._old_request(wdir / name)}
        if not wanted:
            return
        with self._commit_mutex:
            with self._lock:
                if self._closed:
                    return
                # no put or read of them here until they are committed and let go: a run
                # that puts back to back would keep them busy (not let go) for ever
                self._yielding |= wanted
                for e in sorted(self._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] in wanted and e.state == LEAF:
                        self._seal(e)  # early: a pending write that comes later makes a revision
            try:
                self._commit_locked()
            finally:
                with self._lock:
                    self._yielding -= wanted

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

    def _recover_dead(self) -> None:
        """A thread's last holder died with puts not committed: replay the journals no
        live saver holds (as opening the store does), the threads they name read from
        the store again first."""
        fd = self._recover_lock()
        try:
            found = self._lock_orphan_journals()
            if not found:
                return
            threads: set[str] = set()
            for _mtime, _path, fd in found:
                with contextlib.suppress(OSError):  # the file locked, not one found again by its name
                    records = read_journal(mapped(fd)).records
                    threads.update(str(r["t"]) for r in records if "t" in r)
            with self._lock:
                busy = {key[0] for key in self._open} | {key[0] for key in self._orphan_writes}
                for t in threads - busy:
                    self._reload_thread(t)
            self._recover(found)
        finally:
            os.close(fd)

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

    # -- sealing: a checkpoint's objects and manifest -----------------------------------------------
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
        sections = {"memory": p["memory"], "plan": p["plan"], "tools": p["tools"], "events": self._writer.events(e.writes.values()), layout.EXT_SECTION: p[layout.EXT_SECTION]}
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

    # -- committing (the background thread, flush, close) ------------------------------------------
    def _run(self) -> None:
        """The commit thread: seals what is ready every tick (one checkpoint at a time,
        letting the interpreter go in between, so a put never waits long for it: much of
        this runs while puts wait for their fsync), and commits every commit_interval."""
        tick = min(self.commit_interval, _TICK)
        last = time.monotonic()
        swept = last  # the first TTL sweep one interval after opening, as each after it
        while not self._stop.wait(tick):
            try:
                if self.ttl is not None and time.monotonic() - swept >= self.ttl.sweep_interval_s:
                    swept = time.monotonic()
                    self.sweep_ttl()
                self._journal.sync()
                if self._leases:
                    self._hand_over()
                self._seal_ready()
                pressed = self._pressed and self._over_bound()  # (a put that waited may have found room since)
                if not pressed and time.monotonic() - last < self.commit_interval:
                    continue
                last = time.monotonic()
                with self._commit_mutex:
                    with self._lock:
                        if self._closed:
                            return
                        self._pressed = False
                        if pressed:  # puts wait for room: everything goes now
                            self._seal_all()
                        else:
                            self._seal_idle()
                    self._commit_locked()
                self._journal.reserve()
            except Exception as exc:  # noqa: BLE001 - reported by the saver's next call
                self._error = exc

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

    def _seal_ready(self) -> None:
        """Seal what was ready when the call began, one checkpoint at a time. Not what
        puts make ready meanwhile: during a burst that would go on for as long as the
        burst, and the journal sync and the commit of this tick would never come."""
        with self._lock:
            todo, self._ready = self._ready, []
        for i, e in enumerate(todo):
            with self._lock:
                if self._closed:
                    self._ready[:0] = todo[i:]
                    return
                if e.state == LEAF and self._entries.get(e.key) is e:
                    self._seal(e)
            time.sleep(0)

    def _seal_idle(self) -> None:
        """Seal what has a child and got no write for a commit interval, and what has
        been idle for `seal_idle` seconds (so that `ckpt ls` shows it)."""
        now = time.monotonic()
        for e in sorted(self._uncommitted(), key=lambda e: e.seq):
            if e.state != LEAF:
                continue
            quiet = now - e.touched
            if (e.has_child and quiet >= self.commit_interval) or (self.seal_idle and quiet >= self.seal_idle):
                self._seal(e)

    def _commit_locked(self) -> None:
        """Commit what is sealed (the caller holds the commit mutex): one pack and index
        for the objects, then the manifests, then the refs; then the journal starts again
        if it has grown. On failure nothing is lost: it all stays queued and journaled."""
        with self._lock:
            batch, self._queue = self._queue, []
            objects, self._staging.objects = self._staging.objects, {}
            self._staging.inflight = objects
            if not batch and not objects:
                self._release_leases()
                if len(self._used) > self.resident_threads:
                    self._evict()
                return
        store = self.store
        try:
            with store.backend.lock("store", shared=True):
                before = set(store.backend.list("index"))
                txn = store.transaction()
                try:
                    for i, (oid, (typ, content)) in enumerate(objects.items()):
                        txn.put(oid, content, typ)
                        if i % 32 == 31:
                            time.sleep(0)  # let a put waiting for the interpreter in (this loop is Python)
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
                if before - set(store.backend.list("index")):
                    self._check_batch_after_prune([(mid, data) for mid, data, _e, _rev in batch])
                newest: dict[Any, tuple[tuple[int, int], bytes]] = {}  # a thread's latest is its root head
                # the manifests of the batch made durable together (one file-system sync,
                # not one per manifest: write_atomic_many), before the refs name them
                todo = [(f"manifests/{mid.hex()}", data) for mid, data, _e, _rev in batch]
                store.backend.write_atomic_many([(n, d) for n, d in todo if not store.backend.exists(n)])
                for mid, _data, e, _rev in batch:
                    subj = layout.subject_for(e.key[0])
                    order = (0 if e.key[1] else 1, e.created_ns)
                    if subj not in newest or order >= newest[subj][0]:
                        newest[subj] = (order, mid)
                for subj, ((root, created), mid) in newest.items():
                    store.advance_latest(subj, mid, created, nested=not root, log=False)  # a thread's history is its chain: no reflog entry per commit
        except BaseException:
            with self._lock:
                self._queue[:0] = batch
                objects.update(self._staging.objects)
                self._staging.objects = objects
                self._staging.inflight = {}
            raise
        fresh = _Journal(self._jdir, self.fsync) if self._journal.size > min(ROTATE_BYTES, self.max_journal_bytes // 2) and not self._closed else None
        with self._lock:
            self._staging.inflight = {}
            known, rows = self._index.known, self._index.rows
            for mid, _data, e, rev in batch:
                if known is not None:  # what the store holds, without reading it back (`_thread_keys`, `_store_ids`)
                    known[mid] = e.key[0]
                    rows.setdefault(e.key[0], {})[mid] = (rev, e.created_ns, Key(e.key[0], e.key[1], e.key[2], e.parent, rev))
                if rev >= e.committed_rev:
                    e.committed, e.committed_rev = mid, rev
                if e.manifest == mid and e.state == SEALED:
                    e.state = COMMITTED
                    if self._open.get(e.key) is e:
                        del self._open[e.key]
            if fresh is not None:
                self._rotate(fresh)
            self._trim({e.key[0] for _mid, _data, e, _rev in batch})
            self._release_leases()
            if len(self._used) > self.resident_threads:
                self._evict()
        with self._room:
            self._room.notify_all()

    # -- memory: threads not in use are read back from the store when used again ----------------------
    def _use(self, thread: str) -> None:
        used = self._used
        if thread in used:
            used.move_to_end(thread)
        else:
            used[thread] = None

    def _evict(self) -> None:
        """Drop the least recently used threads beyond `resident_threads` from memory,
        those whose checkpoints are all committed (caller holds the lock). Their entries
        become what opening the store makes (committed, read on demand), their values
        are forgotten: the next use reads them back as `_load` and `_load_blobs` do."""
        busy = {key[0] for key in self._open} | {key[0] for key in self._orphan_writes}
        drop = [t for t in self._used if t not in busy][: len(self._used) - self.resident_threads]
        if not drop:
            return
        gone = set(drop)
        for t in drop:
            del self._used[t]
            for ids in self._by_thread.get(t, {}).values():
                for e in ids.values():
                    unload(e)
        for bkey in [b for b in self._blobs if b[0] in gone]:
            del self._blobs[bkey]
        for t in drop:
            self._sub_objs.pop(t, None)
        self.evicted += len(drop)

    def _trim(self, threads: set[str]) -> None:
        """Forget the values of the committed checkpoints of `threads` that the next puts
        do not build on (caller holds the lock): a thread in use keeps in memory the
        values of its newest checkpoint of the root namespace and of the few namespaces
        (subgraphs) used last, of what is not committed and of their parents; the others are read back from the store when read (as an
        evicted thread's are). So a long thread's memory follows its newest state, not
        its whole history (a subgraph's namespaces each had their own copy of the
        messages, kept for good)."""
        keep: set[tuple[str, str, str, Any]] = set()
        for thread in threads:
            by_ns = self._by_thread.get(thread, {})
            newest = {ns: max(ids.values(), key=lambda e: e.seq) for ns, ids in by_ns.items() if ids}
            recent = {"", *sorted(newest, key=lambda ns: newest[ns].seq)[-_RECENT_NAMESPACES:]}
            for ns, ids in by_ns.items():
                if not ids:
                    continue
                heads = [newest[ns]] if ns in recent else []
                opened = [e for e in ids.values() if e.state != COMMITTED]
                heads += opened + [p for p in (ids.get(h.parent) for h in opened if h.parent) if p is not None]
                for h in heads:
                    keep.update((h.key[0], h.key[1], ch, ver) for ch, ver in h.versions.items())
                for e in ids.values():
                    if e.state == COMMITTED and e not in heads:
                        unload(e)
        for bkey in [b for b in self._blobs if b[0] in threads and b not in keep]:
            del self._blobs[bkey]

    def _check_batch_after_prune(self, batch: list[tuple[bytes, bytes]]) -> None:
        """Another process pruned the store while these checkpoints waited: check that
        every object they need is still there before committing them."""
        from ckptcli.format.walk import walk_checkpoint

        source = StagedSource(self._staging)
        for mid, data in batch:
            try:
                walk_checkpoint(source, Manifest.decode(data, f"manifest {mid.hex()[:12]}"))  # type: ignore[arg-type]
            except CkptError as exc:
                raise StoreIOError(
                    f"the store at {self.store.location} was pruned while this saver was writing to it, and objects its new checkpoints need are gone ({exc})",
                    hint="stop the application, reopen the saver (its journal is replayed), and prune with saver.prune or when no saver runs",
                ) from None

    def _rotate(self, new: _Journal) -> None:
        """Go on in journal `new`, started with what is not committed yet; delete the old one."""
        data = b"".join(_frame(rec) for rec in self._carry_over())
        if data:
            new.append(data)
        new.sync()
        old, self._journal = self._journal, new
        old.close(delete=True)

    def _carry_over(self) -> list[dict[str, Any]]:
        recs: list[dict[str, Any]] = list(self._pending_deletes)  # first: they came before what is open now
        for e in sorted(self._open.values(), key=lambda e: e.seq):
            if e.committed is None:
                recs.append(self._put_record(e))
            if e.writes:
                recs.append(self._writes_record(e.key, list(e.writes.values())))
        for key, writes in self._orphan_writes.items():
            recs.append(self._writes_record(key, list(writes.values())))
        return recs

    def _put_record(self, e: Entry) -> dict[str, Any]:
        thread, ns, cid = e.key
        parent = self._entries.get((thread, ns, e.parent)) if e.parent else None
        specs: dict[str, Any] = {}
        for ch, ver in e.versions.items():
            b = self._blobs.get((thread, ns, ch, ver))
            if b is None:
                continue  # in the store: found through an ancestor
            pb = self._blobs.get((thread, ns, ch, parent.versions.get(ch))) if parent is not None else None
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
        return {"op": "p", "t": thread, "n": ns, "i": cid, "p": e.parent, "c": e.created_ns, "k": list(e.skeleton), "m": list(e.metadata), "v": e.versions, "b": specs}

    @staticmethod
    def _writes_record(key: tuple[str, str, str], writes: list[Write]) -> dict[str, Any]:
        return {"op": "w", "t": key[0], "n": key[1], "i": key[2], "w": [[w.task_id, w.channel, w.typed[0], w.typed[1], w.task_path, w.idx, w.ts] for w in writes]}

    # -- recovery ---------------------------------------------------------------------------------
    def _lock_orphan_journals(self) -> list[tuple[float, Path, int]]:
        """The journals of savers that are gone (no one holds their lock), locked by us."""
        found: list[tuple[float, Path, int]] = []
        for path in self._jdir.glob("*.journal"):
            try:  # a symlink, a FIFO, a directory is no journal (`ckpt doctor` names it)
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                found.append((os.fstat(fd).st_mtime, path, fd))
            except OSError:
                os.close(fd)  # a live saver's
        return sorted(found)

    def _recover(self, found: list[tuple[float, Path, int]]) -> None:
        """Replay the orphaned journals, commit what they hold, then delete them."""
        if not found:
            return
        deletions: list[_Deletion] = []
        damaged: list[Path] = []
        with self._lock:
            waiting = set(self._orphan_writes)  # this saver's own writes whose put is on its way
        try:
            for _mtime, path, fd in found:
                try:
                    data = mapped(fd)  # the file locked (no other saver writes it), mapped: a huge one costs no memory
                except OSError as exc:
                    raise StoreIOError(f"cannot read the LangGraph journal {path}: {exc.strerror}", hint="nothing of it was replayed or removed") from None
                contents = read_journal(data)
                newer = newer_journal(path, data, contents)
                if newer is not None:
                    raise newer
                if contents.version == 0 and not blank(data):  # not empty, not zeros: not a journal
                    damaged.append(path)
                    self.store.warn(f"LangGraph journal {path} is not a journal (unknown header): nothing in it was replayed; it is kept as {path.name}{DAMAGED_SUFFIX}")
                    continue
                # after a hole, a put that builds on what the hole held (its parent unknown,
                # a list value continuing one that is not there) is left out: replayed, it
                # would make a wrong state (writes may come before their put: they stay)
                after = contents.before_holes
                left_out = 0
                for i, rec in enumerate(contents.records):
                    where = record_where(path, i)
                    if i < after:
                        self._replay(rec, where, deletions)
                        continue
                    if rec.get("op") == "p" and rec.get("p") and (rec.get("t"), rec.get("n"), rec.get("p")) not in self._entries:
                        left_out += 1
                        continue
                    try:
                        self._replay(rec, where, deletions)
                    except CorruptError:
                        left_out += 1
                if contents.holes:  # damage, not a crash: said, and the file kept to look at
                    damaged.append(path)
                    lost = f"; {left_out} record(s) after them built on what they held and are left out" if left_out else ""
                    self.store.warn(
                        f"LangGraph journal {path}: {hole_message(path, contents)}{lost}; the other records are recovered and the file is kept as {path.name}{DAMAGED_SUFFIX}"
                    )
            self._drop_stray_writes(waiting, said=bool(damaged))
            self.flush()
            for keys, threads, ids in deletions:  # only now: every checkpoint that stays is in the store
                self._delete_from_store(keys, threads, ids)
        finally:
            for _m, _p, fd in found:
                os.close(fd)
        for _mtime, path, _fd in found:
            with contextlib.suppress(OSError):
                if path in damaged:
                    path.rename(path.with_name(path.name + DAMAGED_SUFFIX))  # `ckpt verify` reports it until removed
                else:
                    path.unlink()
        fsync_dir(self._jdir)

    def _drop_stray_writes(self, waiting: set[tuple[str, str, str]], said: bool) -> None:
        """After replaying journals of savers that are gone: pending writes whose checkpoint
        no journal and not the store holds are dropped. Their put can no longer come, and
        kept they would hold their thread for good (a thread with writes waiting is never
        let go). After a crash they are the writes of puts that had not returned (with
        LangGraph's async durability a step's writes may be put before its checkpoint):
        dropped silently, as the puts were. With a damaged journal (`said`) they may be
        the writes of puts lost in it, or left out after it: said once."""
        with self._lock:
            stray = [key for key in self._orphan_writes if key not in waiting and key not in self._entries]
            n = sum(len(self._orphan_writes.pop(key)) for key in stray)
        if stray and said:
            threads = sorted({key[0] for key in stray})
            self.store.warn(
                f"LangGraph journals in {self._jdir}: {n} pending write(s) of {len(stray)} checkpoint(s) that no journal and not the store holds "
                f"(thread(s) {', '.join(map(repr, threads[:5]))}{', ...' if len(threads) > 5 else ''}) are dropped"
            )

    def _replay(self, rec: dict[str, Any], where: str, deletions: list[_Deletion]) -> None:
        """Replay journal record `rec` (`where`: `record_where`); CorruptError (`record_error`) if it is malformed."""
        op = rec.get("op")
        bad = journal_record_problem(rec)
        if bad:
            raise record_error(where, bad, self._jdir)
        try:
            with self._lock:
                if op == "p":
                    self._apply_put(rec, None, where)
                elif op == "w":
                    key = (rec["t"], rec["n"], rec["i"])
                    self._apply_writes(key, [Write(t, c, (ty, d), p, i, ts) for t, c, ty, d, p, i, ts in rec["w"]])
                elif op == "d":
                    keys = [(k[0], k[1], k[2]) for k in rec["k"]]
                    self._drop(keys)
                    # a record names the store's checkpoints it removes (since 0.3): exactly
                    # those go, never ones a thread used again after the delete got since
                    ids = set(rec["ids"]) if "ids" in rec else None
                    deletions.append((keys, set(rec.get("threads", [])), ids))
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError) as exc:
            raise record_error(where, f"{type(exc).__name__}: {exc}", self._jdir) from None

    # -- writing: put and put_writes ----------------------------------------------------------------
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

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint: journaled before this returns, readable at once, committed
        to the store in the background."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        cid = checkpoint["id"]
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

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        """Store the pending writes of a task (journaled before this returns)."""
        conf = config["configurable"]
        key = (str(conf["thread_id"]), conf.get("checkpoint_ns", "") or "", str(conf["checkpoint_id"]))
        now = self.clock()
        ws = [Write(task_id, ch, self.serde.dumps_typed(v), task_path, WRITES_IDX_MAP.get(ch, idx), now) for idx, (ch, v) in enumerate(writes)]
        self._wait_for_room()
        with self._owning(key[0], True, key[2]):
            self._check()
            self._journal.append(_frame(self._writes_record(key, ws)))
            self._apply_writes(key, ws)

    # -- reading ------------------------------------------------------------------------------------
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

    def _thread_entries(self, thread: str) -> dict[str, dict[str, Entry]]:
        return self._by_thread.get(thread, {})

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (its thread's newest when it names none)."""
        conf = config["configurable"]
        thread = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        with self._owning(thread, False):
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

    def _plain_metadata(self, e: Entry) -> Any:
        if e.md_plain is MISSING:
            self._load(e)
            assert e.metadata is not None
            e.md_plain = self.serde.loads_typed(e.metadata)
        return e.md_plain

    def _matches(self, e: Entry, flt: dict[str, Any]) -> bool:
        md = self._plain_metadata(e)
        return isinstance(md, dict) and all(md.get(k) == v for k, v in flt.items())

    # -- deleting and copying ------------------------------------------------------------------------
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

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of a thread, here and in the store
        (under the thread's lease: other processes' savers see it deleted). Its cost
        follows the thread, not the store: its manifests and refs go now; the objects
        only they used go at the next collection (`_delete`: once the deleted
        checkpoints are a quarter of the store, at a TTL sweep, `prune`, or `ckpt prune`)."""
        thread = str(thread_id)
        with self._lock:
            self._check()
        with self._holding({thread}):
            with self._lock:
                keys = [e.key for ids in self._thread_entries(thread).values() for e in ids.values()]
            self._delete(keys, {thread})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata run_id is one of `run_ids`."""
        wanted = set(run_ids)
        if not wanted:
            return

        def chosen() -> _Keys:
            with self._lock:
                self._check()
                keys: _Keys = []
                for e in list(self._entries.values()):
                    md = self._plain_metadata(e)
                    if isinstance(md, dict) and md.get("run_id") in wanted:
                        keys.append(e.key)
                return keys

        with self._holding({key[0] for key in chosen()}):
            self._delete(chosen(), set())

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep each namespace's newest checkpoint ("keep_latest") or none ("delete").
        "keep_latest" also keeps the checkpoints the newest ones rebuild their delta
        channels from (`langgraph_retention`), so every thread reads as before."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"unknown prune strategy {strategy!r}", hint="use keep_latest or delete")
        threads = {str(t) for t in thread_ids}
        with self._lock:
            self._check()
        with self._holding(threads):
            with self._lock:
                keys = self._prune_keys(threads, strategy)
            self._delete(keys, threads if strategy == "delete" else set(), collect=True)

    def _prune_keys(self, threads: set[str], strategy: str) -> _Keys:
        """What `prune` removes of `threads` (caller holds the lock)."""
        keys: _Keys = []
        kept: _Keys = []
        for thread in threads:
            for ids in self._thread_entries(thread).values():
                newest = max(ids) if strategy == "keep_latest" else None
                keys.extend(e.key for cid, e in ids.items() if cid != newest)
                kept.extend(e.key for cid, e in ids.items() if cid == newest)
        if kept:
            rebuilt_from = self._rebuilt_from(kept)
            keys = [k for k in keys if k not in rebuilt_from]
        return keys

    # -- thread TTL (docs/langgraph.md, "Thread TTL") ---------------------------------------------
    def sweep_ttl(self) -> Sequence[str]:
        """Apply the saver's `ttl` now (the commit thread does every sweep interval):
        each thread whose newest checkpoint is older than its TTL (its own, given by its
        runs as ``thread_ttl``, or the saver's), the longest idle first, at most
        `sweep_limit` of them, is deleted ("delete") or cut down to what it resumes from
        ("keep_latest", as `prune`). A thread is swept under its lease, as a put is:
        one that another process's saver holds is in use, and is left for a later
        sweep; one written meanwhile is no longer expired. Returns the threads deleted
        or cut down."""
        from ckptcli.adapters.langgraph.retention import effective_ttl
        from ckptcli.store import catalog

        ttl = self.ttl
        if ttl is None:
            return []
        now = self.clock()
        with self._lock:
            self._check()
            newest: dict[str, int] = {}
            own: dict[str, tuple[int, tuple[float, str | None]]] = {}  # thread -> its newest own TTL
            for row in catalog.rows(self.store).values():
                found = layout.key_of_row(row)
                if found is None:
                    continue
                k, summary = found
                newest[k.thread_id] = max(newest.get(k.thread_id, 0), summary.created_ns)
                mine = layout.thread_ttl(summary.labels)
                if mine is not None and summary.created_ns >= own.get(k.thread_id, (-1, mine))[0]:
                    own[k.thread_id] = (summary.created_ns, mine)
            for (thread, _ns, _cid), e in self._entries.items():
                newest[thread] = max(newest.get(thread, 0), e.created_ns)
            busy = {key[0] for key in self._open} | {key[0] for key in self._orphan_writes}
        expired: list[tuple[int, str, float, str]] = []
        for t, ts in newest.items():
            ttl_s, strategy = effective_ttl(own[t][1] if t in own else None, ttl.ttl_s, ttl.strategy)
            if ttl_s is not None and now - ts > ttl_s * 1e9 and t not in busy:
                expired.append((ts, t, ttl_s, strategy))
        expired.sort()
        todo = expired[: ttl.sweep_limit]
        swept: list[str] = []
        for at in range(0, len(todo), _SWEEP_BATCH):
            swept.extend(self._sweep_threads(todo[at : at + _SWEEP_BATCH], now))
        if swept:
            self._collect()  # one collection for the whole sweep, its lock let go for the walk
        return swept

    def _sweep_threads(self, batch: Sequence[tuple[int, str, float, str]], now: int) -> Sequence[str]:
        """Delete or cut down the expired threads of `batch` (ts, thread, ttl, strategy)
        that are still expired and not in use, in one removal from the store (`_delete`;
        the objects are left for the sweep's collection)."""
        rules = {t: (ttl_s, strategy) for _ts, t, ttl_s, strategy in batch}
        with self._holding(set(rules), wait=False) as held:
            if not held:
                return []  # other processes' savers hold them all: in use
            swept: list[str] = []
            keys: _Keys = []
            deleted: set[str] = set()
            with self._lock:
                busy = {key[0] for key in self._open} | {key[0] for key in self._orphan_writes}
                for thread in held:
                    ttl_s, strategy = rules[thread]
                    entries = [e for ids in self._thread_entries(thread).values() for e in ids.values()]
                    if not entries or thread in busy or now - max(e.created_ns for e in entries) <= ttl_s * 1e9:
                        continue  # written meanwhile: no longer expired
                    mine = [e.key for e in entries] if strategy == "delete" else self._prune_keys({thread}, strategy)
                    if not mine:
                        continue  # cut down already
                    keys += mine
                    swept.append(thread)
                    if strategy == "delete":
                        deleted.add(thread)
            self._delete(keys, deleted, collect=False)
            return swept

    def _rebuilt_from(self, kept: _Keys) -> dict[tuple[str, str, str], str]:
        """The checkpoints that `kept` ones rebuild their delta channels from (see
        `langgraph_retention.needed`). Caller holds the lock."""
        from ckptcli.adapters.langgraph import retention

        stored_cache: dict[tuple[str, str, str], set[str]] = {}

        def parent(key: tuple[str, str, str]) -> str | None:
            e = self._entries.get(key)
            return e.parent if e is not None and e.parent and (key[0], key[1], e.parent) in self._entries else None

        def stored(key: tuple[str, str, str]) -> set[str]:
            got = stored_cache.get(key)
            if got is None:
                e = self._entries[key]
                self._load(e)
                if e.committed is not None and not e.blobs_loaded:  # the memory section's channel names, no value decoded
                    memory = self.store.manifest(e.committed).sections.get("memory")
                    got = retention.map_keys(self.store, memory, f"checkpoint {e.committed.hex()[:12]} section memory") if memory else set()
                else:
                    got = {ch for ch in e.versions if not self._blob(e, ch).empty}
                stored_cache[key] = got
            return got

        def rebuilt(key: tuple[str, str, str]) -> set[str]:
            e = self._entries[key]
            md = self._plain_metadata(e)
            counters = md.get(retention.DELTA_COUNTERS) if isinstance(md, dict) else None
            if not isinstance(counters, dict):
                return set()
            self._load(e)
            return {ch for ch in counters if ch in e.versions} - stored(key)

        return retention.needed(kept, parent, rebuilt, stored)

    def _delete(self, keys: _Keys, threads: set[str], collect: bool | None = None) -> None:
        """Forget `keys` (journaled first, so that a crash cannot bring them back), then
        remove their manifests, every revision, from the store. Everything that stays is
        committed first, and puts wait meanwhile; all of that reads only what is deleted
        (`prune.forget_checkpoints`), so its cost follows the deleted checkpoints, not
        the store. The objects no other checkpoint needs go in a collection (`_collect`):
        now when `collect`; when None, once the checkpoints removed since the last one
        are a quarter of those the saver knows (so a delete costs, amortized, what it
        deletes); never when False (the caller collects)."""
        if not keys and not threads:
            return
        with self._commit_mutex:
            with self._lock:
                ids = self._store_ids(keys, threads)
                rec = {"op": "d", "k": [list(k) for k in keys], "threads": sorted(threads), "ids": sorted(ids)}
                self._journal.append(_frame(rec))
                # carried into every new journal until the store's copies are gone: a crash
                # in between must not bring the thread back
                self._pending_deletes.append(rec)
                self._drop(keys)
                self._seal_all()
                self._commit_locked()
                siblings = self._siblings(keys, threads)
            # the store's copies go without the lock: the entries are gone from memory
            # already, and commits wait (the commit mutex); other threads go on
            self._delete_from_store(keys, threads, ids, siblings)
            with self._lock:
                self._pending_deletes.remove(rec)
                if collect is None:
                    collect = self._garbage >= max(_COLLECT_MIN, len(self._index.known or ()) // 4)
            if collect and self._garbage:
                self._collect(mutex_held=True)

    def _collect(self, mutex_held: bool = False) -> None:
        """Remove the objects no checkpoint of the store needs (`prune.collect`), after
        deletes that left them. The commit mutex is held (commits wait), but not the
        saver's lock while the store is walked: reads and puts of other threads go on.
        Meanwhile puts stage every object they make, even one the store has (it may be
        one that goes: the commit after writes what went); the old packs are deleted
        under the lock, when no read is under way."""
        from ckptcli.store.prune import collect

        with contextlib.nullcontext() if mutex_held else self._commit_mutex:
            with self._lock:
                self._codec.item_memo.clear()  # their EVs may name objects that go now: made again when seen again
                self._writer.forget()
                self._staging.dedupe = False
                writer = None if self._copying else self._mark
            try:
                # a copy of a thread under way names the objects of its snapshot without
                # holding anything: they stay, as for another live saver
                gc = collect(self.store, writer=writer, finishing=lambda: self._lock)
            finally:
                with self._lock:
                    self._staging.dedupe = True
            if not gc.writers_alive:
                self._garbage = 0

    def _drop(self, keys: _Keys) -> None:
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

    def _store_ids(self, keys: _Keys, threads: set[str]) -> set[bytes]:
        """The store's checkpoints (every revision) of `keys` and of `threads`: what the
        saver knows of those threads' manifests, brought up to date (`_thread_keys`: one
        listing of the manifests' names, and only those new since it last looked read)."""
        gone: set[tuple[str, str, str]] = set(keys)
        wanted = set(threads) | {key[0] for key in keys}
        if not wanted:
            return set()
        if self._index.known is None:
            self._index.keys()  # the first look: the catalog
        else:
            self._index.thread_keys(min(wanted))  # brings `_known_rows` up to date, for every thread
        out: set[bytes] = set()
        for thread in wanted:
            for cid, (_rev, _created, k) in self._index.rows.get(thread, {}).items():
                if thread in threads or (k.thread_id, k.ns, k.checkpoint_id) in gone:
                    out.add(cid)
        return out

    def _siblings(self, keys: _Keys, threads: set[str]) -> _Siblings:
        """The store's checkpoints of the threads of `keys` and `threads`, by subject: what
        a thread's latest moves to when its head is deleted (caller holds the lock)."""
        out: _Siblings = {}
        for thread in set(threads) | {key[0] for key in keys}:
            out.setdefault(layout.subject_for(thread), []).extend(self._index.rows.get(thread, {}))
        return out

    def _delete_from_store(self, keys: _Keys, threads: set[str], ids: set[bytes] | None = None, siblings: _Siblings | None = None) -> None:
        """Remove the store's checkpoints `ids` (those of `keys` and `threads` now, for a
        delete journaled before the ids were): their manifests and refs; their objects
        are left for the next collection (`_delete`)."""
        from ckptcli.store.prune import forget_checkpoints

        if ids is None or siblings is None:
            with self._lock:
                ids = self._store_ids(keys, threads) if ids is None else ids
                siblings = self._siblings(keys, threads)
        ids = {cid for cid in ids if self.store.backend.exists(f"manifests/{cid.hex()}")}  # a replay: some may be gone
        if ids:
            got = siblings
            removed = forget_checkpoints(self.store, ids, siblings=lambda subject: got.get(subject, []))
            with self._lock:
                self._garbage += len(removed)

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
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._lock:
            self._check()
        if src == dst:
            return  # a thread is a copy of itself
        with self._holding({src}, wrote=False):
            rows, blobs, index = self._copy_snapshot(src)
        try:
            items = self._copy_manifests(rows)
            if items is None:  # a checkpoint of the snapshot was removed since (the source deleted or pruned): as it is now, read under its lease
                with self._holding({src}, wrote=False):
                    rows, blobs, index = self._copy_snapshot(src, again=True)
                    items = self._copy_manifests(rows, strict=True)
            if items:
                with self._holding({dst}):  # the target's other readers read it again
                    self._copy_publish(items, blobs, index, dst)
        finally:
            with self._lock:
                self._copying -= 1

    def _copy_snapshot(self, src: str, again: bool = False) -> tuple[_CopyRows, _CopiedBlobs, set[str]]:
        """Commit what this saver has of thread `src` not committed yet, then take its
        committed checkpoints: (key, parent id, created, id of the newest revision),
        parents first; the values of them this saver has in memory (shared with the
        copies, as the store's objects are); and the store's index files then. The
        caller holds the lease; from here until `copy_thread` is done, removals by this
        saver leave objects (`_copying`: not counted `again`)."""
        with self._commit_mutex:
            with self._lock:
                self._check()
                for e in sorted(self._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] == src and e.state == LEAF:
                        self._seal(e)  # early, as a hand-over does: a write that comes later makes a revision
            self._commit_locked()
            with self._lock:
                entries = sorted((e for ids in self._thread_entries(src).values() for e in ids.values()), key=lambda e: e.seq)
                rows = [(e.key, e.parent, e.created_ns, e.committed) for e in entries if e.committed is not None]
                blobs = {(ns, ch, ver): b for (t, ns, ch, ver), b in self._blobs.items() if t == src}
                index = set(self.store.backend.list("index"))
                if not again:
                    self._copying += 1
                return rows, blobs, index

    def _copy_manifests(self, rows: _CopyRows, strict: bool = False) -> _Copies | None:
        """The manifests of a snapshot's checkpoints (immutable: read without the lease),
        or None when one of them is gone (`strict`: NotFoundError, which says which)."""
        from ckptcli.errors import NotFoundError

        try:
            return [(key, parent, created, self.store.manifest(cid)) for key, parent, created, cid in rows]
        except NotFoundError:
            if strict:
                raise
            return None

    def _copy_publish(self, items: _Copies, blobs: _CopiedBlobs, index: set[str], dst: str) -> None:
        """Write the copies of `items` to thread `dst` as new manifests (the caller holds
        the target's lease), made durable together as a commit's are, then move the
        target's latest and take them as this saver's checkpoints of the thread. `index`:
        the store's index files when the snapshot was taken (one gone: a removal
        rewrote the packs, and every object the copies need is checked first)."""
        import dataclasses

        subject = layout.subject_for(dst)
        with self._commit_mutex:
            with self._lock:
                self._check()
                had = bool(self._thread_entries(dst))
                for e in sorted(self._uncommitted(), key=lambda e: e.seq):
                    if e.key[0] == dst and e.state == LEAF:
                        self._seal(e)  # the target's own puts first: a copy of the same checkpoint is a revision of it
            if had:
                self._commit_locked()
            with self._lock:
                # a crash from here on leaves copies in the store that no journal names:
                # the dirty lease makes the next saver to take the thread read it again
                self._mark_dirty(self._leases[dst])
                made: dict[tuple[str, str], bytes] = {}
                batch: list[tuple[bytes, bytes, Key, int]] = []
                for (_src, ns, cid), parent_id, created, m in items:
                    old = self._entries.get((dst, ns, cid))
                    rev = old.rev + 1 if old is not None else 1
                    parents: list[bytes] = []
                    if parent_id:
                        pmid = made.get((ns, parent_id))
                        if pmid is None:
                            pe = self._entries.get((dst, ns, parent_id))
                            pmid = pe.manifest if pe is not None else None
                        if pmid is not None:
                            parents.append(pmid)
                    if old is not None and old.manifest is not None and old.manifest not in parents:
                        parents.append(old.manifest)  # the revision this one replaces
                    copy = dataclasses.replace(m, subject=subject, labels=layout.relabel(m.labels, dst, rev), parents=parents, created_ns=created)
                    data = copy.encode()
                    mid = hashlib.sha256(data).digest()
                    made[(ns, cid)] = mid
                    batch.append((mid, data, Key(dst, ns, cid, parent_id, rev), created))
            store = self.store
            with store.backend.lock("store", shared=True):  # no removal runs meanwhile
                if index - set(store.backend.list("index")):
                    self._check_batch_after_prune([(mid, data) for mid, data, _k, _c in batch])
                todo = [(f"manifests/{mid.hex()}", data) for mid, data, _k, _c in batch]
                store.backend.write_atomic_many([(n, d) for n, d in todo if not store.backend.exists(n)])
                root = [(c, mid) for mid, _d, k, c in batch if not k.ns]
                nested = not root
                created, head = max(root or [(c, mid) for mid, _d, _k, c in batch])
                store.advance_latest(subject, head, created, nested=nested, log=False)
            with self._lock:
                if had:
                    self._reload_thread(dst)  # its values and versions as the store has them now
                else:
                    self._use(dst)
                    for (ns, ch, ver), b in blobs.items():
                        self._blobs[(dst, ns, ch, ver)] = b
                    for mid, _data, k, created in batch:
                        key = (dst, k.ns, k.checkpoint_id)
                        e = self._new_entry(key, k.parent_id)
                        e.state, e.manifest, e.committed, e.committed_rev, e.rev, e.created_ns, e.loaded = COMMITTED, mid, mid, k.rev, k.rev, created, False
                        del self._open[key]
                        self._index.add(mid, k.rev, created, k)

    # -- a thread from any checkpoint -------------------------------------------------------------
    def thread_from(self, ref: str, thread_id: str) -> RunnableConfig:
        """Start thread `thread_id` at a LangGraph checkpoint of the store named the
        ckpt way (id or prefix, tag, branch, KIND:NAME, REF~N), typically what `ckpt fork`
        made: its state, and the pending writes its snapshot and tail hold. Invoking the
        graph with the returned config (or just the thread id) resumes from there.

        Raises:
            NotFoundError for an unknown ref; InvalidInputError for a checkpoint that
            holds no LangGraph checkpoint, or a thread that has it already.
        """
        with self._lock:
            self._check()
        with self._holding({str(thread_id)}):  # as a put: other processes' savers see the new thread
            return self._thread_from(ref, str(thread_id))

    def _thread_from(self, ref: str, thread: str) -> RunnableConfig:
        from ckptcli.api import open_checkpoint

        with self._lock:
            ck = open_checkpoint(ref, self.store)
            if layout.EXT_SECTION not in ck.manifest.sections:
                raise InvalidInputError(f"checkpoint {ck.hex[:12]} holds no LangGraph checkpoint (no {layout.EXT_SECTION} section)")
            where = f"checkpoint {ck.hex[:12]}"
            stored = layout.read_ext(ck.section(layout.EXT_SECTION), ck.section("events") if "events" in ck.manifest.sections else [], where)
            memory = ck.section("memory")
            if type(memory) is not dict:
                raise CorruptError(f"{where}: its memory section is not a map of channels")
            cid = ck.manifest.labels.get(layout.LABEL_CHECKPOINT)
            ns = ck.manifest.labels.get(layout.LABEL_NS, "")
            if cid is None:
                raise InvalidInputError(f"{where} has no {layout.LABEL_CHECKPOINT} label")
            if (thread, ns, cid) in self._entries:
                raise InvalidInputError(f"thread {thread!r} has checkpoint {cid} already", hint="give a new thread id")
            specs: dict[str, Any] = {}
            for ch, ver in stored.versions.items():
                if ch not in memory:
                    specs[ch] = [ver, ["e"]]
                    continue
                tag = stored.channel_types.get(ch, MSGPACK)
                view = memory[ch]
                if tag == MSGPACK and type(view) is list and self._fast:
                    specs[ch] = [ver, ["l", 0, [from_view(v) for v in view]]]
                else:
                    typed = layout.view_typed(tag, view, f"{where} channel {ch}")
                    specs[ch] = [ver, ["t", typed[0], typed[1]]]
            rec = {
                "op": "p", "t": thread, "n": ns, "i": cid, "p": None, "c": self.clock(),
                "k": list(stored.skeleton), "m": list(stored.metadata), "v": stored.versions, "b": specs,
            }  # fmt: skip
            self._mark_dirty(self._leases[thread])
            self._journal.append(_frame(rec))
            self._apply_put(rec, None, where)
            if stored.writes:
                self._journal.append(_frame(self._writes_record((thread, ns, cid), stored.writes)))
                self._apply_writes((thread, ns, cid), stored.writes)
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}

    # -- versions --------------------------------------------------------------------------------------
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

    # -- async ------------------------------------------------------------------------------------------
    # Every async method runs its sync twin on a worker thread (as aiosqlite does for
    # AsyncSqliteSaver): a put can wait for an fdatasync, a lease or the saver's lock,
    # and a read can decode a long history; none of that may stall the event loop. The
    # sync methods are thread-safe (the saver's lock); one coroutine's calls stay ordered.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = await asyncio.to_thread(self.list, config, filter=filter, before=before, limit=limit)
        while True:
            # a batch per hop: the thread switch costs ~50 us, a tuple far less
            batch = await asyncio.to_thread(lambda: list(itertools.islice(it, _ALIST_BATCH)))
            for item in batch:
                yield item
            if len(batch) < _ALIST_BATCH:
                return

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

