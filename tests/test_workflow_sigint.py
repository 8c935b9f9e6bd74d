"""Ctrl-C (SIGINT) in a durable workflow's own process (ckptcli/workflow/sigint.py).

A workflow that sent SIGINT to itself hung (or crashed) about 1 run in 6: Python raises
KeyboardInterrupt between any two bytecodes, and one that landed inside a checkpoint,
in `ThreadPoolExecutor.submit` right after it started a worker thread and before it
registered it, left a worker nobody told to stop; the interpreter then waited for it
forever at exit. The program here lands its SIGINT exactly there, every time: right
after the first thread a checkpoint starts. It must end as a Python program ends on
Ctrl-C (killed by SIGINT: 130 in a shell), its store whole, and a second run must finish
the workflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ckptcli
from tests.conftest import run_ckpt

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PROGRAM = """
import json, os, random, signal, sys, threading
from ckptcli import workflow
from ckptcli.store.repository import Store

ARMED = []
_start = threading.Thread.start


def start(self):
    _start(self)
    if ARMED and threading.current_thread() is threading.main_thread():
        ARMED.clear()
        with open(os.environ["WF_FIRED"], "a") as fh:
            fh.write(self.name + "\\n")
        os.kill(os.getpid(), signal.SIGINT)  # lands right after the start, as a Ctrl-C may


threading.Thread.start = start


@workflow.step
def work(i):
    return i * 2


def flow(ctx):
    total = 0
    for i in range(3):
        total += work(i)
    ctx.set("big", random.Random(7).randbytes(4 << 20))  # 4 MiB: the checkpoint writes in threads
    if os.environ.get("WF_FIRE"):
        ARMED.append(1)
    ctx.checkpoint("big")
    total += work(10)
    return {"total": total}


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever started the test
    print(json.dumps(workflow.run(Store.open(sys.argv[1]), sys.argv[2], flow)))
"""


def _run(tmp: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    full = {**os.environ, "WF_FIRED": str(tmp / "fired.txt"), "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **env}
    full.pop("CKPT_STORE", None)
    try:
        return subprocess.run(
            [sys.executable, str(tmp / "prog.py"), str(tmp / "store"), "wf"], capture_output=True, env=full, timeout=120, cwd=tmp
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the interrupted workflow did not end within 120 s (a worker thread nobody stops)")


def test_sigint_inside_a_checkpoint_ends_the_workflow_as_ctrl_c_and_keeps_the_store_whole(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    ckptcli.init_store(tmp_path / "store")
    r = _run(tmp_path, WF_FIRE="1")
    assert (tmp_path / "fired.txt").read_text().strip(), "the SIGINT was not sent"  # it landed in a checkpoint's thread start
    assert r.returncode == -signal.SIGINT, (r.returncode, r.stderr.decode()[-2000:])  # 130 in a shell
    assert r.stderr.decode().rstrip().endswith("KeyboardInterrupt"), r.stderr.decode()[-2000:]
    v = run_ckpt("--store", tmp_path / "store", "verify")
    assert v.returncode == 0, v.stdout.decode() + v.stderr.decode()
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr.decode()
    assert json.loads(again.stdout) == {"total": 0 + 2 + 4 + 20}
