"""What a long-lived CkptSaver keeps alive between runs.

Python's collector walks every tracked object on each full pass, and a pass can land
in any turn: the objects a saver keeps are paid for in the slowest turns of every
graph in the process, not only in memory. Between two runs of a thread a saver keeps
the objects of the thread's newest state (the next run's puts tell unchanged items by
identity) and the records of the checkpoints the next puts build on; not copies of the
messages its finished subgraph runs had, nor the decoded history.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from ckptcli.adapters.langgraph.layout import Write
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import ChatState, chat_builder, normalized


def _turn_with_subgraph() -> Any:
    """Each run: the root answers, then a subgraph adds a note (a new checkpoint
    namespace per run, holding the whole message list)."""
    sub = StateGraph(ChatState)
    sub.add_node("note", lambda s: {"messages": [AIMessage(content=f"note {len(s['messages'])}", id=f"note-{len(s['messages'])}")]})
    sub.add_edge(START, "note")
    sub.add_edge("note", END)
    b = StateGraph(ChatState)
    b.add_node(
        "answer", lambda s: {"messages": [AIMessage(content=f"answer {len(s['messages'])} " + "x" * 200, id=f"a-{len(s['messages'])}")]}
    )
    b.add_node("sub", sub.compile())
    b.add_edge(START, "answer")
    b.add_edge("answer", "sub")
    b.add_edge("sub", END)
    return b


def _live(cls: type) -> int:
    # gc.get_objects() does not list frozen objects: the savers here leave the collector
    # alone (gc_freeze=False), so every live object is counted
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, cls))


def test_messages_of_finished_subgraph_runs_are_not_kept(tmp_path: Path) -> None:
    before = _live(BaseMessage)  # other tests' leftovers
    saver = CkptSaver.open(tmp_path / ".ckpt", gc_freeze=False)
    try:
        graph = _turn_with_subgraph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        for k in range(12):
            graph.invoke({"messages": [HumanMessage(content=f"question {k}", id=f"h-{k}")]}, config)
        state = graph.get_state(config)
        n = len(state.values["messages"])
        del state
        # the thread's newest state, kept for the next run's puts (and any list of
        # LangGraph's own); the subgraph runs' copies, up to n each, are gone
        alive = _live(BaseMessage) - before
        assert alive <= n + 2, f"{alive} messages alive for a state of {n}"
        # and what the saver answers is unchanged: a next run reads and extends it
        graph.invoke({"messages": [HumanMessage(content="again", id="h-again")]}, config)
        got = normalized(graph.get_state(config).values)
    finally:
        saver.close()
    reopened = CkptSaver.open(tmp_path / ".ckpt", gc_freeze=False)
    try:
        again = _turn_with_subgraph().compile(checkpointer=reopened)
        assert normalized(again.get_state(config).values) == got
        assert len(got["messages"]) == n + 3
    finally:
        reopened.close()


def test_committed_history_is_not_kept_decoded(tmp_path: Path) -> None:
    before = _live(Write)
    saver = CkptSaver.open(tmp_path / ".ckpt", gc_freeze=False)
    try:
        steps = 200
        graph = chat_builder(steps, words=8).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": []}, config)
        saver.flush()
        # the head's pending writes at most: not one record per checkpoint of the history
        assert _live(Write) - before <= 4
        # the history still reads back whole, from the store
        history = [(normalized(s.values), s.next) for s in graph.get_state_history(config)]
    finally:
        saver.close()
    mem = chat_builder(steps, words=8).compile(checkpointer=InMemorySaver())
    mem.invoke({"messages": []}, config)
    assert history == [(normalized(s.values), s.next) for s in mem.get_state_history(config)]


def test_the_index_of_committed_checkpoints_is_no_work_for_the_collector(tmp_path: Path) -> None:
    # the saver's index of the store's checkpoints (`StoreIndex.rows`) kept a `Key` (a
    # dataclass instance) and a tuple holding it per checkpoint: two objects the collector
    # walks on each full pass for every checkpoint the store holds, in every turn one lands
    # in. Its rows are plain tuples of str and int now, which the collector stops tracking
    from ckptcli.adapters.langgraph.layout import Key

    saver = CkptSaver.open(tmp_path / ".ckpt", gc_freeze=False)
    try:
        graph = chat_builder(120, words=8).compile(checkpointer=saver)
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}})
        saver.flush()
        saver._index.keys()  # the catalog read too, as a saver reads it on opening and deleting
        rows = saver._index.rows["t"]
        assert len(rows) > 100
        gc.collect()
        gc.collect()  # a row's inner tuple is untracked by one pass, the row by the next
        assert not any(gc.is_tracked(r) for r in rows.values())
        assert _live(Key) == 0
        # what reads the rows still gets whole keys
        keys = saver._index.thread_keys("t")
        assert len(keys) == len(rows) and all(isinstance(k, Key) and k.thread_id == "t" for rs in keys.values() for *_x, k in rs)
    finally:
        saver.close()
