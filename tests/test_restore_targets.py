"""Where restore and export write: through special files (never replacing them), to
stdout with `-o -`, blobs back in place with --in-place, --delete, --include, --dry-run
and --json.

Each test here failed on the code before the change it guards.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import ExitCode
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return api.init_store(tmp_path / "store")


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file (its bytes) and symlink ("-> target") under `root`."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + dirs:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


@pytest.fixture
def ck(store: Store, tmp_path: Path) -> api.Checkpoint:
    src = make_tree(tmp_path / "src", {"a.txt": b"alpha\n"})
    r = api.take(store, {"memory": {"x": 1}}, subject="agent:t", blobs={"w": src})
    return api.open_checkpoint(r.hex, store)


# -- defect 1: -o onto special files, and -o - ----------------------------------------------------------
def test_restore_dash_o_dash_is_stdout(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("restore", ck.hex, "--store", store.location, "-o", "-")
    assert r.code == 0, r.err
    assert not (tmp_path / "-").exists(), "-o - wrote a file named '-'"
    assert json.loads(r.out) == {"memory": {"x": 1}}


def test_export_dash_o_dash_is_stdout(store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    r = run_ckpt("export", ck.hex, "--store", store.location, "-o", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "-").exists(), "-o - wrote a file named '-'"
    (tmp_path / "x.ckpt").write_bytes(r.stdout)
    assert api.open_checkpoint(str(tmp_path / "x.ckpt")).state() == {"memory": {"x": 1}}


@pytest.mark.parametrize("command", ["restore", "export"])
def test_dash_o_writes_into_a_fifo_a_reader_holds(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:  # blocks until ckpt opens the write end
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    r = cli(command, ck.hex, "--store", store.location, "-o", fifo)
    t.join(30)
    assert r.code == 0, r.err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    assert got and got[0], "the reader got nothing"
    if command == "restore":
        assert json.loads(got[0]) == {"memory": {"x": 1}}
    else:
        assert got[0].startswith(b"\x89CKP")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "src", "store"]


@pytest.mark.parametrize("command", ["restore", "export"])
def test_dash_o_through_a_link_to_dev_null_keeps_both(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path, command: str) -> None:
    # A link of our own to /dev/null: were the device replaced, the rename would land on the
    # link in tmp_path (rename never follows it), never on the real /dev/null.
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    r = cli(command, ck.hex, "--store", store.location, "-o", link)
    assert r.code == 0, r.err
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# -- defect 4: --json on restore and export ---------------------------------------------------------------
def test_restore_json_says_what_was_written(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    out = tmp_path / "state.json"
    r = cli("restore", ck.hex, "--store", store.location, "-o", out, "--blobs", tmp_path / "b", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["id"] == ck.hex
    assert doc["state"] == {"path": str(out), "bytes": out.stat().st_size}
    assert doc["blobs"]["target"] == str(tmp_path / "b")
    assert (doc["blobs"]["files"], doc["blobs"]["bytes"]) == (1, 6)
    assert doc["blobs"]["written"] == ["w/a.txt"]


def test_restore_json_with_the_state_on_stdout_is_a_usage_error(cli: Any, store: Store, ck: api.Checkpoint) -> None:
    r = cli("restore", ck.hex, "--store", store.location, "--json")
    assert r.code == ExitCode.USAGE, r
    assert r.err.startswith("ckpt: error: ") and "-o" in r.err and r.out == ""


def test_export_json(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    out = tmp_path / "x.ckpt"
    r = cli("export", ck.hex, "--store", store.location, "-o", out, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"id": ck.hex, "path": str(out), "bytes": out.stat().st_size}


# -- defect 2: --blob without --blobs, --in-place, --delete ------------------------------------------------
@pytest.mark.parametrize("args", [["--blob", "w"], ["--delete"], ["--include", "*.txt"], ["--dry-run"]])
def test_blob_options_without_a_blob_target_are_usage_errors(cli: Any, store: Store, ck: api.Checkpoint, args: list[str]) -> None:
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", *args)
    assert r.code == ExitCode.USAGE, r
    assert r.err.startswith("ckpt: error: ") and "--blobs" in r.err


# -- defect 2: a workspace rollback in one command -----------------------------------------------------------
@pytest.fixture
def workspace(store: Store, tmp_path: Path) -> tuple[Path, api.Checkpoint]:
    ws = make_tree(tmp_path / "ws", {"src/main.py": b"print(1)\n", "src/util.py": b"u = 1\n", "README": b"readme\n"})
    (ws / "link").symlink_to("README")
    r = api.take(store, {"memory": {}}, subject="agent:t", blobs={"ws": ws})
    return ws, api.open_checkpoint(r.hex, store)


def test_take_records_where_each_blob_came_from(workspace: tuple[Path, api.Checkpoint]) -> None:
    ws, ck = workspace
    assert ck.blobs()["ws"]["origin"] == str(ws)


def test_in_place_delete_rolls_a_workspace_back(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint], tmp_path: Path) -> None:
    ws, ck = workspace
    before = tree(ws)
    (ws / "src" / "main.py").write_bytes(b"print(2)  # edited\n")
    (ws / "README").unlink()
    (ws / "new.txt").write_bytes(b"added later\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"obj")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me\n")
    (ws / "escape").symlink_to(outside)  # planted: --delete removes the link, never its target
    (tmp_path / "sibling.txt").write_bytes(b"beside the workspace\n")

    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--in-place", "--delete", "--dry-run")
    assert r.code == 0, r.err
    assert "would write " + str(ws / "src/main.py") in r.out
    assert "would delete " + str(ws / "new.txt") in r.out and "would delete " + str(ws / "build") in r.out
    assert (ws / "new.txt").exists() and (ws / "src/main.py").read_bytes() == b"print(2)  # edited\n", "--dry-run changed something"

    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--in-place", "--delete", "--json")
    assert r.code == 0, r.err
    assert tree(ws) == before
    assert outside.read_bytes() == b"keep me\n" and (tmp_path / "sibling.txt").exists()
    doc = json.loads(r.out)
    assert doc["blobs"]["in_place"] is True
    assert sorted(doc["blobs"]["deleted"]) == sorted(str(ws / n) for n in ("build", "escape", "new.txt"))


def test_in_place_without_delete_keeps_extra_files(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint]) -> None:
    ws, ck = workspace
    (ws / "README").write_bytes(b"changed\n")
    (ws / "new.txt").write_bytes(b"added later\n")
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--in-place")
    assert r.code == 0, r.err
    assert (ws / "README").read_bytes() == b"readme\n" and (ws / "new.txt").exists()


def test_delete_in_a_blobs_directory(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint], tmp_path: Path) -> None:
    _ws, ck = workspace
    out = tmp_path / "out"
    make_tree(out, {"stray.txt": b"x", "ws/src/stray.py": b"y"})
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--blobs", out, "--overwrite", "--delete")
    assert r.code == 0, r.err
    assert sorted(tree(out)) == ["ws/README", "ws/link", "ws/src/main.py", "ws/src/util.py"]


def test_include_restores_only_matching_paths(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint], tmp_path: Path) -> None:
    _ws, ck = workspace
    out = tmp_path / "out"
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--blobs", out, "--include", "*.py")
    assert r.code == 0, r.err
    assert sorted(tree(out)) == ["ws/src/main.py", "ws/src/util.py"]
    out2 = tmp_path / "out2"
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--blobs", out2, "--include", "ws/README", "--include", "ws/src/m*")
    assert r.code == 0, r.err
    assert sorted(tree(out2)) == ["ws/README", "ws/src/main.py"]


def test_include_limits_delete(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint]) -> None:
    ws, ck = workspace
    (ws / "src" / "extra.py").write_bytes(b"x")
    (ws / "notes.txt").write_bytes(b"mine")
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--in-place", "--delete", "--include", "*.py")
    assert r.code == 0, r.err
    assert not (ws / "src" / "extra.py").exists() and (ws / "notes.txt").exists()


def test_in_place_never_touches_the_store_inside_the_workspace(cli: Any, tmp_path: Path) -> None:
    ws = make_tree(tmp_path / "ws", {"a.txt": b"a\n"})
    st = api.init_store(ws / ".ckpt")
    r = api.take(st, {"memory": {}}, subject="agent:t", blobs={"ws": ws})
    (ws / "a.txt").write_bytes(b"changed\n")
    (ws / "b.txt").write_bytes(b"new\n")
    api.take(st, {"memory": {"n": 2}}, subject="agent:t")  # the store grows after the checkpoint
    res = cli("restore", r.hex, "--store", st.location, "--no-state", "--in-place", "--delete")
    assert res.code == 0, res.err
    assert (ws / "a.txt").read_bytes() == b"a\n" and not (ws / "b.txt").exists()
    assert cli("verify", "--store", st.location).code == 0
    assert len(api.list_checkpoints(api.open_store(st.location))) == 2


def test_in_place_refuses_a_hostile_origin(store: Store, tmp_path: Path) -> None:
    from ckptcli.blobs import restore_blobs
    from ckptcli.errors import UnsafePathError
    from ckptcli.format.values import Decoder

    entry = {"type": "file", "size": 1, "mode": 0o644, "mtime_ns": 0, "data": b"x"}
    for origin in ("relative/x", "/a/../etc/x", "/", "/a/./b", "//x"):
        with pytest.raises(UnsafePathError):
            restore_blobs({"b": {**entry, "origin": origin}}, None, Decoder(store), in_place=True)


def test_in_place_needs_a_recorded_origin(cli: Any, store: Store, workspace: tuple[Path, api.Checkpoint], tmp_path: Path) -> None:
    from ckptcli.blobs import restore_blobs
    from ckptcli.errors import InvalidInputError
    from ckptcli.format.values import Decoder

    with pytest.raises(InvalidInputError, match="--blobs DIR"):
        restore_blobs({"b": {"type": "file", "size": 1, "mode": 0o644, "mtime_ns": 0, "data": b"x"}}, None, Decoder(store), in_place=True)


def test_a_failed_restore_puts_back_what_delete_removed(cli: Any, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptcli.errors import CorruptError
    from ckptcli.format.values import Decoder, LazyBytes

    ws = make_tree(tmp_path / "ws", {"src/main.py": b"print(1)\n", "zbig.bin": os.urandom(200_000)})
    ck = api.open_checkpoint(api.take(store, {"memory": {}}, subject="agent:t", blobs={"ws": ws}).hex, store)
    big = ck.blobs()["ws"]["entries"]["zbig.bin"]["data"]
    assert isinstance(big, LazyBytes)
    (ws / "src" / "extra.py").write_bytes(b"mine\n")  # deleted before zbig.bin is written
    (ws / "src" / "main.py").write_bytes(b"edited\n")
    before = tree(ws)
    real = Decoder.write_into  # what restore writes a file's content with

    def failing(self: Decoder, oid: bytes, *args: Any, **kwargs: Any) -> Any:
        if oid == big.oid:
            raise CorruptError("object damaged (injected)")
        return real(self, oid, *args, **kwargs)

    monkeypatch.setattr(Decoder, "write_into", failing)
    r = cli("restore", ck.hex, "--store", store.location, "--no-state", "--in-place", "--delete")
    assert r.code == ExitCode.CORRUPT, r
    # the path restored in place is named, not the directory that holds it
    assert f"the restore was undone: {ws} holds what it held before" in r.err, r.err
    assert tree(ws) == before, "what --delete moved aside (or the restore replaced) was not put back"
    assert sorted(p.name for p in (ws / "src").iterdir()) == ["extra.py", "main.py"]


@pytest.mark.parametrize("at", [1, 3, 6])
def test_an_interrupt_right_after_a_temporary_file_is_made_leaves_none_behind(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """Ctrl-C (or SIGTERM, which unwinds as it does) can land after create_temp made a
    file and before the writer holds its name: the restore still removes it, and an
    --overwrite target holds what it held before."""
    import ckptcli.blobs
    from ckptcli.store.backend import create_temp

    files = {f"small/d{i:02d}/f{j}.txt": os.urandom(300) for i in range(4) for j in range(2)}
    ws = make_tree(tmp_path / "ws", {**files, "big.bin": os.urandom(1_500_000)})
    ck = api.open_checkpoint(api.take(store, {"memory": {}}, subject="agent:t", blobs={"ws": ws}).hex, store)
    for rel in files:
        (ws / rel).write_bytes(b"older\n")
    before = tree(ws)
    made = [0]

    def interrupted(*args: Any, **kwargs: Any) -> tuple[str, int]:
        got = create_temp(*args, **kwargs)
        made[0] += 1
        if made[0] == at:
            raise KeyboardInterrupt
        return got

    monkeypatch.setattr(ckptcli.blobs, "create_temp", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ck.restore_blobs(ws.parent, overwrite=True)
    assert made[0] == at
    assert tree(ws) == before
    assert not [p for p in ws.rglob(".ckpt-*")], "a temporary file was left in the target"
