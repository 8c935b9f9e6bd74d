"""Thread TTL, as LangGraph Platform configures it: `CkptSaver(ttl=...)` sweeping in the
background and on demand, and `ckpt prune --langgraph-ttl`.

Time is a controllable clock given to the saver (it stamps each put), never a sleep:
a thread written "two days ago" is one written by a saver whose clock said so.
Resumability after keep_latest is checked as tests/test_langgraph_prune.py does: the
pruned store against an unpruned copy of the same run.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from ckptcli import api
from ckptcli.adapters.langgraph.journal import JOURNAL_DIR
from ckptcli.adapters.langgraph.saver import CkptSaver, _lease_name
from ckptcli.errors import InvalidInputError, NotFoundError
from tests.langgraph_graphs import chat_builder, chat_message, delta_chat_builder, normalized, review_builder
from tests.test_langgraph_prune import THREAD, _compare, delta_thread_resumes_alike

HOUR = 3600 * 10**9
DAY = 24 * HOUR


class Clock:
    def __init__(self, offset_ns: int = 0) -> None:
        self.offset = offset_ns

    def __call__(self) -> int:
        return time.time_ns() + self.offset


def _chat(saver: CkptSaver, thread: str, turns: int = 3, **own: Any) -> None:
    graph = chat_builder(turns, words=4).compile(checkpointer=saver)
    graph.invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": thread, **own}})


def _subjects(store: Path) -> dict[str, int]:
    st = api.open_store(store)
    try:
        out: dict[str, int] = {}
        for cid in st.manifest_ids():
            try:
                subj = str(st.manifest(cid).subject)
            except NotFoundError:
                continue  # removed by a sweep running meanwhile
            out[subj] = out.get(subj, 0) + 1
        return out
    finally:
        st.close()


@pytest.mark.parametrize(
    ("ttl", "says"),
    [
        ({}, "needs 'default_ttl'"),
        ({"default_ttl": 0}, "positive number of minutes"),
        ({"default_ttl": "1d"}, "positive number of minutes"),
        ({"default_ttl": True}, "positive number of minutes"),
        ({"default_ttl": 60, "strategy": "archive"}, "'delete' or 'keep_latest'"),
        ({"default_ttl": 60, "sweep_interval_minutes": -1}, "'sweep_interval_minutes' must be"),
        ({"default_ttl": 60, "sweep_limit": 0}, "'sweep_limit' must be"),
        ({"default_ttl": 60, "refresh_on_read": True}, "unknown key 'refresh_on_read'"),
        (43200, "must be a mapping"),
    ],
)
def test_a_bad_ttl_is_refused_with_what_is_wrong(tmp_path: Path, ttl: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        CkptSaver.open(tmp_path / ".ckpt", ttl=ttl)
    assert not (tmp_path / ".ckpt").exists()  # refused before a store was made
    api.init_store(tmp_path / ".ckpt")
    with pytest.raises(InvalidInputError, match=says):
        CkptSaver(tmp_path / ".ckpt", ttl=ttl)
    assert not list((tmp_path / ".ckpt" / JOURNAL_DIR).glob("*.journal"))  # nothing left behind


def test_the_sweep_deletes_expired_threads_and_leaves_the_others(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    clock = Clock()
    with CkptSaver.open(store, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}, clock=clock) as saver:
        _chat(saver, "old")
        clock.offset += 2 * HOUR
        _chat(saver, "recent")
        saver.flush()
        before = _subjects(store)
        clock.offset += HOUR // 2  # "old": idle 2.5 h, "recent": 0.5 h, the TTL 1 h
        assert list(saver.sweep_ttl()) == ["old"]
        assert list(saver.list({"configurable": {"thread_id": "old"}})) == []
        assert saver.get_tuple({"configurable": {"thread_id": "recent"}}) is not None
        assert list(saver.sweep_ttl()) == []  # nothing more to do
    assert _subjects(store) == {"agent:recent": before["agent:recent"]}
    with CkptSaver.open(store) as again:  # the store says so too, after a restart
        assert again.get_tuple({"configurable": {"thread_id": "old"}}) is None


def test_a_thread_keeps_the_ttl_its_runs_gave_it(tmp_path: Path, cli: Any) -> None:
    """`thread_ttl` (minutes; 0: never) and `thread_ttl_strategy` in a run's config
    override the saver's TTL for that thread, in the sweep and in `ckpt prune`."""
    store = tmp_path / ".ckpt"
    clock = Clock(-3 * DAY)  # and `ckpt prune` below runs now
    with CkptSaver.open(store, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}, clock=clock) as saver:
        _chat(saver, "short", thread_ttl=10)
        _chat(saver, "forever", thread_ttl=0)
        _chat(saver, "trim", thread_ttl=20, thread_ttl_strategy="keep_latest")
        _chat(saver, "default")
        saver.flush()
        clock.offset += HOUR // 2  # 30 min: past 10 and 20, not 60
        assert sorted(saver.sweep_ttl()) == ["short", "trim"]
        assert _subjects(store)["agent:trim"] == 1 and "agent:short" not in _subjects(store)
        res = cli("ls", "-S", "agent:trim", "--json", "--store", store)
        assert [c["labels"]["langgraph.ttl"] for c in json.loads(res.out)] == ["20 keep_latest"]
        clock.offset += 2 * DAY
        assert sorted(saver.sweep_ttl()) == ["default"]
    assert set(_subjects(store)) == {"agent:forever", "agent:trim"}
    res = cli("prune", "--langgraph-ttl", "1m", "--langgraph-ttl-strategy", "delete", "--json", "--store", store)
    assert res.code == 0, res.err
    assert json.loads(res.out)["expired_strategy"] == {"agent:trim": "keep_latest"}  # its own strategy
    assert set(_subjects(store)) == {"agent:forever", "agent:trim"}


def test_a_thread_written_again_is_not_expired(tmp_path: Path) -> None:
    clock = Clock()
    with CkptSaver.open(tmp_path / ".ckpt", ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}, clock=clock) as saver:
        _chat(saver, "t")
        clock.offset += 2 * HOUR
        graph = chat_builder(5, words=4).compile(checkpointer=saver)
        graph.invoke({"messages": [chat_message(3, 4)]}, {"configurable": {"thread_id": "t"}})  # a new turn: written now
        assert list(saver.sweep_ttl()) == []
        assert len(graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"]) == 5


def test_a_thread_another_process_holds_is_left_for_a_later_sweep(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    clock = Clock()
    with CkptSaver.open(store, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}, clock=clock) as saver:
        _chat(saver, "busy")
        saver.flush()
        clock.offset += 2 * HOUR
        # the lease as another process's saver holds it (flock on another open file)
        fd = os.open(store / JOURNAL_DIR / "threads" / _lease_name("busy"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            assert list(saver.sweep_ttl()) == []
            assert "agent:busy" in _subjects(store)
        finally:
            os.close(fd)
        assert list(saver.sweep_ttl()) == ["busy"]
    assert "agent:busy" not in _subjects(store)


def test_the_commit_thread_sweeps_by_itself(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    clock = Clock()
    with CkptSaver.open(store, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.001}, clock=clock) as saver:
        _chat(saver, "gone")
        saver.flush()
        assert "agent:gone" in _subjects(store)
        clock.offset += HOUR
        deadline = time.monotonic() + 60
        while "agent:gone" in _subjects(store) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "agent:gone" not in _subjects(store)
        assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None


# -- keep_latest: every thread resumes with the same answers ---------------------------------------
def _written_two_days_ago(store: Path, run: Any) -> None:
    with CkptSaver.open(store, clock=Clock(-2 * DAY)) as saver:
        run(saver)


def _sweep_keep_latest(store: Path, cli: Any, how: str) -> None:
    if how == "saver":
        with CkptSaver.open(store, ttl={"default_ttl": 24 * 60, "strategy": "keep_latest", "sweep_interval_minutes": 10**6}) as saver:
            assert list(saver.sweep_ttl()) == ["t1"]
        return
    res = cli("prune", "--langgraph-ttl", "1d", "--langgraph-ttl-strategy", "keep_latest", "--store", store)
    assert res.code == 0, res.err
    assert "expired agent:t1: no write for 2d (keep_latest)" in res.out


@pytest.mark.parametrize("how", ["saver", "cli"])
def test_keep_latest_keeps_a_thread_paused_in_a_subgraph_resumable(tmp_path: Path, cli: Any, how: str) -> None:
    pruned, full = tmp_path / "pruned" / ".ckpt", tmp_path / "full" / ".ckpt"
    _written_two_days_ago(pruned, lambda s: review_builder().compile(checkpointer=s).invoke({"messages": [chat_message(0)]}, THREAD))
    shutil.copytree(pruned, full)
    _sweep_keep_latest(pruned, cli, how)
    assert sum(_subjects(pruned).values()) < sum(_subjects(full).values())
    ga, gb, a, b = _compare(review_builder(), pruned, full)
    try:
        done_a, done_b = ga.invoke(Command(resume="yes"), THREAD), gb.invoke(Command(resume="yes"), THREAD)
        assert normalized(done_a) == normalized(done_b)
        assert done_a["messages"][-1].content == "published" and done_a["notes"][-2:] == ["check:yes", "done"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["saver", "cli"])
def test_keep_latest_keeps_a_delta_channel_thread_reading_the_same(tmp_path: Path, cli: Any, how: str) -> None:
    builder = delta_chat_builder(12, snapshot_frequency=5)
    pruned, full = tmp_path / "pruned" / ".ckpt", tmp_path / "full" / ".ckpt"
    _written_two_days_ago(pruned, lambda s: builder.compile(checkpointer=s).invoke({"messages": [chat_message(0, 8)]}, THREAD))
    shutil.copytree(pruned, full)
    _sweep_keep_latest(pruned, cli, how)
    delta_thread_resumes_alike(builder, pruned, full)


# -- ckpt prune --langgraph-ttl ------------------------------------------------------------------
@pytest.fixture
def mixed(tmp_path: Path, cli: Any) -> Path:
    """Thread "old" written two days ago, "new" now, and a subject that is no thread."""
    store = tmp_path / ".ckpt"
    _written_two_days_ago(store, lambda s: _chat(s, "old"))
    with CkptSaver.open(store) as saver:
        _chat(saver, "new")
    doc = tmp_path / "state.json"
    doc.write_text(json.dumps({"memory": {"x": 1}}))
    assert cli("take", doc, "-S", "agent:plain", "--store", store).code == 0
    return store


def test_prune_langgraph_ttl_dry_run_lists_without_deleting(mixed: Path, cli: Any) -> None:
    before = _subjects(mixed)
    res = cli("prune", "--langgraph-ttl", "1d", "--dry-run", "--store", mixed)
    assert res.code == 0, res.err
    assert "expired agent:old: no write for 2d (delete)" in res.out
    assert f"would remove {before['agent:old']} checkpoint(s)" in res.out
    removals = [line for line in res.out.splitlines() if line.startswith("remove ")]
    assert len(removals) == before["agent:old"] and all(line.endswith("agent:old") for line in removals)
    assert "(not expired)" in res.out and "(no --keep-* rule)" in res.out  # why the others stay
    assert _subjects(mixed) == before


def test_prune_langgraph_ttl_deletes_expired_threads_only(mixed: Path, cli: Any) -> None:
    before = _subjects(mixed)
    res = cli("prune", "--langgraph-ttl", "1d", "--json", "--store", mixed)
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert list(report["expired"]) == ["agent:old"] and report["expired"]["agent:old"] >= 2 * 86400
    assert report["removed"] == before["agent:old"] and report["kept"] == before["agent:new"] + 1
    assert {d["subject"] for d in report["checkpoints"] if not d["keep"]} == {"agent:old"}
    assert all(d["reasons"] == ["no --keep-* rule"] for d in report["checkpoints"] if d["subject"] == "agent:plain")
    assert _subjects(mixed) == {"agent:new": before["agent:new"], "agent:plain": 1}
    assert cli("verify", "--store", mixed).code == 0
    with CkptSaver.open(mixed) as saver:  # the survivor reads and carries on
        graph = chat_builder(5, words=4).compile(checkpointer=saver)
        assert len(graph.invoke({"messages": [chat_message(3, 4)]}, {"configurable": {"thread_id": "new"}})["messages"]) == 5


def test_prune_langgraph_ttl_with_keep_rules_applies_both(mixed: Path, cli: Any) -> None:
    res = cli("prune", "--langgraph-ttl", "1d", "--keep-last", "1", "--json", "--store", mixed)
    assert res.code == 0, res.err
    assert _subjects(mixed) == {"agent:new": 1, "agent:plain": 1}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--langgraph-ttl", "2 days"], "'2 days' is not a duration"),
        (["--langgraph-ttl", "1d", "--langgraph-ttl-strategy", "archive"], "must be delete or keep_latest"),
    ],
)
def test_prune_langgraph_ttl_bad_input_is_one_line(mixed: Path, cli: Any, args: list[str], says: str) -> None:
    before = _subjects(mixed)
    res = cli("prune", *args, "--store", mixed)
    assert res.code in (2, 4) and says in res.err and len(res.err.strip().splitlines()) == 1
    assert _subjects(mixed) == before


def test_prune_langgraph_ttl_leaves_a_thread_a_running_saver_holds(mixed: Path, cli: Any) -> None:
    """The CLI takes each expired thread's lease, as a saver does before it writes: one
    held by a live saver is in use; one it could take is renewed, so a saver that had
    the thread in memory reads it again (and sees it gone)."""
    with CkptSaver.open(mixed) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "old"}}) is not None  # in its memory now
        saver.flush()  # which lets the lease go
        fd = os.open(mixed / JOURNAL_DIR / "threads" / _lease_name("old"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another process's saver holds it
            res = cli("prune", "--langgraph-ttl", "1d", "--json", "--store", mixed)
            assert res.code == 0, res.err
            assert json.loads(res.out)["in_use"] == ["agent:old"] and json.loads(res.out)["removed"] == 0
            assert "agent:old" in _subjects(mixed)
        finally:
            os.close(fd)
        res = cli("prune", "--langgraph-ttl", "1d", "--store", mixed)
        assert res.code == 0 and "expired agent:old" in res.out
        assert "agent:old" not in _subjects(mixed)
        assert saver.get_tuple({"configurable": {"thread_id": "old"}}) is None
        assert saver.get_tuple({"configurable": {"thread_id": "new"}}) is not None


def test_prune_langgraph_ttl_tells_savers_of_a_thread_that_had_no_lease_yet(mixed: Path, cli: Any) -> None:
    """A thread no saver has taken a lease of (imported, or written before leases): the
    prune makes its lease, so a saver that read the thread at its start reads it again."""
    lease = mixed / JOURNAL_DIR / "threads" / _lease_name("old")
    lease.unlink()
    with CkptSaver.open(mixed) as saver:  # knows "old" from the store, and no lease of it
        res = cli("prune", "--langgraph-ttl", "1d", "--store", mixed)
        assert res.code == 0 and "expired agent:old" in res.out and lease.exists()
        assert saver.get_tuple({"configurable": {"thread_id": "old"}}) is None
        assert list(saver.list({"configurable": {"thread_id": "old"}})) == []


def test_prune_beside_a_live_saver_leaves_the_objects_and_reclaims_them_once_it_is_gone(tmp_path: Path, cli: Any) -> None:
    """`ckpt prune --langgraph-ttl` beside a live worker removed objects the worker named
    again in its next checkpoints (the saver's TTL and the CLI's together damaged the store)."""
    from ckptcli.store import verify as integrity

    store = tmp_path / ".ckpt"
    clock = Clock(-3 * DAY)
    with CkptSaver.open(store, clock=clock) as saver:
        _chat(saver, "old")
        saver.flush()
        objects = len(api.open_store(store).index())
        res = cli("prune", "--langgraph-ttl", "1d", "--langgraph-ttl-strategy", "delete", "--json", "--store", store)
        assert res.code == 0, res.err
        got = json.loads(res.out)
        assert "agent:old" in got["expired"] and got["gc"]["writers_alive"] == 1
        assert len(api.open_store(store).index()) == objects  # the live saver may name them again
        _chat(saver, "new")  # the same messages, in a new thread: named, not written again
    assert integrity.verify_store(api.open_store(store), None, read_data=True).ok
    res = cli("prune", "--keep-last", "1", "--json", "--store", store)  # no saver alive now
    assert res.code == 0 and json.loads(res.out)["gc"]["writers_alive"] == 0
    assert integrity.verify_store(api.open_store(store), None, read_data=True).ok
