"""`ckpt run` ended by SIGINT (Ctrl-C) says what it committed: the supervisor's log names
its exit checkpoint, and ckpt adds no line of its own. It used to end with "ckpt:
interrupted; nothing was committed by the interrupted step" right after the log said the
exit checkpoint was taken: the CLI took the program's status 130 (128 + SIGINT) for a
Ctrl-C that had interrupted ckpt. Real `ckpt run` subprocesses, real signals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptcli.store.repository import Store

SUBJECT = "process:p"


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    Store.init(tmp_path / ".ckpt")
    runtime = Path(tempfile.mkdtemp(prefix="ckrt-", dir="/tmp"))  # private (0700), and short: a socket path
    (tmp_path / "runtime").write_text(str(runtime))
    try:
        yield tmp_path
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _run(work: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CKPT_RUNTIME_DIR": (work / "runtime").read_text(), "NO_COLOR": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "run", "-S", SUBJECT, *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to ckpt alone, as `kill -INT`
    )


def _wait_for(sup: subprocess.Popen[str], text: str) -> str:
    """What sup wrote on stderr up to (and with) the first line holding `text`."""
    assert sup.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = sup.stderr.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"no line with {text!r} from ckpt run:\n{seen}")


def _checkpoints(work: Path) -> list[str]:
    st = Store.open(work / ".ckpt")
    return sorted(cid.hex() for cid in st.manifest_ids())


def _ended(sup: subprocess.Popen[str], before: str) -> tuple[int, str]:
    try:
        _out, rest = sup.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(sup.pid, signal.SIGKILL)
        raise
    return sup.returncode, before + rest


def test_sigint_names_the_exit_checkpoint_and_no_line_says_nothing_was_committed(work: Path) -> None:
    (work / "state.txt").write_text("v1")
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    sup = _run(work, "--state", "state.txt", "--every", "1h", "--freeze", "sigstop", "--", *sleeper)
    said = _wait_for(sup, "started ")
    sup.send_signal(signal.SIGINT)
    status, said = _ended(sup, said)
    assert status == 130, said  # the program's status: 128 + the SIGINT forwarded to it
    (exit_ck,) = _checkpoints(work)
    assert f"checkpoint {exit_ck[:12]} (exit, " in said and f"halted (SIGINT); last checkpoint {exit_ck[:12]}" in said, said
    assert "nothing was committed" not in said and "interrupted" not in said, said


def test_sigint_during_the_backoff_names_the_checkpoint_of_the_events(work: Path) -> None:
    sup = _run(work, "--backoff", "1h", "--", sys.executable, "-c", "import sys; sys.exit(5)")
    said = _wait_for(sup, "restarting in 3600 s")
    sup.send_signal(signal.SIGINT)
    status, said = _ended(sup, said)
    assert status == 130, said  # 128 + SIGINT: no program status to give between two starts
    (events_ck,) = _checkpoints(work)
    assert f"halted (SIGINT); last checkpoint {events_ck[:12]}" in said, said
    assert "nothing was committed" not in said, said


def test_a_program_that_exits_130_itself_is_no_interruption_of_ckpt(work: Path) -> None:
    sup = _run(work, "--max-restarts", "0", "--", sys.executable, "-c", "import sys; sys.exit(130)")
    status, said = _ended(sup, "")
    assert status == 130, said
    assert "gave up after 0 restarts" in said and "interrupted" not in said, said
