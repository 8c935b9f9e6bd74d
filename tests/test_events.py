"""Events and reducers: validation with clear messages, the exact semantics of each
standard kind, purity (the state given is never changed, unchanged parts are shared),
and the registry of custom kinds, entry points included."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptcli.errors import InvalidInputError, NotFoundError
from ckptcli.history.events import (
    STANDARD_KINDS,
    Event,
    Reducers,
    check_state,
    delete_in,
    event_from_map,
    make_event,
    normalize,
    set_in,
)

EMPTY: dict[str, Any] = {"memory": {}, "plan": [], "tools": []}


def ev(kind: str, seq: int = 1, ts: int = 1000, **fields: Any) -> Event:
    return make_event(seq, ts, kind, fields)


def apply(state: dict[str, Any], *events: Event, reducers: Reducers | None = None) -> dict[str, Any]:
    red = reducers or Reducers()
    for e in events:
        before = copy.deepcopy(state)
        new = red.apply(state, e)
        assert state == before, f"{e.kind} changed the state it was given"
        state = new
    return state


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "ts", "kind", "fields", "message"),
    [
        (0, 1, "plan.pop", {}, "seq must be an integer >= 1"),
        (True, 1, "plan.pop", {}, "seq must be an integer >= 1"),
        (1, -1, "plan.pop", {}, "ts must be an integer >= 0"),
        (1, 1, "memory.sett", {}, "unknown event kind 'memory.sett'"),
        (1, 1, "Bad:kind", {}, "unknown event kind"),
        (1, 1, 7, {}, "kind must be a string"),
        (1, 1, "memory.set", {"path": ["a"]}, "missing field 'value'"),
        (1, 1, "memory.set", {"path": "a", "value": 1}, "field 'path' must be a list"),
        (1, 1, "memory.set", {"path": ["a", 1.5], "value": 1}, "is not a map key (string) or list index"),
        (1, 1, "memory.set", {"path": [True], "value": 1}, "is not a map key"),
        (1, 1, "tool.call", {"call_id": 3, "tool": "t", "args": {}}, "field 'call_id' must be a string"),
        (1, 1, "tool.result", {"call_id": "c", "status": "fine"}, "must be 'ok' or 'error'"),
        (1, 1, "plan.update", {"value": 1, "index": "top"}, "field 'index' must be an integer"),
        (1, 1, "plan.push", {"item": 1, "seq": 4}, "'seq' is set by the recorder"),
        (3, 1, "plan.push", {"item": 1, "cause": 3}, "cause 3 must be the seq of an earlier event"),
        (1, 1, "plan.push", {"item": (1, 2)}, "a tuple cannot be stored; use a list"),
        (1, 1, "plan.push", {"item": {1: "x"}}, "map key 1 is not a string"),
        (1, 1, "plan.push", {"item": {"a"}}, "a set cannot be stored"),
        (1, 1, "plan.push", {"item": 2 ** (8 * 2000)}, "larger than a checkpoint holds"),
        (1, 1, "plan.push", {"item": {"k" * 5000: 1}}, "longer than 4096 bytes"),
        (1, 1, "error", {}, "missing field 'message'"),
    ],
)
def test_bad_events_are_refused_with_a_clear_message(seq: Any, ts: Any, kind: Any, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        make_event(seq, ts, kind, fields)
    assert message in str(info.value)


def test_every_standard_kind_has_a_reducer_and_valid_events_round_trip() -> None:
    samples = {
        "memory.set": {"path": ["a"], "value": 1},
        "memory.delete": {"path": ["a"]},
        "plan.push": {"item": "x"},
        "plan.pop": {},
        "plan.update": {"value": 2},
        "tool.call": {"call_id": "c", "tool": "t", "args": {"q": 1}, "key": "k"},
        "tool.result": {"call_id": "c", "result": None},
        "message.append": {"message": {"role": "user"}, "sender": "u", "receiver": "bot", "msg_id": "m1"},
        "checkpoint": {"note": "here"},
        "error": {"message": "boom", "type": "ValueError"},
    }
    assert set(samples) == set(STANDARD_KINDS)
    for i, (kind, fields) in enumerate(samples.items(), 1):
        e = make_event(i, 5, kind, fields)
        assert event_from_map(e.to_map(), "x") == e
        assert e.get("kind") == kind and e.get("seq") == i
        assert Reducers().reducer(kind)


def test_make_event_copies_values_so_the_caller_keeps_theirs() -> None:
    value = {"list": [1, 2], "nested": {"x": b"\x00"}}
    e = ev("memory.set", path=["v"], value=value)
    value["list"].append(3)
    assert e.fields["value"] == {"list": [1, 2], "nested": {"x": b"\x00"}}
    assert normalize([{"a": [1.5, None, True, 2**70]}], "x") == [{"a": [1.5, None, True, 2**70]}]


def test_event_from_map_names_the_place() -> None:
    with pytest.raises(InvalidInputError, match=r"events\[3\]: the event has no 'ts'"):
        event_from_map({"seq": 1, "kind": "plan.pop"}, "events[3]")
    with pytest.raises(InvalidInputError, match=r"events\[0\]: an event must be a map, not a list"):
        event_from_map([1], "events[0]")


# -- the standard reducers ----------------------------------------------------------------------------


def test_memory_set_and_delete() -> None:
    s = apply(EMPTY, ev("memory.set", path=["user", "name"], value="Ada"))
    assert s["memory"] == {"user": {"name": "Ada"}}  # maps on the way are created
    s = apply(s, ev("memory.set", path=["user", "langs"], value=["en"]))
    s = apply(s, ev("memory.set", path=["user", "langs", 1], value="fr"))  # index == length: append
    s = apply(s, ev("memory.set", path=["user", "langs", -1], value="de"))  # negative: from the end
    assert s["memory"]["user"] == {"name": "Ada", "langs": ["en", "de"]}
    s = apply(s, ev("memory.delete", path=["user", "langs", 0]))
    s = apply(s, ev("memory.delete", path=["user", "name"]))
    assert s["memory"] == {"user": {"langs": ["de"]}}
    same = Reducers().apply(s, ev("memory.delete", path=["nobody", "here"]))
    assert same is s  # nothing to remove: no change at all
    s = apply(s, ev("memory.set", path=[], value={"fresh": True}))  # [] replaces the whole memory
    assert s == {"memory": {"fresh": True}, "plan": [], "tools": []}


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (
            [ev("memory.set", path=["a"], value=1), ev("memory.set", seq=2, path=["a", "b"], value=2)],
            "event 2 (memory.set): /memory/a is an integer, not a map or list",
        ),
        (
            [ev("memory.set", path=["l"], value=[]), ev("memory.set", seq=2, path=["l", 1], value=2)],
            "/memory/l/1: index 1 is out of range (the list has 0 items)",
        ),
        (
            [ev("memory.set", path=["l"], value=[]), ev("memory.set", seq=2, path=["l", "x"], value=2)],
            "/memory/l is a list: 'x' is not an index",
        ),
        ([ev("memory.set", path=[0], value=1)], "/memory is a map: 0 is not a key"),
        ([ev("memory.delete", path=[])], "the path is empty"),
        ([ev("plan.pop")], "event 1 (plan.pop): the plan is empty"),
        ([ev("plan.update", value=1)], "/plan/-1: index -1 is out of range"),
        ([ev("tool.result", call_id="c9")], "no pending tool call 'c9'"),
    ],
)
def test_events_that_do_not_fit_the_state(events: list[Event], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        apply(EMPTY, *events)
    assert message in str(info.value)


def test_plan_push_pop_update() -> None:
    s = apply(
        EMPTY,
        ev("plan.push", item={"step": "a", "status": "todo"}),
        ev("plan.push", seq=2, item={"step": "b", "status": "todo"}),
        ev("plan.update", seq=3, path=["status"], value="running"),  # the top by default
        ev("plan.update", seq=4, index=0, value={"step": "a2"}),  # path [] replaces the item
    )
    assert s["plan"] == [{"step": "a2"}, {"step": "b", "status": "running"}]
    s = apply(s, ev("plan.pop", seq=5))
    assert s["plan"] == [{"step": "a2"}]


def test_tool_call_and_result_build_the_log() -> None:
    s = apply(
        EMPTY,
        ev("tool.call", seq=1, ts=100, call_id="c1", tool="search", args={"q": "x"}, key="idem-1"),
        ev("tool.call", seq=2, ts=150, call_id="c2", tool="fetch", args=[1]),
        ev("tool.result", seq=3, ts=400, call_id="c1", result=["hit"]),
        ev("tool.result", seq=4, ts=500, call_id="c2", status="error", error="timeout"),
    )
    assert s["tools"] == [
        {
            "call_id": "c1",
            "tool": "search",
            "args": {"q": "x"},
            "key": "idem-1",
            "status": "ok",
            "seq": 1,
            "ts": 100,
            "result": ["hit"],
            "result_seq": 3,
            "duration_ns": 300,
        },
        {
            "call_id": "c2",
            "tool": "fetch",
            "args": [1],
            "status": "error",
            "seq": 2,
            "ts": 150,
            "error": "timeout",
            "result_seq": 4,
            "duration_ns": 350,
        },
    ]
    with pytest.raises(InvalidInputError, match="no pending tool call 'c1'"):
        apply(s, ev("tool.result", seq=5, call_id="c1"))  # answered already


def test_message_append_checkpoint_and_error() -> None:
    s = apply(EMPTY, ev("message.append", message={"role": "user", "content": "hi"}, sender="user", msg_id="m1"))
    assert s["memory"]["messages"] == [{"role": "user", "content": "hi"}]
    for e in (ev("checkpoint", seq=2, note="x"), ev("error", seq=3, message="boom")):
        assert Reducers().apply(s, e) is s


def test_reducers_share_what_they_do_not_change() -> None:
    big = {"memory": {"a": {"deep": list(range(100))}, "b": {"x": 1}}, "plan": [{"p": 1}], "tools": []}
    s = Reducers().apply(big, ev("memory.set", path=["b", "x"], value=2))
    assert s["memory"]["a"] is big["memory"]["a"] and s["plan"] is big["plan"]
    assert big["memory"]["b"] == {"x": 1}


def test_set_in_and_delete_in_helpers() -> None:
    root = {"a": [1, {"b": 2}]}
    assert set_in(root, ["a", 1, "c"], 3) == {"a": [1, {"b": 2, "c": 3}]}
    assert delete_in(root, ["a", 1, "b"]) == {"a": [1, {}]}
    assert delete_in(root, ["zz", "b"]) is root
    assert root == {"a": [1, {"b": 2}]}


def test_check_state() -> None:
    assert check_state({"memory": {}, "ext": {"my.adapter": 1}}) is not None
    with pytest.raises(InvalidInputError, match="has a key 'events'"):
        check_state({"memory": {}, "events": []})
    with pytest.raises(InvalidInputError, match="must be a map"):
        check_state([1])
    with pytest.raises(InvalidInputError, match="ext namespace 'Bad NS' is not valid"):
        check_state({"ext": {"Bad NS": 1}})


# -- custom kinds -----------------------------------------------------------------------------------------


def _counter(state: dict[str, Any], event: Event) -> dict[str, Any]:
    ext = dict(state.get("ext", {}))
    ext["counter"] = ext.get("counter", 0) + event.fields.get("by", 1)
    return {**state, "ext": ext}


def test_custom_kinds_through_the_registry() -> None:
    red = Reducers({"counter:add": _counter})
    s = apply(EMPTY, ev("counter:add", by=2), ev("counter:add", seq=2), reducers=red)
    assert s["ext"] == {"counter": 3}
    with pytest.raises(InvalidInputError, match=r"'memory\.set' is a standard kind"):
        Reducers({"memory.set": _counter})
    with pytest.raises(InvalidInputError, match="'nonamespace' is not a custom event kind"):
        Reducers({"nonamespace": _counter})
    with pytest.raises(NotFoundError, match="no reducer for event kind 'other:thing'") as info:
        Reducers().apply(EMPTY, ev("other:thing"))
    assert "install the adapter that owns 'other'" in str(info.value)


def test_a_failing_or_misbehaving_custom_reducer_is_one_clear_error() -> None:
    def boom(state: dict[str, Any], event: Event) -> dict[str, Any]:
        raise KeyError("nope")

    with pytest.raises(InvalidInputError, match=r"event 1 \(x:boom\): reducer .*boom raised KeyError: 'nope'") as info:
        Reducers({"x:boom": boom}).apply(EMPTY, ev("x:boom"))
    assert isinstance(info.value.__cause__, KeyError)  # CKPT_DEBUG shows where
    with pytest.raises(InvalidInputError, match="the reducer's result must be a map"):
        Reducers({"x:list": lambda s, e: [1]}).apply(EMPTY, ev("x:list"))  # type: ignore[arg-type, return-value]
    with pytest.raises(InvalidInputError, match="has a key 'events'"):
        Reducers({"x:ev": lambda s, e: {**s, "events": []}}).apply(EMPTY, ev("x:ev"))


def test_an_installed_adapter_provides_reducers_through_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real distribution on sys.path with an entry point in group ckptcli.reducers."""
    (tmp_path / "tally_adapter.py").write_text(
        "def add(state, event):\n"
        "    ext = dict(state.get('ext', {}))\n"
        "    ext['tally'] = ext.get('tally', 0) + event.fields['n']\n"
        "    return {**state, 'ext': ext}\n"
        "REDUCERS = {'tally:add': add}\n"
        "WRONG = {'other:add': add}\n"
    )
    dist = tmp_path / "tally_adapter-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tally-adapter\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ckptcli.reducers]\ntally = tally_adapter:REDUCERS\nwrong = tally_adapter:WRONG\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tally_adapter", raising=False)
    from ckptcli.history.events import installed_namespaces

    assert {"tally", "wrong"} <= set(installed_namespaces())
    s = apply(EMPTY, ev("tally:add", n=2), ev("tally:add", seq=2, n=5))
    assert s["ext"] == {"tally": 7}
    with pytest.raises(InvalidInputError, match="'other:add' is not in its namespace 'wrong'"):
        Reducers().apply(EMPTY, ev("wrong:add", n=1))
    with pytest.raises(NotFoundError, match=r"installed reducer namespaces: .*tally"):
        Reducers().apply(EMPTY, ev("tally:unknown"))
    with pytest.raises(NotFoundError):
        Reducers(entry_points=False).apply(EMPTY, ev("tally:add", n=1))


# -- runs that change in place what they copied (apply_all, a timeline between kept states) --------

_KEYS = ["a", "b", "messages"]


@st.composite
def _runs(draw: st.DrawFn) -> tuple[dict[str, Any], list[Event]]:
    """A start state and a run of events that each fit the state before them (found by
    applying them one by one with plain `apply`, dropping those that do not fit)."""
    start = {"memory": {"a": {"x": [1, 2]}, "messages": [{"m": 0}]}, "plan": [{"s": "p0"}], "tools": []}
    red = Reducers({"x:dup": _dup})
    state: dict[str, Any] = start
    events: list[Event] = []
    calls = 0
    for _ in range(draw(st.integers(0, 60))):
        seq = len(events) + 1
        which = draw(st.sampled_from(["set", "set_deep", "delete", "push", "pop", "update", "call", "result", "append", "dup"]))
        key = draw(st.sampled_from(_KEYS))
        value = draw(
            st.one_of(
                st.integers(0, 9),
                st.lists(st.integers(0, 9), max_size=3),
                st.dictionaries(st.sampled_from("xyz"), st.integers(0, 9), max_size=2),
            )
        )
        if which == "set":
            e = ev("memory.set", seq, path=[key], value=value)
        elif which == "set_deep":
            e = ev("memory.set", seq, path=[key, draw(st.sampled_from(["x", "y"]))], value=value)
        elif which == "delete":
            e = ev("memory.delete", seq, path=[key])
        elif which == "push":
            e = ev("plan.push", seq, item={"s": f"p{seq}"})
        elif which == "pop":
            e = ev("plan.pop", seq)
        elif which == "update":
            e = ev("plan.update", seq, value=value, path=["s"])
        elif which == "call":
            calls += 1
            e = ev("tool.call", seq, call_id=f"c{calls}", tool="t", args={"v": value})
        elif which == "result":
            e = ev("tool.result", seq, call_id=f"c{draw(st.integers(1, max(1, calls)))}", result=value)
        elif which == "append":
            e = ev("message.append", seq, message={"m": seq})
        else:
            e = ev("x:dup", seq)
        try:
            state = red.apply(state, e)
        except InvalidInputError:
            continue
        events.append(e if e.seq == len(events) + 1 else make_event(len(events) + 1, e.ts, e.kind, e.fields))
    return start, events


def _dup(state: dict[str, Any], event: Event) -> dict[str, Any]:
    """A custom reducer that puts one container in two places (allowed: states are values)."""
    memory = dict(state.get("memory", {}))
    messages = memory.get("messages")
    if isinstance(messages, list):
        memory["copy_of_messages"] = messages
    return {**state, "memory": memory}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs())
def test_apply_all_changes_in_place_only_what_it_copied(run: tuple[dict[str, Any], list[Event]]) -> None:
    """apply_all (which changes in place the containers it copied itself) gives the same
    state as applying the events one by one, and leaves the start state, the events'
    values and every state a custom reducer saw as they were."""
    start, events = run
    red = Reducers({"x:dup": _dup})
    start_before, events_before = copy.deepcopy(start), copy.deepcopy([e.fields for e in events])
    stepwise = [start]
    for e in events:
        stepwise.append(red.apply(stepwise[-1], e))
    seen = copy.deepcopy(stepwise)
    assert red.apply_all(start, events) == stepwise[-1]
    assert start == start_before and [e.fields for e in events] == events_before
    assert stepwise == seen, "a state made one event at a time was changed afterwards"
    # a run resumed from a state it did not make copies that state first
    half = len(events) // 2
    mid = red.apply_all(start, events[:half])
    mid_before = copy.deepcopy(mid)
    assert red.apply_all(mid, events[half:]) == stepwise[-1] and mid == mid_before


def test_a_failing_event_in_a_run_leaves_the_states_as_they_were() -> None:
    red = Reducers()
    start = {"memory": {"messages": [1]}, "plan": [], "tools": []}
    owned: dict[int, Any] = {}
    s = red.apply(start, ev("message.append", 1, message=2), owned)
    kept = copy.deepcopy(s)
    for bad in (ev("plan.pop", 2), ev("memory.set", 2, path=["messages", "k"], value=1), ev("tool.result", 2, call_id="nope")):
        with pytest.raises(InvalidInputError):
            red.apply(s, bad, owned)
        assert s == kept
    assert start == {"memory": {"messages": [1]}, "plan": [], "tools": []}
