"""What `restore --durable` promises: everything written is synced before it returns,
and before what it replaced is dropped; without it, restore syncs nothing (as tar and
restic restore), which is what makes it fast."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

import ckptcli.blobs
from ckptcli.api import init_store, open_checkpoint, take


def _tree(root: Path) -> dict[str, bytes]:
    rng = random.Random(5)
    files = {"a.bin": rng.randbytes(200_000), "sub/b.txt": b"hello\n" * 1000, "sub/deeper/c": b"x"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.fixture
def taken(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path / "src"
    files = _tree(src)
    store = init_store(tmp_path / "store")
    take(store, {}, subject="process:p", blobs={"w": src})
    return tmp_path / "store", files


def _syncfs_calls(monkeypatch: pytest.MonkeyPatch, result: bool) -> list[Path]:
    calls: list[Path] = []

    def fake(path: Path) -> bool:
        calls.append(Path(path))
        return result

    monkeypatch.setattr(ckptcli.blobs, "syncfs", fake)
    return calls


def _fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths os.fsync is called on (the real fsync runs too)."""
    real = os.fsync
    seen: list[str] = []

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_by_default_restore_syncs_nothing(taken: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files = taken
    calls = _syncfs_calls(monkeypatch, True)
    seen = _fsynced(monkeypatch)
    open_checkpoint("latest", store_path=store).restore_blobs(tmp_path / "out")
    assert calls == [] and seen == []
    assert all((tmp_path / "out" / "w" / rel).read_bytes() == data for rel, data in files.items())


def test_durable_syncs_the_targets_file_system_once(
    taken: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, files = taken
    out = tmp_path / "out"
    state: dict[str, Any] = {}

    def fake(path: Path) -> bool:
        # by the time it syncs, every file is complete and in place
        state["path"] = Path(path)
        state["complete"] = all((out / "w" / rel).is_file() and (out / "w" / rel).read_bytes() == d for rel, d in files.items())
        return True

    monkeypatch.setattr(ckptcli.blobs, "syncfs", fake)
    seen = _fsynced(monkeypatch)
    open_checkpoint("latest", store_path=store).restore_blobs(out, durable=True)
    assert state == {"path": Path(os.path.realpath(out)), "complete": True}
    assert seen == []  # one syncfs instead of an fsync per file


def test_durable_without_syncfs_fsyncs_every_file_and_directory(
    taken: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, files = taken
    _syncfs_calls(monkeypatch, False)  # no syncfs here, or it failed
    seen = _fsynced(monkeypatch)
    out = Path(os.path.realpath(tmp_path / "out"))
    open_checkpoint("latest", store_path=store).restore_blobs(out, durable=True)
    want = {str(out / "w" / rel) for rel in files} | {str(out), str(out / "w"), str(out / "w" / "sub"), str(out / "w" / "sub" / "deeper")}
    assert want <= set(seen)


def test_durable_syncs_before_dropping_what_it_replaced(
    taken: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An overwritten file's old content is kept aside until the new one is on disk: a
    crash before the sync still finds one of the two."""
    store, files = taken
    out = tmp_path / "out"
    (out / "w").mkdir(parents=True)
    (out / "w" / "a.bin").write_bytes(b"old")
    listed: list[list[str]] = []

    def fake(path: Path) -> bool:
        listed.append(sorted(os.listdir(out / "w")))
        return True

    monkeypatch.setattr(ckptcli.blobs, "syncfs", fake)
    open_checkpoint("latest", store_path=store).restore_blobs(out, overwrite=True, durable=True)
    assert len(listed) == 1 and len(listed[0]) == 3  # a.bin, sub and the old a.bin kept aside
    assert sorted(os.listdir(out / "w")) == ["a.bin", "sub"]
    assert (out / "w" / "a.bin").read_bytes() == files["a.bin"]


def test_cli_durable_reaches_the_sync(
    taken: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    store, _files = taken
    calls = _syncfs_calls(monkeypatch, True)
    r = cli("restore", "latest", "--no-state", "--blobs", tmp_path / "o1", "--store", store)
    assert r.code == 0 and calls == []
    r = cli("restore", "latest", "--no-state", "--blobs", tmp_path / "o2", "--durable", "--store", store)
    assert r.code == 0 and calls == [Path(os.path.realpath(tmp_path / "o2"))]
    r = cli("restore", "latest", "-o", tmp_path / "s.json", "--durable", "--store", store)
    assert r.code == 2 and "--durable needs --blobs DIR or --in-place" in r.err
