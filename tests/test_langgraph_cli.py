"""ckpt's commands on what CkptSaver writes, as its users run them (issue 13, defect 8)."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import jsonpatch
import pytest
from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

from ckptcli import api
from ckptcli.adapters.langgraph.replay import prepare
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.format.jsonview import to_json
from ckptcli.format.msgpack_view import from_view
from ckptcli.history.replay import load_tail, replay
from ckptcli.store.prune import remove_checkpoints
from tests.langgraph_graphs import ChatState, ask, chain_builder, chat_builder, chat_message, review_builder, support_builder

THREAD = {"configurable": {"thread_id": "t1"}}


def test_ckpt_ls_inside_the_directory_a_saver_opened_finds_the_store(tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`CkptSaver.open("agentstore")` makes the store in agentstore/ itself, not in
    agentstore/.ckpt/: `ckpt ls` run there (or deeper) finds it."""
    monkeypatch.delenv("CKPT_STORE", raising=False)
    with CkptSaver.open(tmp_path / "agentstore") as saver:
        chat_builder(3).compile(checkpointer=saver).invoke({"messages": []}, {"configurable": {"thread_id": "t1"}})
    for where in (tmp_path / "agentstore", tmp_path / "agentstore" / "manifests"):
        monkeypatch.chdir(where)
        got = cli("ls", "--json")
        assert got.code == 0, got.err
        assert got.out.count("agent:t1") >= 3
    monkeypatch.chdir(tmp_path)  # above it: not found, as before
    assert cli("ls").code == 10


def _paused_in_subgraph(store: Path) -> str:
    """Run review_builder until it waits inside its subgraph; the checkpoint id
    LangGraph resumes from (the root's head). With durability "sync" the root's
    checkpoint of a step is put before the step's subgraph runs, so the subgraph's are
    always the thread's newest; the default ("async") puts it from a background thread
    that loses the race about one run in twenty."""
    with CkptSaver.open(store) as saver:
        graph = review_builder().compile(checkpointer=saver)
        assert graph.invoke({"messages": [chat_message(0)]}, THREAD, durability="sync")["__interrupt__"]
        head = graph.get_state(THREAD).config["configurable"]["checkpoint_id"]
        assert isinstance(head, str)
        return head


def test_the_latest_of_a_thread_paused_in_a_subgraph_is_the_root_head(tmp_path: Path, cli: Any) -> None:
    """The subgraph's checkpoints are the thread's newest, but `agent:<thread>` names the
    root checkpoint LangGraph resumes from; the subgraph's stay reachable by id."""
    store = tmp_path / ".ckpt"
    head = _paused_in_subgraph(store)
    rows = json.loads(cli("ls", "--subject", "agent:t1", "--json", "--store", store).out)
    sub = [r for r in rows if "langgraph.ns" in r["labels"]]
    assert sub and rows[0] is sub[0]  # the newest checkpoint of the subject is the subgraph's
    got = cli("show", "agent:t1", "--json", "--store", store)
    assert got.code == 0, got.err
    info = json.loads(got.out)
    assert info["labels"]["langgraph.checkpoint"] == head and "langgraph.ns" not in info["labels"]
    text = cli("show", "agent:t1", "--store", store).out
    assert f"langgraph.checkpoint={head}" in text and "langgraph.ns" not in text
    assert json.loads(cli("show", sub[0]["id"], "--json", "--store", store).out)["labels"]["langgraph.ns"]
    # the root's last step, not a jump into the subgraph
    got = cli("diff", "agent:t1~1", "agent:t1", "--json", "--store", store)
    assert got.code == 0, got.err
    # nothing for verify to note, nothing for repair to move
    got = cli("verify", "--json", "--store", store)
    assert got.code == 0 and json.loads(got.out)["notes"] == [], got.out
    got = cli("repair", "refs", "--dry-run", "--json", "--store", store)
    assert got.code == 0 and json.loads(got.out)["moved"] == {}, got.out


def test_removing_the_root_head_moves_latest_to_the_root_not_the_subgraph(tmp_path: Path, cli: Any) -> None:
    """When the checkpoint latest names is removed, latest moves to the newest remaining
    root checkpoint, however much newer the subgraph's are."""
    store = tmp_path / ".ckpt"
    head = _paused_in_subgraph(store)
    st = api.open_store(store)
    try:
        ids = {
            m.labels["langgraph.checkpoint"]: cid
            for cid, m in ((c, st.manifest(c)) for c in st.manifest_ids())
            if "langgraph.ns" not in m.labels
        }
        parent = st.manifest(ids[head]).labels["langgraph.parent"]
        remove_checkpoints(st, [ids[head]])
    finally:
        st.close()
    info = json.loads(cli("show", "agent:t1", "--json", "--store", store).out)
    assert info["labels"]["langgraph.checkpoint"] == parent


def _support_thread(store: Path) -> dict[str, Any]:
    """The support graph's conversation, to its end: LangGraph checkpoint id -> snapshot."""
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        graph.invoke(ask("A-1001", 0), THREAD)
        graph.invoke(Command(resume="yes"), THREAD)
        return {s.config["configurable"]["checkpoint_id"]: s for s in graph.get_state_history(THREAD)}


def _replayed_equals_the_child(store: Path, history: dict[str, Any]) -> set[str]:
    """Replay each root checkpoint that has a child: for every channel its writes go to,
    the replayed value is the child's (as LangGraph reads it). The channels checked."""
    serde = JsonPlusSerializer()
    st = api.open_store(store)
    checked: set[str] = set()
    try:
        for cid in st.manifest_ids():
            ck = api.open_checkpoint(cid.hex(), st)
            lab = ck.manifest.labels
            child = next(
                (
                    s
                    for s in history.values()
                    if s.parent_config and s.parent_config["configurable"]["checkpoint_id"] == lab.get("langgraph.checkpoint")
                ),
                None,
            )
            if "langgraph.ns" in lab or child is None:
                continue
            state = replay(prepare(ck, load_tail(ck)))
            assert "not_applied" not in state["ext"]["langgraph"], state["ext"]["langgraph"]["not_applied"]
            written = {ev.fields["channel"] for ev in load_tail(ck).events} & set(child.values)
            for ch in written:
                assert serde.loads_typed(("msgpack", from_view(state["memory"][ch]))) == child.values[ch], ch
            checked |= written
    finally:
        st.close()
    return checked


def test_replay_applies_a_langgraph_checkpoints_writes_to_its_channels(tmp_path: Path, cli: Any) -> None:
    """Replaying a checkpoint's pending writes gives its child's values, channel by
    channel, as LangGraph's reducers made them (messages merged by id, the steps list
    added to, LangGraph's trigger channels set)."""
    store = tmp_path / ".ckpt"
    history = _support_thread(store)
    assert _replayed_equals_the_child(store, history) == {"messages", "steps", "summary"}
    # the step that answers: the new message is in the replayed state
    answering = next(s for s in history.values() if s.next == ("agent",) and isinstance(s.values["messages"][-1], ToolMessage))
    got = cli(
        "replay",
        f"agent:t1~{sum(1 for s in history.values() if s.metadata['step'] > answering.metadata['step'])}",
        "--step",
        "--store",
        store,
    )
    assert got.code == 0, got.err
    added = [line for line in got.out.splitlines() if line.startswith("    + memory.messages[3]: ")]
    assert len(added) == 1 and '"AIMessage", {"content": "Yo' in added[0] and "not applied" not in got.out, got.out


def _larger(a: int, b: int) -> int:
    return max(a, b)


class _MaxState(TypedDict):
    best: Annotated[int, _larger]
    seen: Annotated[list[int], operator.add]


def test_replay_says_which_writes_it_cannot_apply(tmp_path: Path, cli: Any) -> None:
    """A channel whose reducer is none ckpt knows (here `max`) is named, not guessed."""
    b = chain_builder(
        _MaxState, one=lambda s: {"best": 5, "seen": [5]}, two=lambda s: {"best": 3, "seen": [3]}, three=lambda s: {"best": 7, "seen": [7]}
    )
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        assert b.compile(checkpointer=saver).invoke({"best": 0, "seen": []}, THREAD) == {"best": 7, "seen": [5, 3, 7]}
    got = cli("replay", "agent:t1~1", "--step", "--store", store)  # the writes of node "three"
    assert got.code == 0, got.err
    assert "+ memory.seen[2]: 7" in got.out
    assert "! not applied: best: its reducer is unknown: none ckpt knows" in got.out, got.out
    # what was applied was inferred, and the output says so
    assert "reducers inferred from the thread's recorded steps, not read from the graph: best: unknown; seen: operator.add" in got.out, (
        got.out
    )
    state = json.loads(cli("replay", "agent:t1~1", "--json", "--store", store).out)["state"]
    assert state["memory"]["best"] == 5 and state["ext"]["langgraph"]["reducers"] == {"best": [], "seen": ["operator.add"]}


def test_replay_merges_messages_by_id_as_add_messages_does(tmp_path: Path) -> None:
    """A message written again with its id replaces it; a RemoveMessage removes it."""
    b = chain_builder(
        ChatState,
        one=lambda s: {"messages": [AIMessage(content="draft", id="a"), AIMessage(content="note", id="b")]},
        two=lambda s: {"messages": [AIMessage(content="final", id="a")]},
        three=lambda s: {"messages": [RemoveMessage(id="b"), AIMessage(content="done", id="c")]},
    )
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        graph = b.compile(checkpointer=saver)
        assert [m.content for m in graph.invoke({"messages": []}, THREAD)["messages"]] == ["final", "done"]
        history = {s.config["configurable"]["checkpoint_id"]: s for s in graph.get_state_history(THREAD)}
    assert _replayed_equals_the_child(store, history) == {"messages"}


def test_diff_of_two_revisions_compares_writes_by_task_and_index(tmp_path: Path, cli: Any) -> None:
    """A resume after a restart writes the waiting checkpoint again with the resume's
    writes: they sort before the interrupt, which moves to another seq. The diff says
    what came in (the writes added), not that every write after them changed."""
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        support_builder().compile(checkpointer=saver).invoke(ask("A-1001", 0), THREAD)
    with CkptSaver.open(store) as saver:
        support_builder().compile(checkpointer=saver).invoke(Command(resume="yes"), THREAD)
    rows = json.loads(cli("ls", "--subject", "agent:t1", "--json", "--store", store).out)
    rev2 = next(r for r in rows if r["labels"].get("langgraph.rev") == "2")
    rev1 = next(r["id"] for r in rows if r["labels"]["langgraph.checkpoint"] == rev2["labels"]["langgraph.checkpoint"] and r is not rev2)
    got = json.loads(cli("diff", rev1, rev2["id"], "--section", "events", "--json", "--store", store).out)
    writes = got["writes"]
    assert sorted(w["channel"] for w in writes if w["op"] == "add") == ["__resume__", "__resume__", "branch:to:tools", "steps"], writes
    assert [w for w in writes if w["op"] != "add"] == [] and got["summary"]["sections"]["events"] == {
        "added": 4,
        "removed": 0,
        "changed": 0,
    }
    text = cli("diff", rev1, rev2["id"], "--section", "events", "--store", store, "--all").out  # with the branch:to:* write
    lines = [line.strip() for line in text.splitlines()[1:-1] if line.strip() != "events"]
    assert len(lines) == 4 and all(line.startswith("+ write ") for line in lines), text
    assert any(line.startswith("+ write ") and line.endswith(', steps: ["approve:yes"]') for line in lines), text
    back = json.loads(cli("diff", rev2["id"], rev1, "--section", "events", "--json", "--store", store).out)
    assert sorted(w["op"] for w in back["writes"]) == ["remove"] * 4
    # the patch still turns A's events into B's exactly
    a = to_json(api.open_checkpoint(rev1, api.open_store(store)).state())
    b = to_json(api.open_checkpoint(rev2["id"], api.open_store(store)).state())
    assert jsonpatch.apply_patch({"events": a["events"]}, got["patch"]) == {"events": b["events"]}


def test_diff_of_writes_says_which_changed_and_ignores_where_they_sit(tmp_path: Path, cli: Any) -> None:
    """The same task's write with another value is changed; a write that only sits at
    another position (another seq) is no change."""
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        for thread, writes in (
            ("a", [("t2", "notes", "same")]),
            ("b", [("t1", "notes", "new"), ("t2", "notes", "same")]),
            ("c", [("t1", "notes", "other"), ("t2", "notes", "same")]),
        ):
            cp = empty_checkpoint()
            cfg = saver.put(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, cp, {"source": "loop", "step": 1, "parents": {}}, {}
            )
            for task, channel, value in writes:
                saver.put_writes(cfg, [(channel, value)], task_id=task)
    moved = json.loads(cli("diff", "agent:a", "agent:b", "--section", "events", "--json", "--store", store).out)
    assert [(w["op"], w["task_id"], w["idx"]) for w in moved["writes"]] == [("add", "t1", 0)], moved["writes"]
    changed = json.loads(cli("diff", "agent:b", "agent:c", "--section", "events", "--json", "--store", store).out)
    assert [(w["op"], w["task_id"], w["old"]["value"], w["new"]["value"]) for w in changed["writes"]] == [("replace", "t1", "new", "other")]
    text = cli("diff", "agent:b", "agent:c", "--section", "events", "--store", store).out
    assert '~ write 0 of task t1, notes: "new" -> "other"' in text, text


def test_a_latest_left_on_a_subgraph_checkpoint_is_noted_and_repaired(tmp_path: Path, cli: Any) -> None:
    """A store an earlier ckpt wrote has the latest of a thread paused in a subgraph on
    the subgraph's checkpoint: verify says so, `ckpt repair refs` moves it to the root head."""
    store = tmp_path / ".ckpt"
    head = _paused_in_subgraph(store)
    rows = json.loads(cli("ls", "--subject", "agent:t1", "--json", "--store", store).out)
    sub = next(r for r in rows if "langgraph.ns" in r["labels"])
    st = api.open_store(store)
    st.write_ref("refs/latest/agent/t1", bytes.fromhex(sub["id"]))  # as the earlier ckpt left it
    st.close()
    notes = json.loads(cli("verify", "--json", "--store", store).out)["notes"]
    assert len(notes) == 1 and "a LangGraph subgraph's checkpoint, not the thread's root head" in notes[0], notes
    assert cli("repair", "refs", "--store", store).code == 0
    assert json.loads(cli("show", "agent:t1", "--json", "--store", store).out)["labels"]["langgraph.checkpoint"] == head
    assert json.loads(cli("verify", "--json", "--store", store).out)["notes"] == []
