"""A durable workflow's files in a local store (<store>/workflows: the journal, its lock,
the workflow's lock) are never read or written through a symbolic link, the directory
itself or any file in it (docs/storage.md): refused in one line, exit 8 (library:
UnsafePathError), with nothing written; and what a compensation prints never reaches
the command's stdout (`--json` is the command's own)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptcli import workflow
from ckptcli.errors import UnsafePathError
from ckptcli.store.repository import Store


def undo_loud(c: workflow.Compensation) -> None:
    print(f"undoing {c.pos}")
    os.write(1, f"undone {c.pos} at fd 1\n".encode())


@workflow.step(compensate=undo_loud)
def h(i: int) -> int:
    return i


def flow(ctx: workflow.Context, n: int) -> str:
    for i in range(1, n + 1):
        h(i)
        ctx.set(f"v{i}", i)
    return "done"


def _tree(d: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _ds, fs in os.walk(d) for f in fs)


def _linked_workflows(store: Store, tmp_path: Path) -> Path:
    """The store's workflows/ moved out and a link to it put in its place."""
    out = tmp_path / "out"
    ws = Path(store.location) / "workflows"
    shutil.move(ws, out)
    ws.symlink_to(out, target_is_directory=True)
    return out


def test_a_linked_workflows_dir_is_never_written_through(store: Store, cli: Any, tmp_path: Path) -> None:
    workflow.run(store, "w1", flow, 2)
    out = _linked_workflows(store, tmp_path)
    before = _tree(out)
    with pytest.raises(UnsafePathError):
        workflow.run(store, "w9", flow, 2)
    with pytest.raises(UnsafePathError):
        workflow.rollback(store, "w1", "workflow:w1~1", execute=True)
    s = ["--store", store.location]
    for args, does in (
        (["rollback", "w1", "--to", "workflow:w1~1", "--run"], "writes"),
        (["rollback", "w1", "--to", "workflow:w1~1"], "reads"),
    ):
        got = cli("workflow", *args, *s)
        assert got.code == 8, (args, got.out, got.err)
        assert got.err.count("\n") == 1 and f"workflows is a symbolic link; ckpt {does} nothing" in got.err, got.err
    assert _tree(out) == before


def test_a_linked_workflows_dir_is_never_read_through(store: Store, cli: Any, tmp_path: Path) -> None:
    workflow.run(store, "w1", flow, 2)
    _linked_workflows(store, tmp_path)
    s = ["--store", store.location]
    for args in (["show", "w1"], ["ls"]):
        got = cli("workflow", *args, *s, "--json")
        assert got.code == 8, (args, got.out, got.err)
        assert got.err.count("\n") == 1 and "reads nothing through it" in got.err and got.out == ""


@pytest.mark.parametrize("suffix", [".journal", ".journal.lock", ".lock"])
def test_a_linked_file_of_a_workflow_is_never_followed(store: Store, cli: Any, tmp_path: Path, suffix: str) -> None:
    workflow.run(store, "w1", flow, 2)
    ws = Path(store.location) / "workflows"
    target = tmp_path / "x"
    moved = ws / f"w1{suffix}"
    if moved.exists():
        shutil.move(moved, target)
    moved.symlink_to(target)
    before = target.read_bytes() if target.exists() else None
    s = ["--store", store.location]
    for args in (["show", "w1"], ["rollback", "w1", "--to", "workflow:w1~1", "--run"]):
        got = cli("workflow", *args, *s)
        assert got.code == 8, (args, got.out, got.err)
        assert got.err.count("\n") == 1 and f"w1{suffix} is a symbolic link" in got.err, got.err
    with pytest.raises(UnsafePathError):
        workflow.run(store, "w1", flow, 2)
    assert (target.read_bytes() if target.exists() else None) == before


def test_a_linked_lock_of_a_new_workflow_is_refused_before_anything_is_written(store: Store, tmp_path: Path) -> None:
    ws = Path(store.location) / "workflows"
    ws.mkdir(exist_ok=True)
    (ws / "w2.lock").symlink_to(ws / "w2.lock")  # a link to itself: was "Too many levels of symbolic links" (exit 12)
    with pytest.raises(UnsafePathError):
        workflow.run(store, "w2", flow, 2)
    assert sorted(os.listdir(ws)) == ["w2.lock"]


def test_what_a_compensation_prints_never_reaches_the_json(store: Store, capfd: pytest.CaptureFixture[str]) -> None:
    from ckptcli.cli.app import run as ckpt

    workflow.run(store, "loud", flow, 2)
    capfd.readouterr()
    code = ckpt(["workflow", "rollback", "loud", "--to", "workflow:loud~1", "--run", "--json", "--store", store.location])
    got = capfd.readouterr()
    assert code == 0, got.err
    doc = json.loads(got.out)
    assert doc["executed"] is True and [c["pos"] for c in doc["compensations"]] == [2, 1]
    assert "undoing 2" in got.err and "undone 1 at fd 1" in got.err


def test_ls_given_a_journal_dir_lists_the_workflows_in_it_beside_those_in_the_store(store: Store, cli: Any, tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    workflow.run(store, "w1", flow, 1)  # its journal in the store
    workflow.run(store, "w2", flow, 2, journal_dir=d)
    got = cli("workflow", "ls", "--journal-dir", d, "--store", store.location, "--json")
    assert got.code == 0, got.err
    assert [w["id"] for w in json.loads(got.out)] == ["w1", "w2"]
    found = {s.workflow_id: s.journal for s in workflow.list_workflows(store, journal_dir=d)}
    assert found == {"w1": str(Path(store.location) / "workflows" / "w1.journal"), "w2": str(d / "w2.journal")}


def test_an_empty_journal_dir_is_refused(store: Store, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptcli.errors import InvalidInputError

    workflow.run(store, "w1", flow, 1)
    monkeypatch.chdir(tmp_path)  # "" was taken as "."
    for args in (["ls"], ["show", "w1"], ["rollback", "w1", "--to", "workflow:w1~1", "--run"]):
        got = cli("workflow", *args, "--journal-dir", "", "--store", store.location)
        assert got.code == 2, (args, got.out, got.err)
        assert "empty" in got.err and "Traceback" not in got.err
    for call in (
        lambda: workflow.run(store, "w3", flow, 1, journal_dir=""),
        lambda: workflow.status(store, "w1", journal_dir=""),
        lambda: workflow.list_workflows(store, journal_dir=""),
    ):
        with pytest.raises(InvalidInputError, match="empty"):
            call()
    assert os.listdir(tmp_path) == ["store"]
