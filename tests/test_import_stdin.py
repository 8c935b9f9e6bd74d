"""`ckpt import -`: a checkpoint file from stdin, as `ckpt export ... -o - | ssh host ckpt
import -` (the example of `ckpt export --help`) sends it; checked whole before anything is
kept, as a file is, and errors name stdin."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_ckpt


def _two_stores(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_ckpt("init", a).returncode == 0 and run_ckpt("init", b).returncode == 0
    doc = tmp_path / "s.json"
    doc.write_text(json.dumps({"memory": {"notes": ["n" * 300] * 40, "turn": 7}}))
    assert run_ckpt("--store", a, "take", doc, "-S", "agent:x").returncode == 0
    return a, b


def test_an_exported_checkpoint_piped_into_import_dash_lands_whole(tmp_path: Path) -> None:
    a, b = _two_stores(tmp_path)
    exported = run_ckpt("--store", a, "export", "latest", "-o", "-")
    assert exported.returncode == 0 and exported.stdout
    got = run_ckpt("--store", b, "import", "-", "--json", input=exported.stdout)
    assert got.returncode == 0, got.stderr
    cid = json.loads(got.stdout)["id"]
    assert run_ckpt("--store", b, "ls", "--json").stdout.decode().count(cid) == 1
    same = [json.loads(run_ckpt("--store", s, "restore", "latest").stdout) for s in (a, b)]
    assert same[0] == same[1] and same[1]["memory"]["turn"] == 7
    assert run_ckpt("--store", b, "verify", "--read-data").returncode == 0


def test_a_damaged_or_empty_stdin_is_one_line_naming_stdin_and_nothing_is_kept(tmp_path: Path) -> None:
    a, b = _two_stores(tmp_path)
    data = bytearray(run_ckpt("--store", a, "export", "latest", "-o", "-").stdout)
    cut = bytes(data[: len(data) // 2])
    data[len(data) // 2] ^= 0xFF
    for given, code in ((b"", 5), (cut, 5), (bytes(data), 5)):
        got = run_ckpt("--store", b, "import", "-", input=given)
        err = got.stderr.decode()
        assert got.returncode == code and err.startswith("ckpt: error: stdin") and err.count("\n") == 1, (got.returncode, err)
        assert "ckpt-import-" not in err  # not the temporary file's name
    assert json.loads(run_ckpt("--store", b, "ls", "--json").stdout) == []
    assert not list((b / "manifests").iterdir())


def test_a_closed_stdin_is_an_io_error_not_a_usage_error(tmp_path: Path) -> None:
    """`ckpt import -` with stdin closed was exit 2 (a usage error): nothing is wrong with
    the command; the system refuses the read (exit 12), as `ckpt import temporal -`."""
    import os
    import subprocess
    import sys

    assert run_ckpt("init", tmp_path / "store").returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "CKPT_STORE"}
    argv = [sys.executable, "-m", "ckptcli", "--store", str(tmp_path / "store"), "import", "-"]
    r = subprocess.run(argv, capture_output=True, env=env, preexec_fn=lambda: os.close(0), timeout=300)  # the child's stdin closed
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 12 and len(lines) == 1 and "stdin is closed" in lines[0], r.stderr.decode()
