"""ckpt diff: the rendering by section, --json (a JSON Patch that jsonpatch, an independent
implementation, applies to A to give B), --section, --stat, --exit-code, checkpoint files,
errors; exactness on a 50,000-leaf state; the hash-first walk reads little."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli.api import Checkpoint, open_checkpoint, take
from ckptcli.errors import ExitCode
from ckptcli.format.jsonview import to_json
from ckptcli.format.walk import walk_checkpoint
from ckptcli.history.diff import diff_checkpoints
from ckptcli.history.render import describe, render
from ckptcli.store.repository import Store
from tests import strategies
from tests.conftest import run_ckpt

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# -- helpers -----------------------------------------------------------------------


@pytest.fixture
def st_dir(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    return store


def _take(cli, store: Path, tmp_path: Path, doc: object, *args: str) -> str:  # type: ignore[no-untyped-def]
    """Take `doc` (msgpack, so byte strings and big integers go in as they are)."""
    f = tmp_path / "doc.msgpack"
    f.write_bytes(msgpack.packb(doc, use_bin_type=True))
    r = cli("take", f, "--store", store, "-S", "agent:bot", *args)
    assert r.code == 0, r.err
    return str(r.out.strip())


def _diff_json(cli, store: Path, a: str, b: str, *args: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    r = cli("diff", a, b, "--store", store, "--json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)  # type: ignore[no-any-return]


def _text(cli, store: Path, a: str, b: str, *args: str) -> str:  # type: ignore[no-untyped-def]
    r = cli("diff", a, b, "--store", store, *args)
    assert r.code == 0, r.err
    return str(r.out)


def same_json(a: Any, b: Any) -> bool:
    """Equality of JSON views: exact types (1, 1.0 and true differ; -0.0 is not 0.0), map
    key order ignored (a JSON Patch cannot express it)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_patch_applies(a: Checkpoint, b: Checkpoint) -> list[dict[str, Any]]:
    result = diff_checkpoints(a, b)
    patch = json.loads(json.dumps(result.patch(), allow_nan=False))  # what --json prints
    got = jsonpatch.apply_patch(to_json(a.state()), patch)
    want = to_json(b.state())
    assert same_json(got, want), (patch, got, want)
    assert result.same == (not patch and not result.blobs)
    render(result)  # never fails, whatever the values
    render(result, stat=True)
    return patch


class CountingStore:
    """Counts the objects a diff reads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads = 0
        self._get = store.get

        def get(oid: bytes) -> bytes:
            self.reads += 1
            return self._get(oid)

        store.get = get  # type: ignore[method-assign]


# -- the rendering, section by section -------------------------------------------------


def test_identical_checkpoints(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    doc = {"memory": {"goal": "triage", "notes": ["x" * 300] * 40}, "plan": [1, 2]}
    a = _take(cli, st_dir, tmp_path, doc, "-m", "first")
    b = _take(cli, st_dir, tmp_path, doc, "-m", "second")  # another checkpoint, the same state
    assert a != b
    assert "no differences" in _text(cli, st_dir, a, b)
    out = _diff_json(cli, st_dir, a, b)
    assert out["same"] is True and out["patch"] == [] and out["blobs_patch"] == []
    assert out["summary"] == {"same": True, "changes": 0, "sections": {}}
    assert cli("diff", a, b, "--store", st_dir, "--exit-code").code == 0


def test_memory_keys_added_removed_changed(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"goal": "triage", "old": 1, "user": {"name": "Ada", "tier": 2}}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"goal": "resolve", "user": {"name": "Ada", "tier": 3}, "new": True}})
    text = _text(cli, st_dir, a, b)
    assert text.splitlines()[1:] == [
        "memory",
        '  ~ goal: "triage" -> "resolve"',
        "  - old: 1",
        "  ~ user.tier: 2 -> 3",
        "  + new: true",
        "4 changes: memory 1 added, 1 removed, 2 changed",
    ]
    out = _diff_json(cli, st_dir, a, b)
    assert out["patch"] == [
        {"op": "replace", "path": "/memory/goal", "value": "resolve"},
        {"op": "remove", "path": "/memory/old"},
        {"op": "replace", "path": "/memory/user/tier", "value": 3},
        {"op": "add", "path": "/memory/new", "value": True},
    ]
    assert out["summary"]["sections"] == {"memory": {"added": 1, "removed": 1, "changed": 2}}


def test_plan_push_and_pop(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"plan": [{"step": "search"}, {"step": "read"}, {"step": "answer"}]})
    b = _take(cli, st_dir, tmp_path, {"plan": [{"step": "search"}, {"step": "read"}]})
    c = _take(cli, st_dir, tmp_path, {"plan": [{"step": "search"}, {"step": "read"}, {"step": "retry"}, {"step": "answer"}]})
    assert '  pop [2]: {"step": "answer"}' in _text(cli, st_dir, a, b)
    text = _text(cli, st_dir, b, c)
    assert '  push [2]: {"step": "retry"}' in text and '  push [3]: {"step": "answer"}' in text
    assert "plan 2 pushed" in text
    assert _diff_json(cli, st_dir, a, b)["patch"] == [{"op": "remove", "path": "/plan/2"}]


def test_tools_and_events_appended(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tools = [{"id": f"call-{i}", "name": "search", "args": {"q": f"query {i}"}, "status": "ok"} for i in range(200)]
    events = [{"kind": "tick", "n": i} for i in range(500)]
    a = _take(cli, st_dir, tmp_path, {"tools": tools, "events": events})
    b = _take(
        cli,
        st_dir,
        tmp_path,
        {"tools": [*tools, {"id": "call-200", "name": "fetch", "status": "ok"}], "events": [*events, {"kind": "done"}]},
    )
    text = _text(cli, st_dir, a, b)
    assert "tools\n" in text and '  + [200]: {"id": "call-200", "name": "fetch", "status": "ok"}' in text
    assert "events\n" in text and '  + [500]: {"kind": "done"}' in text
    out = _diff_json(cli, st_dir, a, b)
    assert [op["path"] for op in out["patch"]] == ["/tools/200", "/events/500"]
    assert out["summary"]["sections"] == {
        "tools": {"added": 1, "removed": 0, "changed": 0},
        "events": {"added": 1, "removed": 0, "changed": 0},
    }


def test_blobs_changed_with_sizes(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "a.txt").write_text("hello")
    (work / "gone.txt").write_text("bye")
    (work / "same.txt").write_text("unchanged")
    os.chmod(work / "same.txt", 0o644)
    big = random.Random(1).randbytes(200_000)
    (work / "sub" / "big.bin").write_bytes(big)
    a = _take(cli, st_dir, tmp_path, {"memory": {}}, "--blob", f"work={work}")
    (work / "a.txt").write_text("hello, world")
    (work / "gone.txt").unlink()
    (work / "new.txt").write_text("new file")
    (work / "sub" / "big.bin").write_bytes(big[:100_000] + b"x" + big[100_001:])  # same size, one byte changed
    os.chmod(work / "same.txt", 0o600)
    b = _take(cli, st_dir, tmp_path, {"memory": {}}, "--blob", f"work={work}")
    text = _text(cli, st_dir, a, b)
    assert "blobs\n" in text
    assert "  ~ work/a.txt  5 B -> 12 B" in text
    assert "  - work/gone.txt  3 B" in text
    assert "  + work/new.txt  8 B" in text
    assert "  ~ work/sub/big.bin  195.3 KiB, content changed" in text
    assert "  ~ work/same.txt  mode 0644 -> 0600" in text
    out = _diff_json(cli, st_dir, a, b)
    assert out["patch"] == []  # blobs are not part of the state document
    ops = {op["path"]: op for op in out["blobs_patch"]}
    assert ops["/work~1a.txt"]["op"] == "replace" and ops["/work~1a.txt"]["value"]["size"] == 12
    assert ops["/work~1gone.txt"] == {"op": "remove", "path": "/work~1gone.txt"}
    assert ops["/work~1new.txt"]["value"]["sha256"] == __import__("hashlib").sha256(b"new file").hexdigest()
    assert set(ops["/work~1sub~1big.bin"]["value"]) == {"type", "size", "mode", "root"}  # metadata only, never content
    assert len(json.dumps(out)) < 5000
    summary = out["summary"]["sections"]["blobs"]
    assert (summary["added"], summary["removed"], summary["changed"]) == (1, 1, 3)


def test_blob_type_changes_and_symlinks(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    work = tmp_path / "w"
    (work / "d").mkdir(parents=True)
    (work / "d" / "f.txt").write_text("in a directory")
    (work / "link").symlink_to("d/f.txt")
    a = take(store, {}, subject="agent:b", blobs={"w": work}).id
    (work / "d" / "f.txt").unlink()
    (work / "d").rmdir()
    (work / "d").write_text("now a file")  # a directory became a file
    os.chmod(work / "d", 0o644)
    (work / "link").unlink()
    (work / "link").symlink_to("d")
    b = take(store, {}, subject="agent:b", blobs={"w": work}).id
    result = diff_checkpoints(open_checkpoint(a.hex(), store), open_checkpoint(b.hex(), store))
    ops = [(c.op, c.path) for c in result.blobs]
    assert ops == [("remove", "w/d"), ("remove", "w/d/f.txt"), ("add", "w/d"), ("replace", "w/link")]
    text = [t for _k, t in render(result)]
    assert "- w/d/  directory" in text and "+ w/d  10 B" in text and "~ w/link  -> d/f.txt now -> d" in text
    listing = jsonpatch.apply_patch({"w": {}, "w/d": {}, "w/d/f.txt": {}, "w/link": {}}, result.blobs_patch())
    assert listing == {
        "w": {},
        "w/d": {"type": "file", "size": 10, "mode": 0o644, "sha256": __import__("hashlib").sha256(b"now a file").hexdigest()},
        "w/link": {"type": "symlink", "target": "d"},
    }


def test_long_strings_bytes_and_numeric_arrays_are_summarised(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    long_a = "lorem ipsum " * 2000
    long_b = long_a[:10_000] + "CHANGED" + long_a[10_000:]
    weights = [i / 7 for i in range(1000)]
    a = _take(cli, st_dir, tmp_path, {"memory": {"text": long_a, "blob": b"\x00" * 5000, "weights": weights, "note": "short"}})
    b = _take(
        cli,
        st_dir,
        tmp_path,
        {
            "memory": {
                "text": long_b,
                "blob": b"\x01" * 6000,
                "weights": [w + 1 if i % 10 == 0 else w for i, w in enumerate(weights)],
                "note": "short",
                "added_text": "y" * 50_000,
                "added_bytes": bytes(range(256)) * 40,
                "added_array": list(range(5000)),
            }
        },
    )
    text = _text(cli, st_dir, a, b)
    assert len(text) < 2000, text  # no walls of text
    assert "~ text: string of 24,000 -> 24,007 chars, first difference at char 10,000" in text
    assert "~ blob: <4.9 KiB of bytes, sha256 " in text and "-> <5.9 KiB of bytes, sha256 " in text
    assert "~ weights: 100 numbers changed in [0..990], largest change 1.0" in text
    assert '+ added_text: "yyyyyyyy' in text and "(50,000 chars)" in text
    assert "+ added_bytes: <10.0 KiB of bytes, sha256 " in text
    assert "+ added_array: <5,000 numbers, min 0, max 4999>" in text
    # the patch itself is complete: values in full, in the JSON view
    patch = {op["path"]: op for op in _diff_json(cli, st_dir, a, b)["patch"]}
    assert patch["/memory/text"]["value"] == long_b
    assert patch["/memory/blob"]["value"] == {"$bytes": __import__("base64").b64encode(b"\x01" * 6000).decode()}
    assert patch["/memory/weights/10"] == {"op": "replace", "path": "/memory/weights/10", "value": weights[10] + 1}


def test_describe() -> None:
    assert describe("short") == '"short"'
    assert describe(b"\x00\xff") == "<2 bytes 00ff>"
    assert describe([1.5, float("nan"), 3] * 5).startswith("<15 numbers, min 1.5, max 3")
    assert describe({"k": "v" * 500}) == '{"k": "vvvvvvvvvvvvvvvvvvvv…" (500 chars)}'
    assert describe({f"key{i}": i for i in range(100)}).endswith("… (100 keys)")
    assert describe(2**100) == "<101-bit integer>"
    assert describe([float("inf")]) == "[inf]"


def test_section_option(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"x": 1}, "plan": [1], "ext": {"crm": {"id": 1}}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"x": 2}, "plan": [1, 2], "ext": {"crm": {"id": 2}}})
    text = _text(cli, st_dir, a, b, "--section", "plan")
    assert "plan" in text and "memory" not in text
    out = _diff_json(cli, st_dir, a, b, "--section", "ext:crm")
    assert out["section"] == "ext:crm"
    assert out["patch"] == [{"op": "replace", "path": "/ext/crm/id", "value": 2}]
    assert list(out["summary"]["sections"]) == ["ext:crm"]
    r = cli("diff", a, b, "--store", st_dir, "--section", "tools")
    assert r.code == ExitCode.NOT_FOUND and "neither checkpoint has section 'tools'" in r.err


def test_stat_prints_counts_only(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"secret": "old value"}, "tools": [1]})
    b = _take(cli, st_dir, tmp_path, {"memory": {"secret": "new value", "k": 1}, "tools": [1, 2, 3]})
    text = _text(cli, st_dir, a, b, "--stat")
    assert "value" not in text
    assert text.splitlines()[1:] == ["memory       1 added, 1 changed", "tools        2 added", "4 changes in 2 sections"]
    out = _diff_json(cli, st_dir, a, b, "--stat")
    assert "patch" not in out and out["summary"]["changes"] == 4


def test_exit_code(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"x": 1}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"x": 2}})
    assert cli("diff", a, b, "--store", st_dir).code == 0
    assert cli("diff", a, b, "--store", st_dir, "--exit-code").code == ExitCode.FAILURE == 1
    assert cli("diff", a, b, "--store", st_dir, "--exit-code", "--json").code == 1
    assert cli("diff", a, a, "--store", st_dir, "--exit-code").code == 0
    assert cli("diff", a, b, "--store", st_dir, "--exit-code", "--section", "memory").code == 1


def test_checkpoint_file_against_store_id(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"goal": "a"}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"goal": "b"}})
    exported = tmp_path / "a.ckpt"
    assert cli("export", a, "-o", exported, "--store", st_dir).code == 0
    want = [{"op": "replace", "path": "/memory/goal", "value": "b"}]
    assert _diff_json(cli, st_dir, str(exported), b[:10])["patch"] == want
    other = tmp_path / "b.ckpt"
    assert cli("export", b, "-o", other, "--store", st_dir).code == 0
    r = cli("diff", exported, other, "--json")  # two files: no store needed
    assert r.code == 0 and json.loads(r.out)["patch"] == want


def test_bad_references_fail_cleanly(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": 1})
    r = cli("diff", a, "no-such-tag", "--store", st_dir)
    assert r.code == ExitCode.NOT_FOUND and r.out == ""
    assert r.err.startswith("ckpt: error: ") and r.err.count("\n") == 1 and "no-such-tag" in r.err
    r = cli("diff", "missing.ckpt", a, "--store", st_dir)
    assert r.code == ExitCode.NOT_FOUND and "missing.ckpt does not exist" in r.err
    r = cli("diff", "latest", "latest", "--store", tmp_path / "nowhere")
    assert r.code == ExitCode.NO_STORE
    notckpt = tmp_path / "x.ckpt"
    notckpt.write_bytes(b"hello world, not a checkpoint")
    r = cli("diff", notckpt, a, "--store", st_dir)
    assert r.code == ExitCode.UNSUPPORTED_VERSION and "Traceback" not in r.err


def test_a_real_process_with_no_color(st_dir: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"x": 1}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"x": 2}})
    r = run_ckpt("diff", a, b, "--store", st_dir, env={"NO_COLOR": "1"})
    assert r.returncode == 0 and b"\x1b[" not in r.stdout and b"~ x: 1 -> 2" in r.stdout
    r = run_ckpt("diff", a, b, "--store", st_dir, "--json", "--exit-code")
    assert r.returncode == 1 and r.stdout.count(b"\n") == 1  # compact when piped
    assert json.loads(r.stdout)["patch"] == [{"op": "replace", "path": "/memory/x", "value": 2}]


def test_the_library_imports_no_ui_and_no_deepdiff() -> None:
    code = (
        "import sys, json, ckptcli.history.diff; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'click', 'textual', 'deepdiff'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


# -- special cases of the patch ----------------------------------------------------


@pytest.fixture(scope="module")
def mstore(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return ckptcli.init_store(tmp_path_factory.mktemp("diff") / "store")


def _pair(store: Store, a: Any, b: Any) -> tuple[Checkpoint, Checkpoint]:
    ia = take(store, a, subject="agent:prop", parents=[]).id
    ib = take(store, b, subject="agent:prop", parents=[]).id
    return open_checkpoint(ia.hex(), store), open_checkpoint(ib.hex(), store)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"memory": {"$x": 1}}, {"memory": {"$x": 2}}),  # paths through the JSON view's {"$map": ...}
        ({"memory": {"$x": 1}}, {"memory": {"$x": 1, "y": 2}}),  # the wrapping comes and goes
        ({"memory": {"$bytes": "not bytes"}}, {"memory": {"$bytes": b"bytes"}}),
        ({"memory": {"a/b": {"~c": 1}}}, {"memory": {"a/b": {"~c": 2}}}),  # JSON Pointer escapes
        ([1, 2, 3], {"memory": [1, 2, 3]}),  # a whole document, then sections
        ({"memory": 1, "other": 2}, {"memory": 1}),
        ("text", 5),
        ({"plan": [1]}, {"plan": [1], "ext": {"a": [1], "b": {}}}),  # the ext map comes, then its sections
        ({"plan": [1], "ext": {"a": [1]}}, {"plan": [1]}),
        ({"memory": {"x": 1, "n": float("nan"), "z": 0.0}}, {"memory": {"x": 1.0, "n": float("nan"), "z": -0.0}}),
        ({"memory": [True, 1, 2**70]}, {"memory": [1, True, 2**70 + 1]}),
        ({"memory": list(range(3000))}, {"memory": {"k": list(range(3000))}}),
    ],
)
def test_patch_special_cases(mstore: Store, a: Any, b: Any) -> None:
    assert_patch_applies(*_pair(mstore, a, b))


def test_ext_sections_render_by_namespace(mstore: Store) -> None:
    ca, cb = _pair(mstore, {"plan": [1]}, {"plan": [1], "ext": {"crm": {"lead": 7}}})
    result = diff_checkpoints(ca, cb)
    assert [c.section for c in result.changes if not c.structural] == ["ext:crm"]
    assert [text for _k, text in render(result)][1:] == ["ext:crm", '+ (whole section): {"lead": 7}', "1 change: ext:crm 1 added"]


# -- exactness and cost on a large state ----------------------------------------------


def big_state(n_vars: int = 20_000, n_plan: int = 2_500, n_tools: int = 5_000, n_events: int = 5_000) -> dict[str, Any]:
    """50,000 leaves: 20,000 memory variables, 2,500 plan steps of 2 fields, 5,000 tool
    calls of 4 fields, 5,000 events."""
    return {
        "memory": {"vars": {f"v{i:05d}": i * 7 for i in range(n_vars)}},
        "plan": [{"step": i, "done": i < n_plan // 2} for i in range(n_plan)],
        "tools": [{"id": f"call-{i:05d}", "name": "search", "status": "ok", "ms": i % 997} for i in range(n_tools)],
        "events": [i * 3 for i in range(n_events)],
    }


def ten_changes(state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The state with 10 leaves changed, and their JSON Pointers."""
    b = copy.deepcopy(state)
    paths = []
    for i in (17, 4321, 9999, 19998):
        b["memory"]["vars"][f"v{i:05d}"] = -1
        paths.append(f"/memory/vars/v{i:05d}")
    b["plan"][1500]["done"] = True
    paths.append("/plan/1500/done")
    for i in (0, 2500, 4999):
        b["tools"][i]["status"] = "failed"
        paths.append(f"/tools/{i}/status")
    for i in (100, 4000):
        b["events"][i] = -5
        paths.append(f"/events/{i}")
    return b, paths


def test_fifty_thousand_leaves_ten_changes_reports_exactly_those(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    a_state = big_state()
    b_state, paths = ten_changes(a_state)
    ia = take(store, a_state, subject="agent:big").id
    ib = take(store, b_state, subject="agent:big").id
    fresh = ckptcli.open_store(tmp_path / "s")
    counter = CountingStore(fresh)
    ca, cb = open_checkpoint(ia.hex(), fresh), open_checkpoint(ib.hex(), fresh)
    result = diff_checkpoints(ca, cb)
    assert sorted(op["path"] for op in result.patch()) == sorted(paths)
    assert all(op["op"] == "replace" for op in result.patch())
    assert result.summary()["changes"] == 10
    # hash first: only the paths to the changed leaves were read, not the states
    reads = counter.reads
    objects = len(walk_checkpoint(fresh, ca.manifest).objects) + len(walk_checkpoint(fresh, cb.manifest).objects)
    assert reads < objects / 10, (reads, objects)


def test_long_list_edits_read_little_and_patch_exactly(mstore: Store) -> None:
    a = {"events": [{"n": i, "text": f"event number {i}"} for i in range(20_000)]}
    b = copy.deepcopy(a)
    del b["events"][:50]  # a sliding window
    b["events"].insert(9000, {"n": -1})
    del b["events"][12_000:12_003]
    b["events"][15_000]["text"] = "edited"
    b["events"].extend({"n": 20_000 + k} for k in range(5))
    b["events"][3000], b["events"][3002] = b["events"][3002], b["events"][3000]  # two items swapped
    ca, cb = _pair(mstore, a, b)
    counter = CountingStore(mstore)
    try:
        diff_checkpoints(ca, cb)
    finally:
        mstore.get = counter._get  # type: ignore[method-assign]
    assert counter.reads < 200, counter.reads
    patch = assert_patch_applies(ca, cb)
    assert len(patch) < 80, len(patch)


# -- the property: applying the patch to A gives B ----------------------------------


def _containers(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, (list, dict)):
        out.append(value)
        for v in value.values() if isinstance(value, dict) else value:
            _containers(v, out)
    return out


@st.composite
def edited(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` after a few random edits: items inserted, removed or replaced anywhere, keys
    added, removed or replaced (so most of its objects are shared with the original)."""
    doc = copy.deepcopy(doc)
    if not isinstance(doc, (list, dict)):
        return draw(strategies.values(8))
    for _ in range(draw(st.integers(1, 5))):
        target = draw(st.sampled_from(_containers(doc, [])))
        new = draw(strategies.values(6))
        if isinstance(target, list):
            action = draw(st.sampled_from(["insert", "delete", "replace", "append", "pop"]))
            i = draw(st.integers(0, max(0, len(target) - 1)))
            if action == "insert" or not target:
                target.insert(i, new)
            elif action == "delete":
                del target[i : i + draw(st.integers(1, 3))]
            elif action == "replace":
                target[i] = new
            elif action == "append":
                target.append(new)
            else:
                target.pop()
        else:
            keys = list(target)
            if keys and draw(st.booleans()):
                k = draw(st.sampled_from(keys))
                if draw(st.booleans()):
                    del target[k]
                else:
                    target[k] = new
            else:
                # "$" keys: the JSON view wraps a map whose only key starts with "$"
                target[draw(st.one_of(strategies.keys, strategies.keys.map(lambda k: "$" + k)))] = new
                if draw(st.integers(0, 3)) == 0:
                    for k in keys[1:]:
                        del target[k]  # down to one or two keys
    return doc


@st.composite
def document_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    a = draw(strategies.documents)
    b = draw(strategies.documents) if draw(st.integers(0, 4)) == 0 else draw(edited(a))
    return a, b


@SETTINGS
@given(document_pairs())
def test_applying_the_patch_to_a_gives_b(mstore: Store, pair: tuple[Any, Any]) -> None:
    """Byte strings, NaN, infinities and big integers included: the patch and both states
    are compared in the JSON view (formats/v1.md), which represents every value."""
    assert_patch_applies(*_pair(mstore, *pair))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.integers(100, 6000), st.integers(1, 12))
def test_long_lists_and_maps_under_random_edits(mstore: Store, seed: int, n: int, edits: int) -> None:
    """Chunk trees of many leaves on both sides: inserts, deletes and replacements
    anywhere, the front cut and items appended; the patch stays exact and small."""
    rng = random.Random(seed)
    items = [rng.randrange(10**9) for _ in range(n)]
    keys = {f"k{rng.randrange(10**9)}": rng.random() for _ in range(n)}
    new_items, new_keys = list(items), dict(keys)
    for _ in range(edits):
        i = rng.randrange(len(new_items) + 1)
        action = rng.choice(["insert", "delete", "replace", "cut", "append"])
        if action == "insert":
            new_items.insert(i, -rng.randrange(10**9))
        elif action == "delete":
            del new_items[i : i + rng.randrange(1, 4)]
        elif action == "replace" and i < len(new_items):
            new_items[i] = "changed"
        elif action == "cut":
            del new_items[: rng.randrange(1, 20)]
        else:
            new_items.append(rng.random())
        k = rng.choice(list(new_keys)) if new_keys else "x"
        if rng.random() < 0.5:
            new_keys.pop(k, None)
        else:
            new_keys[k if rng.random() < 0.5 else f"new{rng.random()}"] = [1, 2]
    patch = assert_patch_applies(*_pair(mstore, {"events": items, "memory": keys}, {"events": new_items, "memory": new_keys}))
    assert len(patch) <= 2 * 20 * edits


def test_times_in_nanoseconds_read_as_times_and_huge_integers_stay_short() -> None:
    """A LangGraph write's `ts` showed as "<61-bit integer>"."""
    from ckptcli.history.render import describe

    assert describe(1732000000000000000) == "1732000000000000000 (2024-11-19T07:06:40Z)"
    assert describe(10**16) == "10000000000000000"  # not a time: as it is
    assert describe(2**100) == "<101-bit integer>"
