"""Replay, check and fork: the property that replaying a recorded tail from its snapshot
gives the live state (at every seq), `ckpt replay --check` catching a changed step function
at exactly the event where it diverges, and `ckpt fork` writing a branch of the history."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli.api import export_checkpoint, open_checkpoint, states_equal, take
from ckptcli.errors import ExitCode, InvalidInputError, NotFoundError, UsageError
from ckptcli.format.jsonview import to_json
from ckptcli.history.events import LABEL_FORK_AT, LABEL_FORK_OF, LABEL_SEQ, Event, Reducers, StepContext, ToolFailed
from ckptcli.history.recorder import CheckpointPolicy, Durability, Recorder
from ckptcli.history.replay import check, fork, iter_steps, load_tail, replay
from ckptcli.store.repository import Store
from tests import strategies
from tests.conftest import REPO, run_ckpt
from tests.replay_example import agent, agent_changed
from tests.test_diff import same_json

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# -- the property: replay == live ---------------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "$x"])
# mostly map keys, so that most events fit the state; sometimes list indices and the empty path
_paths = st.one_of(st.lists(_keys, min_size=1, max_size=3), st.lists(st.one_of(_keys, st.integers(-2, 2)), max_size=3))
_values = st.one_of(strategies.scalars, strategies.values(max_leaves=4))
_call_ids = st.sampled_from(["c1", "c2", "c3"])
_ops = st.one_of(
    st.tuples(st.just("memory.set"), st.fixed_dictionaries({"path": _paths, "value": _values})),
    st.tuples(st.just("memory.delete"), st.fixed_dictionaries({"path": _paths.filter(bool)})),
    st.tuples(st.just("plan.push"), st.fixed_dictionaries({"item": _values})),
    st.tuples(st.just("plan.pop"), st.just({})),
    st.tuples(st.just("plan.update"), st.fixed_dictionaries({"value": _values}, optional={"index": st.integers(-2, 2), "path": _paths})),
    st.tuples(
        st.just("tool.call"), st.fixed_dictionaries({"call_id": _call_ids, "tool": st.sampled_from(["search", "refund"]), "args": _values})
    ),
    st.tuples(
        st.just("tool.result"),
        st.fixed_dictionaries(
            {"call_id": _call_ids}, optional={"result": _values, "status": st.sampled_from(["ok", "error"]), "error": strategies.texts}
        ),
    ),
    st.tuples(
        st.just("message.append"),
        st.fixed_dictionaries({"message": _values}, optional={"sender": strategies.texts, "msg_id": strategies.texts}),
    ),
    st.tuples(st.just("checkpoint"), st.fixed_dictionaries({}, optional={"note": strategies.texts})),
    st.tuples(st.just("error"), st.fixed_dictionaries({"message": strategies.texts})),
    st.tuples(st.just("count:add"), st.fixed_dictionaries({"n": st.integers(-5, 5)})),
    st.tuples(st.just("TAKE"), st.just({})),  # take a checkpoint now
    st.tuples(st.just("REOPEN"), st.just({})),  # close the recorder and open it again (recovery)
)


def _count(state: dict[str, Any], event: Event) -> dict[str, Any]:
    ext = dict(state.get("ext", {}))
    ext["count"] = ext.get("count", 0) + event.fields["n"]
    return {**state, "ext": ext}


REDUCERS = Reducers({"count:add": _count})


@SETTINGS
@given(ops=st.lists(_ops, min_size=20, max_size=80), batch=st.integers(1, 6), every=st.one_of(st.none(), st.integers(1, 12)))
def test_replaying_a_recorded_tail_gives_the_live_state(ops: list[tuple[str, dict[str, Any]]], batch: int, every: int | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = ckptcli.init_store(Path(d) / "store")

        def open_rec() -> Recorder:
            return Recorder.open(
                store,
                "agent:prop",
                Path(d) / "j",
                reducers=REDUCERS,
                policy=CheckpointPolicy(every_events=every),
                durability=Durability(batch_size=batch, fsync="never"),
            )

        rec = open_rec()
        live = {0: rec.state}  # seq -> the live state right after it
        taken = [rec.base]
        try:
            for kind, fields in ops:
                if kind == "TAKE":
                    taken.append(rec.checkpoint().hex)
                    continue
                if kind == "REOPEN":
                    rec.close()
                    rec = open_rec()
                    assert states_equal(rec.state, live[rec.last_seq])
                    continue
                before, next_seq = rec.state, rec.next_seq
                try:
                    ev = rec.append(kind, **fields)
                except InvalidInputError:  # an event that does not fit: nothing recorded
                    assert rec.state is before and rec.next_seq == next_seq
                    continue
                live[ev.seq] = rec.state
                if rec.base != taken[-1]:
                    taken.append(rec.base)  # taken by the policy
            taken.append(rec.checkpoint().hex)
        finally:
            rec.close()
        for cid in taken:
            tail = load_tail(open_checkpoint(cid, store))
            for seq in range(tail.base_seq, tail.last_seq + 1):
                assert states_equal(replay(tail, to_seq=seq, reducers=REDUCERS), live[seq])
            for step in iter_steps(tail, reducers=REDUCERS):
                # the changes of each step, as a JSON Patch, turn the state before into the one after
                patch = [c.to_dict() for c in step.changes()]
                assert same_json(jsonpatch.apply_patch(to_json(step.before), patch), to_json(step.after)), patch
        assert states_equal(replay(open_checkpoint(taken[-1], store), reducers=REDUCERS), live[max(live)])


# -- replay through the API and the CLI ------------------------------------------------------------------


@pytest.fixture
def bot(store: Store, tmp_path: Path) -> tuple[Store, Path, str, dict[str, Any]]:
    """The support bot of docs/replay.md, recorded live: three user messages, one about a
    lost order (a refund). Returns the store, its path, the checkpoint and the live state."""
    rec = Recorder.open(store, "agent:support-bot", tmp_path / "bot.journal", tools=agent.TOOLS)
    for text in ("where is A-1", "and where is A-2", "any news on A-1"):
        rec.step(agent.step, "message.append", message={"role": "user", "content": text}, sender="user")
    cid = rec.checkpoint().hex
    live = rec.state
    rec.close()
    return store, tmp_path / "store", cid, live


def _seq_of(tail: Any, kind: str, **fields: Any) -> int:
    return next(e.seq for e in tail.events if e.kind == kind and all(e.fields.get(k) == v for k, v in fields.items()))


def test_replay_to_a_seq_or_a_time(bot: Any) -> None:
    store, _path, cid, live = bot
    ck = open_checkpoint(cid, store)
    tail = load_tail(ck)
    assert (tail.base_seq, tail.last_seq) == (0, len(tail.events))
    assert states_equal(replay(ck), live)
    assert replay(ck, to_seq=0) == {"memory": {}, "plan": [], "tools": []}
    third = tail.events[2]
    reached = [e for e in tail.events if e.ts <= third.ts][-1]  # ts never decreases; several events may share one
    assert reached.seq >= 3 and states_equal(replay(ck, to_time=third.ts), replay(ck, to_seq=reached.seq))
    assert replay(ck, to_time=0) == tail.snapshot
    with pytest.raises(NotFoundError, match=f"seq 99 is after checkpoint {cid[:12]}: its tail ends at seq {tail.last_seq}"):
        replay(ck, to_seq=99)
    with pytest.raises(UsageError):
        replay(ck, to_seq=1, to_time=1)


def test_cli_replay_prints_the_state(cli, bot: Any) -> None:  # type: ignore[no-untyped-def]
    store, path, cid, live = bot
    r = cli("replay", cid, "--store", path)
    assert r.code == 0, r.err
    assert json.loads(r.out) == to_json(live)
    assert f"replayed {len(load_tail(open_checkpoint(cid, store)).events)} of" in r.err
    doc = json.loads(cli("replay", cid[:10], "--store", path, "--json", "--to", "4").out)
    assert (doc["id"], doc["base_seq"], doc["seq"], doc["applied"]) == (cid, 0, 4, 4)
    assert doc["state"] == to_json(replay(open_checkpoint(cid, store), to_seq=4))
    assert json.loads(cli("replay", cid, "--store", path, "--json", "--to", "2000-01-01").out)["applied"] == 0
    last = load_tail(open_checkpoint(cid, store)).last_seq
    assert json.loads(cli("replay", cid, "--store", path, "--json", "--to", "2999-01-01T00:00").out)["seq"] == last


def test_cli_replay_step(cli, bot: Any) -> None:  # type: ignore[no-untyped-def]
    _store, path, cid, _live = bot
    r = cli("replay", cid, "--store", path, "--step", "--to", "4")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == f"snapshot of {cid[:12]} at seq 0"
    assert lines[1].startswith("#1  ") and lines[1].endswith("  message.append")
    assert '    + memory.messages: [{"role": "user", "content": "where is A-1"}]' in lines
    assert any(line.startswith("#3  ") and line.endswith("tool.call  (cause #1)") for line in lines)
    assert '    ~ tools[0].status: "pending" -> "ok"' in lines
    assert lines[-1] == "state at seq 4: 4 events applied"
    doc = json.loads(cli("replay", cid, "--store", path, "--step", "--json").out)
    state: Any = {"memory": {}, "plan": [], "tools": []}
    for row in doc["steps"]:
        state = jsonpatch.apply_patch(state, row["changes"])
    assert same_json(state, doc["state"]) and doc["steps"][0]["event"]["kind"] == "message.append"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--to", "99"], ExitCode.NOT_FOUND, "seq 99 is after checkpoint"),
        (["--to", "soon"], ExitCode.INVALID_INPUT, "--to 'soon' is neither a seq number nor a time"),
        (["--check", "x:y", "--step"], ExitCode.USAGE, "--check replays the whole tail"),
        (["--reducers", "nomodule"], ExitCode.USAGE, "--reducers 'nomodule' is not MODULE:NAME"),
    ],
)
def test_cli_replay_errors_are_one_line(cli, bot: Any, args: list[str], code: int, message: str) -> None:  # type: ignore[no-untyped-def]
    _store, path, cid, _live = bot
    r = cli("replay", cid, "--store", path, *args)
    assert r.code == code, r.err
    assert message in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_replay_of_events_that_are_not_valid(cli, store: Store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = take(store, {"memory": {}, "events": [{"seq": 1, "ts": 5, "kind": "plan.pop"}]}, subject="agent:x").hex
    r = cli("replay", bad, "--store", tmp_path / "store")
    assert r.code == ExitCode.INVALID_INPUT and "event 1 (plan.pop): the plan is empty" in r.err
    weird = take(
        store,
        {"memory": {}, "events": [{"seq": 2, "ts": 5, "kind": "plan.push", "item": 1}, {"seq": 2, "ts": 6, "kind": "plan.pop"}]},
        subject="agent:x",
    ).hex
    r = cli("replay", weird, "--store", tmp_path / "store")
    assert r.code == ExitCode.INVALID_INPUT and "events[1] has seq 2, not after the previous event's 2" in r.err
    plain = take(store, [1, 2, 3], subject="agent:x").hex  # no tail at all: the state as it is
    assert json.loads(cli("replay", plain, "--store", tmp_path / "store").out) == [1, 2, 3]


def test_replay_names_the_rule_of_a_tail_as_cat_does(cli, store: Store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """replay read a tail with its own copy of the rules: its errors said "a tail is in
    increasing seq order" (no spec section) and gave no hint for a non-list, where show
    named the rule and formats/events.md."""
    spec = "formats/events.md#checkpoints-snapshot-and-tail"
    unordered = take(
        store,
        {"memory": {}, "events": [{"seq": 3, "ts": 5, "kind": "plan.push", "item": 1}, {"seq": 2, "ts": 6, "kind": "plan.pop"}]},
        subject="agent:x",
    ).hex
    not_a_list = take(store, {"memory": {}, "events": {"seq": 1}}, subject="agent:x").hex
    for cid, what, rule in [
        (unordered, "events[1] has seq 2, not after the previous event's 3", "strictly increasing seq order"),
        (not_a_list, "the events section is not a list of events", "a tail is a list of events"),
    ]:
        r = cli("replay", cid, "--store", tmp_path / "store")
        assert r.code == ExitCode.INVALID_INPUT, r.err
        assert what in r.err and rule in r.err and spec in r.err, r.err
    shown = cli("show", unordered, "--store", tmp_path / "store")  # the same words as show's warning
    assert "strictly increasing seq order" in shown.err and spec in shown.err, shown.err


def test_replay_a_checkpoint_file(cli, bot: Any, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _path, cid, live = bot
    f = tmp_path / "bot.ckpt"
    export_checkpoint(open_checkpoint(cid, store), f)
    assert json.loads(cli("replay", f).out) == to_json(live)


# -- check ---------------------------------------------------------------------------------------------------


def test_the_recorded_step_function_passes(bot: Any) -> None:
    store, path, cid, _live = bot
    report = check(open_checkpoint(cid, store), agent.step)
    assert report.ok and report.steps == 3 and report.unchecked == 0 and report.partial_step is None
    assert report.matched == report.last_seq - 3  # every event but the three inputs
    p = run_ckpt("replay", cid, "--check", "tests.replay_example.agent:step", "--store", path, cwd=REPO)
    assert p.returncode == 0, p.stderr.decode()
    assert (
        p.stdout.decode()
        == f"check passed: 3 steps re-run, {report.matched} emitted events matched (checkpoint {cid[:12]}, seq 1..{report.last_seq})\n"
    )


def test_a_changed_tool_argument_is_caught_at_that_event(bot: Any) -> None:
    store, path, cid, _live = bot
    refund_seq = _seq_of(load_tail(open_checkpoint(cid, store)), "tool.call", tool="payments.refund")
    p = run_ckpt("replay", cid, "--check", "tests.replay_example.agent_changed:step", "--store", path, cwd=REPO)
    assert p.returncode == ExitCode.DIVERGED == 13, p.stderr.decode()
    out = p.stdout.decode().splitlines()
    assert (
        out[0] == f"diverged at seq {refund_seq}, in the step for input seq {refund_seq - 5}: the replayed step emitted a different event"
    )
    recorded, replayed = (json.loads(line.split(": ", 1)[1]) for line in out[1:3])
    assert out[1].startswith("  recorded: ") and out[2].startswith("  replayed: ")
    assert recorded["args"] == {"order": "A-2", "amount": 45} and replayed["args"] == {"order": "A-2", "amount": 49}
    assert recorded["tool"] == replayed["tool"] == "payments.refund"
    assert (
        p.stderr.decode()
        == f"ckpt: error: the step function diverged from the recording at seq {refund_seq}; see above: the recorded event and the replayed one\n"  # noqa: E501
    )
    p = run_ckpt("replay", cid, "--check", "tests.replay_example.agent_changed:step", "--store", path, "--json", cwd=REPO)
    assert p.returncode == 13
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["divergence"]["seq"] == refund_seq
    assert doc["divergence"]["expected"]["args"]["amount"] == 45 and doc["divergence"]["actual"]["args"]["amount"] == 49


def test_one_extra_memory_write_is_caught_at_that_event(bot: Any) -> None:
    store, path, cid, _live = bot
    tail = load_tail(open_checkpoint(cid, store))
    first_pop = _seq_of(tail, "plan.pop")  # in the first step (a shipped order), after memory.set orders/A-1
    p = run_ckpt("replay", cid, "--check", "tests.replay_example.agent_extra:step", "--store", path, "--json", cwd=REPO)
    assert p.returncode == 13, p.stderr.decode()
    d = json.loads(p.stdout)["divergence"]
    assert d["seq"] == first_pop and d["input_seq"] == 1
    assert d["expected"] == {"kind": "plan.pop", "cause": 1}
    assert d["actual"] == {"kind": "memory.set", "path": ["last_shipped"], "value": "A-1", "cause": 1}


def test_check_reports_missing_events_errors_and_other_tools(bot: Any) -> None:
    store, _path, cid, _live = bot
    ck = open_checkpoint(cid, store)
    tail = load_tail(ck)

    def stops_early(ctx: StepContext, event: Event) -> None:
        order = event.get("message")["content"].split()[-1]
        ctx.emit("plan.push", item={"step": "answer", "order": order})

    d = check(tail, stops_early).divergence
    assert d is not None and d.seq == 3 and d.actual is None and d.expected is not None and d.expected["kind"] == "tool.call"
    assert d.reason == "the replayed step returned without emitting it"

    def raises(ctx: StepContext, event: Event) -> None:
        raise KeyError("memory")

    d = check(tail, raises).divergence
    assert d is not None and d.seq == 2 and d.actual == {"kind": "error", "message": "'memory'", "type": "KeyError", "cause": 1}

    def other_tool(ctx: StepContext, event: Event) -> None:
        order = event.get("message")["content"].split()[-1]
        ctx.emit("plan.push", item={"step": "answer", "order": order})
        ctx.tool("orders.search", {"order": order})

    d = check(tail, other_tool).divergence
    assert d is not None and d.seq == 3 and d.expected is not None and d.expected["tool"] == "orders.lookup" and d.actual is not None
    assert d.actual["tool"] == "orders.search"

    def emits_more(ctx: StepContext, event: Event) -> None:
        agent.step(ctx, event)
        ctx.emit("checkpoint", note="one more")

    d = check(tail, emits_more).divergence
    assert (
        d is not None
        and d.expected is None
        and d.seq == tail.events[1].seq + 6
        and d.actual == {"kind": "checkpoint", "note": "one more", "cause": 1}
    )


def test_recorded_tool_failures_are_replayed(store: Store, tmp_path: Path) -> None:
    def flaky(args: Any) -> Any:
        raise ConnectionError("reset by peer")

    def step(ctx: StepContext, event: Event) -> None:
        try:
            ctx.tool("fetch", {"url": event.get("message")})
        except ToolFailed as exc:
            ctx.emit("memory.set", path=["last_error"], value=exc.error)

    with Recorder.open(store, "agent:f", tmp_path / "j", tools={"fetch": flaky}) as rec:
        rec.step(step, "message.append", message="http://x", sender="user")
        cid = rec.checkpoint().hex
    report = check(open_checkpoint(cid, store), step)
    assert report.ok and report.matched == 3


def test_a_checkpoint_in_the_middle_of_a_step(store: Store, tmp_path: Path) -> None:
    """A risky tool's checkpoint cuts a step in two: the first checkpoint checks it up to the
    cut; the second re-runs it from its input, in the first one's tail, so a change after
    the cut (the refund itself) is caught too."""
    with Recorder.open(
        store, "agent:support-bot", tmp_path / "j", tools=agent.TOOLS, policy=CheckpointPolicy(risky_tools={"payments.refund"})
    ) as rec:
        rec.step(agent.step, "message.append", message={"role": "user", "content": "where is A-2"}, sender="user")
        cut = open_checkpoint(rec.base, store)
        after = open_checkpoint(rec.checkpoint().hex, store)
    first = check(cut, agent.step)
    assert first.ok and first.partial_step == 1 and first.from_seq is None
    second = check(after, agent.step)
    assert second.ok and second.from_seq == 1 and second.steps == 1 and second.unchecked == 0
    refund = _seq_of(load_tail(after), "tool.call", tool="payments.refund")
    assert load_tail(after).events[0].seq == refund  # the cut is just before the risky call
    d = check(after, agent_changed.step).divergence
    assert d is not None and d.seq == refund and d.input_seq == 1
    # without the parent (a bare tail, or a checkpoint file), that step's rest is applied unchecked
    alone = check(load_tail(after), agent_changed.step)
    assert alone.ok and alone.unchecked == len(load_tail(after).events)
    f = tmp_path / "after.ckpt"
    export_checkpoint(after, f)
    assert check(open_checkpoint(str(f)), agent_changed.step).unchecked == len(load_tail(after).events)


def test_check_needs_the_reducers_of_custom_kinds(store: Store) -> None:
    cid = take(store, {"memory": {}, "events": [{"seq": 1, "ts": 1, "kind": "mine:thing"}]}, subject="agent:x").hex
    with pytest.raises(NotFoundError, match="no reducer for event kind 'mine:thing'"):
        check(open_checkpoint(cid, store), agent.step)


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("tests.replay_example.nothere:step", ExitCode.NOT_FOUND, "no module named 'tests.replay_example.nothere'"),
        ("tests.replay_example.agent:nope", ExitCode.NOT_FOUND, "tests.replay_example.agent has no attribute 'nope'"),
        ("tests.replay_example.agent", ExitCode.USAGE, "is not MODULE:FUNC"),
        ("tests.replay_example.agent:ORDERS", ExitCode.INVALID_INPUT, "is a dict, not a function"),
        ("broken_agent:step", ExitCode.INVALID_INPUT, "importing broken_agent failed: RuntimeError: no API key"),
    ],
)
def test_check_import_errors_are_one_line(bot: Any, tmp_path: Path, spec: str, code: int, message: str) -> None:
    _store, path, cid, _live = bot
    work = tmp_path / "project"
    work.mkdir()
    (work / "broken_agent.py").write_text("raise RuntimeError('no API key')\n")
    (work / "tests").symlink_to(REPO / "tests")  # run from a project directory: its modules import
    p = run_ckpt("replay", cid, "--check", spec, "--store", path, cwd=work)
    err = p.stderr.decode()
    assert p.returncode == code, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -- fork ----------------------------------------------------------------------------------------------------


def test_fork_writes_a_branch_of_the_history(cli, bot: Any) -> None:  # type: ignore[no-untyped-def]
    store, path, cid, _live = bot
    original = open_checkpoint(cid, store)
    before_bytes = store.manifest_bytes(original.id)
    before_state = original.state()
    r = cli("fork", cid[:12], "--at", "7", "--store", path, "--json", "--branch", "retry", "-m", "try again")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["parent"], doc["at"], doc["subject"], doc["branch"]) == (cid, 7, "agent:support-bot", "retry")
    store = ckptcli.open_store(path)  # the fork was written through another Store object: read the index again
    original = open_checkpoint(cid, store)
    new = open_checkpoint(doc["id"], store)
    assert new.manifest.parents == [original.id] and new.manifest.message == "try again"
    assert new.manifest.labels[LABEL_FORK_OF] == cid and new.manifest.labels[LABEL_FORK_AT] == "7" and new.manifest.labels[LABEL_SEQ] == "7"
    tail = load_tail(new)
    assert tail.events == [] and tail.base_seq == 7
    assert states_equal(replay(new), replay(original, to_seq=7))
    assert json.loads(cli("replay", doc["id"], "--store", path).out) == json.loads(cli("replay", cid, "--to", "7", "--store", path).out)
    assert open_checkpoint("retry", store).hex == doc["id"]
    assert store.manifest_bytes(original.id) == before_bytes and original.state() == before_state  # the original is unchanged
    # a recorder carries on from the fork: seq 8 next, its checkpoints children of the fork
    with Recorder.open(store, "agent:support-bot", path.parent / "retry.journal", base=doc["id"], tools=agent.TOOLS) as rec:
        assert rec.next_seq == 8 and states_equal(rec.state, replay(original, to_seq=7))
        rec.step(agent.step, "message.append", message={"role": "user", "content": "what about A-1"}, sender="user")
        child = rec.checkpoint()
    assert child.manifest.parents == [new.id] and load_tail(open_checkpoint(child.hex, store)).events[0].seq == 8


def test_fork_errors(cli, bot: Any, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, path, cid, _live = bot
    r = cli("fork", cid, "--at", "500", "--store", path)
    assert r.code == ExitCode.NOT_FOUND and "seq 500 is after checkpoint" in r.err
    r = cli("fork", cid, "--store", path)
    assert r.code == ExitCode.USAGE
    f = tmp_path / "bot.ckpt"
    export_checkpoint(open_checkpoint(cid, store), f)
    with pytest.raises(InvalidInputError, match="is a checkpoint file"):
        fork(store, str(f), 3)
    r = cli("fork", cid, "--at", "3", "--branch", "no/slashes", "--store", path)
    assert r.code == ExitCode.INVALID_INPUT


def test_the_docs_show_the_example_verbatim() -> None:
    doc = (REPO / "docs" / "replay.md").read_text()
    source = (REPO / "tests" / "replay_example" / "agent.py").read_text()
    assert source.strip() in doc


def test_a_step_function_that_calls_sys_exit_is_one_line(bot: Any, tmp_path: Path) -> None:
    # sys.exit(0) in a step ended `ckpt replay --check` with 0 and no output, as if it passed
    _store, path, cid, _live = bot
    (tmp_path / "exiting_step.py").write_text("import sys\n\ndef step(ctx, event):\n    sys.exit(0)\n")
    p = run_ckpt("replay", cid, "--check", "exiting_step:step", "--store", path, env={"PYTHONPATH": str(tmp_path)})
    err = p.stderr.decode()
    assert p.returncode == ExitCode.INVALID_INPUT, err
    assert err.count("\n") == 1 and "the step function exiting_step:step called sys.exit(0) at event" in err, err
    assert p.stdout == b""
    # named as the user gave it, not by the function's own name
    (tmp_path / "exiting_step.py").write_text("import sys\n\ndef step(ctx, event):\n    sys.exit(3)\n\nalias = step\n")
    p = run_ckpt("replay", cid, "--check", "exiting_step:alias", "--store", path, env={"PYTHONPATH": str(tmp_path)})
    err = p.stderr.decode()
    assert p.returncode == ExitCode.INVALID_INPUT and "the step function exiting_step:alias called sys.exit(3) at" in err, err


def test_a_step_functions_prints_go_to_stderr_not_into_the_json(bot: Any, tmp_path: Path) -> None:
    _store, path, cid, _live = bot
    (tmp_path / "noisy_step.py").write_text(
        "import os\n"
        "from tests.replay_example.agent import step as _step\n"
        "print('noise at import')\n"
        "os.write(1, b'raw noise at import\\n')\n\n\n"
        "def step(ctx, event):\n"
        "    print('noise in the step')\n"
        "    os.write(1, b'raw noise in the step\\n')\n"
        "    return _step(ctx, event)\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    p = run_ckpt("replay", cid, "--check", "noisy_step:step", "--store", path, "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ok"] is True  # nothing but the JSON on stdout
    err = p.stderr.decode()
    for line in ("noise at import", "raw noise at import", "noise in the step", "raw noise in the step"):
        assert line in err
