"""CkptSaver.copy_thread (defect F10): a copy of the store's committed checkpoints, not
of their values. The copy reads back exactly like its source through real LangGraph
graphs (interrupts, a subgraph's namespaces, pending writes), in this process and in
another one after reopening; it journals nothing and writes no object; the source's
lease is not held while the copy waits for its target; and deleting, pruning or
sweeping one of the two leaves the other whole."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langgraph.types import Command

from ckptcli.adapters.langgraph.journal import JOURNAL_DIR, read_journal
from ckptcli.adapters.langgraph.layout import LABEL_CHECKPOINT, LABEL_NS, LABEL_REV, LABEL_THREAD
from ckptcli.adapters.langgraph.leases import LEASE_DIR, WANT_DIR, lease_name
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.api import init_store, open_store
from ckptcli.store import verify as integrity
from tests.langgraph_graphs import ask, chat_builder, chat_message, normalized, support_builder
from tests.test_langgraph_threads import Worker

REPO = Path(__file__).resolve().parent.parent
SOURCE, COPY = "support-1", "support 1/copy"  # the copy's id is no subject name: a slug and a label


def tuples(saver: CkptSaver, thread: str) -> list[Any]:
    """Every checkpoint of a thread, every namespace, newest first, as LangGraph reads it."""
    out = []
    for t in saver.list({"configurable": {"thread_id": thread}}):
        c = t.config["configurable"]
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        skeleton = {k: v for k, v in t.checkpoint.items() if k != "channel_values"}
        out.append(
            (c["checkpoint_ns"], c["checkpoint_id"], parent, skeleton, dict(t.checkpoint["channel_values"]), t.metadata, t.pending_writes)
        )
    return out


def history(graph: Any, thread: str) -> list[Any]:
    """The graph's own view of a thread: its state history, and its state with subgraphs."""
    cfg = {"configurable": {"thread_id": thread}}
    out: list[Any] = []
    for s in graph.get_state_history(cfg):
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append(
            (
                s.config["configurable"]["checkpoint_id"],
                parent,
                s.values,
                s.next,
                s.metadata,
                s.created_at,
                [_task(t, thread) for t in s.tasks],
                s.interrupts,
            )
        )
    now = graph.get_state(cfg, subgraphs=True)
    out.append(
        (
            now.values,
            now.next,
            [(t.name, t.interrupts, t.state.values if t.state is not None and hasattr(t.state, "values") else None) for t in now.tasks],
        )
    )
    return out


def _task(task: Any, thread: str) -> Any:
    """A task of a snapshot; the config of its subgraph's state names its thread (the one
    thing a copy's history has otherwise)."""
    state = task.state
    if isinstance(state, dict) and state.get("configurable", {}).get("thread_id") == thread:
        state = {"configurable": {**state["configurable"], "thread_id": "<thread>"}}
    return task._replace(state=state)


def run_support(graph: Any, thread: str) -> None:
    """A question answered after an approval (interrupt, resume, tool, the summary
    subgraph), then a second question waiting for its approval: the head has an
    interrupt as a pending write."""
    cfg = {"configurable": {"thread_id": thread}}
    graph.invoke(ask("A-1001", 0), cfg)
    graph.invoke(Command(resume="yes"), cfg)
    graph.invoke(ask("B-2002", 1), cfg)


def journal_records(store: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((store / JOURNAL_DIR).glob("*.journal")):
        out.extend(read_journal(path.read_bytes()).records)
    return out


def verify(store: Path) -> None:
    st = open_store(store)
    try:
        report = integrity.verify_store(st, None, read_data=True)
        assert report.ok, [str(p) for p in report.problems][:3]
    finally:
        st.close()


_READER = """
import json, sys
from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import support_builder
from tests.test_langgraph_copy_thread import history, tuples
with CkptSaver.open(sys.argv[1]) as saver:
    graph = support_builder().compile(checkpointer=saver)
    print(json.dumps({t: repr((tuples(saver, t), history(graph, t))) for t in sys.argv[2:]}))
"""


def read_elsewhere(store: Path, *threads: str) -> dict[str, str]:
    """What a new process reads of `threads` (the saver's tuples and the graph's history, as text)."""
    got = subprocess.run([sys.executable, "-c", _READER, str(store), *threads], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)  # type: ignore[no-any-return]


def test_a_copy_reads_back_like_its_source_through_a_real_graph(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        run_support(graph, SOURCE)
        saver.copy_thread(SOURCE, COPY)  # the newest checkpoints are not committed yet: the copy commits them first
        src = tuples(saver, SOURCE)
        assert {ns for ns, *_ in src} > {""}, "the run has a subgraph's namespace"
        assert any(w[1] == "__interrupt__" for *_, writes in src for w in writes), "and an interrupt waiting"
        assert tuples(saver, COPY) == src
        assert history(graph, COPY) == history(graph, SOURCE)
    # another process reads the same of both
    seen = read_elsewhere(store, SOURCE, COPY)
    assert seen[COPY] == seen[SOURCE]
    verify(store)
    st = open_store(store)
    try:
        subjects = {str(st.manifest(cid).subject) for cid in st.manifest_ids()}
        labels = [st.manifest(cid).labels for cid in st.manifest_ids()]
    finally:
        st.close()
    slug = (subjects - {"agent:support-1"}).pop()
    assert len(subjects) == 2 and slug.startswith("agent:support-1-copy-"), subjects
    assert sum(1 for lb in labels if lb.get(LABEL_THREAD) == COPY) == len(src)
    # both go on alike, after a reopen: the approval, the tool, the answer, the summary
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        outs = [normalized(graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": t}})) for t in (SOURCE, COPY)]
        assert outs[0] == outs[1] and outs[0]["messages"][-1].content == "Your order is delivered."
        states = [list(graph.get_state_history({"configurable": {"thread_id": t}})) for t in (SOURCE, COPY)]
        assert [s.values for s in states[0]] == [s.values for s in states[1]]
        # the resume's writes came for checkpoints committed before the reopen: revisions
        saver.flush()
        assert any(lb.get(LABEL_REV) for lb in labels_of(store, "support-1")), "the source has revisions"
        saver.copy_thread(SOURCE, "support-1-again")  # the newest revision of each, as revision 1
        assert tuples(saver, "support-1-again") == tuples(saver, SOURCE)
        saver.copy_thread(SOURCE, "support-1-again")  # again: each copy a revision of the one before
        assert tuples(saver, "support-1-again") == tuples(saver, SOURCE)
    revs = [lb.get(LABEL_REV) for lb in labels_of(store, "support-1-again")]
    assert set(revs) == {None, "2"} and revs.count("2") == revs.count(None)  # every copy once as 1, once as 2
    seen = read_elsewhere(store, SOURCE, "support-1-again")
    assert seen["support-1-again"] == seen[SOURCE]
    verify(store)


def labels_of(store: Path, subject: str) -> list[dict[str, str]]:
    """The labels of every checkpoint of subject agent:`subject`."""
    st = open_store(store)
    try:
        return [st.manifest(cid).labels for cid in st.manifest_ids() if st.manifest(cid).subject.name == subject]
    finally:
        st.close()


def test_a_copy_journals_no_value_and_writes_no_object(tmp_path: Path) -> None:
    """The copies are new manifests naming the source's sections: the journal (where a
    copy used to write every checkpoint's values again) does not grow, the store gets
    no new object, and each copy's sections are its original's."""
    store = tmp_path / ".ckpt"
    turns = 120
    with CkptSaver.open(store, seal_idle=0) as saver:
        graph = chat_builder(turns).compile(checkpointer=saver)
        graph.invoke({"messages": [chat_message(0)]}, {"configurable": {"thread_id": "big"}})
        saver.flush()
        st = open_store(store)
        objects = len(st.index())
        st.close()
        before = journal_records(store)
        saver.copy_thread("big", "big-copy")
        after = journal_records(store)
        assert [r for r in after if r.get("t") == "big-copy"] == []
        assert len(after) == len(before)
        head = saver.get_tuple({"configurable": {"thread_id": "big-copy"}})
        assert head is not None and len(head.checkpoint["channel_values"]["messages"]) == turns
        assert tuples(saver, "big-copy") == tuples(saver, "big")
    st = open_store(store)
    try:
        assert len(st.index()) == objects
        by_thread: dict[str, dict[tuple[str, str], Any]] = {}
        for cid in st.manifest_ids():
            m = st.manifest(cid)
            by_thread.setdefault(m.subject.name, {})[(m.labels.get(LABEL_NS, ""), m.labels[LABEL_CHECKPOINT])] = m
    finally:
        st.close()
    src, dst = by_thread["big"], by_thread["big-copy"]
    assert len(src) == len(dst) == turns + 1
    assert all(dst[k].sections == m.sections and dst[k].created_ns == m.created_ns for k, m in src.items())
    verify(store)


def test_the_source_is_not_held_while_the_copy_waits_for_its_target(tmp_path: Path) -> None:
    """Worker a copies thread "a-src" to "b-dst", whose lease this test holds (as a busy
    saver elsewhere would): a waits for it. Meanwhile worker c runs a turn on the source,
    which it can only do if a let go of the source once it had its snapshot (before,
    a held both leases for the whole copy, and c failed with LockError). The copy is the
    source as it was when the copy began."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    a = Worker("ckpt", store, "120")
    c = Worker("ckpt", store, "10")
    held = os.open(store / JOURNAL_DIR / LEASE_DIR / lease_name("b-dst"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert a.call(op="turn", thread="a-src", text="q0")["ok"]
        snapshot = c.call(op="history", thread="a-src")
        fcntl.flock(held, fcntl.LOCK_EX)
        a.send(op="copy", thread="a-src", to="b-dst")
        want = store / JOURNAL_DIR / WANT_DIR
        deadline = time.monotonic() + 120
        while not list(want.glob(lease_name("b-dst") + ".*")):  # a asks for the target: it has taken what it copies
            assert time.monotonic() < deadline, "the copy never asked for its target"
            time.sleep(0.01)
        turn = c.call(op="turn", thread="a-src", text="q1")
        fcntl.flock(held, fcntl.LOCK_UN)
        assert a.read() == {"ok": True}
        assert turn["ok"], turn
        assert turn["messages"] == ["q0", "echo q0 after 1", "q1", "echo q1 after 3"]
        assert c.call(op="history", thread="b-dst") == snapshot
        assert len(c.call(op="history", thread="a-src")["history"]) > len(snapshot["history"])
    finally:
        os.close(held)
        for w in (a, c):
            w.close()
    verify(store)


def test_deleting_pruning_or_sweeping_one_leaves_the_other_whole(tmp_path: Path) -> None:
    """A copy shares every object with its source: removing either (delete_thread,
    prune, the TTL sweep) keeps what the other needs, in the store and after reopen."""
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        run_support(graph, SOURCE)
        saver.copy_thread(SOURCE, COPY)
        expected = tuples(saver, SOURCE)
        saver.delete_thread(SOURCE)  # no other saver lives: objects only the source needed would go
        assert tuples(saver, SOURCE) == []
        assert tuples(saver, COPY) == expected
    verify(store)
    with CkptSaver.open(store) as saver:
        assert tuples(saver, COPY) == expected
        saver.copy_thread(COPY, SOURCE)  # and back
        saver.prune([COPY], strategy="keep_latest")
        assert tuples(saver, SOURCE) == expected
        assert 0 < len(tuples(saver, COPY)) < len(expected)
        saver.delete_thread(COPY)
        assert tuples(saver, COPY) == []
    verify(store)
    with CkptSaver.open(store) as saver:
        assert tuples(saver, SOURCE) == expected
        graph = support_builder().compile(checkpointer=saver)
        assert (
            normalized(graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": SOURCE}}))["messages"][-1].content
            == "Your order is delivered."
        )


class Clock:
    def __init__(self) -> None:
        self.offset = 0

    def __call__(self) -> int:
        return time.time_ns() + self.offset


def test_a_copy_keeps_its_checkpoints_times_and_expires_on_its_own(tmp_path: Path) -> None:
    """The TTL counts from a thread's newest checkpoint; a copy's checkpoints keep their
    source's times. Here the source is used again after the copy: the sweep deletes the
    copy alone, and the source reads as before."""
    store = tmp_path / ".ckpt"
    hour = 3600 * 10**9
    clock = Clock()
    with CkptSaver.open(store, ttl={"default_ttl": 60, "sweep_interval_minutes": 10**6}, clock=clock) as saver:
        graph = support_builder().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": SOURCE}}
        graph.invoke(ask("A-1001", 0), cfg)
        saver.copy_thread(SOURCE, COPY)
        clock.offset += 2 * hour
        graph.invoke(Command(resume="yes"), cfg)
        expected = tuples(saver, SOURCE)
        clock.offset += hour // 2  # the copy: idle 2.5 h; the source: 0.5 h; the TTL: 1 h
        assert list(saver.sweep_ttl()) == [COPY]
        assert tuples(saver, COPY) == []
        assert tuples(saver, SOURCE) == expected
    verify(store)
    with CkptSaver.open(store) as saver:
        assert tuples(saver, SOURCE) == expected


class PrunedMeanwhile(CkptSaver):
    """Prunes the source between the copy's snapshot and its reading of the manifests
    (as another process could once the source's lease is let go)."""

    def _copy_manifests(self, rows: Any, strict: bool = False) -> Any:
        if not getattr(self, "pruned", False):
            self.pruned = True
            self.prune([SOURCE])
        return super()._copy_manifests(rows, strict)


def test_a_source_pruned_while_it_is_copied_is_copied_as_it_is_then(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    with PrunedMeanwhile(init_store(store)) as saver:
        graph = support_builder().compile(checkpointer=saver)
        run_support(graph, SOURCE)
        before = tuples(saver, SOURCE)
        saver.copy_thread(SOURCE, COPY)
        pruned = tuples(saver, SOURCE)
        assert 0 < len(pruned) < len(before)
        assert tuples(saver, COPY) == pruned
    verify(store)


def test_ckpt_fork_of_a_copy_resumes_in_langgraph(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """The copies are ckpt checkpoints like any other: `ckpt fork` takes one, and
    `thread_from` starts a thread there that resumes as the source would."""
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store) as saver:
        graph = support_builder().compile(checkpointer=saver)
        run_support(graph, SOURCE)
        saver.copy_thread(SOURCE, "support-1-copy")
    same = cli("diff", "agent:support-1", "agent:support-1-copy", "--store", store, "--exit-code")
    assert same.code == 0, same.out + same.err  # the same sections
    fork = cli("fork", "agent:support-1-copy", "--at", "0", "--branch", "retry", "--store", store, "--json")
    assert fork.code == 0, fork.err
    with CkptSaver.open(store) as saver:
        config = saver.thread_from("retry", "support-1-retry")
        graph = support_builder().compile(checkpointer=saver)
        assert graph.get_state(config).next == ("approve",)
        done = graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "support-1-retry"}})
        assert done["messages"][-1].content == "Your order is delivered."
    assert cli("verify", "--store", store, "--read-data").code == 0
