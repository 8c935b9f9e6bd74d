"""The recorder: appends checked before anything is written, batching and fsync policies,
checkpoints by policy (every N events, every T seconds, before risky tools, on demand),
live step functions, and recovery: torn journal tails, crashes between a checkpoint and
the journal's replacement, and a real process killed with SIGKILL mid-append."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, states_equal
from ckptcli.errors import ConflictError, CorruptError, InvalidInputError, LockError, NotFoundError, StoreIOError, UsageError
from ckptcli.history.events import LABEL_RUN, LABEL_SEQ, Event, Reducers, StepContext, ToolFailed, make_event
from ckptcli.history.recorder import MAGIC, CheckpointPolicy, Durability, Recorder, read_journal
from ckptcli.history.replay import load_tail, replay
from ckptcli.store.repository import Store
from tests.conftest import REPO


def _open(store: Store, journal: Path, **kw: Any) -> Recorder:
    return Recorder.open(store, "agent:bot", journal, **kw)


def _journal_events(journal: Path) -> list[int]:
    return [r["seq"] for r in read_journal(journal).records]


def test_append_applies_records_and_returns_the_event(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "bot.journal"
    with _open(store, j, durability=Durability(batch_size=1)) as rec:
        first = open_checkpoint(rec.base, store)
        assert first.manifest.parents == [] and first.manifest.labels[LABEL_SEQ] == "0"
        assert load_tail(first).snapshot == {"memory": {}, "plan": [], "tools": []}
        e1 = rec.append("memory.set", path=["goal"], value="triage")
        e2 = rec.append("plan.push", item="look up order")
        assert (e1.seq, e2.seq, rec.last_seq, rec.next_seq) == (1, 2, 2, 3)
        assert e2.ts >= e1.ts > 0
        assert rec.state == {"memory": {"goal": "triage"}, "plan": ["look up order"], "tools": []}
        assert [e.seq for e in rec.tail] == [1, 2]
        assert _journal_events(j) == [1, 2]


def test_a_refused_event_changes_nothing(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "bot.journal"
    with _open(store, j, durability=Durability(batch_size=1)) as rec:
        rec.append("plan.push", item=1)
        size = j.stat().st_size
        state = rec.state
        for kind, fields in [
            ("plan.update", {"value": 1, "index": 5}),
            ("memory.set", {"path": ["x"], "value": (1,)}),
            ("memory.set", {"path": ["s"], "value": "\udc80"}),
            ("nope", {}),
        ]:
            with pytest.raises(InvalidInputError):
                rec.append(kind, **fields)
        assert rec.state is state and rec.next_seq == 2 and j.stat().st_size == size
        assert rec.append("plan.pop").seq == 2


def test_appends_change_in_place_only_what_nobody_was_given(store: Store, tmp_path: Path) -> None:
    """Appends change the live state's containers in place once they copied them (an
    append to a long list is O(1)); a state handed out by `state`, and the snapshot a
    checkpoint took, are never changed afterwards."""
    import copy

    j = tmp_path / "bot.journal"
    with _open(store, j, durability=Durability(batch_size=64, fsync="never")) as rec:
        given = [rec.state]
        for i in range(60):
            rec.append("message.append", message={"i": i})
            rec.append("memory.set", path=["k", f"n{i % 7}"], value=i)
            rec.append("plan.push", item=i)
            if i % 3:
                rec.append("plan.pop")
            if i in (10, 25):
                given.append(rec.state)
            if i == 40:
                ck = rec.checkpoint()
        frozen = copy.deepcopy(given)
        for i in range(60, 90):
            rec.append("message.append", message={"i": i})
            rec.append("memory.delete", path=["k", f"n{i % 7}"])
        assert given == frozen
        assert len(given[2]["memory"]["messages"]) == 26 and len(rec.state["memory"]["messages"]) == 90
        at_checkpoint = replay(open_checkpoint(ck.hex, store))
        assert len(at_checkpoint["memory"]["messages"]) == 41
        assert replay(open_checkpoint(rec.checkpoint().hex, store)) == rec.state
    with _open(store, j) as again:  # reopening replays the journal onto the newest checkpoint
        assert again.state == rec.state


def test_batching_and_flush_on(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "bot.journal"
    with _open(store, j, durability=Durability(batch_size=4, fsync="never")) as rec:
        for i in range(3):
            rec.append("memory.set", path=["i"], value=i)
        assert _journal_events(j) == []  # still in the batch
        rec.append("memory.set", path=["i"], value=3)
        assert _journal_events(j) == [1, 2, 3, 4]
        rec.append("memory.set", path=["i"], value=4)
        rec.append("tool.call", call_id="c", tool="t", args={})  # flushed at once: a tool is about to run
        assert _journal_events(j) == [1, 2, 3, 4, 5, 6]
        rec.append("tool.result", call_id="c", result=1)
        rec.append("memory.set", path=["i"], value=5)
        rec.flush()
        assert _journal_events(j) == list(range(1, 9))
    for policy in ("always", "batch"):
        j2 = tmp_path / f"{policy}.journal"
        with _open(store, j2, durability=Durability(batch_size=100, fsync=policy)) as rec:
            rec.append("plan.push", item=1)
            assert _journal_events(j2) == ([1] if policy == "always" else [])
        assert _journal_events(j2) == [1]  # close writes the rest


def test_write_on_writes_at_once_and_syncs_with_the_next_synced_write(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`write_on` kinds reach the file (a process that dies keeps them) without a sync of
    their own: a durable step syncs once, its call with its result."""
    j = tmp_path / "bot.journal"
    synced: list[int] = []
    with _open(store, j, durability=Durability(flush_on=frozenset({"tool.result"}), write_on=frozenset({"tool.call"}))) as rec:
        writer = rec._writer  # the journal's writer: its sync is what a write_on kind must not call
        assert writer is not None
        real = writer._sync
        monkeypatch.setattr(writer, "_sync", lambda fd: (synced.append(fd), real(fd))[1])
        rec.append("memory.set", path=["i"], value=1)
        assert _journal_events(j) == [] and synced == []  # batched
        rec.append("tool.call", call_id="c", tool="t", args={})
        assert _journal_events(j) == [1, 2] and synced == []  # written, not synced
        rec.append("tool.result", call_id="c", result=1)
        assert _journal_events(j) == [1, 2, 3] and len(synced) == 1  # one sync for the three


def test_bad_policies_are_refused() -> None:
    for make in (
        lambda: Durability(batch_size=0),
        lambda: Durability(fsync="sometimes"),
        lambda: CheckpointPolicy(every_events=0),
        lambda: CheckpointPolicy(every_seconds=-1),
    ):
        with pytest.raises(InvalidInputError):
            make()


def test_checkpoint_every_n_events(store: Store, tmp_path: Path) -> None:
    with _open(store, tmp_path / "j", policy=CheckpointPolicy(every_events=3), labels={"run": "7"}) as rec:
        initial = rec.base
        taken = []
        for i in range(7):
            rec.append("memory.set", path=["n"], value=i)
            if rec.base not in taken and rec.base != initial:
                taken.append(rec.base)
        assert len(taken) == 2
        parent = initial
        for k, cid in enumerate(taken):
            ck = open_checkpoint(cid, store)
            tail = load_tail(ck)
            assert ck.manifest.parents[0].hex() == parent  # a chain: each one's parent is the previous
            assert [e.seq for e in tail.events] == [3 * k + 1, 3 * k + 2, 3 * k + 3]
            assert ck.manifest.labels == {"run": "7", LABEL_RUN: rec.run, LABEL_SEQ: str(3 * k + 3)}
            assert replay(ck)["memory"] == {"n": 3 * k + 2}
            parent = cid
        assert [e.seq for e in rec.tail] == [7]
        rec.flush()
        assert _journal_events(tmp_path / "j") == [7]  # the journal starts again after each checkpoint


def test_checkpoint_every_t_seconds(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock: the policy is checked at each append, never by a timer."""
    import ckptcli.history.recorder as recorder_module

    clock = [1000.0]
    monkeypatch.setattr(recorder_module.time, "monotonic", lambda: clock[0])
    with _open(store, tmp_path / "j", policy=CheckpointPolicy(every_seconds=60)) as rec:
        start = rec.base
        rec.append("plan.push", item=1)
        clock[0] += 59
        rec.append("plan.push", item=2)
        assert rec.base == start
        clock[0] += 1
        rec.append("plan.push", item=3)
        assert rec.base != start and load_tail(open_checkpoint(rec.base, store)).last_seq == 3
        clock[0] += 3600  # idle: nothing happens until the next append
        assert rec.tail == ()


def test_checkpoint_before_a_risky_tool(store: Store, tmp_path: Path) -> None:
    with _open(store, tmp_path / "j", policy=CheckpointPolicy(risky_tools={"payments.refund"})) as rec:
        start = rec.base
        rec.append("tool.call", call_id="c1", tool="orders.lookup", args={})
        rec.append("tool.result", call_id="c1", result={})
        assert rec.base == start  # not a risky tool
        rec.append("memory.set", path=["decided"], value=True)
        call = rec.append("tool.call", call_id="c2", tool="payments.refund", args={"amount": 5})
        before = open_checkpoint(rec.base, store)
        assert rec.base != start and load_tail(before).last_seq == call.seq - 1
        assert replay(before)["memory"] == {"decided": True}  # the state just before the call
        rec.append("tool.result", call_id="c2", result="ok")
        base = rec.checkpoint(message="after").hex
        rec.append("tool.call", call_id="c3", tool="payments.refund", args={})
        assert rec.base == base  # nothing happened since the last checkpoint: no second one


def test_a_step_function_runs_live(store: Store, tmp_path: Path) -> None:
    calls: list[Any] = []

    def lookup(args: Any) -> Any:
        calls.append(args)
        if args["order"] == "bad":
            raise TimeoutError("upstream")
        return {"status": "shipped"}

    def step(ctx: StepContext, event: Event) -> None:
        order = event.get("message")
        ctx.emit("memory.set", path=["asked"], value=order)
        try:
            found = ctx.tool("lookup", {"order": order})
        except ToolFailed as exc:
            ctx.emit("memory.set", path=["failed"], value=exc.error)
            return
        ctx.emit("memory.set", path=["status"], value=found["status"])
        if order == "boom":
            raise ValueError("the step broke")

    with _open(store, tmp_path / "j", tools={"lookup": lookup}) as rec:
        inp = rec.step(step, "message.append", message="A-1", sender="user")
        assert [(e.kind, e.cause) for e in rec.tail] == [
            ("message.append", None),
            ("memory.set", inp.seq),
            ("tool.call", inp.seq),
            ("tool.result", inp.seq),
            ("memory.set", inp.seq),
        ]
        assert rec.tail[2].fields["call_id"] == f"call-{rec.tail[2].seq}"
        assert rec.state["tools"][0]["result"] == {"status": "shipped"} and rec.state["memory"]["status"] == "shipped"
        rec.step(step, "message.append", message="bad", sender="user")
        assert rec.state["memory"]["failed"] == "TimeoutError: upstream"
        assert rec.state["tools"][1]["status"] == "error"
        with pytest.raises(ValueError, match="the step broke"):
            rec.step(step, "message.append", message="boom", sender="user")
        assert rec.tail[-1].kind == "error" and rec.tail[-1].fields == {
            "cause": rec.tail[-1].cause,
            "message": "the step broke",
            "type": "ValueError",
        }
        rec.step(step, "message.append", message="x", sender="user", tools={})  # no such tool: recorded as a failed call
        assert rec.state["tools"][-1]["error"] == "no tool 'lookup' was given to the recorder"
        assert len(calls) == 3
        with pytest.raises(InvalidInputError, match="an input event has no cause"):
            rec.step(step, "message.append", message="x", cause=1)


# -- recovery ----------------------------------------------------------------------------------------------


def test_close_and_reopen_resumes(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "j"
    with _open(store, j, policy=CheckpointPolicy(every_events=4), state={"memory": {"k": 1}, "plan": []}) as rec:
        for i in range(6):
            rec.append("plan.push", item=i)
        live, run = rec.state, rec.run
    again = _open(store, j, state={"memory": {"ignored": True}})  # an existing journal resumes its own run
    try:
        assert again.run == run and states_equal(again.state, live) and again.next_seq == 7
        assert again.recovery is not None and (again.recovery.events, again.recovery.dropped_bytes) == (2, 0)
        again.append("plan.pop")
        assert again.state["plan"] == [0, 1, 2, 3, 4]
    finally:
        again.close()


def test_one_recorder_per_journal_and_subject(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "j"
    rec = _open(store, j)
    try:
        with pytest.raises(LockError, match="in use by another recorder"):
            _open(store, j)
    finally:
        rec.close()
    with pytest.raises(ConflictError, match="records agent:bot, not agent:other"):
        Recorder.open(store, "agent:other", j)
    (tmp_path / "junk").write_bytes(b"hello")
    with pytest.raises(CorruptError, match="is not a ckpt journal"):
        _open(store, tmp_path / "junk")
    rec.close()  # twice is fine
    with pytest.raises(UsageError, match="is closed"):
        rec.append("plan.pop")


def _recorded(store: Store, j: Path, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """n events, every one written and synced; returns the states after each."""
    states = []
    with _open(store, j, durability=Durability(fsync="always")) as rec:
        states.append(rec.state)
        for i in range(n):
            rec.append("memory.set", path=["log", str(i)], value={"i": i, "pad": "x" * (i * 7)})
            states.append(rec.state)
    return states[-1], states


def test_a_torn_tail_is_cut_at_every_byte(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "j"
    _final, states = _recorded(store, j, 5)
    data = j.read_bytes()
    contents = read_journal(j)
    last_start = contents.starts[-1]
    for cut in range(last_start, len(data)):
        j2 = tmp_path / f"cut{cut}"
        j2.write_bytes(data[:cut])
        rec = _open(store, j2)
        try:
            assert rec.last_seq == 4 and states_equal(rec.state, states[4])
            assert rec.recovery is not None and rec.recovery.dropped_bytes == cut - last_start
        finally:
            rec.close()
        assert read_journal(j2).good_end == j2.stat().st_size  # rewritten clean
    # a damaged byte in the middle: that record and everything after it are dropped
    middle = contents.starts[2]
    damaged = bytearray(data)
    damaged[middle + 12] ^= 0x40
    j.write_bytes(bytes(damaged))
    rec = _open(store, j)
    try:
        assert rec.last_seq == 2 and states_equal(rec.state, states[2])
    finally:
        rec.close()


def test_crash_between_a_checkpoint_and_the_new_journal(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint is committed but the journal still holds its events: recovery finds
    the newer checkpoint by its run label and skips them."""
    import ckptcli.history.recorder as recorder_module

    j = tmp_path / "j"
    rec = _open(store, j, durability=Durability(batch_size=1))
    for i in range(4):
        rec.append("plan.push", item=i)

    def disk_full(*args: Any, **kw: Any) -> None:
        raise StoreIOError("cannot write journal: No space left on device")

    monkeypatch.setattr(recorder_module, "write_journal", disk_full)
    with pytest.raises(StoreIOError):
        rec.checkpoint()
    monkeypatch.undo()
    taken = rec.base
    live = rec.state
    rec.close()
    assert _journal_events(j) == [1, 2, 3, 4]  # the old journal, whose events are in `taken`
    again = _open(store, j)
    try:
        assert again.base == taken and states_equal(again.state, live)
        assert again.recovery is not None and (again.recovery.skipped, again.recovery.events) == (4, 0)
        assert again.append("plan.pop").seq == 5
        cid = again.checkpoint().hex
        assert open_checkpoint(cid, store).manifest.parents[0].hex() == taken
    finally:
        again.close()


def test_recovery_refuses_a_journal_with_a_gap(store: Store, tmp_path: Path) -> None:
    j = tmp_path / "j"
    with _open(store, j, durability=Durability(batch_size=1)) as rec:
        rec.append("plan.push", item=1)
        header = read_journal(j).header
    from ckptcli.history.recorder import write_journal

    e = make_event(5, 1, "plan.push", {"item": 5})
    from ckptcli.history.recorder import encode_record

    write_journal(j, header, [encode_record(e.to_map())])
    with pytest.raises(CorruptError, match=r"continues at seq 5, but checkpoint \w+ ends at seq 0: events are missing"):
        _open(store, j)


def test_custom_kinds_need_their_reducers_to_recover(store: Store, tmp_path: Path) -> None:
    red = Reducers({"count:add": lambda s, e: {**s, "ext": {"count": s.get("ext", {}).get("count", 0) + 1}}})
    j = tmp_path / "j"
    with _open(store, j, reducers=red) as rec:
        rec.append("count:add")
        rec.append("count:add")
        assert rec.state["ext"] == {"count": 2}
    with pytest.raises(NotFoundError, match="no reducer for event kind 'count:add'"):
        _open(store, j)
    assert _journal_events(j) == [1, 2]  # left as it was, for a retry with the reducers
    with _open(store, j, reducers=red) as rec:
        assert rec.state["ext"] == {"count": 2}


# -- a real process killed mid-append ---------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    import ckptcli
    from ckptcli.history.recorder import CheckpointPolicy, Durability, Recorder
    from tests.test_recorder import event_for

    store = ckptcli.open_store(sys.argv[1])
    rec = Recorder.open(store, "agent:crash", sys.argv[2], policy=CheckpointPolicy(every_events=40),
                        durability=Durability(batch_size=1000, fsync="batch"))
    batch = int(sys.argv[3])
    while True:
        kind, fields = event_for(rec.next_seq)
        base = rec.base
        rec.append(kind, **fields)
        if rec.base != base or rec.last_seq % batch == 0:
            rec.flush()
            print("durable", rec.last_seq, flush=True)
    """
)


def event_for(seq: int) -> tuple[str, dict[str, Any]]:
    """The child's events, a function of seq alone; some large, so that a write takes time."""
    r = random.Random(seq)
    if seq % 5 == 0:
        return "message.append", {"message": {"n": seq, "text": "m" * r.randrange(0, 2000)}}
    if seq % 7 == 0:
        return "memory.delete", {"path": ["k", str(r.randrange(7))]}
    return "memory.set", {"path": ["k", str(seq % 7)], "value": {"seq": seq, "pad": "x" * r.randrange(0, 300_000)}}


def expected_state(last_seq: int) -> dict[str, Any]:
    red = Reducers()
    state: dict[str, Any] = {"memory": {}, "plan": [], "tools": []}
    for seq in range(1, last_seq + 1):
        kind, fields = event_for(seq)
        state = red.apply(state, make_event(seq, 0, kind, fields))
    return state


@pytest.mark.parametrize("round_", range(8))
def test_sigkill_mid_append_loses_at_most_the_unwritten_batch(tmp_path: Path, round_: int) -> None:
    store_path = tmp_path / "store"
    store = ckptcli.init_store(store_path)
    j = tmp_path / "crash.journal"
    batch = [1, 3, 8, 16][round_ % 4]
    wait_for = random.Random(round_).randrange(3, 25)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_path), str(j), str(batch)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert child.stdout is not None
    last_durable = seen = 0
    for line in child.stdout:
        if line.startswith(b"durable "):
            last_durable = int(line.split()[1])
            seen += 1
            if seen >= wait_for:
                break
    time.sleep(random.Random(round_).uniform(0, 0.05))  # land anywhere: in a write, a checkpoint, a rotation
    child.send_signal(signal.SIGKILL)
    rest, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err.decode()
    for line in rest.split(b"\n")[:-1]:  # whole lines only: the kill may cut the last one
        if line.startswith(b"durable "):
            last_durable = max(last_durable, int(line.split()[1]))
    rec = Recorder.open(store, "agent:crash", j)
    try:
        assert rec.last_seq >= last_durable  # nothing written before the kill is lost
        # every event recovered is whole: the state is exactly that of events 1..last_seq
        assert states_equal(rec.state, expected_state(rec.last_seq))
        recovered = rec.last_seq
        kind, fields = event_for(rec.next_seq)
        rec.append(kind, **fields)
        cid = rec.checkpoint().hex
        assert states_equal(replay(open_checkpoint(cid, store)), expected_state(recovered + 1))
    finally:
        rec.close()
    j.write_bytes(j.read_bytes())  # still a clean journal: opens with nothing to drop
    again = Recorder.open(store, "agent:crash", j)
    assert again.recovery is not None and again.recovery.dropped_bytes == 0
    again.close()
    assert j.read_bytes().startswith(MAGIC)
