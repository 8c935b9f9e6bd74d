"""Shared fixtures: a fresh store, and the CLI run in-process or as a real subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import ckptcli
from ckptcli.store.repository import Store

#: how this pytest process treats Ctrl-C when it starts: every child it runs inherits an
#: ignored SIGINT or a blocked one across exec, and ckpt rightly keeps an ignored one
_SIGINT = signal.getsignal(signal.SIGINT)


@pytest.fixture(autouse=True)
def _sigint_as_at_start() -> None:
    """Each test starts with SIGINT as the session did (a test or a library it drove
    in-process that set it to be ignored, or blocked it, would change every later test's
    children: the Ctrl-C tests of tests/test_interrupts.py saw that in a full run)."""
    if signal.getsignal(signal.SIGINT) is not _SIGINT:
        signal.signal(signal.SIGINT, _SIGINT)
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


REPO = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return ckptcli.init_store(tmp_path / "store")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run `ckpt ARGS` in this process; returns Result(code, stdout, stderr)."""
    from ckptcli.cli.app import run

    def _run(*args: str | os.PathLike[str]) -> Result:
        capsys.readouterr()
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return _run


def run_ckpt(
    *args: str | os.PathLike[str], input: bytes | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the real `ckpt` in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("CKPT_STORE", None) if env is None or "CKPT_STORE" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "ckptcli", *[str(a) for a in args]],
        input=input,
        capture_output=True,
        env=full_env,
        cwd=cwd,
        timeout=300,
    )
