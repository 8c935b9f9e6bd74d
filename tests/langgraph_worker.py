"""A long-lived process serving LangGraph turns, for the multi-process tests (as one
worker of `uvicorn --workers N` would): one JSON command a line on stdin, one JSON
answer a line on stdout. The saver is opened once and kept for the process's life.

    python -m tests.langgraph_worker ckpt STORE_DIR      # a CkptSaver
    python -m tests.langgraph_worker sqlite DB_FILE      # a SqliteSaver, the reference
    python -m tests.langgraph_worker ckpt STORE_DIR 5    # a CkptSaver whose lease_timeout is 5 s

Commands: {"op": "turn", "thread": T, "text": S} runs one turn (a user message, the
bot's answer; a text starting with "hold" makes the bot node say {"in_node": true} and
wait for one line on stdin before it answers), {"op": "history", "thread": T}, {"op": "delete", "thread": T} (delete_thread), {"op": "copy",
"thread": T, "to": U} (copy_thread), and
{"op": "quit"}. A CkptError is answered as {"ok": false, "error": class, "message": ...}.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from ckptcli.errors import CkptError


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _bot(state: Chat) -> dict[str, Any]:
    text = state["messages"][-1].content
    if isinstance(text, str) and text.startswith("hold"):
        print(json.dumps({"in_node": True}), flush=True)
        sys.stdin.readline()
    return {"messages": [AIMessage(content=f"echo {text} after {len(state['messages'])}", id=f"ai-{text}")]}


def chat_graph(saver: Any) -> Any:
    """The worker's graph: one bot node answering each human message."""
    b = StateGraph(Chat)
    b.add_node("bot", _bot)
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b.compile(checkpointer=saver)


def history(graph: Any, thread: str) -> list[dict[str, Any]]:
    """The thread's history newest first, checkpoint ids replaced by positions (so two
    savers' histories compare): messages, next nodes, step, source, the parent's position."""
    snaps = list(graph.get_state_history({"configurable": {"thread_id": thread}}))
    pos = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snaps)}
    out = []
    for s in snaps:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append({
            "messages": [[type(m).__name__, m.content] for m in s.values.get("messages", [])],
            "next": list(s.next), "step": s.metadata.get("step"), "source": s.metadata.get("source"),
            "parent": pos.get(parent, "missing") if parent else None,
        })  # fmt: skip
    return out


def main() -> None:
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver

        options = {"lease_timeout": float(sys.argv[3])} if len(sys.argv) > 3 else {}
        saver: Any = CkptSaver.open(path, **options)
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    graph = chat_graph(saver)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        cfg = {"configurable": {"thread_id": cmd.get("thread")}}
        try:
            if cmd["op"] == "turn":
                msg = HumanMessage(content=cmd["text"], id=f"user-{cmd['text']}")
                out = graph.invoke({"messages": [msg]}, cfg, durability=cmd.get("durability", "async"))
                reply: dict[str, Any] = {"ok": True, "messages": [m.content for m in out["messages"]]}
            elif cmd["op"] == "history":
                reply = {"ok": True, "history": history(graph, cmd["thread"])}
            elif cmd["op"] == "copy":
                saver.copy_thread(cmd["thread"], cmd["to"])
                reply = {"ok": True}
            elif cmd["op"] == "delete":
                saver.delete_thread(cmd["thread"])
                reply = {"ok": True}
            else:
                break
        except CkptError as exc:
            reply = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        print(json.dumps(reply), flush=True)
    if kind == "ckpt":
        saver.close()


if __name__ == "__main__":
    main()
