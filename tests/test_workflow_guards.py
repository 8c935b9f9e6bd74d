"""What guards a durable workflow's history from a wrong `--journal-dir` and from its own
compensations: a reader or a rollback given another directory than the one holding the
workflow's journal is refused (one line), a rollback never runs beside a run of the
workflow whatever directories they were given (exit 9), and a compensation that calls
sys.exit() or raises a BaseException fails the rollback in one line (exit 1), recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ckptcli import workflow
from ckptcli.errors import InvalidInputError, LockError
from ckptcli.store.repository import Store

UNDONE: list[int] = []
#: what the compensation does: None (its job), or a BaseException to raise
UNDO_RAISES: list[BaseException | None] = [None]


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing records it."""


def undo_g(c: workflow.Compensation) -> None:
    if UNDO_RAISES[0] is not None:
        raise UNDO_RAISES[0]
    UNDONE.append(c.pos)


@workflow.step(compensate=undo_g)
def g(i: int) -> int:
    if i == CRASH_AT[0]:
        raise Crash
    return i


CRASH_AT: list[int] = [0]


def flow(ctx: workflow.Context, n: int) -> str:
    for i in range(1, n + 1):
        g(i)
        ctx.set(f"v{i}", i)
        if i % 3 == 0:
            ctx.checkpoint(f"after {i}")
    return "done"


def _killed_at_5(store: Store, wid: str) -> None:
    """Steps 1-4 done (4 only in the journal), step 5 in doubt: as after a SIGKILL."""
    CRASH_AT[0] = 5
    try:
        with pytest.raises(Crash):
            workflow.run(store, wid, flow, 6)
    finally:
        CRASH_AT[0] = 0


def test_a_rollback_given_another_journal_dir_than_the_workflows_is_refused(store: Store, cli: Any, tmp_path: Path) -> None:
    UNDONE.clear()
    _killed_at_5(store, "j2")
    s = ["--store", store.location]
    first = "workflow:j2~1"  # the first checkpoint: no step done
    empty = tmp_path / "empty"
    empty.mkdir()
    got = cli("workflow", "rollback", "j2", "--to", first, "--run", "--journal-dir", empty, *s)
    assert got.code == 4, (got.out, got.err)
    assert got.err.count("\n") == 1 and "keeps its journal in" in got.err and str(empty) in got.err
    assert UNDONE == [] and list(empty.iterdir()) == []
    got = cli("workflow", "show", "j2", "--journal-dir", empty, *s, "--json")
    assert got.code == 4 and "keeps its journal in" in got.err
    # the right one sees step 4 (in the journal only) and step 5 in doubt, and compensates 4..1
    got = cli("workflow", "show", "j2", *s, "--json")
    doc = json.loads(got.out)
    assert doc["pointer"] == 4 and [d["pos"] for d in doc["in_doubt"]] == [5]
    got = cli("workflow", "rollback", "j2", "--to", first, "--run", *s)
    assert got.code == 0, got.err
    assert UNDONE == [4, 3, 2, 1]


def _killed_at_5_in(store: Store, wid: str, journal_dir: Path) -> None:
    """_killed_at_5, the workflow run with a journal directory of its own."""
    CRASH_AT[0] = 5
    try:
        with pytest.raises(Crash):
            workflow.run(store, wid, flow, 6, journal_dir=journal_dir)
    finally:
        CRASH_AT[0] = 0


def test_a_journal_dir_other_than_the_one_the_workflow_was_run_with_is_refused(store: Store, cli: Any, tmp_path: Path) -> None:
    """Run with its own directory X, then given an empty Y: the store's record of X tells
    them apart from a workflow with no journal (a rollback from Y compensated nothing of
    what X held since the latest checkpoint, and started a second history in Y)."""
    UNDONE.clear()
    x, y = tmp_path / "x", tmp_path / "y"
    x.mkdir()
    y.mkdir()
    _killed_at_5_in(store, "j3", x)
    record = Path(store.location) / "workflows" / "j3.journal-dir"
    assert record.read_bytes() == os.fsencode(x)  # written at its first run
    s = ["--store", store.location]
    first = "workflow:j3~1"
    for args in (
        ["rollback", "j3", "--to", first, "--run", "--journal-dir", y],
        ["rollback", "j3", "--to", first, "--journal-dir", y],
        ["show", "j3", "--journal-dir", y],
        ["show", "j3"],
    ):
        got = cli("workflow", *args, *s)
        assert got.code == 4, (args, got.out, got.err)
        assert got.err.count("\n") == 1 and f"workflow j3 keeps its journal in {x}, not in" in got.err, got.err
        assert f"--journal-dir {x}" in got.err and (str(y) in got.err or "--journal-dir" not in args), got.err
    assert UNDONE == [] and list(y.iterdir()) == []
    for jd in (y, None):
        with pytest.raises(InvalidInputError, match="keeps its journal in"):
            workflow.run(store, "j3", flow, 6, journal_dir=jd)
    assert list(y.iterdir()) == [] and sorted(os.listdir(Path(store.location) / "workflows")) == ["j3.journal-dir", "j3.lock"]
    # ls lists it whatever it is given, from its checkpoints with a warning when not from X
    got = cli("workflow", "ls", "--journal-dir", y, *s, "--json")
    assert got.code == 0 and json.loads(got.out)[0]["steps_done"] == 3, (got.out, got.err)  # the journal's 4th not counted
    assert got.err.count("\n") == 1 and f"workflow j3 keeps its journal in {x}, not in {y}" in got.err, got.err
    assert [s.journal for s in workflow.list_workflows(store, journal_dir=x)] == [str(x / "j3.journal")]
    got = cli("workflow", "show", "j3", "--journal-dir", x, *s, "--json")
    assert got.code == 0 and json.loads(got.out)["pointer"] == 4
    got = cli("workflow", "rollback", "j3", "--to", first, "--run", "--journal-dir", x, *s)
    assert got.code == 0, got.err
    assert UNDONE == [4, 3, 2, 1]


def test_a_damaged_record_of_the_journal_dir_is_one_line(store: Store, cli: Any, tmp_path: Path) -> None:
    workflow.run(store, "j4", flow, 1, journal_dir=tmp_path)
    record = Path(store.location) / "workflows" / "j4.journal-dir"
    record.write_bytes(b"relative/path")
    got = cli("workflow", "show", "j4", "--journal-dir", tmp_path, "--store", store.location)
    assert got.code == 5 and got.err.count("\n") == 1 and "j4.journal-dir is damaged" in got.err and "remove it" in got.err, got.err
    record.unlink()  # as the line says: the workflow is read as before such records were kept
    assert cli("workflow", "show", "j4", "--journal-dir", tmp_path, "--store", store.location).code == 0


@pytest.mark.parametrize(
    ("make", "code", "words"),
    [
        (lambda d: d / "missing", 3, "does not exist"),
        (lambda d: (d / "file").write_text("x") and d / "file", 4, "is not a directory"),
        (lambda d: (d / "link").symlink_to(d / "real", target_is_directory=True) or d / "link", 8, "symbolic link"),
    ],
)
def test_a_journal_dir_that_is_not_a_directory_is_one_line(
    store: Store, cli: Any, tmp_path: Path, make: Any, code: int, words: str
) -> None:
    (tmp_path / "real").mkdir()
    workflow.run(store, "jd", flow, 2)
    bad = make(tmp_path)
    for args in (["show", "jd"], ["rollback", "jd", "--to", "workflow:jd~1", "--run"], ["ls"]):
        got = cli("workflow", *args, "--journal-dir", bad, "--store", store.location)
        assert got.code == code, (args, got.out, got.err)
        assert got.err.count("\n") == 1 and words in got.err


@pytest.mark.parametrize("run_dir", ["a", None])  # the workflow run with its own journal directory, or the store's
def test_a_rollback_never_runs_beside_the_workflow_whatever_journal_dirs_they_are_given(
    store: Store, cli: Any, tmp_path: Path, run_dir: str | None
) -> None:
    UNDONE.clear()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    seen: list[tuple[int, str]] = []

    def running(ctx: workflow.Context) -> None:
        g(1)
        ctx.checkpoint("one")
        g(2)
        s = ["--journal-dir", tmp_path / "b", "--store", store.location]
        got = cli("workflow", "rollback", "lk2", "--to", "workflow:lk2~1", "--run", *s)
        seen.append((got.code, got.err))
        with pytest.raises(LockError):
            workflow.rollback(store, "lk2", "workflow:lk2~1", execute=True, journal_dir=tmp_path / "b")

    workflow.run(store, "lk2", running, journal_dir=tmp_path / run_dir if run_dir else None)
    assert seen[0][0] == 9, seen
    assert "lk2 is running" in seen[0][1] and seen[0][1].count("\n") == 1
    assert UNDONE == [] and list((tmp_path / "b").iterdir()) == []


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (SystemExit(0), "called sys.exit(0)"),
        (SystemExit(3), "called sys.exit(3)"),
        (GeneratorExit(), "raised GeneratorExit"),
    ],
)
def test_a_compensation_that_exits_or_raises_a_base_exception_fails_the_rollback_in_one_line(
    store: Store, cli: Any, exc: BaseException, words: str
) -> None:
    UNDONE.clear()
    workflow.run(store, "cx", flow, 2)
    s = ["--store", store.location]
    UNDO_RAISES[0] = exc
    try:
        got = cli("workflow", "rollback", "cx", "--to", "workflow:cx~1", "--run", *s)
    finally:
        UNDO_RAISES[0] = None
    assert got.code == 1, (got.out, got.err)
    assert got.err.count("\n") == 1 and words in got.err and "undo_g" in got.err and "Traceback" not in got.err
    st = json.loads(cli("workflow", "show", "cx", *s, "--json").out)
    assert st["status"] == "rolling back"
    got = cli("workflow", "rollback", "cx", "--to", "workflow:cx~1", "--run", *s)  # goes on with it
    assert got.code == 0, got.err
    assert UNDONE == [2, 1]
    assert json.loads(cli("workflow", "show", "cx", *s, "--json").out)["status"] == "rolled back"


def test_a_damaged_record_in_the_journal_is_told_in_show_and_when_the_run_resumes(store: Store, cli: Any) -> None:
    from ckptcli.format.journal import PLAIN_HEAD
    from ckptcli.history.recorder import read_journal
    from ckptcli.workflow.core import journal_path

    _killed_at_5(store, "dmg")
    path = journal_path(store, "dmg")
    j = read_journal(path)
    assert len(j.records) >= 4
    at = j.starts[1]
    data = bytearray(path.read_bytes())
    data[at + PLAIN_HEAD.size + 1] ^= 0x40  # a byte of the second record's payload
    path.write_bytes(bytes(data))
    lost = len(j.records) - 1
    got = cli("workflow", "show", "dmg", "--store", store.location, "--json")
    assert got.code == 0, got.err
    json.loads(got.out)
    assert got.err.count("\n") == 1 and got.err.startswith("ckpt: warning: journal ")
    assert f"record at byte {at} is damaged" in got.err and f"{lost} records" in got.err
    # a run that resumes says it too (the store's warnings: the CLI prints them)
    again = Store.open(store.location)
    CRASH_AT[0] = 5
    try:
        with pytest.raises(Crash):
            workflow.run(again, "dmg", flow, 6)
    finally:
        CRASH_AT[0] = 0
    assert [w for w in again.warnings if f"record at byte {at} is damaged" in w and f"{lost} records" in w]


def test_a_torn_last_write_is_no_warning(store: Store, cli: Any) -> None:
    from ckptcli.workflow.core import journal_path

    _killed_at_5(store, "torn")
    path = journal_path(store, "torn")
    path.write_bytes(path.read_bytes()[:-3])  # the last record written in part, as a kill leaves it
    got = cli("workflow", "show", "torn", "--store", store.location, "--json")
    assert got.code == 0 and got.err == "", got.err


def test_a_rollback_to_the_first_checkpoint_says_no_step_stays_done(store: Store, cli: Any) -> None:
    workflow.run(store, "w0", flow, 2)
    s = ["--store", store.location]
    got = cli("workflow", "rollback", "w0", "--to", "workflow:w0~1", *s)
    assert got.code == 0 and "no step stays done" in got.out and "1-0" not in got.out, got.out
    got = cli("workflow", "rollback", "w0", "--to", "workflow:w0~1", "--run", *s)
    assert got.code == 0 and "no step stays done" in got.out, got.err
