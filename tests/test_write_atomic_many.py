"""LocalBackend.write_atomic_many, the LangGraph saver's commit path for manifests and refs:
every file whole or not at all, nothing left in tmp/, the directories' links checked
once per directory (not once per file: each system call there is a wait for the
interpreter beside an event loop's workers), and a failure in mid-batch cleans up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ckptcli
import ckptcli.store.backend as backend_mod
from ckptcli.api import open_store
from ckptcli.errors import StoreIOError, UnsafePathError
from ckptcli.store.backend import create_temp


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _items(n: int) -> list[tuple[str, bytes]]:
    return [(f"manifests/{i:064x}", os.urandom(64) * (i + 1)) for i in range(n)]


@pytest.mark.parametrize("together", [True, False])
def test_every_file_is_written_whole_and_tmp_is_left_empty(store_dir: Path, monkeypatch: pytest.MonkeyPatch, together: bool) -> None:
    if not together:  # no syncfs here (or it failed): one fsync per file instead
        monkeypatch.setattr(backend_mod, "syncfs", lambda _path: False)
    items = [*_items(20), ("refs/test/a", b"1"), ("refs/test/b/c", b"2")]
    open_store(store_dir).backend.write_atomic_many(items)
    for path, data in items:
        assert (store_dir / path).read_bytes() == data
    assert os.listdir(store_dir / "tmp") == []


def test_links_are_checked_once_per_directory_not_once_per_file(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = open_store(store_dir).backend
    calls: list[str] = []
    real = os.lstat

    def lstat(path: str | os.PathLike[str], *a: object, **kw: object) -> os.stat_result:
        calls.append(os.fspath(path))
        return real(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", lstat)
    backend.write_atomic_many(_items(50))
    # manifests/ once and tmp/ once: 50 files, 2 checks (one for each file and its temp before)
    assert sorted(os.path.basename(c) for c in calls) == ["manifests", "tmp"], calls
    assert len(os.listdir(store_dir / "manifests")) == 50


def test_a_linked_directory_is_refused_before_anything_is_written(store_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store_dir / "refs" / "evil").symlink_to(outside)
    items = [*_items(3), ("refs/evil/x", b"1")]
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_store(store_dir).backend.write_atomic_many(items)
    assert os.listdir(outside) == [] and os.listdir(store_dir / "manifests") == [] and os.listdir(store_dir / "tmp") == []


def test_a_failure_in_mid_batch_removes_the_temporary_files_written_before(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = backend_mod.create_temp
    made: list[int] = []

    def failing(*a: object, **kw: object) -> tuple[str, int]:
        if len(made) == 2:
            raise OSError(28, "No space left on device")
        made.append(1)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(backend_mod, "create_temp", failing)
    with pytest.raises(StoreIOError, match="No space left on device"):
        open_store(store_dir).backend.write_atomic_many(_items(5))
    assert os.listdir(store_dir / "tmp") == [] and os.listdir(store_dir / "manifests") == []


def test_create_temp_takes_another_name_when_the_given_token_is_taken(tmp_path: Path) -> None:
    (tmp_path / "p-00000000deadbeef.tmp").write_bytes(b"planted")
    name, fd = create_temp(tmp_path, prefix="p-", token="00000000deadbeef")
    os.close(fd)
    assert name != "p-00000000deadbeef.tmp" and name.startswith("p-") and name.endswith(".tmp")
    assert (tmp_path / "p-00000000deadbeef.tmp").read_bytes() == b"planted"
    name, fd = create_temp(tmp_path, prefix="p-", token="00000000feedface")
    os.close(fd)
    assert name == "p-00000000feedface.tmp"
