"""`ckpt run` in a real subprocess for the tests: a private runtime directory, the
supervisor started in its own session (a signal reaches ckpt alone, as `kill -INT`), its
status lines read as they come."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SUBJECT = "process:p"


@contextlib.contextmanager
def runtime_env() -> Iterator[dict[str, str]]:
    """The environment of a `ckpt run` with its own runtime directory (private: 0700, and
    short: a socket path is at most 108 bytes), removed after."""
    runtime = tempfile.mkdtemp(prefix="ckrt-", dir="/tmp")
    try:
        yield {**os.environ, "CKPT_RUNTIME_DIR": runtime, "NO_COLOR": "1"}
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def supervise(work: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`ckpt run -S process:p ARGS` in `work`, its stderr a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "run", "-S", SUBJECT, *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_line(sup: subprocess.Popen[str], text: str) -> str:
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


def ended(sup: subprocess.Popen[str], sig: int | None = None) -> tuple[int, str]:
    """Send `sig` (if any) and wait for the end: its status and the rest of its stderr."""
    if sig is not None:
        sup.send_signal(sig)
    try:
        _out, rest = sup.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(sup.pid, signal.SIGKILL)
        raise
    return sup.returncode, rest
