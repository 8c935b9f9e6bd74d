"""Restore, export, migrate, the recorder, the store and the LangGraph saver write only
where they should (issue 12).

Every temporary file ckpt creates gets a random name, created with O_EXCL|O_NOFOLLOW.
The tests make the random source predictable (secrets.token_hex), plant a symlink or a
hard link to a sentinel file outside at the names it will produce (and at the fixed
names older versions used), and check that the links are neither followed nor
truncated: ckpt takes another name, or refuses when every name is taken, and the
sentinel keeps its content, mode and mtime.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.blobs import NAME_MAX, RestoreReport, check_component
from ckptcli.errors import ConflictError, ExitCode, InvalidInputError, StoreIOError, UnsafePathError
from ckptcli.store.backend import TEMP_TRIES, temp_name
from ckptcli.store.repository import Store
from tests.helpers_faults import blob_tree, tree_snapshot

PLANTED = "0123456789abcdef"  # the token the tests make secrets.token_hex return


# -- helpers -------------------------------------------------------------------------------------------
@dataclass
class Outside:
    """A directory outside every target, with a sentinel file links are planted to."""

    dir: Path
    sentinel: Path
    before: dict[str, tuple[Any, ...]] | None = None

    def plant(self, at: Path, kind: str) -> None:
        if kind == "symlink":
            at.symlink_to(self.sentinel)
        else:
            os.link(self.sentinel, at)

    def freeze(self) -> None:
        """Remember the state outside (after planting: a hard link changes the ctime)."""
        self.before = self.state()

    def state(self) -> dict[str, tuple[Any, ...]]:
        snap = tree_snapshot(self.dir)
        st = os.stat(self.sentinel)
        snap["sentinel-stat"] = (st.st_mtime_ns, stat.S_IMODE(st.st_mode), st.st_size)
        return snap

    def assert_unchanged(self) -> None:
        assert self.before is not None
        assert self.state() == self.before, "something outside the target changed"


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    d = tmp_path / "outside"
    d.mkdir()
    s = d / "sentinel"
    s.write_bytes(b"do not touch\n")
    s.chmod(0o640)
    os.utime(s, ns=(1_000_000_000, 1_000_000_000))
    return Outside(d, s)


def assert_links_intact(links: list[Path], outside: Outside) -> None:
    for link in links:
        st = os.lstat(link)
        if stat.S_ISLNK(st.st_mode):
            assert os.readlink(link) == str(outside.sentinel), f"{link} was replaced"
        else:
            assert os.path.samefile(link, outside.sentinel), f"{link} was replaced"


class TokenSource:
    """secrets.token_hex, made to answer PLANTED for its first `taken` calls (all of them
    when taken is None), then random tokens; counts how often it answered PLANTED."""

    def __init__(self, taken: int | None) -> None:
        self.taken = taken
        self.planted_answers = 0
        self._real = secrets.token_hex

    def __call__(self, nbytes: int | None = None) -> str:
        if self.taken is None or self.planted_answers < self.taken:
            self.planted_answers += 1
            return PLANTED
        return self._real(nbytes)


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> Callable[[int | None], TokenSource]:
    def install(taken: int | None) -> TokenSource:
        src = TokenSource(taken)
        monkeypatch.setattr(secrets, "token_hex", src)
        return src

    return install


def planted_names(suffixes: tuple[str, ...] = (".tmp", ".old"), prefix: str = ".ckpt-") -> list[str]:
    return [temp_name(PLANTED, s, prefix) for s in suffixes]


def make_tree(root: Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for rel, mode in (modes or {}).items():
        (root / rel).chmod(mode)
    return root


def take_tree(store: Store, tree: Path) -> api.Checkpoint:
    r = api.take(store, {"memory": {"x": 1}}, subject="agent:paths", blobs={"w": tree})
    return api.open_checkpoint(r.hex, store)


@pytest.fixture
def ck(store: Store, tmp_path: Path) -> api.Checkpoint:
    tree = make_tree(tmp_path / "src", {"NAME": b"name\n", "sub/inner": b"inner\n", "z-last": b"last\n"})
    return take_tree(store, tree)


# -- defect 1: a checkpoint's own names never collide with temporary names ----------------------------
def test_file_named_like_a_temporary_file_is_restored(store: Store, tmp_path: Path) -> None:
    """0.2.0 wrote NAME through `.NAME.ckpt-partial` with O_TRUNC and so destroyed a real
    file of that name restored just before it (exit 0)."""
    tree = make_tree(tmp_path / "src", {"NAME": b"real name\n", ".NAME.ckpt-partial": b"a real file too\n", ".ckpt-x.tmp": b"and this\n"})
    c = take_tree(store, tree)
    c.restore_blobs(tmp_path / "out")
    assert blob_tree(tmp_path / "out" / "w") == blob_tree(tree)


# -- defect 2a: links planted at restore's temporary names ----------------------------------------
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_restore_never_follows_a_link_at_a_temporary_name(
    ck: api.Checkpoint, tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str, overwrite: bool
) -> None:
    target = tmp_path / "target"
    (target / "w").mkdir(parents=True)
    if overwrite:  # the file to replace is kept aside under a random name until the end
        (target / "w" / "NAME").write_bytes(b"old\n")
    links = [target / "w" / n for n in (".NAME.ckpt-partial", *planted_names())]
    for link in links:
        outside.plant(link, kind)
    outside.freeze()
    src = tokens(3)
    ck.restore_blobs(target, overwrite=overwrite)
    outside.assert_unchanged()
    assert_links_intact(links, outside)
    assert src.planted_answers == 3, "the planted names were never met"
    assert (target / "w" / "NAME").read_bytes() == b"name\n"
    assert (target / "w" / "sub" / "inner").read_bytes() == b"inner\n"
    left = sorted(p.name for p in (target / "w").iterdir())
    assert left == sorted(["NAME", "sub", "z-last", *(link.name for link in links)]), "a temporary or aside file was left"


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_restore_refuses_when_every_temporary_name_is_taken(
    ck: api.Checkpoint, tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str
) -> None:
    target = tmp_path / "target"
    (target / "w").mkdir(parents=True)
    links = [target / "w" / n for n in planted_names()]
    for link in links:
        outside.plant(link, kind)
    outside.freeze()
    before = tree_snapshot(target, dir_mtimes=False)
    src = tokens(None)
    with pytest.raises(StoreIOError) as info:
        ck.restore_blobs(target)
    assert src.planted_answers >= TEMP_TRIES
    assert "no free temporary name" in str(info.value) and "holds what it held before" in str(info.value)
    outside.assert_unchanged()
    assert_links_intact(links, outside)
    assert tree_snapshot(target, dir_mtimes=False) == before


# -- defect 2b: links planted beside the files -o writes, and the store's own temporary files ------
def _restore_o(cli: Any, store: Store, ck: api.Checkpoint, out: Path) -> Any:
    return cli("restore", ck.hex, "--store", store.location, "-o", out)


def _export_o(cli: Any, store: Store, ck: api.Checkpoint, out: Path) -> Any:
    return cli("export", ck.hex, "--store", store.location, "-o", out)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
@pytest.mark.parametrize("command", [_restore_o, _export_o], ids=["restore -o", "export -o"])
def test_dash_o_never_follows_a_link_at_its_temporary_name(
    cli: Any,
    store: Store,
    ck: api.Checkpoint,
    tmp_path: Path,
    outside: Outside,
    tokens: Callable[[int | None], TokenSource],
    kind: str,
    command: Any,
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "OUT"
    links = [out_dir / ".OUT.ckpt-partial", out_dir / planted_names((".tmp",))[0]]
    for link in links:
        outside.plant(link, kind)
    outside.freeze()
    src = tokens(2)
    r = command(cli, store, ck, out)
    assert r.code == 0, r.err
    outside.assert_unchanged()
    assert_links_intact(links, outside)
    assert src.planted_answers == 2
    assert out.is_file() and not out.is_symlink() and out.stat().st_size > 0
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(["OUT", *(link.name for link in links)])


def test_dash_o_refuses_when_every_temporary_name_is_taken(
    cli: Any, ck: api.Checkpoint, tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource]
) -> None:
    exported = tmp_path / "c.ckpt"
    api.export_checkpoint(ck, exported)
    out = tmp_path / "OUT"
    link = tmp_path / planted_names((".tmp",))[0]
    outside.plant(link, "symlink")
    outside.freeze()
    tokens(None)
    r = cli("restore", exported, "-o", out)
    assert r.code == ExitCode.IO_ERROR, r.err
    assert r.err.startswith("ckpt: error: cannot write") and r.err.count("\n") == 1, r.err
    assert not out.exists()
    outside.assert_unchanged()
    assert_links_intact([link], outside)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_recorder_journal_rewrite_never_follows_a_link(
    tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str
) -> None:
    from ckptcli.history.recorder import read_journal, write_journal

    journal = tmp_path / "bot.journal"
    links = [tmp_path / ".bot.journal.ckpt-partial", tmp_path / planted_names((".tmp",))[0]]
    for link in links:
        outside.plant(link, kind)
    outside.freeze()
    src = tokens(2)
    header = {"journal": 1, "subject": "agent:bot", "run": "r1", "base": "", "base_seq": 0}
    write_journal(journal, header)
    outside.assert_unchanged()
    assert_links_intact(links, outside)
    assert src.planted_answers == 2
    assert read_journal(journal).header == header


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_migrate_format_of_a_file_never_follows_a_link(
    cli: Any, ck: api.Checkpoint, tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str
) -> None:
    from ckptcli.store.upgrade import rewrite_file

    exported = tmp_path / "c.ckpt"
    api.export_checkpoint(ck, exported)
    links = [tmp_path / ".c.ckpt.ckpt-upgrade", tmp_path / planted_names((".ckpt-upgrade",))[0]]
    for link in links:
        outside.plant(link, kind)
    outside.freeze()
    src = tokens(2)
    rewrite_file(exported, exported, 1)  # what `ckpt migrate --format` does to a file
    outside.assert_unchanged()
    assert_links_intact(links, outside)
    assert src.planted_answers == 2
    assert cli("verify", exported).code == 0


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_store_temporary_files_never_follow_a_link(
    tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str
) -> None:
    """Packs, the index, manifests, refs and the catalog are all written through tmp/."""
    store = api.init_store(tmp_path / "store")
    tree = make_tree(tmp_path / "src", {"a": b"a" * 5000, "b": b"b\n"})
    link = tmp_path / "store" / "tmp" / temp_name(PLANTED, ".tmp", f"{os.getpid()}-")
    outside.plant(link, kind)
    outside.freeze()
    src = tokens(3)
    c = take_tree(store, tree)
    store.backend.write_atomic_many([("refs/test/a", b"1"), ("refs/test/b", b"2")])
    outside.assert_unchanged()
    assert_links_intact([link], outside)
    assert src.planted_answers == 3
    c.restore_blobs(tmp_path / "out")
    assert blob_tree(tmp_path / "out" / "w") == blob_tree(tree)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_langgraph_journal_never_follows_a_link(
    tmp_path: Path, outside: Outside, tokens: Callable[[int | None], TokenSource], kind: str
) -> None:
    """(0.2.0 was safe here already: uuid4 names and O_EXCL; a guard against regressions.)"""
    pytest.importorskip("langgraph")
    from ckptcli.adapters.langgraph.saver import JOURNAL_DIR, CkptSaver

    api.init_store(tmp_path / "store")
    jdir = tmp_path / "store" / JOURNAL_DIR
    jdir.mkdir()
    link = jdir / f"{PLANTED}.journal"
    outside.plant(link, kind)
    outside.freeze()
    src = tokens(1)
    saver = CkptSaver.open(tmp_path / "store")
    try:
        created = saver._journal.path
    finally:
        saver.close()
    outside.assert_unchanged()
    assert created != link
    if kind == "symlink":  # a symlink is no journal: left alone
        assert_links_intact([link], outside)
    # (a regular *.journal file nobody locks is an orphan journal: recovered, then its name removed)
    assert src.planted_answers == 1


# -- -o onto a FIFO or a device: written through, never replaced ---------------------------------------
def test_dash_o_writes_through_a_fifo(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # read and write ends held here: ckpt's open does not block, and nothing waits forever
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        r = _restore_o(cli, store, ck, fifo)
        assert r.code == 0, r.err
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
        try:
            got = os.read(fd, 1 << 16)
        except BlockingIOError:
            got = b""
    finally:
        os.close(fd)
    assert b'"x": 1' in got or b'"x":1' in got, got
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("store", "src")) == ["fifo"]


def test_dash_o_writes_through_a_character_device(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    """`restore -o /dev/null` as root replaced the machine's /dev/null with a regular file.
    Tested on a private null device (mknod), never on the real one."""
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            pytest.skip("mknod needs root (or CAP_MKNOD)")
        raise
    for command in (_restore_o, _export_o):
        r = command(cli, store, ck, dev)
        assert r.code == 0, r.err
        assert stat.S_ISCHR(os.lstat(dev).st_mode), "the device was replaced by a regular file"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("store", "src")) == ["null"]


# -- defect 3: set-uid, set-gid and sticky bits ---------------------------------------------------------
@pytest.fixture
def special(store: Store, tmp_path: Path) -> api.Checkpoint:
    tree = make_tree(tmp_path / "src", {"suid": b"#!/bin/sh\n", "sgid": b"#!/bin/sh\n", "shared/f": b"f\n"})
    (tree / "suid").chmod(0o4777)
    (tree / "sgid").chmod(0o2755)
    (tree / "shared").chmod(0o1777)
    return take_tree(store, tree)


def test_special_mode_bits_are_dropped_unless_asked_for(cli: Any, store: Store, special: api.Checkpoint, tmp_path: Path) -> None:
    r = cli("restore", special.hex, "--store", store.location, "--no-state", "--blobs", tmp_path / "out")
    assert r.code == 0, r.err
    w = tmp_path / "out" / "w"
    assert stat.S_IMODE((w / "suid").stat().st_mode) == 0o777
    assert stat.S_IMODE((w / "sgid").stat().st_mode) == 0o755
    assert stat.S_IMODE((w / "shared").stat().st_mode) == 0o777
    assert "dropped set-uid/set-gid/sticky bits from 3 files; pass --keep-special-modes to keep them" in r.err

    r = cli("restore", special.hex, "--store", store.location, "--no-state", "--blobs", tmp_path / "kept", "--keep-special-modes")
    assert r.code == 0, r.err
    assert "dropped" not in r.err
    w = tmp_path / "kept" / "w"
    assert (w / "suid").stat().st_mode & stat.S_ISUID
    assert (w / "shared").stat().st_mode & stat.S_ISVTX


def test_special_mode_bits_are_counted_in_the_report(special: api.Checkpoint, tmp_path: Path) -> None:
    rep = RestoreReport()
    special.restore_blobs(tmp_path / "out", report=rep)
    assert (rep.special_dropped, rep.files, rep.dirs) == (3, 3, 2)


# -- defect 4: what take accepts, restore restores -------------------------------------------------------
def test_long_names_and_backslashes_are_restored(store: Store, tmp_path: Path) -> None:
    names = {"a" * NAME_MAX: b"255\n", "b" * 242: b"242\n", "back\\slash": b"bs\n", "dir\\with\\bs/" + "c" * NAME_MAX: b"deep\n"}
    tree = make_tree(tmp_path / "src", names)
    c = take_tree(store, tree)
    c.restore_blobs(tmp_path / "out")
    assert blob_tree(tmp_path / "out" / "w") == blob_tree(tree)
    c.restore_blobs(tmp_path / "out", overwrite=True)  # over itself: the aside names are short too
    assert blob_tree(tmp_path / "out" / "w") == blob_tree(tree)


def test_check_component_calls_only_impossible_names_hostile() -> None:
    assert check_component("a\\b", "here") == "a\\b"
    assert check_component("é" * 127, "here")  # 254 bytes
    for bad in ("", ".", "..", "a/b", "a\x00b", 7):
        with pytest.raises(UnsafePathError, match="hostile"):
            check_component(bad, "here")
    with pytest.raises(UnsafePathError) as info:
        check_component("x" * 256, "here")
    assert "hostile" not in str(info.value) and "256 bytes" in str(info.value)


def test_take_refuses_a_name_restore_could_not_write(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names over 255 bytes come only from file systems that count otherwise (UTF-16)."""
    tree = make_tree(tmp_path / "src", {"f": b"f\n"})
    real = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        return ["x" * 300] if Path(path) == tree else real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    with pytest.raises(InvalidInputError, match="longer than 255 bytes"):
        api.take(store, {"memory": {}}, subject="agent:paths", blobs={"w": tree})


# -- defect 9: a failed restore leaves nothing half done --------------------------------------------------
def test_conflicts_are_found_before_anything_is_written(ck: api.Checkpoint, tmp_path: Path) -> None:
    target = tmp_path / "target"
    (target / "w").mkdir(parents=True)
    (target / "w" / "z-last").write_bytes(b"mine\n")  # the last name written
    before = tree_snapshot(target)
    with pytest.raises(ConflictError, match="z-last already exists") as info:
        ck.restore_blobs(target)
    assert "nothing was written" in str(info.value)
    assert tree_snapshot(target) == before


@pytest.fixture
def fail_third_write(monkeypatch: pytest.MonkeyPatch) -> None:
    import ckptcli.blobs as blobs

    real = blobs._write_all
    calls = iter(range(1_000))

    def write_all(fd: int, data: Any) -> None:
        if next(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(blobs, "_write_all", write_all)


@pytest.mark.usefixtures("fail_third_write")
def test_failed_restore_into_a_new_directory_removes_it(ck: api.Checkpoint, tmp_path: Path) -> None:
    target = tmp_path / "new" / "target"
    with pytest.raises(StoreIOError) as info:
        ck.restore_blobs(target)
    assert "No space left on device" in str(info.value)
    assert f"the restore was undone: {tmp_path / 'new'} was removed again" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "store"]


@pytest.fixture(params=["hard links", "no hard links"])
def links_work(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Files replaced by --overwrite are kept aside as a hard link, or (file systems
    without them) renamed over an empty file of restore's own."""
    if request.param == "no hard links":

        def link(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", link)
        return False
    return True


def test_overwrite_replaces_files_and_links_and_leaves_nothing_aside(store: Store, tmp_path: Path, links_work: bool) -> None:
    tree = make_tree(tmp_path / "src", {"NAME": b"name\n", "sub/inner": b"inner\n", "was-a-file/f": b"f\n"})
    (tree / "link").symlink_to("NAME")
    c = take_tree(store, tree)
    target = tmp_path / "target"
    make_tree(target, {"mine": b"mine\n", "w/NAME": b"old\n", "w/was-a-file": b"file\n", "w/sub/other": b"other\n"})
    (target / "w" / "NAME").chmod(0o600)
    (target / "w" / "link").symlink_to("elsewhere")
    rep = RestoreReport()
    c.restore_blobs(target, overwrite=True, report=rep)
    assert rep.replaced == 3
    got = blob_tree(target / "w")
    assert got.pop("sub/other")[0] == "file"  # merged into, not replaced
    assert got == blob_tree(tree)
    assert (target / "mine").read_bytes() == b"mine\n"


def test_a_directory_is_never_replaced(ck: api.Checkpoint, tmp_path: Path) -> None:
    target = tmp_path / "target"
    make_tree(target, {"w/z-last/keep": b"keep\n"})
    before = tree_snapshot(target)
    with pytest.raises(ConflictError, match="z-last exists as a directory"):
        ck.restore_blobs(target, overwrite=True)
    assert tree_snapshot(target) == before


@pytest.mark.usefixtures("fail_third_write")
def test_failed_restore_into_an_existing_directory_puts_it_back(ck: api.Checkpoint, tmp_path: Path, links_work: bool) -> None:
    target = tmp_path / "target"
    make_tree(target, {"mine": b"mine\n", "w/NAME": b"old name\n", "w/sub/other": b"other\n", "w/z-last": b"old last\n"}, {"w/sub": 0o750})
    before = tree_snapshot(target, dir_mtimes=False)
    with pytest.raises(StoreIOError) as info:
        ck.restore_blobs(target, overwrite=True)
    assert f"the restore was undone: {target} holds what it held before" in str(info.value)
    assert tree_snapshot(target, dir_mtimes=False) == before


def test_failed_restore_says_so_on_one_line(
    cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ckptcli.blobs as blobs

    def write_all(fd: int, data: Any) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(blobs, "_write_all", write_all)
    r = cli("restore", ck.hex, "--store", store.location, "--blobs", tmp_path / "out")
    assert r.code == ExitCode.IO_ERROR
    assert (
        r.err
        == f"ckpt: error: cannot write w/NAME in {tmp_path / 'out'}: Input/output error; the restore was undone: {tmp_path / 'out'} was removed again\n"  # noqa: E501
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad", [{"mode": "0755"}, {"mode": 1.5}, {"mtime_ns": "now"}, {"mode": True}])
def test_a_mode_or_mtime_that_is_not_an_integer_is_refused_before_writing(tmp_path: Path, bad: dict[str, Any]) -> None:
    """(0.2.0: a TypeError traceback, after the files before it were written.)"""
    from ckptcli.blobs import restore_blobs
    from ckptcli.errors import CorruptError

    def file(data: bytes, **extra: Any) -> dict[str, Any]:
        return {"type": "file", "size": len(data), "mode": 0o644, "mtime_ns": 0, "data": data, **extra}

    blobs = {"a": file(b"a\n"), "b": file(b"b\n", **bad)}
    with pytest.raises(CorruptError, match="not an integer"):
        restore_blobs(blobs, tmp_path / "out", None)  # type: ignore[arg-type]  # inline data needs no decoder
    assert not (tmp_path / "out").exists()


# -- the target path itself: judged on the real file system (found by an outside audit) ---------------
def test_a_dotdot_through_a_missing_directory_is_still_checked_for_conflicts(ck: api.Checkpoint, tmp_path: Path) -> None:
    # `missing/..` does not resolve on Linux while `missing` is missing: the target must
    # not be taken for a new directory (which needs no conflict check) when it exists
    existing = tmp_path / "existing"
    (existing / "w").mkdir(parents=True)
    (existing / "w" / "z-last").write_bytes(b"mine\n")
    before = tree_snapshot(existing)
    with pytest.raises(ConflictError, match="z-last already exists"):
        ck.restore_blobs(f"{tmp_path}/missing/../existing")
    assert tree_snapshot(existing) == before
    assert not (tmp_path / "missing").exists()


@pytest.mark.usefixtures("fail_third_write")
def test_a_failed_restore_below_a_linked_directory_is_undone(ck: api.Checkpoint, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "L").symlink_to(real)
    with pytest.raises(StoreIOError) as info:
        ck.restore_blobs(tmp_path / "L" / "new")
    assert "the restore was undone" in str(info.value), str(info.value)
    assert list(real.iterdir()) == []


def test_a_target_that_appears_meanwhile_is_checked_for_conflicts(
    ck: api.Checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the directory is created by someone else between restore's look and its mkdir
    target = tmp_path / "target"
    real_mkdir = os.mkdir

    def racing_mkdir(path: Any, *a: Any, **k: Any) -> None:
        if Path(path) == target and not target.exists():
            real_mkdir(target)
            (target / "w").mkdir()
            (target / "w" / "z-last").write_bytes(b"theirs\n")
        real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    with pytest.raises(ConflictError, match="z-last already exists"):
        ck.restore_blobs(target)
    assert (target / "w" / "z-last").read_bytes() == b"theirs\n"


# -- -o naming a descriptor of ckpt's own, a full device, an existing file ----------------------------
@pytest.mark.parametrize("command", ["restore", "export"])
def test_dash_o_through_a_link_to_its_own_stdout_writes_to_stdout(store: Store, ck: api.Checkpoint, tmp_path: Path, command: str) -> None:
    # /dev/stdout is such a link (to /proc/self/fd/1): with stdout redirected to a file,
    # stat() sees a regular file, and the link itself was replaced by the output (as
    # root, the machine's /dev/stdout). A link of our own exercises the same path safely.
    link = tmp_path / "stdout-link"
    link.symlink_to("/proc/self/fd/1")
    captured = tmp_path / "captured"
    with open(captured, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "ckptcli", command, ck.hex, "--store", store.location, "-o", link],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    data = captured.read_bytes()
    assert (b'"x": 1' in data) if command == "restore" else data.startswith(b"\x89CKP")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["captured", "src", "stdout-link", "store"]


def test_descriptor_named_knows_the_standard_streams() -> None:
    from ckptcli.store.backend import descriptor_named

    assert descriptor_named(Path("/dev/stdout")) == 1
    assert descriptor_named(Path("/dev/stderr")) == 2
    assert descriptor_named(Path("/dev/fd/7")) == 7
    assert descriptor_named(Path(f"/proc/{os.getpid()}/fd/3")) == 3
    assert descriptor_named(Path("/dev/null")) is None
    assert descriptor_named(Path("/tmp/x/../fd/1")) is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", [_restore_o, _export_o], ids=["restore -o", "export -o"])
def test_dash_o_to_a_full_device_is_one_line(cli: Any, store: Store, ck: api.Checkpoint, command: Callable[..., Any]) -> None:
    r = command(cli, store, ck, Path("/dev/full"))
    assert r.code == ExitCode.IO_ERROR, r.err
    assert r.err.splitlines() == ["ckpt: error: cannot write /dev/full: No space left on device; write to a file instead (-o FILE)"]


def test_dash_o_keeps_the_mode_of_the_file_it_replaces(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    out = tmp_path / "state.json"
    out.write_text("old")
    out.chmod(0o600)
    r = _restore_o(cli, store, ck, out)
    assert r.code == 0, r.err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and b'"x"' in out.read_bytes()


# -- outputs that would replace what they are read from (outside audit) -------------------------------
def test_outputs_inside_the_store_are_refused(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    root = Path(store.location)
    pack = next(p for p in (root / "packs").rglob("*") if p.is_file())
    manifest = root / "manifests" / ck.hex
    before = tree_snapshot(root)
    for args in (
        ("export", ck.hex, "-o", pack),
        ("restore", ck.hex, "-o", manifest),
        ("restore", ck.hex, "--no-state", "--blobs", root / "packs"),
        ("restore", ck.hex, "--blobs", tmp_path / "elsewhere", "-o", root / "new.json"),
    ):
        r = cli(*args, "--store", store.location)
        assert r.code == ExitCode.INVALID_INPUT, (args, r.err)
        assert "inside the store" in r.err and len(r.err.splitlines()) == 1, r.err
    assert tree_snapshot(root) == before
    assert not (tmp_path / "elsewhere").exists()  # refused before the blobs were written
    assert api.verify(Store.open(root), read_data=True).ok


def test_an_export_over_the_file_it_is_read_from_is_refused(cli: Any, store: Store, ck: api.Checkpoint, tmp_path: Path) -> None:
    path = tmp_path / "c.ckpt"
    assert cli("export", ck.hex, "-o", path, "--store", store.location).code == 0
    good = path.read_bytes()
    for args in (("export", path, "-o", path), ("restore", path, "-o", path)):
        r = cli(*args)
        assert r.code == ExitCode.INVALID_INPUT and "is the checkpoint file it is read from" in r.err, r.err
    assert path.read_bytes() == good


def test_a_blob_named_like_the_directory_holding_the_store_is_refused(tmp_path: Path, cli: Any) -> None:
    # restoring into the directory that holds the store, a blob named after the store's
    # directory would be merged into the store itself (outside audit)
    work = tmp_path / "work"
    work.mkdir()
    store = api.init_store(work / "s2")
    evil = make_tree(tmp_path / "evil", {"config": b"garbage", "refs/latest/agent/zzz": b"x"})
    api.take(store, {"memory": {}}, subject="agent:e", blobs={"s2": evil, "other": evil})
    before = tree_snapshot(work / "s2")
    r = cli("restore", "agent:e", "--store", work / "s2", "--no-state", "--blobs", work, "--overwrite")
    assert r.code == ExitCode.INVALID_INPUT and "holds the store" in r.err, r.err
    assert tree_snapshot(work / "s2") == before
    # a blob that does not lead there may still go to that directory
    r = cli("restore", "agent:e", "--store", work / "s2", "--no-state", "--blobs", work, "--blob", "other")
    assert r.code == 0, r.err
    assert (work / "other" / "config").read_bytes() == b"garbage"
    assert api.verify(Store.open(work / "s2"), read_data=True).ok
