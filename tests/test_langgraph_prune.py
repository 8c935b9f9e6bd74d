"""Pruning LangGraph threads keeps them resumable, with the same answers (issue 13).

Each test runs a real graph on CkptSaver, copies the store (the copy is the unpruned
reference: same checkpoint ids), prunes one of the two with `ckpt prune` or
`saver.prune`, then compares the two: the state LangGraph reads now, every retained
snapshot of the history, and what the graph does when it carries on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command, StateSnapshot

from ckptcli import api
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import chat_message, delta_chat_builder, normalized, review_builder

THREAD = {"configurable": {"thread_id": "t1"}}


def _snap(s: StateSnapshot) -> dict[str, Any]:
    return {
        "id": s.config["configurable"]["checkpoint_id"],
        "values": normalized(s.values),
        "next": s.next,
        "metadata": s.metadata,
        "tasks": [(t.name, normalized(t.interrupts), _snap(t.state) if isinstance(t.state, StateSnapshot) else None) for t in s.tasks],
        "interrupts": normalized(s.interrupts),
    }


def _manifests(store: Path) -> int:
    st = api.open_store(store)
    try:
        return len(st.manifest_ids())
    finally:
        st.close()


def _prune(how: str, store: Path, cli: Any) -> None:
    if how == "saver":
        with CkptSaver.open(store) as saver:
            saver.prune(["t1"])
        return
    assert cli("prune", *how.split(), "--store", store).code == 0


def _compare(builder: Any, pruned: Path, full: Path) -> tuple[Any, Any, CkptSaver, CkptSaver]:
    """The graph on both stores; the pruned one's state and retained history are the
    unpruned one's."""
    a, b = CkptSaver.open(pruned), CkptSaver.open(full)
    ga, gb = builder.compile(checkpointer=a), builder.compile(checkpointer=b)
    assert _snap(ga.get_state(THREAD, subgraphs=True)) == _snap(gb.get_state(THREAD, subgraphs=True))
    full_history = {s["id"]: s for s in map(_snap, gb.get_state_history(THREAD))}
    kept = [_snap(s) for s in ga.get_state_history(THREAD)]
    assert kept and len(kept) < len(full_history)
    for s in kept:
        assert s == full_history[s["id"]]
    return ga, gb, a, b


POLICIES = ["--keep-last 1", "--keep-last 3", "--keep-daily 1", "saver"]


@pytest.mark.parametrize("how", POLICIES)
def test_a_thread_paused_inside_a_subgraph_resumes_after_a_prune(tmp_path: Path, cli: Any, how: str) -> None:
    """The subgraph's checkpoints are the thread's newest: a policy that counts them must
    still keep the root's newest and the subgraph's, which LangGraph resumes from."""
    pruned, full = tmp_path / "pruned" / ".ckpt", tmp_path / "full" / ".ckpt"
    with CkptSaver.open(pruned) as saver:
        graph = review_builder().compile(checkpointer=saver)
        first = graph.invoke({"messages": [chat_message(0)]}, THREAD, durability="sync")  # root put before the subgraph runs
        assert first["__interrupt__"] and graph.get_state(THREAD).next == ("review",)
    shutil.copytree(pruned, full)
    _prune(how, pruned, cli)
    assert _manifests(pruned) < _manifests(full)
    ga, gb, a, b = _compare(review_builder(), pruned, full)
    try:
        # the thread's latest is still the root head LangGraph resumes from
        shown = json.loads(cli("show", "agent:t1", "--json", "--store", pruned).out)["labels"]
        assert "langgraph.ns" not in shown and shown["langgraph.checkpoint"] == ga.get_state(THREAD).config["configurable"]["checkpoint_id"]
        done_a, done_b = ga.invoke(Command(resume="yes"), THREAD), gb.invoke(Command(resume="yes"), THREAD)
        assert normalized(done_a) == normalized(done_b)
        assert done_a["messages"][-1].content == "published" and done_a["notes"][-2:] == ["check:yes", "done"]
        assert normalized(ga.get_state(THREAD).values) == normalized(gb.get_state(THREAD).values)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["--keep-last 1", "--keep-within 0s", "saver"])
def test_a_delta_channel_thread_reads_the_same_after_a_prune(tmp_path: Path, cli: Any, how: str) -> None:
    """DeltaChannel stores the messages every 5th update; the checkpoints between
    rebuild them from their ancestors' writes, which must stay."""
    builder = delta_chat_builder(12, snapshot_frequency=5)
    pruned, full = tmp_path / "pruned" / ".ckpt", tmp_path / "full" / ".ckpt"
    with CkptSaver.open(pruned) as saver:
        graph = builder.compile(checkpointer=saver)
        assert len(graph.invoke({"messages": [chat_message(0, 8)]}, THREAD)["messages"]) == 12
    shutil.copytree(pruned, full)
    _prune(how, pruned, cli)
    delta_thread_resumes_alike(builder, pruned, full)


def delta_thread_resumes_alike(builder: Any, pruned: Path, full: Path) -> None:
    """The 12-message delta thread reads the same on both stores, and a next turn gives
    the same 24 messages on both."""
    ga, gb, a, b = _compare(builder, pruned, full)
    try:
        assert len(ga.get_state(THREAD).values["messages"]) == 12
        more_a = ga.invoke({"messages": [chat_message(12, 8)]}, THREAD)
        more_b = gb.invoke({"messages": [chat_message(12, 8)]}, THREAD)
        assert more_a == more_b and len(more_a["messages"]) == 24
    finally:
        a.close()
        b.close()
