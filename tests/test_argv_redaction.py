"""What a stored command line keeps of the secrets passed on it (`redact_argv`: the argv of a
captured or supervised program, and the program part of `ckpt run`'s own recorded command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ckptcli
from ckptcli._util.redact import redact_argv
from tests.conftest import run_ckpt


@pytest.mark.parametrize(
    ("argv", "secret"),
    [
        (["curl", "-u", "bob:hunter2", "https://example.org"], "hunter2"),
        (["curl", "--user=bob:hunter2", "https://example.org"], "hunter2"),
        (["wget", "--http-user", "bob:hunter2", "https://example.org"], "hunter2"),
        (["env", "PGPASSWORD=hunter2", "psql"], "hunter2"),
        (["env", "OPENAI_API_KEY=hunter2", "agent"], "hunter2"),
        (["/usr/bin/mysql", "-u", "root", "-phunter2", "db"], "hunter2"),
        (["mysqldump", "-phunter2"], "hunter2"),
        (["tool", "--api-key", "hunter2"], "hunter2"),
        (["tool", "--db-password=hunter2"], "hunter2"),
    ],
)
def test_a_secret_on_the_command_line_is_redacted(argv: list[str], secret: str) -> None:
    out = redact_argv(argv)
    assert len(out) == len(argv) and out[0] == argv[0]
    assert not any(secret in a for a in out), out
    assert any("[REDACTED:" in a for a in out), out


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-u", "script.py", "--port", "8080"],  # -u without user:password
        ["mysql", "-u", "root", "-p", "db"],  # -p alone asks on the terminal
        ["ssh", "-p", "2222", "host"],
        ["tar", "-cf", "out.tar", "PATH=/x"],  # an assignment whose name is no secret
        ["grep", "-p8080", "file"],  # -p attached, but not a MySQL program
        ["curl", "-u", "https://a/b:c", "x"],  # not user:password
    ],
)
def test_what_is_no_secret_is_kept(argv: list[str]) -> None:
    assert redact_argv(argv) == argv


def test_redacting_twice_changes_nothing_more() -> None:
    once = redact_argv(["curl", "-u", "bob:hunter2", "--token", "abc", "A_TOKEN=x"])
    assert redact_argv(once) == once


def test_a_library_process_s_secrets_stay_out_of_its_reflog_entries(tmp_path: Path) -> None:
    """Records name the command of the process that wrote them: a library caller's whole
    argv went in as it was (`app.py --db-password=hunter2`), shown by `ckpt reflog` and, in
    its locks' holder records, to every host that waits for them."""
    ckptcli.init_store(tmp_path / "store")
    script = "import sys, ckptcli; ckptcli.take(ckptcli.open_store(sys.argv[1]), {'memory': {'a': 1}}, subject='agent:a')"
    secrets = ["--db-password=hunter2-a", "--token", "hunter2-b", "-u", "bob:hunter2-c", "OPENAI_API_KEY=hunter2-d"]
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store"), *secrets], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log = run_ckpt("--store", tmp_path / "store", "reflog", "--json")
    assert log.returncode == 0, log.stderr
    (entry,) = json.loads(log.stdout)
    assert "hunter2" not in entry["command"] and entry["command"].count("[REDACTED:") == 4, entry
