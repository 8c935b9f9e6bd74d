"""The TUI's models without a terminal (ckptcli.history.timeline): lazy lists over chunk trees,
timelines of event tails (states, kept states, steps), and the history graph."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import msgpack
import pytest

import ckptcli
from ckptcli.api import Checkpoint, open_checkpoint, take
from ckptcli.errors import CorruptError, InvalidInputError, NotFoundError
from ckptcli.format.values import EXT_LIST, EXT_REF
from ckptcli.history.events import event_from_map
from ckptcli.history.graph import History
from ckptcli.history.lazylist import LRU, LazyList
from ckptcli.history.render import render_changes
from ckptcli.history.replay import iter_steps, replay
from ckptcli.history.timeline import (
    STOP_CHECK_EVERY,
    Stopped,
    Timeline,
    blob_listing,
    child_keys,
    event_summary,
    label_of,
    section_shape,
    state_changes,
    windows,
)
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile
from tests.tui_data import build_demo_store, demo_events, export_demo

SNAPSHOT: dict[str, Any] = {"memory": {"goal": "x", "messages": []}, "plan": [], "tools": []}


def _take_tail(store: Store, events: list[dict[str, Any]], snapshot: dict[str, Any] | None = None) -> Checkpoint:
    r = take(store, {**(snapshot or SNAPSHOT), "events": events}, subject="agent:t", labels={"events.seq": str(len(events))})
    return open_checkpoint(r.hex, store)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("demo") / ".ckpt"
    ids = build_demo_store(path)
    return ckptcli.open_store(path), ids


# -- LazyList -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 31, 33, 500, 5000])
def test_lazy_list_reads_every_item_of_inline_and_tree_lists(store: Store, n: int) -> None:
    items = [{"i": i, "text": "x" * (i % 300), "nested": {"deep": "y" * (i % 200)}} for i in range(n)]
    ck = open_checkpoint(take(store, {"memory": {}, "plan": items}, subject="agent:a").hex, store)
    lst = LazyList(store, ck.manifest.sections["plan"], "plan")
    assert len(lst) == n
    assert [lst.value(i) for i in range(n)] == items
    # and backwards, and at random, which walks down from the root each time
    assert [lst.value(i) for i in reversed(range(n))] == items[::-1]
    for i in range(0, n, 97):
        assert lst.value(i) == items[i]
    with pytest.raises(IndexError):
        lst.raw(n)


def test_an_item_costs_one_node_read_per_level(store: Store) -> None:
    items = [{"seq": i, "note": f"event {i}"} for i in range(20_000)]
    ck = open_checkpoint(take(store, {"memory": {}, "events": items}, subject="agent:a").hex, store)
    lst = LazyList(store, ck.manifest.sections["events"], "events")
    after_root = lst.nodes_read
    assert lst.value(12_345) == items[12_345]
    depth = lst.nodes_read - after_root
    assert 1 <= depth <= 12  # O(depth), not O(n): ~3,000 leaves in this tree
    assert lst.value(12_346) == items[12_346]
    assert lst.nodes_read - after_root <= depth + 1  # the neighbour shares the path (or its leaf)


def test_lazy_list_refuses_a_value_that_is_not_a_list(store: Store) -> None:
    ck = open_checkpoint(take(store, {"memory": {"a": 1}}, subject="agent:a").hex, store)
    with pytest.raises(InvalidInputError, match="not a list"):
        LazyList(store, ck.manifest.sections["memory"], "memory")


class _Objects:
    """An ObjectSource of hand-made node objects."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def add(self, node: Any) -> bytes:
        content = msgpack.packb(node, use_bin_type=True)
        oid = hashlib.sha256(content).digest()
        self.data[oid] = content
        return oid

    def get(self, oid: bytes) -> bytes:
        return self.data[oid]


def test_lazy_list_checks_the_counts_of_the_nodes_it_reads() -> None:
    src = _Objects()
    leaf_a = src.add([EXT_LIST, 0, 2, [1, 2]])
    leaf_b = src.add([EXT_LIST, 0, 3, [3, 4, 5]])
    good = src.add([EXT_LIST, 1, 5, [[2, leaf_a], [3, leaf_b]]])
    ev = msgpack.packb(msgpack.ExtType(EXT_LIST, good))
    assert [LazyList(src, ev, "x").value(i) for i in range(5)] == [1, 2, 3, 4, 5]
    # a parent that says its second child holds 2 items, which holds 3
    bad = src.add([EXT_LIST, 1, 4, [[2, leaf_a], [2, leaf_b]]])
    lst = LazyList(src, msgpack.packb(msgpack.ExtType(EXT_LIST, bad)), "x")
    assert lst.value(0) == 1
    with pytest.raises(CorruptError):
        lst.value(3)
    # a root that is a REF to a list, and a map key that is not a string (decoder path)
    ref = src.add([7, {"k": 1}])
    assert LazyList(src, msgpack.packb(msgpack.ExtType(EXT_REF, ref)), "x").value(1) == {"k": 1}
    with pytest.raises(CorruptError):
        LazyList(src, msgpack.packb([{1: "int key"}]), "x").value(0)


def test_lru_is_bounded() -> None:
    c: LRU[int, int] = LRU(3)
    for i in range(10):
        c.put(i, i)
    assert len(c) == 3 and c.keys() == [7, 8, 9]
    assert c.get(7) == 7 and c.keys() == [8, 9, 7]


# -- Timeline ----------------------------------------------------------------------------------------
def test_timeline_states_are_the_replay_librarys(store: Store) -> None:
    ck = _take_tail(store, demo_events(1, 300, 10**18))
    tl = Timeline.open(ck, snapshot_every=50)
    assert len(tl) == 301 and tl.base_seq == 0 and tl.last_seq == 300
    for r in (0, 1, 2, 49, 50, 51, 120, 299, 300):
        assert tl.state(r) == replay(ck, to_seq=r), r
    steps = list(iter_steps(ck))
    for r in (1, 7, 150, 300):
        view = tl.step(r)
        assert view.changes == steps[r - 1].changes()
        assert view.before == steps[r - 1].before and view.after == steps[r - 1].after
    assert tl.step(0).changes == []


def test_states_given_out_never_change_afterwards(store: Store) -> None:
    """A replay changes in place only what it copied since the last state it kept or gave
    out: every state handed over (and the snapshot) stays as it was, whatever comes next."""
    ck = _take_tail(store, demo_events(1, 300, 10**18))
    tl = Timeline.open(ck, snapshot_every=50)
    snapshot = copy.deepcopy(tl.snapshot)
    given = {r: tl.state(r) for r in (300, 10, 120, 51, 299, 200, 1)}
    frozen = copy.deepcopy(given)
    views = [tl.step(r) for r in (150, 151, 49)]
    frozen_views = copy.deepcopy([(v.before, v.after) for v in views])
    for r in (300, 250, 0, 75, 12):
        tl.state(r)
    tl.step(299)
    steps = list(iter_steps(ck))
    assert given == frozen and tl.snapshot == snapshot
    kept = {r: tl.cached_state(r) for r in range(1, 301)}
    assert len([r for r in kept if kept[r] is not None]) >= 16
    assert all(state == steps[r - 1].after for r, state in kept.items() if state is not None), "a kept state was changed"
    assert [(v.before, v.after) for v in views] == frozen_views
    assert all(given[r] == steps[r - 1].after for r in given)


def test_kept_states_bound_the_cost_of_a_jump(store: Store) -> None:
    ck = _take_tail(store, demo_events(1, 1000, 10**18))
    tl = Timeline.open(ck, snapshot_every=100, max_snapshots=20)
    assert tl.cost(1000) == 1000
    tl.state(1000)
    assert tl.applied == 1000 and tl.kept_states >= 10
    for r in (999, 101, 42, 555):
        assert tl.cost(r) <= 100, r
        before = tl.applied
        assert tl.state(r) == replay(ck, to_seq=r)
        assert tl.applied - before <= 100
    assert tl.cost(556) == 1  # the neighbour below a state just asked for
    assert [tl.cost(r) for r in range(540, 556)] == [0] * 16  # and the rows just above it are kept


def test_the_interval_grows_so_that_at_most_max_snapshots_are_kept(store: Store) -> None:
    ck = _take_tail(store, demo_events(1, 400, 10**18))
    tl = Timeline.open(ck, snapshot_every=10, max_snapshots=8)
    assert tl.every == 50
    tl.state(400)
    assert len(tl._snapshots) <= 8


def test_a_replay_stops_when_asked_and_keeps_what_it_made(store: Store) -> None:
    ck = _take_tail(store, demo_events(1, 1000, 10**18))
    tl = Timeline.open(ck, snapshot_every=100)
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        return calls > 10  # asked every STOP_CHECK_EVERY applications

    with pytest.raises(Stopped):
        tl.state(1000, should_stop=stop)
    assert tl.applied == 11 * STOP_CHECK_EVERY - 1
    assert tl.cost(1000) == 1000 - (tl.applied // 100) * 100  # from the last kept state


def test_an_event_that_does_not_fit_names_itself_and_later_rows(store: Store) -> None:
    events: list[dict[str, Any]] = [{"seq": i, "ts": i, "kind": "memory.set", "path": ["k"], "value": i} for i in range(1, 21)]
    events[5] = {"seq": 6, "ts": 6, "kind": "plan.pop"}
    ck = _take_tail(store, events, {"memory": {}, "plan": [], "tools": []})
    tl = Timeline.open(ck)
    assert tl.state(5) == replay(ck, to_seq=5)
    with pytest.raises(InvalidInputError, match=r"event 6 \(plan.pop\): the plan is empty"):
        tl.state(10)
    applied = tl.applied
    with pytest.raises(InvalidInputError):
        tl.state(20)  # at once: the broken row is remembered
    assert tl.applied == applied
    assert tl.row(6).kind == "plan.pop" and tl.row(20).seq == 20  # the rows are still there


def test_seq_order_is_checked_on_the_way(store: Store) -> None:
    events = demo_events(1, 10, 10**18)
    for e in events:
        e.pop("cause", None)
    events[4]["seq"] = 3
    ck = _take_tail(store, events)
    with pytest.raises(InvalidInputError, match="not after the previous"):
        Timeline.open(ck).state(10)


def test_rows_seqs_and_search(store: Store) -> None:
    events = demo_events(101, 200, 10**18)
    ck = _take_tail(store, events)
    tl = Timeline.open(ck)
    assert tl.base_seq == 100
    assert tl.row(0).kind == "snapshot" and tl.row(0).seq == 100
    assert tl.row(1).seq == 101 and tl.row(1).kind == "message.append"
    assert tl.row_for_seq(100) == 0 and tl.row_for_seq(150) == 50 and tl.row_for_seq(10**6) == 200 and tl.row_for_seq(3) == 0
    first_error = next(i for i, e in enumerate(events) if e["kind"] == "error") + 1
    assert tl.find("toolfailed", 0) == first_error  # the error event's summary, any case
    assert tl.find("error", 0) == first_error - 1  # the failed tool.result before it
    last = tl.find("error", 0, backwards=True)  # wraps around to the last match
    assert last is not None and "error" in tl.row(last).summary.lower() + tl.row(last).kind
    assert all("error" not in (tl.row(r).kind + tl.row(r).summary).lower() for r in range(last + 1, 201))
    assert tl.find("#150", 0) == 50
    assert tl.find("no such thing", 0) is None


def test_row_for_seq_in_a_tail_with_gaps(store: Store) -> None:
    events: list[dict[str, Any]] = [{"seq": 2 * i, "ts": i, "kind": "memory.set", "path": ["k"], "value": i} for i in range(1, 51)]
    tl = Timeline.open(_take_tail(store, events))
    assert tl.base_seq == 1
    assert [tl.row_for_seq(s) for s in (1, 2, 3, 4, 5, 99, 100, 101)] == [0, 1, 1, 2, 2, 49, 50, 50]


def test_a_checkpoint_without_a_tail_has_no_timeline(store: Store) -> None:
    ck = open_checkpoint(take(store, {"memory": {"a": 1}}, subject="agent:a").hex, store)
    with pytest.raises(NotFoundError, match="no event tail"):
        Timeline.open(ck)
    empty = open_checkpoint(take(store, {"memory": {}, "events": []}, subject="agent:a", labels={"events.seq": "42"}).hex, store)
    tl = Timeline.open(empty)
    assert len(tl) == 1 and tl.base_seq == 42 and tl.state(0) == {"memory": {}}


def test_state_changes_and_their_lines() -> None:
    a = {"memory": {"x": 1, "gone": True}, "plan": []}
    b = {"memory": {"x": 2, "new": "y"}, "plan": [{"step": 1}]}
    changes = state_changes(a, b)
    assert [(c.op, c.path) for c in changes] == [
        ("remove", ("memory", "gone")),
        ("replace", ("memory", "x")),
        ("add", ("memory", "new")),
        ("add", ("plan", 0)),
    ]
    lines = render_changes(changes, "a -> b")
    assert lines[0] == ("header", "a -> b")
    assert ("section", "memory") in lines and ("change", "~ x: 1 -> 2") in lines and ("remove", "- gone: true") in lines
    assert lines[-1] == ("summary", "4 changes: memory 1 removed, 1 changed, 1 added; plan 1 added")
    assert render_changes([], "same") == [("header", "same"), ("summary", "no differences")]


def test_event_summaries() -> None:
    def ev(kind: str, **f: Any) -> Any:
        return event_from_map({"seq": 1, "ts": 0, "kind": kind, **f}, "e")

    assert event_summary(ev("memory.set", path=["a", 0], value="v")) == 'a[0] = "v"'
    assert event_summary(ev("memory.delete", path=["a"])) == "del a"
    assert event_summary(ev("plan.pop")) == "pop"
    assert event_summary(ev("tool.call", call_id="c1", tool="search", args={"q": 1})) == 'search({"q": 1}) c1'
    assert event_summary(ev("tool.result", call_id="c1", status="error", error="boom")) == "c1 error: boom"
    assert event_summary(ev("message.append", message={"role": "user", "content": "hi"})) == 'user: "hi"'
    assert event_summary(ev("error", message="bad", type="ValueError")) == "ValueError: bad"
    assert event_summary(ev("checkpoint", note="n")) == "n"
    assert event_summary(ev("myadapter:step", node="plan")) == '{"node": "plan"}'


def test_outline_helpers() -> None:
    assert windows(10, []) == [(0, 10)] and windows(0, []) == []
    assert windows(1000, [], page=100) == [(0, 100)]
    assert windows(1000, [500, 508, 998, 5000], page=100, around=5) == [(495, 514), (993, 1000)]
    assert windows(20, [19], around=5) == [(0, 20)]
    assert child_keys({"a": 1, "b": 2}) == ["a", "b"] and child_keys([5, 6]) == [0, 1] and child_keys("s") == []
    assert label_of("m", {"a": 1}) == "m {1 key}" and label_of(3, [1, 2]) == "[3] [2 items]"
    assert label_of("ts", 1767225600000000000) == "ts: 1767225600000000000"


# -- sections -------------------------------------------------------------------------------------
def test_section_shapes_and_blob_listing(demo: tuple[Store, dict[str, bytes]]) -> None:
    store, ids = demo
    ck = Checkpoint(store, ids["recorded"])
    assert section_shape(ck, "events") == "list, 40 items"
    assert section_shape(ck, "memory") == "map, 5 keys"
    assert section_shape(ck, "nothing") == "absent"
    listing = blob_listing(Checkpoint(store, ids["merge"]).blobs())
    assert [(b.path, b.type, b.size) for b in listing] == [
        ("out", "dir", None),
        ("out/report.csv", "file", 24),
        ("out/latest", "symlink", None),
        ("out/logs", "dir", None),
        ("out/logs/run.log", "file", 3),
    ]
    assert listing[2].detail == "report.csv" and listing[4].mode == 0o600 and listing[4].depth == 2


# -- History -----------------------------------------------------------------------------------------
def test_history_kinds_refs_and_subjects(demo: tuple[Store, dict[str, bytes]]) -> None:
    store, ids = demo
    h = History.from_store(store)
    kind = {name: h.nodes[cid].kind for name, cid in ids.items()}
    assert kind == {
        "root": "root", "triage": "take", "good": "take", "recorded": "take", "fork": "fork", "fork2": "take",
        "migrated": "migration", "extract": "root", "load-a": "take", "load-b": "take", "merge": "merge",
    }  # fmt: skip
    assert [(s.name, s.count) for s in h.subjects()] == [("agent:support-bot", 7), ("workflow:nightly", 4)]
    refs = {(r.kind, r.name) for r in h.ref_names(ids["good"])}
    assert refs == {("tag", "known-good")}
    assert {(r.kind, r.name) for r in h.ref_names(ids["fork2"])} == {("branch", "try-again")}
    assert ("latest", "agent:support-bot") in {(r.kind, r.name) for r in h.ref_names(ids["migrated"])}
    assert sorted(h.children[ids["recorded"]]) == sorted([ids["fork"], ids["migrated"]])


def test_history_graph_draws_branches_and_merges(demo: tuple[Store, dict[str, bytes]]) -> None:
    store, _ids = demo
    h = History.from_store(store)
    bot = h.rows("agent:support-bot")
    assert [n.message for n in bot] == [
        "migrate schema 1 -> 2",
        "on the fork",
        "fork of the recorded run at seq 20",
        "recorder: 40 events",
        "queue read",
        "triage",
        "first",
    ]
    assert h.graph(bot) == ["▲", "│ ●", "│ ◆", "●─╯", "●", "●", "○"]
    wf = h.rows("workflow:nightly")
    assert h.graph(wf) == ["◉─╮", "│ ●", "● │", "○─╯"]
    assert len(h.graph(h.rows())) == 11


def test_history_filter_and_find(demo: tuple[Store, dict[str, bytes]]) -> None:
    store, ids = demo
    h = History.from_store(store)
    rows = h.rows()
    assert [n.id for n in h.filter(rows, "fork")] == [ids["fork2"], ids["fork"]]  # a label fork.of, a message, a kind
    assert [n.id for n in h.filter(rows, "tag:known-good")] == [ids["good"]]
    assert [n.id for n in h.filter(rows, "nightly MERGE")] == [ids["merge"]]
    assert h.filter(rows, "  ") == rows
    assert [n.id for n in h.filter(rows, ids["triage"].hex()[:8])] == [ids["triage"]]
    first = h.find(rows, "nightly", 0)
    assert first is not None and rows[first].subject == "workflow:nightly"
    assert h.find(rows, "nightly", first, backwards=True) != first
    assert h.find(rows, "no such words", 0) is None


def test_history_of_a_checkpoint_file(demo: tuple[Store, dict[str, bytes]], tmp_path: Path) -> None:
    store, ids = demo
    f = CheckpointFile(export_demo(store, ids["recorded"], tmp_path / "r.ckpt"))
    try:
        h = History.from_file(f)
        assert len(h) == 1 and h.order[0].id == ids["recorded"]
        assert h.graph(h.rows()) == ["●"]  # its parent is not in the file
        assert len(Timeline.open(Checkpoint(f, f.id))) == 41
    finally:
        f.close()


def test_history_opens_from_the_catalog_without_reading_manifests(
    demo: tuple[Store, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ids = demo
    # the catalog vouches for a manifest file once it has settled (the default waits 3 s)
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)
    History.from_store(store)  # brings the catalog up to date
    fresh = ckptcli.open_store(store.location)
    History.from_store(fresh)
    assert fresh._manifest_cache == {}
