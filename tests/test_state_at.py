"""The state AT a recorded checkpoint (snapshot + tail applied) in cat, show and diff,
`--snapshot` for the stored sections, and tails that break formats/events.md: named rule
and spec section in replay, fork, take and tui, never a traceback.

A recorder's checkpoint holds, as its sections, the state at the previous checkpoint, and
its events since: reading its sections as "the state" shows every change one checkpoint
late. These tests record a real history with the Recorder and read it through the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, take
from ckptcli.format import limits
from ckptcli.history.recorder import Recorder
from ckptcli.history.replay import load_tail, replay
from ckptcli.history.stateat import Stored, replay_problem, state_at
from ckptcli.store.repository import Store
from tests.conftest import REPO

SPEC = "formats/events.md#"


@pytest.fixture
def history(tmp_path: Path) -> tuple[Store, list[str]]:
    """initial -> c1 (x=1 in its tail) -> c2 (x=2, the bad change, in its tail) -> c3 (a plan push)."""
    store = ckptcli.init_store(tmp_path / "store")
    rec = Recorder.open(store, "agent:bot", tmp_path / "bot.journal", state={"memory": {"keep": "k"}, "plan": [], "tools": []})
    ids = [rec.base]
    rec.append("memory.set", path=["x"], value=1)
    ids.append(rec.checkpoint(message="one").hex)
    rec.append("memory.set", path=["x"], value=2)
    ids.append(rec.checkpoint(message="two").hex)
    rec.append("plan.push", item={"step": "go"})
    ids.append(rec.checkpoint(message="three").hex)
    rec.close()
    return store, ids


def test_diff_compares_the_states_at_the_checkpoints(cli: Any, history: tuple[Store, list[str]]) -> None:
    store, ids = history
    r = cli("diff", ids[1], ids[2], "--store", store.location, "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["patch"][0] == {"op": "replace", "path": "/memory/x", "value": 2}
    assert [op for op in d["patch"] if op["path"].startswith("/memory")] == [{"op": "replace", "path": "/memory/x", "value": 2}]
    assert d["states"]["b"] == {"seq": 2, "snapshot_seq": 1, "tail": [2, 2], "events": 1, "applied": True}
    r = cli("diff", ids[1], ids[2], "--store", store.location)
    assert "~ x: 1 -> 2" in r.out
    assert f"B {ids[2][:12]}: state at seq 2 (snapshot at seq 1 + tail 2..2)" in r.out
    # the stored sections, as before: the change shows one checkpoint late
    r = cli("diff", ids[1], ids[2], "--store", store.location, "--snapshot", "--json")
    assert [op for op in json.loads(r.out)["patch"] if op["path"].startswith("/memory")] == [{"op": "add", "path": "/memory/x", "value": 1}]
    # the plan push is c3's, not reported at c2
    r = cli("diff", ids[2], ids[3], "--store", store.location, "--json", "--section", "plan")
    assert json.loads(r.out)["patch"] == [{"op": "add", "path": "/plan/0", "value": {"step": "go"}}]


def test_diff_patch_turns_one_state_into_the_other(cli: Any, history: tuple[Store, list[str]]) -> None:
    store, ids = history
    a, b = (state_at(open_checkpoint(i, store)).document() for i in (ids[0], ids[3]))
    r = cli("diff", ids[0], ids[3], "--store", store.location, "--json")
    doc = json.loads(json.dumps(a))
    for op in json.loads(r.out)["patch"]:  # a tiny RFC 6902 applier for add/replace/remove
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last = parts[-1]
        if isinstance(node, list):
            if op["op"] == "add":
                node.insert(int(last), op["value"])
            elif op["op"] == "remove":
                del node[int(last)]
            else:
                node[int(last)] = op["value"]
        elif op["op"] == "remove":
            del node[last]
        else:
            node[last] = op["value"]
    assert doc == json.loads(json.dumps(b))


def test_diff_path_restricts_to_one_value(cli: Any, history: tuple[Store, list[str]]) -> None:
    store, ids = history
    r = cli("diff", ids[0], ids[3], "--store", store.location, "--path", "/memory/x", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["patch"] == [{"op": "add", "path": "/memory/x", "value": 2}] and d["path"] == "/memory/x"
    r = cli("diff", ids[2], ids[3], "--store", store.location, "--path", "/memory/x")
    assert "no differences at /memory/x" in r.out
    r = cli("diff", ids[2], ids[3], "--store", store.location, "--path", "/plan/0", "--json")
    assert json.loads(r.out)["patch"] == [{"op": "add", "path": "/plan/0", "value": {"step": "go"}}]
    r = cli("diff", ids[2], ids[3], "--store", store.location, "--path", "memory/x")
    assert r.code == 2 and "JSON Pointer" in r.err


def test_show_and_cat_speak_of_the_state_at_the_checkpoint(cli: Any, history: tuple[Store, list[str]]) -> None:
    store, ids = history
    r = cli("show", ids[2], "--store", store.location)
    assert r.code == 0, r.err
    assert "snapshot at seq 1, tail 2..2" in r.out and "at seq 2" in r.out
    r = cli("show", ids[2], "--store", store.location, "--section", "memory", "--json")
    assert json.loads(r.out) == {"keep": "k", "x": 2}
    r = cli("show", ids[2], "--store", store.location, "--section", "memory", "--json", "--snapshot")
    assert json.loads(r.out) == {"keep": "k", "x": 1}
    r = cli("show", ids[2], "--store", store.location, "--json")
    assert json.loads(r.out)["state"]["seq"] == 2
    r = cli("cat", ids[2], "--store", store.location)
    doc = json.loads(r.out)
    assert doc["sections"]["memory"] == {"keep": "k", "x": 2} and doc["state"]["applied"] is True
    assert [e["seq"] for e in doc["sections"]["events"]] == [2]  # the tail is kept, as stored
    r = cli("cat", ids[2], "--store", store.location, "--snapshot")
    doc = json.loads(r.out)
    assert doc["sections"]["memory"] == {"keep": "k", "x": 1} and doc["state"]["applied"] is False


def test_checkpoints_without_a_tail_are_as_before(cli: Any, store: Store) -> None:
    cid = take(store, {"memory": {"a": 1}, "plan": [], "events": []}, subject="agent:plain").hex
    plain = cli("cat", cid, "--store", store.location).out
    assert "state" not in json.loads(plain)
    assert cli("cat", cid, "--store", store.location, "--snapshot").out == plain
    at = state_at(open_checkpoint(cid, store))
    assert not at.applied and not at.events and at.parts == {}  # nothing decoded, nothing kept
    r = cli("show", cid, "--store", store.location)
    assert "tail" not in r.out


def test_state_at_matches_replay_and_leaves_untouched_parts_stored(history: tuple[Store, list[str]]) -> None:
    store, ids = history
    for cid in ids:
        ck = open_checkpoint(cid, store)
        at = state_at(ck)
        assert at.document(events=False) == replay(load_tail(ck))
    at = state_at(open_checkpoint(ids[2], store))
    assert isinstance(at.parts["plan"], Stored) and isinstance(at.parts["tools"], Stored)  # only memory was decoded
    assert at.decoded == ("memory",)
    assert at.describe() == "state at seq 2 (snapshot at seq 1 + tail 2..2)"


def test_applying_a_tail_respects_the_held_limit(cli: Any, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    big = "x" * 300_000
    tail = [{"seq": 1, "ts": 1, "kind": "memory.set", "path": ["k"], "value": 1}]
    cid = take(store, {"memory": {"big": big}, "plan": [], "events": tail}, subject="agent:big").hex
    plan_only = take(
        store, {"memory": {"big": big}, "plan": [], "events": [{"seq": 1, "ts": 1, "kind": "plan.push", "item": 1}]}, subject="agent:p"
    ).hex
    monkeypatch.setattr(limits, "MAX_HELD_BYTES", 100_000)
    r = cli("cat", cid, "--store", store.location)
    assert r.code == 7 and r.out == "" and r.err.count("\n") == 1
    assert "CKPT_MAX_HELD_BYTES" in r.err and "--snapshot" in r.err and "memory section" in r.err
    r = cli("cat", cid, "--store", store.location, "--snapshot")  # streamed, as before
    assert r.code == 0 and json.loads(r.out)["sections"]["memory"]["big"] == big
    r = cli("cat", plan_only, "--store", store.location)  # memory untouched by the tail: still streamed
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["sections"]["plan"] == [1] and doc["sections"]["memory"]["big"] == big


# -- tails that break formats/events.md -------------------------------------------------------
DEMO_LIKE = {"memory": {"goal": "x"}, "plan": [], "tools": [], "events": [{"seq": 1, "kind": "message.append", "role": "user"}]}


def _one_error_line(err: str) -> str:
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_take_warns_and_replay_fork_name_the_rule(cli: Any, store: Store, tmp_path: Path) -> None:
    doc = tmp_path / "s.json"
    doc.write_text(json.dumps(DEMO_LIKE))
    r = cli("take", doc, "--subject", "agent:demo", "--store", store.location)
    assert r.code == 0 and re.fullmatch(r"[0-9a-f]{64}\n", r.out)
    warnings = [line for line in r.err.splitlines() if line.startswith("ckpt: warning:")]
    assert len(warnings) == 1 and "will not replay" in warnings[0] and "'ts'" in warnings[0] and SPEC + "the-event-record" in warnings[0]
    for args in (("replay", "latest"), ("fork", "latest", "--at", "1")):
        r = cli(*args, "--store", store.location)
        assert r.code == 4, (args, r.err)
        line = _one_error_line(r.err)
        assert "has no 'ts'" in line and "nanoseconds since the epoch" in line and SPEC + "the-event-record" in line, args
    # cat, show and diff read any checkpoint, as before: the stored sections, and a warning why
    for args in (("show", "latest"), ("cat", "latest"), ("diff", "latest", "latest")):
        r = cli(*args, "--store", store.location)
        assert r.code == 0, (args, r.err)
        assert r.err.count("ckpt: warning:") == 1 and "has no 'ts'" in r.err and SPEC + "the-event-record" in r.err, args
        assert "stored sections" in r.err and "Traceback" not in r.err
    assert json.loads(cli("cat", "latest", "--store", store.location).out)["sections"]["memory"] == {"goal": "x"}
    # a missing field of a standard kind names that kind's rule
    doc.write_text(json.dumps({**DEMO_LIKE, "events": [{"seq": 1, "ts": 5, "kind": "message.append", "role": "user"}]}))
    r = cli("take", doc, "--subject", "agent:demo", "--store", store.location)
    assert r.code == 0 and "a message.append event has message" in r.err and SPEC + "standard-kinds" in r.err
    r = cli("replay", "latest", "--store", store.location)
    assert r.code == 4 and SPEC + "standard-kinds" in _one_error_line(r.err)
    # a tail that replays: no warning
    doc.write_text(json.dumps({**DEMO_LIKE, "events": [{"seq": 1, "ts": 5, "kind": "message.append", "message": {"role": "user"}}]}))
    r = cli("take", doc, "--subject", "agent:demo", "--store", store.location)
    assert r.code == 0 and "warning" not in r.err


def test_take_warns_about_an_event_that_does_not_fit(cli: Any, store: Store, tmp_path: Path) -> None:
    doc = tmp_path / "s.json"
    doc.write_text(json.dumps({"memory": {}, "plan": [], "events": [{"seq": 1, "ts": 1, "kind": "plan.pop"}]}))
    r = cli("take", doc, "--subject", "agent:demo", "--store", store.location)
    assert r.code == 0 and r.err.count("ckpt: warning:") == 1 and "nothing to pop" in r.err and SPEC + "reducers" in r.err


def test_take_warns_about_a_tail_out_of_order_as_replay_refuses_it(cli: Any, store: Store, tmp_path: Path) -> None:
    """take reads the document's tail with the rules replay reads a checkpoint's with
    (events.read_tail): the same words, with no checkpoint to name yet."""
    doc = tmp_path / "s.json"
    doc.write_text(
        json.dumps({**DEMO_LIKE, "events": [{"seq": 3, "ts": 1, "kind": "plan.push", "item": 1}, {"seq": 2, "ts": 2, "kind": "plan.pop"}]})
    )
    r = cli("take", doc, "--subject", "agent:demo", "--store", store.location)
    said = "events[1] has seq 2, not after the previous event's 3"
    assert r.code == 0 and r.err.count("ckpt: warning:") == 1 and said in r.err and SPEC + "checkpoints-snapshot-and-tail" in r.err, r.err
    assert ": : " not in r.err, r.err  # no empty "where" before it
    r = cli("replay", "latest", "--store", store.location)
    assert r.code == 4 and f"checkpoint {r.err.split('checkpoint ')[1][:12]}: {said}" in _one_error_line(r.err), r.err


def test_tui_refuses_a_bad_tail_and_a_missing_manifest_before_starting(cli: Any, store: Store) -> None:
    take(store, DEMO_LIKE, subject="agent:demo")
    r = cli("tui", "latest", "--store", store.location, "--timeline")
    assert r.code == 4 and "has no 'ts'" in _one_error_line(r.err) and SPEC + "the-event-record" in r.err
    cid = take(store, {"memory": {"a": 1}}, subject="agent:gone").hex
    r = cli("tag", "gone", cid, "--store", store.location)
    assert r.code == 0, r.err
    (Path(store.location) / "manifests" / cid).unlink()
    r = cli("tui", "gone", "--store", store.location)
    assert r.code == 3 and "does not exist" in _one_error_line(r.err)


def test_the_demo_and_docs_examples_follow_the_spec() -> None:
    demo = (REPO / "scripts" / "demo").read_text()
    states = re.findall(r"<<'JSON'\n(.*?)\nJSON", demo, re.S)
    assert states
    for text in states:
        doc = json.loads(text)
        assert replay_problem(doc) is None, text
        for ev in doc.get("events", []):
            assert {"seq", "ts", "kind"} <= set(ev), ev
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for block in re.findall(r"```(?:json)?\n(\{.*?\})\n```", path.read_text(), re.S):
            try:
                doc = json.loads(block)
            except ValueError:
                continue
            assert replay_problem(doc) is None, (path.name, block)


def test_a_huge_tail_is_refused_clearly_and_snapshot_streams_it(cli: Any, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [{"seq": i, "ts": i, "kind": "error", "message": "e" * 1000} for i in range(1, 301)]
    cid = take(store, {"memory": {}, "plan": [], "events": events}, subject="agent:loud").hex
    monkeypatch.setattr(limits, "MAX_HELD_BYTES", 100_000)
    r = cli("cat", cid, "--store", store.location)
    assert r.code == 7 and r.out == "" and "events section" in _one_error_line(r.err) and "--snapshot" in r.err
    r = cli("cat", cid, "--store", store.location, "--snapshot")
    assert r.code == 0 and len(json.loads(r.out)["sections"]["events"]) == 300
