"""The local backend beyond the shared suite: what it does on disk (temporary files,
planted links, special files, errors), its file:// URLs, and its conditional writes
raced by real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptcli.errors import InvalidInputError, NotFoundError, StoreIOError
from ckptcli.store.backends import open_backend
from ckptcli.store.backends.local import LOCK_NAME, LocalObjects, local_path

REPO = Path(__file__).resolve().parent.parent


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes()
    return out


def test_objects_are_files_and_tmp_is_left_empty(tmp_path: Path) -> None:
    b = LocalObjects(tmp_path / "s")
    b.put("packs/ab/x", b"x")
    assert b.put_if_absent("packs/ab/y", b"y")
    assert not b.put_if_absent("packs/ab/y", b"other")
    b.put_if_match("refs/latest/k/n", b"r", None)
    assert b.put_if_match("refs/latest/k/n", b"r2", "stale") is None
    with b.open_writer("big") as w:
        w.write(b"z" * 100)
        w.commit()
    w = b.open_writer("aborted")
    w.write(b"q")
    w.abort()
    assert sorted(os.listdir(tmp_path / "s" / "tmp")) == [LOCK_NAME]
    assert _tree(tmp_path / "s") == {
        "big": b"z" * 100,
        "packs/ab/x": b"x",
        "packs/ab/y": b"y",
        "refs/latest/k/n": b"r",
        f"tmp/{LOCK_NAME}": (tmp_path / "s" / "tmp" / LOCK_NAME).read_bytes(),
    }


def test_list_never_shows_tmp_and_tmp_paths_are_refused(tmp_path: Path) -> None:
    b = LocalObjects(tmp_path)
    b.put("a", b"1")
    (tmp_path / "tmp" / "123-leftover.tmp").write_bytes(b"half")
    assert b.list_paths("") == ["a"]
    assert b.list_paths("tmp/") == []
    for call in (lambda: b.put(f"tmp/{LOCK_NAME}", b"x"), lambda: b.get("tmp/123-leftover.tmp"), lambda: b.delete(f"tmp/{LOCK_NAME}")):
        with pytest.raises(InvalidInputError, match="in-flight"):
            call()


def test_a_removed_lock_file_is_made_again(tmp_path: Path) -> None:
    b = LocalObjects(tmp_path)
    e = b.put("ref", b"1").etag
    (tmp_path / "tmp" / LOCK_NAME).unlink()  # a clean-up of tmp/ took it
    moved = b.put_if_match("ref", b"2", e)
    assert moved is not None and moved.etag != e
    assert (tmp_path / "tmp" / LOCK_NAME).is_file()


def test_a_planted_symlink_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "s"
    b = LocalObjects(root)
    b.put("refs/tags/ok", b"ok")
    (root / "packs").symlink_to(outside)  # a directory link
    (root / "refs" / "tags" / "evil").symlink_to(outside / "secret")  # an object link
    before = _tree(outside)
    for call in (
        lambda: b.get("packs/secret"),
        lambda: b.stat("packs/secret"),
        lambda: b.put("packs/new", b"x"),
        lambda: b.put_if_absent("packs/new", b"x"),
        lambda: b.put_if_match("packs/secret", b"x", None),
        lambda: b.open_writer("packs/new"),
        lambda: b.delete("packs/secret"),
        lambda: b.get("refs/tags/evil"),
        lambda: b.get_versioned("refs/tags/evil"),
        lambda: b.stat("refs/tags/evil"),
        lambda: b.put_if_match("refs/tags/evil", b"x", None),
    ):
        with pytest.raises(StoreIOError, match="symbolic link"):
            call()
    assert not b.put_if_absent("refs/tags/evil", b"x")  # something is there: never written through
    assert b.list_paths("") == ["refs/tags/ok"]  # links are no objects, and are not walked
    assert _tree(outside) == before


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    b = LocalObjects(tmp_path)
    b.put("index/x", b"x")
    os.mkfifo(tmp_path / "index" / "fifo")
    with pytest.raises(StoreIOError, match="not a regular file"):
        b.get("index/fifo")
    assert b.list_paths("index/") == ["index/x"]


def test_system_errors_are_one_line_with_the_path_and_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a directory")
    b = LocalObjects(tmp_path / "file")
    with pytest.raises(StoreIOError) as err:
        b.put("a", b"x")
    assert str(tmp_path / "file") in str(err.value) and "Not a directory" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(NotFoundError):
        LocalObjects(tmp_path / "missing").get("a")
    assert LocalObjects(tmp_path / "missing").list_paths("") == []
    LocalObjects(tmp_path / "missing").delete("a")
    assert not (tmp_path / "missing").exists()  # reads and deletes make nothing


def test_an_object_under_a_file_is_missing_and_cannot_be_written(tmp_path: Path) -> None:
    b = LocalObjects(tmp_path)
    b.put("config", b"c")
    with pytest.raises(NotFoundError):
        b.get("config/x")
    with pytest.raises(StoreIOError, match="config"):
        b.put("config/x", b"x")
    assert b.get("config") == b"c"


def test_file_urls(tmp_path: Path) -> None:
    assert local_path("relative/dir") == Path("relative/dir")
    assert local_path("file:///abs/dir") == Path("/abs/dir")
    assert local_path("file://localhost/abs/my%20dir") == Path("/abs/my dir")
    assert local_path("file:/abs") == Path("/abs")
    for bad in ("file://otherhost/abs", "file://", "file:relative"):
        with pytest.raises(InvalidInputError):
            local_path(bad)
    b = open_backend(f"file://{tmp_path}")
    assert isinstance(b, LocalObjects) and b.root == tmp_path
    with pytest.raises(InvalidInputError, match="no store options"):
        open_backend(str(tmp_path), {"region": "x"})


_WORKER = """
import json, sys
from ckptcli.store.backends.local import LocalObjects
b = LocalObjects(sys.argv[1])
me, rounds, go = sys.argv[2], int(sys.argv[3]), sys.argv[4]
import os, time
while not os.path.exists(go):
    time.sleep(0.001)
firsts = []
for r in range(rounds):
    if b.put_if_absent(f"manifests/{r:03}", me.encode()):
        firsts.append(r)
    while True:
        data, etag = b.get_versioned("refs/counter")
        if b.put_if_match("refs/counter", str(int(data) + 1).encode(), etag) is not None:
            break
print(json.dumps(firsts))
"""


def test_conditional_writes_are_atomic_across_processes(tmp_path: Path) -> None:
    """8 processes each put_if_absent the same 40 objects and add 1 to a counter 40 times
    by compare-and-swap: every object has one writer, and no increment is lost."""
    procs_n, rounds = 8, 40
    b = LocalObjects(tmp_path / "s")
    b.put("refs/counter", b"0")
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(tmp_path / "s"), str(i), str(rounds), str(go)], stdout=subprocess.PIPE, env=env
        )
        for i in range(procs_n)
    ]
    go.touch()
    firsts = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        firsts.append(json.loads(out))
    assert sorted(r for f in firsts for r in f) == list(range(rounds))  # exactly one True per object
    for i, f in enumerate(firsts):
        assert all(b.get(f"manifests/{r:03}") == str(i).encode() for r in f)
    assert b.get("refs/counter") == str(procs_n * rounds).encode()
    assert sorted(os.listdir(tmp_path / "s" / "tmp")) == [LOCK_NAME]
