"""ckpt's commands on what CkptSaver writes, as its users run them (issue 13, defect 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.adapters.langgraph import CkptSaver
from ckptcli.prune import remove_checkpoints
from tests.langgraph_graphs import chat_builder, chat_message, review_builder

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
    LangGraph resumes from (the root's head)."""
    with CkptSaver.open(store) as saver:
        graph = review_builder().compile(checkpointer=saver)
        assert graph.invoke({"messages": [chat_message(0)]}, THREAD)["__interrupt__"]
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
        ids = {m.labels["langgraph.checkpoint"]: cid for cid, m in ((c, st.manifest(c)) for c in st.manifest_ids()) if "langgraph.ns" not in m.labels}
        parent = st.manifest(ids[head]).labels["langgraph.parent"]
        remove_checkpoints(st, [ids[head]])
    finally:
        st.close()
    info = json.loads(cli("show", "agent:t1", "--json", "--store", store).out)
    assert info["labels"]["langgraph.checkpoint"] == parent
