"""The replay check of Temporal histories (`ckpt replay --check`, `ckpt compat --workflow`)
against workflow code that misbehaves: a run method that calls sys.exit(), raises, or
loops; a class registered under another workflow type; a module that prints on stdout;
file names and messages with control characters in the JUnit report; a spec that is no
MODULE:WorkflowClass. Each is one line on stderr and a documented exit code, never a hang
or a traceback. Real temporalio Replayer, real subprocesses, no server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

import ckptcli
from tests.test_temporal import COMPLETE, HELLO, _import, _module

SUBJECT = f"workflow:{COMPLETE.stem}"

RUN = """
from temporalio import workflow


@workflow.defn(name="{name}")
class W:
    @workflow.run
    async def run(self, params) -> str:
        {body}
"""


def _bounded(store: Path, *args: Any, cwd: Path, limit: float = 120) -> subprocess.CompletedProcess[bytes]:
    """The real ckpt, failed (not waited on forever) when it hangs."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "ckptcli", "--store", str(store), *map(str, args)], capture_output=True, cwd=cwd, timeout=limit
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ckpt {' '.join(map(str, args))} hung for {limit} s")


def _one_line(r: subprocess.CompletedProcess[bytes]) -> str:
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: "), r.stderr.decode()
    return lines[0]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    _import(tmp_path / "store", COMPLETE)
    (tmp_path / "histories").mkdir()
    (tmp_path / "histories" / COMPLETE.name).write_text(COMPLETE.read_text())
    return tmp_path / "store"


def test_a_run_method_that_calls_sys_exit_is_one_line_exit_4_not_a_hang(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfexit", RUN.format(name="SayHelloWorkflow", body="raise SystemExit(5)"))
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfexit:W", cwd=tmp_path)
    line = _one_line(r)
    assert r.returncode == 4 and "wfexit:W called sys.exit(5)" in line and r.stdout == b"", line
    r = _bounded(store_dir, "compat", "histories", "--workflow", "wfexit:W", cwd=tmp_path)
    line = _one_line(r)
    assert r.returncode == 4 and "wfexit:W called sys.exit(5)" in line, line


def test_a_run_method_that_raises_generator_exit_is_exit_4_not_a_divergence(store_dir: Path, tmp_path: Path) -> None:
    """GeneratorExit ended the workflow's asyncio task silently: the replay read as code
    that issued no command, a divergence (exit 13), where the docs say exit 4."""
    _module(tmp_path, "wfgenexit", RUN.format(name="SayHelloWorkflow", body="raise GeneratorExit()"))
    for args in (("replay", SUBJECT, "--check", "wfgenexit:W"), ("compat", "histories", "--workflow", "wfgenexit:W")):
        r = _bounded(store_dir, *args, "--json", cwd=tmp_path)
        line = _one_line(r)
        assert r.returncode == 4 and "wfgenexit:W raised GeneratorExit while replaying" in line and r.stdout == b"", line


UNRESTRICTED = """
import os, time
from temporalio import workflow


@workflow.defn(name="SayHelloWorkflow")
class W:
    @workflow.run
    async def run(self, params) -> str:
        with workflow.unsafe.sandbox_unrestricted():
            {body}
        raise RuntimeError("after")
"""


def test_os_exit_in_run_is_exit_4_not_a_silent_pass(store_dir: Path, tmp_path: Path) -> None:
    """os._exit(0) in run ended ckpt itself with status 0 and no report: a pass in CI."""
    _module(tmp_path, "wfosexit", UNRESTRICTED.format(body="os._exit(0)"))
    for args in (("replay", SUBJECT, "--check", "wfosexit:W"), ("compat", "histories", "--workflow", "wfosexit:W")):
        r = _bounded(store_dir, *args, cwd=tmp_path)
        line = _one_line(r)
        assert r.returncode == 4 and "wfosexit:W ended the process (exit status 0" in line, line


def test_raw_writes_to_fd_1_in_run_reach_stderr_not_the_json(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfraw", UNRESTRICTED.format(body="os.write(1, b'RAW ON FD 1')"))
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfraw:W", "--json", cwd=tmp_path)
    assert r.returncode == 13 and b"RAW ON FD 1" in r.stderr, r.stderr.decode()
    assert json.loads(r.stdout)["divergence"]["reason"] == "after"


def test_code_blocked_in_c_is_killed_at_the_timeout_and_ctrl_c_is_130(store_dir: Path, tmp_path: Path) -> None:
    """A replay blocked in C (time.sleep in sandbox_unrestricted) ran on in ckpt's thread:
    the timeout line came on time, but the process exited only when the sleep ended, and a
    Ctrl-C was reported as a divergence (exit 13) once it had."""
    import signal

    _module(tmp_path, "wfsleep", UNRESTRICTED.format(body="time.sleep(1000)"))
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfsleep:W", "--timeout", "3", cwd=tmp_path, limit=60)
    line = _one_line(r)
    assert r.returncode == 7 and "did not finish within 3 s" in line, line
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "--store", str(store_dir), "replay", SUBJECT, "--check", "wfsleep:W"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(8)  # the replay has started and blocks (no assertion on time: a late signal still must give 130)
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("ckpt did not end within 60 s of Ctrl-C")
    assert proc.returncode == 130, err.decode()


def test_a_run_method_that_raises_is_the_divergence_in_one_line(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfraise", RUN.format(name="SayHelloWorkflow", body="raise RuntimeError('in run')"))
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfraise:W", cwd=tmp_path)
    assert r.returncode == 13 and "Traceback" not in r.stderr.decode()
    assert "diverged from the history at event 5 (ActivityTaskScheduled)" in _one_line(r)
    assert b"workflow task failed at event 5 (ActivityTaskScheduled): in run" in r.stdout
    r = _bounded(store_dir, "compat", "histories", "--workflow", "wfraise:W", cwd=tmp_path)
    assert r.returncode == 1 and "1 of 1 checkpoint(s) incompatible" in _one_line(r)


def test_a_run_method_that_loops_is_bounded_and_quiet(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfloop", RUN.format(name="SayHelloWorkflow", body="while True: pass"))
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfloop:W", "--timeout", "1", cwd=tmp_path)
    line = _one_line(r)
    assert r.returncode == 7 and "did not finish within 1 s" in line and "--timeout" in line, line
    # temporalio's own deadlock detector (2 s) ends it when the timeout is longer: a failed task
    r = _bounded(store_dir, "compat", "histories", "--workflow", "wfloop:W", "--json", cwd=tmp_path)
    assert r.returncode == 1 and "incompatible" in _one_line(r)
    assert "deadlock" in json.loads(r.stdout)["checkpoints"][0]["reason"]
    for bad in ("0", "nan", "-1", "1e10", "1e308"):  # the last two were an internal error (OverflowError)
        r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfloop:W", "--timeout", bad, cwd=tmp_path)
        assert r.returncode == 2 and "--timeout" in _one_line(r)


def test_a_class_of_another_workflow_type_is_a_wrong_class_not_a_divergence(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfother", RUN.format(name="Other", body="return 'x'"))
    for args in (("replay", SUBJECT, "--check", "wfother:W"), ("compat", "histories", "--workflow", "wfother:W")):
        r = _bounded(store_dir, *args, cwd=tmp_path)
        line = _one_line(r)
        assert r.returncode == 4 and "'SayHelloWorkflow'" in line and "wfother:W registers 'Other'" in line, line


def test_what_the_workflow_module_prints_leaves_the_json_on_stdout_parseable(store_dir: Path, tmp_path: Path) -> None:
    _module(tmp_path, "wfgood", HELLO.format(before="pass", activity="say_hello"))
    printing = "print('GARBAGE ON STDOUT')\nimport sys\nsys.stdout.write('x' * 100)\nfrom wfgood import SayHello\n"
    (tmp_path / "wfprint.py").write_text(printing)
    r = _bounded(store_dir, "replay", SUBJECT, "--check", "wfprint:SayHello", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True, r.stdout
    assert b"GARBAGE ON STDOUT" in r.stderr
    r = _bounded(store_dir, "compat", "histories", "--workflow", "wfprint:SayHello", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["counts"]["as-is"] == 1, r.stdout


def test_the_junit_report_is_well_formed_with_control_characters_in_names_and_messages(store_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "histories"
    (folder / "ctl\x01\x1b.json").write_text(COMPLETE.read_text())
    (folder / "x\x07y.json").write_text("{")  # unreadable: its message names the file
    _module(tmp_path, "wfctl", RUN.format(name="SayHelloWorkflow", body="raise RuntimeError('bad\\x1bthing\\x07')"))
    junit = tmp_path / "r.xml"
    r = _bounded(store_dir, "compat", "histories", "--workflow", "wfctl:W", "--junit", junit, cwd=tmp_path)
    assert r.returncode == 1, r.stderr.decode()
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {f"histories/{COMPLETE.name}", "histories/ctl\\x01\\x1b.json", "histories/x\\x07y.json"}
    failure = cases["histories/ctl\\x01\\x1b.json"].find("failure")
    assert failure is not None and "thing" in (failure.get("message") or "")


def test_the_library_report_escapes_what_xml_cannot_hold() -> None:
    from ckptcli.schema.compat import INCOMPATIBLE, CompatReport, CompatResult

    report = CompatReport(None, [CompatResult("a\x00b\udcff<&", INCOMPATIBLE, problem="p\x0b", reason="r\x1b\ufffe")])
    case = ET.fromstring(report.junit()).find("testsuite/testcase")
    assert case is not None and case.get("name") == "a\\x00b\\udcff<&"
    failure = case.find("failure")
    assert failure is not None and (failure.get("type"), failure.get("message")) == ("p\\x0b", "r\\x1b\\ufffe")


@pytest.mark.parametrize("spec", ["../../etc:passwd", "a-b:C", "mod:", ":C"])
def test_a_spec_that_is_no_module_and_class_gets_the_workflow_hint(store_dir: Path, tmp_path: Path, spec: str) -> None:
    r = _bounded(store_dir, "replay", SUBJECT, "--check", spec, cwd=tmp_path)
    line = _one_line(r)
    assert r.returncode == 2 and "is not MODULE:WorkflowClass" in line and "myapp.workflows:OrderWorkflow" in line, line
    assert "migrations" not in line


def test_only_a_class_another_process_can_import_is_replayed_in_a_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library caller's class defined in a function (or in __main__) cannot be imported by
    the child by its module:Class name: it is replayed in the caller's process instead."""
    from ckptcli.adapters.temporal import check

    _module(tmp_path, "wfimportable", RUN.format(name="SayHelloWorkflow", body="return 'x'"))
    monkeypatch.syspath_prepend(str(tmp_path))
    (cls,) = check.load_workflows(["wfimportable:W"])

    class Local:
        pass

    assert check._importable(cls) and not check._importable(Local)
    Local.__module__ = "__main__"
    Local.__qualname__ = "Local"
    assert not check._importable(Local)
