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

import pytest

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


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [["ls"], ["ls", "--json"], ["show", "agent:a", "--json"], ["export", "agent:a", "-o", "-"]])
def test_output_that_cannot_be_written_is_one_line_and_exit_12(tmp_path: Path, args: list[str]) -> None:
    """stdout on a full disk: the output, written during the command or at its end, is
    not lost silently (it was "internal error: OSError", exit 70, or Python's own
    "Exception ignored", exit 120)."""
    store = _store_with_one(tmp_path)
    with open("/dev/full", "wb") as full:
        p = subprocess.run(
            [sys.executable, "-m", "ckptcli", "--store", str(store), *args], stdout=full, stderr=subprocess.PIPE, timeout=120
        )
    err = p.stderr.decode()
    assert p.returncode == 12 and err.count("\n") == 1, err
    assert err.startswith("ckpt: error: cannot write the output to stdout: No space left on device"), err


@pytest.mark.parametrize("args", [["ls"], ["show", "agent:a", "--json"], ["export", "agent:a", "-o", "-"], ["restore", "agent:a"]])
def test_a_closed_stdout_is_one_line_and_exit_12(tmp_path: Path, args: list[str]) -> None:
    """Started with descriptor 1 closed (`ckpt ls >&-`): was "internal error:
    AttributeError", exit 70 (and for the commands that write bytes, `export -o -`,
    `restore` to stdout, `cat`, `dump`, until stdout's `buffer` failed as it does)."""
    store = _store_with_one(tmp_path)
    cmd = [sys.executable, "-m", "ckptcli", "--store", str(store), *args]
    p = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *cmd], stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode()
    assert (
        p.returncode == 12
        and err == "ckpt: error: cannot write the output to stdout: stdout is closed; send it to a file or a pipe that can take it\n"
    ), err


def _store_with_one(tmp_path: Path) -> Path:
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"notes": "' + "x" * 100_000 + '"}}')
    assert run_ckpt("--store", store, "take", doc, "-S", "agent:a").returncode == 0
    return store


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_error_keeps_its_exit_code_when_stderr_cannot_be_written(tmp_path: Path) -> None:
    """`2>/dev/full`: the one line cannot be written, the exit code still says what went
    wrong (it was 1, from the failed write of the message)."""
    store = _store_with_one(tmp_path)
    with open("/dev/full", "wb") as full:
        p = subprocess.run([sys.executable, "-m", "ckptcli", "--store", str(store), "show", "nonexist"], stderr=full, timeout=120)
    assert p.returncode == 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_take_that_succeeded_exits_0_when_stderr_cannot_be_written(tmp_path: Path) -> None:
    """`ckpt take ... 2>/dev/full`: the checkpoint is stored and its id printed; the
    "took ..." line that could not be written is no failure (it exited 12)."""
    store = _store_with_one(tmp_path)
    with open("/dev/full", "wb") as full:
        p = subprocess.run(
            [sys.executable, "-m", "ckptcli", "--store", str(store), "take", "-", "-S", "agent:b"],
            input=b'{"memory": {"b": 1}}',
            stdout=subprocess.PIPE,
            stderr=full,
            timeout=120,
        )
    assert p.returncode == 0
    ls = run_ckpt("--store", store, "ls", "--json", "agent:b")
    assert ls.returncode == 0 and p.stdout.decode().strip() in ls.stdout.decode()


class _FullStderr:
    """stderr on a full disk: every write and flush fails, as with `2>/dev/full`."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self) -> None:
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def isatty(self) -> bool:
        return False


def _run_with_full_stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, int]:
    """Run `ckpt ARGS` in this process with a stderr that cannot be written; returns (exit
    code, stdout, how many writes to stderr were tried)."""
    from ckptcli.cli.app import run

    full = _FullStderr()
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", full)
        code = run([str(a) for a in args])
    return code, capsys.readouterr().out, full.writes


def test_every_command_that_succeeded_exits_0_when_stderr_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The notes a command prints on stderr after its work (take's "took ...", export's
    "exported ...", restore's "restored ... of blobs", a library notice) are diagnostics:
    one that cannot be written does not make the command fail (each exited 12)."""
    store = _store_with_one(tmp_path)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"b" * 1000)
    s = ["--store", store]
    take = ["take", tmp_path / "doc.json", "-S", "agent:c", "--blob", f"f={blob}"]

    code, out, writes = _run_with_full_stderr(monkeypatch, capsys, *s, *take)
    assert (code, writes > 0) == (0, True) and len(out.strip()) == 64, out
    code, out, writes = _run_with_full_stderr(monkeypatch, capsys, *s, "export", "agent:c", "-o", tmp_path / "c.ckpt")
    assert (code, writes > 0) == (0, True) and (tmp_path / "c.ckpt").stat().st_size > 0
    restore = ["restore", "agent:c", "--blobs", tmp_path / "r", "-o", tmp_path / "r.json"]
    code, out, writes = _run_with_full_stderr(monkeypatch, capsys, *s, *restore)
    assert (code, writes > 0) == (0, True) and (tmp_path / "r" / "f").read_bytes() == blob.read_bytes()


def test_an_error_or_a_bad_option_keeps_its_code_when_stderr_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure still fails with its own code (3: not found; 2: a bad option, which
    exited 1 from the failed write of its message)."""
    store = _store_with_one(tmp_path)
    assert _run_with_full_stderr(monkeypatch, capsys, "--store", store, "show", "nonexist")[0] == 3
    assert _run_with_full_stderr(monkeypatch, capsys, "--store", store, "ls", "--no-such-option")[0] == 2


@pytest.mark.parametrize("debug", ["", "1", "0", "false", "yes"])
def test_an_internal_error_exits_70_with_or_without_ckpt_debug(tmp_path: Path, debug: str) -> None:
    """An exception ckpt did not expect (a bug) is exit 70 (docs/exit-codes.md); with
    CKPT_DEBUG=1 it also prints the traceback (it was exit 1: the exception was raised
    out of the run, and Python's own handler ended the process)."""
    store = _store_with_one(tmp_path)
    code = (
        "import sys\n"
        "import ckptcli.listing\n"
        "def boom(*a, **k):\n"
        "    raise RuntimeError('planted bug')\n"
        "ckptcli.listing.list_checkpoints = boom\n"
        "from ckptcli.cli import entry\n"
        "sys.argv = ['ckpt', '--store', sys.argv[1], 'ls']\n"
        "entry()\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, timeout=120, env={**os.environ, "CKPT_DEBUG": debug})
    err = p.stderr.decode()
    assert p.returncode == 70, err
    line = "ckpt: internal error: RuntimeError: planted bug"
    if debug in ("1", "yes"):  # CKPT_DEBUG=0 or false is off (any value turned it on)
        assert err.startswith("Traceback (most recent call last):") and "in boom" in err, err
        assert err.endswith(f"{line} (please report it with the traceback above)\n"), err
    else:
        assert err == f"{line} (set CKPT_DEBUG=1 for the traceback, and please report it)\n", err
