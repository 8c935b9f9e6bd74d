"""Defects of `ckpt import temporal` found by outside testers, each in real processes on
real histories (docs/workflows.md, "Importing a history"):

- two imports of the same run at once both wrote it (two root checkpoints of one run):
  the subject's import lock makes the second wait, then add only what is new;
- an error deep inside an event (a nesting bomb, a payload nested too deep) named
  neither the file nor the event;
- a single 50 MB payload was held several times (about 400 MB peak) and parsed in
  quadratic time."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

import ckptcli
from ckptcli.errors import LockError
from ckptcli.store.repository import Store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "temporal"
COMPLETE = FIXTURES / "test_replayer_complete_history.json"
ALTERNATE = FIXTURES / "test_replayer_event_tracing_alternate.json"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("CKPT_STORE", None)
    return env


def _import_proc(store: Path, path: Path, *more: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "--store", str(store), "import", "temporal", str(path), "--json", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )


def _runs(store: Path, subject: str) -> list[tuple[str, list[str], str]]:
    """(id, parents, events.seq) of the subject's checkpoints."""
    st = Store.open(store)
    out = []
    for cid, summary in ckptcli.list_checkpoints(st):
        if str(summary.subject) == subject:
            m = st.manifest(cid)
            out.append((cid.hex(), [p.hex() for p in m.parents], m.labels["events.seq"]))
    return out


# -- two imports at once -------------------------------------------------------------------------
def _history(tmp: Path, events: int) -> Path:
    from ckptcli.adapters.temporal.synth import synthesize

    path = tmp / "run.json"
    synthesize(COMPLETE, events, path, result_bytes=2 << 10)
    return path


def test_two_imports_of_the_same_run_at_once_store_it_once(store_dir: Path, tmp_path: Path) -> None:
    # both read and check the whole file (a few seconds) before writing: they overlap
    path = _history(tmp_path, 6_000)
    a, b = _import_proc(store_dir, path), _import_proc(store_dir, path)
    outs = [p.communicate(timeout=600) for p in (a, b)]
    for p, (_out, err) in zip((a, b), outs, strict=True):
        assert p.returncode == 0, err.decode()
    results = [json.loads(out) for out, _err in outs]
    runs = _runs(store_dir, "workflow:run")
    roots = [r for r in runs if not r[1]]
    assert len(roots) == 1, runs  # one copy of the run, not two
    # one of them wrote every event, the other found them stored and wrote nothing
    assert sorted(r["events"] for r in results) == [0, results[0]["events"] + results[1]["events"]]
    assert sorted(r["already_present"] for r in results)[1] == results[0]["events"] + results[1]["events"]
    assert len(runs) == max(r["checkpoints"] for r in results)


def test_an_import_refused_while_another_holds_the_run_says_so(store_dir: Path, tmp_path: Path) -> None:
    from ckptcli.adapters.temporal.importer import import_histories

    path = _history(tmp_path, 6_000)
    name = "import-" + hashlib.sha256(b"workflow:run").hexdigest()[:32]
    st = Store.open(store_dir)
    a = _import_proc(store_dir, path)
    deadline = time.monotonic() + 120
    while st.backend.lock_state(name)[0] != "exclusive":
        assert a.poll() is None and time.monotonic() < deadline, a.stderr.read().decode() if a.stderr else ""
        time.sleep(0.005)
    with pytest.raises(LockError) as info:
        import_histories(st, str(path), lock_wait=0)
    assert "workflow:run is being imported by another process" in info.value.message, info.value.message
    _out, err = a.communicate(timeout=600)
    assert a.returncode == 0, err.decode()
    again = import_histories(st, str(path), lock_wait=0)  # free now: nothing new to add
    assert again["events"] == 0 and again["checkpoints"] == 0
