"""The SIZE `ckpt ls` shows is the checkpoint's logical size, the strings and bytes of
its state and the contents of its files, whichever command wrote it: the files a take
did not read again (unchanged since the parent) and the blobs a supervisor's exit
checkpoint carries from the checkpoint it restores from are counted.
They were not: an 80 MiB state showed 1.4 KiB. The size is recorded at the take (ls reads
no blob tree); a checkpoint taken before that says "+" (at least). Real files, the real
CLI and real `ckpt run` supervisors in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptcli.store.repository import Store
from tests.conftest import REPO, run_ckpt
from tests.helpers_run import ended, runtime_env, supervise, wait_line

STATE = 3_000_000  # bytes of the state file
FIXTURE_STORE = Path(__file__).resolve().parent.parent / "fixtures" / "v2" / "store"


def _ls(store: Path) -> list[dict[str, Any]]:
    r = run_ckpt("--store", store, "ls", "--json")
    assert r.returncode == 0, r.stderr.decode()
    rows: list[dict[str, Any]] = json.loads(r.stdout)
    return rows


def _sizes(store: Path) -> dict[str, str]:
    """Checkpoint id (12 digits) -> its SIZE cell."""
    r = run_ckpt("--store", store, "ls", "--columns", "id,size")
    assert r.returncode == 0, r.stderr.decode()
    return dict(line.split(None, 1) for line in r.stdout.decode().splitlines()[1:])


def _shown(store: Path, hexid: str) -> dict[str, Any]:
    """What `ckpt show` says the checkpoint holds: section -> its description."""
    r = run_ckpt("--store", store, "show", hexid, "--snapshot", "--json")
    assert r.returncode == 0, r.stderr.decode()
    sections: dict[str, Any] = json.loads(r.stdout)["sections"]
    return sections


def _check(store: Path, hexid: str) -> None:
    """SIZE counts the state file, says no "+", and is what `ckpt show` lists (its blobs'
    files, and the rest within a few KiB: show counts 8 bytes a number, a take none)."""
    assert _sizes(store)[hexid[:12]] == "2.9 MiB", _sizes(store)
    (row,) = [r for r in _ls(store) if r["id"] == hexid]
    logical = row["stats"]["logical_bytes"]
    shown = _shown(store, hexid)
    assert shown["blobs"]["bytes"] == STATE and logical >= STATE, (row, shown)
    assert abs(logical - sum(d["bytes"] for d in shown.values())) < 16_384, (row, shown)


def test_a_take_of_files_unchanged_since_the_parent_counts_them(tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    (tmp_path / "state.bin").write_bytes(os.urandom(STATE))
    (tmp_path / "doc.json").write_text('{"memory": {"step": 1}}')
    ids = []
    for _ in range(2):
        r = run_ckpt(
            "--store", store, "take", tmp_path / "doc.json", "-S", "agent:a", "--blob", f"state={tmp_path / 'state.bin'}", "--json"
        )
        assert r.returncode == 0, r.stderr.decode()
        ids.append(json.loads(r.stdout)["id"])
    for hexid in ids:
        _check(store, hexid)
    second = next(r for r in _ls(store) if r["id"] == ids[1])
    assert second["stats"]["reused_bytes"] == STATE and second["stats"]["new_bytes"] < 10_000, second  # not read again


@pytest.fixture
def run_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    Store.init(tmp_path / ".ckpt")
    with runtime_env() as env:
        yield env


def _ckpt(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptcli", *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)


def test_the_supervisors_exit_checkpoint_of_an_unchanged_state_counts_it(tmp_path: Path, run_env: dict[str, str]) -> None:
    """The exit checkpoint re-uses the last one's copy of a state file that did not change."""
    (tmp_path / "state.bin").write_bytes(os.urandom(STATE))
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    sup = supervise(tmp_path, run_env, "--state", "state.bin", "--every", "1h", "--freeze", "sigstop", "--", *sleeper)
    wait_line(sup, "started ")
    r = _ckpt(tmp_path, run_env, "checkpoint", "process:p", "--json")
    assert r.returncode == 0, r.stderr
    ended(sup, signal.SIGTERM)
    rows = _ls(tmp_path / ".ckpt")
    assert [r["labels"]["process.reason"] for r in rows] == ["exit", "manual"], rows
    for row in rows:
        _check(tmp_path / ".ckpt", row["id"])
    assert rows[0]["stats"]["reused_bytes"] == STATE, rows[0]  # the exit checkpoint read nothing again


def test_the_checkpoint_that_carries_the_restored_state_counts_it(tmp_path: Path, run_env: dict[str, str]) -> None:
    """Halted in the backoff after a crash: the checkpoint of the exit and the restart
    carries the blobs of the checkpoint the next start restores (process.state_from)."""
    (tmp_path / "state.bin").write_bytes(os.urandom(STATE))
    flag = tmp_path / "die"
    script = f"import os, sys, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.01)\nsys.exit(5)\n"
    args = ["--state", "state.bin", "--every", "1h", "--freeze", "sigstop", "--backoff", "1h"]
    sup = supervise(tmp_path, run_env, *args, "--", sys.executable, "-c", script)
    wait_line(sup, "started ")
    r = _ckpt(tmp_path, run_env, "checkpoint", "process:p", "--json")
    assert r.returncode == 0, r.stderr
    good = json.loads(r.stdout)["id"]
    flag.write_text("")
    wait_line(sup, "restarting in 3600 s")
    ended(sup, signal.SIGINT)
    last = _ls(tmp_path / ".ckpt")[0]
    assert last["labels"]["process.state_from"] == good, last
    _check(tmp_path / ".ckpt", last["id"])
    _check(tmp_path / ".ckpt", good)
    assert last["stats"]["reused_bytes"] >= STATE, last  # carried, not read


def test_a_checkpoint_taken_before_the_size_was_recorded_says_at_least(tmp_path: Path) -> None:
    """The fixture store was written by an older ckpt (no reused_bytes): a checkpoint with
    a parent may hold files or sections it did not count, so its SIZE ends in "+"; a root
    checkpoint's is whole."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE, store)
    rows = {r["id"][:12]: r for r in _ls(store)}
    sizes = _sizes(store)
    assert set(sizes) == set(rows)
    for short, row in rows.items():
        assert "reused_bytes" not in row["stats"]
        assert sizes[short].endswith("+") == bool(row["parents"]), (short, sizes[short], row["parents"])
    assert any(row["parents"] for row in rows.values()) and any(not row["parents"] for row in rows.values())


def test_a_fork_and_a_migration_count_the_blobs_they_share(tmp_path: Path) -> None:
    """`ckpt fork` and `ckpt migrate` carry the old checkpoint's blobs without reading them
    again: the new checkpoint's SIZE counts them, as `ckpt show` does."""
    from ckptcli.api import open_checkpoint, open_store, take
    from ckptcli.history.recorder import Recorder
    from tests.replay_example import agent

    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    st = open_store(store)
    rec = Recorder.open(st, "agent:support-bot", tmp_path / "bot.journal", tools=agent.TOOLS)
    for text in ("where is A-1", "and where is A-2"):
        rec.step(agent.step, "message.append", message={"role": "user", "content": text}, sender="user")
    recorded = rec.checkpoint()
    rec.close()
    files = tmp_path / "files"
    files.mkdir()
    (files / "state.bin").write_bytes(os.urandom(STATE))
    doc = {name: open_checkpoint(recorded.hex, st).section(name) for name in open_checkpoint(recorded.hex, st).section_names()}
    doc["memory"] = {**doc["memory"], "notes": "refund promised"}  # what the example migration 1->2 renames
    with_blobs = take(st, doc, subject="agent:support-bot", parents=[recorded.hex], schema_version=1, blobs={"state": files}).hex
    forked = run_ckpt("--store", store, "fork", with_blobs, "--at", "1", "--json")
    assert forked.returncode == 0, forked.stderr.decode()
    migrated = run_ckpt(
        "--store", store, "migrate", with_blobs, "--migrations", "tests.schema_example.migrations", "--to", "2", "--json", cwd=REPO
    )
    assert migrated.returncode == 0, migrated.stderr.decode()
    for hexid in (json.loads(forked.stdout)["id"], json.loads(migrated.stdout)["id"]):
        (row,) = [r for r in _ls(store) if r["id"] == hexid]
        assert row["stats"]["logical_bytes"] >= STATE and row["stats"]["reused_bytes"] >= STATE, row
        assert _sizes(store)[hexid[:12]] == "2.9 MiB", _sizes(store)


def test_a_fork_a_migration_and_an_import_of_a_take_with_blobs_show_its_size(tmp_path: Path) -> None:
    """SIZE is the bytes of the strings and byte strings of the state document and of the
    files of its blobs (docs: `ckpt ls --help`), the same whichever command wrote the
    checkpoint: the take counted the blob listing's own strings too (its "dir" and
    "file" types, the path it was taken from), the fork and the migration that carry the
    blobs did not, so a fork of the same data showed a size some bytes off its source's."""
    store = tmp_path / "s"
    assert run_ckpt("init", store).returncode == 0
    work = tmp_path / "a-workspace-with-a-long-name"
    (work / "sub").mkdir(parents=True)
    (work / "a.txt").write_bytes(b"x" * 1000)
    (work / "sub" / "b.bin").write_bytes(b"y" * 234)
    os.symlink("a.txt", work / "link")
    (tmp_path / "doc.json").write_text(json.dumps({"memory": {"notes": "n" * 50, "user": "Ada Lovelace", "step": 3}, "events": []}))
    r = run_ckpt("--store", store, "take", tmp_path / "doc.json", "-S", "agent:a", "--schema-version", "1", "--blob", f"w={work}", "--json")
    assert r.returncode == 0, r.stderr.decode()
    source = json.loads(r.stdout)["id"]
    forked = run_ckpt("--store", store, "fork", source, "--at", "0", "--json")
    assert forked.returncode == 0, forked.stderr.decode()
    migrated = run_ckpt(
        "--store", store, "migrate", source, "--migrations", "tests.schema_example.migrations", "--to", "2", "--json", cwd=REPO
    )
    assert migrated.returncode == 0, migrated.stderr.decode()
    other = tmp_path / "other"
    assert run_ckpt("init", other).returncode == 0
    assert run_ckpt("--store", store, "export", source, "-o", tmp_path / "a.ckpt").returncode == 0
    imported = run_ckpt("--store", other, "import", tmp_path / "a.ckpt")
    assert imported.returncode == 0, imported.stderr.decode()

    expected = 50 + len("Ada Lovelace") + 1000 + 234  # the strings of the document, the bytes of the files
    rows = {r["id"]: r["stats"]["logical_bytes"] for r in _ls(store)}
    assert rows[source] == expected, rows
    assert rows[json.loads(forked.stdout)["id"]] == expected, rows
    assert rows[json.loads(migrated.stdout)["id"]] == expected, rows
    assert [r["stats"]["logical_bytes"] for r in _ls(other)] == [expected]


def test_a_carried_section_counts_what_a_take_of_it_counts(tmp_path: Path) -> None:
    """`take(carry={"memory": ck.carried("memory")})` counts the section as a take of the
    same value does, its strings and byte strings (it counted `ckpt show`'s bytes: each
    key, and 8 a number)."""
    from ckptcli.api import open_checkpoint, take

    st = Store.init(tmp_path / "s")
    memory = {"notes": "n" * 50, "step": 3, "ratio": 0.5, "raw": b"\x00" * 20, "items": ["a", "bc", {"k": "def"}]}
    first = take(st, {"memory": memory, "plan": []}, subject="agent:a")
    second = take(st, {"plan": []}, subject="agent:a", carry={"memory": open_checkpoint(first.hex, st).carried("memory")})
    assert st.manifest(first.id).stats["logical_bytes"] == 50 + 20 + 1 + 2 + 3
    assert st.manifest(second.id).stats["logical_bytes"] == st.manifest(first.id).stats["logical_bytes"]
