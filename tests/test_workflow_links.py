"""A durable workflow's files in a local store (<store>/workflows: the journal, its lock,
the workflow's lock) are never read or written through a symbolic link, the directory
itself or any file in it (docs/storage.md): refused in one line, exit 8 (library:
UnsafePathError), with nothing written; nor through a FIFO, a socket or a device there,
which is never waited on (exit 5, CorruptError), and which verify and doctor name; and
what a compensation prints never reaches the command's stdout (`--json` is the
command's own)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli import workflow
from ckptcli.errors import CorruptError, UnsafePathError
from ckptcli.listing import list_checkpoints
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


@pytest.mark.parametrize("suffix", [".journal", ".journal.lock", ".lock", ".journal-dir"])
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


# -- special files: a FIFO (or a socket) where a workflow keeps a file --------------------------------
REPO = Path(__file__).resolve().parents[1]
RUN_FLOW = """
import sys
import ckptcli
from ckptcli import workflow
from ckptcli.errors import CkptError


def flow(ctx, n):
    return n


try:
    workflow.run(ckptcli.open_store(sys.argv[1]), "w1", flow, 1)
except CkptError as exc:
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(int(exc.exit_code))
"""


def _ckpt(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """`ckpt ARGS` in a subprocess of this checkout: one that hangs fails the test after 20 s."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "ckptcli", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ckpt {' '.join(map(str, args))} hung (killed after 20 s)")


def _run_flow(store: Store) -> subprocess.CompletedProcess[str]:
    """workflow.run of w1 (the library) in a subprocess: one that hangs fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-c", RUN_FLOW, store.location], capture_output=True, text=True, cwd=REPO, timeout=20, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail("workflow.run hung on a FIFO (killed after 20 s)")


def _fifo(path: Path) -> None:
    path.parent.mkdir(exist_ok=True)
    if path.exists():
        path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("suffix", [".journal", ".journal.lock", ".lock"])
def test_a_fifo_for_a_file_of_a_new_workflow_is_refused_without_hanging(store: Store, suffix: str) -> None:
    ws = Path(store.location) / "workflows"
    _fifo(ws / f"w1{suffix}")  # the open of a FIFO to read or append blocks until a writer or reader comes
    got = _run_flow(store)
    assert got.returncode == 5, (got.stdout, got.stderr)
    assert f"w1{suffix} is a FIFO, not a regular file" in got.stderr and got.stderr.count("\n") == 1, got.stderr
    assert sorted(os.listdir(ws)) == [f"w1{suffix}"] and stat.S_ISFIFO(os.lstat(ws / f"w1{suffix}").st_mode)
    assert list_checkpoints(store) == []  # refused before the first checkpoint


def test_a_fifo_for_the_journal_of_a_workflow_is_named_by_every_command_never_waited_on(store: Store) -> None:
    workflow.run(store, "w1", flow, 2)
    journal = Path(store.location) / "workflows" / "w1.journal"
    _fifo(journal)
    got = _run_flow(store)
    assert got.returncode == 5 and "w1.journal is a FIFO" in got.stderr, got.stderr
    s = ["--store", store.location]
    for args in (["show", "w1"], ["ls"], ["rollback", "w1", "--to", "workflow:w1~1"], ["rollback", "w1", "--to", "workflow:w1~1", "--run"]):
        r = _ckpt("workflow", *args, *s)
        assert r.returncode == 5, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "w1.journal is a FIFO, not a regular file" in r.stderr and "remove it" in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(journal).st_mode)  # neither written through nor replaced
    for cmd in ("verify", "doctor"):
        r = _ckpt(cmd, *s)
        assert r.returncode == (5 if cmd == "verify" else 1), (cmd, r.stdout, r.stderr)
        assert "workflows/w1.journal is a FIFO" in r.stdout, (cmd, r.stdout)


def test_a_socket_in_a_custom_journal_dir_is_refused(store: Store, tmp_path: Path) -> None:
    d = tmp_path / "short"
    d.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(d / "w1.journal"))
        with pytest.raises(CorruptError, match=re.escape("w1.journal is a socket, not a regular file")):
            workflow.run(store, "w1", flow, 1, journal_dir=d)
        with pytest.raises(CorruptError, match="is a socket"):
            workflow.status(store, "w1", journal_dir=d)
    finally:
        sock.close()


def test_a_journal_replaced_by_a_link_after_it_was_looked_at_is_never_appended_through(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look before the open is not what protects the journal: a link planted after it
    (here, as the recorder opens the journal to append) is refused by the open itself."""
    from ckptcli.history import recorder

    workflow.run(store, "w1", flow, 1)
    journal = Path(store.location) / "workflows" / "w1.journal"
    outside = tmp_path / "outside"
    outside.write_bytes(b"not ckpt's")
    real_open = recorder.Recorder._open_writer

    def planted_then_open(self: recorder.Recorder) -> Any:
        if self.path == journal:  # what a process racing the checks does
            journal.unlink()
            journal.symlink_to(outside)
        return real_open(self)

    monkeypatch.setattr(recorder.Recorder, "_open_writer", planted_then_open)
    with pytest.raises(UnsafePathError, match=re.escape("w1.journal is a symbolic link")):
        workflow.rollback(store, "w1", "workflow:w1~1", execute=True)
    assert outside.read_bytes() == b"not ckpt's"


def test_the_recorder_never_appends_to_a_link_or_waits_on_a_fifo(store: Store, tmp_path: Path) -> None:
    from ckptcli.history.recorder import Recorder, open_journal

    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    link = tmp_path / "j.journal"
    link.symlink_to(outside)
    with pytest.raises(UnsafePathError, match=re.escape("j.journal is a symbolic link")):
        Recorder.open(store, "agent:a", link)
    with pytest.raises(UnsafePathError, match=re.escape("j.journal is a symbolic link")):
        open_journal(link, os.O_WRONLY | os.O_APPEND)
    fifo = tmp_path / "f.journal"
    os.mkfifo(fifo)
    for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND, os.O_RDWR | os.O_CREAT):
        with pytest.raises(CorruptError, match=re.escape("f.journal is a FIFO")):
            open_journal(fifo, flags)
    assert outside.read_bytes() == b""


@pytest.mark.parametrize("planted", ["fifo", "directory", "link", "garbage"])
def test_one_bad_journal_dir_record_does_not_stop_ls_of_every_workflow(store: Store, cli: Any, tmp_path: Path, planted: str) -> None:
    # ls failed for all (exit 5 or 8) over one planted record; docs: ls lists every workflow
    workflow.run(store, "w1", flow, 1)
    workflow.run(store, "w2", flow, 2)
    record = Path(store.location) / "workflows" / "w2.journal-dir"
    if planted == "fifo":
        os.mkfifo(record)
    elif planted == "directory":
        record.mkdir()
    elif planted == "link":
        record.symlink_to(tmp_path)
    else:
        record.write_text("not a path")
    got = cli("workflow", "ls", "--store", store.location, "--json")
    assert got.code == 0, got.err
    assert [w["id"] for w in json.loads(got.out)] == ["w1", "w2"]
    assert got.err.count("\n") == 1 and "workflow w2: " in got.err and "w2.journal-dir" in got.err, got.err


def test_a_record_naming_another_directory_for_a_workflow_whose_journal_is_in_the_store_says_to_remove_it(
    store: Store, cli: Any, tmp_path: Path
) -> None:
    # show said "give --journal-dir OTHER", and given it, "leave out --journal-dir": a loop
    workflow.run(store, "w1", flow, 2)
    record = Path(store.location) / "workflows" / "w1.journal-dir"
    record.write_text(str(tmp_path / "other"))
    (tmp_path / "other").mkdir()
    for extra in ([], ["--journal-dir", str(tmp_path / "other")]):
        got = cli("workflow", "show", "w1", *extra, "--store", store.location)
        assert got.code == 5, (extra, got.err)
        assert got.err.count("\n") == 1 and f"remove it (rm {record})" in got.err, got.err
    record.unlink()
    assert cli("workflow", "show", "w1", "--store", store.location).code == 0
