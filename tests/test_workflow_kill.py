"""Durable workflows in real processes killed with SIGKILL (docs/workflows.md):

- a 20-step workflow killed at random moments (tests/stress.py: 30 kills at full size,
  CKPT_STRESS_SCALE=1; a bounded sample by default) and run again until it is done:
  every step's side effect (a line appended to a file, keyed by its idempotency key)
  happens exactly once per key, and the result is an uninterrupted run's;
- a step killed in the middle of its call is reported in doubt with its key
  (`ckpt workflow show --json`), and the re-run runs it with that key;
- `ckpt workflow rollback --run` killed at random moments and run again runs each
  compensation once, in reverse order.

The workflow is a module written into the test's directory (so that the rollback, another
process, imports its compensation by the name the workflow recorded)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli import workflow
from ckptcli.errors import NotFoundError
from ckptcli.listing import ListFilter, list_checkpoints
from ckptcli.store.repository import Store
from tests import stress

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

STEPS = 20

FLOWMOD = '''
"""A 20-step durable workflow whose steps append a line per idempotency key to a file."""
import json
import os
import random
import sys
import time

from ckptcli import workflow
from ckptcli.store.repository import Store


def _pause():
    least = float(os.environ.get("WF_MIN_PAUSE") or 0)
    most = float(os.environ.get("WF_PAUSE") or 0)
    if least or most:
        time.sleep(least + random.random() * most)


def append_once(path, key, text):
    """What a receiver that deduplicates by idempotency key does: one line per key."""
    try:
        with open(path) as fh:
            seen = {line.split(" ", 1)[0] for line in fh}
    except FileNotFoundError:
        seen = set()
    if key in seen:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {text}\\n".encode())
    finally:
        os.close(fd)


def undo(c):
    _pause()
    append_once(os.environ["WF_UNDO"], c.key, str(c.pos))
    _pause()


@workflow.step(compensate=undo)
def work(i, acc):
    key = workflow.current_step().idempotency_key
    mark = os.environ.get("WF_MARK")
    if mark:
        with open(mark, "a") as fh:
            fh.write(key + "\\n")
    _pause()
    append_once(os.environ["WF_EFFECTS"], key, str(i))
    if os.environ.get("WF_HANG") == str(i):
        time.sleep(3600)
    _pause()
    return (acc * 31 + i + 7) % 1000003


def flow(ctx, n):
    started = os.environ.get("WF_STARTED")
    if started:  # the run got this far: the end of its start-up
        with open(started, "a") as fh:
            fh.write("x\\n")
    acc = 1
    for i in range(n):
        acc = work(i, acc)
        ctx.set("acc", acc)
        if i == n // 2 - 1:
            ctx.checkpoint("half")
    return {"acc": acc, "n": n}


def main(argv):
    store = Store.open(argv[0])
    print(json.dumps(workflow.run(store, argv[1], flow, int(argv[2]))))
'''


@pytest.fixture
def box(tmp_path: Path) -> Path:
    (tmp_path / "flowmod.py").write_text(FLOWMOD)
    ckptcli.init_store(tmp_path / "store")
    return tmp_path


def _env(box: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "WF_EFFECTS": str(box / "effects.txt"), "WF_UNDO": str(box / "undo.txt"), **extra}
    env.pop("CKPT_STORE", None)
    return env


def _worker(box: Path, wid: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    code = "import sys, flowmod; flowmod.main(sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(box / "store"), wid, str(STEPS)], cwd=box, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _ckpt(box: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ckptcli", *args, "--store", str(box / "store")],
        cwd=box,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _lines(path: Path) -> list[list[str]]:
    return [line.split(" ") for line in path.read_text().splitlines()] if path.exists() else []


def _kill_until_done(
    start: Any, kills: int, window: Any, rng: random.Random, after_kill: Any, watch: Any = lambda since: None
) -> tuple[bytes, int]:
    """Start the process and SIGKILL it at a random moment in [0, window()), `kills` times
    (`window()` is never longer than what is left of the run, so every kill lands), then
    let it finish; (its stdout, the kills that landed). `watch(began)` is called while
    waiting (it measures the start-up)."""
    landed = 0
    while True:
        proc = start()
        began = time.monotonic()
        if landed < kills:
            at = began + rng.uniform(0, window())
            while time.monotonic() < at and proc.poll() is None:
                watch(began)
                time.sleep(0.002)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.communicate()
                landed += 1
                after_kill()
                continue
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        return out, landed


#: each step (and each compensation) pauses twice, at least this long each time: what is left
#: of a run is at least 2 * MIN_PAUSE per step left
MIN_PAUSE = 0.01


def _first_line_after(path: Path, began: float, proc: subprocess.Popen[bytes]) -> float:
    """Seconds from `began` until `path` has a line (the process's start-up, at least)."""
    while not path.exists() or not path.read_text():
        assert proc.poll() is None or path.exists(), proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.002)
    return time.monotonic() - began


def test_a_20_step_workflow_killed_at_random_moments_runs_each_effect_once(box: Path) -> None:
    seed = int(os.environ.get("CKPT_TEST_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    started = box / "started.txt"
    env = _env(box, WF_PAUSE="0.02", WF_MIN_PAUSE=str(MIN_PAUSE), WF_STARTED=str(started))
    began = time.monotonic()
    ref = _worker(box, "ref", env)
    # half the shortest start-up seen (until the workflow function is entered): less than any takes
    startup = [_first_line_after(started, began, ref)]
    ref_out, ref_err = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_err.decode()
    expected = json.loads(ref_out)
    assert _lines(box / "effects.txt") == [[f"ref:work:{i + 1}:1", str(i)] for i in range(STEPS)]
    store = Store.open(box / "store")
    in_doubt_seen: list[str] = []
    left = [STEPS]

    def check_after_kill() -> None:
        effects = [k for k, _i in _lines(box / "effects.txt") if k.startswith("wf:")]
        assert len(effects) == len(set(effects)), f"an effect happened twice (seed {seed})"
        try:
            st = workflow.status(store, "wf")
        except NotFoundError:
            return  # killed before its first checkpoint
        done = [s for s in st.steps if s.status == "ok"]
        assert [s.pos for s in done] == list(range(1, len(done) + 1))
        left[0] = STEPS - len(done)
        for s in st.in_doubt:  # killed inside a step: reported with its key
            assert s.pos == len(done) + 1 and s.key == f"wf:work:{s.pos}:1", (seed, s)
            in_doubt_seen.append(s.key)

    seen = [len(_lines(started))]

    def watch(since: float) -> None:
        n = len(_lines(started))
        if n > seen[0]:
            seen[0] = n
            startup[0] = min(startup[0], time.monotonic() - since)

    window = lambda: startup[0] / 2 + left[0] * 2 * MIN_PAUSE  # noqa: E731
    out, landed = _kill_until_done(lambda: _worker(box, "wf", env), stress.count(30, 8), window, rng, check_after_kill, watch)
    assert landed == stress.count(30, 8)
    print(f"{landed} kills; after {len(in_doubt_seen)} of them a step was in doubt (reported with its key); seed {seed}")
    assert json.loads(out) == expected, f"seed {seed}"
    effects = [line for line in _lines(box / "effects.txt") if line[0].startswith("wf:")]
    assert effects == [[f"wf:work:{i + 1}:1", str(i)] for i in range(STEPS)], f"seed {seed}"
    st = workflow.status(store, "wf")
    assert st.status == "done" and st.in_doubt == [] and st.result == expected
    assert st.runs >= 1 and all(s.attempts == 1 for s in st.steps)


def test_a_step_killed_mid_call_is_reported_in_doubt_with_its_key(box: Path) -> None:
    mark = box / "started.txt"
    proc = _worker(box, "d", _env(box, WF_HANG="4", WF_MARK=str(mark)))
    deadline = time.monotonic() + 120
    while not (mark.exists() and "d:work:5:1" in mark.read_text()) or len(_lines(box / "effects.txt")) < 5:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    shown = _ckpt(box, _env(box), "workflow", "show", "d", "--json")
    out, err = shown.communicate(timeout=120)
    assert shown.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["in_doubt"] == [{"pos": 5, "step": "work", "key": "d:work:5:1", "call_id": "5.1"}]
    assert doc["steps_done"] == 4 and doc["status"] == "running"
    text = _ckpt(box, _env(box), "workflow", "show", "d")
    tout, _ = text.communicate(timeout=120)
    assert "in doubt: step work (position 5) key d:work:5:1" in tout.decode()
    # the re-run runs it again with the same key: the receiver had it already, so once
    again = _worker(box, "d", _env(box))
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()
    keys = [k for k, _i in _lines(box / "effects.txt")]
    assert keys == [f"d:work:{i}:1" for i in range(1, STEPS + 1)]
    assert mark.read_text().splitlines() == [f"d:work:{i}:1" for i in range(1, 6)]


def test_a_rollback_killed_at_random_moments_runs_each_compensation_once_in_reverse(box: Path) -> None:
    seed = int(os.environ.get("CKPT_TEST_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    env = _env(box, WF_PAUSE="0.02", WF_MIN_PAUSE=str(MIN_PAUSE))
    proc = _worker(box, "rb", env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    expected = json.loads(out)
    store = Store.open(box / "store")
    half = next(c.hex() for c, s in list_checkpoints(store, ListFilter(subject="workflow:rb")) if s.message == "half")
    began = time.monotonic()
    dry = _ckpt(box, env, "workflow", "rollback", "rb", "--to", half, "--json")
    dout, derr = dry.communicate(timeout=120)
    assert dry.returncode == 0, derr.decode()
    startup = (time.monotonic() - began) / 2  # less than any start of ckpt takes
    plan = json.loads(dout)
    assert [c["pos"] for c in plan["compensations"]] == list(range(STEPS, STEPS // 2, -1))
    assert all(c["compensate"] == "flowmod:undo" for c in plan["compensations"])
    assert not (box / "undo.txt").exists()

    def no_twice() -> None:
        keys = [k for k, _p in _lines(box / "undo.txt")]
        assert len(keys) == len(set(keys)), f"a compensation ran twice (seed {seed})"

    def window() -> float:  # the start, and the compensations not begun yet
        return startup + (STEPS // 2 - len(_lines(box / "undo.txt"))) * 2 * MIN_PAUSE

    kills = stress.count(30, 6)
    rollback = lambda: _ckpt(box, env, "workflow", "rollback", "rb", "--to", half, "--run")  # noqa: E731
    _out, landed = _kill_until_done(rollback, kills, window, rng, no_twice)
    assert landed == kills
    undo = _lines(box / "undo.txt")
    assert undo == [[f"rb:work:{p}:1:undo", str(p)] for p in range(STEPS, STEPS // 2, -1)], f"seed {seed}"
    st = workflow.status(store, "rb")
    assert st.status == "rolled back" and [s.pos for s in st.steps] == list(range(1, STEPS // 2 + 1))
    assert st.variables == {"acc": st.steps[-1].result}  # the checkpoint's variables
    # the workflow runs on from the checkpoint: the ten steps again, with new keys, same result
    again = _worker(box, "rb", env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()
    assert json.loads(out) == expected
    effects = [k for k, _i in _lines(box / "effects.txt") if k.startswith("rb:")]
    assert effects == [f"rb:work:{i}:1" for i in range(1, STEPS + 1)] + [f"rb:work:{i}:2" for i in range(STEPS // 2 + 1, STEPS + 1)]
