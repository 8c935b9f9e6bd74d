"""`ckpt log` and `ckpt bisect` on real recorded histories: log --path finds exactly the
checkpoints (and events) where a value changed, agreeing with a diff of every pair and
reading only a few objects per checkpoint; bisect finds a planted bad value in about
log2(n) predicate calls, counted."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, take
from ckptcli.errors import CkptError, NotFoundError
from ckptcli.history.diff import diff_checkpoints
from ckptcli.history.query import Expect, bisect, first_parents, log
from ckptcli.history.recorder import Recorder
from ckptcli.store.repository import Store

N = 64 * int(os.environ.get("CKPT_STRESS_SCALE", "1"))
PLANT = N * 2 // 3  # the checkpoint whose tail sets the bad value


def _record(path: Path, n: int, plant: int) -> tuple[Store, list[str]]:
    """n checkpoints after the initial one; each tail sets /memory/n and /memory/m, and
    checkpoint `plant`'s tail also sets /memory/some/key to "BAD" between them. Memory
    also holds a large list that never changes (a chunk tree: log must not read it)."""
    store = ckptcli.init_store(path)
    state = {"memory": {"some": {"key": 0}, "n": 0, "big": list(range(3_000))}, "plan": [], "tools": []}
    rec = Recorder.open(store, "agent:bot", path.parent / f"{path.name}.journal", state=state)
    ids = [rec.base]
    for i in range(1, n + 1):
        rec.append("memory.set", path=["n"], value=i)
        if i == plant:
            rec.append("memory.set", path=["some", "key"], value="BAD")
        rec.append("memory.set", path=["m"], value=i)
        if i % 10 == 0:
            rec.append("plan.push", item=f"step {i}")
        ids.append(rec.checkpoint(message=f"c{i}").hex)
    rec.close()
    return store, ids


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[str]]:
    return _record(tmp_path_factory.mktemp("hist") / "store", N, PLANT)


def test_log_path_finds_the_one_change_and_agrees_with_a_diff_of_every_pair(hist: tuple[Store, list[str]]) -> None:
    store, ids = hist
    found = [e.id.hex() for e in log(store, "agent:bot", path="/memory/some/key")]
    assert found == [ids[PLANT], ids[0]]  # the change, and the root where the value appeared
    # the oracle: the state-at diff of every (parent, child) pair at that path
    changed = [
        ids[i]
        for i in range(1, len(ids))
        if diff_checkpoints(open_checkpoint(ids[i - 1], store), open_checkpoint(ids[i], store), path="/memory/some/key").changes
    ]
    assert changed == [ids[PLANT]]
    # a path changed by every checkpoint: every one, newest first
    assert [e.id.hex() for e in log(store, "agent:bot", path="/memory/n")] == ids[::-1]
    assert [e.id.hex() for e in log(store, "agent:bot", path="/plan")] == [ids[i] for i in range(N, 0, -1) if i % 10 == 0] + [ids[0]]
    assert [e.id.hex() for e in log(store, "agent:bot", path="/memory/never")] == []


def test_log_path_reads_a_few_objects_per_checkpoint(tmp_path: Path) -> None:
    store, ids = _record(tmp_path / "store", 30, 20)
    reads = 0
    get = store.get

    def counting(oid: bytes) -> bytes:
        nonlocal reads
        reads += 1
        return get(oid)

    store.get = counting  # type: ignore[method-assign]
    assert [e.id.hex() for e in log(store, "agent:bot", path="/memory/some/key")] == [ids[20], ids[0]]
    # memory's 3,000-item list is never opened: a handful of reads per checkpoint
    assert reads <= 8 * len(ids), reads


def test_log_cli_patch_shows_the_event_and_the_change(cli: Any, hist: tuple[Store, list[str]]) -> None:
    store, ids = hist
    r = cli("log", "agent:bot", "--path", "/memory/some/key", "-p", "--store", store.location)
    assert r.code == 0, r.err
    assert f"checkpoint {ids[PLANT]}" in r.out and f"checkpoint {ids[0]}" in r.out and r.out.count("checkpoint ") == 2
    bad_seq = 2 * PLANT + (PLANT - 1) // 10  # two events per checkpoint before it, a plan push every tenth
    assert f"event #{bad_seq} memory.set" in r.out
    assert '~ /memory/some/key: 0 -> "BAD"' in r.out
    assert "state at seq" in r.out
    r = cli("log", "agent:bot", "--path", "/memory/some/key", "-p", "--json", "--store", store.location)
    entries = json.loads(r.out)
    assert [e["id"] for e in entries] == [ids[PLANT], ids[0]]
    assert entries[0]["changes"] == [{"op": "replace", "path": "/memory/some/key", "old": 0, "new": "BAD"}]
    assert entries[0]["events"] == [
        {
            "seq": bad_seq,
            "ts": entries[0]["events"][0]["ts"],
            "kind": "memory.set",
            "changes": [{"op": "replace", "path": "/memory/some/key", "old": 0, "new": "BAD"}],
        }
    ]
    r = cli("log", "agent:bot", "--limit", "3", "--json", "--store", store.location)
    assert [e["id"] for e in json.loads(r.out)] == ids[:-4:-1]
    r = cli("log", f"{ids[10]}", "--section", "plan", "--json", "--store", store.location)
    assert [e["id"] for e in json.loads(r.out)] == [ids[10], ids[0]]  # the root: plan appears
    r = cli("log", "agent:bot", "--path", "memory/x", "--store", store.location)
    assert r.code == 2 and r.err.startswith("ckpt: error:") and "JSON Pointer" in r.err
    r = cli("log", "agent:nobody", "--store", store.location)
    assert r.code == 3


def test_log_of_plain_takes_compares_by_hash(store: Store) -> None:
    parent: list[str] = []
    ids = []
    for i in range(12):
        doc = {"memory": {"user": {"name": "ann" if i < 7 else "bob"}, "i": i}}
        ids.append(take(store, doc, subject="agent:plain", parents=parent or None).hex)
        parent = [ids[-1]]
    assert [e.id.hex() for e in log(store, "agent:plain", path="/memory/user/name")] == [ids[7], ids[0]]
    assert [e.id.hex() for e in log(store, "agent:plain", path="/memory/user")] == [ids[7], ids[0]]
    assert len(list(first_parents(store, "agent:plain"))) == 12


def test_bisect_counts_its_predicate_calls(hist: tuple[Store, list[str]]) -> None:
    store, ids = hist
    calls = 0

    def ok(state: dict[str, Any]) -> bool:
        nonlocal calls
        calls += 1
        return bool(state["memory"]["some"]["key"] == 0)

    res = bisect(store, "agent:bot", good=ids[0], bad="agent:bot", check=ok, check_name="ok")
    assert res.first_bad.hex() == ids[PLANT] and res.last_good.hex() == ids[PLANT - 1]
    assert res.event is not None and res.event.fields["path"] == ["some", "key"]
    n = len(ids) - 1
    assert res.checkpoints == n
    assert res.checkpoint_calls <= math.ceil(math.log2(n)) + 2
    assert res.event_calls <= math.ceil(math.log2(res.tail_events + 1))
    assert calls == res.calls  # every call counted, none hidden
    # the cheap predicate finds the same, in as many calls
    res2 = bisect(store, "agent:bot", good=ids[0], bad=ids[-1], expect=Expect("/memory/some/key", 0))
    assert (res2.first_bad, res2.event, res2.calls) == (res.first_bad, res.event, res.calls)
    res3 = bisect(store, "agent:bot", good=ids[0], bad=ids[-1], expect=Expect("/memory/m", missing=True))
    assert res3.first_bad.hex() == ids[1] and res3.event is not None and res3.event.fields["path"] == ["m"]


def test_bisect_cli(cli: Any, hist: tuple[Store, list[str]]) -> None:
    store, ids = hist
    r = cli("bisect", "agent:bot", "--good", ids[0], "--expect", "/memory/some/key==0", "--json", "--store", store.location)
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["first_bad"] == ids[PLANT] and d["event"]["value"] == "BAD" and d["calls"] == d["checkpoint_calls"] + d["event_calls"]
    assert d["checkpoint_calls"] <= math.ceil(math.log2(N)) + 2
    r = cli("bisect", "agent:bot", "--good", ids[0], "--expect", "/memory/some/key==0", "--store", store.location)
    assert f"first bad checkpoint {ids[PLANT]}" in r.out and "predicate calls" in r.out
    # a good that is already bad, a bad that is good, a good that is not an ancestor, no predicate
    r = cli("bisect", "agent:bot", "--good", ids[PLANT], "--expect", "/memory/some/key==0", "--store", store.location)
    assert r.code == 1 and "already false at --good" in r.err and r.err.count("\n") == 1
    r = cli("bisect", "agent:bot", "--good", ids[0], "--bad", ids[3], "--expect", "/memory/some/key==0", "--store", store.location)
    assert r.code == 1 and "holds at --bad" in r.err
    r = cli("bisect", "agent:bot", "--good", ids[5], "--bad", ids[3], "--expect", "/memory/some/key==0", "--store", store.location)
    assert r.code == 3 and "not a first-parent ancestor" in r.err
    r = cli("bisect", "agent:bot", "--good", ids[0], "--store", store.location)
    assert r.code == 2 and "one predicate" in r.err
    r = cli("bisect", "agent:bot", "--good", ids[0], "--expect", "/memory/some/key=0", "--store", store.location)
    assert r.code == 2 and "POINTER==JSON" in r.err


def test_bisect_errors_are_library_errors(hist: tuple[Store, list[str]]) -> None:
    store, ids = hist
    with pytest.raises(NotFoundError):
        bisect(store, "agent:other", good=ids[0], bad=ids[-1], expect=Expect("/memory/n", 0))
    with pytest.raises(CkptError, match="already false"):
        bisect(store, None, good=ids[0], bad=ids[-1], expect=Expect("/memory/n", 1))


NOISY_CHECK = """import os
print("noise at import")
os.write(1, b"raw noise at import\\n")


def ok(state):
    print("noise in the check")
    os.write(1, b"raw noise in the check\\n")
    return state["memory"]["some"]["key"] == 0
"""


def test_bisect_check_prints_go_to_stderr_not_into_the_json(hist: tuple[Store, list[str]], tmp_path: Path) -> None:
    from tests.conftest import REPO, run_ckpt

    store, ids = hist
    (tmp_path / "noisy_chk.py").write_text(NOISY_CHECK)
    args = ["bisect", "agent:bot", "--good", ids[0], "--check", "noisy_chk:ok", "--json", "--store", store.location]
    p = run_ckpt(*args, cwd=tmp_path, env={"PYTHONPATH": str(REPO)})  # the ckptcli under test, the check's directory
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["first_bad"] == ids[PLANT]  # nothing but the JSON on stdout
    err = p.stderr.decode()
    for line in ("noise at import", "raw noise at import", "noise in the check", "raw noise in the check"):
        assert line in err


def test_log_limit_below_zero_is_a_usage_error(cli: Any, hist: tuple[Store, list[str]]) -> None:
    store, _ids = hist
    r = cli("log", "agent:bot", "--limit", "-1", "--store", store.location)
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1 and "--limit" in r.err, (r.out, r.err)
    r = cli("log", "agent:bot", "--limit", "0", "--json", "--store", store.location)
    assert r.code == 0 and json.loads(r.out) == []
