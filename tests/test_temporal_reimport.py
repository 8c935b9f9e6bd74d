"""Importing a Temporal history of a run that is already stored (docs/workflows.md, "The
checkpoint cut"): the same history again is nothing new, a longer one appends, and another
history of the same run (same workflow id and run id, events that differ) is a conflict:
one line naming the first event that differs, exit 11, nothing written. Real files, the
real CLI in a subprocess."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from tests.conftest import run_ckpt

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "temporal"
ALTERNATE = FIXTURES / "test_replayer_event_tracing_alternate.json"  # 13 events


def _ckpt(store: Path, *args: Any) -> Any:
    return run_ckpt("--store", store, *args)


def _files(store: Path) -> dict[str, str]:
    """Every file of the store but its private cache and lock files, with its hash."""
    return {
        str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(store.rglob("*"))
        if p.is_file() and p.relative_to(store).parts[0] not in ("cache", "locks")
    }


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A store with the whole ALTERNATE history imported as workflow:wf; the file; its JSON."""
    store = tmp_path / "store"
    ckptcli.init_store(store)
    path = tmp_path / "wf.json"
    raw = json.loads(ALTERNATE.read_text())
    path.write_text(json.dumps(raw))
    r = _ckpt(store, "import", "temporal", path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["events"] == 13
    return store, path, raw


def _refused(store: Path, path: Path, event: int) -> None:
    before = _files(store)
    r = _ckpt(store, "import", "temporal", path)
    err = r.stderr.decode()
    assert r.returncode == 11, err
    assert err.count("\n") == 1 and err.startswith("ckpt: error: "), err
    assert f"event {event} differs from the one stored" in err and "Traceback" not in err, err
    assert r.stdout == b""
    assert _files(store) == before  # nothing written


def test_another_history_of_the_same_run_with_the_same_last_event_is_a_conflict(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    """Only the last stored event was compared: a history that differs before it was
    "nothing new" (exit 0) and the store silently kept the other one."""
    store, path, raw = imported
    raw["events"][4]["eventTime"] = "2030-01-01T00:00:00Z"  # event 5
    path.write_text(json.dumps(raw))
    _refused(store, path, 5)


def test_a_shorter_different_history_of_the_same_run_is_a_conflict(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    """A file shorter than what is stored was not compared at all."""
    store, path, raw = imported
    raw["events"] = raw["events"][:8]
    raw["events"][2]["eventTime"] = "2030-01-01T00:00:00Z"  # event 3
    path.write_text(json.dumps(raw))
    _refused(store, path, 3)


def test_a_longer_history_that_differs_before_the_stored_end_is_a_conflict(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    store, path, raw = imported
    raw["events"][6]["eventTime"] = "2030-01-01T00:00:00Z"  # event 7
    raw["events"].append({**raw["events"][12], "eventId": "14"})
    path.write_text(json.dumps(raw))
    _refused(store, path, 7)


def test_the_same_history_again_or_a_shorter_copy_of_it_is_nothing_new(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    store, path, raw = imported
    before = _files(store)
    for events in (raw["events"], raw["events"][:8]):
        path.write_text(json.dumps({"events": events}))
        r = _ckpt(store, "import", "temporal", path, "--json")
        assert r.returncode == 0, r.stderr.decode()
        got = json.loads(r.stdout)
        assert (got["events"], got["checkpoints"]) == (0, 0), got
        r = _ckpt(store, "import", "temporal", path)
        assert r.returncode == 0 and "nothing new to import" in r.stdout.decode(), r
    assert _files(store) == before


def test_a_longer_history_of_the_same_run_still_appends(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ckptcli.init_store(store)
    raw = json.loads(ALTERNATE.read_text())
    path = tmp_path / "wf.json"
    path.write_text(json.dumps({"events": raw["events"][:8]}))
    assert _ckpt(store, "import", "temporal", path).returncode == 0
    path.write_text(json.dumps(raw))
    r = _ckpt(store, "import", "temporal", path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    assert (got["events"], got["checkpoints"], got["already_present"]) == (5, 1, 8), got
