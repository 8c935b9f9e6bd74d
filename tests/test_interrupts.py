"""Ctrl-C ends ckpt with one line and exit 130, never a traceback; a take of a file that
changes while it is read says so; `show` speaks the format's type names (issue 12)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.store.repository import Store
from tests.conftest import REPO, Result


def _ctrl_c_deliverable() -> None:
    """In the child, before exec: SIGINT as a terminal gives it, default and unblocked. A
    shell starts a background job (`cmd &`, `nohup`) with SIGINT ignored, its children
    inherit that across exec, and ckpt rightly keeps an ignored SIGINT: without this the
    tests would pass or fail with how the suite was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _wait_blocked_on_pipe(pid: int, timeout: float = 60.0) -> None:
    """Until the process sleeps in a pipe read (it is past start-up, reading stdin)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            wchan = ""
        if "pipe" in wchan:
            return
        time.sleep(0.01)
    pytest.fail(f"ckpt never blocked reading its standard input (wchan {wchan!r})")


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs /proc/PID/wchan to see the process wait on its input")
def test_ctrl_c_during_a_take_says_so_and_commits_nothing(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    env = {**os.environ, "CKPT_STORE": str(tmp_path / "s")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "take", "-", "--subject", "agent:bot"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=_ctrl_c_deliverable,
    )
    assert proc.stdin is not None
    proc.stdin.write(b'{"memory": {"half": "of a docu')  # the rest never comes
    proc.stdin.flush()
    _wait_blocked_on_pipe(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.decode().splitlines() == ["ckpt: interrupted; nothing was committed by the interrupted step"]
    assert out == b""
    assert list(ckptcli.list_checkpoints(store)) == []


def test_ctrl_c_while_the_cli_loads_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # A Ctrl-C that lands while the command modules are being imported: the signal is
    # sent from inside the import, so it lands there every time
    script = (
        "import importlib, os, signal, sys\n"
        "real = importlib.import_module\n"
        "def importing(name, *a):\n"
        "    if name.startswith('ckptcli.cli.commands.'):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *a)\n"
        "importlib.import_module = importing\n"
        "sys.argv = ['ckpt', 'ls']\n"
        "from ckptcli.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=tmp_path, timeout=120, preexec_fn=_ctrl_c_deliverable)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.decode().splitlines() == ["ckpt: interrupted; nothing was committed by the interrupted step"]


def test_ctrl_c_while_typer_reads_the_commands_is_one_line(tmp_path: Path) -> None:
    # after the imports, typer builds the click command from the signatures: a Ctrl-C
    # there escaped run() before
    script = (
        "import os, signal, sys, typer.main\n"
        "real = typer.main.get_command\n"
        "def building(app):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(app)\n"
        "typer.main.get_command = building\n"
        "sys.argv = ['ckpt', 'ls']\n"
        "from ckptcli.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=tmp_path, timeout=120, preexec_fn=_ctrl_c_deliverable)
    assert proc.returncode == 130, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert proc.stderr.decode().splitlines() == ["ckpt: interrupted; nothing was committed by the interrupted step"]


def test_the_console_script_loads_nothing_before_its_handler() -> None:
    # what Python imports for `from ckptcli.cli import entry`, before entry() can guard
    # against a Ctrl-C: the window in which the signal is Python's own
    code = "import sys; before = set(sys.modules); from ckptcli.cli import entry; print('\\n'.join(sorted(set(sys.modules) - before)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert set(proc.stdout.split()) <= {
        "ckptcli",
        "ckptcli.cli",
        "signal",
        "_signal",
        "enum",
        "_weakrefset",
        "types",
        "operator",
        "functools",
    }, proc.stdout


def test_console_script_entry_point_is_the_guarded_one() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'ckpt = "ckptcli.cli:entry"' in text


class _AppendOnFirstRead:
    """A progress that appends to `path` after the first piece was read: the file grows
    while ckpt reads it, as a log still being written would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = False

    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, amount: int) -> None:
        if not self.done:
            self.done = True
            with open(self.path, "ab") as fh:
                fh.write(b"appended while being read\n" * 1000)

    def finish(self) -> None:
        pass


def test_take_reports_a_file_that_changed_while_it_was_read(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "work" / "app.log"
    log.parent.mkdir()
    log.write_bytes(os.urandom(300_000))
    (tmp_path / "work" / "quiet.txt").write_text("unchanged\n")
    result = ckptcli.take(store, {"memory": {}}, subject="agent:bot", blobs={"work": tmp_path / "work"}, progress=_AppendOnFirstRead(log))
    assert len(result.capture.changed) == 1
    assert str(log) in result.capture.changed[0]
    # a quiet take of the same tree reports nothing
    again = ckptcli.take(store, {"memory": {}}, subject="agent:bot", blobs={"work": tmp_path / "work"}, force_read=True)
    assert again.capture.changed == []


def test_ckpt_take_prints_the_warning(tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ckptcli.cli.commands.take as take_cmd

    ckptcli.init_store(tmp_path / "s")
    log = tmp_path / "app.log"
    log.write_bytes(os.urandom(200_000))
    state = tmp_path / "state.json"
    state.write_text('{"memory": {}}')
    monkeypatch.setattr(take_cmd, "BarProgress", lambda: _AppendOnFirstRead(log))
    r: Result = cli("take", state, "--subject", "agent:bot", "--blob", f"log={log}", "--store", tmp_path / "s", "--json")
    assert r.code == 0, r.err
    json.loads(r.out)
    warnings = [line for line in r.err.splitlines() if line.startswith("ckpt: warning:")]
    assert len(warnings) == 1 and "changed while it was read" in warnings[0] and str(log) in warnings[0]


def test_show_names_a_large_byte_string_bytes(store: Store, cli: Any) -> None:
    ckptcli.take(store, {"memory": os.urandom(200_000), "plan": b"small"}, subject="agent:bot")
    r = cli("show", "latest", "--store", store.location, "--json")
    assert r.code == 0, r.err
    sections = json.loads(r.out)["sections"]
    assert sections["memory"]["type"] == "bytes"
    assert sections["plan"]["type"] == "bytes"
    r = cli("show", "latest", "--store", store.location)
    assert "LazyBytes" not in r.out


def test_a_tree_too_deep_to_take_is_one_short_line(store: Store, tmp_path: Path, cli: Any) -> None:
    deep = tmp_path / "t"
    p = deep
    for _ in range(200):
        p = p / "d"
    p.mkdir(parents=True)
    (p / "f").write_text("x")
    state = tmp_path / "s.json"
    state.write_text("{}")
    r = cli("take", state, "-S", "agent:x", "--blob", f"deep={deep}", "--store", store.location)
    assert r.code == 7
    (line,) = r.err.splitlines()
    assert "nesting is deeper than 256 levels" in line and "more)" in line and "tar" in line and len(line) < 300, line


def test_ctrl_c_while_the_interpreter_shuts_down_changes_nothing(tmp_path: Path) -> None:
    # the command is over: a SIGINT during shutdown (here from an atexit hook, as one
    # would land while threads are joined) printed "Exception ignored ... KeyboardInterrupt"
    script = (
        "import atexit, os, signal, sys\n"
        "import ckptcli.cli.app as app\n"
        "app.run = lambda argv=None, **kw: 0\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
        "sys.argv = ['ckpt', 'ls']\n"
        "from ckptcli.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=tmp_path, timeout=120, preexec_fn=_ctrl_c_deliverable)
    assert (proc.returncode, proc.stderr) == (0, b"")


def test_sigterm_after_the_command_is_over_changes_nothing(tmp_path: Path) -> None:
    """The run gave SIGTERM its default action back as it ended: a SIGTERM that landed
    after the command printed its report (a prune's, here `--version`'s) killed the process
    with no line and exit -15 instead of the command's own exit code."""
    script = (
        "import atexit, os, signal, sys\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "sys.argv = ['ckpt', '--version']\n"
        "from ckptcli.cli import entry\n"
        "entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, b""), proc
    assert proc.stdout.startswith(b"ckpt "), proc.stdout


def test_ctrl_c_while_an_error_is_reported_is_one_line_and_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """A Ctrl-C or SIGTERM that landed while ckpt printed an error (loading rich for it)
    escaped as a 70-line traceback and death by signal."""
    import ckptcli.cli.app as app

    def interrupted_while_printing(exc: Exception) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "fail", interrupted_while_printing)
    assert app.run(["--store", str(tmp_path / "none"), "ls"]) == 130
    assert capsys.readouterr().err == "ckpt: interrupted; nothing was committed by the interrupted step\n"
