"""Symbolic links, directories and other things planted in a local store where ckpt
keeps something else: tmp/ (never followed, never written through; the store keeps
working and the next writer or prune clears it), and the readers and checkers that must
name what they meet rather than hide it (docs/storage.md, "What ckpt keeps where")."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode
from ckptcli.store import dirwalk, layout
from tests.conftest import REPO, run_ckpt


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (not following links) and the SHA-256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _old(path: Path, seconds: float = 120.0) -> None:
    """Date `path` (not what it points to) `seconds` back."""
    t = os.lstat(path).st_mtime - seconds
    os.utime(path, (t, t), follow_symlinks=False)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    """A local store with two checkpoints of agent:a, and a state document for the next take."""
    root = tmp_path / "store"
    assert run_ckpt("init", root).returncode == 0
    doc = tmp_path / "doc.json"
    for turn in (1, 2):
        doc.write_text(f'{{"memory": {{"turn": {turn}}}}}')
        got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
        assert got.returncode == 0, got.stderr
    doc.write_text('{"memory": {"turn": 3}}')
    return root, doc


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the store with a file in it, for links to point at."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "f").write_bytes(b"not ckpt's")
    return out


@pytest.mark.parametrize("target", ["dir", "file", "nothing"])
def test_a_link_planted_in_tmp_is_never_followed_and_takes_and_prune_go_on(store: tuple[Path, Path], outside: Path, target: str) -> None:
    """A link to a directory in tmp/ stopped every take and prune (exit 8, with advice to
    replace it by a directory holding what it points to), while a link to a file was
    ignored. Both are now treated alike: never followed, never written through; takes go
    on and prune, which empties tmp/, unlinks it."""
    root, doc = store
    link = root / layout.TMP / "planted"
    link.symlink_to({"dir": outside, "file": outside / "f", "nothing": outside / "nowhere"}[target])
    before = _tree(outside)
    got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    assert got.returncode == 0, got.stderr
    assert link.is_symlink()  # a take removes only what killed writers left
    verify = run_ckpt("--store", root, "verify", "--json")
    assert verify.returncode == 0, verify.stderr  # harmless: a note, no problem
    assert any(n.startswith("tmp/planted is a symbolic link") and f"rm {link}" in n for n in json.loads(verify.stdout)["notes"])
    got = run_ckpt("--store", root, "prune", "--keep-last", "1")
    assert got.returncode == 0, got.stderr
    assert not link.is_symlink() and not link.exists()
    assert _tree(outside) == before and sorted(p.name for p in outside.iterdir()) == ["f"]


def test_a_linked_tmp_directory_is_refused_saying_to_remove_the_link(store: tuple[Path, Path], outside: Path) -> None:
    """tmp/ itself a link: refused (exit 8) in one line that says to remove the link,
    not to put back what it points to (nothing ckpt needs is there); once removed, takes
    work again (ckpt makes tmp/ again)."""
    root, doc = store
    tmp = root / layout.TMP
    tmp.rmdir()
    tmp.symlink_to(outside, target_is_directory=True)
    got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    err = got.stderr.decode()
    assert got.returncode == ExitCode.UNSAFE_PATH, err
    assert err.count("\n") == 1 and f"remove the link (rm {tmp})" in err and "holding what it points to" not in err, err
    tmp.unlink()
    assert run_ckpt("--store", root, "take", doc, "-S", "agent:a").returncode == 0
    assert sorted(p.name for p in outside.iterdir()) == ["f"]


def test_a_stale_temporary_directory_is_removed_by_the_next_take_without_following_links(store: tuple[Path, Path], outside: Path) -> None:
    """A directory `tmp/.ckpt-*.tmp/` left by a killed process was never cleaned: the next
    take removes it once 60 s old (the rule of temporary files), unlinking the links in
    it, never following them. A younger one is left alone."""
    root, doc = store
    old = root / layout.TMP / ".ckpt-0123456789abcdef.tmp"
    (old / "sub").mkdir(parents=True)
    (old / "sub" / "data").write_bytes(b"x")
    (old / "sub" / "to-dir").symlink_to(outside, target_is_directory=True)
    (old / "to-file").symlink_to(outside / "f")
    _old(old)
    young = root / layout.TMP / ".ckpt-fedcba9876543210.tmp"
    young.mkdir()
    before = _tree(outside)
    got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    assert got.returncode == 0, got.stderr
    assert not old.exists() and young.is_dir()
    assert _tree(outside) == before and sorted(p.name for p in outside.iterdir()) == ["f"]


def test_a_stale_temporary_file_of_a_killed_take_goes_after_60_s(store: tuple[Path, Path]) -> None:
    """The rule docs/storage.md states: a killed writer's file (named after its pid, the
    process gone) stays while younger than 60 s, and the next writer removes it after."""
    root, doc = store
    dead = 2**22 + 12345  # above the kernel's pid_max default: no such process
    young, old = root / layout.TMP / f"{dead}-a.tmp", root / layout.TMP / f"{dead}-b.tmp"
    young.write_bytes(b"y")
    old.write_bytes(b"o")
    _old(old, 61)
    got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    assert got.returncode == 0, got.stderr
    assert young.exists() and not old.exists()
    verify = run_ckpt("--store", root, "verify", "--json")
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["problems"] == []


def test_a_linked_reflog_is_refused_or_warned_about_never_read_as_empty(store: tuple[Path, Path], tmp_path: Path) -> None:
    """`ckpt reflog` with its log a symbolic link said "no ref moves recorded", exit 0,
    without a word (verify reported it). As a linked ref or manifest is: the reflog of
    that ref is refused in one line naming the link (exit 8), the reflog of every ref
    warns it leaves that log out, and a take that moves the ref says its entry is not
    recorded; nothing is appended where the link leads."""
    root, doc = store
    log = root / layout.LOGS / "refs" / "latest" / "agent" / "a"
    copy = tmp_path / "elsewhere.log"
    copy.write_bytes(log.read_bytes())
    log.unlink()
    log.symlink_to(copy)
    before = copy.read_bytes()
    one = run_ckpt("--store", root, "reflog", "agent:a")
    err = one.stderr.decode()
    assert one.returncode == ExitCode.UNSAFE_PATH, (one.returncode, one.stdout, err)
    assert err.count("\n") == 1 and f"{log} is a symbolic link" in err and "remove it" in err, err
    every = run_ckpt("--store", root, "reflog")
    err = every.stderr.decode()
    assert every.returncode == 0, err
    assert err.startswith("ckpt: warning: ") and err.count("\n") == 1 and f"{log} is a symbolic link" in err, err
    assert "left out" in err, err
    take = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    err = take.stderr.decode()
    assert take.returncode == 0 and f"{log} is a symbolic link" in err, err
    assert copy.read_bytes() == before


def _link_in_place(root: Path, path: str, outside: Path) -> Path:
    """Move the store's `path` outside and put a symbolic link to it in its place."""
    at = root / path
    moved = outside / "moved"
    at.rename(moved)
    at.symlink_to(moved, target_is_directory=moved.is_dir())
    return at


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("cache/heads", "link"),
        ("cache/heads/agent/a", "link"),
        ("locks/refs.lock", "link"),
        ("logs/refs/latest/agent/a", "reflog"),
        ("manifests/*", "manifest"),
    ],
)
def test_verify_and_doctor_name_every_planted_link_once(store: tuple[Path, Path], outside: Path, path: str, kind: str) -> None:
    """verify said nothing of a linked lock file or cache/heads, and doctor nothing of a
    linked reflog or cache/heads (nor of a linked packs/XX: see the next test): each link
    in the store's tree is now one line in each, naming it and saying to remove it; verify
    exits 5 (damage found) and doctor 1 (a check failed), as docs/exit-codes.md says."""
    root, _doc = store
    if path.endswith("*"):
        path = str(next((root / path[:-2]).iterdir()).relative_to(root))
    at = _link_in_place(root, path, outside)
    verify = run_ckpt("--store", root, "verify", "--json")
    assert verify.returncode == ExitCode.CORRUPT, verify.stderr
    problems = json.loads(verify.stdout)["problems"]
    assert [(p["kind"], p["name"]) for p in problems] == [(kind, path)], problems
    assert f"{at} is a symbolic link" in problems[0]["message"]
    doctor = run_ckpt("--store", root, "doctor", "--json")
    assert doctor.returncode == 1, doctor.stderr
    named = [c for c in json.loads(doctor.stdout)["checks"] if c["status"] == "fail" and str(at) in c["detail"]]
    assert len(named) == 1 and ("remove" in named[0]["hint"] or "rm " in named[0]["hint"]), named


def test_a_linked_pack_directory_or_locks_directory_is_named_by_doctor_and_stops_verify_with_8(
    store: tuple[Path, Path], tmp_path: Path
) -> None:
    """A linked packs/XX was not mentioned by doctor; verify is refused in one line naming
    it, exit 8 (now among its documented exit statuses), as for a linked locks/."""
    root, doc = store
    doc.write_text(json.dumps({"memory": {"notes": [os.urandom(2000).hex() for _ in range(20)]}}))
    assert run_ckpt("--store", root, "take", doc, "-S", "agent:a").returncode == 0  # objects in a pack
    for i, path in enumerate(("packs/*", "locks")):
        outside = tmp_path / f"out{i}"
        outside.mkdir()
        if path.endswith("*"):
            path = str(next((root / path[:-2]).iterdir()).relative_to(root))
        at = _link_in_place(root, path, outside)
        verify = run_ckpt("--store", root, "verify")
        err = verify.stderr.decode()
        assert verify.returncode == ExitCode.UNSAFE_PATH and err.count("\n") == 1 and f"{at} is a symbolic link" in err, err
        doctor = run_ckpt("--store", root, "doctor")
        assert doctor.returncode == 1 and str(at) in doctor.stdout.decode(), doctor.stdout
        at.unlink()
        (outside / "moved").rename(at)
    assert "8" in run_ckpt("verify", "--help").stdout.decode().split("Exit status")[-1]


@pytest.mark.parametrize("planted", ["directory", "fifo", "garbage"])
def test_an_unreadable_manifest_is_named_with_its_own_reason_by_stats_verify_ls_and_doctor(store: tuple[Path, Path], planted: str) -> None:
    """stats said a checkpoint whose manifest cannot be read "needs objects that cannot be
    read" (the wrong reason), and a directory named like a manifest was hidden by ls,
    stats and verify without a word. Each is now named with what is wrong with it:
    verify a problem (exit 5), doctor a failed check (exit 1), ls and stats a warning
    that they leave it out."""
    root, _doc = store
    cid = json.loads(run_ckpt("--store", root, "ls", "--json").stdout)[-1]["id"]
    path = root / layout.MANIFESTS / cid
    path.unlink()
    if planted == "directory":
        path.mkdir()
    elif planted == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"not a manifest")
    reason = {"directory": "is a directory", "fifo": "is not a regular file", "garbage": "does not match its name"}[planted]
    stats = run_ckpt("--store", root, "stats")
    err = stats.stderr.decode()
    assert stats.returncode == 0 and f"checkpoint {cid[:12]} is left out" in err and reason in err, err
    assert "needs objects" not in err, err
    verify = run_ckpt("--store", root, "verify", "--json")
    assert verify.returncode == ExitCode.CORRUPT, verify.stderr
    problems = json.loads(verify.stdout)["problems"]
    assert [(p["kind"], p["name"]) for p in problems] == [("manifest", f"{layout.MANIFESTS}/{cid}")], problems
    assert reason in problems[0]["message"]
    ls = run_ckpt("--store", root, "ls")
    assert ls.returncode == 0 and f"checkpoint {cid[:12]} is left out" in ls.stderr.decode(), ls.stderr
    assert run_ckpt("--store", root, "doctor").returncode == 1


@pytest.fixture
def plant_deep(store: tuple[Path, Path]) -> Iterator[Callable[[Path, str], Path]]:
    """`_plant_deep`, and what it made removed afterwards without recursing (pytest's
    own cleanup of tmp_path would hit the recursion limit in Python 3.11)."""
    root = store[0]
    yield _plant_deep
    for area in layout.STORE_DIRS:
        for p in (root / area).glob("*"):
            if p.is_dir() and not p.is_symlink():
                dirwalk.remove_tree(str(p))


def _plant_deep(parent: Path, name: str, levels: int = 1100) -> Path:
    """A directory `parent/name` with `levels` directories nested in it, made through
    directory descriptors (the path of the deepest is longer than a path may be), a
    symbolic link at its bottom; returns `parent/name`."""
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for sub in (name, *["a"] * levels):
            os.mkdir(sub, dir_fd=fd)
            child = os.open(sub, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.symlink("/", "root", dir_fd=fd)
    finally:
        os.close(fd)
    return parent / name


def test_a_stale_temporary_directory_1100_levels_deep_is_removed_by_take_and_by_prune(
    store: tuple[Path, Path], plant_deep: Callable[[Path, str], Path]
) -> None:
    """A directory nested 1,100 levels deep in tmp/ made the sweep of the next take crash
    (shutil.rmtree recursed: exit 7 "input nests too deeply", the take lost) and prune
    too, leaving it. tmp/ is now removed level by level with an explicit stack: the take
    goes on and removes it (stale), prune empties tmp/ of a young one too."""
    root, doc = store
    stale = plant_deep(root / layout.TMP, ".ckpt-00000000000000aa.tmp")
    _old(stale)
    got = run_ckpt("--store", root, "take", doc, "-S", "agent:a")
    assert got.returncode == 0, got.stderr
    assert not os.path.lexists(stale)
    young = plant_deep(root / layout.TMP, "planted")
    verify = run_ckpt("--store", root, "verify")
    assert verify.returncode == 0, verify.stderr
    got = run_ckpt("--store", root, "prune", "--keep-last", "1")
    assert got.returncode == 0, got.stderr
    assert not os.path.lexists(young) and list((root / layout.TMP).iterdir()) == []


@pytest.mark.parametrize(
    ("area", "kind", "named"),
    [
        ("refs/tags", "ref", "refs/tags/deep/a"),
        ("logs/refs/tags", "reflog", "logs/refs/tags/deep/a"),
        ("packs", "pack", "packs/deep/a"),
        ("cache", None, None),
        ("manifests", None, None),
    ],
)
def test_a_directory_1100_levels_deep_in_the_store_is_named_not_a_crash(
    store: tuple[Path, Path], plant_deep: Callable[[Path, str], Path], area: str, kind: str | None, named: str | None
) -> None:
    """The same nesting under refs/, logs/, packs/, cache/ or manifests/ made verify, ls,
    reflog, prune and doctor crash (exit 7; doctor "the check itself failed:
    RecursionError"): the listings recursed. They are iterative now and go no deeper than
    ckpt's own paths there; a directory at that depth, where ckpt keeps only files, is
    named by verify (exit 5) and by doctor, saying to remove it; what ckpt never reads
    (cache/, a directory among the manifests) is no problem."""
    root, _doc = store
    plant_deep(root / area, "deep")
    verify = run_ckpt("--store", root, "verify", "--json")
    problems = [(p["kind"], p["name"]) for p in json.loads(verify.stdout)["problems"]] if verify.stdout else None
    if kind is None:
        assert verify.returncode == 0, verify.stderr
    else:
        assert verify.returncode == ExitCode.CORRUPT, verify.stderr
        assert problems == [(kind, named)]
    for args in (("ls",), ("reflog",), ("stats",)):
        got = run_ckpt("--store", root, *args)
        assert got.returncode == 0, (args, got.stderr)
    doctor = run_ckpt("--store", root, "doctor", "--json")
    assert b"RecursionError" not in doctor.stdout + doctor.stderr
    if area == "refs/tags":
        assert doctor.returncode == 1
        fails = [c for c in json.loads(doctor.stdout)["checks"] if c["status"] == "fail"]
        assert len(fails) == 1 and f"rm -r {root / str(named)}" in fails[0]["detail"], fails
    prune = run_ckpt("--store", root, "prune", "--keep-last", "1")
    assert prune.returncode == (ExitCode.CORRUPT if area == "refs/tags" else 0), prune.stderr


@pytest.mark.parametrize("linked", ["tags", "latest"])
def test_a_linked_directory_of_reflogs_is_named_and_the_other_logs_still_listed(
    store: tuple[Path, Path], outside: Path, linked: str
) -> None:
    """`ckpt reflog` (every ref) with a directory under logs/refs/ a symbolic link said "no
    ref moves recorded", exit 0 (`--json`: []), dropping the entries of the logs beside
    it too. It now warns in one line naming the link, as for a linked log file, and lists
    the other logs' entries; the reflog of a ref through the link is still refused (8)."""
    root, _doc = store
    assert run_ckpt("--store", root, "tag", "keep", "agent:a").returncode == 0
    at = _link_in_place(root, f"{layout.LOGS}/refs/{linked}", outside)
    every = run_ckpt("--store", root, "reflog", "--json")
    err = every.stderr.decode()
    assert every.returncode == 0, err
    assert err.startswith("ckpt: warning: ") and err.count("\n") == 1 and f"{at} is a symbolic link" in err and "left out" in err, err
    refs = {e["ref"] for e in json.loads(every.stdout)}
    assert refs == ({"latest/agent/a"} if linked == "tags" else {"tags/keep"}), refs
    one = run_ckpt("--store", root, "reflog", "keep" if linked == "tags" else "agent:a")
    assert one.returncode == ExitCode.UNSAFE_PATH, one.stderr


def test_verify_names_a_linked_reflog_once(store: tuple[Path, Path], outside: Path) -> None:
    """verify named a linked reflog twice: a warning (read for the dangling-heads check)
    and its "damaged reflog" problem. It is one problem now, and no warning."""
    root, _doc = store
    at = _link_in_place(root, f"{layout.LOGS}/refs/latest/agent/a", outside)
    verify = run_ckpt("--store", root, "verify")
    assert verify.returncode == ExitCode.CORRUPT, verify.stderr
    said = (verify.stdout + verify.stderr).decode()
    assert said.count(f"{at} is a symbolic link") == 1 and "warning" not in said, said


@pytest.mark.parametrize("lock", ["store.lock", "refs.lock"])
def test_verify_stops_at_a_linked_store_lock_and_names_a_linked_refs_lock(store: tuple[Path, Path], outside: Path, lock: str) -> None:
    """The two differ on purpose (docs/exit-codes.md, `ckpt verify --help`): verify takes
    locks/store.lock (shared, so that no prune deletes what it reads) and cannot through a
    link, as no command can: exit 8, one line naming it. It does not take refs.lock: a
    link there is one of the problems it names, kind `link`, exit 5."""
    root, _doc = store
    at = _link_in_place(root, f"{layout.LOCKS}/{lock}", outside)
    verify = run_ckpt("--store", root, "verify", "--json")
    if lock == "store.lock":
        err = verify.stderr.decode()
        assert verify.returncode == ExitCode.UNSAFE_PATH and verify.stdout == b"", err
        assert err.count("\n") == 1 and f"{at} is a symbolic link" in err and "remove it" in err, err
    else:
        assert verify.returncode == ExitCode.CORRUPT, verify.stderr
        problems = json.loads(verify.stdout)["problems"]
        assert [(p["kind"], p["name"]) for p in problems] == [("link", f"{layout.LOCKS}/{lock}")], problems
    for text in ((REPO / "docs" / "exit-codes.md").read_text(), run_ckpt("verify", "--help").stdout.decode()):
        assert "store.lock" in text and "refs.lock" in text
