"""The reducer of the ``langgraph:write`` events the LangGraph saver stores (registered
in the `ckptcli.reducers` entry-point group as namespace ``langgraph``).

A pending write is what a task wrote to a channel before LangGraph applied it; applying
it needs the graph's own channel reducers, which a replay does not have. So replaying a
write keeps it, in order, under ``ext.langgraph.writes``: `ckpt replay` steps through
the writes of a LangGraph checkpoint, and `ckpt fork --at SEQ` makes a checkpoint whose
snapshot holds the first SEQ writes, which `CkptSaver.thread_from` turns into a LangGraph
thread that resumes with exactly those writes done.
"""

from __future__ import annotations

from typing import Any

from ckptcli.events import Event, State

WRITE_KIND = "langgraph:write"


def _write(state: State, ev: Event) -> State:
    ext = dict(state.get("ext") or {})
    lg = dict(ext.get("langgraph") or {})
    record: dict[str, Any] = {k: v for k, v in ev.to_map().items() if k not in ("seq", "ts")}
    lg["writes"] = [*(lg.get("writes") or []), record]
    ext["langgraph"] = lg
    return {**state, "ext": ext}


REDUCERS = {WRITE_KIND: _write}
