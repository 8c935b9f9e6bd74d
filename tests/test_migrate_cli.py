"""`ckpt migrate REF --to N --migrations SPEC`: the user-schema migration through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take
from tests.conftest import REPO, run_ckpt

V1 = {"memory": {"notes": "refund promised", "user": "Ada Lovelace"}, "plan": ["check order"]}
V3 = {"memory": {"scratchpad": "refund promised", "user": {"first": "Ada", "last": "Lovelace"}}, "plan": ["check order"]}


def _store(tmp_path: Path) -> tuple[Path, str]:
    st = ckptcli.init_store(tmp_path / "store")
    blobs = tmp_path / "files"
    blobs.mkdir()
    (blobs / "model.bin").write_bytes(b"weights" * 1000)
    res = take(st, V1, subject="agent:support-bot", schema_version=1, labels={"env": "prod"}, blobs={"files": blobs})
    return tmp_path / "store", res.hex


def test_migrate_writes_a_child_and_leaves_the_original(tmp_path: Path) -> None:
    store, old = _store(tmp_path)
    snapshot = (store / "manifests").rglob("*")
    before = {p.name for p in snapshot}
    p = run_ckpt("migrate", "agent:support-bot", "--migrations", "tests.schema_example.migrations", "--json", "--store", store, cwd=REPO)
    assert p.returncode == 0, p.stderr.decode()
    doc = json.loads(p.stdout)
    assert doc["parent"] == old and doc["schema_version"] == 3
    st = open_store(store)
    new = open_checkpoint(doc["id"], st)
    assert new.state() == V3 and new.manifest.labels == {"env": "prod"}
    assert new.manifest.sections["blobs"] == open_checkpoint(old, st).manifest.sections["blobs"]
    assert open_checkpoint(old, st).state() == V1  # untouched
    assert before <= {p.name for p in (store / "manifests").rglob("*")}
    assert open_checkpoint("agent:support-bot", st).hex == doc["id"]


def test_dry_run_writes_nothing_and_names_the_chain(tmp_path: Path) -> None:
    store, old = _store(tmp_path)
    files = sorted(str(p) for p in store.rglob("*") if "cache" not in p.parts and "locks" not in p.parts)
    p = run_ckpt("migrate", old[:8], "--to", "2", "-M", "tests.schema_example.migrations", "--dry-run", "--store", store, cwd=REPO)
    assert p.returncode == 0, p.stderr.decode()
    assert "from schema 1 to 2: 1->2 (memory.notes is now memory.scratchpad)" in p.stdout.decode()
    assert sorted(str(p) for p in store.rglob("*") if "cache" not in p.parts and "locks" not in p.parts) == files


def test_a_failing_migration_is_one_line_exit_1_and_writes_nothing(tmp_path: Path) -> None:
    st = ckptcli.init_store(tmp_path / "store")
    bad = {"memory": {"scratchpad": "x", "user": 42}}  # v2 state whose user is not a string
    take(st, bad, subject="agent:b", schema_version=2)
    n = len(st.manifest_ids())
    p = run_ckpt("migrate", "agent:b", "-M", "tests.schema_example.migrations", "--store", tmp_path / "store", cwd=REPO)
    err = p.stderr.decode()
    assert p.returncode == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert "migration 2->3" in err and "AttributeError" in err
    assert len(open_store(tmp_path / "store").manifest_ids()) == n
    dbg = run_ckpt(
        "migrate", "agent:b", "-M", "tests.schema_example.migrations", "--store", tmp_path / "store", cwd=REPO, env={"CKPT_DEBUG": "1"}
    )
    assert dbg.returncode == 1 and "Traceback" in dbg.stderr.decode() and "split_user" in dbg.stderr.decode()


def test_usage_errors(tmp_path: Path, cli: Any) -> None:
    store, old = _store(tmp_path)
    r = cli("migrate", old, "-M", "no.such.module", "--store", store)
    assert r.code == 3 and "no.such" in r.err
    r = cli("migrate", old, "-M", "tests.schema_example.migrations", "--to", "9", "--store", store)
    assert r.code == 1 and "9" in r.err
