"""LangGraph's long-term memory store on ckpt: `CkptStore`, a `BaseStore`, sync and async.

    graph = builder.compile(checkpointer=CkptSaver.open(".ckpt"), store=CkptStore.open(".ckpt"))

It behaves as LangGraph's `InMemoryStore` does (namespaces, get/put/delete, filtered and
semantic search, namespace listing) and supports TTLs. docs/langgraph.md ("Long-term
memory") is the guide, formats/langgraph-store.md the layout. Invariant: every batch that
changes items is one record appended to the shared log under the store's exclusive lock
``langgraph-store`` before the call returns, and each process reads what others appended
before each batch (store_file.py); store_items.py checks items and answers searches."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from ckptcli.adapters.langgraph.hostdir import HostLocks, ToMake, host_branch, is_remote, local_root, store_for
from ckptcli.adapters.langgraph.journal import (
    own_dir,
)
from ckptcli.adapters.langgraph.store_file import MAX_BATCH_BYTES as MAX_BATCH_BYTES
from ckptcli.adapters.langgraph.store_file import MemoryLog
from ckptcli.adapters.langgraph.store_items import MAX_DEPTH as MAX_DEPTH
from ckptcli.adapters.langgraph.store_items import MAX_VALUE_BYTES as MAX_VALUE_BYTES
from ckptcli.adapters.langgraph.store_items import (
    NS,
    NsKey,
    dt,
    encode_value,
    expiry,
    list_namespaces,
    search,
    validate_filter,
    validate_put,
)
from ckptcli.adapters.langgraph.store_log import (
    LOCK_NAME,
    SNAPSHOT_BRANCH,
    SNAPSHOT_SUBJECT,
    SNAPSHOT_VERSION,
    log_dir,
)
from ckptcli.errors import CkptError, CorruptError, InvalidInputError, UsageError
from ckptcli.store.repository import Store

__all__ = ["CkptStore"]

FSYNC_POLICIES = ("always", "never")


class CkptStore(BaseStore):
    """LangGraph's long-term memory store backed by a ckpt store (module docstring: how).

    Args:
        store: a Store, or the path of a store directory (or of a directory holding
            ``.ckpt/``); `open` creates it when missing. The same store a `CkptSaver`
            uses: one directory holds an app's threads and its memories.
        index: semantic search, as InMemoryStore's ``index`` ({"dims", "embed",
            "fields"}); without it a search's ``query`` is ignored.
        ttl: LangGraph's TTLConfig: ``default_ttl`` (minutes) for puts that give none,
            ``refresh_on_read`` (default True), ``sweep_interval_minutes`` (a thread
            that deletes expired items that often). Expired items are never returned,
            whether swept yet or not.
        fsync: "always" (default: a put that returned survives a power cut; one
            fdatasync per batch that writes) or "never" (it survives the process being
            killed; the OS decides when it reaches the disk).
        clock: seconds since the epoch, for timestamps and TTLs (default time.time).
        compact_bytes: the log size past which a write snapshots the items into a ckpt
            checkpoint and starts a new log.
        lock_timeout: seconds to wait for another process's batch before LockError.
        journal_dir: for a store on object storage: the directory on this host's disk
            for the log (in its ``langgraph/store/``), as `CkptSaver`'s. The log is
            this host's: processes on this host share the items, another host's
            CkptStore on the same store has its own (docs/langgraph.md).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store | ToMake | str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        fsync: str = "always",
        clock: Callable[[], float] | None = None,
        compact_bytes: int = 16 * 1024 * 1024,
        lock_timeout: float = 30.0,
        journal_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise InvalidInputError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if type(compact_bytes) is not int or compact_bytes < 4096:
            raise InvalidInputError(f"compact_bytes must be an integer >= 4096, not {compact_bytes!r}")
        if ttl is not None and not isinstance(ttl, dict):
            raise InvalidInputError(f"ttl must be a TTLConfig dict, not {type(ttl).__name__}")
        self.fsync = fsync
        self.clock = clock or time.time
        self.compact_bytes = compact_bytes
        self.lock_timeout = lock_timeout
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        if index:
            self.index_config = dict(index)
            self.embeddings = ensure_embeddings(self.index_config.get("embed"))
            self.index_config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (self.index_config.get("fields") or ["$"])
            ]
        self.store = store_for(store, journal_dir)  # once every option is checked (made, for `open`)
        try:
            root = local_root(self.store, journal_dir)
            assert root is not None
            # on object storage the log is this host's (hostdir.py), locked here, and its
            # snapshots kept by a branch of this host's, so one host's never unprotects another's
            self._host_locks = HostLocks(root) if is_remote(self.store) else None
        except BaseException:
            if not isinstance(store, Store):
                self.store.close()
            raise
        self._dir = log_dir(root)
        self._mu = threading.RLock()
        self._closed = False
        branch = SNAPSHOT_BRANCH if self._host_locks is None else host_branch(root)
        self._branch = branch
        self._log = MemoryLog(self.store, self._dir, fsync, branch)
        self._retry_at = 0  # after a compaction failed: the log size at which to try again
        self.compactions = 0  # snapshots this process took (for tests and benchmarks)
        own_dir(self._dir.parent)
        own_dir(self._dir)
        with self._mu, self._lock(shared=False):
            self._log.open_newest(cleanup=True)
        self._sweep_stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if ttl and ttl.get("sweep_interval_minutes"):
            self.start_ttl_sweeper()

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ".ckpt", **options: Any) -> CkptStore:
        """The memory store of the store at `path` (created as `ckpt init` would when
        there is none). Options are the constructor's."""
        return cls(ToMake(path), **options)  # made once the constructor has checked every option

    def __enter__(self) -> CkptStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CkptStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the TTL sweeper and close the log (every write is in it already)."""
        self.stop_ttl_sweeper()
        with self._mu:
            if self._closed:
                return
            self._closed = True
            self._log.close()
            self.store.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed and self._log.fd >= 0:
                os.close(self._log.fd)

    def _lock(self, shared: bool) -> contextlib.AbstractContextManager[None]:
        locks = self._host_locks if self._host_locks is not None else self.store.backend
        return locks.lock(LOCK_NAME, shared=shared, wait=self.lock_timeout)

    def _refresh(self, writing: bool) -> None:
        """Take in what other processes wrote since this one last looked (under a lock)."""
        if self._closed:
            raise UsageError("this CkptStore is closed")
        self._log.refresh(writing)

    def _create_log(self, gen: int, snapshot: bytes | None) -> None:
        """Write the log of generation `gen` (`MemoryLog.create_log`)."""
        self._log.create_log(gen, snapshot)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, encoded = self._prepare(ops)
        put_vecs = self._embed_puts(puts)
        query_vecs: dict[str, list[float]] = {}
        if self.embeddings is not None:
            for q in dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query):
                query_vecs[q] = list(self.embeddings.embed_query(q))
        return self._execute(ops, puts, encoded, put_vecs, query_vecs)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops, puts, encoded = self._prepare(ops)
        put_vecs: dict[NsKey, dict[str, list[float]]] = {}
        query_vecs: dict[str, list[float]] = {}
        if self.embeddings is not None:
            texts, where = self._texts(puts)
            if texts:
                put_vecs = self._place(where, await self.embeddings.aembed_documents(texts))
            queries = list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))
            if queries:
                got = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
                query_vecs = {q: list(v) for q, v in zip(queries, got, strict=True)}
        return await asyncio.to_thread(self._execute, ops, puts, encoded, put_vecs, query_vecs)

    def _prepare(self, ops: Iterable[Op]) -> tuple[list[Op], dict[NsKey, PutOp], dict[NsKey, bytes]]:
        """Check every op before anything runs (and before anything is embedded); the
        puts, last one per item wins (at the place of the first, as InMemoryStore applies
        them), and their values encoded."""
        checked: list[Op] = []
        puts: dict[NsKey, PutOp] = {}
        encoded: dict[NsKey, bytes] = {}
        for op in ops:
            if not isinstance(op, (GetOp, SearchOp, PutOp, ListNamespacesOp)):
                raise InvalidInputError(
                    f"unknown store operation {type(op).__name__}", hint="use GetOp, PutOp, SearchOp or ListNamespacesOp"
                )
            validate_op_namespace(op)
            if isinstance(op, (GetOp, PutOp)) and type(op.namespace) is not tuple:
                op = op._replace(namespace=tuple(op.namespace))
            if isinstance(op, SearchOp) and type(op.namespace_prefix) is not tuple:
                op = op._replace(namespace_prefix=tuple(op.namespace_prefix))
            if isinstance(op, PutOp):
                validate_put(op)
                k = (op.namespace, op.key)
                if op.value is not None:
                    value, encoded[k] = encode_value(op.namespace, op.key, op.value)
                    op = op._replace(value=value)
                else:
                    encoded.pop(k, None)
                puts[k] = op
            elif isinstance(op, SearchOp):
                validate_filter(op.filter)
            checked.append(op)
        return checked, puts, encoded

    def _texts(self, puts: dict[NsKey, PutOp]) -> tuple[list[str], dict[str, list[tuple[NsKey, str]]]]:
        """The texts to embed for `puts` (each once) and where each goes: (item, path)."""
        where: dict[str, list[tuple[NsKey, str]]] = {}
        if self.index_config is None:
            return [], where
        for k, op in puts.items():
            if op.value is None or op.index is False:
                continue
            paths = self.index_config["__tokenized_fields"] if op.index is None else [(ix, tokenize_path(ix)) for ix in op.index]
            for path, field in paths:
                texts = get_text_at_path(op.value, field)
                for i, text in enumerate(texts):
                    where.setdefault(text, []).append((k, f"{path}.{i}" if len(texts) > 1 else path))
        return list(where), where

    @staticmethod
    def _place(where: dict[str, list[tuple[NsKey, str]]], vectors: list[list[float]]) -> dict[NsKey, dict[str, list[float]]]:
        if len(vectors) != len(where):
            raise InvalidInputError(f"the embedding function returned {len(vectors)} vectors for {len(where)} texts")
        out: dict[NsKey, dict[str, list[float]]] = {}
        for vec, targets in zip(vectors, where.values(), strict=True):
            v = [float(x) for x in vec]
            for k, path in targets:
                out.setdefault(k, {})[path] = v
        return out

    def _embed_puts(self, puts: dict[NsKey, PutOp]) -> dict[NsKey, dict[str, list[float]]]:
        if self.embeddings is None:
            return {}
        texts, where = self._texts(puts)
        if not texts:
            return {}
        return self._place(where, list(self.embeddings.embed_documents(texts)))

    def _execute(
        self,
        ops: list[Op],
        puts: dict[NsKey, PutOp],
        encoded: dict[NsKey, bytes],
        put_vecs: dict[NsKey, dict[str, list[float]]],
        query_vecs: dict[str, list[float]],
    ) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        touch: dict[NsKey, None] = {}
        with self._mu:
            if self._closed:
                raise UsageError("this CkptStore is closed")
            with self._lock(shared=not puts):
                self._refresh(writing=bool(puts))
                data = self._log.data  # (read again by the refresh: a compaction elsewhere starts a new one)
                now = int(self.clock() * NS)
                for i, op in enumerate(ops):  # reads see the store as it was before this batch's puts
                    if isinstance(op, GetOp):
                        r = data.get(op.namespace, {}).get(op.key)
                        if r is not None and r.live(now):
                            results[i] = Item(
                                value=msgpack.unpackb(r.raw, raw=False),
                                key=op.key,
                                namespace=op.namespace,
                                created_at=dt(r.created),
                                updated_at=dt(r.updated),
                            )
                            if op.refresh_ttl and r.ttl is not None:
                                touch[(op.namespace, op.key)] = None
                    elif isinstance(op, SearchOp):
                        found = search(data, op, now, query_vecs, self.embeddings is not None)
                        results[i] = found
                        if op.refresh_ttl and self._log.ttl_items:
                            for it in found:
                                r = data[it.namespace][it.key]
                                if r.ttl is not None:
                                    touch[(it.namespace, it.key)] = None
                    elif isinstance(op, ListNamespacesOp):
                        results[i] = list_namespaces(data, op, now)
                if puts:
                    self._write_puts(puts, encoded, put_vecs, now, touch)
                    self._maybe_compact(now)
                    return results
            if touch:  # refresh the TTLs read: a write, under the exclusive lock
                with self._lock(shared=False):
                    self._refresh(writing=True)
                    # not synced: a refresh a power cut loses lets the item expire at its earlier time
                    self._log.append({"op": "touch", "t": int(self.clock() * NS), "k": [[list(ns), key] for ns, key in touch]}, sync=False)
        return results

    def _write_puts(
        self,
        puts: dict[NsKey, PutOp],
        encoded: dict[NsKey, bytes],
        put_vecs: dict[NsKey, dict[str, list[float]]],
        now: int,
        touch: dict[NsKey, None],
    ) -> None:
        items: list[list[Any]] = []
        seq = self._log.next_seq
        if seq + len(puts) >= 2**63:
            raise CorruptError(
                f"the LangGraph store's log {self._log.path(self._log.gen)} names an item sequence number near 2**63: "
                "no new item can be numbered",
                hint="nothing was written; a record a writer of ckpt does not make is in the log: restore the store from a backup",
            )
        for (ns, key), op in puts.items():
            old = self._log.data.get(ns, {}).get(key)
            if op.value is None:
                if old is not None:
                    items.append([list(ns), key, None, 0, 0, None, None, 0, None])
                continue
            if old is not None and old.live(now):
                created, s = old.created, old.seq
            else:
                created, s, seq = now, seq, seq + 1
            ttl = None if op.ttl is None else float(op.ttl)
            expires = None if ttl is None else expiry(now, ttl)
            items.append([list(ns), key, encoded[(ns, key)], created, now, ttl, expires, s, put_vecs.get((ns, key))])
        touched = [[list(ns), key] for ns, key in touch if (ns, key) not in puts]
        if items:
            self._log.append({"op": "put", "items": items})
        if touched:
            self._log.append({"op": "touch", "t": now, "k": touched}, sync=False)

    def _maybe_compact(self, now: int) -> None:
        if self._log.offset < max(self.compact_bytes, self._retry_at):
            return
        try:
            self._compact(now)
        except CkptError as exc:  # the batch is written: it must not look failed; a write tries again later
            self._retry_at = self._log.offset + self.compact_bytes
            self.store.warn(f"the LangGraph store could not compact its log {self._log.path(self._log.gen)}: {exc.message}")

    def compact(self) -> bytes:
        """Snapshot every live item into a ckpt checkpoint now and start a new log from
        it (what a write does once the log passes `compact_bytes`); returns the
        checkpoint's id. `ckpt show workflow:langgraph-store` then shows every item."""
        with self._mu, self._lock(shared=False):
            self._refresh(writing=True)
            return self._compact(int(self.clock() * NS))

    def _compact(self, now: int) -> bytes:
        """Snapshot the live items into a ckpt checkpoint and start the next log from it
        (under the exclusive lock, after a refresh)."""
        from ckptcli.writer import take

        namespaces: list[dict[str, Any]] = []
        count = 0
        for ns, recs in self._log.data.items():
            live = [
                {
                    "key": key,
                    "value": r.value,
                    "created_ns": r.created,
                    "updated_ns": r.updated,
                    "ttl": r.ttl,
                    "expires_ns": r.expires,
                    "seq": r.seq,
                    **({"vectors": r.vectors} if r.vectors else {}),
                }
                for key, r in recs.items()
                if r.live(now)
            ]
            count += len(live)
            if live:
                namespaces.append({"namespace": list(ns), "items": live})
        doc = {"memory": {"langgraph-store": SNAPSHOT_VERSION, "namespaces": namespaces}}
        gen = self._log.gen + 1
        res = take(
            self.store,
            doc,
            subject=SNAPSHOT_SUBJECT,
            branch=self._branch,
            labels={"langgraph.store.generation": str(gen)},
            message=f"LangGraph memory store: {count} items",
        )
        self._create_log(gen, res.id)
        old = self._log.path(self._log.gen)
        with contextlib.suppress(OSError):
            old.unlink()
        self.compactions += 1
        self._retry_at = 0
        self._log.open_newest()
        return res.id

    def sweep_ttl(self) -> int:
        """Delete the expired items from the log now; returns how many. (They are never
        returned once expired, swept or not; a sweep frees their space.)"""
        with self._mu, self._lock(shared=False):
            self._refresh(writing=True)
            now = int(self.clock() * NS)
            gone = [
                [list(ns), key, None, 0, 0, None, None, 0, None]
                for ns, recs in self._log.data.items()
                for key, r in recs.items()
                if not r.live(now)
            ]
            if gone:
                self._log.append({"op": "put", "items": gone})
            return len(gone)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items every `sweep_interval_minutes` (default: the TTLConfig's,
        else 5) on a daemon thread, until close or stop_ttl_sweeper."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        self._sweep_stop.clear()

        def loop() -> None:
            while not self._sweep_stop.wait(interval * 60):
                with contextlib.suppress(CkptError):
                    self.sweep_ttl()

        self._sweeper = threading.Thread(target=loop, name="ckpt-langgraph-store-ttl", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True if it is stopped."""
        sweeper = getattr(self, "_sweeper", None)
        if sweeper is None:
            return True
        self._sweep_stop.set()
        sweeper.join(timeout)
        if sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)
