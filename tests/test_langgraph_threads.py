"""CkptSaver in production shapes (issue 13): nodes that edit list items in place, read
back in-process and from a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from ckptcli.adapters.langgraph import CkptSaver

REPO = Path(__file__).resolve().parent.parent


# -- defect 3: list items edited in place ------------------------------------------------------
class Todos(TypedDict):
    todos: list[dict[str, Any]]
    messages: list[AnyMessage]


def _todo_graph() -> Any:
    def plan(state: Todos) -> dict[str, Any]:
        todos = [{"title": f"task {i}", "done": False, "notes": []} for i in range(3)]
        return {"todos": todos, "messages": [HumanMessage(content="plan", id="h1"), AIMessage(content="draft", id="a1")]}

    def work(state: Todos) -> dict[str, Any]:
        todos = state["todos"]
        todos[0]["done"] = True  # the same list, its item edited in place
        todos[1]["notes"].append("deep edit")
        msgs = list(state["messages"])  # a new list of the same message objects...
        msgs[1].content = "final"  # ...one edited in place
        return {"todos": todos, "messages": msgs}

    def more(state: Todos) -> dict[str, Any]:
        todos = state["todos"]
        todos[2]["done"] = True
        todos.append({"title": "task 3", "done": False, "notes": []})
        return {"todos": todos}

    b = StateGraph(Todos)
    for name, fn in (("plan", plan), ("work", work), ("more", more)):
        b.add_node(name, fn)
    b.add_edge(START, "plan")
    b.add_edge("plan", "work")
    b.add_edge("work", "more")
    b.add_edge("more", END)
    return b


def _plain(values: dict[str, Any]) -> Any:
    return json.loads(json.dumps(values, default=lambda m: [type(m).__name__, m.content]))


def _history(graph: Any) -> list[Any]:
    return [_plain(s.values) for s in graph.get_state_history({"configurable": {"thread_id": "todo"}})]


@pytest.mark.parametrize("trust_identity", [True, False])
def test_items_edited_in_place_read_back_as_invoke_returned_them(tmp_path: Path, trust_identity: bool) -> None:
    cfg = {"configurable": {"thread_id": "todo"}}
    reference = _todo_graph().compile(checkpointer=InMemorySaver())
    # durability="sync": each checkpoint is put before the next node runs (with "async",
    # a node editing in place races the put of the step before, with any saver)
    expected = _plain(reference.invoke({}, cfg, durability="sync"))
    expected_history = _history(reference)
    saver = CkptSaver.open(tmp_path / ".ckpt", trust_identity=trust_identity)
    graph = _todo_graph().compile(checkpointer=saver)
    try:
        out = _plain(graph.invoke({}, cfg, durability="sync"))
        assert out == expected and out["todos"][0]["done"] and out["messages"][1][1] == "final"
        assert _plain(graph.get_state(cfg).values) == expected
        assert _history(graph) == expected_history
    finally:
        saver.close()
    code = (
        "import json, sys; from ckptcli.adapters.langgraph import CkptSaver; from tests.test_langgraph_threads import _todo_graph, _history\n"
        f"s = CkptSaver.open({str(tmp_path / '.ckpt')!r}); print(json.dumps(_history(_todo_graph().compile(checkpointer=s)))); s.close()"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == expected_history


def test_trust_identity_takes_three_values(tmp_path: Path) -> None:
    from ckptcli.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="trust_identity"):
        CkptSaver.open(tmp_path / ".ckpt", trust_identity="sometimes")
    CkptSaver.open(tmp_path / ".ckpt", trust_identity="unchecked").close()
