"""Format version 2 (formats/v2.md) and the v1 -> v2 migration (`ckpt migrate --format`).

* every v1 golden fixture (the store and each checkpoint file) upgrades to v2, keeps
  its checkpoint ids and states, and verifies with --read-data;
* a v1 store keeps writing v1 until it is upgraded; a newer checkpoint is refused by
  an older store;
* a real `ckpt migrate --format` SIGKILLed at each point of its write order leaves a
  store in which every checkpoint reads exactly as before (and, before the config
  moves, a store unchanged byte for byte); running it again finishes the upgrade;
* a checkpoint file upgrade killed before its rename leaves the original untouched;
* damage only version 2's checks see (a bit zstd ignores) is found and named.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint
from ckptcli.format import framing
from ckptcli.format.jsonview import to_json
from ckptcli.store.single import CheckpointFile
from tests.conftest import run_ckpt
from tests.helpers_faults import child_env, fault_argv, file_layout, tree_snapshot

V1 = Path(__file__).resolve().parent.parent / "fixtures" / "v1"
EXPECTED = json.loads((V1 / "expected.json").read_text())
V1_FILES = sorted(p.name for p in V1.glob("*.ckpt"))


def _headers(store: Path, sub: str) -> set[int]:
    return {int.from_bytes(p.read_bytes()[8:10], "big") for p in (store / sub).rglob("*") if p.is_file()}


def _assert_reads_as_expected(store_dir: Path, tmp: Path) -> None:
    """Every checkpoint of the v1 fixture reads with its recorded state, blobs and refs."""
    store = ckptcli.open_store(store_dir)
    try:
        for cid, want in EXPECTED["checkpoints"].items():
            ck = open_checkpoint(cid, store)
            assert to_json(ck.state()) == want["state"], cid
            assert [p.hex() for p in ck.manifest.parents] == want["parents"]
            if "blobs" in want:
                out = tmp / f"blobs-{cid[:8]}"
                shutil.rmtree(out, ignore_errors=True)
                ck.restore_blobs(out)
                assert sorted(
                    p.relative_to(out / "files").as_posix() for p in (out / "files").rglob("*") if p.is_file() or p.is_symlink()
                ) == sorted(want["blobs"])
        for ref, target in EXPECTED["refs"].items():
            assert store.resolve(ref.split("/", 1)[1]).hex() == target
    finally:
        store.close()


def _migrate(*args: str | Path) -> dict[str, Any]:
    r = run_ckpt("migrate", "--format", *args, "--json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_v1_store_fixture_upgrades_to_v2(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(V1 / "store", store)
    manifests_before = {p.name: p.read_bytes() for p in (store / "manifests").iterdir()}
    assert _headers(store, "packs") == {1}

    dry = _migrate(store, "--dry-run")
    assert dry["steps"] == ["v1-to-v2"] and dry["dry_run"] and dry["version_after"] == 2
    assert _headers(store, "packs") == {1}

    rep = _migrate(store)
    assert (rep["version_before"], rep["version_after"], rep["steps"]) == (1, 2, ["v1-to-v2"])
    assert rep["packs_rewritten"] >= 1 and rep["index_files_after"] == 1
    assert _headers(store, "packs") == {2} and _headers(store, "index") == {2}
    assert ckptcli.open_store(store).version == 2
    # checkpoint ids are hashes of the manifests, which are carried over byte for byte
    assert {p.name: p.read_bytes() for p in (store / "manifests").iterdir()} == manifests_before
    r = run_ckpt("verify", "--read-data", "--store", store, "--json")
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert json.loads(r.stdout)["problems"] == []
    _assert_reads_as_expected(store, tmp_path)
    # nothing left to do, and new takes write version 2
    assert _migrate(store)["steps"] == []
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"after": "upgrade"}}')
    assert run_ckpt("take", doc, "--subject", "agent:new", "--store", store).returncode == 0
    assert _headers(store, "packs") == {2}
    assert run_ckpt("verify", "--read-data", "--store", store).returncode == 0


@pytest.mark.parametrize("name", V1_FILES)
def test_v1_checkpoint_files_upgrade_to_v2(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    shutil.copy(V1 / name, path)
    before = CheckpointFile(path)
    cid, state = before.id, to_json(open_checkpoint(str(path)).state())
    before.close()
    rep = _migrate(path)
    assert rep["kind"] == "file" and rep["steps"] == ["v1-to-v2"] and rep["version_after"] == 2
    after = CheckpointFile(path)
    try:
        assert after.version == 2 and after.id == cid
        assert after.check_whole_file() is None
    finally:
        after.close()
    assert to_json(open_checkpoint(str(path)).state()) == state == EXPECTED["checkpoints"][cid.hex()]["state"]
    assert run_ckpt("verify", "--read-data", path).returncode == 0
    assert _migrate(path)["steps"] == []
    assert not list(tmp_path.glob(".*ckpt-upgrade"))


def test_v1_store_writes_v1_until_upgraded_and_refuses_newer_checkpoints(tmp_path: Path) -> None:
    old = tmp_path / "old"
    ckptcli.init_store(old, version=1)
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"memory": {"facts": [f"fact {i}" for i in range(2000)]}}))
    assert run_ckpt("take", doc, "--subject", "agent:a", "--store", old).returncode == 0
    assert run_ckpt("tag", "t1", "--store", old).returncode == 0
    assert run_ckpt("ls", "--store", old).returncode == 0  # writes the catalog cache
    # every file the v2 code wrote into the v1 store says version 1, so ckpt 0.1 reads it all
    written = [p for p in old.rglob("*") if p.is_file() and p.parts[len(old.parts)] not in ("locks", "tmp")]
    assert {p.relative_to(old).parts[0] for p in written} >= {"packs", "index", "manifests", "refs", "cache", "config"}
    # (but the takes' head hints: 32 raw bytes in cache/heads/, and the reflog's JSON lines in
    # logs/ (formats/reflog.md), which readers of the format ignore)
    assert {int.from_bytes(p.read_bytes()[8:10], "big") for p in written if "heads" not in p.parts and "logs" not in p.parts} == {1}
    assert all(p.stat().st_size == 32 for p in written if "heads" in p.parts)
    assert all(json.loads(line.rpartition("\t")[0]) for p in written if "logs" in p.parts for line in p.read_text().splitlines())
    assert run_ckpt("verify", "--read-data", "--store", old).returncode == 0
    # a checkpoint written in version 2 cannot go into a version-1 store
    new = tmp_path / "new"
    ckptcli.init_store(new)
    assert run_ckpt("take", doc, "--subject", "agent:b", "--store", new).returncode == 0
    assert run_ckpt("export", "latest", "-o", tmp_path / "b.ckpt", "--store", new).returncode == 0
    r = run_ckpt("import", tmp_path / "b.ckpt", "--store", old)
    assert r.returncode == 6, r.stderr.decode()
    err = r.stderr.decode()
    assert "format version 2" in err and "ckpt migrate --format" in err and "Traceback" not in err
    # a version-1 checkpoint file imports into a version-2 store
    assert run_ckpt("import", V1 / "agent.ckpt", "--store", new).returncode == 0


def _trace_points(store: Path, tmp: Path) -> list[str]:
    trace = tmp / "trace"
    p = subprocess.run(
        fault_argv("migrate", "--format", "--store", store),
        env=child_env({"CKPT_FAULT_TRACE": str(trace)}),
        capture_output=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr.decode()
    return [line.split(" ", 1)[0] for line in trace.read_text().splitlines()]


def _kill_points() -> list[str]:
    # config (1st commit), the new pack's objects, the new pack, the new index, deletions
    return [
        "commit_temp:1:before",
        "commit_temp:1:after",
        "pack_add:7:after",
        "commit_temp:2:before",
        "commit_temp:2:after",
        "commit_temp:3:after",
        "delete:1:after",
        "delete:6:after",
        "delete:9:after",
    ]


def test_kill_points_cover_the_upgrade(tmp_path: Path) -> None:
    """The points below exist in a real run: one config commit, then the pack, the index
    and at least 9 deletions (5 index files and 5 packs in the fixture)."""
    store = tmp_path / "store"
    shutil.copytree(V1 / "store", store)
    points = _trace_points(store, tmp_path)
    assert points.count("commit_temp") == 3 and points.count("delete") >= 9 and points.count("pack_add") >= 7


@pytest.mark.parametrize("point", _kill_points())
def test_upgrade_killed_midway_leaves_every_checkpoint_readable(point: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(V1 / "store", store)
    original = tree_snapshot(store, dir_mtimes=False, skip=("locks", "tmp"))
    p = subprocess.run(
        fault_argv("migrate", "--format", "--store", store), env=child_env({"CKPT_FAULT": point}), capture_output=True, timeout=120
    )
    assert p.returncode == -9, f"{point}: not killed (exit {p.returncode}): {p.stderr.decode()}"
    if point == "commit_temp:1:before":
        # before the config moves, the store is the original, byte for byte
        assert tree_snapshot(store, dir_mtimes=False, skip=("locks", "tmp")) == original
    _assert_reads_as_expected(store, tmp_path)
    r = run_ckpt("verify", "--read-data", "--store", store, "--json")
    assert r.returncode == 0, f"{point}: {r.stdout.decode()} {r.stderr.decode()}"
    # running the migration again finishes it
    rep = _migrate(store)
    assert rep["version_after"] == 2
    assert _headers(store, "packs") == {2}
    assert _migrate(store)["steps"] == []
    _assert_reads_as_expected(store, tmp_path)
    r = run_ckpt("verify", "--read-data", "--store", store, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["problems"] == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_file_upgrade_killed_before_rename_leaves_the_original(when: str, tmp_path: Path) -> None:
    path = tmp_path / "agent.ckpt"
    shutil.copy(V1 / "agent.ckpt", path)
    original = path.read_bytes()
    p = subprocess.run(
        fault_argv("migrate", "--format", path), env=child_env({"CKPT_FAULT": f"file_write:1:{when}"}), capture_output=True, timeout=120
    )
    assert p.returncode == -9, p.stderr.decode()
    assert path.read_bytes() == original
    assert run_ckpt("verify", "--read-data", path).returncode == 0
    assert _migrate(path)["version_after"] == 2
    assert run_ckpt("verify", "--read-data", path).returncode == 0


def test_damaged_v1_file_is_not_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "agent.ckpt"
    data = bytearray((V1 / "agent.ckpt").read_bytes())
    lay = file_layout(bytes(data))
    data[(lay.objects_start + lay.table_start) // 2] ^= 0x01  # inside a stored object
    path.write_bytes(bytes(data))
    r = run_ckpt("migrate", "--format", path)
    assert r.returncode == 5, r.stderr.decode()
    assert "nothing was written" in r.stderr.decode()
    assert path.read_bytes() == bytes(data)


def _flip_ignored_zstd_bit(pack: Path) -> None:
    """Flip the 'unused' bit of the first zstd frame header in a pack: the object still
    decodes to the same content, so its SHA-256 id still holds."""
    data = bytearray(pack.read_bytes())
    at = data.index(b"\x28\xb5\x2f\xfd", 12)
    data[at + 4] ^= 0x10
    pack.write_bytes(bytes(data))


@pytest.mark.parametrize("version", [1, 2])
def test_bit_zstd_ignores_is_found_by_verify(version: int, tmp_path: Path) -> None:
    store = tmp_path / "store"
    ckptcli.init_store(store, version=version)
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"memory": {"text": "compressible words " * 2000}}))
    assert run_ckpt("take", doc, "--subject", "agent:z", "--store", store).returncode == 0
    (pack,) = [p for p in (store / "packs").rglob("*") if p.is_file()]
    _flip_ignored_zstd_bit(pack)
    # the content still reads (the object's hash holds) ...
    assert run_ckpt("cat", "latest", "--store", store).returncode == 0
    # ... but verify --read-data finds the flipped bit and names the pack
    r = run_ckpt("verify", "--read-data", "--store", store, "--json")
    assert r.returncode == 5
    problems = json.loads(r.stdout)["problems"]
    assert any(p["name"].endswith(pack.name) for p in problems), problems


def test_v2_pack_id_is_not_the_file_hash(tmp_path: Path) -> None:
    """A v2 pack is named by header, object ids and trailer (formats/v2.md); the same
    objects in a v1 store get a pack named by the SHA-256 of its bytes."""
    import hashlib

    from ckptcli.store.verify import read_pack

    for version in (1, 2):
        store = tmp_path / f"s{version}"
        ckptcli.init_store(store, version=version)
        doc = tmp_path / "doc.json"
        doc.write_text(json.dumps({"memory": {"n": list(range(3000))}}))
        assert run_ckpt("take", doc, "--subject", "agent:p", "--store", store).returncode == 0
        (pack,) = [p for p in (store / "packs").rglob("*") if p.is_file()]
        data = pack.read_bytes()
        table = read_pack(data, str(pack))
        assert table.version == version
        if version == 1:
            assert hashlib.sha256(data).hexdigest() == pack.name
        else:
            assert table.pack_id() == bytes.fromhex(pack.name) != hashlib.sha256(data).digest()
            assert framing.check_header(data, framing.KIND_PACK, "p") == 2


def test_migrate_list_and_usage(tmp_path: Path) -> None:
    r = run_ckpt("migrate", "--list", "--json")
    assert r.returncode == 0
    names = [m["name"] for m in json.loads(r.stdout)["format"]]
    assert names == ["v1-to-v2"]
    r = run_ckpt("migrate", "--format", tmp_path / "missing-dir")
    assert r.returncode in (2, 3, 10) and "Traceback" not in r.stderr.decode()
    r = run_ckpt("migrate", "--format", "--to", "3", tmp_path)
    assert r.returncode == 2 and "no schema options" in r.stderr.decode()


def test_init_format_version(tmp_path: Path) -> None:
    r = run_ckpt("init", "--format-version", "1", tmp_path / "old", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["format_version"] == 1
    assert ckptcli.open_store(tmp_path / "old").version == 1
    r = run_ckpt("init", "--format-version", "3", tmp_path / "future")
    err = r.stderr.decode()
    assert r.returncode == 4 and "format version 3" in err and "Traceback" not in err
    assert not (tmp_path / "future").exists()


def test_an_upgrade_cut_short_after_its_commit_point_is_finished_and_said_so(tmp_path: Path) -> None:
    # killed after the config says version 2 and before every pack was rewritten (the
    # upgrade's commit point comes first): run again, it finishes; "from 2 to 2" said nothing
    store = tmp_path / "store"
    shutil.copytree(V1 / "store", store)
    opened = ckptcli.open_store(store)
    try:
        opened.set_config(dataclasses.replace(opened.config, version=2))
    finally:
        opened.close()
    r = run_ckpt("migrate", "--format", store)
    assert r.returncode == 0, r.stderr.decode()
    line = r.stdout.decode()
    assert line.startswith(f"finished the upgrade of store {store} to format version 2 that was cut short (v1-to-v2: "), line
    assert "pack(s) are still in version 1" in line and "from format version" not in line, line
    assert _headers(store, "packs") == {2}
    assert run_ckpt("verify", "--read-data", "--store", store).returncode == 0
