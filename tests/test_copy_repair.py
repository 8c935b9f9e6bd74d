"""`ckpt copy SRC DST` repairs what DST lost of checkpoints it has already: objects whose
pack is gone (or that no index names), and a manifest at `manifests/<id>` that is not the
checkpoint of that id. And `ckpt verify` of a remote store reads what the bucket holds,
not the local cache's copy. Real stores on disk and on a real S3 server (moto)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ckptcli
from ckptcli.copy import copy_checkpoints
from ckptcli.errors import ExitCode
from ckptcli.store import layout
from ckptcli.store.repository import Store
from tests.helpers_faults import run_cli
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures


def _state(i: int) -> dict[str, object]:
    return {"memory": {"step": i, "notes": [f"note {n} " * 40 for n in range(100 + 10 * i)]}, "plan": {"payload": bytes(range(256)) * 300}}


@pytest.fixture
def src(tmp_path: Path) -> Store:
    st = ckptcli.init_store(tmp_path / "src")
    for i in range(3):
        ckptcli.take(st, _state(i), subject="agent:bot")
    return st


def _problems(store: Store) -> list[str]:
    report = ckptcli.verify(Store.open(store.location if "://" in store.location else Path(store.location)), read_data=True)
    return [p.message for p in report.problems]


def test_copy_sends_again_the_objects_of_a_pack_dst_lost(src: Store, tmp_path: Path) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    copy_checkpoints(src, dst)
    packs = sorted((tmp_path / "dst" / layout.PACKS).iterdir())
    shutil.rmtree(packs[0])  # a pack directory lost (rm -rf DST/packs/XX)
    assert _problems(dst)
    done = run_cli("copy", src.location, tmp_path / "dst")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert "repaired" in text and "DST had lost" in text, text
    assert not _problems(dst)
    again = run_cli("copy", src.location, tmp_path / "dst", "--json")
    assert json.loads(again.stdout)["objects_repaired"] == 0  # nothing left to repair


def test_copy_repairs_two_lost_packs_into_one_and_the_index_forgets_them(src: Store, tmp_path: Path) -> None:
    """The objects of two lost packs land in one new pack; the index files that named
    them for the lost packs are rewritten without them (verify then finds no pack named
    by an index missing, and every object where the index says)."""
    dst = ckptcli.init_store(tmp_path / "dst")
    first = min(src.manifest_ids(), key=lambda c: src.manifest(c).created_ns)
    copy_checkpoints(src, dst, [first.hex()])
    copy_checkpoints(src, Store.open(tmp_path / "dst"))
    lost = {p.name for p in (tmp_path / "dst" / layout.PACKS).glob("*/*")}
    assert len(lost) == 2
    for p in (tmp_path / "dst" / layout.PACKS).iterdir():
        shutil.rmtree(p)
    result = copy_checkpoints(src, Store.open(tmp_path / "dst"))
    assert result.objects_repaired == result.objects_sent > 0
    assert not lost & {p.name for p in (tmp_path / "dst" / layout.PACKS).glob("*/*")}
    assert not _problems(dst)
    assert copy_checkpoints(src, Store.open(tmp_path / "dst")).objects_repaired == 0


def test_copy_after_repair_index_sends_what_the_index_no_longer_names(src: Store, tmp_path: Path) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    copy_checkpoints(src, dst)
    for p in (tmp_path / "dst" / layout.PACKS).iterdir():
        shutil.rmtree(p)  # every pack
    assert run_cli("repair", "index", "--store", tmp_path / "dst").returncode == 0
    dry = copy_checkpoints(src, Store.open(tmp_path / "dst"), dry_run=True)
    assert dry.objects_repaired > 0 and _problems(dst)  # a dry run changes nothing
    result = copy_checkpoints(src, Store.open(tmp_path / "dst"))
    assert result.objects_repaired == dry.objects_repaired == result.objects_sent
    assert not _problems(dst)


@pytest.mark.parametrize("same_size", [False, True])
def test_copy_rewrites_a_manifest_dst_holds_damaged(src: Store, tmp_path: Path, same_size: bool) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    copy_checkpoints(src, dst)
    cid = src.manifest_ids()[0]
    path = tmp_path / "dst" / layout.manifest_path(cid)
    size = path.stat().st_size
    path.write_bytes(b"\x00" * (size if same_size else 7))
    result = copy_checkpoints(src, Store.open(tmp_path / "dst"))
    assert result.manifests_rewritten == [cid]
    assert path.read_bytes() == src.manifest_bytes(cid)
    assert not _problems(dst)


def test_copy_into_a_new_s3_store_with_a_planted_manifest(
    src: Store, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CKPT_CACHE_DIR", str(tmp_path / "cache"))
    url = s3_bucket.url + "/dst"
    dst = ckptcli.init_store(url)
    cid = max(src.manifest_ids(), key=lambda c: src.manifest(c).created_ns)  # the checkpoint latest names
    dst.backend.objects.put(layout.manifest_path(cid), b"garbage bytes")  # type: ignore[attr-defined]
    result = copy_checkpoints(src, Store.open(url))
    assert result.manifests_rewritten == [cid]
    assert result.objects_repaired > 0
    reopened = Store.open(url)
    assert reopened.backend.objects.get(layout.manifest_path(cid)) == src.manifest_bytes(cid)  # type: ignore[attr-defined]
    assert reopened.latest_state(src.manifest(cid).subject)[0] == cid
    assert not _problems(reopened)


def test_verify_on_s3_reads_the_bucket_not_the_cache(
    src: Store, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CKPT_CACHE_DIR", str(tmp_path / "cache"))
    url = s3_bucket.url + "/dst"
    copy_checkpoints(src, ckptcli.init_store(url))
    cid = src.manifest_ids()[0]
    assert not _problems(Store.open(url))
    store = Store.open(url)
    store.manifest(cid), store.index()  # read on this host: in its cache now
    index_file = store.backend.list(layout.INDEX)[0]
    store.backend.objects.put(layout.manifest_path(cid), b"garbage bytes")  # type: ignore[attr-defined]
    store.backend.objects.put(index_file, b"garbage bytes")  # type: ignore[attr-defined]
    problems = _problems(Store.open(url))
    for name in (layout.manifest_path(cid), index_file):
        assert any(name in m and "does not match its name" in m and "cache" in m for m in problems), (name, problems)
    done = run_cli("verify", "--store", url, env={"CKPT_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == ExitCode.CORRUPT, done.stderr
    assert cid.hex()[:12] in done.stdout.decode() + done.stderr.decode()


def test_import_writes_over_a_damaged_manifest_on_s3(
    src: Store, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ckpt import FILE` of a checkpoint whose manifest the bucket holds damaged writes
    it again (a put where nothing is replaced would leave the garbage, hidden by a warm
    cache on this host)."""
    monkeypatch.setenv("CKPT_CACHE_DIR", str(tmp_path / "cache"))
    url = s3_bucket.url + "/dst"
    dst = ckptcli.init_store(url)
    cid = src.manifest_ids()[0]
    ckptcli.export_checkpoint(ckptcli.open_checkpoint(cid.hex(), src), tmp_path / "one.ckpt")
    dst.backend.objects.put(layout.manifest_path(cid), b"garbage bytes")  # type: ignore[attr-defined]
    assert ckptcli.import_checkpoint(Store.open(url), tmp_path / "one.ckpt") == cid
    assert Store.open(url).backend.objects.get(layout.manifest_path(cid)) == src.manifest_bytes(cid)  # type: ignore[attr-defined]
    assert not _problems(Store.open(url))
