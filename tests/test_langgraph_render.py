"""`ckpt diff` between checkpoints a real LangGraph graph wrote through CkptSaver: messages
read `role: text`, tool calls by name and arguments, LangGraph's bookkeeping left out
unless --all, and --json keeps the exact form."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from ckptcli.adapters.langgraph import CkptSaver
from tests.langgraph_graphs import ask, support_builder


def test_a_support_thread_reads_as_messages(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / "store"
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        graph.invoke(ask("A-1", 0), {"configurable": {"thread_id": "t1"}})
    r = cli("ls", "--store", store, "--json")
    assert r.code == 0, r.err
    ids = [c["id"] for c in json.loads(r.out)][::-1]  # oldest first
    assert len(ids) >= 3
    texts, alls, exact = [], [], []
    for a, b in itertools.pairwise(ids):
        texts.append(cli("diff", a, b, "--store", store).out)
        alls.append(cli("diff", a, b, "--store", store, "--all").out)
        exact.append(cli("diff", a, b, "--store", store, "--json").out)
    text, everything = "\n".join(texts), "\n".join(alls)
    assert "human: where is my order A-1" in text
    assert "ai: → orders_lookup(order=A-1)" in text
    for noise in ("channel_versions", "versions_seen", "branch:to:", '"$ext"'):
        assert noise not in text, noise
        assert noise in everything + "\n".join(exact), noise
    assert "channel_versions" in everything and '"$ext"' in everything
    # --json is the exact form: the messages as stored
    assert all('"$ext"' in e or "channel_versions" in e for e in exact)


def test_show_section_reads_messages(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / "store"
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        graph.invoke(ask("A-7", 0), {"configurable": {"thread_id": "t1"}})
    text = cli("show", "agent:t1", "--section", "memory", "--store", store).out
    assert "human: where is my order A-7" in text and "ai: → orders_lookup(order=A-7)" in text and "$ext" not in text
    assert "$ext" in cli("show", "agent:t1", "--section", "memory", "--store", store, "--all").out
    assert "$ext" in cli("show", "agent:t1", "--section", "memory", "--store", store, "--json").out
