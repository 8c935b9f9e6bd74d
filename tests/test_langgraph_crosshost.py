"""Several hosts on one thread of a store on object storage (crosshost.py, hostdir.py):
a host's checkpoints that would fork a thread another host committed to are never
committed beside the other host's (dropped, with a warning naming the thread), whether
the other host got there before the check, between the check and the move of the ref,
or while the host was dead with them in its journal; a journal directory belongs to one
store (never a local store's own directory); a memory:// store's journal never comes back
into another process's store. Real LangGraph graphs, real processes (each its own
CKPT_HOST and journal directory) on the tests' S3 server, memory:// for races between
real threads."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.adapters.langgraph import ThreadForkWarning
from ckptcli.adapters.langgraph.hostdir import STORE_URL_FILE
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.errors import InvalidInputError, StoreNotFoundError
from tests.conftest import REPO
from tests.langgraph_graphs import ChatState, chain_builder, chat_message
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

FORKED = "was extended from another host"


@pytest.fixture(autouse=True)
def _own_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's state and cache directories of this test: nothing written to the real home."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _turn(saver: CkptSaver, thread: str, k: int) -> None:
    """One turn of a one-node chat: message k in, a reply out."""
    graph = chain_builder(ChatState, reply=lambda s: {"messages": [chat_message(len(s["messages"]) + 100)]}).compile(checkpointer=saver)
    graph.invoke({"messages": [chat_message(k)]}, {"configurable": {"thread_id": thread}})


def _chain(url: str, thread: str, jdir: Path) -> tuple[list[Any], int]:
    """The thread's root checkpoints as a new saver (another journal directory) reads
    them, and how many checkpoints have more than one child (a fork)."""
    with CkptSaver.open(url, journal_dir=jdir) as reader:
        tuples = [t for t in reader.list({"configurable": {"thread_id": thread}}) if not t.config["configurable"]["checkpoint_ns"]]
    parents = collections.Counter(t.parent_config["configurable"]["checkpoint_id"] for t in tuples if t.parent_config)
    return tuples, sum(1 for n in parents.values() if n > 1)


class _Gated(CkptSaver):
    """A saver whose commit waits at `gate` once it has read the heads of its threads:
    two of them committing at once both read the store before either moves a ref."""

    gate: threading.Barrier | None = None

    def _store_heads(self, threads: Sequence[str]) -> dict[str, bytes | None]:
        heads = super()._store_heads(threads)
        if self.gate is not None:
            self.gate.wait(timeout=60)
        return heads


def test_two_hosts_committing_one_thread_at_the_same_instant_never_fork_it(tmp_path: Path) -> None:
    """Both hosts read the thread's ref before either moves it: the check passes for
    both, and only the compare-and-swap of the ref tells them apart. The loser's
    checkpoints are removed again and dropped, with a warning; the thread has one line."""
    url = f"memory://race-{uuid.uuid4().hex[:12]}"
    opts: dict[str, Any] = {"commit_interval": 3600.0, "seal_idle": 0}
    a = _Gated.open(url, journal_dir=tmp_path / "host-a", **opts)
    b = _Gated.open(url, journal_dir=tmp_path / "host-b", **opts)
    try:
        _turn(a, "t", 0)
        a.flush()
        _turn(b, "t", 2)  # B takes the thread up at A's commit and extends it ...
        _turn(a, "t", 1)  # ... and so does A, from the same checkpoint
        a.gate = b.gate = threading.Barrier(2)
        errors: list[BaseException] = []

        def flush(saver: CkptSaver) -> None:
            try:
                saver.flush()
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        with pytest.warns(ThreadForkWarning, match="thread 't' was extended from another host"):
            runs = [threading.Thread(target=flush, args=(s,)) for s in (a, b)]
            for r in runs:
                r.start()
            for r in runs:
                r.join(timeout=120)
        a.gate = b.gate = None
        assert not errors, errors
        warned = [s for s in (a, b) if any(FORKED in w and "'t'" in w for w in s.store.warnings)]
        assert len(warned) == 1, "exactly one host lost the swap and said so"
        loser, winner = warned[0], (b if warned[0] is a else a)
        tip = winner.get_tuple({"configurable": {"thread_id": "t"}})
        assert tip is not None
        # the loser reads the thread as the winner left it
        assert loser.get_tuple({"configurable": {"thread_id": "t"}}) == tip
    finally:
        a.close()
        b.close()
    tuples, forks = _chain(url, "t", tmp_path / "reader")
    assert forks == 0, "no checkpoint of the thread has two children"
    assert len(tuples) == 6  # the first turn's three checkpoints and the winner's three
    assert api.verify(api.open_store(url), read_data=True).ok


def test_a_host_reading_another_thread_again_still_finds_the_other_hosts_commit_to_this_one(tmp_path: Path) -> None:
    """Host A extends thread x; host B commits to x and y; A reads y again (which lists
    every new manifest of the store, B's of x too): A's checkpoints of x still fork x and
    are not committed."""
    url = f"memory://known-{uuid.uuid4().hex[:12]}"
    opts: dict[str, Any] = {"commit_interval": 3600.0, "seal_idle": 0}
    a = CkptSaver.open(url, journal_dir=tmp_path / "host-a", **opts)
    b = CkptSaver.open(url, journal_dir=tmp_path / "host-b", **opts)
    try:
        _turn(a, "x", 0)
        _turn(a, "y", 0)
        a.flush()
        _turn(a, "x", 1)  # not committed yet
        _turn(b, "x", 2)
        _turn(b, "y", 2)
        b.flush()
        assert a.get_tuple({"configurable": {"thread_id": "y"}}) == b.get_tuple({"configurable": {"thread_id": "y"}})
        with pytest.warns(ThreadForkWarning, match="thread 'x'"):
            a.flush()
        assert a.get_tuple({"configurable": {"thread_id": "x"}}) == b.get_tuple({"configurable": {"thread_id": "x"}})
    finally:
        a.close()
        b.close()
    tuples, forks = _chain(url, "x", tmp_path / "reader")
    assert forks == 0 and len(tuples) == 6


GRAPH = """
import os, sys, time
sys.path.insert(0, {repo!r})
from langgraph.checkpoint.base.id import uuid6
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import ChatState, chain_builder, chat_message

url, thread, turns, jdir, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
opts = {{"commit_interval": float(os.environ["INTERVAL"])}} if os.environ.get("INTERVAL") else {{}}
saver = CkptSaver.open(url, journal_dir=jdir, **opts)
graph = chain_builder(ChatState, reply=lambda s: {{"messages": [chat_message(len(s["messages"]) + 10000)]}}).compile(checkpointer=saver)
while go != "-" and not os.path.exists(go):
    time.sleep(0.01)
for i in range(turns):
    graph.invoke({{"messages": [chat_message(os.getpid() * 1000 + i)]}}, {{"configurable": {{"thread_id": thread}}}})
    print("turn", i, flush=True)
if os.environ.get("BRANCH"):  # a run from the thread's first checkpoint (as LangGraph's time travel)
    first = list(saver.list({{"configurable": {{"thread_id": thread}}}}))[-1]
    made = saver.put(first.config, {{**first.checkpoint, "id": str(uuid6())}}, first.metadata, {{}})
    print("branch", made["configurable"]["checkpoint_id"], flush=True)
if os.environ.get("DIE"):
    os._exit(0)  # killed: what was put and not committed stays in the journal
saver.close()
"""


def _graph(url: str, thread: str, turns: int, jdir: Path, host: str, go: Path | None = None, **env: str) -> subprocess.Popen[str]:
    code = GRAPH.format(repo=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", code, url, thread, str(turns), str(jdir), str(go) if go is not None else "-"],
        env={**os.environ, "CKPT_HOST": host, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _done(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_two_hosts_running_one_thread_at_once_on_s3_lose_nothing_silently(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    """The attack of issue 16: two processes, their own CKPT_HOST and journal directory,
    run turns on one thread at the same time. The thread never forks; a host whose turns
    are not in it said so (a warning naming the thread) and its run failed with
    ThreadConflictError, or it ran after the other."""
    url, turns = f"{s3_bucket.url}/lg2j", 12
    assert _done(_graph(url, "th", 1, tmp_path / "JA", "hostA"))[0] == 0
    go = tmp_path / "go"
    procs = {host: _graph(url, "th", turns, tmp_path / f"J{host[-1]}", host, go) for host in ("hostA", "hostB")}
    go.touch()
    results = {host: _done(p) for host, p in procs.items()}
    tuples, forks = _chain(url, "th", tmp_path / "reader")
    assert forks == 0, f"the thread forked: {forks} checkpoint(s) with two children"
    steps = collections.Counter(t.metadata["step"] for t in tuples)
    assert all(n == 1 for n in steps.values()), "no step twice"
    final = tuples[0].checkpoint["channel_values"]["messages"]
    for host, (code, out, err) in results.items():
        pid = procs[host].pid
        mine = [m for m in final if m.id.startswith("m-") and int(m.id[2:]) // 1000 == pid]
        ran = out.count("turn ")
        if code != 0:
            assert "ThreadConflictError" in err and "'th'" in err, err[-2000:]
        if len(mine) < ran:  # turns of this host not in the thread: said, naming it
            assert "ThreadForkWarning" in err and "thread 'th' was extended from another host" in err, (host, err[-2000:])
    assert api.verify(api.open_store(url), read_data=True).ok


def test_a_journal_replayed_after_another_host_extended_the_thread_is_dropped_with_a_warning(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    """Host A commits 2 turns, puts 3 more and dies before committing them; host B runs 3
    turns from A's commit; A opens the store again with its journal: its 3 stale turns
    would fork the thread, so they are dropped with a warning, not committed."""
    url, ja, jb = f"{s3_bucket.url}/lgrec", tmp_path / "JA", tmp_path / "JB"
    assert _done(_graph(url, "th", 2, ja, "hostA"))[0] == 0
    died = _done(_graph(url, "th", 3, ja, "hostA", INTERVAL="1000", DIE="1"))
    assert died[0] == 0 and died[1].count("turn ") == 3, died[2]
    assert list((ja / "langgraph").glob("*.journal")), "the dead host's journal holds its 3 turns"
    b = _graph(url, "th", 3, jb, "hostB")
    code, _out, err = _done(b)
    assert code == 0, err
    expected, forks = _chain(url, "th", tmp_path / "reader")
    assert forks == 0 and len(expected) == 15
    with pytest.warns(ThreadForkWarning, match="thread 'th' was extended from another host"):
        again = CkptSaver.open(url, journal_dir=ja)
    try:
        assert any(FORKED in w for w in again.store.warnings)
        assert again.get_tuple({"configurable": {"thread_id": "th"}}) == expected[0]
    finally:
        again.close()
    assert not list((ja / "langgraph").glob("*.journal"))
    tuples, forks = _chain(url, "th", tmp_path / "reader2")
    assert forks == 0 and [t.config for t in tuples] == [t.config for t in expected], "nothing of A's stale turns was committed"
    assert api.verify(api.open_store(url), read_data=True).ok


def test_a_journal_replayed_with_no_other_host_in_between_is_committed(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    """The same death with no other host: every checkpoint the dead saver put comes back,
    a branch from an older checkpoint of the thread too (a run of this host's own that
    went back: the thread's head is not what it builds on, and yet no other host wrote)."""
    url, ja = f"{s3_bucket.url}/lgalone", tmp_path / "JA"
    assert _done(_graph(url, "th", 2, ja, "hostA"))[0] == 0
    died = _done(_graph(url, "th", 2, ja, "hostA", INTERVAL="1000", DIE="1", BRANCH="1"))
    assert died[0] == 0 and "branch " in died[1], died[2]
    branch = died[1].split("branch ")[1].split()[0]
    with CkptSaver.open(url, journal_dir=ja) as again:
        assert not any(FORKED in w for w in again.store.warnings)
    tuples, _forks = _chain(url, "th", tmp_path / "reader")
    assert len(tuples) == 4 * 3 + 1 and branch in {t.config["configurable"]["checkpoint_id"] for t in tuples}


@pytest.fixture(params=["memory", "s3"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return f"memory://lg-{uuid.uuid4().hex[:12]}"
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket.url}/lgcross"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_journal_dir_in_a_local_store_is_refused_and_nothing_is_written(url: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    with CkptSaver.open(local) as saver:
        _turn(saver, "t", 0)
    before = _files(local)
    for jdir in (local, local / "langgraph", local / "somewhere" / "new"):
        with pytest.raises(InvalidInputError, match="local ckpt store") as caught:
            CkptSaver.open(url, journal_dir=jdir)
        assert "\n" not in caught.value.message
    assert _files(local) == before and not (local / STORE_URL_FILE).exists()
    with pytest.raises(StoreNotFoundError):
        api.open_store(url)  # not made either


MEMORY = """
import os, sys
sys.path.insert(0, {repo!r})
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.test_langgraph_crosshost import _turn
opts = {{"journal_dir": sys.argv[2]}} if sys.argv[2] != "-" else {{}}
try:
    saver = CkptSaver.open("memory://mx", commit_interval=1000.0, **opts)
except Exception as exc:
    print("refused:", exc, flush=True)
    sys.exit(1)
print("threads:", sorted({{t.config["configurable"]["thread_id"] for t in saver.list(None)}}), flush=True)
if sys.argv[1] == "die":
    _turn(saver, "dead", 0)
    saver._journal.sync()
    os._exit(0)
saver.close()
"""


@pytest.mark.parametrize("jdir", ["default", "given"])
def test_a_memory_store_journal_never_comes_back_into_another_process(tmp_path: Path, jdir: str) -> None:
    given = str(tmp_path / "jd") if jdir == "given" else "-"

    def run(what: str) -> subprocess.CompletedProcess[str]:
        code = MEMORY.format(repo=str(REPO))
        return subprocess.run([sys.executable, "-c", code, what, given], capture_output=True, text=True, timeout=120)

    died = run("die")
    assert died.returncode == 0 and "threads: []" in died.stdout, died.stderr
    later = run("read")
    if jdir == "default":  # its own journal directory: an empty store, as a new memory store is
        assert later.returncode == 0 and "threads: []" in later.stdout, later.stdout + later.stderr
    else:  # the dead process's journal directory: not this store's
        assert later.returncode == 1 and "refused:" in later.stdout and "belongs to the store memory://mx" in later.stdout, later.stdout
    assert "dead" not in later.stdout


def test_one_host_deleting_pruning_copying_and_going_on_drops_nothing(tmp_path: Path) -> None:
    """What moves a thread's ref on this host (a delete, a prune, a copy into it) is not
    another host: the turns that follow are committed, nothing is dropped."""
    url = f"memory://alone-{uuid.uuid4().hex[:12]}"
    with CkptSaver.open(url, journal_dir=tmp_path / "J", commit_interval=3600.0, seal_idle=0) as saver:
        for thread in ("a", "b", "c"):
            _turn(saver, thread, 0)
        saver.flush()
        saver.prune(["a"], strategy="delete")
        saver.delete_thread("b")
        saver.copy_thread("c", "d")
        for thread in ("a", "b", "c", "d"):
            _turn(saver, thread, 1)
        saver.flush()
        saver.prune(["c"])  # keep_latest
        _turn(saver, "c", 2)
        saver.flush()
        assert not any(FORKED in w for w in saver.store.warnings), saver.store.warnings
    lengths = {t: len(_chain(url, t, tmp_path / f"reader-{t}")[0]) for t in ("a", "b", "c", "d")}
    assert lengths == {"a": 3, "b": 3, "c": 4, "d": 6}, lengths
