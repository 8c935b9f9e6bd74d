"""The LangGraph saver's journal under SIGKILL: real graphs in real processes, killed at
random moments and right after commits, reserves and rotations; every put that had
returned is there after reopening, whatever the fsync policy (a kill is no power cut:
the page cache survives it). And damage: a hole punched in a journal is reported by
`ckpt verify` (exit 5, the file and the offset), and recovery reads the records after
it instead of dropping them silently, in both journal versions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ckptcli.adapters.langgraph import CkptSaver
from ckptcli.adapters.langgraph_journal import read_journal

REPO = Path(__file__).resolve().parent.parent
SCALE = max(1, int(os.environ.get("CKPT_STRESS_SCALE", "1") or "1"))

# -- the reproduction: 40 invocations, a pause, one more, SIGKILL --------------------------
REPLY_CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {repo!r})
    from typing import Annotated
    from typing_extensions import TypedDict
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from ckptcli.adapters.langgraph import CkptSaver

    class State(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    def reply(state):  # appends a 20 KB message
        n = len(state["messages"])
        return {{"messages": [AIMessage(content=f"reply {{n}} " + "x" * 20_000, id=f"a-{{n}}")]}}

    b = StateGraph(State)
    b.add_node("reply", reply)
    b.add_edge(START, "reply")
    b.add_edge("reply", END)
    saver = CkptSaver.open({store!r}, fsync={fsync!r}, commit_interval={interval})
    graph = b.compile(checkpointer=saver)
    cfg = {{"configurable": {{"thread_id": "t"}}}}
    for i in range(40):
        graph.invoke({{"messages": [HumanMessage(content=f"question {{i}}", id=f"h-{{i}}")]}}, cfg)
    time.sleep({interval} * 1.5)  # the commit thread commits, then writes space ahead
    graph.invoke({{"messages": [HumanMessage(content="one more", id="h-last")]}}, cfg)
    print("returned", flush=True)
    time.sleep(3600)
    """
)


def test_sigkill_after_a_pause_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """The issue's reproduction, both fsync policies at once (two processes): 41
    invocations returned, 82 messages; before the fix the reserve after the pause wrote
    zeros over records past the preallocated MiB and recovery stopped there (80 of 82)."""
    interval = 1.0
    children = {}
    for fsync in ("batch", "always"):
        store = tmp_path / fsync / ".ckpt"
        CkptSaver.open(store).close()
        code = REPLY_CHILD.format(repo=str(REPO), store=str(store), fsync=fsync, interval=interval)
        children[fsync] = (store, subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True))
    for fsync, (store, child) in children.items():
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "returned", fsync
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        holes = {j.name: read_journal(j.read_bytes()).holes for j in (store / "langgraph").glob("*.journal")}
        saver = CkptSaver.open(store)
        try:
            tup = saver.get_tuple({"configurable": {"thread_id": "t"}})
            assert tup is not None
            msgs = tup.checkpoint["channel_values"]["messages"]
            assert len(msgs) == 82, f"fsync={fsync}: {len(msgs)} of 82 acknowledged messages after reopening"
            assert [m.id for m in msgs[-2:]] == ["h-last", "a-81"]
        finally:
            saver.close()
        assert not any(holes.values()), f"{fsync}: the journal had holes: {holes}"
