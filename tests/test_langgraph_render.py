"""`ckpt diff` between checkpoints a real LangGraph graph wrote through CkptSaver: messages
read `role: text`, tool calls by name and arguments, LangGraph's bookkeeping left out
unless --all, times as UTC ISO 8601, and --json keeps the exact form."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph.message import add_messages

from ckptcli.adapters.langgraph.render import readable
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import ask, chain_builder, support_builder


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


class _Timed(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    when: datetime
    day: date
    ns: int


def _first(state: _Timed) -> dict[str, Any]:
    sent = datetime(2026, 11, 26, 12, 0, 1, tzinfo=timezone(timedelta(hours=2)))  # 10:00:01 UTC
    return {"messages": [AIMessage(content="hi", id="ai-1")], "when": sent, "day": date(2026, 11, 26), "ns": 1_795_715_105_445_941_856}


def _second(state: _Timed) -> dict[str, Any]:
    return {
        "messages": [AIMessage(content="bye", id="ai-2")],
        "when": datetime(2026, 11, 26, 11, 0, 2, 500, tzinfo=UTC),
        "ns": 1_795_715_205_445_941_856,
    }


def test_times_in_a_langgraph_state_read_as_utc_iso(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / "store"
    with CkptSaver.open(store) as saver:
        graph = chain_builder(_Timed, first=_first, second=_second).compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="q", id="h-0")]}, {"configurable": {"thread_id": "t1"}})
    shown = json.loads(cli("show", "agent:t1", "--section", "memory", "--store", store).out)
    assert shown["when"] == "2026-11-26T11:00:02.000500Z" and shown["day"] == "2026-11-26"
    assert shown["ns"] == "1795715205445941856 (2026-11-26T17:46:45Z)"
    events = json.loads(cli("show", "agent:t1~1", "--section", "events", "--store", store).out)
    assert all(re.fullmatch(r"\d{19} \(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", e["ts"]) for e in events) and events
    text = cli("diff", "agent:t1~1", "agent:t1", "--store", store).out
    assert '~ when: "2026-11-26T10:00:01Z" -> "2026-11-26T11:00:02.000500Z"' in text  # 12:00:01+02:00 in UTC
    assert "~ ns: 1795715105445941856 (2026-11-26T17:45:05Z) -> 1795715205445941856 (2026-11-26T17:46:45Z)" in text
    assert 'when: "2026-11-26T11:00:02.000500Z"' in text.split("events", 1)[1]  # a pending write of it too
    assert "$ext" not in text and "fromisoformat" not in text
    # --json and --all keep the exact form
    exact = json.loads(cli("show", "agent:t1", "--section", "memory", "--store", store, "--json").out)
    assert exact["when"] == {"$ext": 3, "data": ["datetime", "datetime", "2026-11-26T11:00:02.000500+00:00", "fromisoformat"]}
    assert exact["day"] == {"$ext": 1, "data": ["datetime", "date", [2026, 11, 26]]} and exact["ns"] == 1_795_715_205_445_941_856
    assert json.loads(cli("show", "agent:t1", "--section", "memory", "--store", store, "--all").out)["when"] == exact["when"]
    patch = json.loads(cli("diff", "agent:t1~1", "agent:t1", "--store", store, "--json").out)
    assert "2026-11-26T11:00:02.000500+00:00" in json.dumps(patch) and "11:00:02.000500Z" not in json.dumps(patch)
    assert "when.data[2]" in cli("diff", "agent:t1~1", "agent:t1", "--store", store, "--all").out


def test_readable_times_inside_objects_and_naive_datetimes() -> None:
    naive = {"$ext": 3, "data": ["datetime", "datetime", "2026-11-26T11:00:00", "fromisoformat"]}
    assert readable(naive) == "2026-11-26T11:00:00 (no time zone)"
    interrupt = {"$ext": 2, "data": ["langgraph.types", "Interrupt", {"value": {"at": naive, "ns": 1_795_715_105_445_941_856}, "id": "x"}]}
    assert (
        readable(interrupt)
        == 'Interrupt {"value": {"at": "2026-11-26T11:00:00 (no time zone)", "ns": "1795715105445941856 (2026-11-26T17:45:05Z)"}, "id": "x"}'  # noqa: E501
    )
    assert readable({"$ext": 3, "data": ["datetime", "datetime", "not a time", "fromisoformat"]})["data"][2] == "not a time"
    assert readable(5) == 5 and readable(1_795_715_105_445_941_856) == 1_795_715_105_445_941_856  # numbers stay numbers unless asked
