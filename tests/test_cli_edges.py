"""Edges of the CLI found by outside testers: `ckpt ls REF` shows the refs as `ckpt ls`
does; an empty or unknown --chunker, and an empty path to restore, export or import, are
refused with one line and exit 2; a blobs directory that cannot be made says why, not
"0 B free"; a path given as the checkpoint (a directory, a path that is not there) gets
the same line and code from every verb, `ckpt import` included."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ckptcli.errors import ExitCode
from tests.conftest import run_ckpt


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[str]]:
    s = tmp_path / "s"
    assert run_ckpt("init", s).returncode == 0
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hello")
    doc = tmp_path / "d.json"
    made = []
    for i, subject in enumerate(["agent:bot", "agent:bot", "agent:other"]):
        doc.write_text(json.dumps({"step": i}))
        r = run_ckpt("take", doc, "--store", s, "-S", subject, "--blob", f"ws={tmp_path / 'ws'}", "--json")
        assert r.returncode == 0, r.stderr
        made.append(json.loads(r.stdout)["id"])
    assert run_ckpt("tag", "good", made[1], "--store", s).returncode == 0
    return s, made


def _one_line_error(r: object, code: int) -> str:
    err = r.stderr.decode()  # type: ignore[attr-defined]
    assert r.returncode == code, err  # type: ignore[attr-defined]
    assert err.count("\n") == 1 and err.startswith("ckpt: error: ") and "Traceback" not in err, err
    return err


def test_ls_of_one_checkpoint_shows_its_refs_as_the_list_does(store: tuple[Path, list[str]]) -> None:
    s, made = store
    listed = {row["id"]: row["refs"] for row in json.loads(run_ckpt("ls", "--store", s, "--json").stdout)}
    assert listed[made[1]] == ["latest/agent/bot", "tags/good"]
    for ref in ("agent:bot", "good", made[1][:12], made[1]):
        r = run_ckpt("ls", ref, "--store", s, "--json")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        assert [row["id"] for row in rows] == [made[1]] and rows[0]["refs"] == listed[made[1]], ref
        table = run_ckpt("ls", ref, "--store", s, "--columns", "id,refs").stdout.decode().splitlines()
        assert table[1].split()[1] == "latest,tag:good", table
    # a checkpoint file has no refs: the column stays empty
    f = s.parent / "x.ckpt"
    assert run_ckpt("export", made[1], "-o", f, "--store", s).returncode == 0
    assert json.loads(run_ckpt("ls", f, "--json").stdout)[0]["refs"] == []


@pytest.mark.parametrize("value", ["", "bogus"])
def test_init_refuses_an_empty_or_unknown_chunker_with_a_usage_error(tmp_path: Path, value: str) -> None:
    # --chunker "" made a store with the default chunker (exit 0); "bogus" exited 4
    r = run_ckpt("init", "--chunker", value, tmp_path / "s")
    err = _one_line_error(r, ExitCode.USAGE)
    assert "--chunker" in err and "fastcdc2020" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["restore", "agent:bot", "--no-state", "--blobs", ""],
        ["restore", "agent:bot", "--no-state", "-B", ""],
        ["restore", "agent:bot", "--no-state", "--blobs="],
        ["restore", "agent:bot", "-o", ""],
        ["export", "agent:bot", "-o", ""],
        ["import", ""],
        ["import", "langgraph", ""],
        ["import", "temporal", ""],
    ],
)
def test_an_empty_path_is_refused_before_anything_is_written(store: tuple[Path, list[str]], tmp_path: Path, args: list[str]) -> None:
    # Path("") is ".": restore --blobs "" wrote the blobs into the current directory
    s, _made = store
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "h.json").write_text("{}")  # what import temporal "" would have read
    r = run_ckpt(*args, "--store", s, cwd=cwd)
    err = _one_line_error(r, ExitCode.USAGE)
    assert "empty" in err, err
    assert sorted(os.listdir(cwd)) == ["h.json"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("target", ["/proc/ckpt-no-such-dir", "/proc/ckpt-no-such-dir/sub"])
def test_a_blobs_directory_that_cannot_be_made_says_why_not_no_space(store: tuple[Path, list[str]], target: str) -> None:
    # /proc reports 0 bytes free: the check said "has only 0 B free"
    s, _made = store
    r = run_ckpt("restore", "agent:bot", "--no-state", "--blobs", target, "--store", s)
    err = _one_line_error(r, ExitCode.IO_ERROR)
    assert "cannot create the directory /proc/ckpt-no-such-dir" in err and "free" not in err.split(";")[0], err


def test_a_blobs_target_that_is_a_file_says_so(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    s, _made = store
    f = tmp_path / "a-file"
    f.write_text("x")
    for target in (f, f / "sub"):
        err = _one_line_error(run_ckpt("restore", "agent:bot", "--no-state", "--blobs", target, "--store", s), ExitCode.IO_ERROR)
        assert "directory" in err and "free" not in err, err
    assert f.read_text() == "x"


def test_a_directory_given_to_import_as_its_checkpoint_file_is_bad_input(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    """`ckpt import DIR`: one line saying it is a directory and what to give (it was exit
    12, "cannot read DIR: Is a directory", as if the system had failed)."""
    s, _ = store
    err = _one_line_error(run_ckpt("import", tmp_path / "ws", "--store", s), ExitCode.INVALID_INPUT)
    assert f"{tmp_path / 'ws'} is a directory, not a checkpoint file; give a .ckpt file" in err, err


#: every verb that reads one checkpoint given as a reference or a checkpoint file
_READERS = [
    ["show"],
    ["cat"],
    ["ls"],
    ["ls-files"],
    ["verify"],
    ["export", "-o", "-"],
    ["restore", "-o", "-"],
    ["dump", "x"],
    ["diff", "latest"],  # the path first: a second argument that is a reference needs a store
]


@pytest.mark.parametrize("with_store", [False, True], ids=["no-store", "store"])
@pytest.mark.parametrize("what", ["directory", "missing"])
@pytest.mark.parametrize("verb", _READERS, ids=lambda v: v[0])
def test_a_path_is_a_checkpoint_file_for_every_verb_as_for_import(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: list[str], what: str, with_store: bool
) -> None:
    """A path (absolute, ./x, ../x, x.ckpt, or x/y that is there): a directory or a path
    that does not exist gets the line and code `ckpt import` gives it, whatever the verb
    and whether or not a store is found (show and cat said "no ckpt store", exit 10,
    where other verbs said "does not exist", exit 3)."""
    s = tmp_path / "s"
    assert cli("init", s).code == 0
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    if with_store:
        monkeypatch.setenv("CKPT_STORE", str(s))
    path = str(tmp_path / "ws") if what == "directory" else "./not-here"
    want = cli("import", path, "--store", s)
    assert want.code == (ExitCode.INVALID_INPUT if what == "directory" else ExitCode.NOT_FOUND), want.err
    got = cli(verb[0], path, *verb[1:])
    assert (got.code, got.err) == (want.code, want.err)
