"""How `ckpt` ends (ckptcli.cli.boot): as the interpreter's exit does, in its order (the
threads that are not daemons joined, thread pools finished, atexit calls run, stdout and
stderr flushed), and with the command's exit code, but without the teardown of every
module after it; a program that calls the entry point itself gets SystemExit as before.
Real subprocesses: a script named `ckpt` (as the console script is) giving `boot.start`
a loader whose command leaves work behind for each of those steps."""

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


def _script(tmp_path: Path, program: str = PROGRAM) -> list[str]:
    """The command line running `program` as a script named `ckpt`, as the console script is."""
    script = tmp_path / "bin" / "ckpt"
    script.parent.mkdir(exist_ok=True)
    script.write_text(program)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return [sys.executable, str(script), str(out)]


def test_the_exit_joins_threads_runs_atexit_flushes_and_keeps_the_code(tmp_path: Path) -> None:
    p = subprocess.run(_script(tmp_path), capture_output=True, timeout=60)
    assert p.returncode == 7, p.stderr.decode()
    assert p.stdout == b"x" * 200_000 and p.stderr == b"last words"
    out = tmp_path / "out"
    assert (out / "thread").read_text() == "done" and (out / "pool").read_text() == "done"
    # the atexit call ran after the threads were joined, as the interpreter orders them
    assert (out / "atexit").read_text() == "['pool', 'thread']"


def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """The flush at exit meets a pipe its reader closed: no "Exception ignored ...
    BrokenPipeError" (the interpreter's own exit printed one and exited 120)."""
    program = PROGRAM.replace(
        'sys.stdout.write("x" * 200_000)',
        'sys.stdout.write("x" * 100)\n    while not (out / "closed").exists():\n        time.sleep(0.01)',
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the 100 bytes wait in stdout's buffer
    with subprocess.Popen(_script(tmp_path, program), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as p:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        (tmp_path / "out" / "closed").write_text("")
        err = p.stderr.read()
        assert p.wait(timeout=60) == 7, err
    assert err == b"last words"


def test_a_command_output_is_whole_when_the_process_ends(tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    r = run_ckpt("--store", store, "ls", "--json")
    assert r.returncode == 0 and r.stdout.strip() == b"[]", r


def test_a_program_that_calls_the_entry_point_gets_system_exit(tmp_path: Path) -> None:
    """Not the `ckpt` process itself: its code after the call runs (its `finally`, its
    `except SystemExit`), as with sys.exit."""
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    code = (
        "import sys\n"
        "from ckptcli.cli import entry\n"
        "sys.argv = ['ckpt', '--store', sys.argv[1], 'ls', '--json']\n"
        "try:\n"
        "    entry()\n"
        "except SystemExit as e:\n"
        "    sys.stderr.write(f'after: {e.code}')\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, timeout=120)
    assert p.returncode == 0 and p.stderr == b"after: 0" and p.stdout.strip() == b"[]", p
