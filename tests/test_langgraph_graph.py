"""A real LangGraph graph on CkptSaver: an interrupt and its resume, an update_state fork,
a subgraph; every result, state and history equal to the same graph's on LangGraph's
InMemorySaver. Then ckpt's own commands on the store it wrote, and a `ckpt fork` the
graph resumes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, StateSnapshot

from ckptcli import api
from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import Forgetful, ask, normalized, support_builder

THREAD = {"configurable": {"thread_id": "support-1"}}


def _snapshot(s: StateSnapshot) -> dict[str, Any]:
    md = dict(s.metadata or {})
    md.pop("parents", None)
    return {
        "values": normalized(s.values),
        "next": s.next,
        "metadata": md,
        "tasks": [(t.name, normalized(t.interrupts), t.state is not None) for t in s.tasks],
        "interrupts": normalized(s.interrupts),
        "has_parent": s.parent_config is not None,
    }


def scenario(saver: Any) -> dict[str, Any]:
    """Interrupt, resume, then fork the past with update_state and run the fork."""
    graph = support_builder().compile(checkpointer=saver)
    out: dict[str, Any] = {}
    out["first"] = normalized(graph.invoke(ask("A-1001", 0), THREAD))
    out["interrupted"] = _snapshot(graph.get_state(THREAD))
    out["resumed"] = normalized(graph.invoke(Command(resume="yes"), THREAD))
    out["done"] = _snapshot(graph.get_state(THREAD, subgraphs=True))
    history = list(graph.get_state_history(THREAD))
    out["history"] = [_snapshot(s) for s in history]
    # time travel: run again from the checkpoint that waited for approval (its pending
    # writes hold the answer given then, which LangGraph uses again)
    waiting = next(s for s in history if s.next == ("approve",))
    out["replayed"] = normalized(graph.invoke(Command(resume="no"), waiting.config))
    # fork: change the question asked at the very first agent step, and run from there
    first_agent = next(s for s in reversed(history) if s.next == ("agent",))
    forked = graph.update_state(first_agent.config, {"messages": [HumanMessage(content="where is my order B-2002", id="human-0")]})
    out["forked_state"] = _snapshot(graph.get_state(forked))
    out["fork_first"] = normalized(graph.invoke(None, forked))
    out["fork_resumed"] = normalized(graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "support-1"}}))
    out["final_history"] = [_snapshot(s) for s in graph.get_state_history(THREAD)]
    out["subgraph_checkpoints"] = sorted(
        t.checkpoint["channel_values"].get("summary", "") for t in saver.list(None) if t.config["configurable"]["checkpoint_ns"]
    )
    # a second thread, left waiting at its interrupt
    other = {"configurable": {"thread_id": "support-2"}}
    graph.invoke(ask("B-2002", 0), other)
    out["other"] = _snapshot(graph.get_state(other))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("graph") / ".ckpt"
    saver = CkptSaver.open(store)
    ckpt = scenario(saver)
    saver.close()
    return {"memory": scenario(InMemorySaver()), "ckpt": ckpt, "store": store}


def test_results_states_and_histories_equal_in_memory_savers(runs: dict[str, Any]) -> None:
    mem, ck = runs["memory"], runs["ckpt"]
    assert mem["interrupted"]["next"] == ("approve",) and mem["interrupted"]["interrupts"]
    assert mem["replayed"] == mem["resumed"] and mem["fork_resumed"]["messages"][-1].content.endswith("delivered.")
    assert any(mem["subgraph_checkpoints"])
    for key in mem:
        assert ck[key] == mem[key], key


def test_the_same_with_every_thread_read_back_from_the_store_at_every_call(runs: dict[str, Any], tmp_path: Path) -> None:
    """The scenario again on a saver that commits and drops every thread from memory at
    each call (resident_threads=0): interrupts, resumes, forks and the subgraph all run
    from what is read back from the store."""
    saver = Forgetful.open(tmp_path / ".ckpt")
    try:
        got = scenario(saver)
        assert saver.evicted >= 10  # (how many depends on the commit thread's timing too)
    finally:
        saver.close()
    assert got == runs["memory"]


def test_reopened_store_gives_the_same_history(runs: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    store = tmp_path / ".ckpt"
    shutil.copytree(runs["store"], store)
    saver = CkptSaver.open(store)
    try:
        graph = support_builder().compile(checkpointer=saver)
        assert [_snapshot(s) for s in graph.get_state_history(THREAD)] == runs["memory"]["final_history"]
        assert _snapshot(graph.get_state({"configurable": {"thread_id": "support-2"}})) == runs["memory"]["other"]
        # and the thread left waiting carries on after the restart
        done = graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "support-2"}})
        assert done["messages"][-1].content == "Your order is delivered."
    finally:
        saver.close()


def test_ckpt_ls_show_diff_replay_on_the_graphs_store(runs: dict[str, Any], cli) -> None:  # type: ignore[no-untyped-def]
    store = runs["store"]
    listed = json.loads(cli("ls", "--store", store, "--json").out)
    subjects = {c["subject"] for c in listed}
    assert {"agent:support-1", "agent:support-2"} <= subjects
    assert any(c["labels"].get(layout.LABEL_NS, "").startswith("summarize:") for c in listed), "subgraph checkpoints are there"
    # every checkpoint's plan names the nodes LangGraph runs next
    saver = CkptSaver.open(store)
    try:
        graph = support_builder().compile(checkpointer=saver)
        nexts = {s.config["configurable"]["checkpoint_id"]: list(s.next) for s in graph.get_state_history(THREAD)}
    finally:
        saver.close()
    st = api.open_store(store)
    for c in listed:
        cid = c["labels"].get(layout.LABEL_CHECKPOINT)
        if cid in nexts and c["labels"].get(layout.LABEL_REV) is None:
            plan = api.open_checkpoint(c["id"], st).section("plan")
            assert [p["node"] for p in plan] == nexts[cid], cid
    show = cli("show", "agent:support-1", "--store", store)
    assert show.code == 0 and "ext:langgraph" in show.out and "events" in show.out
    tools = cli("show", "agent:support-1", "--store", store, "--section", "tools")
    assert tools.code == 0 and "orders_lookup" in tools.out and "call-1" in tools.out
    diff = cli("diff", "agent:support-1~1", "agent:support-1", "--store", store)
    assert diff.code in (0, 1) and "memory" in diff.out, diff.err
    waiting = cli("show", "agent:support-2", "--store", store, "--section", "events")
    assert waiting.code == 0 and "__interrupt__" in waiting.out
    assert cli("replay", "agent:support-2", "--store", store).code == 0
    assert cli("verify", "--store", store, "--read-data").code == 0


def test_ckpt_fork_of_a_waiting_checkpoint_resumes_in_langgraph(runs: dict[str, Any], cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    store = tmp_path / ".ckpt"
    shutil.copytree(runs["store"], store)
    # support-2 waits for approval: its checkpoint's events are the interrupt's writes
    fork = cli("fork", "agent:support-2", "--at", "0", "--branch", "retry", "--store", store, "--json")
    assert fork.code == 0, fork.err
    saver = CkptSaver.open(store)
    try:
        assert saver.get_tuple({"configurable": {"thread_id": "support-2"}}) is not None, "a ckpt fork is not taken for the thread's newest"
        config = saver.thread_from("retry", "support-2-retry")
        graph = support_builder().compile(checkpointer=saver)
        state = graph.get_state(config)
        assert state.next == ("approve",)
        done = graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "support-2-retry"}})
        assert done["messages"][-1].content == "Your order is delivered."
    finally:
        saver.close()
