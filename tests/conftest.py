"""Shared fixtures: a fresh store, and the CLI run in-process or as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import ckptcli
from ckptcli.store.repository import Store

REPO = Path(__file__).resolve().parent.parent

# pytest-xdist's workers (scripts/test runs two) start with COLUMNS=80 set: a worker's tests
# and the ckpt processes they start see what a one-process run sees, no terminal width
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


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
