"""CkptSaver, ckpt's LangGraph checkpointer: LangGraph's own conformance suite at level
FULL, exact round trips of every value type LangGraph's serializer supports (in memory
and read back from the store), the async API, deletes, copies, prunes, list filters,
revisions, and a real process killed in the middle of a run."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import decimal
import enum
import ipaddress
import itertools
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Send

from ckptcli import api
from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.saver import CkptSaver, read_journal
from ckptcli.errors import InvalidInputError, UsageError
from ckptcli.store import catalog
from ckptcli.store.catalog import Summary
from tests.langgraph_graphs import Forgetful, chat_builder, chat_message

REPO = Path(__file__).resolve().parent.parent


def open_saver(path: Path, **options: Any) -> CkptSaver:
    return CkptSaver.open(path, **options)


# -- LangGraph's conformance suite ------------------------------------------------------------
def _conformance(tmp_path: Path, cls: type[CkptSaver]) -> tuple[Any, list[CkptSaver]]:
    """LangGraph's conformance suite on savers of `cls`, each on a store of its own: the
    report, and the savers it made. Asserts level FULL, naming the failures."""
    n = itertools.count()
    savers: list[CkptSaver] = []

    @checkpointer_test(name=cls.__name__)
    async def factory():  # type: ignore[no-untyped-def]
        saver = cls.open(tmp_path / f"s{next(n)}" / ".ckpt")
        savers.append(saver)
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.conformance_level() == "FULL", failures
    return report, savers


def test_conformance_suite_passes_at_level_full(tmp_path: Path) -> None:
    report, _savers = _conformance(tmp_path, CkptSaver)
    assert {c.value for c in ALL_CAPABILITIES} == {name for name, r in report.results.items() if r.detected and r.passed}
    assert sum(r.tests_passed for r in report.results.values()) >= 80


def test_conformance_suite_passes_with_threads_dropped_from_memory_at_every_call(tmp_path: Path) -> None:
    """The same suite on a saver that drops every committed thread from memory after
    each call (the path a long-running server takes for threads it has not used lately)."""
    report, savers = _conformance(tmp_path, Forgetful)
    assert {c.value for c in ALL_CAPABILITIES} == {name for name, r in report.results.items() if r.detected and r.passed}
    assert sum(s.evicted for s in savers) > 100


def test_resident_threads_bounds_what_stays_in_memory(tmp_path: Path) -> None:
    """Many conversations, then: the least recently used threads are dropped from memory
    once committed, and every one of them still reads back exactly."""
    store = tmp_path / ".ckpt"
    saver = open_saver(store, resident_threads=3)
    try:
        graph = chat_builder(6, words=5).compile(checkpointer=saver)
        expected = {}
        for t in range(12):
            cfg = {"configurable": {"thread_id": f"t{t}"}}
            graph.invoke({"messages": []}, cfg)
            saver.flush()
            expected[f"t{t}"] = [
                (c.config["configurable"]["checkpoint_id"], c.checkpoint["channel_values"].copy(), c.pending_writes)
                for c in saver.list(cfg)
            ]
        resident = {key[0] for key, e in saver._entries.items() if e.loaded}
        assert len(saver._used) <= 3 and saver.evicted >= 9 and len(resident) <= 3 + 1
        assert {b[0] for b in saver._blobs} <= set(saver._used)
        for thread, history in expected.items():  # read back from the store, in another order
            cfg = {"configurable": {"thread_id": thread}}
            got = [
                (c.config["configurable"]["checkpoint_id"], c.checkpoint["channel_values"].copy(), c.pending_writes)
                for c in saver.list(cfg)
            ]
            assert got == history, thread
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "t0"}})  # a dropped thread goes on
        assert graph.get_state({"configurable": {"thread_id": "t0"}}).values["messages"][:6] == expected["t0"][0][1]["messages"]
        # a tuple handed out before its thread was dropped still reads its values
        early = saver.get_tuple({"configurable": {"thread_id": "t1"}})
        assert early is not None
        for t in range(4, 9):
            saver.get_tuple({"configurable": {"thread_id": f"t{t}"}})
        saver.put({"configurable": {"thread_id": "t9", "checkpoint_ns": ""}}, {**empty_checkpoint(), "id": "1f0-late"}, {}, {})
        saver.flush()
        assert "t1" not in saver._used
        assert early.checkpoint["channel_values"] == expected["t1"][0][1]
        # a checkpoint put again after its thread was dropped keeps its pending writes
        cfg = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
        ck = {**empty_checkpoint(), "id": "1f0-w"}
        done = saver.put(cfg, ck, {"step": 1}, {})
        saver.put_writes(done, [("messages", "kept")], "task-1")
        saver.flush()
        for t in range(4, 9):
            saver.get_tuple({"configurable": {"thread_id": f"t{t}"}})
        saver.flush()
        assert "w" not in saver._used
        saver.put(cfg, ck, {"step": 1}, {})
        again = saver.get_tuple(done)
        assert again is not None and again.pending_writes == [("task-1", "messages", "kept")]
    finally:
        saver.close()
    with pytest.raises(InvalidInputError, match="resident_threads must be an integer >= 0"):
        open_saver(tmp_path / "x", resident_threads=-1)


# -- exact round trips ----------------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Pair(NamedTuple):
    a: int
    b: str


class Ticket(pydantic.BaseModel):
    id: int
    tags: list[str]
    note: str | None = None


def _nested(depth: int) -> Any:
    v: Any = "bottom"
    for _ in range(depth):
        v = [v]
    return v


VALUES: dict[str, Any] = {
    "str": "héllo wörld ✓",
    "empty": "",
    "int": 42,
    "negative": -(2**63),
    "uint64": 2**64 - 1,
    "float": 3.25,
    "minus_zero": -0.0,
    "inf": float("inf"),
    "nan": float("nan"),
    "true": True,
    "none": None,
    "bytes": b"\x00\xff raw",
    "bytearray": bytearray(b"array"),
    "list": [1, "two", [3.0, None]],
    "tuple": (1, "x"),
    "dict": {"a": {"b": [1, {"c": None}]}},
    "int_keys": {1: "one", 2: "two"},
    "dollar_keys": {"$ext": 5, "$map": [1], "$msgpack": b"x", "plain": 1},
    "datetime": datetime.datetime(2025, 1, 2, 3, 4, 5, 678, tzinfo=datetime.UTC),
    "naive_datetime": datetime.datetime(2025, 1, 2, 3, 4, 5),
    "date": datetime.date(2025, 6, 7),
    "time": datetime.time(8, 9, 10),
    "timedelta": datetime.timedelta(days=2, seconds=5, microseconds=7),
    "timezone": datetime.timezone(datetime.timedelta(hours=-3)),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": decimal.Decimal("3.14159265358979323846"),
    "set": {1, 2, 3},
    "frozenset": frozenset({"a"}),
    "deque": collections.deque([1, 2]),
    "enum": Color.RED,
    "path": pathlib.Path("a/b/c.txt"),
    "pattern": re.compile(r"a+b", re.IGNORECASE),
    "ipv4": ipaddress.IPv4Address("10.0.0.1"),
    "ipv6_network": ipaddress.IPv6Network("2001:db8::/32"),
    "dataclass": Point(1, 2.5),
    "namedtuple": Pair(1, "b"),
    "pydantic": Ticket(id=7, tags=["a", "b"]),
    "messages": [
        SystemMessage(content="be brief", id="s1"),
        HumanMessage(content="hello", id="h1"),
        AIMessage(content="", id="a1", tool_calls=[{"name": "lookup", "args": {"q": 1}, "id": "c1", "type": "tool_call"}]),
        ToolMessage(content="found", tool_call_id="c1", name="lookup", id="t1"),
        AIMessage(content=[{"type": "text", "text": "parts"}], id="a2"),
    ],
    "send": Send("node", {"arg": 1}),
    "long_string": "word " * 40_000,
    "long_bytes": bytes(range(256)) * 500,
    "deep": _nested(230),  # deeper than a view goes (stored as its bytes); ormsgpack stops at 255
    "big_list": list(range(5000)),
    "mixed_list": ["a", 1, None, {"k": [b"v"]}, Point(0, 0.0)],
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _expected(value: Any) -> Any:
    """What any LangGraph saver gives back: the serializer's own round trip."""
    serde = JsonPlusSerializer()
    return serde.loads_typed(serde.dumps_typed(value))


def _put(
    saver: CkptSaver, thread: str, values: dict[str, Any], parent: str | None = None, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    versions = {k: saver.get_next_version(None, None) for k in values}
    cp["channel_versions"] = versions
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    return saver.put(config, cp, metadata or {"source": "loop", "step": 1, "parents": {}}, versions)  # type: ignore[arg-type]


@pytest.mark.parametrize("reopen", [False, True], ids=["in-memory", "from-the-store"])
def test_every_value_type_round_trips_exactly(tmp_path: Path, reopen: bool) -> None:
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    cfg = _put(
        saver, "types", dict(VALUES), metadata={"source": "input", "step": -1, "parents": {}, "extra": VALUES["datetime"], "n": [1, 2]}
    )
    saver.put_writes(cfg, [(name, value) for name, value in VALUES.items()], task_id="task-1", task_path="~p")
    # and all of them as the items of one list, which is stored item by item
    cfg2 = _put(saver, "types", {"items": list(VALUES.values())}, parent=cfg["configurable"]["checkpoint_id"])
    if reopen:
        saver.close()
        saver = open_saver(store)
    tup = saver.get_tuple(cfg)
    assert tup is not None
    values = tup.checkpoint["channel_values"]
    assert list(values) == list(VALUES)
    for name, value in VALUES.items():
        assert _same(values[name], _expected(value)), name
    assert _same(tup.metadata["extra"], _expected(VALUES["datetime"]))
    assert [w[1] for w in tup.pending_writes] == list(VALUES)
    for (_task, name, got), value in zip(tup.pending_writes, VALUES.values(), strict=True):
        assert _same(got, _expected(value)), f"write {name}"
    items = saver.get_tuple(cfg2).checkpoint["channel_values"]["items"]  # type: ignore[union-attr]
    assert _same(items, _expected(list(VALUES.values())))
    saver.close()
    assert api.verify(api.open_store(store), read_data=True).ok


def test_async_api_matches_the_sync_one(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_saver(tmp_path / ".ckpt") as saver:
            cfg = await saver.aput(
                {"configurable": {"thread_id": "a", "checkpoint_ns": ""}},
                _checkpoint({"x": 1}),
                {"source": "input", "step": -1},
                {"x": "1"},
            )
            await saver.aput_writes(cfg, [("x", 2)], "t1")
            got = await saver.aget_tuple(cfg)
            assert got is not None and got.checkpoint["channel_values"] == {"x": 1} and got.pending_writes == [("t1", "x", 2)]
            assert [t.config async for t in saver.alist({"configurable": {"thread_id": "a"}})] == [
                t.config for t in saver.list({"configurable": {"thread_id": "a"}})
            ]
            await saver.acopy_thread("a", "b")
            assert (await saver.aget_tuple({"configurable": {"thread_id": "b"}})).pending_writes == [("t1", "x", 2)]  # type: ignore[union-attr]
            await saver.adelete_thread("a")
            assert await saver.aget_tuple({"configurable": {"thread_id": "a"}}) is None

    asyncio.run(main())


def _checkpoint(values: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: "1" for k in values}
    return cp


# -- the store behind it ----------------------------------------------------------------------
def _run_chat(saver: Any, thread: str, turns: int) -> dict[str, Any]:
    graph = chat_builder(turns).compile(checkpointer=saver)
    return graph.invoke({"messages": []}, {"configurable": {"thread_id": thread}, "recursion_limit": turns + 10}, durability="sync")  # type: ignore[no-any-return]


def _thread_manifests(store: Path, thread: str) -> list[bytes]:
    st = api.open_store(store)
    out = []
    for cid, row in catalog.rows(st).items():
        _cid, summary = Summary.from_row(row)
        key = layout.key_of(summary.subject, summary.labels)
        if key is not None and key.thread_id == thread:
            out.append(cid)
    return out


def test_a_history_costs_its_new_data_and_lists_fast(tmp_path: Path) -> None:
    sizes = {}
    for turns in (100, 300):
        store = tmp_path / f"s{turns}" / ".ckpt"
        saver = open_saver(store)
        _run_chat(saver, "chat", turns)
        listed = list(saver.list({"configurable": {"thread_id": "chat"}}))
        assert len(listed) == turns + 2
        assert listed[0].checkpoint["channel_values"]["messages"][-1].id == f"m-{turns - 1}"
        saver.close()
        sizes[turns] = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        assert not list((store / "langgraph").glob("*.journal")), "the journal is deleted on close"
    # three times the steps, about three times the bytes: O(new data) per checkpoint
    assert sizes[300] / sizes[100] < 3.4
    assert sizes[300] / 300 < 4000


def test_ckpt_commands_read_what_the_saver_wrote(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    _run_chat(saver, "chat", 5)
    saver.close()
    ls = cli("ls", "--store", store, "--json")
    assert ls.code == 0 and '"agent:chat"' in ls.out and "langgraph.checkpoint" in ls.out
    show = cli("show", "agent:chat", "--store", store, "--section", "memory")
    assert show.code == 0 and "human: " in show.out  # read as messages
    show = cli("show", "agent:chat", "--store", store, "--section", "memory", "--all")
    assert show.code == 0 and "m-4" in show.out and "AIMessage" in show.out  # as stored
    diff = cli("diff", "agent:chat~1", "agent:chat", "--store", store)
    assert diff.code in (0, 1) and "messages" in diff.out
    assert cli("verify", "--store", store, "--read-data").code == 0
    replay = cli("replay", "agent:chat~1", "--store", store, "--json")
    assert replay.code == 0, replay.err


def test_delete_thread_and_prune_remove_data_from_the_store(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    _run_chat(saver, "keep", 8)
    _run_chat(saver, "gone", 8)
    _run_chat(saver, "pruned", 8)
    saver.close()
    before = sum(f.stat().st_size for f in (store / "packs").rglob("*") if f.is_file())
    saver = open_saver(store)
    latest = saver.get_tuple({"configurable": {"thread_id": "pruned"}})
    saver.delete_thread("gone")
    saver.prune(["pruned"], strategy="keep_latest")
    assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "pruned"}})] == [
        latest.config["configurable"]["checkpoint_id"]
    ]  # type: ignore[union-attr]
    saver.close()
    assert _thread_manifests(store, "gone") == []
    assert len(_thread_manifests(store, "pruned")) == 1
    after = sum(f.stat().st_size for f in (store / "packs").rglob("*") if f.is_file())
    assert after < before
    saver = open_saver(store)
    kept = saver.get_tuple({"configurable": {"thread_id": "pruned"}})
    assert kept is not None and kept.checkpoint["channel_values"] == latest.checkpoint["channel_values"]  # type: ignore[union-attr]
    assert saver.get_tuple({"configurable": {"thread_id": "keep"}}).checkpoint["channel_values"]["messages"][-1].id == "m-7"  # type: ignore[union-attr]
    saver.close()
    assert api.verify(api.open_store(store), read_data=True).ok


def test_list_filters_before_and_limit_also_from_the_store(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    _run_chat(saver, "t", 6)
    every = [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t"}})]
    saver.close()
    saver = open_saver(store)
    cfg = {"configurable": {"thread_id": "t"}}
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)] == every == sorted(every, reverse=True)
    assert [t.metadata["step"] for t in saver.list(cfg, filter={"source": "loop", "step": 3})] == [3]
    assert [t.metadata["source"] for t in saver.list(cfg, filter={"source": "input"})] == ["input"]
    assert [
        t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg, before={"configurable": {"checkpoint_id": every[2]}}, limit=2)
    ] == every[3:5]
    assert len(list(saver.list(None))) == len(every)
    assert list(saver.list({"configurable": {"thread_id": "nope"}})) == []
    saver.close()


def test_a_late_write_makes_a_revision_after_a_restart(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    cfg = _put(saver, "r", {"x": 1})
    saver.put_writes(cfg, [("__interrupt__", {"q": "?"})], "t1")
    saver.close()
    saver = open_saver(store)
    saver.put_writes(cfg, [("__resume__", "yes")], "t2")
    assert [w[1] for w in saver.get_tuple(cfg).pending_writes] == ["__interrupt__", "__resume__"]  # type: ignore[union-attr]
    saver.close()
    saver = open_saver(store)
    assert [w[1] for w in saver.get_tuple(cfg).pending_writes] == ["__interrupt__", "__resume__"]  # type: ignore[union-attr]
    saver.close()
    ls = cli("ls", "--store", store, "--json")
    assert ls.out.count('"langgraph.rev": "2"') == 1 and ls.out.count('"agent:r"') == 2


def test_options_are_checked_and_a_closed_saver_says_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        open_saver(tmp_path / "a", fsync="sometimes")
    saver = open_saver(tmp_path / "b", fsync="batch")
    saver.close()
    with pytest.raises(UsageError):
        saver.get_tuple({"configurable": {"thread_id": "x"}})


def test_other_serializers_are_stored_whole_and_exactly(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.base import SerializerCompat

    class Plain:  # an old-style untyped serializer, which LangGraph wraps
        def dumps(self, obj: Any) -> bytes:
            return repr(obj).encode()

        def loads(self, data: bytes) -> Any:
            import ast

            return ast.literal_eval(data.decode())

    serde = SerializerCompat(Plain())  # type: ignore[arg-type]
    store = tmp_path / ".ckpt"
    saver = open_saver(store, serde=serde)
    cfg = _put(saver, "t", {"l": [1, 2, (3, 4)], "d": {"k": "v"}})
    saver.close()
    saver = open_saver(store, serde=serde)
    assert saver.get_tuple(cfg).checkpoint["channel_values"] == {"l": [1, 2, (3, 4)], "d": {"k": "v"}}  # type: ignore[union-attr]
    saver.close()


# -- crash safety: a real process killed mid-run ------------------------------------------------
CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from ckptcli.adapters.langgraph.saver import CkptSaver
    from tests.langgraph_graphs import chat_builder, chat_message

    class Reporting(CkptSaver):
        def put(self, *args, **kwargs):
            config = super().put(*args, **kwargs)
            print(config["configurable"]["checkpoint_id"], flush=True)  # only once put returned
            return config

    saver = Reporting.open({store!r}, fsync={fsync!r}, commit_interval=0.05)
    graph = chat_builder(100000, words=30).compile(checkpointer=saver)
    graph.invoke({{"messages": []}}, {{"configurable": {{"thread_id": "crash"}}, "recursion_limit": 10**6}}, durability="sync")
    """
)


@pytest.mark.parametrize("fsync", ["batch", "always"])
def test_a_process_killed_mid_run_loses_no_put_that_returned(tmp_path: Path, fsync: str) -> None:
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO), store=str(store), fsync=fsync)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ids = []
    assert child.stdout is not None
    for line in child.stdout:
        ids.append(line.strip())
        if len(ids) >= 150:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert child.stderr is not None
    child.stderr.close()
    journals = list((store / "langgraph").glob("*.journal"))
    assert journals, "the killed saver's journal is there to replay"
    records = read_journal(journals[0].read_bytes()).records
    assert any(r["op"] == "p" for r in records)
    saver = CkptSaver.open(store)
    try:
        for cid in ids:
            tup = saver.get_tuple({"configurable": {"thread_id": "crash", "checkpoint_ns": "", "checkpoint_id": cid}})
            assert tup is not None, cid
            msgs = tup.checkpoint["channel_values"].get("messages", [])
            assert msgs == [chat_message(i, words=30) for i in range(len(msgs))]
        # ... and the graph carries on from the newest one
        newest = saver.get_tuple({"configurable": {"thread_id": "crash"}})
        assert newest is not None and newest.config["configurable"]["checkpoint_id"] >= ids[-1]
    finally:
        saver.close()
    assert not list((store / "langgraph").glob("*.journal")), "recovered journals are deleted"
    assert api.verify(api.open_store(store), read_data=True).ok


def test_ckpt_prune_and_export_keep_checkpoints_langgraph_can_read(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    saver = open_saver(store)
    _run_chat(saver, "chat", 12)
    newest = saver.get_tuple({"configurable": {"thread_id": "chat"}})
    saver.close()
    assert cli("prune", "--keep-last", "3", "--store", store).code == 0
    assert cli("export", "agent:chat", "-o", tmp_path / "chat.ckpt", "--store", store).code == 0
    other = tmp_path / "other" / ".ckpt"
    api.init_store(other)
    assert cli("import", tmp_path / "chat.ckpt", "--store", other).code == 0
    for path in (store, other):
        saver = open_saver(path)
        try:
            got = saver.get_tuple({"configurable": {"thread_id": "chat"}})
            assert got is not None and newest is not None
            assert got.checkpoint == newest.checkpoint and got.metadata == newest.metadata
            assert len(list(saver.list({"configurable": {"thread_id": "chat"}}))) == (3 if path == store else 1)
        finally:
            saver.close()


def test_the_adapter_imports_no_ui() -> None:
    """Like the core (tests/test_import_hygiene.py): the saver and the importer load no
    typer, rich, textual or click."""
    code = (
        "import sys, json, ckptcli.adapters.langgraph.saver, ckptcli.adapters.langgraph.importer, ckptcli.adapters.langgraph.events; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'textual', 'click'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_journal_restart_syncs_without_holding_up_puts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting the journal again synced the new journal (an fdatasync: 12-35 ms on a busy
    disk) while holding the saver's lock, so every put and read of every thread waited
    for it. The sync and the old journal's deletion now come after the lock is let go;
    the old journal stays until the new one is synced."""
    import ckptcli.adapters.langgraph.saver as lg
    from ckptcli.adapters.langgraph.journal import Journal

    monkeypatch.setattr(lg, "ROTATE_BYTES", 8_000)
    saver = open_saver(tmp_path / ".ckpt", commit_interval=3600, seal_idle=0)
    first = saver._journal
    synced: list[tuple[bool, int]] = []  # (the saver's lock held, journals on disk) at each sync of a newer journal
    real_sync = Journal.sync

    def sync(self: Journal) -> None:
        if self is not first and not saver._closed:
            synced.append((saver._lock._is_owned(), len(list((tmp_path / ".ckpt" / "langgraph").glob("*.journal")))))
        real_sync(self)

    monkeypatch.setattr(Journal, "sync", sync)
    try:
        graph = chat_builder(60, words=40).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "t"}}
        for _ in range(3):
            graph.invoke({"messages": []}, cfg, durability="sync")
            saver.flush()  # commits, and starts the journal again (it is over 8,000 bytes)
        assert saver._journal is not first and synced
        assert not any(held for held, _n in synced), "a new journal was synced under the saver's lock"
        assert all(n >= 1 for _held, n in synced)
        journals = list((tmp_path / ".ckpt" / "langgraph").glob("*.journal"))
        assert journals == [saver._journal.path]  # the old ones deleted once the new one was synced
        expected = graph.get_state(cfg).values["messages"]
    finally:
        monkeypatch.undo()
        saver.close()
    again = open_saver(tmp_path / ".ckpt")
    try:
        tup = again.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == expected
    finally:
        again.close()


def test_journal_restarts_carry_what_is_not_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal starts again after a commit once it has grown; what it carries over
    (checkpoints not committed yet, their writes) is all a crash then needs."""
    import ckptcli.adapters.langgraph.saver as lg

    monkeypatch.setattr(lg, "ROTATE_BYTES", 8_000)
    rotations = []
    rotate = CkptSaver._rotate

    def counting(self: CkptSaver, new: Any) -> None:
        rotations.append(self._journal.size)
        rotate(self, new)

    monkeypatch.setattr(CkptSaver, "_rotate", counting)

    class Committing(CkptSaver):  # commits every 20 puts, whatever the timing
        puts = 0

        def put(self, *args: Any, **kwargs: Any) -> Any:
            config = super().put(*args, **kwargs)
            self.puts += 1
            if self.puts % 20 == 0:
                self._seal_ready()
                with self._commit_mutex:
                    self._commit_locked()
            return config

    store = tmp_path / ".ckpt"
    saver = Committing.open(store, commit_interval=3600, seal_idle=0)
    graph = chat_builder(10**6, words=40).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "long"}, "recursion_limit": 250}
    with pytest.raises(Exception, match=r"[Rr]ecursion"):
        graph.invoke({"messages": []}, cfg, durability="sync")
    expected = {t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"].copy() for t in saver.list(cfg)}
    writes = {t.config["configurable"]["checkpoint_id"]: t.pending_writes for t in saver.list(cfg)}
    saver.abandon()  # as if the process died: nothing more is committed
    journals = list((store / "langgraph").glob("*.journal"))
    assert len(journals) == 1 and len(rotations) >= 5, "the journal was started again, the old one deleted"
    saver = open_saver(store)
    try:
        got = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(cfg)}
        assert set(got) == set(expected)
        for cid, values in expected.items():
            assert got[cid].checkpoint["channel_values"] == values
            assert got[cid].pending_writes == writes[cid]
    finally:
        saver.close()


def test_a_closed_journal_never_touches_its_old_descriptor(tmp_path: Path) -> None:
    """The commit thread syncs and extends the journal without the saver's lock, and a
    rotation on another thread may close it meanwhile. Its descriptor number is then free
    for the next file opened; sync and reserve on the closed journal must leave that file
    alone (reserve writes a MiB of zeros)."""
    from ckptcli.adapters.langgraph.saver import _Journal

    journal = _Journal(tmp_path, "batch")
    fd = journal.fd
    journal.close(delete=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"x" * 100)
    other = os.open(victim, os.O_RDWR)
    if other != fd:  # the lowest free number is usually the freed one; make it so
        os.dup2(other, fd)
        os.close(other)
        other = fd
    try:
        journal.size, journal.allocated, journal.synced = journal.RESERVE, journal.RESERVE, 0
        journal.reserve()
        journal.sync()
        journal.close(delete=False)
        assert os.fstat(other).st_size == 100 and victim.read_bytes() == b"x" * 100
    finally:
        os.close(other)


def test_the_async_api_never_runs_the_saver_on_the_event_loop(tmp_path: Path) -> None:
    # ainvoke of real conversations: every put, write, read and list ran inline on the
    # loop (an fdatasync or a long decode stalled every other coroutine); now each runs
    # on a worker thread, as AsyncSqliteSaver's do, and alist gives what list gives
    import threading

    from tests.langgraph_graphs import chat_builder

    seen: dict[str, set[int]] = {}

    class Watched(CkptSaver):
        pass

    for name in ("put", "put_writes", "get_tuple", "list"):
        real = getattr(CkptSaver, name)

        def watched(self: Any, *a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            seen.setdefault(_name, set()).add(threading.get_ident())
            return _real(self, *a, **k)

        setattr(Watched, name, watched)

    async def main() -> tuple[int, list[Any], list[Any]]:
        loop_thread = threading.get_ident()
        saver = Watched(api.init_store(tmp_path / ".ckpt"))
        try:
            graph = chat_builder(turns=150, words=5).compile(checkpointer=saver)
            await asyncio.gather(
                *(graph.ainvoke({"messages": []}, {"configurable": {"thread_id": f"t{i}"}, "recursion_limit": 400}) for i in range(3))
            )
            cfg = {"configurable": {"thread_id": "t1"}}
            via_async = [t.config async for t in saver.alist(cfg)]  # more than one batch
            return loop_thread, via_async, [t.config for t in CkptSaver.list(saver, cfg)]  # not watched
        finally:
            saver.close()

    loop_thread, via_async, via_sync = asyncio.run(main())
    assert len(via_async) > 140 and via_async == via_sync
    assert set(seen) == {"put", "put_writes", "get_tuple", "list"}, seen
    assert all(loop_thread not in threads for threads in seen.values()), seen


def _conversation(saver: CkptSaver, thread: str, turns: int) -> list[Any]:
    from tests.langgraph_graphs import chat_builder

    graph = chat_builder(turns=turns, words=5).compile(checkpointer=saver)
    return graph.invoke({"messages": []}, {"configurable": {"thread_id": thread}})["messages"]  # type: ignore[no-any-return]


def test_a_thread_deleted_just_before_a_crash_stays_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the delete is journaled, then everything that stays is committed, which may start
    # a new journal: the delete record was not carried into it, so a crash before the
    # store's copies were removed brought the thread back
    import ckptcli.adapters.langgraph.saver as lg

    monkeypatch.setattr(lg, "ROTATE_BYTES", 1)  # every commit starts a new journal
    saver = open_saver(tmp_path / ".ckpt")
    _conversation(saver, "gone", 6)
    saver.flush()
    kept = _conversation(saver, "kept", 4)  # not committed yet: the delete's commit has work, and rotates
    monkeypatch.setattr(CkptSaver, "_delete_from_store", lambda self, *a: None)  # killed right here
    saver.delete_thread("gone")
    saver.abandon()
    monkeypatch.undo()
    again = open_saver(tmp_path / ".ckpt")
    try:
        assert again.get_tuple({"configurable": {"thread_id": "gone"}}) is None
        assert not [s for _c, s in api.list_checkpoints(again.store) if str(s.subject) == "agent:gone"]
        tup = again.get_tuple({"configurable": {"thread_id": "kept"}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == kept
    finally:
        again.close()


def test_a_thread_deleted_then_used_again_keeps_its_new_turns_after_a_crash(tmp_path: Path) -> None:
    # the journal's delete record, replayed after a crash, removed every checkpoint of the
    # thread the store held by then: the new conversation's too
    saver = open_saver(tmp_path / ".ckpt")
    _conversation(saver, "t", 6)
    saver.flush()
    saver.delete_thread("t")
    new = _conversation(saver, "t", 3)
    saver.flush()  # committed: in the store
    saver.abandon()  # a crash: the journal (with the delete record) is replayed on open
    again = open_saver(tmp_path / ".ckpt")
    try:
        tup = again.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == new
    finally:
        again.close()
