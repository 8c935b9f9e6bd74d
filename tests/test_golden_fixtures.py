"""Every golden checkpoint of every released format version still reads, verifies and
restores exactly (fixtures/vN/ never change once released)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import ckptcli
from ckptcli.api import list_checkpoints, open_checkpoint
from ckptcli.format.jsonview import to_json
from tests.conftest import run_ckpt

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VERSIONS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name.startswith("v"))


def _expected(version: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((version / "expected.json").read_text())  # type: ignore[no-any-return]


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "symlink:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_there_are_fixtures_for_version_1() -> None:
    assert FIXTURES / "v1" in VERSIONS


@pytest.mark.parametrize("version", VERSIONS, ids=lambda p: p.name)
def test_fixture_files_never_change(version: Path) -> None:
    for line in (version / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((version / name).read_bytes()).hexdigest() == digest, f"{version.name}/{name} changed"


@pytest.mark.parametrize("version", VERSIONS, ids=lambda p: p.name)
def test_store_fixture_reads_verifies_and_restores(version: Path, tmp_path: Path) -> None:
    exp = _expected(version)
    shutil.copytree(version / "store", tmp_path / "store")
    store = ckptcli.open_store(tmp_path / "store")
    assert ckptcli.verify(store, read_data=True).ok
    listed = {cid.hex(): m for cid, m in list_checkpoints(store)}
    assert set(listed) == set(exp["checkpoints"])
    for cid, want in exp["checkpoints"].items():
        ck = open_checkpoint(cid, store)
        assert str(ck.manifest.subject) == want["subject"]
        assert [p.hex() for p in ck.manifest.parents] == want["parents"]
        assert to_json(ck.state()) == want["state"]
        if "blobs" in want:
            ck.restore_blobs(tmp_path / cid)
            assert _digest(tmp_path / cid / "files") == want["blobs"]
    for ref, target in exp["refs"].items():
        assert store.resolve(ref.split("/", 1)[1]).hex() == target


@pytest.mark.parametrize("version", VERSIONS, ids=lambda p: p.name)
def test_checkpoint_file_fixtures_read_through_the_cli(version: Path, tmp_path: Path) -> None:
    exp = _expected(version)
    files = {name: cid for cid, want in exp["checkpoints"].items() for name in want.get("files", [])}
    assert files
    for name, cid in files.items():
        path = version / name
        assert run_ckpt("verify", path, "--read-data").returncode == 0
        shown = json.loads(run_ckpt("show", path, "--json").stdout)
        assert shown["id"] == cid
        catted = json.loads(run_ckpt("cat", path).stdout)
        layout = catted["layout"]
        assert catted["id"] == cid and layout["kind"] in ("sections", "document")
        out = tmp_path / f"{name}.state"
        fmt = "msgpack" if layout.get("format") == "msgpack" else "json"
        restored = run_ckpt("restore", path, "-o", out, "--blobs", tmp_path / f"{name}.blobs", "--format", fmt)
        assert restored.returncode == 0, restored.stderr
        state = open_checkpoint(str(path)).state()
        assert to_json(state) == exp["checkpoints"][cid]["state"]
        if "blobs" in exp["checkpoints"][cid]:
            assert _digest(tmp_path / f"{name}.blobs" / "files") == exp["checkpoints"][cid]["blobs"]
        # and it imports into a fresh store under the same id
        store = tmp_path / f"{name}.store"
        ckptcli.init_store(store)
        assert run_ckpt("import", path, "--store", store).stdout.decode().strip() == cid
