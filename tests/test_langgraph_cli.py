"""ckpt's commands on what CkptSaver writes, as its users run them (issue 13, defect 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckptcli.adapters.langgraph import CkptSaver
from tests.langgraph_graphs import chat_builder


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
