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
from ckptcli.format import framing
from ckptcli.store import layout
from ckptcli.store.backends.s3 import S3Backend
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

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


# -- a damaged config ---------------------------------------------------------------------------------
CONFIG_SECTION = f'{RUNBOOK}, "A damaged config"'


@pytest.mark.parametrize("damage", ["garbage", "truncated", "magic"])
def test_a_damaged_config_says_what_to_do_locally(tmp_path: Path, damage: str) -> None:
    st, _ids = _store(tmp_path, 1)
    config = Path(st.location) / "config"
    good = config.read_bytes()
    config.write_bytes({"garbage": b"garbage", "truncated": good[:40], "magic": b"xxxx" + good[4:]}[damage])
    for args in (["verify"], ["ls"], ["prune", "--keep-last", "1"]):
        r = run_ckpt("--store", st.location, *args)
        err = r.stderr.decode()
        assert r.returncode == ExitCode.CORRUPT and CONFIG_SECTION in err and "ckpt verify" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
    config.write_bytes(good)  # the runbook's first remedy: the config back from a copy
    assert run_ckpt("verify", "--store", st.location).returncode == 0


def test_a_damaged_config_says_what_to_do_on_s3(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/damaged"
    assert run_ckpt("init", url).returncode == 0
    planter = S3Backend.from_url(url, {})
    try:
        planter.put(layout.CONFIG, b"this is not a config at all")
    finally:
        planter.close()
    for args in (["verify"], ["ls"]):
        r = run_ckpt("--store", url, *args)
        err = r.stderr.decode()
        assert r.returncode == ExitCode.CORRUPT and CONFIG_SECTION in err and "ckpt verify" not in err, (args, err)


def test_a_missing_config_says_the_store_lost_it_not_to_init_one(tmp_path: Path) -> None:
    # "is not a ckpt store; run `ckpt init`", and `ckpt init` then refused the directory
    st, _ids = _store(tmp_path, 1)
    (Path(st.location) / "config").unlink()
    r = run_ckpt("--store", st.location, "ls")
    err = r.stderr.decode()
    assert r.returncode == ExitCode.NO_STORE and "but no config" in err and CONFIG_SECTION in err, err
    assert len(err.strip().splitlines()) == 1 and "run `ckpt init`" not in err, err


def test_a_missing_config_on_s3_says_the_store_lost_it(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/lost"
    assert run_ckpt("init", url).returncode == 0
    planter = S3Backend.from_url(url, {})
    try:
        planter.put("manifests/" + "ab" * 32, b"x")  # what a store with checkpoints holds
        planter.delete(layout.CONFIG)
    finally:
        planter.close()
    r = run_ckpt("--store", url, "ls")
    err = r.stderr.decode()
    assert r.returncode == ExitCode.NO_STORE and "but no config object" in err and CONFIG_SECTION in err, err


# -- a ref of a newer format ----------------------------------------------------------------------------
def _reversion(path: Path, version: int) -> bytes:
    """Rewrite the ref record at `path` as format version `version`, its checksum valid."""
    _v, body = framing.decode_record(path.read_bytes(), framing.KIND_REF, str(path))
    data = framing.encode_record(framing.KIND_REF, body, version)
    path.write_bytes(data)
    return data


def test_a_ref_of_a_newer_format_is_refused_never_replaced(cli: Any, tmp_path: Path) -> None:
    st, _ids = _store(tmp_path)
    ref = Path(st.location) / layout.latest_ref("agent", "x")
    future = _reversion(ref, 3)
    (tmp_path / "doc.json").write_text('{"memory": {"step": 9}}')
    before = sorted(c.hex() for c in st.manifest_ids())
    runs = {
        "take": cli("take", tmp_path / "doc.json", "--subject", "agent:x", "--store", st.location),
        "repair refs": cli("repair", "refs", "--store", st.location),
        "repair refs --json": cli("repair", "refs", "--store", st.location, "--json"),
        "verify": cli("verify", "--store", st.location),
        "prune": cli("prune", "--keep-last", "1", "--store", st.location),
    }
    for what, r in runs.items():
        assert r.code == ExitCode.UNSUPPORTED_VERSION and "upgrade ckpt" in r.err, (what, r.out, r.err)
        assert ref.read_bytes() == future, what
    assert "newer ref refs/latest/agent/x" in runs["verify"].out and "damaged" not in runs["verify"].out, runs["verify"].out
    assert "repair refs" not in runs["verify"].out, runs["verify"].out  # (which would refuse it: no note says to run it)
    assert json.loads(runs["repair refs --json"].out)["newer"] == {"refs/latest/agent/x": ANY_TEXT}
    # it said "every latest ref names its subject's newest checkpoint", then exit 6
    assert runs["repair refs"].out.strip().endswith("but for 1 of a newer format (below)"), runs["repair refs"].out
    assert sorted(c.hex() for c in api.open_store(st.location).manifest_ids()) == before  # the take wrote nothing


class _AnyText:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and "version 3" in other


ANY_TEXT = _AnyText()


# -- a damaged tag --------------------------------------------------------------------------------------
def test_a_truncated_tag_says_what_to_do_and_that_works(cli: Any, tmp_path: Path) -> None:
    st, ids = _store(tmp_path)
    st.set_tag("evil", bytes.fromhex(ids[0]))
    (Path(st.location) / "refs" / "tags" / "evil").write_bytes(b"CKPTREF\0")
    r = cli("prune", "--keep-last", "1", "--store", st.location)
    assert r.code == ExitCode.CORRUPT and "refs/tags/evil: truncated" in r.err, r.err
    assert "`ckpt tag --delete evil`" in r.err and "`ckpt reflog tags/evil`" in r.err, r.err
    r = cli("verify", "--store", st.location)
    assert r.code == ExitCode.CORRUPT and "`ckpt tag --delete evil`" in r.out and "run `ckpt verify`" not in r.out + r.err
    assert ids[0][:12] in cli("reflog", "tags/evil", "--store", st.location).out  # what it named
    assert cli("tag", "--delete", "evil", "--store", st.location).code == 0  # what the line says works
    assert cli("tag", "evil", ids[0], "--store", st.location).code == 0
    assert cli("prune", "--keep-last", "1", "--store", st.location).code == 0
    assert cli("verify", "--store", st.location).code == 0
