"""What deleting a LangGraph thread and sweeping expired ones cost, counted (not timed):
a delete reads what it deletes, not the rest of the store; a TTL sweep of N threads is
one removal and one collection, not N; and the collection walks the store without
holding the saver's lock, so other threads' reads and puts go on meanwhile."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ckptcli.adapters.langgraph.saver as lg
from ckptcli import api
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.format.walk import walk_checkpoint
from ckptcli.store import prune
from ckptcli.store import verify as integrity
from ckptcli.store.backend import LocalBackend
from ckptcli.store.repository import Store
from tests.langgraph_graphs import chat_builder, chat_message

HOUR = 3600 * 10**9


class Clock:
    def __init__(self, offset_ns: int = 0) -> None:
        self.offset = offset_ns

    def __call__(self) -> int:
        return time.time_ns() + self.offset


def _chat(saver: CkptSaver, thread: str, turns: int = 2) -> None:
    graph = chat_builder(turns, words=40).compile(checkpointer=saver)
    graph.invoke({"messages": [chat_message(0, 40)]}, {"configurable": {"thread_id": thread}})


class Reads:
    """Counts the store reads while `on`: manifests decoded (Store.manifest), files read
    (by their top directory) and ranges of packs read (objects)."""

    def __init__(self) -> None:
        self.on = False
        self.counts: Counter[str] = Counter()

    def add(self, what: str) -> None:
        if self.on:
            self.counts[what] += 1


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    got = Reads()
    manifest, read, read_range = Store.manifest, LocalBackend.read, LocalBackend.read_range

    def counted_manifest(self: Store, cid: bytes) -> Any:
        got.add("Store.manifest")
        return manifest(self, cid)

    def counted_read(self: LocalBackend, path: str) -> bytes:
        got.add(f"read {path.split('/', 1)[0]}")
        return read(self, path)

    def counted_range(self: LocalBackend, path: str, offset: int, length: int) -> bytes:
        got.add(f"read_range {path.split('/', 1)[0]}")
        return read_range(self, path, offset, length)

    monkeypatch.setattr(Store, "manifest", counted_manifest)
    monkeypatch.setattr(LocalBackend, "read", counted_read)
    monkeypatch.setattr(LocalBackend, "read_range", counted_range)
    return got


def _delete_reads(store: Path, others: int, reads: Reads, restart: bool) -> Counter[str]:
    saver = CkptSaver.open(store)
    try:
        for i in range(others):
            _chat(saver, f"other-{i}")
        _chat(saver, "gone")
        saver.flush()
        if restart:  # the threads written by an earlier process: the saver knows them from the catalog
            saver.close()
            saver = CkptSaver.open(store)
        reads.counts = Counter()
        reads.on = True
        try:
            saver.delete_thread("gone")
        finally:
            reads.on = False
        assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None
        return reads.counts
    finally:
        saver.close()


@pytest.mark.parametrize("restart", [False, True], ids=["written-here", "after-a-restart"])
def test_delete_thread_reads_as_much_whatever_else_the_store_holds(tmp_path: Path, reads: Reads, restart: bool) -> None:
    """delete_thread read every manifest and walked every surviving checkpoint of the
    store (the saver's lock held throughout): its cost grew with the store."""
    small = _delete_reads(tmp_path / "small", 2, reads, restart)
    big = _delete_reads(tmp_path / "big", 24, reads, restart)
    assert small == big, (small, big)
    assert small["Store.manifest"] <= 12  # the thread's own checkpoints (and their latest's)


def test_a_deleted_threads_objects_stay_until_ckpt_prune_collects_them(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        _chat(saver, "keep")
        for i in range(3):
            _chat(saver, f"gone-{i}", turns=3)
        saver.flush()
        objects = len(api.open_store(store).index())
        for i in range(3):
            saver.delete_thread(f"gone-{i}")
        assert len(api.open_store(store).index()) == objects  # left for the next collection
    st = api.open_store(store)
    assert integrity.verify_store(st, None, read_data=True).ok
    assert {str(st.manifest(c).subject) for c in st.manifest_ids()} == {"agent:keep"}
    res = cli("prune", "--keep-last", "100", "--json", "--store", store)
    assert res.code == 0, res.err
    after = api.open_store(store)
    assert len(after.index()) < objects
    assert integrity.verify_store(after, None, read_data=True).ok
    with CkptSaver.open(store) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "keep"}})
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 2


def test_deletes_collect_once_what_they_left_is_a_quarter_of_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lg, "_COLLECT_MIN", 1)
    collections: list[prune.GcReport] = []
    real = prune.collect

    def counted(*a: Any, **kw: Any) -> prune.GcReport:
        collections.append(real(*a, **kw))
        return collections[-1]

    monkeypatch.setattr(prune, "collect", counted)
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        for i in range(8):
            _chat(saver, f"t{i}")
        saver.flush()
        objects = len(api.open_store(store).index())
        saver.delete_thread("t0")  # an eighth of the store: left
        assert collections == []
        saver.delete_thread("t1")  # a quarter: collected
        assert len(collections) == 1 and collections[0].writers_alive == 0
        assert len(api.open_store(store).index()) < objects
        assert saver.get_tuple({"configurable": {"thread_id": "t7"}}) is not None
    assert integrity.verify_store(api.open_store(store), None, read_data=True).ok


def _expired_store(store: Path, n: int) -> Clock:
    clock = Clock()
    with CkptSaver.open(store, clock=clock) as saver:
        for i in range(n):
            _chat(saver, f"old-{i}")
        clock.offset += 3 * HOUR
        _chat(saver, "live")
    return clock


def test_a_sweep_of_many_expired_threads_is_one_removal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep removed expired threads one at a time, each removal a walk of the whole
    store: quadratic in the threads it expired."""
    store = tmp_path / ".ckpt"
    clock = _expired_store(store, 12)
    plans: list[int] = []
    walked: list[int] = []
    real_plan, real_walk = prune._plan_gc, walk_checkpoint

    def plan(store_: Store, survivors: dict[bytes, Any], *a: Any, **kw: Any) -> Any:
        plans.append(len(survivors))
        return real_plan(store_, survivors, *a, **kw)

    def walk(*a: Any, **kw: Any) -> Any:
        walked.append(1)
        return real_walk(*a, **kw)

    monkeypatch.setattr(prune, "_plan_gc", plan)
    monkeypatch.setattr("ckptcli.store.prune.walk_checkpoint", walk)
    with CkptSaver.open(store, clock=clock, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}) as saver:
        swept = saver.sweep_ttl()
        assert sorted(swept) == sorted(f"old-{i}" for i in range(12))
        live = len([c for c in api.open_store(store).manifest_ids()])
        assert len(plans) == 1 and plans[0] == live  # one collection, of the survivors
        assert len(walked) == live  # each survivor walked once
        assert saver.get_tuple({"configurable": {"thread_id": "live"}}) is not None
    assert integrity.verify_store(api.open_store(store), None, read_data=True).ok


def test_other_threads_read_and_write_while_the_sweep_collects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The saver's lock was held for the whole removal: a get_tuple of a live thread
    waited for the sweep. Now, from inside the collection's walk, another thread reads
    a live thread and runs a turn of a new one, with the very messages whose objects the
    expired threads held (the collection must not take them from under that turn)."""
    store = tmp_path / ".ckpt"
    clock = _expired_store(store, 6)
    real_walk = walk_checkpoint
    done: dict[str, Any] = {}
    saver = CkptSaver.open(store, clock=clock, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6})

    def other() -> None:
        got = saver.get_tuple({"configurable": {"thread_id": "live"}})
        done["read"] = got is not None
        _chat(saver, "new")  # the same messages as the expired threads': their objects
        done["turn"] = True

    def walk(*a: Any, **kw: Any) -> Any:
        if "started" not in done:
            done["started"] = True
            t = threading.Thread(target=other)
            t.start()
            t.join(60)  # the old code: blocked on the saver's lock until the sweep ends
            done["during"] = not t.is_alive()
        return real_walk(*a, **kw)

    monkeypatch.setattr("ckptcli.store.prune.walk_checkpoint", walk)
    try:
        assert len(saver.sweep_ttl()) == 6
        assert done.get("during") is True and done.get("read") is True and done.get("turn") is True
        saver.flush()
    finally:
        saver.close()
    monkeypatch.setattr("ckptcli.store.prune.walk_checkpoint", real_walk)
    assert integrity.verify_store(api.open_store(store), None, read_data=True).ok
    with CkptSaver.open(store) as again:
        got = again.get_tuple({"configurable": {"thread_id": "new"}})
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 2
        assert again.get_tuple({"configurable": {"thread_id": "old-0"}}) is None
