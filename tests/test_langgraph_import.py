"""`ckpt import langgraph DB`: a SqliteSaver database written by real LangGraph code,
imported; every checkpoint then reads back through CkptSaver exactly as LangGraph loads
it from the database (values, metadata, parent, pending writes); --thread; parents;
importing again; carrying on an imported thread; damaged and foreign files refused in
one line with their exit code."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from ckptcli import api
from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.importer import import_sqlite
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.errors import ExitCode
from tests.conftest import run_ckpt
from tests.langgraph_graphs import ask, chat_builder, support_builder


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Histories written by LangGraph itself into SqliteSaver: an interrupt resumed, one
    left waiting, an update_state fork with a subgraph, and a 40-message conversation."""
    db = tmp_path_factory.mktemp("sqlite") / "checkpoints.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = support_builder().compile(checkpointer=saver)
    t1 = {"configurable": {"thread_id": "support-1"}}
    graph.invoke(ask("A-1001", 0), t1)
    graph.invoke(Command(resume="yes"), t1)
    first_agent = next(s for s in reversed(list(graph.get_state_history(t1))) if s.next == ("agent",))
    forked = graph.update_state(first_agent.config, {"messages": [HumanMessage(content="where is my order B-2002", id="human-0")]})
    graph.invoke(None, forked)
    graph.invoke(ask("B-2002", 0), {"configurable": {"thread_id": "support 2/waiting"}})
    chat_builder(40).compile(checkpointer=saver).invoke({"messages": []}, {"configurable": {"thread_id": "chat"}, "recursion_limit": 60})
    conn.close()
    return db


@pytest.fixture
def sqlite_saver(sqlite_db: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(str(sqlite_db), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def _same_tuple(mine: Any, theirs: Any) -> None:
    assert mine is not None, theirs.config
    assert mine.checkpoint == theirs.checkpoint
    assert mine.metadata == theirs.metadata
    assert (mine.parent_config or {}).get("configurable", {}).get("checkpoint_id") == (theirs.parent_config or {}).get(
        "configurable", {}
    ).get("checkpoint_id")
    assert mine.pending_writes == theirs.pending_writes


def test_every_checkpoint_reads_back_as_langgraph_loads_it(sqlite_db: Path, sqlite_saver: SqliteSaver, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    api.init_store(store)
    res = cli("import", "langgraph", sqlite_db, "--store", store, "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    theirs = list(sqlite_saver.list(None))
    assert report["checkpoints"] == len(theirs) and report["already_present"] == 0
    assert sorted(report["threads"]) == ["chat", "support 2/waiting", "support-1"]
    assert report["writes"] == sqlite_saver.conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    assert any(t.config["configurable"]["checkpoint_ns"] for t in theirs), "subgraph checkpoints too"
    saver = CkptSaver.open(store)
    try:
        for tup in theirs:
            _same_tuple(saver.get_tuple(tup.config), tup)
        for thread in report["threads"]:
            cfg = {"configurable": {"thread_id": thread}}
            _same_tuple(saver.get_tuple(cfg), sqlite_saver.get_tuple(cfg))
            assert [t.config for t in saver.list(cfg)] == [t.config for t in sqlite_saver.list(cfg)]
    finally:
        saver.close()
    assert api.verify(api.open_store(store), read_data=True).ok


def test_parents_subjects_and_times_are_kept(sqlite_db: Path, sqlite_saver: SqliteSaver, tmp_path: Path) -> None:
    store = api.init_store(tmp_path / ".ckpt")
    import_sqlite(store, sqlite_db)
    by_lg = {}
    for cid in store.manifest_ids():
        m = store.manifest(cid)
        key = layout.key_of(m.subject, m.labels)
        assert key is not None
        by_lg[(key.thread_id, key.ns, key.checkpoint_id)] = (cid, m)
    for tup in sqlite_saver.list(None):
        conf = tup.config["configurable"]
        cid, m = by_lg[(conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"])]
        assert m.subject == layout.subject_for(conf["thread_id"])
        if tup.parent_config is None:
            assert m.parents == []
        else:
            parent = tup.parent_config["configurable"]["checkpoint_id"]
            assert m.parents == [by_lg[(conf["thread_id"], conf["checkpoint_ns"], parent)][0]]
    # a thread id that is not a subject name keeps its own in a label
    waiting = [m for _c, m in by_lg.values() if m.labels.get(layout.LABEL_THREAD) == "support 2/waiting"]
    assert waiting and all(m.subject.name.startswith("support-2-waiting-") for m in waiting)


def test_thread_filter_and_importing_again(sqlite_db: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    api.init_store(store)
    res = cli("import", "langgraph", sqlite_db, "--thread", "chat", "--store", store)
    assert res.code == 0 and "imported 42 checkpoints" in res.out, res.out
    subjects = {c["subject"] for c in json.loads(cli("ls", "--store", store, "--json").out)}
    assert subjects == {"agent:chat"}
    again = json.loads(cli("import", "langgraph", sqlite_db, "--store", store, "--json").out)
    assert again["already_present"] == 42 and again["checkpoints"] > 0
    manifests = len(api.open_store(store).manifest_ids())
    third = json.loads(cli("import", "langgraph", sqlite_db, "--store", store, "--json").out)
    assert third["checkpoints"] == 0 and len(api.open_store(store).manifest_ids()) == manifests, "nothing written again"
    assert third["writes"] == 0, "the writes the store has already are not counted as imported"
    fourth = cli("import", "langgraph", sqlite_db, "--store", store)
    assert fourth.code == 0 and fourth.out.startswith(
        f"nothing new to import: {store} has the {third['already_present']} checkpoints of "
    ), fourth.out
    assert cli("import", "langgraph", sqlite_db, "--thread", "no-such-thread", "--store", store).code == ExitCode.NOT_FOUND


def test_an_imported_thread_carries_on_in_langgraph(sqlite_db: Path, tmp_path: Path) -> None:
    store = api.init_store(tmp_path / ".ckpt")
    import_sqlite(store, sqlite_db, thread="support 2/waiting")
    saver = CkptSaver.open(tmp_path / ".ckpt")
    try:
        graph = support_builder().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "support 2/waiting"}}
        assert graph.get_state(cfg).next == ("approve",)
        done = graph.invoke(Command(resume="yes"), cfg)
        assert done["messages"][-1].content == "Your order is delivered."
        chat = chat_builder(50)
    finally:
        saver.close()
    del chat


def test_a_large_history_imports_in_o_new_data(tmp_path: Path) -> None:
    db = tmp_path / "big.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    chat_builder(300, words=60).compile(checkpointer=SqliteSaver(conn)).invoke(
        {"messages": []}, {"configurable": {"thread_id": "big"}, "recursion_limit": 400}
    )
    conn.close()
    store = api.init_store(tmp_path / ".ckpt")
    report = import_sqlite(store, db)
    assert report.checkpoints == 302
    stored = sum(f.stat().st_size for f in (tmp_path / ".ckpt").rglob("*") if f.is_file())
    assert stored < db.stat().st_size / 10


@pytest.mark.parametrize(
    ("make", "code", "words"),
    [
        (lambda p: p.write_bytes(bytes(range(256)) * 64), ExitCode.CORRUPT, "not a SQLite database"),
        (lambda p: _foreign(p), ExitCode.INVALID_INPUT, "not a LangGraph SqliteSaver"),
        (lambda p: _truncated(p), ExitCode.CORRUPT, "damaged"),
        (lambda p: None, ExitCode.NOT_FOUND, "does not exist"),
    ],
    ids=["random-bytes", "foreign-sqlite", "truncated-sqlite", "missing"],
)
def test_bad_databases_get_one_line_and_an_exit_code(
    tmp_path: Path, make: Any, code: int, words: str, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.id == "truncated-sqlite":
        src = request.getfixturevalue("sqlite_db")
        shutil.copy(src, tmp_path / "db.sqlite")
    store = tmp_path / ".ckpt"
    api.init_store(store)
    make(tmp_path / "db.sqlite")
    proc = run_ckpt("import", "langgraph", tmp_path / "db.sqlite", "--store", store)
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert words in err
    assert api.open_store(store).manifest_ids() == [], "nothing written"


def _foreign(path: Path) -> None:
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.commit()
    conn.close()


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def test_old_json_checkpoints_are_read_too(tmp_path: Path) -> None:
    """Databases from before LangGraph serialized checkpoints as msgpack hold JSON."""
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    SqliteSaver(conn).setup()
    checkpoint = {
        "v": 1, "id": "1ef4f797-8335-6428-8001-8a1503f9b875", "ts": "2024-07-31T20:14:19.804150+00:00",
        "channel_values": {"answer": 42, "note": "old", "__start__": {"x": [1, 2.5]}},
        "channel_versions": {"answer": 2, "note": 1, "__start__": 1}, "versions_seen": {"node": {"note": 1}}, "pending_sends": [],
    }  # fmt: skip
    conn.execute(
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata) "
        "VALUES (?, '', ?, NULL, 'json', ?, ?)",
        ("old", checkpoint["id"], json.dumps(checkpoint).encode(), json.dumps({"source": "loop", "step": 3, "writes": None}).encode()),
    )
    conn.commit()
    store = api.init_store(tmp_path / ".ckpt")
    import_sqlite(store, db)
    theirs = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": "old"}})
    saver = CkptSaver.open(tmp_path / ".ckpt")
    try:
        _same_tuple(saver.get_tuple({"configurable": {"thread_id": "old"}}), theirs)
    finally:
        saver.close()
        conn.close()
    saver = CkptSaver.open(tmp_path / ".ckpt")  # and from the store
    try:
        _same_tuple(saver.get_tuple({"configurable": {"thread_id": "old"}}), theirs)
    finally:
        saver.close()
