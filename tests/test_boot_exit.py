"""How `ckpt` ends (ckptcli.cli.boot): as the interpreter's exit does, in its order (the
threads that are not daemons joined, thread pools finished, atexit calls run, stdout and
stderr flushed), and with the command's exit code, but without the teardown of every
module after it. Real subprocesses: a loader given to `boot.start` whose command leaves
work behind for each of those steps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import run_ckpt

PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from ckptcli.cli.boot import start

    out = Path(sys.argv[1])
    pool = ThreadPoolExecutor(1)

    def late(name):
        time.sleep(0.3)
        (out / name).write_text("done")

    def run():
        threading.Thread(target=late, args=("thread",)).start()  # not a daemon: joined
        pool.submit(late, "pool")  # a pool's queued work is finished at exit
        atexit.register(lambda: (out / "atexit").write_text(str(sorted(p.name for p in out.iterdir()))))
        sys.stdout.write("x" * 200_000)  # buffered, not flushed by the command
        sys.stderr.write("last words")
        return 7

    start(lambda argv: (lambda: 130, run))
    """
)


def test_the_exit_joins_threads_runs_atexit_flushes_and_keeps_the_code(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, timeout=60)
    assert p.returncode == 7, p.stderr.decode()
    assert p.stdout == b"x" * 200_000 and p.stderr == b"last words"
    assert (tmp_path / "thread").read_text() == "done" and (tmp_path / "pool").read_text() == "done"
    # the atexit call ran after the threads were joined, as the interpreter orders them
    assert (tmp_path / "atexit").read_text() == "['pool', 'thread']"


def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """The flush at exit meets a pipe its reader closed: no "Exception ignored ...
    BrokenPipeError" (the interpreter's own exit printed one and exited 120)."""
    program = PROGRAM.replace(
        'sys.stdout.write("x" * 200_000)',
        'sys.stdout.write("x" * 100)\n    while not (out / "closed").exists():\n        time.sleep(0.01)',
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the 100 bytes wait in stdout's buffer
    with subprocess.Popen([sys.executable, "-c", program, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as p:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        (tmp_path / "closed").write_text("")
        err = p.stderr.read()
        assert p.wait(timeout=60) == 7, err
    assert err == b"last words"


def test_a_command_output_is_whole_when_the_process_ends(tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    r = run_ckpt("--store", store, "ls", "--json")
    assert r.returncode == 0 and r.stdout.strip() == b"[]", r
