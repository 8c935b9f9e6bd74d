"""A damaged store can always be brought back to where prune and take work, and every
error on the way says what to do (never a `ckpt verify` that points back at itself):
an unreadable manifest (`ckpt repair checkpoints --drop` removes it; copy copies the
others), a damaged config, a ref of a newer format (refused, never overwritten), a
damaged tag. docs/runbooks/store-damaged.md is the page these errors point to."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import ExitCode
from ckptcli.store import layout
from ckptcli.store.repository import Store

DROP = "ckpt repair checkpoints --drop --force"
RUNBOOK = "docs/runbooks/store-damaged.md"


def _store(tmp_path: Path, n: int = 3) -> tuple[Store, list[str]]:
    st = api.init_store(tmp_path / "s")
    ids = [api.take(st, {"memory": {"step": i, "text": "x" * 2000}}, subject="agent:x").hex for i in range(n)]
    return st, ids


def _plant_garbage_manifest(st: Store) -> str:
    """A manifest whose name is the hash of its bytes, which are not a manifest."""
    data = b"this is not msgpack"
    cid = hashlib.sha256(data).digest()
    (Path(st.location) / layout.manifest_path(cid)).write_bytes(data)
    return cid.hex()


def _plant_misnamed_manifest(st: Store, ids: list[str]) -> str:
    """A valid manifest copied under a name that is not its hash."""
    wrong = hashlib.sha256(b"another name").hexdigest()
    root = Path(st.location)
    (root / "manifests" / wrong).write_bytes((root / "manifests" / ids[0]).read_bytes())
    return wrong


PLANTS = {"garbage": lambda st, ids: _plant_garbage_manifest(st), "misnamed": _plant_misnamed_manifest}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_damaged_manifest_errors_name_the_way_out(cli: Any, tmp_path: Path, plant: str) -> None:
    st, _ids = _store(tmp_path)
    bad = PLANTS[plant](st, _ids)
    loc = st.location
    r = cli("prune", "--keep-last", "1", "--dry-run", "--store", loc)
    assert r.code == ExitCode.CORRUPT and bad in r.err and DROP in r.err and "run `ckpt verify`" not in r.err, r.err
    r = cli("verify", "--store", loc)
    assert r.code == ExitCode.CORRUPT and DROP in r.out and "run `ckpt verify`" not in r.out + r.err, r.out + r.err
    r = cli("verify", "--store", loc, "--json")
    [problem] = json.loads(r.out)["problems"]
    assert problem["kind"] == "manifest" and problem["checkpoints"] == [bad] and DROP in problem["message"]
    r = cli("repair", "checkpoints", "--store", loc)  # rewriting cannot help: it says what does
    assert r.code == ExitCode.CORRUPT and DROP in r.err and "run `ckpt verify`" not in r.err, r.err
    r = cli("stats", "--store", loc)
    assert r.code == 0 and "checkpoints: 3 of 1 subject(s)" in r.out and bad[:12] in r.out and DROP in r.err, r.out + r.err


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_repair_checkpoints_drop_removes_a_damaged_manifest(cli: Any, tmp_path: Path, plant: str) -> None:
    st, ids = _store(tmp_path)
    bad = PLANTS[plant](st, ids)
    path = Path(st.location) / "manifests" / bad
    st.set_tag("old", bytes.fromhex(bad))  # a tag naming it is removed, as for a dropped checkpoint
    before = path.read_bytes()
    r = cli("repair", "checkpoints", "--drop", "--store", st.location)  # a dry run: says, changes nothing
    assert r.code == 0 and f"manifests/{bad}" in r.out and "would remove it" in r.out and "--force" in r.out, r.out + r.err
    assert path.read_bytes() == before
    r = cli("repair", "checkpoints", "--drop", "--force", "--store", st.location, "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["dropped_unreadable"] == [f"manifests/{bad}"] and rep["forgotten"] == [bad]
    assert rep["refs"] == {"tags/old": {"from": bad, "to": None}}
    assert not path.exists()
    assert cli("verify", "--store", st.location).code == 0
    r = cli("prune", "--keep-last", "1", "--store", st.location)
    assert r.code == 0, r.err
    s2 = api.open_store(st.location)
    assert [c.hex() for c in s2.manifest_ids()] == [ids[-1]] and s2.resolve("agent:x").hex() == ids[-1]
    assert api.take(s2, {"memory": {"step": 9}}, subject="agent:x").hex in {c.hex() for c in s2.manifest_ids()}


def test_drop_moves_a_latest_naming_a_damaged_manifest_to_its_subjects_newest(cli: Any, tmp_path: Path) -> None:
    st, ids = _store(tmp_path)
    bad = _plant_garbage_manifest(st)
    with st.ref_lock():
        st.write_ref(layout.latest_ref("agent", "x"), bytes.fromhex(bad))
    r = cli("repair", "checkpoints", "--drop", "--force", "--store", st.location, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["refs"] == {"latest/agent/x": {"from": bad, "to": ids[-1]}}
    assert api.open_store(st.location).resolve("agent:x").hex() == ids[-1]


def test_copy_copies_the_good_checkpoints_and_names_the_damaged_one(cli: Any, tmp_path: Path) -> None:
    st, ids = _store(tmp_path)
    bad = _plant_garbage_manifest(st)
    dst = api.init_store(tmp_path / "dst")
    r = cli("copy", st.location, dst.location, "--json")
    assert r.code == ExitCode.CORRUPT, r.err
    assert bad[:12] in r.err and "--drop --force --store" in r.err and "nothing was copied" not in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
    result = json.loads(r.out)
    assert sorted(result["checkpoints"]) == sorted(ids) and list(result["damaged"]) == [bad]
    assert sorted(c.hex() for c in api.open_store(dst.location).manifest_ids()) == sorted(ids)
    assert cli("verify", "--store", dst.location).code == 0
