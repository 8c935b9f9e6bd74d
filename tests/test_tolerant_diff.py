"""ckpt diff's tolerant options (--ignore-order, --significant-digits, --tolerance,
--exclude-path): real stores through the CLI; noise alone is no change, a real change
planted among the noise is reported alone, in the exact diff's lines and --json shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ckptcli.errors import ExitCode
from tests.conftest import run_ckpt


@pytest.fixture
def st_dir(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    return store


def _take(cli, store: Path, tmp_path: Path, doc: object) -> str:  # type: ignore[no-untyped-def]
    f = tmp_path / "doc.msgpack"
    f.write_bytes(msgpack.packb(doc, use_bin_type=True))
    r = cli("take", f, "--store", store, "-S", "agent:bot")
    assert r.code == 0, r.err
    return str(r.out.strip())


def _state(noise: int, *, planted: bool = False) -> dict[str, Any]:
    """One agent's state; `noise` permutes lists, nudges floats, and changes the request
    id and timestamp; `planted` changes one real fact."""
    facts = ["paris is in france", "water boils at 100C", "the sky is blue", "2 + 2 = 4"]
    scores = [0.1, 0.25, 1.0 / 3.0, 2.5]
    if noise:
        facts = facts[noise:] + facts[:noise]
        scores = [s + 1e-9 * noise for s in reversed(scores)]
    memory: dict[str, Any] = {
        "facts": facts,
        "scores": scores,
        "weights": {"w": 0.5 + 1e-9 * noise, "n": 7},
        "goal": "answer the question",
        "request_id": f"req-{noise:04d}",
        "meta": {"ts": 1_700_000_000 + noise, "model": "m1"},
    }
    if planted:
        memory["goal"] = "answer another question"
    return {"memory": memory, "plan": [{"step": "think"}, {"step": "answer"}]}


def test_noise_only_is_no_change_and_a_planted_change_is_found(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, _state(0))
    b = _take(cli, st_dir, tmp_path, _state(1))
    c = _take(cli, st_dir, tmp_path, _state(2, planted=True))
    excl = ["--exclude-path", "/request_id$", "--exclude-path", "^/memory/meta/ts$"]
    tol = ["--ignore-order", "--tolerance", "1e-6", *excl]

    # the exact diff sees all the noise
    exact = cli("diff", a, b, "--store", st_dir, "--json")
    assert exact.code == 0 and json.loads(exact.out)["summary"]["changes"] > 5
    assert cli("diff", a, b, "--store", st_dir, "--exit-code").code == ExitCode.FAILURE

    # tolerant: no change, with the exact diff's "no change" text and exit status
    r = cli("diff", a, b, "--store", st_dir, "--exit-code", *tol)
    assert r.code == 0, r.out + r.err
    assert "no differences" in r.out
    r = cli("diff", a, b, "--store", st_dir, "--json", *tol)
    got = json.loads(r.out)
    assert got["same"] is True and got["patch"] == [] and got["summary"]["changes"] == 0

    # without --exclude-path the request id and timestamp are changes, and nothing else
    r = cli("diff", a, b, "--store", st_dir, "--json", "--ignore-order", "--tolerance", "1e-6")
    assert sorted(op["path"] for op in json.loads(r.out)["patch"]) == ["/memory/meta/ts", "/memory/request_id"]
    # order alone is not enough: the floats still differ
    r = cli("diff", a, b, "--store", st_dir, "--json", "--ignore-order", *excl)
    assert {op["path"].rsplit("/", 1)[0] for op in json.loads(r.out)["patch"]} <= {"/memory/scores", "/memory/weights"}
    assert json.loads(r.out)["same"] is False

    # one real change planted among the noise: reported alone
    r = cli("diff", a, c, "--store", st_dir, "--exit-code", *tol)
    assert r.code == ExitCode.FAILURE
    assert '~ goal: "answer the question" -> "answer another question"' in r.out
    assert "1 change: memory 1 changed" in r.out
    got = json.loads(cli("diff", a, c, "--store", st_dir, "--json", *tol).out)
    assert got["same"] is False
    assert got["patch"] == [{"op": "replace", "path": "/memory/goal", "value": "answer another question"}]
    assert got["summary"] == {"same": False, "changes": 1, "sections": {"memory": {"added": 0, "removed": 0, "changed": 1}}}
    assert set(got) == set(json.loads(exact.out))  # the exact diff's --json shape


def test_significant_digits(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"pi": 3.14159265, "e": 2.71}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"pi": 3.14159201, "e": 2.72}})
    r = cli("diff", a, b, "--store", st_dir, "--json", "--significant-digits", "5")
    assert json.loads(r.out)["patch"] == [{"op": "replace", "path": "/memory/e", "value": 2.72}]
    r = cli("diff", a, b, "--store", st_dir, "--json", "--significant-digits", "1", "--exit-code")
    assert r.code == 0 and json.loads(r.out)["same"] is True


def test_adds_and_removes_keep_their_kind_and_section(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"tags": ["a", "b"], "old": 1}, "plan": [{"s": 1}]})
    b = _take(cli, st_dir, tmp_path, {"memory": {"tags": ["b", "a", "c"], "new": 2}, "plan": [{"s": 1}]})
    r = cli("diff", a, b, "--store", st_dir, "--ignore-order")
    assert r.code == 0
    assert "+ new: 2" in r.out and "- old: 1" in r.out and '+ tags[2]: "c"' in r.out
    got = json.loads(cli("diff", a, b, "--store", st_dir, "--json", "--ignore-order").out)
    assert {(op["op"], op["path"]) for op in got["patch"]} == {("add", "/memory/new"), ("remove", "/memory/old"), ("add", "/memory/tags/2")}
    # --section limits the tolerant pass too
    got = json.loads(cli("diff", a, b, "--store", st_dir, "--json", "--ignore-order", "--section", "plan").out)
    assert got["same"] is True


def test_bad_options_fail_cleanly(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"x": 1}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"x": 2}})
    r = cli("diff", a, b, "--store", st_dir, "--exclude-path", "([")
    assert r.code == ExitCode.USAGE and r.err.startswith("ckpt: error: --exclude-path '(['") and "Traceback" not in r.err
    r = cli("diff", a, b, "--store", st_dir, "--tolerance", "-1")
    assert r.code == ExitCode.USAGE and "--tolerance" in r.err
    r = cli("diff", a, b, "--store", st_dir, "--significant-digits", "-2")
    assert r.code == ExitCode.USAGE and "--significant-digits" in r.err


def test_exact_diff_does_not_import_deepdiff(st_dir: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Without the options the exact diff alone runs (deepdiff is never loaded), and with
    them but no exact change, deepdiff is not loaded either."""
    a = _take(cli, st_dir, tmp_path, {"memory": {"x": [1, 2]}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"x": [2, 1]}})
    probe = (
        "import sys, runpy; sys.argv = ['ckpt'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('ckptcli', run_name='__main__')\n"
        "except SystemExit as e:\n    sys.stderr.write('DEEPDIFF=%s\\n' % ('deepdiff' in sys.modules)); raise\n"
    )

    def loaded(*args: str) -> tuple[int, bool]:
        r = subprocess.run(
            [sys.executable, "-c", probe, "diff", *args, "--store", str(st_dir)], capture_output=True, text=True, timeout=120
        )
        return r.returncode, "DEEPDIFF=True" in r.stderr

    assert loaded(a, b) == (0, False)
    assert loaded(a, a, "--ignore-order") == (0, False)
    assert loaded(a, b, "--ignore-order", "--exit-code") == (0, True)


def test_real_process_no_color(st_dir: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st_dir, tmp_path, {"memory": {"xs": [1.0, 2.0], "y": 1}})
    b = _take(cli, st_dir, tmp_path, {"memory": {"xs": [2.0, 1.0 + 1e-9], "y": 2}})
    r = run_ckpt("diff", a, b, "--store", st_dir, "--ignore-order", "--tolerance", "1e-6", env={"NO_COLOR": "1"})
    assert r.returncode == 0 and b"\x1b[" not in r.stdout
    assert r.stdout.decode().splitlines()[1:] == ["memory", "  ~ y: 1 -> 2", "1 change: memory 1 changed"]


# -- replay --check ignores the same declared noise ---------------------------------------

STEP = """
def step(ctx, event):
    ctx.emit("memory.set", path=["seen"], value={"tags": TAGS, "score": SCORE, "meta": {"ts": TS}})
"""


def test_replay_check_ignores_declared_noise(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    from ckptcli.api import open_store
    from ckptcli.history.recorder import Recorder

    store_dir = tmp_path / "store"
    assert cli("init", store_dir).code == 0
    ns: dict[str, Any] = {"TAGS": ["a", "b"], "SCORE": 0.5, "TS": 1}
    exec(STEP, ns)  # the recorded step: the same text as the module the check imports
    with Recorder.open(open_store(store_dir), "agent:n", tmp_path / "j") as rec:
        rec.step(ns["step"], "message.append", message="hi", sender="user")
        cid = rec.checkpoint().hex
    work = tmp_path / "work"
    work.mkdir()

    def check_with(tags: list[str], score: float, ts: int, *opts: str) -> int:
        (work / "noisy.py").write_text(f"TAGS = {tags!r}\nSCORE = {score!r}\nTS = {ts!r}\n" + STEP)
        p = run_ckpt("replay", cid, "--check", "noisy:step", "--store", store_dir, *opts, cwd=work)
        return p.returncode

    noise = ["--ignore-order", "--tolerance", "1e-6", "--exclude-path", "/meta/ts$"]
    assert check_with(["b", "a"], 0.5 + 1e-9, 2) == ExitCode.DIVERGED  # exact: noise is a divergence
    assert check_with(["b", "a"], 0.5 + 1e-9, 2, *noise) == 0
    assert check_with(["b", "a"], 0.75, 2, *noise) == ExitCode.DIVERGED  # a real change still is


def test_numbers_are_compared_absolutely_and_integers_exactly(cli, st_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # --tolerance EPS is absolute whatever the numbers' size (deepdiff's math_epsilon adds a
    # relative 1e-9), and --significant-digits rounds floats only (deepdiff formatted 10**30
    # as a float); infinity is a number like any other at 0 digits
    def take(doc: object) -> str:
        f = tmp_path / "doc.json"
        f.write_text(json.dumps(doc))  # JSON: integers of any size, Infinity
        r = cli("take", f, "--store", st_dir, "-S", "agent:bot")
        assert r.code == 0, r.err
        return str(r.out.strip())

    a = take({"memory": {"balance": 1_000_000_000, "f": 1e20, "big": 10**30, "inf": float("inf"), "w": [1.0, 2**70]}})
    b = take(
        {"memory": {"balance": 1_000_000_000.9, "f": 1.00000000001e20, "big": 10**30 + 1, "inf": float("inf"), "w": [2**70 + 1, 1.0004]}}
    )
    every = {"/memory/balance", "/memory/f", "/memory/big"}

    def changed(*opts: str) -> set[str]:
        r = cli("diff", a, b, "--store", st_dir, "--json", *opts)
        assert r.code == 0, r.err
        return {op["path"] for op in json.loads(r.out)["patch"]}

    assert changed("--tolerance", "0.001") >= every
    assert changed("--tolerance", "0") >= every
    assert changed("--tolerance", "1") == {"/memory/balance", "/memory/f", "/memory/w/0", "/memory/w/1"}  # 1 and 1.0... differ in type
    assert "/memory/f" not in changed("--tolerance", "1e10")
    assert changed("--significant-digits", "5") >= every
    assert changed("--significant-digits", "0") >= {"/memory/f", "/memory/big"}
    assert "/memory/balance" in changed("--significant-digits", "0")  # 1000000000 (int) -> 1000000000.9 (float) is a type change
    # unordered: items paired with their floats rounded, integers exact
    got = changed("--ignore-order", "--significant-digits", "3")
    assert got == every | {"/memory/w/1"}, got  # 2**70 -> 2**70+1 (paired with A's index); 1.0 ~ 1.0004
    got = changed("--ignore-order", "--significant-digits", "0", "--tolerance", "0.01")
    assert "/memory/big" in got and "/memory/inf" not in got
