"""`ckpt repair checkpoints`: checkpoints whose objects are gone are rewritten without
what is gone (or dropped), refs follow, nothing changes without --force, and a kill
part-way leaves a readable store that a second run finishes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import CkptError, ExitCode
from ckptcli.store.repair import LABEL_REPAIRED_DROPPED, LABEL_REPAIRED_FROM, repair_checkpoints
from ckptcli.store.repository import Store


@dataclass
class Damaged:
    store: Store
    w: str  # intact, no blobs
    x: str  # its blobs section's root was in the lost pack: the whole section goes
    y: str  # blobs good + bad; only bad's data was in the lost pack
    out: Path


def new_packs(store: Store, before: set[str]) -> set[str]:
    return set(store.backend.list("packs")) - before


@pytest.fixture
def damaged(tmp_path: Path) -> Damaged:
    st = api.init_store(tmp_path / "store")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(os.urandom(150_000))
    good = tmp_path / "good.bin"
    good.write_bytes(os.urandom(150_000))
    w = api.take(st, {"memory": {"step": 0}}, subject="agent:a").hex
    before = set(st.backend.list("packs"))
    x = api.take(st, {"memory": {"step": 1}}, subject="agent:a", blobs={"bad": bad}).hex
    lost = new_packs(st, before)
    y = api.take(st, {"memory": {"step": 2}}, subject="agent:a", blobs={"bad": bad, "good": good}).hex
    st.set_tag("release", bytes.fromhex(y))
    st.set_branch("exp", bytes.fromhex(y))
    for p in lost:  # the pack with bad's data and x's blobs map is lost
        st.backend.delete(p)
    return Damaged(api.open_store(st.location), w, x, y, tmp_path / "out")


def snapshot(store: Store) -> dict[str, bytes]:
    root = Path(store.location)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.parts[-2] not in ("locks", "cache")}


def test_dry_run_by_default_changes_nothing(cli: Any, damaged: Damaged) -> None:
    before = snapshot(damaged.store)
    r = cli("repair", "checkpoints", "--store", damaged.store.location)
    assert r.code == 0, r.err
    assert f"would rewrite {damaged.y[:12]} without blobs/bad" in r.out
    assert f"would rewrite {damaged.x[:12]} without blobs" in r.out
    assert "run again with --force" in r.out
    assert snapshot(damaged.store) == before


def test_force_rewrites_without_what_is_gone_and_moves_the_refs(cli: Any, damaged: Damaged) -> None:
    r = cli("repair", "checkpoints", "--store", damaged.store.location, "--force", "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert sorted(rep["damaged"]) == sorted([damaged.x, damaged.y])
    assert rep["damaged"][damaged.y]["dropped"] == ["blobs/bad"]
    assert rep["damaged"][damaged.x]["dropped"] == ["blobs"]
    new_y = rep["damaged"][damaged.y]["new"]
    new_x = rep["damaged"][damaged.x]["new"]
    st = api.open_store(damaged.store.location)
    ck = api.open_checkpoint(new_y, st)
    assert ck.manifest.labels[LABEL_REPAIRED_FROM] == damaged.y
    assert ck.manifest.labels[LABEL_REPAIRED_DROPPED] == "blobs/bad"
    assert ck.manifest.parents == [bytes.fromhex(new_x)]  # its damaged parent's repair
    assert ck.state() == {"memory": {"step": 2}}
    assert sorted(ck.blobs()) == ["good"]
    assert st.resolve("latest") == st.resolve("release") == st.resolve("exp") == bytes.fromhex(new_y)
    assert cli("restore", "latest", "--store", st.location, "--no-state", "--blobs", damaged.out).code == 0
    assert sorted(os.listdir(damaged.out)) == ["good"]
    assert cli("repair", "index", "--store", st.location).code == 0  # it still named the lost pack
    assert cli("verify", new_y, "--store", st.location, "--read-data").code == 0
    # the originals are still there (no --forget): verify still names them
    assert cli("verify", "--store", st.location).code == ExitCode.CORRUPT
    # a second run finds the same damage and writes the same repairs (same ids)
    again = json.loads(cli("repair", "checkpoints", "--store", st.location, "--force", "--json").out)
    assert again["damaged"][damaged.y]["new"] == new_y


def test_forget_removes_the_originals(cli: Any, damaged: Damaged) -> None:
    r = cli("repair", "checkpoints", "--store", damaged.store.location, "--force", "--forget")
    assert r.code == 0, r.err
    assert "run `ckpt repair index`" in r.out
    assert cli("repair", "index", "--store", damaged.store.location).code == 0
    v = cli("verify", "--store", damaged.store.location, "--read-data")
    assert v.code == 0, v.out + v.err
    ids = {c.hex() for c in api.open_store(damaged.store.location).manifest_ids()}
    assert damaged.x not in ids and damaged.y not in ids and damaged.w in ids and len(ids) == 3


def test_drop_removes_them_and_moves_refs_to_what_is_intact(cli: Any, damaged: Damaged) -> None:
    r = cli("repair", "checkpoints", "--store", damaged.store.location, "--drop", "--force")
    assert r.code == 0, r.err
    st = api.open_store(damaged.store.location)
    assert {c.hex() for c in st.manifest_ids()} == {damaged.w}
    assert st.resolve("latest").hex() == damaged.w
    assert st.resolve("exp").hex() == damaged.w  # a branch: to the nearest intact ancestor
    assert "tags/release" not in st.refs()  # a tag: removed
    assert cli("repair", "index", "--store", st.location).code == 0
    assert cli("verify", "--store", st.location, "--read-data").code == 0


def test_an_intact_store_is_left_alone(cli: Any, tmp_path: Path) -> None:
    st = api.init_store(tmp_path / "s")
    api.take(st, {"memory": {"a": "x" * 1000}}, subject="agent:a")
    r = cli("repair", "checkpoints", "--store", st.location, "--force")
    assert r.code == 0 and "have every object they need" in r.out


def test_options_of_checkpoints_only(cli: Any, damaged: Damaged) -> None:
    r = cli("repair", "index", "--store", damaged.store.location, "--force")
    assert r.code == ExitCode.USAGE and r.err.startswith("ckpt: error: --force")


def test_killed_between_the_new_checkpoint_and_its_refs(damaged: Damaged, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new manifest is the commit point: a failure after it leaves every ref where it
    was (the store reads as before, plus the repair), and running again finishes."""
    st = damaged.store

    def die(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(st, "write_ref", die)
    with pytest.raises(KeyboardInterrupt):
        repair_checkpoints(st, dry_run=False)
    monkeypatch.undo()
    st2 = api.open_store(st.location)
    assert st2.resolve("latest").hex() == damaged.y  # not moved yet
    assert api.open_checkpoint(damaged.w, st2).state() == {"memory": {"step": 0}}
    assert not os.listdir(Path(st.location) / "tmp")
    rep = repair_checkpoints(st2, dry_run=False)
    assert st2.resolve("latest").hex() == rep.damaged[damaged.y].new


def test_lost_pack_is_really_lost(damaged: Damaged) -> None:
    """The fixture does what it says: reading bad's data fails before the repair."""
    ck = api.open_checkpoint(damaged.y, damaged.store)
    with pytest.raises(CkptError, match=r"does not exist|missing"):
        ck.restore_blobs(damaged.out, names=["bad"])


def test_a_damaged_manifest_is_named_not_rewritten(cli: Any, tmp_path: Path) -> None:
    st = api.init_store(tmp_path / "s")
    cid = api.take(st, {"memory": {"a": 1}}, subject="agent:a").hex
    path = Path(st.location) / "manifests" / cid
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    r = cli("repair", "checkpoints", "--store", st.location, "--force")
    assert r.code == ExitCode.CORRUPT and "cannot be read" in r.err and "ckpt repair checkpoints --drop --force" in r.err
    assert path.read_bytes() == bytes(data)
