"""Symbolic links planted where a store (or the object cache of remote stores) keeps a
directory: ckpt writes nothing through them. The command that would write is refused in
one line naming the link, with the UNSAFE_PATH exit code (docs/exit-codes.md), and not a
byte changes where the link leads."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode
from ckptcli.store import layout
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (not following links) and the SHA-256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir() and not p.is_symlink():
            out[str(p.relative_to(root)) + "/"] = ""
    return out


def _one_line(got: object, *needles: str) -> str:
    err = got.stderr.decode()  # type: ignore[attr-defined]
    assert got.returncode == ExitCode.UNSAFE_PATH == 8, (got.returncode, err)  # type: ignore[attr-defined]
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    """A local store with two checkpoints of agent:a (so every directory of the layout
    holds something), and a state document for the next take."""
    root = tmp_path / "store"
    assert run_ckpt("init", root).returncode == 0
    doc = tmp_path / "doc.json"
    for turn in (1, 2):
        doc.write_text(f'{{"memory": {{"turn": {turn}, "notes": ["{"x" * 200}"]}}}}')
        got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
        assert got.returncode == 0, got.stderr
    assert run_ckpt("--store", root, "tag", "t1", "agent:a").returncode == 0
    doc.write_text('{"memory": {"turn": 3}}')
    return root, doc


@pytest.mark.parametrize(
    "directory", [layout.REFS, layout.MANIFESTS, layout.LOCKS, layout.LOGS, layout.PACKS, layout.INDEX, layout.TMP, layout.CACHE]
)
def test_a_take_writes_nothing_through_a_linked_store_directory(store: tuple[Path, Path], directory: str, tmp_path: Path) -> None:
    root, doc = store
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / directory).mkdir(exist_ok=True)
    shutil.move(root / directory, outside / directory)
    (root / directory).symlink_to(outside / directory, target_is_directory=True)
    before_out, before_in = _tree(outside), _tree(root)
    _one_line(run_ckpt("--store", root, "take", doc, "-S", "agent:a"), f"{root / directory} is a symbolic link")
    assert _tree(outside) == before_out  # not a byte written where the link leads
    assert _tree(root) == before_in  # nor anything in the store itself


def _moved_out(root: Path, directory: str, outside: Path) -> str:
    """Move `directory` of the store (`packs`: its first fan-out directory) to
    `outside/moved` and leave a link to it in its place; returns the directory's path."""
    if directory == "packs":
        directory = str(next((root / "packs").iterdir()).relative_to(root))
    outside.mkdir()
    shutil.move(root / directory, outside / "moved")
    (root / directory).symlink_to(outside / "moved", target_is_directory=True)
    return directory


@pytest.mark.parametrize("directory", ["refs/latest", "refs/tags", "logs/refs", "packs"])
def test_a_linked_directory_deeper_in_the_store_is_refused_too(store: tuple[Path, Path], directory: str, tmp_path: Path) -> None:
    """One level down (refs/latest, a pack's fan-out directory): refused at the write."""
    root, doc = store
    outside = tmp_path / "outside"
    directory = _moved_out(root, directory, outside)
    before = _tree(outside)
    for args in (["take", doc, "-S", "agent:a"], ["tag", "t2", "agent:a"], ["prune", "--keep-last", "1"]):
        got = run_ckpt("--store", root, *args)
        if got.returncode != 0:  # a command that writes nothing there may succeed
            _one_line(got, "is a symbolic link")
        assert _tree(outside) == before, args


@pytest.mark.parametrize("directory", ["refs/tags", "refs/branches", "packs"])
def test_prune_refuses_a_store_where_a_listed_directory_is_a_link(store: tuple[Path, Path], directory: str, tmp_path: Path) -> None:
    """A linked refs/tags was left out of the listing of refs (a read of one tag followed
    it): prune removed the checkpoint the tag names, though tagged checkpoints always
    stay; a linked pack directory was left out of the packs prune keeps. Listing a store
    directory that holds a link is refused as writing through one is."""
    root, _doc = store
    assert run_ckpt("--store", root, "branch", "b1", "t1").returncode == 0
    directory = _moved_out(root, directory, tmp_path / "outside")

    def kept() -> dict[str, str]:  # the lock file records who held it last
        return {k: v for k, v in _tree(root).items() if not k.startswith("locks/")}

    before = kept()
    _one_line(run_ckpt("--store", root, "prune", "--keep-last", "1"), f"{root / directory} is a symbolic link")
    assert kept() == before  # nothing removed
    if directory.startswith("refs/"):  # what a dry run would keep is read from the refs too
        _one_line(run_ckpt("--store", root, "prune", "--keep-last", "1", "--dry-run"), "is a symbolic link")


def test_the_object_cache_writes_nothing_through_a_linked_shard(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    """CKPT_CACHE_DIR/XX (the directory of cached objects whose names start XX) planted as
    links: a command on a remote store that would cache an object there is refused."""
    url = f"{s3_bucket.url}/c"
    cache = tmp_path / "cache"
    env = {"CKPT_CACHE_DIR": str(cache)}
    assert run_ckpt("init", url, env=env).returncode == 0
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"turn": 1}}')
    assert run_ckpt("--store", url, "take", doc, "-S", "agent:a", env=env).returncode == 0
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(256):
        (cache / f"{i:02x}").symlink_to(outside, target_is_directory=True)
    _one_line(run_ckpt("--store", url, "show", "agent:a", env=env), str(cache), "is a symbolic link", "CKPT_CACHE_DIR")
    # verify reads what the bucket holds, never the cache: the links are not its business
    got = run_ckpt("--store", url, "verify", env=env)
    assert got.returncode == 0, (got.stdout, got.stderr)
    assert list(outside.iterdir()) == []
    # a cache without links works again
    shutil.rmtree(cache)
    got = run_ckpt("--store", url, "show", "agent:a", env=env)
    assert got.returncode == 0, got.stderr
    assert any(p.is_file() for p in cache.rglob("*"))


@pytest.mark.parametrize("lock", ["store.lock", "refs.lock"])
@pytest.mark.parametrize("points_to", ["file", "nothing", "itself"])
def test_a_lock_file_that_is_a_link_is_refused_naming_it(store: tuple[Path, Path], tmp_path: Path, lock: str, points_to: str) -> None:
    """locks/store.lock (or refs.lock) replaced by a link, to a file, to nothing or to
    itself: the command that takes the lock is refused as for a linked directory (it was
    exit 12, "Too many levels of symbolic links"), and the file it leads to is untouched."""
    root, doc = store
    path = root / layout.LOCKS / lock
    path.unlink()
    outside = tmp_path / "outside"
    outside.write_bytes(b"not a lock")
    path.symlink_to({"file": outside, "nothing": tmp_path / "nowhere", "itself": lock}[points_to])
    before = _tree(root)
    take = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    tag = run_ckpt("--store", root, "tag", "t2", "agent:a")
    for got in (take, tag) if lock == "refs.lock" else (take, run_ckpt("--store", root, "prune", "--keep-last", "1")):
        _one_line(got, f"{path} is a symbolic link", "remove it")
    assert outside.read_bytes() == b"not a lock" and not (tmp_path / "nowhere").exists()
    assert _tree(root) == before


def test_a_linked_manifest_is_refused_by_show_reported_by_verify_and_not_hidden_by_ls(store: tuple[Path, Path], tmp_path: Path) -> None:
    """A manifest replaced by a link to a valid manifest elsewhere: show followed it, while
    ls and verify left it out silently. The store treats it one way everywhere: every read
    of it is refused naming the link (exit 8), verify counts it as a problem, and ls says
    on stderr it leaves it out, as it does a damaged manifest."""
    root, _doc = store
    listed = run_ckpt("--store", root, "ls", "--json")
    cid = json.loads(listed.stdout)[0]["id"]
    path = root / layout.MANIFESTS / cid
    outside = tmp_path / "elsewhere"
    shutil.move(path, outside)
    path.symlink_to(outside)
    for ref in (cid, cid[:12], "agent:a"):
        _one_line(run_ckpt("--store", root, "show", ref), f"{path} is a symbolic link")
    verify = run_ckpt("--store", root, "verify", "--json")
    assert verify.returncode == ExitCode.CORRUPT, verify.stderr
    problems = json.loads(verify.stdout)["problems"]
    assert [(p["kind"], p["name"]) for p in problems] == [("manifest", f"{layout.MANIFESTS}/{cid}")], problems
    assert "is a symbolic link" in problems[0]["message"]
    ls = run_ckpt("--store", root, "ls", "--json")
    assert ls.returncode == 0 and cid not in ls.stdout.decode()
    err = ls.stderr.decode()
    assert err.count("\n") == 1 and f"checkpoint {cid[:12]} is left out: {path} is a symbolic link" in err, err


def _plant_ref(root: Path, ref: str, tmp_path: Path, kind: str) -> Path:
    """Replace the ref file `ref` of the store by a link to a copy of it outside (`link`)
    or by a FIFO (`fifo`); returns its path."""
    path = root / ref
    if kind == "link":
        outside = tmp_path / "outside.ref"
        shutil.move(path, outside)
        path.symlink_to(outside)
    else:
        path.unlink()
        os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["link", "fifo"])
@pytest.mark.parametrize("ref", ["refs/tags/t1", "refs/branches/b1"])
def test_a_linked_or_planted_tag_or_branch_is_never_hidden_and_prune_keeps_what_it_names(
    store: tuple[Path, Path], tmp_path: Path, ref: str, kind: str
) -> None:
    """A tag file that was a link (or a FIFO) was read as no tag at all: `ckpt tag` did
    not list it, `verify` found no problem, and `prune --keep-last 1` removed the
    checkpoint it protects. Now its read is refused naming it: prune removes nothing,
    verify fails, the listing of tags warns, and a write to it is refused."""
    root, doc = store
    assert run_ckpt("--store", root, "branch", "b1", "t1").returncode == 0
    assert run_ckpt("--store", root, "take", doc, "-S", "agent:a").returncode == 0  # t1 is no longer the newest
    path = _plant_ref(root, ref, tmp_path, kind)

    def kept() -> dict[str, str]:  # the lock file records who held it last
        return {k: v for k, v in _tree(root).items() if not k.startswith("locks/")}

    before = kept()
    pruned = run_ckpt("--store", root, "prune", "--keep-last", "1")
    assert pruned.returncode != 0 and str(path) in pruned.stderr.decode(), pruned.stderr
    assert kept() == before  # nothing removed
    name = ref.rsplit("/", 1)[1]
    shown = run_ckpt("--store", root, "show", name)
    assert shown.returncode != 0 and str(path) in shown.stderr.decode(), shown.stderr
    verify = run_ckpt("--store", root, "verify")
    assert verify.returncode != 0 and name in (verify.stdout + verify.stderr).decode(), verify
    listing = run_ckpt("--store", root, "tag" if "tags" in ref else "branch")
    assert str(path) in listing.stderr.decode() or listing.returncode != 0, listing
    moved = run_ckpt("--store", root, "tag" if "tags" in ref else "branch", name, "agent:a")
    if kind == "link":  # never written through, nor replaced unseen
        assert moved.returncode != 0 and str(path) in moved.stderr.decode(), moved.stderr
        assert path.is_symlink()
    else:  # a FIFO is never read or written into: refused naming it, or replaced as a damaged ref is
        assert (moved.returncode != 0 and str(path) in moved.stderr.decode()) or path.is_file(), moved.stderr


def test_a_linked_latest_ref_is_refused_not_replaced(store: tuple[Path, Path], tmp_path: Path) -> None:
    """A subject's latest ref that was a link read as "no latest ref": take replaced it,
    verify called it an interrupted take. Now both name the link."""
    root, doc = store
    path = _plant_ref(root, "refs/latest/agent/a", tmp_path, "link")
    _one_line(run_ckpt("--store", root, "take", doc, "-S", "agent:a"), f"{path} is a symbolic link")
    assert path.is_symlink()
    verify = run_ckpt("--store", root, "verify")
    assert verify.returncode != 0 and "symbolic link" in (verify.stdout + verify.stderr).decode(), verify


@pytest.mark.parametrize("directory", ["manifests", "index", "packs"])
def test_a_read_never_follows_a_linked_store_directory(store: tuple[Path, Path], directory: str, tmp_path: Path) -> None:
    """A linked manifests/, index/ or pack fan-out directory was read through by ls, show,
    restore and export, and verify found no problem: every read through one is refused,
    as every write is."""
    root, _doc = store
    directory = _moved_out(root, directory, tmp_path / "outside")
    reads = [
        ["show", "agent:a"],
        ["restore", "agent:a", "-o", str(tmp_path / "out.json")],
        ["export", "agent:a", "-o", str(tmp_path / "x.ckpt")],
    ]
    if not directory.startswith("packs/"):  # a listing reads no pack
        reads.append(["ls"])
    for args in [*reads, ["verify"], ["verify", "--read-data"], ["stats"]]:
        _one_line(run_ckpt("--store", root, *args), f"{root / directory} is a symbolic link", "reads nothing through it")
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "x.ckpt").exists()


def test_a_fifo_in_place_of_a_manifest_is_reported_not_hidden(store: tuple[Path, Path]) -> None:
    """A FIFO planted where a manifest was: ls showed nothing and verify found no problem
    (the listing of manifests/ skipped what is no regular file). Now verify names it and
    ls says it leaves it out; nothing blocks on the FIFO."""
    root, _doc = store
    cid = json.loads(run_ckpt("--store", root, "ls", "--json").stdout)[0]["id"]
    path = root / layout.MANIFESTS / cid
    path.unlink()
    os.mkfifo(path)
    verify = run_ckpt("--store", root, "verify")
    assert verify.returncode == ExitCode.CORRUPT and cid[:12] in (verify.stdout + verify.stderr).decode(), verify
    ls = run_ckpt("--store", root, "ls")
    assert ls.returncode == 0 and cid[:12] in ls.stderr.decode() and "left out" in ls.stderr.decode(), ls


def test_verify_read_data_reports_a_linked_pack_as_verify_does(store: tuple[Path, Path], tmp_path: Path) -> None:
    """`verify` named a pack file that is a link as a problem (exit 5), while `verify
    --read-data` stopped at it with exit 8 and reported nothing (it sized every pack first)."""
    root, _doc = store
    pack = next(p for p in (root / layout.PACKS).rglob("*") if p.is_file())
    shutil.move(pack, tmp_path / "pack")
    pack.symlink_to(tmp_path / "pack")
    for args in (["verify"], ["verify", "--read-data"]):
        got = run_ckpt("--store", root, *args, "--json")
        assert got.returncode == ExitCode.CORRUPT, (args, got.stderr)
        problems = json.loads(got.stdout)["problems"]
        assert any("is a symbolic link" in p["message"] for p in problems), (args, problems)
