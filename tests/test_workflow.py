"""Durable steps (ckptcli.workflow) in one process: re-runs return recorded results, keys,
retries, the in-doubt policy, variables, rollback with compensations, bad input, and
`ckpt workflow`. The crash tests with real processes killed by SIGKILL are in
tests/test_workflow_kill.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ckptcli import workflow
from ckptcli.errors import ConflictError, InvalidInputError, LockError, NotFoundError, UsageError
from ckptcli.history.recorder import Recorder
from ckptcli.listing import ListFilter, list_checkpoints
from ckptcli.store.repository import Store
from ckptcli.workflow import events as wev
from ckptcli.workflow.core import journal_path


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing records it."""


def _journal_events(store: Store, wid: str) -> list[dict[str, Any]]:
    from ckptcli.history.recorder import read_journal

    return read_journal(journal_path(store, wid)).records


def _all_events(store: Store, wid: str) -> list[dict[str, Any]]:
    """Every event of the workflow's history: the checkpoints' tails, then the journal."""
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.history.replay import load_tail

    evs: dict[int, dict[str, Any]] = {}
    for cid, _s in list_checkpoints(store, ListFilter(subject=f"workflow:{wid}")):
        for ev in load_tail(open_checkpoint(cid.hex(), store)).events:
            evs[ev.seq] = ev.to_map()
    for rec in _journal_events(store, wid):
        evs[rec["seq"]] = rec
    return [evs[k] for k in sorted(evs)]


# -- re-runs ---------------------------------------------------------------------------------------
def test_a_rerun_returns_recorded_results_and_continues_at_the_first_unfinished_step(store: Store) -> None:
    calls: list[tuple[str, int]] = []
    crash_at: list[int] = [3]

    def double(i: int) -> int:
        calls.append(("double", i))
        return i * 2

    def flow(ctx: workflow.Context, n: int) -> list[int]:
        out = []
        for i in range(n):
            if i == crash_at[0]:
                raise Crash
            out.append(ctx.step("double", double, i))
        return out

    with pytest.raises(Crash):
        workflow.run(store, "w", flow, 5)
    assert calls == [("double", 0), ("double", 1), ("double", 2)]
    calls.clear()
    crash_at[0] = -1
    assert workflow.run(store, "w", flow, 5) == [0, 2, 4, 6, 8]
    assert calls == [("double", 3), ("double", 4)]  # the three recorded ones were not called
    calls.clear()
    assert workflow.run(store, "w", flow, 5) == [0, 2, 4, 6, 8]  # done: the recorded result
    assert calls == []
    st = workflow.status(store, "w")
    assert st.status == "done" and st.runs == 2 and [s.key for s in st.steps] == [f"w:double:{i}:1" for i in range(1, 6)]
    # each step is a tools record in the shared shape: tool.call with key, then tool.result
    evs = _all_events(store, "w")
    calls_ev = [e for e in evs if e["kind"] == "tool.call"]
    assert [e["key"] for e in calls_ev] == [f"w:double:{i}:1" for i in range(1, 6)]
    assert all(e["tool"] == "double" and e["args"] == {"args": [i]} for i, e in enumerate(calls_ev))
    results = [e for e in evs if e["kind"] == "tool.result"]
    assert [e.get("status", "ok") for e in results] == ["ok"] * 5
    # the checkpoints carry the shared workflow labels
    labels = [s.labels for _c, s in list_checkpoints(store, ListFilter(subject="workflow:w"))]
    assert labels and all(lb["workflow.engine"] == "ckpt" and lb["workflow.type"].endswith("_locals_.flow") for lb in labels)


def test_the_decorator_and_the_key_inside_a_step(store: Store) -> None:
    seen: list[tuple[str, int, int]] = []

    @workflow.step(name="charge")
    def charge(order: str, cents: int) -> dict[str, Any]:
        info = workflow.current_step()
        assert info is not None
        seen.append((info.idempotency_key, info.attempt, info.occurrence))
        return {"order": order, "cents": cents, "key": info.idempotency_key}

    def flow(ctx: workflow.Context) -> Any:
        a = charge("A", 100)
        b = charge("B", 200)
        with pytest.raises(UsageError):
            _ = ctx.idempotency_key  # between steps there is none
        return [a, b]

    got = workflow.run(store, "pay-1", flow)
    assert got == [{"order": "A", "cents": 100, "key": "pay-1:charge:1:1"}, {"order": "B", "cents": 200, "key": "pay-1:charge:2:1"}]
    assert seen == [("pay-1:charge:1:1", 1, 1), ("pay-1:charge:2:1", 1, 2)]
    # outside a workflow the decorated function is a plain call
    with pytest.raises(AssertionError):
        charge("C", 1)  # current_step() is None outside a workflow: the function's own assert


def test_variables_replay_and_are_recorded_once(store: Store) -> None:
    crash = [True]

    def flow(ctx: workflow.Context) -> int:
        ctx.set("n", 0)
        for i in range(4):
            ctx.step("inc", lambda: None)
            ctx.set("n", ctx.get("n") + 1)
            if i == 2 and crash[0]:
                raise Crash
        return int(ctx.get("n"))

    with pytest.raises(Crash):
        workflow.run(store, "v", flow)
    crash[0] = False
    assert workflow.run(store, "v", flow) == 4
    st = workflow.status(store, "v")
    assert st.variables == {"n": 4}
    sets = [e for e in _all_events(store, "v") if e["kind"] == "memory.set"]
    assert [e["value"] for e in sets] == [0, 1, 2, 3, 4]  # none recorded twice by the re-run


# -- retries and keys ------------------------------------------------------------------------------
def test_retries_with_backoff_are_recorded_with_a_new_key_each_attempt(store: Store) -> None:
    keys: list[str] = []

    def flaky() -> str:
        info = workflow.current_step()
        assert info is not None
        keys.append(info.idempotency_key)
        if len(keys) < 3:
            raise ConnectionError(f"try {len(keys)}")
        return "ok"

    def flow(ctx: workflow.Context) -> str:
        return ctx.step("call", flaky, retry=workflow.Retry(max_attempts=4, initial=0.001, factor=2, max_delay=0.002, jitter=0))

    assert workflow.run(store, "r", flow) == "ok"
    assert keys == ["r:call:1:1", "r:call:1:2", "r:call:1:3"]
    evs = _all_events(store, "r")
    retries = [e for e in evs if e["kind"] == wev.RETRY]
    assert [(e["attempt"], e["delay_seconds"], e["error"]) for e in retries] == [
        (1, 0.001, "ConnectionError: try 1"),
        (2, 0.002, "ConnectionError: try 2"),
    ]
    st = workflow.status(store, "r")
    assert [(s.status, s.attempts, s.key) for s in st.steps] == [("ok", 3, "r:call:1:3")]


def test_retry_delays_grow_are_capped_and_jittered() -> None:
    r = workflow.Retry(max_attempts=9, initial=1.0, factor=3.0, max_delay=5.0, jitter=0.5)
    assert [r.delay(n, rand=lambda: 0.5) for n in (1, 2, 3, 4)] == [1.0, 3.0, 5.0, 5.0]
    assert r.delay(1, rand=lambda: 0.0) == 0.5 and r.delay(1, rand=lambda: 1.0) == 1.5
    for bad in ({"max_attempts": 0}, {"initial": -1}, {"factor": 0.5}, {"jitter": 2}, {"max_delay": float("nan")}):
        with pytest.raises(InvalidInputError):
            workflow.Retry(**bad)  # type: ignore[arg-type]


def test_a_step_that_keeps_failing_fails_the_workflow_and_a_rerun_says_so(store: Store) -> None:
    def boom() -> None:
        raise ValueError("no stock")

    def flow(ctx: workflow.Context) -> None:
        ctx.step("reserve", boom, retry=workflow.Retry(max_attempts=2, initial=0, jitter=0))

    with pytest.raises(workflow.StepFailed) as got:
        workflow.run(store, "f", flow)
    assert got.value.key == "f:reserve:1:2" and got.value.attempts == 2 and "ValueError: no stock" in str(got.value)
    assert isinstance(got.value.__cause__, ValueError)
    with pytest.raises(workflow.WorkflowFailed, match="no stock"):
        workflow.run(store, "f", flow)
    assert workflow.status(store, "f").status == "failed"


def test_the_workflow_catching_a_failed_step_replays_the_same(store: Store) -> None:
    calls = []

    def boom() -> None:
        calls.append(1)
        raise ValueError("declined")

    def flow(ctx: workflow.Context, crash: bool) -> str:
        try:
            ctx.step("charge", boom)
        except workflow.StepFailed as exc:
            ctx.set("why", exc.error)
        if crash:
            raise Crash
        return "cancelled"

    with pytest.raises(Crash):
        workflow.run(store, "c", flow, True)
    with pytest.raises(ConflictError, match="other arguments"):
        workflow.run(store, "c", flow, False)


def test_a_step_failed_on_an_error_it_does_not_retry_fails_again_on_the_rerun(store: Store) -> None:
    """Retry(on=...) leaves other errors unretried: a re-run that reaches the step (the
    workflow caught StepFailed and went on) raises StepFailed there again, as the first
    run did, and does not call it again with a new key."""
    keys: list[str] = []

    def charge() -> None:
        keys.append(workflow.current_step().idempotency_key)  # type: ignore[union-attr]
        raise KeyError("card")

    def flow(ctx: workflow.Context) -> str:
        try:
            ctx.step("charge", charge, retry=workflow.Retry(max_attempts=3, initial=0, on=(TimeoutError,)))
        except workflow.StepFailed as exc:
            ctx.set("why", exc.error)
        ctx.step("notify", lambda: 1)
        raise Crash  # the process dies after the step that follows

    with pytest.raises(Crash):
        workflow.run(store, "nr", flow)
    with pytest.raises(Crash):
        workflow.run(store, "nr", flow)
    assert keys == ["nr:charge:1:1"]
    st = workflow.status(store, "nr")
    assert [(s.name, s.status, s.attempts) for s in st.steps] == [("charge", "error", 1), ("notify", "ok", 1)]


def test_a_finished_workflow_run_with_other_arguments_is_a_conflict_too(store: Store) -> None:
    calls: list[int] = []

    def flow(ctx: workflow.Context, n: int) -> int:
        return ctx.step("double", lambda: calls.append(n) or n * 2)

    assert workflow.run(store, "fin", flow, 2) == 4
    with pytest.raises(ConflictError, match=r"other arguments \(\[2\]\), not \[3\]") as got:
        workflow.run(store, "fin", flow, 3)
    assert got.value.exit_code == 11 and "\n" not in str(got.value)
    assert workflow.run(store, "fin", flow, 2) == 4 and calls == [2]  # the same arguments: its recorded result

    def fails(ctx: workflow.Context, n: int) -> None:
        raise ValueError(n)

    with pytest.raises(ValueError):
        workflow.run(store, "fin-failed", fails, 1)
    with pytest.raises(ConflictError, match="other arguments"):
        workflow.run(store, "fin-failed", fails, 2)
    with pytest.raises(workflow.WorkflowFailed):
        workflow.run(store, "fin-failed", fails, 1)


# -- in doubt ---------------------------------------------------------------------------------------
def _begin_in_doubt(store: Store, wid: str) -> None:
    def hang() -> None:
        raise Crash  # the process died inside the step: its call is recorded, its result is not

    def flow(ctx: workflow.Context) -> Any:
        ctx.step("first", lambda: 1)
        return ctx.step("send", hang)

    with pytest.raises(Crash):
        workflow.run(store, wid, flow)


def test_in_doubt_is_reported_with_its_key_and_retried_with_the_same_key_by_default(store: Store) -> None:
    _begin_in_doubt(store, "d")
    st = workflow.status(store, "d")
    assert [(s.name, s.pos, s.key) for s in st.in_doubt] == [("send", 2, "d:send:1:1")]
    keys = []

    def send() -> str:
        info = workflow.current_step()
        assert info is not None
        keys.append(info.idempotency_key)
        return "sent"

    def flow(ctx: workflow.Context) -> Any:
        ctx.step("first", lambda: 1)
        return ctx.step("send", send)

    assert workflow.run(store, "d", flow) == "sent"
    assert keys == ["d:send:1:1"]  # the same key: the receiver deduplicates
    evs = _all_events(store, "d")
    assert [(e["key"], e["decision"]) for e in evs if e["kind"] == wev.IN_DOUBT] == [("d:send:1:1", "retry")]
    assert [e["key"] for e in evs if e["kind"] == "tool.call"] == ["d:first:1:1", "d:send:1:1"]  # no second call record
    assert workflow.status(store, "d").in_doubt == []


def test_an_in_doubt_step_run_again_that_fails_is_retried_with_a_new_key(store: Store) -> None:
    _begin_in_doubt(store, "dr")
    keys = []

    def send() -> str:
        info = workflow.current_step()
        assert info is not None
        keys.append(info.idempotency_key)
        if len(keys) == 1:
            raise TimeoutError("no answer")
        return "sent"

    def flow(ctx: workflow.Context) -> Any:
        ctx.step("first", lambda: 1)
        return ctx.step("send", send, retry=workflow.Retry(max_attempts=2, initial=0, jitter=0))

    assert workflow.run(store, "dr", flow) == "sent"
    assert keys == ["dr:send:1:1", "dr:send:1:2"]  # the in-doubt attempt again, then a new one
    st = workflow.status(store, "dr")
    assert [(s.status, s.attempts, s.key) for s in st.steps][1] == ("ok", 2, "dr:send:1:2")


def test_in_doubt_fail_and_resolved(store: Store) -> None:
    _begin_in_doubt(store, "e")

    def never() -> str:
        raise AssertionError("must not be called")

    def flow(ctx: workflow.Context) -> Any:
        ctx.step("first", lambda: 1)
        return ctx.step("send", never)

    with pytest.raises(workflow.StepInDoubt, match="e:send:1:1") as got:
        workflow.run(store, "e", flow, on_in_doubt="fail")
    assert got.value.step.key == "e:send:1:1" and got.value.step.pos == 2
    asked: list[workflow.InDoubtStep] = []

    def decide(step: workflow.InDoubtStep) -> workflow.Resolved:
        asked.append(step)
        return workflow.Resolved({"status": "already sent"})

    assert workflow.run(store, "e", flow, on_in_doubt=decide) == {"status": "already sent"}
    assert [(a.name, a.key) for a in asked] == [("send", "e:send:1:1")]
    with pytest.raises(InvalidInputError):
        workflow.run(store, "e2", flow, on_in_doubt="maybe")  # type: ignore[arg-type]


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("wid", ["", "has space", "a/b", "x" * 200, "-lead", "wf:colon", 7])
def test_a_workflow_id_that_is_not_a_valid_subject_is_one_line(store: Store, wid: Any) -> None:
    with pytest.raises(InvalidInputError) as got:
        workflow.run(store, wid, lambda ctx: None)
    assert "\n" not in str(got.value) and "workflow id" in str(got.value)
    assert not (Path(store.location) / "workflows").exists() or not list((Path(store.location) / "workflows").iterdir())


def test_a_result_that_cannot_be_encoded_is_one_line_naming_the_step_and_key(store: Store) -> None:
    def flow(ctx: workflow.Context) -> Any:
        return ctx.step("mk", lambda: object())

    with pytest.raises(workflow.StepFailed) as got:
        workflow.run(store, "enc", flow)
    msg = str(got.value)
    assert "\n" not in msg and "step mk" in msg and "enc:mk:1:1" in msg and "cannot be recorded" in msg and "type object" in msg
    assert isinstance(got.value.__cause__, InvalidInputError)
    st = workflow.status(store, "enc")
    assert st.steps[0].status == "error" and "cannot be recorded" in (st.steps[0].error or "") and st.status == "failed"
    with pytest.raises(InvalidInputError, match="arguments of step"):
        workflow.run(store, "enc2", lambda ctx: ctx.step("s", lambda x: x, {1, 2}))
    with pytest.raises(InvalidInputError, match="its arguments"):
        workflow.run(store, "enc3", lambda ctx, x: x, {1: object()})
    with pytest.raises(InvalidInputError, match="step name"):
        workflow.run(store, "enc4", lambda ctx: ctx.step("a:b", lambda: 1))
    with pytest.raises(InvalidInputError) as var:
        workflow.run(store, "enc5", lambda ctx: ctx.set("v", object()))
    assert "variable 'v' cannot be recorded" in str(var.value) and "event 1" not in str(var.value)


def test_a_step_whose_result_cannot_be_recorded_fails_as_a_step_that_raised(store: Store) -> None:
    """One rule for a failed step, whether it raised or returned what cannot be recorded:
    StepFailed live (the workflow recorded failed when it lets it through), WorkflowFailed
    on the re-run; and a workflow that catches it gets StepFailed there on every run."""
    calls: list[str] = []

    def tup() -> Any:
        calls.append("tup")
        return (1, 2)

    def boom() -> Any:
        calls.append("boom")
        raise ValueError("no")

    for wid, fn in (("t-tuple", tup), ("t-raise", boom)):
        with pytest.raises(workflow.StepFailed) as live:
            workflow.run(store, wid, lambda ctx, fn=fn: ctx.step("s", fn, retry=workflow.Retry(max_attempts=3, initial=0)))
        assert live.value.attempts == (1 if fn is tup else 3) and live.value.exit_code == 1
        with pytest.raises(workflow.WorkflowFailed) as again:
            workflow.run(store, wid, lambda ctx, fn=fn: ctx.step("s", fn, retry=workflow.Retry(max_attempts=3, initial=0)))
        assert "StepFailed" in again.value.error and workflow.status(store, wid).status == "failed"
    assert calls == ["tup", "boom", "boom", "boom"]  # the tuple is not retried (the same code returns one again)

    seen: list[str] = []

    def catching(ctx: workflow.Context, crash: bool) -> str:
        try:
            ctx.step("s", tup, retry=workflow.Retry(max_attempts=3, initial=0))
        except workflow.StepFailed as exc:
            seen.append(type(exc).__name__)
        ctx.step("after", lambda: 1)
        if crash:
            raise Crash
        return "went on"

    with pytest.raises(Crash):
        workflow.run(store, "t-catch", catching, True)
    with pytest.raises(Crash):
        workflow.run(store, "t-catch", catching, True)
    assert seen == ["StepFailed", "StepFailed"] and calls.count("tup") == 2  # the re-run did not call it again


def test_a_rerun_that_calls_steps_in_another_order_is_a_non_determinism_error(store: Store) -> None:
    def flow_a(ctx: workflow.Context) -> None:
        ctx.step("reserve", lambda: 1)
        ctx.step("charge", lambda: 2)
        raise Crash

    def flow_b(ctx: workflow.Context) -> None:
        ctx.step("reserve", lambda: 1)
        ctx.step("ship", lambda: 3)

    with pytest.raises(Crash):
        workflow.run(store, "nd", flow_a)
    with pytest.raises(workflow.NonDeterminismError) as got:
        workflow.run(store, "nd", flow_b)
    assert got.value.pos == 2 and got.value.recorded == "charge" and got.value.called == "ship"
    assert int(got.value.exit_code) == 13 and "\n" not in str(got.value)
    assert workflow.status(store, "nd").status == "running"  # not recorded as the workflow's failure


def test_a_running_workflow_is_locked(store: Store) -> None:
    def flow(ctx: workflow.Context) -> None:
        with pytest.raises(LockError):
            workflow.run(store, "lk", lambda c: None)
        with pytest.raises(LockError):
            workflow.rollback(store, "lk", "workflow:lk", execute=True)

    workflow.run(store, "lk", flow)


# -- rollback ----------------------------------------------------------------------------------------
UNDONE: list[tuple[str, str, Any]] = []


def undo_book(c: workflow.Compensation) -> None:
    UNDONE.append((c.step, c.key, c.result))


@workflow.step(compensate=undo_book)
def book(what: str) -> str:
    return f"booked {what}"


def trip(ctx: workflow.Context) -> list[str]:
    out = [book("flight")]
    ctx.set("stage", "flight")
    ctx.checkpoint("after flight")
    out.append(book("hotel"))
    out.append(ctx.step("email", lambda: "sent"))  # no compensation
    out.append(book("car"))
    ctx.set("stage", "all")
    return out


def test_rollback_lists_then_runs_compensations_in_reverse_order_once(store: Store) -> None:
    UNDONE.clear()
    assert workflow.run(store, "trip", trip) == ["booked flight", "booked hotel", "sent", "booked car"]
    cks = list_checkpoints(store, ListFilter(subject="workflow:trip"))
    after_flight = next(c.hex() for c, s in cks if s.message == "after flight")
    plan = workflow.rollback(store, "trip", after_flight)
    assert not plan.executed and plan.pointer == 1
    assert [(c.pos, c.step, c.status) for c in plan.compensations] == [(4, "book", "to run"), (3, "email", "none"), (2, "book", "to run")]
    assert [c.compensate for c in plan.compensations if c.step == "book"] == ["tests.test_workflow:undo_book"] * 2
    assert UNDONE == []  # a dry run runs nothing
    done = workflow.rollback(store, "trip", after_flight, execute=True)
    assert done.executed
    assert UNDONE == [("book", "trip:book:3:1:undo", "booked car"), ("book", "trip:book:2:1:undo", "booked hotel")]
    evs = _all_events(store, "trip")
    comp = [(e["pos"], e["status"]) for e in evs if e["kind"] == wev.COMPENSATE]
    assert comp == [(4, "start"), (4, "ok"), (2, "start"), (2, "ok")]
    st = workflow.status(store, "trip")
    assert st.status == "rolled back" and [s.pos for s in st.steps] == [1] and st.variables == {"stage": "flight"}
    (_latest_id, latest), *_ = list_checkpoints(store, ListFilter(subject="workflow:trip"))
    assert latest.message.startswith("workflow trip: rolled back to") and latest.labels["workflow.type"] == "trip"
    assert latest.labels["workflow.engine"] == "ckpt"
    # run again: the steps after the checkpoint run again, with new keys
    UNDONE.clear()
    assert workflow.run(store, "trip", trip)[1] == "booked hotel"
    assert [s.key for s in workflow.status(store, "trip").steps] == ["trip:book:1:1", "trip:book:2:2", "trip:email:1:2", "trip:book:3:2"]
    assert UNDONE == []


def test_an_interrupted_rollback_goes_on_without_running_a_finished_compensation_again(store: Store) -> None:
    UNDONE.clear()
    workflow.run(store, "trip2", trip)
    first = list_checkpoints(store, ListFilter(subject="workflow:trip2"))[-1][0].hex()  # the initial state
    n = [0]

    def undo_once_then_die(c: workflow.Compensation) -> None:
        n[0] += 1
        UNDONE.append((c.step, c.key, c.result))
        if n[0] == 2:
            # stopped inside the second compensation: Ctrl-C (any other exception, sys.exit()
            # included, is its failure, recorded as such) leaves it begun, as a kill does
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        workflow.rollback(store, "trip2", first, execute=True, compensations={"book": undo_once_then_die})
    assert workflow.status(store, "trip2").status == "rolling back"
    with pytest.raises(ConflictError, match="not finished"):
        workflow.run(store, "trip2", trip)
    plan = workflow.rollback(store, "trip2", first)
    assert [(c.step, c.status) for c in plan.compensations] == [("book", "done"), ("email", "none"), ("book", "begun"), ("book", "to run")]
    with pytest.raises(ConflictError, match="not finished"):
        workflow.rollback(store, "trip2", "workflow:trip2", execute=True)
    workflow.rollback(store, "trip2", first, execute=True, compensations={"book": undo_once_then_die})
    assert [k for _s, k, _r in UNDONE] == ["trip2:book:3:1:undo", "trip2:book:2:1:undo", "trip2:book:2:1:undo", "trip2:book:1:1:undo"]
    assert workflow.status(store, "trip2").steps == []


def test_a_failed_workflow_runs_again_after_a_rollback_to_its_last_checkpoint(store: Store) -> None:
    fail = [True]

    def maybe() -> str:
        if fail[0]:
            raise RuntimeError("x" * 10_000 + "\udcff")  # long, and a lone surrogate: recorded all the same
        return "fine"

    def flow(ctx: workflow.Context) -> list[str]:
        return [ctx.step("a", lambda: "a"), ctx.step("b", maybe)]

    with pytest.raises(workflow.StepFailed):
        workflow.run(store, "again", flow)
    st = workflow.status(store, "again")
    assert st.status == "failed" and st.steps[1].error is not None and len(st.steps[1].error) < 4100
    fail[0] = False
    plan = workflow.rollback(store, "again", "workflow:again", execute=True)  # nothing to compensate
    assert plan.pointer == 1 and plan.compensations == []
    assert workflow.run(store, "again", flow) == ["a", "fine"]
    assert [s.key for s in workflow.status(store, "again").steps] == ["again:a:1:1", "again:b:1:2"]


def test_a_checkpoint_on_a_branch_a_rollback_undid_is_refused(store: Store) -> None:
    UNDONE.clear()
    workflow.run(store, "br", trip)
    cks = {s.message: c.hex() for c, s in reversed(list_checkpoints(store, ListFilter(subject="workflow:br")))}
    first, done = cks["recorder: initial state"], cks["workflow br: done"]
    workflow.rollback(store, "br", first, execute=True)
    with pytest.raises(InvalidInputError, match="a rollback undid") as got:
        workflow.rollback(store, "br", done)
    assert "\n" not in str(got.value)


def test_rollback_bad_input(store: Store) -> None:
    workflow.run(store, "rb", trip)
    workflow.run(store, "other", lambda ctx: 1)
    with pytest.raises(InvalidInputError, match="workflow:other"):
        workflow.rollback(store, "rb", "workflow:other")
    with pytest.raises(NotFoundError):
        workflow.rollback(store, "nope", "workflow:rb")
    with pytest.raises(NotFoundError):
        workflow.rollback(store, "rb", "0" * 12)


def test_a_compensation_that_cannot_be_found_stops_the_rollback_before_anything_runs(store: Store) -> None:
    def local_undo(c: workflow.Compensation) -> None:
        UNDONE.append(("local", c.key, None))

    def flow(ctx: workflow.Context) -> None:
        ctx.step("a", lambda: 1, compensate=undo_book)
        ctx.step("b", lambda: 2, compensate=local_undo)

    workflow.run(store, "nf", flow)
    first = list_checkpoints(store, ListFilter(subject="workflow:nf"))[-1][0].hex()
    from ckptcli.workflow import core

    core._COMPENSATIONS.pop("b")  # as in another process
    UNDONE.clear()
    with pytest.raises(NotFoundError, match="step b"):
        workflow.rollback(store, "nf", first, execute=True)
    assert UNDONE == [] and workflow.status(store, "nf").status == "done"


# -- the recorder journal and replay ------------------------------------------------------------------
def test_the_checkpoints_replay_with_the_workflow_reducers(store: Store, cli: Any) -> None:
    workflow.run(store, "rp", trip)
    got = cli("replay", "workflow:rp", "--json", "--store", store.location)
    assert got.code == 0, got.err
    state = json.loads(got.out)["state"]
    assert state["ext"]["workflow"]["status"] == "done"
    with Recorder.open(store, "workflow:rp", journal_path(store, "rp"), reducers=workflow.core.reducers()) as rec:
        assert wev.view(rec.state)["result"] == ["booked flight", "booked hotel", "sent", "booked car"]


# -- the CLI --------------------------------------------------------------------------------------------
def test_cli_ls_show_rollback(store: Store, cli: Any) -> None:
    UNDONE.clear()
    workflow.run(store, "cli-trip", trip)
    _begin_in_doubt(store, "cli-doubt")
    s = ["--store", store.location]
    got = cli("workflow", "ls", *s, "--json")
    assert got.code == 0, got.err
    rows = {r["id"]: r for r in json.loads(got.out)}
    assert rows["cli-trip"]["status"] == "done" and rows["cli-trip"]["steps_done"] == 4 and rows["cli-doubt"]["in_doubt"] == 1
    got = cli("workflow", "ls", *s)
    assert got.code == 0 and "cli-trip" in got.out and "cli-doubt" in got.out
    got = cli("workflow", "show", "cli-doubt", *s, "--json")
    doc = json.loads(got.out)
    assert doc["in_doubt"] == [{"pos": 2, "step": "send", "key": "cli-doubt:send:1:1", "call_id": "2.1"}]
    assert doc["pointer"] == 1 and doc["steps"][0]["result"] == 1 and doc["status"] == "running"
    got = cli("workflow", "show", "cli-doubt", *s)
    assert got.code == 0 and "in doubt: step send (position 2) key cli-doubt:send:1:1" in got.out
    got = cli("workflow", "rollback", "cli-trip", "--to", "workflow:cli-trip~1", *s, "--json")
    assert got.code == 0, got.err
    plan = json.loads(got.out)
    assert plan["executed"] is False and [c["pos"] for c in plan["compensations"]] == [4, 3, 2]
    got = cli("workflow", "rollback", "cli-trip", "--to", "workflow:cli-trip~1", *s, "--run")
    assert got.code == 0, got.err
    assert [k for _s, k, _r in UNDONE] == ["cli-trip:book:3:1:undo", "cli-trip:book:2:1:undo"]
    assert "rolled back to" in got.out


def test_cli_rollback_imports_a_compensation_from_the_current_directory(store: Store, tmp_path: Path) -> None:
    """The real `ckpt` script (whose sys.path has its own directory, not the current one),
    run in the project's directory with no PYTHONPATH to it, finds `wfproj_mod:undo` there."""
    import os
    import subprocess
    import sys
    import textwrap

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "wfproj_mod.py").write_text(
        textwrap.dedent(
            """\
            from pathlib import Path
            from ckptcli import workflow

            def undo(c):
                with open(Path(__file__).with_name("undone.txt"), "a") as f:
                    f.write(c.key + "\\n")

            @workflow.step(compensate=undo)
            def book(i):
                return {"i": i}

            def flow(ctx, n):
                ctx.checkpoint("start")
                for i in range(n):
                    book(i)
                return "done"
            """
        )
    )
    import ckptcli

    env = {k: v for k, v in os.environ.items() if k != "CKPT_STORE"}
    env["PYTHONPATH"] = str(Path(ckptcli.__file__).resolve().parent.parent)  # the ckptcli under test; not proj
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import ckptcli, wfproj_mod; from ckptcli import workflow; "
            f"print(workflow.run(ckptcli.open_store({store.location!r}), 'proj', wfproj_mod.flow, 2))",
        ],
        cwd=proj,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert made.returncode == 0 and made.stdout.strip() == b"done", made.stderr
    ckpt = Path(sys.executable).with_name("ckpt")
    assert ckpt.exists(), f"the console script {ckpt} is not installed (bash scripts/setup)"
    got = subprocess.run(
        [str(ckpt), "workflow", "rollback", "proj", "--to", "workflow:proj~1", "--run", "--store", store.location],
        cwd=proj,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert (proj / "undone.txt").read_text().splitlines() == ["proj:book:2:1:undo", "proj:book:1:1:undo"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["workflow", "launch"], 2, "unknown action"),
        (["workflow", "show"], 2, "needs a workflow ID"),
        (["workflow", "rollback", "x"], 2, "needs --to"),
        (["workflow", "ls", "x"], 2, "takes no ID"),
        (["workflow", "show", "no such"], 4, "workflow id"),
        (["workflow", "show", "ghost"], 3, "no workflow ghost"),
        (["workflow", "rollback", "ghost", "--to", "latest"], 3, "ghost"),
    ],
)
def test_cli_bad_input_is_one_line_with_its_exit_code(store: Store, cli: Any, args: list[str], code: int, words: str) -> None:
    got = cli(*args, "--store", store.location)
    assert got.code == code, (got.out, got.err)
    assert got.err.count("\n") == 1 and got.err.startswith("ckpt: error:") and words in got.err


# -- the guide's example --------------------------------------------------------------------------------
def test_the_worked_example_in_the_guide_runs() -> None:
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "workflows.md").read_text()
    start = text.index("\n## Durable steps for plain Python")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "docs/workflows.md, Durable steps, has no python example"
    exec(compile(blocks[0], "docs/workflows.md", "exec"), {"__name__": "workflows_durable_example"})
