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


HOSTILE_USER_CODE = """
import sys
from ckptcli.schema import migration

SCHEMA_VERSION = 2

def exit0(state):
    sys.exit(0)  # a helper that 'exits on success'

def exit3(state):
    sys.exit(3)  # would read as exit 3, no such checkpoint

def genexit(state):
    raise GeneratorExit

@migration(from_=1, to=2)
def up(state):
    sys.exit(0)
"""


def test_user_code_that_exits_or_raises_a_base_exception_is_one_line(cli, st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "hostile_user_code.py").write_text(HOSTILE_USER_CODE)
    monkeypatch.syspath_prepend(str(mods))
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"memory": {"ok": True}}))
    good = cli("take", doc, "--store", st, "-S", "agent:b").out.strip()
    doc.write_text(json.dumps({"memory": {"ok": False}}))
    for _ in range(3):
        assert cli("take", doc, "--store", st, "-S", "agent:b").code == 0
    for func, did in (("exit0", "called sys.exit(0)"), ("exit3", "called sys.exit(3)"), ("genexit", "raised GeneratorExit")):
        r = cli("bisect", "agent:b", "--store", st, "--good", good, "--check", f"hostile_user_code:{func}", "--json")
        assert r.code == ExitCode.INVALID_INPUT, (func, r)
        assert r.out == "" and r.err.count("\n") == 1 and f"the check hostile_user_code:{func} {did}" in r.err, r.err

    # a migration step that calls sys.exit(0): the migration failed (exit 1), nothing migrated
    doc.write_text(json.dumps({"memory": {"v": 9}}))
    old = cli("take", doc, "--store", st, "-S", "agent:q", "--schema-version", "1").out.strip()
    r = cli("migrate", old, "--store", st, "-M", "hostile_user_code", "--json")
    assert r.code == ExitCode.FAILURE, r
    assert r.err.count("\n") == 1 and "migration 1->2" in r.err and "called sys.exit(0)" in r.err, r.err
    assert [c["id"] for c in json.loads(cli("ls", "--store", st, "--subject", "agent:q", "--json").out)] == [old]

    # a compat adapter that calls sys.exit: that checkpoint is incompatible, named so
    r = cli("compat", "--store", st, "--subject", "agent:b", "--adapter", "hostile_user_code:exit3", "--json")
    assert r.code == ExitCode.FAILURE, r
    assert "called sys.exit(3)" in r.out, r.out
