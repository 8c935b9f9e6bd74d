"""The reducer of the ``langgraph:write`` events the LangGraph saver stores (registered
in the `ckptcli.reducers` entry-point group as namespace ``langgraph``).

A pending write is what a task wrote to a channel before LangGraph applied it. Replaying
a write keeps it, in order, under ``ext.langgraph.writes``: `ckpt fork --at SEQ` makes a
checkpoint whose snapshot holds the first SEQ writes, which `CkptSaver.thread_from` turns
into a LangGraph thread that resumes with exactly those writes done. When the snapshot
says how the channels are reduced (``ext.langgraph.reducers``, which `ckpt replay` puts
there: `langgraph_replay.prepare`), the write is also applied to the channel's value in
``memory``, as LangGraph would; a write it cannot apply is named, with the reason, under
``ext.langgraph.not_applied`` (seq -> "channel: why").
"""

from __future__ import annotations

from typing import Any

from ckptcli.history.events import Event, State

WRITE_KIND = "langgraph:write"


def _write(state: State, ev: Event) -> State:
    ext = dict(state.get("ext") or {})
    lg = dict(ext.get("langgraph") or {})
    record: dict[str, Any] = {k: v for k, v in ev.to_map().items() if k not in ("seq", "ts")}
    lg["writes"] = [*(lg.get("writes") or []), record]
    out = {**state}
    reducers, channel, memory = lg.get("reducers"), ev.fields.get("channel"), state.get("memory")
    if type(reducers) is dict and type(channel) is str and type(memory) is dict:
        from ckptcli.adapters.langgraph.replay import EMPTY, apply, builtin

        if builtin(channel) != "":
            learnt = reducers.get(channel)
            value, why = apply(channel, learnt if type(learnt) is list else None, memory.get(channel, EMPTY), ev.fields.get("value"))
            if ev.fields.get("type", "null") != "null":  # (None is stored as serializer type "null")
                why = f"its value is stored as bytes of serializer type {ev.fields['type']!r}, which ckpt does not read"
            if why is None:
                out["memory"] = {**memory, channel: value}
            else:
                lg["not_applied"] = {**(lg.get("not_applied") or {}), str(ev.seq): f"{channel}: {why}"}
    ext["langgraph"] = lg
    out["ext"] = ext
    return out


REDUCERS = {WRITE_KIND: _write}
