"""Calls in doubt after a restore (issue 18 part 3; ckptcli/indoubt.py, docs/workflows.md):
real recorder runs killed with SIGKILL in the middle of a tool call, then restored with
`ckpt restore`, shown with `ckpt show`, reopened with Recorder.open; what is and what is not
in doubt (completed, failed and retried calls); hostile `tools` sections; and the policy
that takes a checkpoint right before a non-idempotent call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import checkpoint_in_doubt, in_doubt, open_checkpoint
from ckptcli.history.events import LABEL_SEQ
from ckptcli.history.recorder import CheckpointPolicy, Recorder, non_idempotent
from ckptcli.indoubt import MAX_ID, MAX_LISTED, MAX_SHOWN, MAX_SUMMARY, summarize
from ckptcli.store.repository import Store
from tests.conftest import REPO, run_ckpt

SECRET = "sk-proj-" + "Q" * 40  # an OpenAI-looking key: the generic adapter's rules redact it

# The child: a real recorder run whose last tool call hangs (it writes the marker first);
# the test kills it there with SIGKILL. argv: store, journal, marker, scenario.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import ckptcli
    from ckptcli.history.events import ToolFailed
    from ckptcli.history.recorder import CheckpointPolicy, Recorder, non_idempotent

    store_path, journal, marker, scenario = sys.argv[1:5]
    SECRET = "sk-proj-" + "Q" * 40

    def hang(args):
        Path(marker).write_text("in the call")
        time.sleep(600)

    def declined(args):
        raise RuntimeError("card declined")

    tools = {
        "crm.lookup": lambda args: {"order": args["order"], "status": "lost"},
        "payments.refund": non_idempotent(hang),
        "payments.refund.declined": non_idempotent(declined),
        "email.send": hang,
    }
    # with the policy, the checkpoint right before the refund holds it; without, every event is one
    policy = CheckpointPolicy(before_non_idempotent=True) if scenario != "nokey" else CheckpointPolicy(every_events=1)
    store = ckptcli.open_store(store_path)
    rec = Recorder.open(store, "agent:support-bot", journal, policy=policy, tools=tools)

    def step(ctx, ev):
        ctx.tool("crm.lookup", {"order": "A-1001"})
        if scenario == "keyed":
            ctx.tool("payments.refund", {"order": "A-1001", "amount": 30, "api_key": "crm-live-8f3a", "note": SECRET},
                     key="refund-A-1001")
        elif scenario == "nokey":
            ctx.tool("email.send", {"to": "customer@example.com", "subject": "your refund"})
        elif scenario == "failed":
            try:
                ctx.tool("payments.refund.declined", {"order": "A-1001", "amount": 30}, key="refund-A-1001-card")
            except ToolFailed:
                pass
            ctx.tool("payments.refund", {"order": "A-1001", "amount": 30, "via": "bank"}, key="refund-A-1001-bank")
        elif scenario == "retry":
            try:
                ctx.tool("payments.refund.declined", {"order": "A-1001", "amount": 30}, key="refund-A-1001")
            except ToolFailed:
                pass
            ctx.tool("payments.refund", {"order": "A-1001", "amount": 30}, key="refund-A-1001")  # the retry, same key

    rec.step(step, "message.append", message={"role": "user", "content": "where is my refund?"})
    """
)


def killed_mid_call(tmp_path: Path, scenario: str) -> tuple[Path, Path]:
    """Run the child until its last call has started, SIGKILL it there; (store path, journal)."""
    store_path, journal, marker = tmp_path / "store", tmp_path / "bot.journal", tmp_path / "in-call"
    if not store_path.exists():
        ckptcli.init_store(store_path)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_path), str(journal), str(marker), scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if child.poll() is not None:
            raise AssertionError(f"the child ended before its call: {child.communicate()[1].decode()}")
        assert time.monotonic() < deadline, "the child never reached its call"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err.decode()
    return store_path, journal


def restore_json(store_path: Path, tmp_path: Path, ref: str = "agent:support-bot") -> dict[str, Any]:
    proc = run_ckpt("restore", ref, "-o", tmp_path / "state.json", "--json", "--store", store_path)
    assert proc.returncode == 0, proc.stderr.decode()
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


# -- killed in the middle of a call ---------------------------------------------------------------
def test_a_call_killed_midway_is_named_in_doubt_with_its_key_by_restore_show_and_reopening(tmp_path: Path) -> None:
    store_path, journal = killed_mid_call(tmp_path, "keyed")

    proc = run_ckpt("restore", "agent:support-bot", "-o", tmp_path / "state.json", "--store", store_path)
    assert proc.returncode == 0, proc.stderr.decode()
    err = proc.stderr.decode()
    lines = err.splitlines()
    assert lines[0].startswith("in doubt at ") and "1 call sent without a recorded result" in lines[0], err
    (call,) = lines[1:]
    assert "call-4  payments.refund  " in call and call.endswith("key refund-A-1001  (seq 4)"), call
    assert '"order": "A-1001", "amount": 30' in call
    assert "[REDACTED:secret-key]" in call and "[REDACTED:openai-key]" in call
    assert "crm-live-8f3a" not in err and SECRET not in err  # the arguments' secrets never shown
    assert "crm.lookup" not in err  # the completed call is not in doubt
    last = json.loads((tmp_path / "state.json").read_text())["events"][-1]  # the document restored: the call ends its tail
    assert (last["kind"], last["call_id"], last["key"]) == ("tool.call", "call-4", "refund-A-1001")

    doc = restore_json(store_path, tmp_path)
    (item,) = doc["in_doubt"]
    assert set(item) == {"call_id", "tool", "args", "key", "started", "seq", "index"}
    assert (item["call_id"], item["tool"], item["key"], item["seq"]) == ("call-4", "payments.refund", "refund-A-1001", 4)
    assert type(item["started"]) is int and item["started"] > 0
    assert item["index"] == 1 and len(item["args"]) <= MAX_SUMMARY and SECRET not in item["args"]

    show = run_ckpt("show", "agent:support-bot", "--store", store_path)
    assert show.returncode == 0, show.stderr.decode()
    text = show.stdout.decode()
    assert "in doubt: 1 call sent without a recorded result" in text and "key refund-A-1001" in text
    shown = json.loads(run_ckpt("show", "agent:support-bot", "--json", "--store", store_path).stdout)
    assert shown["in_doubt"] == doc["in_doubt"]

    # the library: reopening the run names it (Recovery.in_doubt, Recorder.in_doubt())
    store = ckptcli.open_store(store_path)
    rec = Recorder.open(store, "agent:support-bot", journal)
    try:
        assert rec.recovery is not None
        (again,) = rec.recovery.in_doubt
        assert (again.call_id, again.tool, again.key, again.seq) == ("call-4", "payments.refund", "refund-A-1001", 4)
        assert rec.in_doubt() == [again]
    finally:
        rec.close()
    assert [d.to_dict() for d in checkpoint_in_doubt(open_checkpoint("agent:support-bot", store))] == doc["in_doubt"]


def test_a_call_without_a_key_says_so(tmp_path: Path) -> None:
    store_path, journal = killed_mid_call(tmp_path, "nokey")
    proc = run_ckpt("restore", "agent:support-bot", "--no-state", "--store", store_path)
    assert proc.returncode == 0, proc.stderr.decode()
    (call,) = proc.stderr.decode().splitlines()[1:]
    assert call.startswith("  call-4  email.send  ") and call.endswith("no idempotency key  (seq 4)"), call
    (item,) = restore_json(store_path, tmp_path)["in_doubt"]
    assert item["key"] is None and item["tool"] == "email.send"
    rec = Recorder.open(ckptcli.open_store(store_path), "agent:support-bot", journal)
    try:
        assert rec.recovery is not None and [d.key for d in rec.recovery.in_doubt] == [None]
    finally:
        rec.close()


def test_a_failed_call_is_not_in_doubt(tmp_path: Path) -> None:
    store_path, _ = killed_mid_call(tmp_path, "failed")
    doc = restore_json(store_path, tmp_path)
    assert [(d["tool"], d["key"]) for d in doc["in_doubt"]] == [("payments.refund", "refund-A-1001-bank")]
    from ckptcli.history.stateat import state_at

    live = state_at(open_checkpoint("agent:support-bot", ckptcli.open_store(store_path))).document()
    assert [r["status"] for r in live["tools"]] == ["ok", "error", "pending"]  # the declined one is recorded failed


def test_a_retried_call_with_one_key_is_in_doubt_once_and_settled_by_a_retry_that_succeeds(tmp_path: Path) -> None:
    store_path, journal = killed_mid_call(tmp_path, "retry")
    (item,) = restore_json(store_path, tmp_path)["in_doubt"]  # the failed first attempt is not in doubt
    assert (item["call_id"], item["key"]) == ("call-6", "refund-A-1001")

    # a new process resumes the run and reconciles: it retries with the SAME key, which succeeds
    store = ckptcli.open_store(store_path)
    rec = Recorder.open(store, "agent:support-bot", journal, tools={"payments.refund": lambda args: {"refund": "R-77"}})
    try:
        assert rec.recovery is not None and [d.key for d in rec.recovery.in_doubt] == ["refund-A-1001"]
        rec.append("tool.call", call_id="call-6-retry", tool="payments.refund", args={"order": "A-1001", "amount": 30}, key="refund-A-1001")
        rec.append("tool.result", call_id="call-6-retry", result={"refund": "R-77"})
        assert rec.in_doubt() == []
        rec.checkpoint(message="reconciled")
    finally:
        rec.close()
    doc = restore_json(store_path, tmp_path)
    assert "in_doubt" not in doc
    from ckptcli.history.stateat import state_at

    live = state_at(open_checkpoint("agent:support-bot", store)).document()
    # the killed attempt stays pending in the log; the later success of its key settles it
    assert [(r["call_id"], r["status"]) for r in live["tools"] if r.get("key") == "refund-A-1001"] == [
        ("call-4", "error"),
        ("call-6", "pending"),
        ("call-6-retry", "ok"),
    ]
    assert in_doubt(live) == []
    show = run_ckpt("show", "agent:support-bot", "--store", store_path)
    assert show.returncode == 0 and "in doubt" not in show.stdout.decode()


# -- what is in doubt, from a state --------------------------------------------------------------------
def _call(call_id: str, status: str, key: str | None = None, seq: int = 1, **more: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"call_id": call_id, "tool": "t", "args": {"n": seq}}
    if key is not None:
        rec["key"] = key
    return {**rec, "status": status, "seq": seq, "ts": 10 * seq, **more}


def test_completed_failed_and_settled_calls_are_not_in_doubt() -> None:
    tools = [
        _call("a", "ok", seq=1),
        _call("b", "error", seq=2),
        _call("c", "pending", "k1", seq=3),  # settled: a later call with its key succeeded
        _call("d", "ok", "k1", seq=4),
        _call("e", "pending", "k2", seq=5),
        _call("f", "error", "k2", seq=6),  # a later failure of the same key settles nothing
        _call("g", "pending", seq=7),
    ]
    got = in_doubt({"tools": tools})
    assert [(d.call_id, d.key, d.seq, d.started, d.index) for d in got] == [("e", "k2", 5, 50, 4), ("g", None, 7, 70, 6)]
    assert got.total == 2
    assert (
        in_doubt({"tools": [_call("x", "ok", "k"), _call("y", "pending", "k", seq=2)]})[0].call_id == "y"
    )  # an earlier ok: still in doubt
    one = in_doubt({"tools": tools}, limit=1)
    assert len(one) == 1 and one.total == 2


def test_a_tail_not_yet_applied_counts_and_an_applied_one_is_not_counted_twice() -> None:
    call = {"seq": 8, "ts": 80, "kind": "tool.call", "call_id": "call-8", "tool": "pay", "args": {"x": 1}, "key": "K"}
    done = {"seq": 9, "ts": 90, "kind": "tool.result", "call_id": "call-8", "result": 1}
    snapshot: dict[str, Any] = {"memory": {}, "tools": [_call("a", "pending", seq=2)]}
    got = in_doubt({**snapshot, "events": [call]})
    assert [(d.call_id, d.index) for d in got] == [("a", 0), ("call-8", 1)]
    assert [d.call_id for d in in_doubt({**snapshot, "events": [call, done]})] == ["a"]
    # the same state with its tail applied, the tail beside it (StateAt.document() gives this)
    applied = {"tools": [_call("a", "pending", seq=2), {**_call("call-8", "pending", "K", seq=8)}], "events": [call]}
    assert [d.call_id for d in in_doubt(applied)] == ["a", "call-8"]
    finished = {"tools": [_call("a", "pending", seq=2), {**_call("call-8", "ok", "K", seq=8), "result_seq": 9}], "events": [call, done]}
    assert [d.call_id for d in in_doubt(finished)] == ["a"]


@pytest.mark.parametrize(
    "state",
    [
        None,
        "tools",
        {"tools": "not a list"},
        {"tools": {"call_id": "c", "status": "pending"}},
        {"tools": [1, "x", None, [], {"status": "ok"}]},
        {"tools": [], "events": "nope"},
        {"tools": [], "events": [1, {"kind": "tool.call"}, {"kind": "tool.result", "seq": 2, "call_id": "zz"}]},
    ],
)
def test_hostile_shapes_hold_no_call_in_doubt(state: Any) -> None:
    assert in_doubt(state) == []


def test_records_without_fields_are_named_as_well_as_they_can_be() -> None:
    (bare, odd) = in_doubt(
        {"tools": [{"status": "pending"}, {"status": "pending", "call_id": 5, "key": ["k"], "ts": -1, "seq": "s", "tool": {}}]}
    )
    assert (bare.call_id, bare.tool, bare.key, bare.seq, bare.started, bare.args) == (
        None,
        None,
        None,
        None,
        None,
        "(no arguments recorded)",
    )
    assert (odd.call_id, odd.tool, odd.key, odd.seq, odd.started, odd.index) == (None, None, None, None, None, 1)
    assert bare.line() == "(no call id)  (no tool)  (no arguments recorded)  no idempotency key  (tools[0])"


def test_the_summary_is_bounded_redacted_and_reads_only_what_it_shows() -> None:
    deep: Any = "bottom"
    for _ in range(5000):
        deep = [deep]
    args = {
        "password": "hunter2",
        "header": "Authorization: Bearer abcdefghijklmnop",
        "blob": "x" * 10_000_000,
        "deep": deep,
        "raw": b"\x00" * 9,
    }
    text = summarize(args)
    assert len(text) <= MAX_SUMMARY and text.endswith("…")
    assert "hunter2" not in text and "abcdefghijklmnop" not in text
    assert text.startswith('{"password": "[REDACTED:secret-key]", "header": "[REDACTED:authorization-header]", "blob": "xxx')
    assert summarize([deep]).count("[") <= MAX_SUMMARY
    assert summarize({"n": 2**5000, "f": float("nan"), "b": b"ab"}) == '{"n": <5001-bit integer>, "f": "nan", "b": <2 bytes>}'
    # a secret that starts within what is shown is found whole, however long the string
    assert SECRET not in summarize({"note": "a" * 100 + " " + SECRET + " " + "b" * 1_000_000})


# -- hostile tools sections in checkpoints, through the CLI -----------------------------------------
def _take(store: Store, doc: dict[str, Any]) -> str:
    return ckptcli.take(store, doc, subject="agent:hostile").hex


@pytest.mark.parametrize(
    "tools",
    [
        "not a list",
        {"call_id": "c", "status": "pending"},
        [1, "x", None, [], {"status": "ok"}, {"status": 7}],
    ],
)
def test_a_tools_section_of_the_wrong_shape_is_no_call_in_doubt_and_no_error(store: Store, tmp_path: Path, cli: Any, tools: Any) -> None:
    cid = _take(store, {"memory": {}, "tools": tools})
    for args in (["show", cid], ["restore", cid, "-o", tmp_path / "s.json"]):
        r = cli(*args, "--store", tmp_path / "store")
        assert r.code == 0, r.err
        assert "in doubt" not in r.out + r.err and "Traceback" not in r.err
    r = cli("show", cid, "--json", "--store", tmp_path / "store")
    assert r.code == 0 and "in_doubt" not in json.loads(r.out)


def test_hostile_records_huge_arguments_and_keys_give_bounded_output(store: Store, tmp_path: Path, cli: Any) -> None:
    huge = {"status": "pending", "call_id": "c-huge", "tool": "t" * 5000, "key": "k" * 100_000, "args": {"blob": "x" * 5_000_000}}
    cid = _take(store, {"memory": {}, "tools": [{"status": "pending"}, {"status": "pending", "call_id": 5, "key": ["k"]}, huge]})
    r = cli("restore", cid, "-o", tmp_path / "s.json", "--store", tmp_path / "store")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    assert lines[0].startswith("in doubt at ") and "3 calls" in lines[0]
    assert lines[1] == "  (no call id)  (no tool)  (no arguments recorded)  no idempotency key  (tools[0])"
    assert lines[2] == "  (no call id)  (no tool)  (no arguments recorded)  no idempotency key  (tools[1])"
    assert lines[3].startswith("  c-huge  ttt") and len(lines[3]) < 3 * MAX_ID + MAX_SUMMARY
    r = cli("show", cid, "--json", "--store", tmp_path / "store")
    assert r.code == 0, r.err
    item = json.loads(r.out)["in_doubt"][2]
    assert len(item["key"]) == MAX_ID and item["key"].endswith("…") and len(item["args"]) <= MAX_SUMMARY
    assert len(r.out) < 10_000


def test_many_calls_in_doubt_are_listed_up_to_a_bound(store: Store, tmp_path: Path, cli: Any) -> None:
    n = MAX_LISTED + 200
    cid = _take(store, {"memory": {}, "tools": [_call(f"c{i}", "pending", seq=i + 1) for i in range(n)]})
    r = cli("show", cid, "--store", tmp_path / "store")
    assert r.code == 0, r.err
    block = r.out.split("in doubt: ")[1].splitlines()
    assert block[0].startswith(f"{n} calls") and len(block) == 1 + MAX_SHOWN + 1
    assert block[-1] == f"  ... and {n - MAX_SHOWN} more (--json lists {MAX_LISTED})"
    doc = json.loads(cli("restore", cid, "--no-state", "--json", "--store", tmp_path / "store").out)
    assert len(doc["in_doubt"]) == MAX_LISTED and doc["in_doubt_total"] == n


def test_a_tail_that_does_not_replay_still_names_its_calls(store: Store, tmp_path: Path, cli: Any) -> None:
    call = {"seq": 1, "ts": 5, "kind": "tool.call", "call_id": "c1", "tool": "pay", "args": {"a": 1}, "key": "K1"}
    stray = {"seq": 2, "ts": 6, "kind": "tool.result", "call_id": "nobody"}  # no pending call of that id: the replay stops
    cid = _take(store, {"memory": {}, "tools": [], "events": [call, stray]})
    r = cli("show", cid, "--json", "--store", tmp_path / "store")
    assert r.code == 0, r.err
    assert [(d["call_id"], d["key"]) for d in json.loads(r.out)["in_doubt"]] == [("c1", "K1")]
    assert "warning" in r.err  # the tail's problem, as before


def test_an_exported_checkpoint_file_names_its_calls_in_doubt(tmp_path: Path) -> None:
    store_path, _ = killed_mid_call(tmp_path, "keyed")
    assert run_ckpt("export", "agent:support-bot", "-o", tmp_path / "bot.ckpt", "--store", store_path).returncode == 0
    proc = run_ckpt("restore", tmp_path / "bot.ckpt", "--no-state", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    assert [d["key"] for d in json.loads(proc.stdout)["in_doubt"]] == ["refund-A-1001"]


# -- the policy: a checkpoint right before a non-idempotent call --------------------------------------
def _checkpoints(store: Store) -> list[tuple[int, str]]:
    from ckptcli.listing import ListFilter, list_checkpoints

    out = []
    for cid, summary in list_checkpoints(store, ListFilter(subject="agent:bot")):
        out.append((int(summary.labels[LABEL_SEQ]), cid.hex()))
    return sorted(out)


def test_a_non_idempotent_call_gets_a_checkpoint_that_holds_it_just_before_it_runs(store: Store, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def refund(args: Any) -> Any:
        # while the tool runs, the store already holds a checkpoint naming this call in doubt
        ((seq, hexid),) = [c for c in _checkpoints(store) if c[0] > 0]
        seen["at"] = [(d.call_id, d.key, d.seq) for d in checkpoint_in_doubt(open_checkpoint(hexid, store))]
        seen["seq"] = seq
        return "R-1"

    tools = {"crm.lookup": lambda args: "lost", "payments.refund": non_idempotent(refund)}
    rec = Recorder.open(store, "agent:bot", tmp_path / "j", policy=CheckpointPolicy(before_non_idempotent=True), tools=tools)
    try:

        def step(ctx: Any, ev: Any) -> None:
            ctx.tool("crm.lookup", {"order": "A-1"})  # idempotent: no checkpoint
            ctx.tool("payments.refund", {"order": "A-1"}, key="refund-A-1")

        rec.step(step, "message.append", message="refund please")
        assert seen == {"at": [("call-4", "refund-A-1", 4)], "seq": 4}
        assert [seq for seq, _ in _checkpoints(store)] == [0, 4]  # the initial state, then the one before the refund
        assert rec.in_doubt() == []

        # a tool.call appended by hand is marked with idempotent=False
        rec.append("tool.call", call_id="mail-1", tool="email.send", args={"to": "a@b"}, idempotent=False)
        assert [seq for seq, _ in _checkpoints(store)] == [0, 4, 6]
        assert [d.call_id for d in checkpoint_in_doubt(open_checkpoint(_checkpoints(store)[-1][1], store))] == ["mail-1"]
        rec.append("tool.result", call_id="mail-1", result="sent")
        rec.append("tool.call", call_id="mail-2", tool="email.send", args={"to": "a@b"}, idempotent=True)
        rec.append("tool.call", call_id="mail-3", tool="email.send", args={"to": "a@b"})
        assert [seq for seq, _ in _checkpoints(store)] == [0, 4, 6]  # not marked: no checkpoint
    finally:
        rec.close()


def test_when_the_checkpoint_before_a_non_idempotent_call_fails_the_tool_does_not_run(tmp_path: Path) -> None:
    import shutil

    from ckptcli.errors import StoreIOError

    store = ckptcli.init_store(tmp_path / "store")
    ran: list[Any] = []
    tools = {"payments.refund": non_idempotent(ran.append)}
    rec = Recorder.open(store, "agent:bot", tmp_path / "j", policy=CheckpointPolicy(before_non_idempotent=True), tools=tools)
    try:
        shutil.rmtree(tmp_path / "store" / "tmp")  # the store can no longer write anything
        (tmp_path / "store" / "tmp").write_text("not a directory")
        with pytest.raises(StoreIOError):
            rec.step(lambda ctx, ev: ctx.tool("payments.refund", {"order": "A-1"}, key="k"), "message.append", message="m")
        assert ran == []
        (record,) = rec.state["tools"]
        assert record["status"] == "error" and record["error"].startswith("not run: the checkpoint before it failed: ")
        assert rec.in_doubt() == []  # never sent: its outcome is known
    finally:
        rec.close()


def test_without_the_policy_a_non_idempotent_tool_takes_no_checkpoint(store: Store, tmp_path: Path) -> None:
    tools = {"payments.refund": non_idempotent(lambda args: "R-1")}
    rec = Recorder.open(store, "agent:bot", tmp_path / "j", tools=tools)
    try:
        rec.step(lambda ctx, ev: ctx.tool("payments.refund", {"order": "A-1"}, key="k"), "message.append", message="m")
        rec.append("tool.call", call_id="mail-1", tool="email.send", args={}, idempotent=False)
        assert [seq for seq, _ in _checkpoints(store)] == [0]
    finally:
        rec.close()


def test_the_agent_adapter_names_the_calls_in_doubt_of_a_restored_agent(store: Store) -> None:
    from ckptcli.adapters.generic import AgentAdapter

    adapter = AgentAdapter(memory="goal", tools="tool_log")
    agent = {"goal": "refund", "tool_log": [_call("a", "ok", "k0"), _call("b", "pending", "k1", seq=2, args={"token": "t0ps3cret"})]}
    adapter.take(store, agent, subject="agent:bot")
    fresh = adapter.restore(store, "agent:bot", into={"goal": "", "tool_log": []})
    (d,) = adapter.in_doubt(fresh)
    assert (d.call_id, d.key) == ("b", "k1") and "t0ps3cret" not in d.args
    assert AgentAdapter(memory="goal").in_doubt(fresh) == []


# -- the guide's example ------------------------------------------------------------------------------
def _guide_blocks() -> list[str]:
    """The Python blocks of the guide's section in docs/workflows.md."""
    import re

    for name in ("workflows.md",):
        path = REPO / "docs" / name
        if not path.is_file():
            continue
        text = path.read_text()
        start = text.find("## Reconciling in-doubt calls after a restore")
        if start < 0:
            continue
        end = text.find("\n## ", start + 1)
        return re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S)
    raise AssertionError("no guide section 'Reconciling in-doubt calls after a restore' in docs/")


def test_the_guides_example_reconciles_a_refund_killed_midway_exactly_once(tmp_path: Path) -> None:
    run, reconcile = _guide_blocks()
    # the first process dies in the middle of the refund (before the provider's answer is recorded)
    killed = run.replace(
        "    return REFUNDS.setdefault", "    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n    return REFUNDS.setdefault", 1
    )
    assert killed != run
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.run([sys.executable, "-c", killed], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stderr
    show = run_ckpt("show", "agent:support-bot", "--json", "--store", tmp_path / "bot-store")
    assert [(d["tool"], d["key"]) for d in json.loads(show.stdout)["in_doubt"]] == [("payments.refund", "refund-A-1001")]
    # a second process: the same definitions, the store opened again, then the guide's reconciling
    second = run.split("store = ckptcli.init_store")[0] + 'store = ckptcli.open_store("bot-store")\n' + reconcile
    second += "\nprint(json.dumps([REFUNDS, rec.state['tools'][0]['status']]))\n"
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + second], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"refund-A-1001": {"refund": "R-1", "amount": 30}}, "ok"]
    show = run_ckpt("show", "agent:support-bot", "--json", "--store", tmp_path / "bot-store")
    assert "in_doubt" not in json.loads(show.stdout)


def test_control_characters_in_a_record_are_escaped_in_the_human_output(store: Store, tmp_path: Path, cli: Any) -> None:
    evil = {"status": "pending", "call_id": "c\x1b[2J", "tool": "pay\u202e", "key": "k\r\n", "args": {"note\x07": "a\x1b]0;x\x07"}}
    cid = _take(store, {"memory": {}, "tools": [evil]})
    for args in (["show", cid], ["restore", cid, "--no-state"]):
        r = cli(*args, "--store", tmp_path / "store")
        assert r.code == 0, r.err
        text = r.out + r.err
        assert "in doubt" in text
        assert not any(c in text for c in ("\x1b", "\x07", "\u202e", "\r")), repr(text)
        assert "c\\x1b[2J" in text and "key k\\r\\n" in text
    (item,) = json.loads(cli("show", cid, "--json", "--store", tmp_path / "store").out)["in_doubt"]
    assert (item["call_id"], item["key"]) == ("c\x1b[2J", "k\r\n")  # --json gives them exactly
