"""`ckpt run` ended by SIGINT (Ctrl-C) says what it committed: the supervisor's log names
its exit checkpoint, and ckpt adds no line of its own. It used to end with "ckpt:
interrupted; nothing was committed by the interrupted step" right after the log said the
exit checkpoint was taken: the CLI took the program's status 130 (128 + SIGINT) for a
Ctrl-C that had interrupted ckpt. Real `ckpt run` subprocesses, real signals."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptcli.store.repository import Store
from tests.helpers_run import ended, runtime_env, supervise, wait_line


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    Store.init(tmp_path / ".ckpt")
    with runtime_env() as e:
        yield e


def _checkpoints(work: Path) -> list[str]:
    return sorted(cid.hex() for cid in Store.open(work / ".ckpt").manifest_ids())


def test_sigint_names_the_exit_checkpoint_and_no_line_says_nothing_was_committed(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "state.txt").write_text("v1")
    # the program says when it runs: a SIGINT while its interpreter still starts ends it
    # with 1 ("Fatal Python error: init_import_site"), not the 130 asked about here
    sleeper = [sys.executable, "-c", "import pathlib, time; pathlib.Path('ready').write_text('1'); time.sleep(120)"]
    sup = supervise(tmp_path, env, "--state", "state.txt", "--every", "1h", "--freeze", "sigstop", "--", *sleeper)
    said = wait_line(sup, "started ")
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    status, rest = ended(sup, signal.SIGINT)
    said += rest
    assert status == 130, said  # the program's status: 128 + the SIGINT forwarded to it
    (exit_ck,) = _checkpoints(tmp_path)
    assert f"checkpoint {exit_ck[:12]} (exit, " in said and f"halted (SIGINT); last checkpoint {exit_ck[:12]}" in said, said
    assert "nothing was committed" not in said and "interrupted" not in said, said


def test_sigint_during_the_backoff_names_the_checkpoint_of_the_events(tmp_path: Path, env: dict[str, str]) -> None:
    sup = supervise(tmp_path, env, "--backoff", "1h", "--", sys.executable, "-c", "import sys; sys.exit(5)")
    said = wait_line(sup, "restarting in 3600 s")
    status, rest = ended(sup, signal.SIGINT)
    said += rest
    assert status == 130, said  # 128 + SIGINT: no program status to give between two starts
    (events_ck,) = _checkpoints(tmp_path)
    assert f"halted (SIGINT); last checkpoint {events_ck[:12]}" in said, said
    assert "nothing was committed" not in said, said


def test_a_program_that_exits_130_itself_is_no_interruption_of_ckpt(tmp_path: Path, env: dict[str, str]) -> None:
    sup = supervise(tmp_path, env, "--max-restarts", "0", "--", sys.executable, "-c", "import sys; sys.exit(130)")
    status, said = ended(sup)
    assert status == 130, said
    assert "gave up after 0 restarts" in said and "interrupted" not in said, said
