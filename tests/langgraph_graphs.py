"""Real LangGraph graphs for the saver's tests: deterministic nodes, a fake tool, no LLM.

`support_graph` is a support agent: the agent node asks for a tool call, a human approves
it (an `interrupt`), the tool answers, the agent answers, and a subgraph writes a
summary. Every message has a fixed id, so two runs on two savers give equal states.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Interrupt, interrupt

from ckptcli.adapters.langgraph.saver import CkptSaver


def chain_builder(state: Any, **nodes: Any) -> Any:
    """A StateGraph of `nodes` run one after the other, in the order given."""
    b = StateGraph(state)
    names = list(nodes)
    for name, fn in nodes.items():
        b.add_node(name, fn)
    for a, z in zip([START, *names], [*names, END], strict=True):
        b.add_edge(a, z)
    return b


ORDERS = {"A-1001": "lost in transit", "B-2002": "delivered"}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: Annotated[list[str], operator.add]
    summary: str


class SummaryState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str


def _agent(state: State) -> dict[str, Any]:
    msgs = state["messages"]
    last = msgs[-1]
    n = len(msgs)
    if isinstance(last, HumanMessage):
        order = last.content.split()[-1] if isinstance(last.content, str) else "?"
        call = {"name": "orders_lookup", "args": {"order": order}, "id": f"call-{n}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{n}")], "steps": ["agent:call"]}
    return {"messages": [AIMessage(content=f"Your order is {last.content}.", id=f"ai-{n}")], "steps": ["agent:answer"]}


def _route_agent(state: State) -> str:
    last = state["messages"][-1]
    return "approve" if isinstance(last, AIMessage) and last.tool_calls else "summarize"


def _approve(state: State) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
    answer = interrupt({"question": f"run {call['name']} for {call['args']['order']}?"})
    return {"steps": [f"approve:{answer}"]}


def _route_approve(state: State) -> str:
    return "tools" if state["steps"][-1] == "approve:yes" else "summarize"


def _tools(state: State) -> dict[str, Any]:
    out = []
    for call in state["messages"][-1].tool_calls:  # type: ignore[union-attr]
        result = ORDERS.get(call["args"]["order"], "unknown")
        out.append(ToolMessage(content=result, tool_call_id=call["id"], name=call["name"], id=f"tool-{call['id']}"))
    return {"messages": out, "steps": ["tools"]}


def _summary_node(state: SummaryState) -> dict[str, Any]:
    texts = [m.content for m in state["messages"] if isinstance(m, AIMessage) and m.content]
    return {"summary": f"{len(state['messages'])} messages; last answer: {texts[-1] if texts else '-'}"}


def summary_subgraph() -> Any:
    sb = StateGraph(SummaryState)
    sb.add_node("write_summary", _summary_node)
    sb.add_edge(START, "write_summary")
    sb.add_edge("write_summary", END)
    return sb.compile()


def support_builder() -> StateGraph[State]:
    b = StateGraph(State)
    b.add_node("agent", _agent)
    b.add_node("approve", _approve)
    b.add_node("tools", _tools)
    b.add_node("summarize", summary_subgraph())
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", _route_agent, ["approve", "summarize"])
    b.add_conditional_edges("approve", _route_approve, ["tools", "summarize"])
    b.add_edge("tools", "agent")
    b.add_edge("summarize", END)
    return b


def ask(order: str, n: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"where is my order {order}", id=f"human-{n}")]}


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_message(k: int, words: int = 80) -> AnyMessage:
    """Message k of a `chat_builder` conversation."""
    text = " ".join(f"word{(k * 7 + i) % 97}" for i in range(words))
    cls = HumanMessage if k % 2 == 0 else AIMessage
    return cls(content=text, id=f"m-{k}")


def chat_builder(turns: int, words: int = 80) -> StateGraph[ChatState]:
    """A conversation of `turns` steps: one node appends one message per step."""

    def turn(state: ChatState) -> dict[str, Any]:
        return {"messages": [chat_message(len(state["messages"]), words)]}

    def route(state: ChatState) -> str:
        return "turn" if len(state["messages"]) < turns else END

    b = StateGraph(ChatState)
    b.add_node("turn", turn)
    b.add_edge(START, "turn")
    b.add_conditional_edges("turn", route, ["turn", END])
    return b


def subgraph_chat_builder(turns: int, every: int = 4) -> StateGraph[ChatState]:
    """`chat_builder`'s conversation, with a subgraph run every `every` steps: its output,
    the whole message list, is a pending write of the root's checkpoint (a long list in
    the events section), and its own checkpoints hold the whole list too."""
    sub = StateGraph(ChatState)
    sub.add_node("note", lambda s: {"messages": [chat_message(len(s["messages"]))]})
    sub.add_edge(START, "note")
    sub.add_edge("note", END)

    def turn(state: ChatState) -> dict[str, Any]:
        return {"messages": [chat_message(len(state["messages"]))]}

    def route(state: ChatState) -> str:
        n = len(state["messages"])
        if n >= turns:
            return END
        return "sub" if n % every == 0 else "turn"

    b = StateGraph(ChatState)
    b.add_node("turn", turn)
    b.add_node("sub", sub.compile())
    b.add_edge(START, "turn")
    b.add_conditional_edges("turn", route, ["turn", "sub", END])
    b.add_edge("sub", "turn")
    return b


class Forgetful(CkptSaver):
    """Commits at every call and keeps no thread in memory (resident_threads=0): every
    read and every put after the first goes back to the store, as after a restart."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, resident_threads=0, **kwargs)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        config = super().put(*args, **kwargs)
        self.flush()
        return config

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        super().put_writes(*args, **kwargs)
        self.flush()

    def get_tuple(self, config: Any) -> Any:
        self.flush()
        return super().get_tuple(config)

    def list(self, *args: Any, **kwargs: Any) -> Any:
        self.flush()
        return super().list(*args, **kwargs)


# -- for prune: a thread paused inside a subgraph, and one whose messages are a DeltaChannel ----------
class ReviewState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]


def _check(state: ReviewState) -> dict[str, Any]:
    answer = interrupt({"question": f"publish {len(state['messages'])} messages?"})
    return {"notes": [f"check:{answer}"]}


def review_builder() -> StateGraph[ReviewState]:
    """intake -> prep -> review (a subgraph: draft -> check, which interrupts -> publish) -> done.
    Invoked once, the thread waits inside the subgraph: its newest checkpoints are the
    subgraph's, and LangGraph resumes from the root's newest and the subgraph's."""
    sub = StateGraph(ReviewState)
    sub.add_node("draft", lambda s: {"messages": [AIMessage(content="draft", id="draft")], "notes": ["draft"]})
    sub.add_node("check", _check)
    sub.add_node("publish", lambda s: {"messages": [AIMessage(content="published", id="pub")]})
    sub.add_edge(START, "draft")
    sub.add_edge("draft", "check")
    sub.add_edge("check", "publish")
    sub.add_edge("publish", END)
    b = StateGraph(ReviewState)
    b.add_node("intake", lambda s: {"notes": ["intake"]})
    b.add_node("prep", lambda s: {"notes": ["prep"]})
    b.add_node("review", sub.compile())
    b.add_node("done", lambda s: {"notes": ["done"]})
    b.add_edge(START, "intake")
    b.add_edge("intake", "prep")
    b.add_edge("prep", "review")
    b.add_edge("review", "done")
    b.add_edge("done", END)
    return b


def delta_chat_builder(turns: int, snapshot_frequency: int) -> StateGraph[Any]:
    """`chat_builder`'s conversation with the messages in LangGraph's DeltaChannel: a
    checkpoint stores them every `snapshot_frequency` updates; the others rebuild them
    from their ancestors' pending writes."""
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph.message import _messages_delta_reducer

    # the functional form: the channel is made here, so the annotation cannot be a string
    channel = DeltaChannel(_messages_delta_reducer, snapshot_frequency=snapshot_frequency)
    delta_state = TypedDict("delta_state", {"messages": Annotated[list[AnyMessage], channel]})  # type: ignore[misc]  # noqa: UP013

    def turn(state: Any) -> dict[str, Any]:
        return {"messages": [chat_message(len(state["messages"]), 8)]}

    def route(state: Any) -> str:
        return "turn" if len(state["messages"]) % turns else END

    b = StateGraph(delta_state)
    b.add_node("turn", turn)
    b.add_edge(START, "turn")
    b.add_conditional_edges("turn", route, ["turn", END])
    return b


def normalized(value: Any) -> Any:
    """A result or state without what differs from run to run by design (interrupt ids,
    derived from checkpoint ids, new in each run)."""
    if isinstance(value, Interrupt):
        return ("interrupt", normalized(value.value))
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalized(v) for v in value]
    return value
