"""CkptSaver in production shapes (issue 13): several long-lived worker processes serving
one thread (real subprocesses, each its own saver on one store, driven turn by turn over
pipes) against SqliteSaver doing the same; a writer that would fork a thread is refused;
and nodes that edit list items in place, read back in-process and from a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from ckptcli.adapters.langgraph.saver import CkptSaver
from tests import stress

REPO = Path(__file__).resolve().parent.parent


class Worker:
    """One `tests.langgraph_worker` process."""

    def __init__(self, kind: str, path: Path, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.langgraph_worker", kind, str(path), *options],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.read() == {"ready": True}

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker exited with {self.proc.wait()}"
        return json.loads(line)

    def call(self, **cmd: Any) -> Any:
        self.send(**cmd)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send(op="quit")
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # a test that failed left it waiting in a node
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


def _workers(kind: str, path: Path, n: int) -> list[Worker]:
    return [Worker(kind, path) for _ in range(n)]


def _alternate(workers: list[Worker], turns: int) -> tuple[list[Any], list[Any]]:
    """`turns` turns on thread "t", worker i % len(workers) taking turn i (two threads:
    "t" and, in between, "u" on the other worker); the answers and each worker's view of
    the history at the end."""
    answers = []
    for i in range(turns):
        w = workers[i % len(workers)]
        answers.append(w.call(op="turn", thread="t", text=f"q{i}"))
        answers.append(workers[(i + 1) % len(workers)].call(op="turn", thread="u", text=f"r{i}"))
    return answers, [w.call(op="history", thread=t) for w in workers for t in ("t", "u")]


def test_two_workers_alternating_turns_give_sqlitesavers_history(tmp_path: Path) -> None:
    CkptSaver.open(tmp_path / ".ckpt").close()
    results = {}
    for kind, path in (("ckpt", tmp_path / ".ckpt"), ("sqlite", tmp_path / "db.sqlite")):
        ws = _workers(kind, path, 2)
        try:
            results[kind] = _alternate(ws, 6)
        finally:
            for w in ws:
                w.close()
    answers, histories = results["ckpt"]
    assert all(a["ok"] for a in answers), answers
    assert answers[-2]["messages"][-2:] == ["q5", "echo q5 after 11"]  # every turn saw all before it
    assert results["ckpt"] == results["sqlite"]
    # and a new process reads the same from the store
    w = Worker("ckpt", tmp_path / ".ckpt")
    try:
        assert [w.call(op="history", thread=t) for t in ("t", "u")] == histories[:2]
    finally:
        w.close()


def test_a_writer_whose_read_is_stale_is_refused_and_the_thread_never_forks(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    a, b, c = _workers("ckpt", store, 3)
    try:
        assert a.call(op="turn", thread="t", text="q0")["ok"]
        assert b.call(op="turn", thread="t", text="q1")["ok"]
        # a's turn reads the thread and waits in its node; c runs a whole turn meanwhile
        a.send(op="turn", thread="t", text="hold-a", durability="sync")
        assert a.read() == {"in_node": True}
        got = c.call(op="turn", thread="t", text="q2")
        assert got["ok"], got
        assert got["messages"][-3:] == ["hold-a", "q2", "echo q2 after 6"]  # c saw a's turn so far
        a.send(go=True)
        refused = a.read()
        assert refused["ok"] is False and refused["error"] == "ThreadConflictError", refused
        assert "'t'" in refused["message"] and "another process" in refused["message"] and "again" in refused["message"]
        # a carries on with a new turn that sees everything
        again = a.call(op="turn", thread="t", text="q3")
        assert again["ok"] and again["messages"][-2:] == ["q3", "echo q3 after 8"], again
        hist = b.call(op="history", thread="t")["history"]
    finally:
        for w in (a, b, c):
            w.close()
    # one line of history: each checkpoint the parent of the one before it, no branch
    assert [h["parent"] for h in hist] == [*range(1, len(hist)), None]
    assert [m[1] for m in hist[0]["messages"]] == [
        "q0",
        "echo q0 after 1",
        "q1",
        "echo q1 after 3",
        "hold-a",
        "q2",
        "echo q2 after 6",
        "q3",
        "echo q3 after 8",
    ]


def test_a_thread_another_worker_deleted_is_gone_for_every_worker(tmp_path: Path) -> None:
    """delete_thread in one worker: a worker that served the thread before reads it as
    deleted and starts it afresh (as SqliteSaver's workers do), never from its memory."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    a, b = _workers("ckpt", store, 2)
    try:
        assert a.call(op="turn", thread="t", text="q0")["ok"]
        assert b.call(op="turn", thread="t", text="q1")["messages"][-2:] == ["q1", "echo q1 after 3"]
        assert a.call(op="history", thread="t")["history"]  # a holds the thread in memory now
        assert b.call(op="delete", thread="t") == {"ok": True}
        assert a.call(op="history", thread="t") == {"ok": True, "history": []}
        fresh = a.call(op="turn", thread="t", text="q2")
        assert fresh["messages"] == ["q2", "echo q2 after 1"], fresh
        assert len(b.call(op="history", thread="t")["history"]) == len(a.call(op="history", thread="t")["history"])
    finally:
        for w in (a, b):
            w.close()


def test_a_delete_in_another_worker_leaves_the_objects_a_live_saver_names_again(tmp_path: Path) -> None:
    """Worker b deletes a thread while worker a is alive; a then writes the same
    messages on another thread. a remembers that the store has those messages' objects
    and names them without writing them again: the delete must have left them (it
    removed them, and the store was damaged: `ckpt verify` named the missing objects)."""
    from ckptcli.api import open_store
    from ckptcli.store import prune
    from ckptcli.store import verify as integrity

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    a, b = _workers("ckpt", store, 2)
    text = "a long question " * 200  # a message of its own object, not inline
    try:
        assert a.call(op="turn", thread="t", text=text)["ok"]
        assert b.call(op="delete", thread="t") == {"ok": True}
        assert a.call(op="turn", thread="u", text=text)["ok"]
    finally:
        for w in (a, b):
            w.close()
    st = open_store(store)
    report = integrity.verify_store(st, None, read_data=True)
    assert report.ok, [str(p) for p in report.problems][:3]
    saver = CkptSaver.open(store)
    try:
        got = saver.get_tuple({"configurable": {"thread_id": "u"}})
        assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]] == [text, f"echo {text} after 1"]
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    finally:
        saver.close()
    # a delete leaves the objects to the next collection; with no other saver alive,
    # `ckpt prune` (any policy) takes those nothing needs
    before = len(open_store(store).index())
    saver = CkptSaver.open(store)
    try:
        saver.delete_thread("u")
    finally:
        saver.close()
    assert len(open_store(store).index()) == before
    assert integrity.verify_store(open_store(store), None, read_data=True).ok
    prune.prune(open_store(store), prune.Policy(keep_last=100))
    after = open_store(store)
    assert len(after.index()) < before // 2, (before, len(after.index()))
    assert integrity.verify_store(after, None, read_data=True).ok


def test_copy_thread_copies_what_another_worker_wrote(tmp_path: Path) -> None:
    """copy_thread in a worker whose view of the thread is old copies the thread as it
    is in the store, with the other worker's turns."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    a, b = _workers("ckpt", store, 2)
    try:
        assert b.call(op="turn", thread="t", text="q0")["ok"]
        assert a.call(op="turn", thread="t", text="q1")["ok"]  # b's memory of "t" is one turn old
        assert b.call(op="copy", thread="t", to="c") == {"ok": True}
        copied = a.call(op="history", thread="c")["history"]
        assert copied == a.call(op="history", thread="t")["history"]
        assert [m[1] for m in copied[0]["messages"]] == ["q0", "echo q0 after 1", "q1", "echo q1 after 3"]
    finally:
        for w in (a, b):
            w.close()


# -- defect 3: list items edited in place ------------------------------------------------------
class Todos(TypedDict):
    todos: list[dict[str, Any]]
    messages: list[AnyMessage]


def _todo_graph() -> Any:
    def plan(state: Todos) -> dict[str, Any]:
        todos = [{"title": f"task {i}", "done": False, "notes": []} for i in range(3)]
        return {"todos": todos, "messages": [HumanMessage(content="plan", id="h1"), AIMessage(content="draft", id="a1")]}

    def work(state: Todos) -> dict[str, Any]:
        todos = state["todos"]
        todos[0]["done"] = True  # the same list, its item edited in place
        todos[1]["notes"].append("deep edit")
        msgs = list(state["messages"])  # a new list of the same message objects...
        msgs[1].content = "final"  # ...one edited in place
        return {"todos": todos, "messages": msgs}

    def more(state: Todos) -> dict[str, Any]:
        todos = state["todos"]
        todos[2]["done"] = True
        todos.append({"title": "task 3", "done": False, "notes": []})
        return {"todos": todos}

    b = StateGraph(Todos)
    for name, fn in (("plan", plan), ("work", work), ("more", more)):
        b.add_node(name, fn)
    b.add_edge(START, "plan")
    b.add_edge("plan", "work")
    b.add_edge("work", "more")
    b.add_edge("more", END)
    return b


def _plain(values: dict[str, Any]) -> Any:
    return json.loads(json.dumps(values, default=lambda m: [type(m).__name__, m.content]))


def _history(graph: Any) -> list[Any]:
    return [_plain(s.values) for s in graph.get_state_history({"configurable": {"thread_id": "todo"}})]


@pytest.mark.parametrize("trust_identity", [True, False])
def test_items_edited_in_place_read_back_as_invoke_returned_them(tmp_path: Path, trust_identity: bool) -> None:
    cfg = {"configurable": {"thread_id": "todo"}}
    reference = _todo_graph().compile(checkpointer=InMemorySaver())
    # durability="sync": each checkpoint is put before the next node runs (with "async",
    # a node editing in place races the put of the step before, with any saver)
    expected = _plain(reference.invoke({}, cfg, durability="sync"))
    expected_history = _history(reference)
    saver = CkptSaver.open(tmp_path / ".ckpt", trust_identity=trust_identity)
    graph = _todo_graph().compile(checkpointer=saver)
    try:
        out = _plain(graph.invoke({}, cfg, durability="sync"))
        assert out == expected and out["todos"][0]["done"] and out["messages"][1][1] == "final"
        assert _plain(graph.get_state(cfg).values) == expected
        assert _history(graph) == expected_history
    finally:
        saver.close()
    code = (
        "import json, sys; from ckptcli.adapters.langgraph.saver import CkptSaver; "
        "from tests.test_langgraph_threads import _todo_graph, _history\n"
        f"s = CkptSaver.open({str(tmp_path / '.ckpt')!r}); print(json.dumps(_history(_todo_graph().compile(checkpointer=s)))); s.close()"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(run.stdout) == expected_history


def test_trust_identity_takes_three_values(tmp_path: Path) -> None:
    from ckptcli.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="trust_identity"):
        CkptSaver.open(tmp_path / ".ckpt", trust_identity="sometimes")
    CkptSaver.open(tmp_path / ".ckpt", trust_identity="unchecked").close()


def test_fifos_among_the_journals_and_leases_do_not_block_opening_the_store(tmp_path: Path) -> None:
    """A FIFO named as a journal or as a lease, or a directory in place of a lease, is
    skipped (`ckpt doctor` names it): opening the store neither hangs (the subprocess's
    timeout makes a hang a failure here) nor fails."""
    import os

    from tests.conftest import REPO

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    os.mkfifo(store / "langgraph" / "x.journal")
    os.mkfifo(store / "langgraph" / "threads" / "fifo1")
    os.mkdir(store / "langgraph" / "threads" / ("0" * 32))
    code = (
        "import sys; from ckptcli.adapters.langgraph.saver import CkptSaver\n"
        "with CkptSaver.open(sys.argv[1]) as s: s.put({'configurable': {'thread_id': 't', 'checkpoint_ns': ''}}, "
        "{'v': 1, 'id': '1', 'ts': '', 'channel_values': {}, 'channel_versions': {}, 'versions_seen': {}}, {}, {})\n"
        "print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, timeout=20, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == b"ok", r.stderr.decode()[-500:]


def test_a_thread_whose_lease_is_a_fifo_is_refused_in_one_line_and_others_work(tmp_path: Path) -> None:
    """Its lease a FIFO: the put raised a bare OSError (Illegal seek)."""
    import os

    from ckptcli.adapters.langgraph.leases import lease_name
    from ckptcli.errors import StoreIOError

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    os.mkfifo(store / "langgraph" / "threads" / lease_name("t"))
    cp = {"v": 1, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
    with CkptSaver.open(store) as saver:
        with pytest.raises(StoreIOError, match="is not a regular file"):
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {}, {})  # type: ignore[arg-type]
        saver.put({"configurable": {"thread_id": "u", "checkpoint_ns": ""}}, cp, {}, {})  # type: ignore[arg-type]


def test_a_fifo_planted_as_a_hand_over_request_makes_no_wait_past_lease_timeout(tmp_path: Path) -> None:
    """Opening the request to hand a thread over blocked forever on a FIFO (no reader):
    a saver waiting for a thread hung, whatever its lease_timeout."""
    import os
    import threading

    from ckptcli.adapters.langgraph.leases import lease_name
    from ckptcli.errors import LockError

    store = tmp_path / ".ckpt"
    holder = CkptSaver.open(store, commit_interval=3600, seal_idle=0)
    cp = {"v": 1, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
    holder.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {}, {})  # type: ignore[arg-type]
    os.mkfifo(store / "langgraph" / "want" / lease_name("t"))
    waiter = CkptSaver.open(store, lease_timeout=1)
    got: list[BaseException] = []

    def read() -> None:
        try:
            waiter.get_tuple({"configurable": {"thread_id": "t"}})
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is checked
            got.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    try:
        assert not t.is_alive(), "the saver waited on the FIFO"
        assert got == [] or (len(got) == 1 and isinstance(got[0], LockError)), got  # handed over (the name is the request), or timed out
    finally:
        if t.is_alive():  # let the blocked open go: a reader on the FIFO
            with open(store / "langgraph" / "want" / lease_name("t"), "rb"):
                t.join(10)
        waiter.close()
        holder.close()


def test_a_hard_link_planted_as_a_lease_is_refused_and_its_file_untouched(tmp_path: Path) -> None:
    """A lease is written to: a hard link to a file outside the store had its first bytes
    overwritten by the saver."""
    import os

    from ckptcli.adapters.langgraph.leases import lease_name
    from ckptcli.errors import StoreIOError

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"VICTIM-CONTENT-UNTOUCHED")
    os.link(victim, store / "langgraph" / "threads" / lease_name("t"))
    cp = {"v": 1, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
    with CkptSaver.open(store) as saver:
        with pytest.raises(StoreIOError, match="hard links"):
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {}, {})  # type: ignore[arg-type]
        saver.put({"configurable": {"thread_id": "u", "checkpoint_ns": ""}}, cp, {}, {})  # type: ignore[arg-type]
    assert victim.read_bytes() == b"VICTIM-CONTENT-UNTOUCHED"


_BUSY_WORKER = """
import sys, time
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import chain_builder
from typing import Annotated, TypedDict
import operator

class S(TypedDict):
    log: Annotated[list, operator.add]

saver = CkptSaver.open(sys.argv[1])
graph = chain_builder(S, a=lambda s: {"log": ["a"]}, b=lambda s: {"log": ["b"]}).compile(checkpointer=saver)
cfg = {"configurable": {"thread_id": "busy"}}
graph.invoke({"log": []}, cfg)
print("running", flush=True)
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    graph.invoke({"log": []}, cfg)
    n += 1
saver.close()
print(n, flush=True)
"""


def test_a_thread_run_back_to_back_in_one_worker_is_handed_to_a_reader_in_another(tmp_path: Path) -> None:
    """The holder took the lease back before the waiter's next poll, every time: a read
    of a thread another worker kept running failed with LockError after lease_timeout."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    busy = subprocess.Popen([sys.executable, "-c", _BUSY_WORKER, str(store), "12"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "running"
        reader = CkptSaver.open(store, lease_timeout=3)
        try:
            for _ in range(4):
                got = reader.get_tuple({"configurable": {"thread_id": "busy"}})  # LockError when starved
                assert got is not None
        finally:
            reader.close()
    finally:
        out, _ = busy.communicate(timeout=60)
    assert busy.returncode == 0 and int(out.split()[-1]) > 0


_SHARED_WORKER = """
import json, sys, time
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.errors import CkptError, ThreadConflictError
from tests.langgraph_worker import Chat, _bot

from pathlib import Path

me, turns, counts, workers = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])


def everyone_done() -> bool:  # each worker keeps the thread busy until all have their turns
    got = [int(p.read_text() or 0) for p in counts.iterdir()]
    return len(got) == workers and min(got) >= turns
saver = CkptSaver.open(sys.argv[1])
b = StateGraph(Chat)
b.add_node("bot", _bot)
b.add_edge(START, "bot")
b.add_edge("bot", END)
graph = b.compile(checkpointer=saver)
print("ready", flush=True)
sys.stdin.readline()
done, conflicts, error, i = 0, 0, None, 0
end = time.monotonic() + 240  # a bound for a stuck run, far past any hand-over
while not everyone_done() and time.monotonic() < end:
    text = f"{me}-{i}"
    i += 1
    try:
        graph.invoke({"messages": [HumanMessage(content=text, id=f"user-{text}")]}, {"configurable": {"thread_id": "shared"}})
        done += 1
        (counts / me).write_text(str(done))
    except ThreadConflictError:
        conflicts += 1  # two runs at once on one thread: refused, run again (the documented answer)
    except CkptError as exc:
        error = f"{type(exc).__name__}: {exc}"
        break
saver.close()
(counts / me).write_text(str(10**6))  # gone: the others do not wait for it
print(json.dumps({"done": done, "conflicts": conflicts, "error": error}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", stress.sample([3, 5], 1))
def test_several_workers_running_one_thread_back_to_back_all_make_progress(tmp_path: Path, workers: int) -> None:
    """Three workers on one thread: one request file per thread, made by one waiter and
    removed by whichever waiter took the lease, so the other waiters' requests were gone
    and the holder never handed over to them again: they failed with LockError (blaming a
    holder that handed over) while one worker ran hundreds of turns. Now each waiter has
    its own request, the holder hands over while any is alive, oldest first: every worker
    gets its turns (a conflict, two runs at once, is refused and run again). Three in the
    bounded run (two waiters at once, what failed); five too at CKPT_STRESS_SCALE=1."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    counts = tmp_path / "counts"
    counts.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARED_WORKER, str(store), f"w{n}", "10", str(counts), str(workers)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # all at once
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.communicate(timeout=400)[0].splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [r["error"] for r in results] == [None] * workers, results
    assert min(r["done"] for r in results) >= 10, results
    with CkptSaver.open(store) as saver:
        graph = _chat(saver)
        texts = [m.content for m in graph.get_state({"configurable": {"thread_id": "shared"}}).values["messages"]]
    answered = [t for t in texts if isinstance(t, str) and t.startswith("echo ")]
    for n in range(workers):  # each worker's turns are in the thread (a refused run may leave its question, or more)
        assert len([t for t in answered if t.startswith(f"echo w{n}-")]) >= results[n]["done"], texts
    for t in answered:  # right after its question
        assert texts[texts.index(t) - 1] == t.split()[1], texts


def _chat(saver: Any) -> Any:
    from tests.langgraph_worker import chat_graph

    return chat_graph(saver)


def test_a_run_that_read_a_new_thread_empty_is_refused_once_another_saver_started_it(tmp_path: Path) -> None:
    """The first turns of two workers on a new thread (what made the test above lose an
    acknowledged turn now and then): one read the thread empty and let its lease go
    before its first put; the other ran a whole turn meanwhile. The fence was made of
    the checkpoints the first knew of the thread, none, so its put with no parent was
    taken: a second root, and one of the two acknowledged turns off the thread's head.
    Now it is refused as any write on a stale read is, and its next run sees the thread."""
    from ckptcli.errors import ThreadConflictError
    from tests.langgraph_worker import history

    store = tmp_path / ".ckpt"
    cfg: Any = {"configurable": {"thread_id": "t"}}
    other = CkptSaver.open(store)
    interleaved: list[str] = []

    class ReadsThenLetsGo(CkptSaver):
        def get_tuple(self, config: Any) -> Any:
            got = super().get_tuple(config)
            if got is None and not interleaved:  # the run read the thread empty, then:
                self.flush()  # nothing to commit: lets the thread's lease go, as its commit thread does
                _chat(other).invoke({"messages": [HumanMessage(content="b0", id="user-b0")]}, cfg)
                other.flush()  # committed and let go: a new token in the lease
                interleaved.append("b0")
            return got

    mine = ReadsThenLetsGo.open(store)
    try:
        graph = _chat(mine)
        with pytest.raises(ThreadConflictError, match=r"'t'.*another process.*namespace ''"):
            graph.invoke({"messages": [HumanMessage(content="a0", id="user-a0")]}, cfg)
        assert interleaved == ["b0"]
        graph.invoke({"messages": [HumanMessage(content="a1", id="user-a1")]}, cfg)  # run again: it sees b0
    finally:
        mine.close()
        other.close()
    with CkptSaver.open(store) as saver:
        hist = history(_chat(saver), "t")
    assert [h["parent"] for h in hist] == [*range(1, len(hist)), None]  # one line, one root
    assert [m[1] for m in hist[0]["messages"]] == ["b0", "echo b0 after 1", "a1", "echo a1 after 3"]


def _with_subgraph(saver: Any) -> Any:
    """The worker's bot node inside a subgraph: its reads and puts are in a namespace of its own."""
    from tests.langgraph_worker import Chat, _bot

    inner = StateGraph(Chat)
    inner.add_node("bot", _bot)
    inner.add_edge(START, "bot")
    inner.add_edge("bot", END)
    outer = StateGraph(Chat)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    outer.add_edge("sub", END)
    return outer.compile(checkpointer=saver)


def test_a_run_whose_subgraph_reads_after_another_saver_wrote_is_refused_not_forked(tmp_path: Path) -> None:
    """A run let the thread go between two steps (handed over) and another process's
    saver ran a whole turn meanwhile; the run's subgraph then read its namespace, which
    took the thread back and read it again, and a read cleared the fence: the run's next
    put extended the checkpoint it had read before, a fork that left the other turn off
    the head. A read inside a run (a subgraph's) now keeps what the run read fenced."""
    from ckptcli.errors import ThreadConflictError
    from tests.langgraph_worker import history

    store = tmp_path / ".ckpt"
    cfg: Any = {"configurable": {"thread_id": "t"}}
    other = CkptSaver.open(store)
    _with_subgraph(other).invoke({"messages": [HumanMessage(content="q0", id="user-q0")]}, cfg)
    other.flush()
    interleaved: list[str] = []

    class HandsOverBeforeItsSubgraph(CkptSaver):
        def get_tuple(self, config: Any) -> Any:
            if config["configurable"].get("checkpoint_ns") and not interleaved:
                self.flush()  # the run's checkpoints so far committed and the lease let go, as a hand-over does
                _with_subgraph(other).invoke({"messages": [HumanMessage(content="b0", id="user-b0")]}, cfg)
                other.flush()
                interleaved.append("b0")
            return super().get_tuple(config)

    mine = HandsOverBeforeItsSubgraph.open(store)
    try:
        graph = _with_subgraph(mine)
        with pytest.raises(ThreadConflictError, match="another process"):
            graph.invoke({"messages": [HumanMessage(content="a0", id="user-a0")]}, cfg)
        assert interleaved == ["b0"]
        graph.invoke({"messages": [HumanMessage(content="a1", id="user-a1")]}, cfg)
    finally:
        mine.close()
        other.close()
    with CkptSaver.open(store) as saver:
        hist = history(_with_subgraph(saver), "t")
    assert [h["parent"] for h in hist] == [*range(1, len(hist)), None]  # one line, one root
    # the refused run left its question (as a refused run may), then b0's turn and a1's
    assert [m[1] for m in hist[0]["messages"]] == ["q0", "echo q0 after 1", "a0", "b0", "echo b0 after 4", "a1", "echo a1 after 6"]


def test_a_request_left_by_a_waiter_that_was_killed_is_removed_and_not_waited_for(tmp_path: Path) -> None:
    """A saver killed while it waited for a thread left its request, which every saver
    then trusted for lease_timeout + 1 s: each claim of the thread, even in a lone
    process, waited for the dead waiter (2 s), and the holder handed over for nothing.
    Now a request is alive while its waiter holds its flock; a dead one is removed."""
    import fcntl
    import os
    import signal
    import time

    from ckptcli.adapters.langgraph.leases import lease_name

    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        _chat(saver).invoke({"messages": [HumanMessage(content="q0", id="user-q0")]}, {"configurable": {"thread_id": "t"}})
    want = store / "langgraph" / "want"
    fd = os.open(store / "langgraph" / "threads" / lease_name("t"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a busy holder elsewhere
        waiter = subprocess.Popen(
            [
                sys.executable, "-c",
                "from ckptcli.adapters.langgraph.saver import CkptSaver\n"
                f"CkptSaver.open({str(store)!r}).get_tuple({{'configurable': {{'thread_id': 't'}}}})",
            ],
            cwd=REPO,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not os.listdir(want):  # it asks for the thread
            assert waiter.poll() is None and time.monotonic() < deadline, "the waiter never asked for the thread"
            time.sleep(0.01)
        waiter.send_signal(signal.SIGKILL)
        waiter.wait()
    finally:
        os.close(fd)  # the holder lets go
    assert os.listdir(want), "the killed waiter's request is there"
    with CkptSaver.open(store) as saver:
        graph = _chat(saver)
        graph.invoke({"messages": [HumanMessage(content="q1", id="user-q1")]}, {"configurable": {"thread_id": "t"}})
        assert os.listdir(want) == []  # removed: the next saver does not find it either
        assert [m.content for m in graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"]] == [
            "q0",
            "echo q0 after 1",
            "q1",
            "echo q1 after 3",
        ]


def test_deleting_or_sweeping_a_thread_removes_its_lease(tmp_path: Path) -> None:
    """Every thread ever used kept its lease file in langgraph/threads/ for good: with TTL
    on, one file per conversation, after its checkpoints were all gone. A thread deleted
    (delete_thread, the TTL sweep) loses its lease; the others keep theirs."""
    import os

    from ckptcli.adapters.langgraph.leases import lease_name

    store = tmp_path / ".ckpt"
    leases = store / "langgraph" / "threads"
    now = [10**18]
    with CkptSaver.open(store, ttl={"default_ttl": 1, "sweep_interval_minutes": 10**6}, clock=lambda: now[0]) as saver:
        graph = _chat(saver)
        for i in range(6):
            graph.invoke({"messages": [HumanMessage(content=f"q{i}", id=f"user-q{i}")]}, {"configurable": {"thread_id": f"t{i}"}})
        saver.flush()
        assert sorted(os.listdir(leases)) == sorted(lease_name(f"t{i}") for i in range(6))
        saver.delete_thread("t0")
        saver.delete_thread("t1")
        assert sorted(os.listdir(leases)) == sorted(lease_name(f"t{i}") for i in range(2, 6))
        graph.invoke({"messages": [HumanMessage(content="q9", id="user-q9")]}, {"configurable": {"thread_id": "t1"}})  # used again
        saver.flush()
        assert lease_name("t1") in os.listdir(leases)
        now[0] += 10 * 60 * 10**9
        assert len(saver.sweep_ttl()) == 5
        assert os.listdir(leases) == []
        assert graph.get_state({"configurable": {"thread_id": "t1"}}).values == {}


def test_a_worker_that_loaded_a_thread_before_it_was_deleted_and_its_lease_removed_reads_it_again(tmp_path: Path) -> None:
    """Worker b loads the store when the thread has no lease (a store older than leases);
    the thread is then deleted elsewhere, which removes the lease b never saw, and read by
    another worker, which makes a new lease without a token: b must not serve the deleted
    turn from its memory (no token there, and b has the thread: it reads it again)."""
    import os

    from ckptcli.adapters.langgraph.leases import lease_name

    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        _chat(saver).invoke({"messages": [HumanMessage(content="q0", id="user-q0")]}, {"configurable": {"thread_id": "t"}})
    os.unlink(store / "langgraph" / "threads" / lease_name("t"))
    a, b, c = _workers("ckpt", store, 3)
    try:
        assert a.call(op="delete", thread="t") == {"ok": True}
        assert not (store / "langgraph" / "threads" / lease_name("t")).exists()
        assert c.call(op="history", thread="t") == {"ok": True, "history": []}
        assert b.call(op="history", thread="t") == {"ok": True, "history": []}
        fresh = b.call(op="turn", thread="t", text="q1")
        assert fresh["messages"] == ["q1", "echo q1 after 1"], fresh
        assert [m[1] for m in a.call(op="history", thread="t")["history"][0]["messages"]] == ["q1", "echo q1 after 1"]
    finally:
        for w in (a, b, c):
            w.close()


def test_a_holder_that_never_hands_over_is_named_and_the_waiters_ahead_counted(tmp_path: Path) -> None:
    """The LockError after lease_timeout says what happened: here a holder that never
    let go (this test holds the lease's flock), with one other waiter alive ahead of the
    saver (its request older, and locked); the waiter's request is gone afterwards."""
    import fcntl
    import os

    from ckptcli.adapters.langgraph.leases import Request, lease_name
    from ckptcli.errors import LockError

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    want = store / "langgraph" / "want"
    fd = os.open(store / "langgraph" / "threads" / lease_name("t"), os.O_RDWR | os.O_CREAT, 0o644)
    ahead = Request(want, lease_name("t"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with CkptSaver.open(store, lease_timeout=1) as saver:
            with pytest.raises(
                LockError,
                match=r"held by another process's CkptSaver, which did not hand it over within 1 s \(1 other waiter\(s\) ahead of this one\)",  # noqa: E501
            ):
                saver.get_tuple({"configurable": {"thread_id": "t"}})
            assert os.listdir(want) == [ahead.name]
    finally:
        ahead.close()
        os.close(fd)


def test_a_waiter_whose_lease_is_removed_takes_the_one_at_its_path_never_the_removed_one(tmp_path: Path) -> None:
    """A lease is removed by its holder with its thread (`_drop_lease`), under its flock.
    A saver that waited on the removed file gets its flock then: it must open the lease
    at the path again, which someone else may hold already, not go on as the holder of a
    file no one else can see (two holders of one thread). Here the lease at the path is
    held for good: the waiter fails with LockError instead of reading the thread."""
    import fcntl
    import os
    import threading
    import time

    from ckptcli.adapters.langgraph.leases import lease_name
    from ckptcli.errors import LockError

    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        _chat(saver).invoke({"messages": [HumanMessage(content="q0", id="user-q0")]}, {"configurable": {"thread_id": "t"}})
    path = store / "langgraph" / "threads" / lease_name("t")
    old = os.open(path, os.O_RDWR)
    fcntl.flock(old, fcntl.LOCK_EX)
    new = -1
    got: list[Any] = []
    waiter = CkptSaver.open(store, lease_timeout=2)

    def read() -> None:
        try:
            got.append(waiter.get_tuple({"configurable": {"thread_id": "t"}}))
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is checked
            got.append(exc)

    t = threading.Thread(target=read, daemon=True)
    try:
        t.start()
        deadline = time.monotonic() + 60
        while not os.listdir(store / "langgraph" / "want"):  # it waits
            assert time.monotonic() < deadline and t.is_alive(), got
            time.sleep(0.01)
        os.unlink(path)  # removed by its holder, under its flock
        new = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # another saver makes the lease again, and holds it
        fcntl.flock(new, fcntl.LOCK_EX)
        os.close(old)  # the old flock goes: the waiter gets it
        old = -1
        t.join(60)
        assert not t.is_alive()
        assert len(got) == 1 and isinstance(got[0], LockError), got
    finally:
        for fd in (old, new):
            if fd >= 0:
                os.close(fd)
        waiter.close()
