"""The LangGraph saver and memory store on a store on object storage: a real S3 server on
loopback (moto, tests/s3_server.py) and memory://. The journal and the thread leases are
on this host's disk (hostdir.py): the graph sees the same states as on InMemorySaver, a
reopened saver (a new process on S3) reads the same history, a SIGKILLed process's
acknowledged puts come back from its journal, the CLI sees the threads, and a second
"host" (a saver with its own journal directory) that extends a thread another one
extends is refused, never a silent fork."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ckptcli import api
from ckptcli.adapters.langgraph.hostdir import STORE_URL_FILE, default_dir
from ckptcli.adapters.langgraph.saver import CkptSaver, _lease_name, read_journal
from ckptcli.adapters.langgraph.store import CkptStore
from ckptcli.errors import InvalidInputError, StoreNotFoundError, ThreadConflictError
from tests.conftest import REPO
from tests.langgraph_graphs import ChatState, chain_builder, chat_builder, chat_message, support_builder
from tests.s3_server import SECRET, S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures
from tests.test_langgraph_graph import THREAD, _snapshot, scenario


@pytest.fixture(autouse=True)
def _own_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's state and cache directories of this test: nothing written to the real home."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(params=["memory", "s3"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return f"memory://lg-{uuid.uuid4().hex[:12]}"
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket.url}/agents"


HISTORY = """
import sys
sys.path.insert(0, {repo!r})
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import support_builder
from tests.test_langgraph_graph import THREAD, _snapshot
with CkptSaver.open({url!r}, journal_dir={jdir!r}) as saver:
    graph = support_builder().compile(checkpointer=saver)
    print(repr([_snapshot(s) for s in graph.get_state_history(THREAD)]))
"""


def test_a_graph_on_an_object_store_reads_as_on_inmemorysaver_and_again_after_reopening(url: str, tmp_path: Path) -> None:
    saver = CkptSaver.open(url)
    got = scenario(saver)
    root = saver._local_root
    saver.close()
    assert got == scenario(InMemorySaver())
    # the journal is on this host, one directory per store URL, which names its store
    assert root == default_dir(url) and root.is_relative_to(tmp_path / "state" / "ckpt" / "journals")
    named = (root / STORE_URL_FILE).read_text().strip()
    assert named == url if url.startswith("s3://") else named == f"{url} (in process {os.getpid()}." + named.rsplit(".", 1)[1]
    assert not list((root / "langgraph").glob("*.journal")), "closed: everything is in the object store"
    if url.startswith("memory://"):
        with CkptSaver.open(url, journal_dir=tmp_path / "elsewhere") as again:
            history = [_snapshot(s) for s in support_builder().compile(checkpointer=again).get_state_history(THREAD)]
        assert history == got["final_history"]
        return
    # a new process, another journal directory (another host, as far as the saver knows)
    code = HISTORY.format(repo=str(REPO), url=url, jdir=str(tmp_path / "host2"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(got["final_history"])
    assert SECRET not in out.stdout + out.stderr


CHILD = """
import sys
sys.path.insert(0, {repo!r})
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import chat_builder

class Reporting(CkptSaver):
    def put(self, *args, **kwargs):
        config = super().put(*args, **kwargs)
        print(config["configurable"]["checkpoint_id"], flush=True)  # only once put returned
        return config

saver = Reporting.open({url!r}, journal_dir={jdir!r}, commit_interval=30.0, seal_idle=0)
graph = chat_builder(100000, words=30).compile(checkpointer=saver)
graph.invoke({{"messages": []}}, {{"configurable": {{"thread_id": "crash"}}, "recursion_limit": 10**6}}, durability="sync")
"""


def test_a_sigkilled_process_puts_come_back_from_its_local_journal(s3_bucket: S3Bucket, tmp_path: Path, cli: Any) -> None:
    url, jdir = f"{s3_bucket.url}/crash", tmp_path / "journals"
    CkptSaver.open(url, journal_dir=jdir).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO), url=url, jdir=str(jdir))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ids: list[str] = []
    assert child.stdout is not None
    for line in child.stdout:
        ids.append(line.strip())
        if len(ids) >= 40:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    # nothing was committed (the commit interval is long): the puts are in the journal only
    assert json.loads(cli("--store", url, "ls", "--json").out) == []
    journals = list((jdir / "langgraph").glob("*.journal"))
    assert journals and any(r["op"] == "p" for r in read_journal(journals[0].read_bytes()).records)
    with CkptSaver.open(url, journal_dir=jdir) as saver:
        for cid in ids:
            tup = saver.get_tuple({"configurable": {"thread_id": "crash", "checkpoint_ns": "", "checkpoint_id": cid}})
            assert tup is not None, cid
            msgs = tup.checkpoint["channel_values"].get("messages", [])
            assert msgs == [chat_message(i, words=30) for i in range(len(msgs))]
    assert not list((jdir / "langgraph").glob("*.journal")), "replayed, committed, deleted"
    listed = json.loads(cli("--store", url, "ls", "--json").out)
    assert {c["subject"] for c in listed} == {"agent:crash"} and len(listed) >= len(ids)
    shown = cli("--store", url, "show", "agent:crash")
    assert shown.code == 0 and listed[0]["id"] in shown.out
    verified = cli("--store", url, "verify", "--read-data")
    assert verified.code == 0 and "no problems found" in verified.out, verified.err


def test_a_ckptstore_on_an_object_store_puts_gets_and_searches_as_inmemorystore(url: str, tmp_path: Path) -> None:
    ref = InMemoryStore()
    mine = CkptStore.open(url)
    for st in (ref, mine):
        st.put(("users", "u1"), "prefs", {"lang": "fr", "theme": "dark"})
        st.put(("users", "u1"), "name", {"first": "Ada"})
        st.put(("users", "u2"), "prefs", {"lang": "en"})
        st.delete(("users", "u1"), "name")
    assert mine.get(("users", "u1"), "prefs").value == ref.get(("users", "u1"), "prefs").value  # type: ignore[union-attr]
    assert mine.get(("users", "u1"), "name") is None

    def found(st: Any) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
        return [(i.namespace, i.key, i.value) for i in st.search(("users",), filter={"lang": "fr"})]

    assert found(mine) == found(ref) != []
    assert mine.list_namespaces(prefix=("users",)) == ref.list_namespaces(prefix=("users",))
    snap = mine.compact()  # a snapshot: a checkpoint in the object store
    mine.close()
    assert snap in {cid for cid, _summary in api.list_checkpoints(api.open_store(url))}
    again = CkptStore.open(url)
    try:
        assert found(again) == found(ref)
    finally:
        again.close()


def test_journal_dir_belongs_to_one_store_and_never_names_a_secret(tmp_path: Path) -> None:
    url = f"memory://lg-{uuid.uuid4().hex[:12]}"
    jdir = tmp_path / "j"
    CkptSaver.open(url, journal_dir=jdir).close()
    with pytest.raises(InvalidInputError, match="belongs to the store memory://"):
        CkptSaver.open(f"memory://other-{uuid.uuid4().hex[:8]}", journal_dir=jdir)
    with pytest.raises(InvalidInputError, match="journal_dir is for a store on object storage"):
        CkptSaver.open(tmp_path / "local", journal_dir=jdir)
    # one directory per store, whatever secret its URL carries, and none in the path
    assert default_dir("s3://b/p?token=one") == default_dir("s3://b/p?token=two") != default_dir("s3://b/q")
    assert "one" not in str(default_dir("s3://b/p?token=one"))


def _turn(saver: CkptSaver, k: int) -> None:
    """One turn of a one-node chat on thread "shared": message k in, message k+1 out (its
    text depends only on how many messages the thread had)."""
    graph = chain_builder(ChatState, reply=lambda s: {"messages": [chat_message(len(s["messages"]) + 100)]}).compile(checkpointer=saver)
    graph.invoke({"messages": [chat_message(k)]}, {"configurable": {"thread_id": "shared"}})


def test_a_second_host_extending_a_thread_another_host_extends_is_refused_not_forked(url: str, tmp_path: Path) -> None:
    opts: dict[str, Any] = {"commit_interval": 3600.0, "seal_idle": 0}
    a = CkptSaver.open(url, journal_dir=tmp_path / "host-a", **opts)
    b = CkptSaver.open(url, journal_dir=tmp_path / "host-b", **opts)
    try:
        _turn(a, 0)
        a.flush()
        # B opened before A's commit: it reads the thread from the store when it takes it up
        assert b.get_tuple({"configurable": {"thread_id": "shared"}}) == a.get_tuple({"configurable": {"thread_id": "shared"}})
        b_first = b.get_tuple({"configurable": {"thread_id": "shared"}})
        assert b_first is not None
        _turn(b, 2)  # B extends it, not committed yet ...
        b_tip = b.get_tuple({"configurable": {"thread_id": "shared"}})
        _turn(a, 1)  # ... while A extends it too, and commits first
        a.flush()
        b.flush()  # B's checkpoints would fork the thread: not committed
        assert any("extended from another host" in w for w in b.store.warnings)
        assert b_tip is not None
        with pytest.raises(ThreadConflictError, match="extended by another process"):  # a run going on from what was dropped
            b.put(b_tip.config, {**b_tip.checkpoint, "id": str(uuid6())}, b_tip.metadata, {})
        # a new run reads the thread as it is now: A's
        assert b.get_tuple({"configurable": {"thread_id": "shared"}}) == a.get_tuple({"configurable": {"thread_id": "shared"}})
    finally:
        a.close()
        b.close()
    assert api.verify(api.open_store(url), read_data=True).ok
    with CkptSaver.open(url, journal_dir=tmp_path / "host-b") as again:  # nothing of B's dropped puts comes back
        tuples = [t for t in again.list({"configurable": {"thread_id": "shared"}}) if not t.config["configurable"]["checkpoint_ns"]]
        parents = [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None for t in tuples]
        assert len(parents) == len(set(parents)), "no checkpoint has two children: the thread did not fork"
        got = again.get_tuple({"configurable": {"thread_id": "shared"}})
        assert got is not None and [m.id for m in got.checkpoint["channel_values"]["messages"]] == ["m-0", "m-101", "m-1", "m-103"]


def test_the_default_journal_directory_follows_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    journals = tmp_path / "home" / ".local" / "state" / "ckpt" / "journals"
    assert default_dir("s3://b/x").parent == journals
    assert default_dir("memory://x").parent.parent == journals  # in this process's own directory there


def test_each_host_has_its_own_memory_store_log_and_snapshot_branch(url: str, tmp_path: Path) -> None:
    a = CkptStore.open(url, journal_dir=tmp_path / "host-a")
    b = CkptStore.open(url, journal_dir=tmp_path / "host-b")
    try:
        a.put(("notes",), "a", {"by": "a"})
        b.put(("notes",), "b", {"by": "b"})
        snaps = {a.compact(), b.compact()}
    finally:
        a.close()
        b.close()
    store = api.open_store(url)
    branches = {name: cid for name, cid in store.refs(prefix="refs/branches").items()}
    assert len(branches) == 2 and set(branches.values()) == snaps, branches  # neither host's snapshot is left to prune
    for host, key in (("host-a", "a"), ("host-b", "b")):
        with CkptStore.open(url, journal_dir=tmp_path / host) as again:
            assert [i.key for i in again.search(("notes",))] == [key]


def test_ckpt_prune_langgraph_ttl_on_an_object_store_leaves_a_thread_a_saver_on_this_host_holds(cli: Any) -> None:
    """`ckpt prune --langgraph-ttl` on an object store takes the leases of the savers of
    this host (the URL's default journal directory), as it does beside a local store."""
    url = f"memory://lg-{uuid.uuid4().hex[:12]}"
    two_days = 48 * 3600 * 10**9
    with CkptSaver.open(url, clock=lambda: time.time_ns() - two_days) as old:
        graph = chain_builder(ChatState, reply=lambda s: {"messages": [chat_message(len(s["messages"]))]}).compile(checkpointer=old)
        graph.invoke({"messages": [chat_message(0)]}, {"configurable": {"thread_id": "old"}})
    lease = default_dir(url) / "langgraph" / "threads" / _lease_name("old")
    fd = os.open(lease, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a saver of this host holds it
        res = cli("prune", "--langgraph-ttl", "1d", "--json", "--store", url)
        assert res.code == 0, res.err
        assert json.loads(res.out)["in_use"] == ["agent:old"] and json.loads(res.out)["removed"] == 0
    finally:
        os.close(fd)
    res = cli("prune", "--langgraph-ttl", "1d", "--store", url)
    assert res.code == 0 and "expired agent:old" in res.out, res.out + res.err


def test_doctor_on_an_object_store_warns_of_a_journal_a_sigkilled_saver_left_on_this_host(s3_bucket: S3Bucket, cli: Any) -> None:
    url = f"{s3_bucket.url}/doctored"
    CkptSaver.open(url).close()
    # the saver uses this host's default journal directory of the store (XDG_STATE_HOME is tmp_path's)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO), url=url, jdir=None)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    for n, _line in enumerate(child.stdout, 1):
        if n >= 5:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    jdir = default_dir(url) / "langgraph"
    assert list(jdir.glob("*.journal")), "the killed saver left its journal"
    got = cli("--store", url, "doctor", "--json")
    assert got.code == 0, got.err  # warnings alone exit 0 (docs/exit-codes.md)
    checks = json.loads(got.out)["checks"]
    journals = [c for c in checks if c["name"] == "langgraph journals"]
    assert any(c["status"] == "ok" and str(default_dir(url)) in c["detail"] for c in journals), journals
    left = [c for c in journals if c["status"] == "warn" and "left by a saver that is gone" in c["detail"]]
    assert len(left) == 1 and "put(s) not in the store" in left[0]["detail"], journals
    assert any(c["name"] == "langgraph thread leases" for c in checks), checks
    # the saver replays it; then doctor finds no journal left
    with CkptSaver.open(url):
        pass
    again = json.loads(cli("--store", url, "doctor", "--json").out)["checks"]
    assert not [c for c in again if c["status"] != "ok" and c["name"].startswith("langgraph")], again


def test_doctor_journal_dir_names_the_journal_directory_the_application_gave(s3_bucket: S3Bucket, tmp_path: Path, cli: Any) -> None:
    url, jd = f"{s3_bucket.url}/given", tmp_path / "app-journal"
    with CkptSaver.open(url, journal_dir=jd, commit_interval=30.0) as saver:
        graph = chat_builder(3, words=3).compile(checkpointer=saver)
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}}, durability="sync")
        got = cli("--store", url, "doctor", "--journal-dir", jd, "--json")
        assert got.code == 0, got.err
        journals = [c for c in json.loads(got.out)["checks"] if c["name"] == "langgraph journals"]
        assert [c["status"] for c in journals] == ["ok"] and f"1 journal(s) in {jd}" in journals[0]["detail"], journals
        # the default directory of the store on this host has nothing: doctor says where it looked
        default = json.loads(cli("--store", url, "doctor", "--json").out)["checks"]
        assert [c["detail"] for c in default if c["name"] == "langgraph journals"] == [
            f"none in {default_dir(url)}: no LangGraph saver on this host has used this store"
        ]
    local = tmp_path / "local"
    assert cli("--store", local, "init").code == 0
    refused = cli("--store", local, "doctor", "--journal-dir", jd)
    assert refused.code == 1 and "--journal-dir is for a store on object storage" in refused.out, refused.out


@pytest.mark.parametrize("opener", [CkptSaver.open, CkptStore.open])
def test_open_refuses_a_bad_option_before_it_makes_the_store_or_a_journal_directory(opener: Any, tmp_path: Path) -> None:
    local, jd = tmp_path / "local", tmp_path / "jd"
    with pytest.raises(InvalidInputError, match="journal_dir is for a store on object storage"):
        opener(local, journal_dir=jd)
    with pytest.raises(InvalidInputError, match="fsync must be one of"):
        opener(local, fsync="sometimes")
    with pytest.raises(TypeError):
        opener(local, no_such_option=1)
    assert not local.exists() and not jd.exists()
    url = f"memory://refused-{uuid.uuid4().hex[:12]}"
    with pytest.raises(InvalidInputError, match="fsync must be one of"):
        opener(url, fsync="sometimes")
    with pytest.raises(StoreNotFoundError):
        api.open_store(url)
    assert not default_dir(url).exists() and not (tmp_path / "state").exists()


def test_saver_open_refuses_a_bad_trust_identity_before_it_makes_anything(tmp_path: Path) -> None:
    url = f"memory://refused-{uuid.uuid4().hex[:12]}"
    for where in (tmp_path / "local", url):
        with pytest.raises(InvalidInputError, match="trust_identity must be"):
            CkptSaver.open(where, trust_identity="maybe")
    assert not (tmp_path / "local").exists() and not (tmp_path / "state").exists()
    with pytest.raises(StoreNotFoundError):
        api.open_store(url)
