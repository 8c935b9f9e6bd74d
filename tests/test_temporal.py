"""The Temporal adapter (issue 18, part 1): real histories from temporalio/sdk-python
(fixtures/temporal/) imported as checkpoints of workflow:ID, their derived state checked
against an independent reading of the history through temporalio's own protobufs and
payload converter, the history given back as it was, a longer history of the same run
appended as its new events only, and the replay check of workflow code (written here, as
the sdk's test workflows are) with temporalio's Replayer: the unchanged code passes, an
added timer or a renamed activity is exit 13 naming the event. Nothing starts a Temporal
server; nothing uses the network.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_ckpt

temporalio = pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

from temporalio.client import WorkflowHistory  # noqa: E402
from temporalio.converter import DataConverter  # noqa: E402

import ckptcli  # noqa: E402
from ckptcli.adapters.temporal.importer import history_events, history_json  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "temporal"
HISTORIES = sorted(FIXTURES.glob("*.json"))
COMPLETE = FIXTURES / "test_replayer_complete_history.json"
ALTERNATE = FIXTURES / "test_replayer_event_tracing_alternate.json"


def _ckpt(store: Path, *args: Any, cwd: Path | None = None) -> Any:
    return run_ckpt("--store", store, *args, cwd=cwd)


def _import(store: Path, path: Path, *more: str) -> dict[str, Any]:
    r = _ckpt(store, "import", "temporal", path, *more, "--json")
    assert r.returncode == 0, r.stderr.decode()
    result: dict[str, Any] = json.loads(r.stdout)
    return result


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


# -- an independent reading of a history --------------------------------------------------------
def _expected(path: Path) -> dict[str, Any]:
    """What a history says, read through temporalio's protobufs and payload converter (not
    through ckpt's reading of the JSON)."""
    history = WorkflowHistory.from_json("x", path.read_text())
    conv = DataConverter.default.payload_converter

    def value(payloads: Any) -> Any:
        items = list(payloads.payloads)
        if not items:
            return None
        decoded = conv.from_payloads(items)
        return decoded[0] if len(decoded) == 1 else decoded

    out: dict[str, Any] = {"completed": {}, "pending": {}, "timers": {}, "signals": [], "pointer": 0, "tasks": 0, "status": "running"}
    scheduled: dict[int, tuple[str, str, Any]] = {}
    for e in history.events:
        which = e.WhichOneof("attributes")
        a = getattr(e, which)
        if which == "workflow_execution_started_event_attributes":
            out["type"], out["queue"], out["run"] = a.workflow_type.name, a.task_queue.name, a.original_execution_run_id
        elif which == "workflow_task_completed_event_attributes":
            out["pointer"], out["tasks"] = e.event_id, out["tasks"] + 1
        elif which == "activity_task_scheduled_event_attributes":
            scheduled[e.event_id] = (a.activity_id, a.activity_type.name, value(a.input))
            out["pending"][a.activity_id] = a.activity_type.name
        elif which == "activity_task_completed_event_attributes":
            aid, kind, _args = scheduled[a.scheduled_event_id]
            out["completed"][aid] = (kind, value(a.result))
            del out["pending"][aid]
        elif which in (
            "activity_task_failed_event_attributes",
            "activity_task_timed_out_event_attributes",
            "activity_task_canceled_event_attributes",
        ):
            del out["pending"][scheduled[a.scheduled_event_id][0]]
        elif which == "timer_started_event_attributes":
            out["timers"][a.timer_id] = "started"
        elif which == "timer_fired_event_attributes":
            out["timers"][a.timer_id] = "fired"
        elif which == "timer_canceled_event_attributes":
            out["timers"][a.timer_id] = "canceled"
        elif which == "workflow_execution_signaled_event_attributes":
            out["signals"].append((a.signal_name, e.event_id, value(a.input)))
        elif which == "workflow_execution_completed_event_attributes":
            out["status"] = "completed"
    out["args"] = {aid: args for aid, _k, args in scheduled.values()}
    out["events"] = len(history.events)
    return out


def _state(store: Path, ref: str) -> dict[str, Any]:
    r = _ckpt(store, "replay", ref, "--json")
    assert r.returncode == 0, r.stderr.decode()
    state: dict[str, Any] = json.loads(r.stdout)["state"]
    return state


def test_a_failed_activity_is_a_tools_record_in_error_as_the_standard_reducer_writes_it(store_dir: Path, tmp_path: Path) -> None:
    """A failed activity's tools record said `failed`, a status the standard tool.result
    never writes (formats/events.md: ok or error), so readers of `tools` missed it."""
    history = json.loads((FIXTURES / "test_replayer_swallowed_activity_cancellation.json").read_text())
    done = next(e for e in history["events"] if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED")
    attrs = done.pop("activityTaskCompletedEventAttributes")
    done["eventType"] = "EVENT_TYPE_ACTIVITY_TASK_FAILED"
    done["activityTaskFailedEventAttributes"] = {
        "failure": {"message": "card declined"},
        "scheduledEventId": attrs["scheduledEventId"],
        "startedEventId": attrs["startedEventId"],
    }
    path = tmp_path / "failed-activity.json"
    path.write_text(json.dumps(history))
    _import(store_dir, path)
    tools = _state(store_dir, "workflow:failed-activity")["tools"]
    (failed,) = [r for r in tools if r["status"] not in ("ok", "pending")]
    assert failed["status"] == "error" and "card declined" in json.dumps(failed["error"]), failed


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_every_fixture_imports_and_its_derived_state_is_what_the_history_says(store_dir: Path, path: Path) -> None:
    result = _import(store_dir, path)
    want = _expected(path)
    assert result["events"] == want["events"] == result["workflows"][0]["events"] and result["checkpoints"] == 1
    subject = f"workflow:{path.stem}"
    ck = ckptcli.open_checkpoint(subject, store_path=store_dir)
    assert ck.manifest.labels == {
        "adapter": "temporal",
        "workflow.type": want["type"],
        "workflow.run_id": want["run"],
        "workflow.task_queue": want["queue"],
        "workflow.engine": "temporal",
        "events.seq": str(want["events"]),
    }
    state = _state(store_dir, subject)
    t = state["ext"]["temporal"]
    assert (t["workflow"]["type"], t["workflow"]["task_queue"], t["workflow"]["run_id"]) == (want["type"], want["queue"], want["run"])
    assert t["pointer"] == {"event_id": want["pointer"], "workflow_tasks": want["tasks"]}
    assert t["status"] == want["status"]
    acts = t.get("activities", {}).values()
    assert {a["activity_id"]: (a["type"], a["result"]) for a in acts if a["status"] == "completed"} == want["completed"]
    assert {a["activity_id"]: a["type"] for a in acts if a["status"] in ("scheduled", "started", "cancel_requested")} == want["pending"]
    assert {k: v["status"] for k, v in t.get("timers", {}).items()} == want["timers"]
    # the newest KEEP signals (all of a fixture's), and how many were received
    from ckptcli.adapters.temporal.events import KEEP

    assert [(s["name"], s["event_id"], s["input"]) for s in t.get("signals", [])] == want["signals"][-KEEP:]
    assert t.get("signals_received", 0) == len(want["signals"])
    # the activities are also records of the standard tools section, in the shared shape
    tools = state.get("tools", [])
    assert {r["call_id"]: (r["tool"], r["result"]) for r in tools if r["status"] == "ok"} == want["completed"]
    assert {r["call_id"]: r["tool"] for r in tools if r["status"] == "pending"} == want["pending"]
    assert {r["call_id"]: r["args"] for r in tools} == want["args"]
    # the statuses the standard tool.result reducer writes (formats/events.md): ok or error
    assert {r["status"] for r in tools} <= {"pending", "ok", "error"}
    assert len([r for r in tools if r["status"] == "error"]) == len(want["args"]) - len(want["completed"]) - len(want["pending"])
    # the tail is the history: one temporal:<EventType> event per history event, seq = event id
    raw = json.loads(path.read_text())["events"]
    events = ck.section("events")
    assert [e["seq"] for e in events] == [int(e["eventId"]) for e in raw]
    assert [e["kind"] for e in events][:1] == ["temporal:WorkflowExecutionStarted"]
    assert [e["event"] for e in events] == raw


def test_the_fixture_with_a_pending_activity_and_a_cancel_request_says_so(store_dir: Path) -> None:
    path = FIXTURES / "test_replayer_swallowed_activity_cancellation.json"
    _import(store_dir, path)
    state = _state(store_dir, f"workflow:{path.stem}")
    pending = [r for r in state["tools"] if r["status"] == "pending"]
    assert len(pending) == 1 and pending[0]["tool"] == _expected(path)["pending"][pending[0]["call_id"]]
    assert state["ext"]["temporal"]["status"] == "running"  # a cancel was requested; the run had not ended


def test_export_then_import_gives_back_the_history(store_dir: Path, tmp_path: Path) -> None:
    # the older JSON (enum strings) and protobuf JSON as WorkflowHistory.to_json() writes it
    proto = tmp_path / "proto.json"
    proto.write_text(WorkflowHistory.from_json("proto", COMPLETE.read_text()).to_json())
    for path in (COMPLETE, ALTERNATE, proto):
        _import(store_dir, path)
        exported = tmp_path / f"{path.stem}.ckpt"
        r = _ckpt(store_dir, "export", f"workflow:{path.stem}", "-o", exported)
        assert r.returncode == 0, r.stderr.decode()
        other = tmp_path / f"other-{path.stem}"
        ckptcli.init_store(other)
        r = _ckpt(other, "import", exported)
        assert r.returncode == 0, r.stderr.decode()
        ck = ckptcli.open_checkpoint(f"workflow:{path.stem}", store_path=other)
        assert json.loads(history_json(ck)) == json.loads(path.read_text())
        back = WorkflowHistory.from_json(path.stem, {"events": list(history_events(ck))})
        assert back.to_json() == WorkflowHistory.from_json(path.stem, path.read_text()).to_json()
    # a history written by to_json() comes back byte for byte through the SDK's writer
    ck = ckptcli.open_checkpoint("workflow:proto", store_path=store_dir)
    assert WorkflowHistory.from_json("proto", history_json(ck)).to_json() == proto.read_text()


def test_a_longer_history_of_the_same_run_appends_only_its_new_events(store_dir: Path, tmp_path: Path) -> None:
    raw = json.loads(ALTERNATE.read_text())
    short = tmp_path / "run" / "wf.json"
    short.parent.mkdir()
    short.write_text(json.dumps({"events": raw["events"][:8]}))
    first = _import(store_dir, short)
    assert (first["events"], first["checkpoints"], first["already_present"]) == (8, 1, 0)
    state8 = _state(store_dir, "workflow:wf")
    assert state8["ext"]["temporal"]["status"] == "running" and state8["ext"]["temporal"]["pointer"]["event_id"] == 4
    short.write_text(ALTERNATE.read_text())  # the run went on: the whole history now
    second = _import(store_dir, short)
    assert (second["events"], second["checkpoints"], second["already_present"]) == (5, 1, 8)
    ck = ckptcli.open_checkpoint("workflow:wf", store_path=store_dir)
    assert [e["seq"] for e in ck.section("events")] == [9, 10, 11, 12, 13]  # the tail holds the new events only
    assert ck.manifest.parents[0].hex() == first["workflows"][0]["checkpoints"][0]
    # the snapshot under the new tail is the state at event 8, and the end is as a single import's
    assert {k: v for k, v in ck.state().items() if k != "events"} == state8
    whole = tmp_path / "whole" / "wf.json"
    whole.parent.mkdir()
    whole.write_text(ALTERNATE.read_text())
    other = tmp_path / "other"
    ckptcli.init_store(other)
    _import(other, whole)
    assert _state(store_dir, "workflow:wf") == _state(other, "workflow:wf")
    assert json.loads(history_json(ck)) == raw
    # the same file again: nothing new
    again = _import(store_dir, short)
    assert (again["events"], again["checkpoints"], again["already_present"]) == (0, 0, 13)
    # a file of the same run whose stored events differ is a conflict (exit 11), nothing written
    changed = json.loads(ALTERNATE.read_text())
    changed["events"][12]["eventTime"] = "2030-01-01T00:00:00Z"
    changed["events"].append({**changed["events"][12], "eventId": "14"})
    short.write_text(json.dumps(changed))
    r = _ckpt(store_dir, "import", "temporal", short)
    assert r.returncode == 11 and b"event 13 differs from the one stored" in r.stderr and r.stderr.count(b"\n") == 1
    assert ckptcli.open_checkpoint("workflow:wf", store_path=store_dir).hex == ck.hex


def test_a_long_import_is_cut_into_checkpoints_at_completed_workflow_tasks(store_dir: Path, tmp_path: Path) -> None:
    from ckptcli.adapters.temporal import importer
    from ckptcli.adapters.temporal.synth import synthesize

    path = tmp_path / "long.json"
    # past SOFT_EVENTS (2,500) twice, so three checkpoints, and past KEEP (1,000) closed
    # activities (six events each), so older ones are counted
    n = synthesize(COMPLETE, 7_000, path)
    result = _import(store_dir, path)
    assert result["events"] == n and result["checkpoints"] >= 2
    heads = []
    for cid in result["workflows"][0]["checkpoints"]:
        ck = ckptcli.open_checkpoint(cid, store_path=store_dir)
        tail = ck.section("events")
        assert len(tail) <= importer.HARD * importer.SOFT_EVENTS
        heads.append(tail[-1]["kind"])
    assert heads[:-1] == ["temporal:WorkflowTaskCompleted"] * (len(heads) - 1)
    ck = ckptcli.open_checkpoint("workflow:long", store_path=store_dir)
    assert json.loads(history_json(ck)) == json.loads(path.read_text())
    state = _state(store_dir, "workflow:long")
    t = state["ext"]["temporal"]
    assert t["status"] == "completed" and t["pointer"]["event_id"] == n - 1
    # the state is bounded: the newest KEEP closed activities (and their tools records), the older ones counted
    from ckptcli.adapters.temporal.events import KEEP

    total = (n - 5) // 6
    assert total > KEEP, (total, KEEP)  # the history crosses the bound
    newest = [str(i) for i in range(total - KEEP + 1, total + 1)]
    assert sorted(a["activity_id"] for a in t["activities"].values()) == sorted(newest)
    assert t["left_out"] == {"activities": total - KEEP}
    tools = state["tools"]
    assert [r["call_id"] for r in tools] == newest and {r["status"] for r in tools} == {"ok"}


# -- the replay check -----------------------------------------------------------------------------
HELLO = """
import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow


@dataclass
class SayHelloParams:
    name: str
    should_wait: bool = False
    should_error: bool = False
    should_cause_nondeterminism: bool = False


@workflow.defn(name="SayHelloWorkflow")
class SayHello:
    @workflow.run
    async def run(self, params: SayHelloParams) -> str:
        {before}
        return await workflow.execute_activity("{activity}", params.name, schedule_to_close_timeout=timedelta(seconds=60))
"""

SIGNALS = """
import asyncio
from datetime import timedelta

from temporalio import workflow


@workflow.defn(name="ActivityAndSignalsWhileWorkflowDown")
class Down:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.counter = 0

    @workflow.run
    async def run(self, activity_tq: str) -> list[str]:
        act_task = asyncio.create_task(self.run_act(activity_tq))
        await workflow.wait_condition(lambda: self.counter >= 2)
        self.events.append(f"counter-{{self.counter}}")
        await act_task
        return self.events

    @workflow.signal
    async def dosig(self, name: str) -> None:
        self.events.append(f"sig-{{name}}")
        self.counter += 1

    async def run_act(self, activity_tq: str) -> None:
        self.events.append("act-start")
        await workflow.execute_activity("{activity}", "Enchi", schedule_to_close_timeout=timedelta(seconds=30), task_queue=activity_tq)
        self.counter += 1
        self.events.append("act-done")
"""


def _module(tmp: Path, name: str, text: str) -> Path:
    (tmp / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp


def test_the_unchanged_workflow_passes_the_replay_check(store_dir: Path, tmp_path: Path) -> None:
    _import(store_dir, COMPLETE)
    _import(store_dir, ALTERNATE)
    _module(tmp_path, "hello", HELLO.format(before="pass", activity="say_hello"))
    _module(tmp_path, "down", SIGNALS.format(activity="say_hello"))
    r = _ckpt(store_dir, "replay", f"workflow:{COMPLETE.stem}", "--check", "hello:SayHello", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert b"replay check passed: SayHelloWorkflow" in r.stdout and r.stderr == b""
    r = _ckpt(store_dir, "replay", f"workflow:{ALTERNATE.stem}", "--check", "down:Down", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True and json.loads(r.stdout)["events"] == 13


def test_an_added_timer_is_exit_13_naming_the_event(store_dir: Path, tmp_path: Path) -> None:
    _import(store_dir, COMPLETE)
    _module(tmp_path, "hello", HELLO.format(before="await asyncio.sleep(1)", activity="say_hello"))
    r = _ckpt(store_dir, "replay", f"workflow:{COMPLETE.stem}", "--check", "hello:SayHello", cwd=tmp_path)
    assert r.returncode == 13, r.stderr.decode()
    assert b"nondeterminism at event 5 (ActivityTaskScheduled)" in r.stdout
    assert r.stderr.decode().splitlines() == [
        "ckpt: error: the workflow hello:SayHello diverged from the history at event 5 (ActivityTaskScheduled); "
        "see above: what Temporal's replayer said"
    ]
    r = _ckpt(store_dir, "replay", f"workflow:{COMPLETE.stem}", "--check", "hello:SayHello", "--json", cwd=tmp_path)
    d = json.loads(r.stdout)["divergence"]
    assert r.returncode == 13 and (d["event_id"], d["event_type"], d["kind"]) == (5, "ActivityTaskScheduled", "nondeterminism")


def test_a_renamed_activity_is_exit_13_naming_the_event_where_the_history_carries_the_flag(store_dir: Path, tmp_path: Path) -> None:
    # this history's first workflow task carries core flag 1 (id and type determinism checks)
    assert 1 in json.loads(ALTERNATE.read_text())["events"][3]["workflowTaskCompletedEventAttributes"]["sdkMetadata"]["coreUsedFlags"]
    _import(store_dir, ALTERNATE)
    _module(tmp_path, "down", SIGNALS.format(activity="greet"))
    r = _ckpt(store_dir, "replay", f"workflow:{ALTERNATE.stem}", "--check", "down:Down", "--json", cwd=tmp_path)
    assert r.returncode == 13, r.stderr.decode()
    d = json.loads(r.stdout)["divergence"]
    assert (d["event_id"], d["event_type"]) == (5, "ActivityTaskScheduled") and "'say_hello'" in d["reason"] and "'greet'" in d["reason"]


@pytest.mark.parametrize(
    ("text", "spec", "code", "says"),
    [
        (
            "raise RuntimeError('no config here')\n",
            "broken:Thing",
            4,
            "workflow 'broken:Thing': importing broken failed: RuntimeError: no config here",
        ),
        ("import sys\nsys.exit(3)\n", "broken:Thing", 4, "importing broken failed"),
        ("class Thing:\n    pass\n", "broken:Thing", 4, "without @workflow.defn"),
        ("x = 1\n", "nomodule:Thing", 3, "no module named 'nomodule'"),
        ("x = 1\n", "broken", 2, "is not MODULE:WorkflowClass"),
    ],
)
def test_a_workflow_module_that_cannot_be_used_is_one_line(
    store_dir: Path, tmp_path: Path, text: str, spec: str, code: int, says: str
) -> None:
    _import(store_dir, COMPLETE)
    _module(tmp_path, "broken", text)
    r = _ckpt(store_dir, "replay", f"workflow:{COMPLETE.stem}", "--check", spec, cwd=tmp_path)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == code and len(lines) == 1 and says in lines[0] and lines[0].startswith("ckpt: error: "), r.stderr.decode()
    assert r.stdout == b""


def test_compat_runs_the_check_over_a_folder_of_histories_with_junit(store_dir: Path, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    folder = tmp_path / "histories"
    folder.mkdir()
    for p in (COMPLETE, ALTERNATE):
        (folder / p.name).write_text(p.read_text())
    _module(tmp_path, "hello", HELLO.format(before="pass", activity="say_hello"))
    _module(tmp_path, "down", SIGNALS.format(activity="greet"))  # renamed: diverges
    junit = tmp_path / "replay.xml"
    r = _ckpt(store_dir, "compat", "histories", "--workflow", "hello:SayHello", "--workflow", "down:Down", "--junit", junit, cwd=tmp_path)
    assert r.returncode == 1, r.stderr.decode()
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    assert failures[f"histories/{COMPLETE.name}"] is None
    bad = failures[f"histories/{ALTERNATE.name}"]
    assert bad is not None and bad.get("type") == "nondeterminism" and "event 5 (ActivityTaskScheduled)" in (bad.get("message") or "")
    # every Temporal run of the store, the default: the fixed code passes
    _module(tmp_path, "down", SIGNALS.format(activity="say_hello"))
    _import(store_dir, COMPLETE)
    _import(store_dir, ALTERNATE)
    r = _ckpt(store_dir, "compat", "--workflow", "hello:SayHello", "--workflow", "down:Down", "--json", cwd=tmp_path)
    report = json.loads(r.stdout)
    assert (
        r.returncode == 0
        and report["counts"]["as-is"] == 2
        and {c["subject"] for c in report["checkpoints"]}
        == {
            f"workflow:{COMPLETE.stem}",
            f"workflow:{ALTERNATE.stem}",
        }
    )


# -- hostile input ------------------------------------------------------------------------------------
def _refused(store_dir: Path, path: Path) -> tuple[int, str]:
    r = _ckpt(store_dir, "import", "temporal", path)
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: ") and "Traceback" not in lines[0], r.stderr.decode()
    assert ckptcli.list_checkpoints(ckptcli.open_store(store_dir)) == []  # nothing written
    return r.returncode, lines[0]


def test_a_truncated_or_malformed_history_is_one_line_exit_5(store_dir: Path, tmp_path: Path) -> None:
    text = ALTERNATE.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 2 // 3])
    code, line = _refused(store_dir, cut)
    assert code == 5 and "cut.json: the history ends early (truncated JSON" in line
    bad = tmp_path / "bad.json"
    assert '"eventId": "7"' in text
    bad.write_text(text.replace('"eventId": "7"', '"eventId": "7",,'))
    code, line = _refused(store_dir, bad)
    assert code == 5 and "bad.json: malformed JSON after 6 events" in line
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x00\xff" * 100)
    assert _refused(store_dir, binary)[0] == 5


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (lambda h: h["events"][4].update(eventType="EVENT_TYPE_TELEPORTED"), "event 5 has an unknown event type 'EVENT_TYPE_TELEPORTED'"),
        (lambda h: h["events"][4].update(eventType="Teleported"), "event 5 has an unknown event type 'Teleported'"),
        (lambda h: h["events"][4].update(eventId="9"), "events[4] has event id '9', not 5"),
        (lambda h: h["events"].pop(0), "events[0] has event id '2', not 1"),
        (lambda h: h["events"][2].update(eventTime="yesterday"), "event 3 (WorkflowTaskStarted) has no valid eventTime"),
        (lambda h: h["events"][5]["activityTaskStartedEventAttributes"].update(attempt="many"), "event 6 is not a Temporal history event"),
        (lambda h: h.update(events={"not": "a list"}), 'its "events" is a JSON object, not a list: not a Temporal history'),
        (lambda h: h.update(events="a string"), 'its "events" is a string, not a list: not a Temporal history'),
        (lambda h: h.update(other=1, events=[]), "no history events: not a Temporal history"),
        (lambda h: h["events"].__setitem__(1, [1, 2]), "events[1] is a list, not a history event"),
    ],
)
def test_json_that_is_no_history_is_one_line_exit_4(store_dir: Path, tmp_path: Path, mutate: Any, says: str) -> None:
    history = json.loads(ALTERNATE.read_text())
    mutate(history)
    path = tmp_path / "h.json"
    path.write_text(json.dumps(history))
    code, line = _refused(store_dir, path)
    assert code == 4 and says in line, line


def test_json_nested_too_deep_is_refused_before_it_takes_memory(store_dir: Path, tmp_path: Path) -> None:
    # ijson's item builder takes memory quadratic in the depth: 50,000 brackets took 6 GB
    text = ALTERNATE.read_text()
    bomb = tmp_path / "bomb.json"
    assert '"eventId": "7",' in text
    bomb.write_text(text.replace('"eventId": "7",', '"eventId": "7", "x": ' + "[" * 50_000 + "]" * 50_000 + ",", 1))
    code, line = _refused(store_dir, bomb)
    assert code == 7 and "bomb.json: event 7 (its type not read yet) nests deeper than 256 levels" in line, line


def test_a_missing_source_and_a_directory_without_histories(store_dir: Path, tmp_path: Path) -> None:
    assert _refused(store_dir, tmp_path / "nope.json")[0] == 3
    (tmp_path / "empty").mkdir()
    code, line = _refused(store_dir, tmp_path / "empty")
    assert code == 3 and "a directory with no .json history files" in line


def test_a_100_mb_history_imports_in_bounded_memory(store_dir: Path, tmp_path: Path) -> None:
    """Streamed: the importer's peak RSS stays far under what parsing the file whole takes."""
    import subprocess
    import sys

    from ckptcli.adapters.temporal.synth import synthesize

    path = tmp_path / "big.json"
    n = synthesize(COMPLETE, 18_500, path, result_bytes=24 << 10)
    size = path.stat().st_size
    assert size >= 100 << 20, size
    probe = (
        "import resource, subprocess, sys; "
        "r = subprocess.run([sys.executable, '-m', 'ckptcli', '--store', sys.argv[1], 'import', 'temporal', sys.argv[2], '--json'], "
        "capture_output=True); "
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.stderr.write(r.stderr.decode())"
    )
    r = subprocess.run([sys.executable, "-c", probe, str(store_dir), str(path)], capture_output=True, text=True, timeout=900)
    code, peak_kib = map(int, r.stdout.split())
    assert code == 0, r.stderr
    base = subprocess.run(
        [sys.executable, "-c", probe.replace("'import', 'temporal', sys.argv[2], '--json'", "'ls'"), str(store_dir), str(path)],
        capture_output=True,
        text=True,
    )
    baseline_kib = int(base.stdout.split()[1])
    # the whole file parsed at once (json.load) would hold several times its size
    print(f"peak RSS {peak_kib} KiB, {baseline_kib} KiB for ckpt ls, history {size} bytes, {n} events")
    assert (peak_kib - baseline_kib) * 1024 < size, (peak_kib, baseline_kib, size)
    ck = ckptcli.open_checkpoint("workflow:big", store_path=store_dir)
    assert ck.manifest.labels["events.seq"] == str(n)
    t = _state(store_dir, "workflow:big")["ext"]["temporal"]
    from ckptcli.adapters.temporal.events import KEEP

    summary = {"payload_bytes": len(json.dumps("x" * (24 << 10))), "encoding": "json/plain"}
    assert t["status"] == "completed" and len(t["activities"]) == KEEP  # the newest KEEP, the older ones counted
    assert all(a["result"] == summary for a in t["activities"].values()) and t["left_out"] == {"activities": (n - 5) // 6 - KEEP}


def test_the_event_types_are_temporals() -> None:
    from temporalio.api.enums.v1 import EventType

    from ckptcli.adapters.temporal.events import EVENT_TYPES, type_name

    names = [n for n in EventType.keys() if n != "EVENT_TYPE_UNSPECIFIED"]  # noqa: SIM118 - a protobuf enum wrapper
    assert [type_name(n) for n in names] == list(EVENT_TYPES)


def test_the_tui_timeline_steps_through_an_imported_history(store_dir: Path) -> None:
    import asyncio

    pytest.importorskip("textual", reason="textual is not installed (ckpt tui)")
    from ckptcli.history.replay import replay
    from ckptcli.tui.app import CkptApp, open_session
    from ckptcli.tui.screens.timeline import TimelineScreen
    from ckptcli.tui.widgets import ValueTree, VirtualList

    _import(store_dir, ALTERNATE)
    store = ckptcli.open_store(store_dir)
    ck = ckptcli.open_checkpoint(f"workflow:{ALTERNATE.stem}", store)
    app = CkptApp(open_session(store), checkpoint=ck.id, view="timeline", blink=False)

    async def main() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            screen = pilot.app.screen
            assert isinstance(screen, TimelineScreen)
            events = screen.query_one("#events", VirtualList)
            assert events.count == 14  # the snapshot and the 13 events
            await pilot.press(*["down"] * 7)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert str(screen.query_one("#at").content).startswith("seq 7  temporal:ActivityTaskCompleted")
            state = screen.query_one("#state", ValueTree)
            assert state.root.data is not None and state.root.data.value == replay(ck, to_seq=7)
            assert state.marks[("tools", 0, "status")] == "replace"

    asyncio.run(main())
