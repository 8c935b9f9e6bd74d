"""Small contracts of the CLI found by an outside audit: duplicate options refused, user code
that exits or raises a BaseException reported in one line, paths and patterns checked,
a closed pipe ending every command alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode


@pytest.fixture
def st(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    return store


def test_take_refuses_a_blob_name_given_twice(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "A").mkdir()
    (tmp_path / "A" / "data.db").write_text("important")
    (tmp_path / "B").mkdir()
    (tmp_path / "B" / "notes.txt").write_text("other")
    r = cli("take", "--store", st, "--blob", f"ws={tmp_path / 'A'}", "--blob", f"ws={tmp_path / 'B'}")
    assert r.code == ExitCode.USAGE, r
    assert r.err.count("\n") == 1 and "--blob ws=" in r.err and "twice" in r.err, r.err
    assert json.loads(cli("ls", "--store", st, "--json").out) == []  # nothing taken
