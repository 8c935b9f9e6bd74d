"""Edges of the CLI found by outside testers: `ckpt ls REF` shows the refs as `ckpt ls`
does; an empty or unknown --chunker, and an empty path to restore, export or import, are
refused with one line and exit 2; a blobs directory that cannot be made says why, not
"0 B free"; a path given as the checkpoint (a directory, a path that is not there) gets
the same line and code from every verb, `ckpt import` included; `ckpt init` of a
directory inside a store is refused, as `ckpt init URL` refuses a prefix inside one; a
bare name that is both a checkpoint file and a ref of the store is refused by every verb;
bad input to `ckpt take` (a missing --blob path, a blob name given twice, a number too large
to keep, a JSON file that starts with a byte order mark) gets one line, exit 4, or is taken."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli.errors import ExitCode
from tests.conftest import run_ckpt


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[str]]:
    s = tmp_path / "s"
    assert run_ckpt("init", s).returncode == 0
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hello")
    doc = tmp_path / "d.json"
    made = []
    for i, subject in enumerate(["agent:bot", "agent:bot", "agent:other"]):
        doc.write_text(json.dumps({"step": i}))
        r = run_ckpt("take", doc, "--store", s, "-S", subject, "--blob", f"ws={tmp_path / 'ws'}", "--json")
        assert r.returncode == 0, r.stderr
        made.append(json.loads(r.stdout)["id"])
    assert run_ckpt("tag", "good", made[1], "--store", s).returncode == 0
    return s, made


def _one_line_error(r: object, code: int) -> str:
    err = r.stderr.decode()  # type: ignore[attr-defined]
    assert r.returncode == code, err  # type: ignore[attr-defined]
    assert err.count("\n") == 1 and err.startswith("ckpt: error: ") and "Traceback" not in err, err
    return err


def test_ls_of_one_checkpoint_shows_its_refs_as_the_list_does(store: tuple[Path, list[str]]) -> None:
    s, made = store
    listed = {row["id"]: row["refs"] for row in json.loads(run_ckpt("ls", "--store", s, "--json").stdout)}
    assert listed[made[1]] == ["latest/agent/bot", "tags/good"]
    for ref in ("agent:bot", "good", made[1][:12], made[1]):
        r = run_ckpt("ls", ref, "--store", s, "--json")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        assert [row["id"] for row in rows] == [made[1]] and rows[0]["refs"] == listed[made[1]], ref
        table = run_ckpt("ls", ref, "--store", s, "--columns", "id,refs").stdout.decode().splitlines()
        assert table[1].split()[1] == "latest,tag:good", table
    # a checkpoint file has no refs: the column stays empty
    f = s.parent / "x.ckpt"
    assert run_ckpt("export", made[1], "-o", f, "--store", s).returncode == 0
    assert json.loads(run_ckpt("ls", f, "--json").stdout)[0]["refs"] == []


@pytest.mark.parametrize("value", ["", "bogus"])
def test_init_refuses_an_empty_or_unknown_chunker_with_a_usage_error(tmp_path: Path, value: str) -> None:
    # --chunker "" made a store with the default chunker (exit 0); "bogus" exited 4
    r = run_ckpt("init", "--chunker", value, tmp_path / "s")
    err = _one_line_error(r, ExitCode.USAGE)
    assert "--chunker" in err and "fastcdc2020" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["restore", "agent:bot", "--no-state", "--blobs", ""],
        ["restore", "agent:bot", "--no-state", "-B", ""],
        ["restore", "agent:bot", "--no-state", "--blobs="],
        ["restore", "agent:bot", "-o", ""],
        ["export", "agent:bot", "-o", ""],
        ["import", ""],
        ["import", "langgraph", ""],
        ["import", "temporal", ""],
    ],
)
def test_an_empty_path_is_refused_before_anything_is_written(store: tuple[Path, list[str]], tmp_path: Path, args: list[str]) -> None:
    # Path("") is ".": restore --blobs "" wrote the blobs into the current directory
    s, _made = store
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "h.json").write_text("{}")  # what import temporal "" would have read
    r = run_ckpt(*args, "--store", s, cwd=cwd)
    err = _one_line_error(r, ExitCode.USAGE)
    assert "empty" in err, err
    assert sorted(os.listdir(cwd)) == ["h.json"]


@pytest.mark.parametrize("path", ["", "/", "//"])
def test_dump_of_a_path_that_names_no_file_is_a_usage_error(store: tuple[Path, list[str]], tmp_path: Path, path: str) -> None:
    # it exited 3 ("no blob path given"), as for a file the checkpoint does not have
    s, _made = store
    for ref in ("agent:bot", "no-such-ref"):  # said before the checkpoint is looked for
        err = _one_line_error(run_ckpt("dump", ref, path, "-o", tmp_path / "out", "--store", s), ExitCode.USAGE)
        assert f"the path {path!r} names no file" in err and "ckpt ls-files" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("target", ["/proc/ckpt-no-such-dir", "/proc/ckpt-no-such-dir/sub"])
def test_a_blobs_directory_that_cannot_be_made_says_why_not_no_space(store: tuple[Path, list[str]], target: str) -> None:
    # /proc reports 0 bytes free: the check said "has only 0 B free"
    s, _made = store
    r = run_ckpt("restore", "agent:bot", "--no-state", "--blobs", target, "--store", s)
    err = _one_line_error(r, ExitCode.IO_ERROR)
    assert "cannot create the directory /proc/ckpt-no-such-dir" in err and "free" not in err.split(";")[0], err


def test_a_blobs_target_that_is_a_file_says_so(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    s, _made = store
    f = tmp_path / "a-file"
    f.write_text("x")
    for target in (f, f / "sub"):
        err = _one_line_error(run_ckpt("restore", "agent:bot", "--no-state", "--blobs", target, "--store", s), ExitCode.IO_ERROR)
        assert "directory" in err and "free" not in err, err
    assert f.read_text() == "x"


def test_a_directory_given_to_import_as_its_checkpoint_file_is_bad_input(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    """`ckpt import DIR`: one line saying it is a directory and what to give (it was exit
    12, "cannot read DIR: Is a directory", as if the system had failed)."""
    s, _ = store
    err = _one_line_error(run_ckpt("import", tmp_path / "ws", "--store", s), ExitCode.INVALID_INPUT)
    assert f"{tmp_path / 'ws'} is a directory, not a checkpoint file; give a .ckpt file" in err, err


#: every verb that reads one checkpoint given as a reference or a checkpoint file
_READERS = [
    ["show"],
    ["cat"],
    ["ls"],
    ["ls-files"],
    ["verify"],
    ["export", "-o", "-"],
    ["restore", "-o", "-"],
    ["dump", "x"],
    ["diff", "latest"],  # the path first: a second argument that is a reference needs a store
]


@pytest.mark.parametrize("with_store", [False, True], ids=["no-store", "store"])
@pytest.mark.parametrize("what", ["directory", "missing"])
@pytest.mark.parametrize("verb", _READERS, ids=lambda v: v[0])
def test_a_path_is_a_checkpoint_file_for_every_verb_as_for_import(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: list[str], what: str, with_store: bool
) -> None:
    """A path (absolute, ./x, ../x, x.ckpt, or x/y that is there): a directory or a path
    that does not exist gets the line and code `ckpt import` gives it, whatever the verb
    and whether or not a store is found (show and cat said "no ckpt store", exit 10,
    where other verbs said "does not exist", exit 3)."""
    s = tmp_path / "s"
    assert cli("init", s).code == 0
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    if with_store:
        monkeypatch.setenv("CKPT_STORE", str(s))
    path = str(tmp_path / "ws") if what == "directory" else "./not-here"
    want = cli("import", path, "--store", s)
    assert want.code == (ExitCode.INVALID_INPUT if what == "directory" else ExitCode.NOT_FOUND), want.err
    got = cli(verb[0], path, *verb[1:])
    assert (got.code, got.err) == (want.code, want.err)


@pytest.mark.parametrize("inner", ["refs/sub", "packs/zz", "cache", "made/deep/er", "made", "new"])
def test_init_inside_a_store_is_refused_and_the_store_keeps_working(cli: Any, tmp_path: Path, inner: str) -> None:
    """`ckpt init` of a directory below a store's root (its refs/, packs/xx, cache/, or any
    directory there, made or not) is refused as `ckpt init URL` refuses a prefix inside a
    store: it made a config there that the outer store's verify then called damage and
    its prune deleted as garbage."""
    s = tmp_path / "proj" / ".ckpt"
    assert cli("init", s).code == 0
    doc = tmp_path / "d.json"
    doc.write_text('{"a": 1}')
    assert cli("take", doc, "--store", s, "-S", "agent:bot").code == 0
    (s / "made" / "deep").mkdir(parents=True)
    before = sorted(p.relative_to(s) for p in s.rglob("*"))
    got = cli("init", s / inner)
    assert got.code == ExitCode.CONFLICT, got.err
    assert got.err.count("\n") == 1 and f"inside the ckpt store {s}" in got.err, got.err
    assert sorted(p.relative_to(s) for p in s.rglob("*")) == before  # nothing made
    # cwd inside the store: the default ./.ckpt lies inside it too
    (s / inner).mkdir(parents=True, exist_ok=True)
    assert run_ckpt("init", cwd=s / inner).returncode == ExitCode.CONFLICT
    assert not (s / inner / ".ckpt").exists()
    for verb in (["verify"], ["prune", "--keep-last", "1"]):
        r = cli(*verb, "--store", s)
        assert r.code == 0, (verb, r.err)


def test_init_next_to_a_store_or_holding_a_config_file_works(cli: Any, tmp_path: Path) -> None:
    """Beside a store (not inside it), in a directory that holds a `.ckpt/` store, or below
    a directory that merely holds a file named `config` (~/.ssh/config), init works."""
    s = tmp_path / "proj" / ".ckpt"
    assert cli("init", s).code == 0
    assert cli("init", tmp_path / "proj" / "other").code == 0
    assert cli("init", tmp_path / "proj" / "sub" / ".ckpt").code == 0
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config").write_text("Host *\n")
    assert cli("init", tmp_path / "home" / "stores" / "a").code == 0


#: every verb that takes a checkpoint reference or file, with what follows it
_REF_TAKERS = [*_READERS, ["diff", "latest"], ["replay"], ["compat"]]


def test_a_bare_name_that_is_both_a_checkpoint_file_and_a_ref_is_refused_by_every_verb(
    cli: Any, store: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ckpt export TAG -o good`, then `ckpt show good` read the file, not the tag good,
    without a word: a name that is both is refused with one line naming both meanings
    and how to give each, by every verb that takes a reference (diff in either place)."""
    s, made = store
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert run_ckpt("export", made[0], "-o", cwd / "good", "--store", s).returncode == 0  # not what the tag names
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("CKPT_STORE", str(s))
    for argv in [[verb[0], "good", *verb[1:]] for verb in _REF_TAKERS] + [["diff", "latest", "good"]]:
        got = cli(*argv)
        assert got.code == ExitCode.INVALID_INPUT, (argv, got.err)
        assert got.err.count("\n") == 1 and got.err.startswith("ckpt: error: 'good' is ambiguous"), (argv, got.err)
        assert f"checkpoint file ./good, and the tag good in the store at {s} (checkpoint {made[1][:12]})" in got.err, got.err
        assert "give ./good for the file, or good~0 for the checkpoint of the store" in got.err, got.err


def test_each_meaning_of_a_name_is_reached_and_a_name_with_one_meaning_works(
    cli: Any, store: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, made = store
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name in ("good", "latest", made[2][:8], "alone"):
        assert run_ckpt("export", made[0], "-o", cwd / name, "--store", s).returncode == 0
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    for with_store in ([], ["--store", s]):
        for word, want in (("./good", made[0]), ("good~0", made[1]), ("./latest", made[0]), ("latest~0", made[2])):
            got = cli("show", word, *with_store, "--json")
            if with_store or word.startswith("./"):
                assert got.code == 0 and json.loads(got.out)["id"] == want, (word, got.err)
        # one meaning: the file (no such ref, or no store)
        got = cli("show", "alone", *with_store, "--json")
        assert got.code == 0 and json.loads(got.out)["id"] == made[0], got.err
        got = cli("show", "good", *with_store, "--json")
        assert got.code == (ExitCode.INVALID_INPUT if with_store else 0), got.err
    # `latest` and an id prefix are references too
    for word, what in (("latest", "`latest`"), (made[2][:8], f"the checkpoint whose id starts with {made[2][:8]}")):
        got = cli("verify", word, "--store", s)
        assert got.code == ExitCode.INVALID_INPUT and f"and {what} in the store" in got.err, got.err


def test_tui_refuses_a_name_that_is_both_a_checkpoint_file_and_a_ref(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    s, made = store
    assert run_ckpt("export", made[0], "-o", tmp_path / "good", "--store", s).returncode == 0
    r = subprocess.run(
        [sys.executable, "-m", "ckptcli", "tui", "good", "--store", str(s)],
        cwd=tmp_path,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "CKPT_STORE"},
        timeout=60,
    )
    err = _one_line_error(r, ExitCode.INVALID_INPUT)
    assert "'good' is ambiguous" in err, err


@pytest.mark.parametrize("inner", ["a store as its packs", "a store whose config is gone", "the user's own tmp"])
def test_init_refuses_a_directory_that_holds_a_stores_directories(tmp_path: Path, inner: str) -> None:
    """A new store would take what is there for its own: verify calls it damage, prune
    deletes it, tmp/ is swept. Refused, exit 11, nothing made; other files are fine."""
    d = tmp_path / "D"
    if inner == "a store as its packs":
        assert run_ckpt("init", d / "packs").returncode == 0
    elif inner == "a store whose config is gone":
        assert run_ckpt("init", d).returncode == 0
        (d / "config").unlink()
    else:
        (d / "tmp").mkdir(parents=True)
        (d / "tmp" / "draft.txt").write_text("mine")
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    r = run_ckpt("init", d)
    err = r.stderr.decode()
    assert r.returncode == 11, err
    assert "already exists" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == before
    other = tmp_path / "E"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert run_ckpt("init", other).returncode == 0


def test_a_damaged_tag_named_like_a_checkpoint_file_here_is_still_a_second_meaning(tmp_path: Path) -> None:
    """A tag file that cannot be read is still a tag: the word is not silently the file."""
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    assert run_ckpt("take", "s.json", "-S", "agent:a", cwd=tmp_path).returncode == 0
    assert run_ckpt("tag", "good", "latest", cwd=tmp_path).returncode == 0
    assert run_ckpt("export", "good", "-o", "good", cwd=tmp_path).returncode == 0
    (tmp_path / ".ckpt" / "refs" / "tags" / "good").write_bytes(b"garbage")
    r = run_ckpt("show", "good", cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 4 and "ambiguous" in err and "./good" in err and len(err.strip().splitlines()) == 1, err
    assert run_ckpt("show", "./good", cwd=tmp_path).returncode == 0


def test_init_refuses_a_directory_inside_a_store_whose_config_is_gone(tmp_path: Path) -> None:
    s = tmp_path / "s"
    assert run_ckpt("init", s).returncode == 0
    (s / "config").unlink()
    r = run_ckpt("init", s / "refs" / "y")
    assert r.returncode == 11, r.stderr.decode()
    assert not (s / "refs" / "y").exists()


@pytest.mark.parametrize("args", [["init", "{L}"], ["--store", "{L}", "ls"], ["show", "{L}"], ["show", "{L}.ckpt"], ["import", "{L}"]])
def test_a_name_longer_than_a_file_system_holds_is_one_line_exit_4(tmp_path: Path, args: list[str]) -> None:
    long_name = "a" * 300
    r = run_ckpt(*[a.replace("{L}", long_name) for a in args], cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 4, err
    assert "too long" in err and "internal error" not in err and len(err.strip().splitlines()) == 1


# -- ckpt take: bad state documents and --blob forms get one line, exit 4 ----------------------
def test_a_missing_blob_path_names_the_blob_the_path_and_what_to_do(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    r = run_ckpt("take", "s.json", "--blob", "work=missing/path", cwd=tmp_path)
    err = _one_line_error(r, ExitCode.INVALID_INPUT)
    assert "blob work: missing/path does not exist" in err and f"relative to {tmp_path}" in err, err
    assert "existing file or directory" in err, err


def test_a_blob_name_given_twice_exits_4_as_other_bad_blob_forms(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "x").write_text("x")
    (tmp_path / "s.json").write_text('{"a": 1}')
    for bad in (["--blob", "a"], ["--blob", "a=x", "--blob", "a=x"]):
        err = _one_line_error(run_ckpt("take", "s.json", *bad, cwd=tmp_path), ExitCode.INVALID_INPUT)
        assert "--blob" in err, err


@pytest.mark.parametrize("stdin", [False, True])
@pytest.mark.parametrize("digits", [3000, 5000])  # below and above Python's own int_max_str_digits
def test_an_integer_too_long_to_store_says_where_and_the_limit(tmp_path: Path, stdin: bool, digits: int) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    doc = '{"a": 1,\n "b": ' + "9" * digits + "}"
    (tmp_path / "big.json").write_text(doc)
    args = ("take", "-") if stdin else ("take", "big.json")
    r = run_ckpt(*args, input=doc.encode() if stdin else None, cwd=tmp_path)
    err = _one_line_error(r, ExitCode.INVALID_INPUT)
    where = "stdin" if stdin else "big.json"
    assert f"{where}: the integer at line 2, column 7 has {digits} digits" in err, err
    assert "8192 bits" in err and "Exceeds the limit" not in err and "string" in err, err


def test_an_integer_at_the_limit_is_taken_and_given_back(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    value = 2**8191 - 1  # the largest a BIGINT holds
    (tmp_path / "s.json").write_text(f'{{"a": {value}}}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    out = run_ckpt("restore", "latest", "-o", "-", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert str(value) in out.stdout.decode()


def test_a_json_state_file_with_a_byte_order_mark_is_read_as_json(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "bom.json").write_bytes(b'\xef\xbb\xbf\n {"a": 1}')
    r = run_ckpt("take", "bom.json", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = run_ckpt("restore", "latest", "-o", "-", cwd=tmp_path)
    assert json.loads(out.stdout) == {"a": 1}, out


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_float_out_of_range_is_refused_not_made_infinite(tmp_path: Path, number: str) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text(f'{{"a": [1, {number}]}}')
    err = _one_line_error(run_ckpt("take", "s.json", cwd=tmp_path), ExitCode.INVALID_INPUT)
    assert f"s.json: the number {number} at line 1, column 11 is out of range for a float" in err, err
    assert run_ckpt("ls", "--json", cwd=tmp_path).stdout.strip() in (b"[]", b"")


# -- ckpt init: what is in the way is named ------------------------------------------------
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_init_where_a_config_of_the_users_is_says_it_is_not_a_store(tmp_path: Path, kind: str) -> None:
    u = tmp_path / "u"
    u.mkdir()
    if kind == "file":
        (u / "config").write_text("[settings]\nmine = yes\n")
    else:
        (u / "config").mkdir()
    err = _one_line_error(run_ckpt("init", u), ExitCode.CONFLICT)
    assert f"it holds a {kind} named config that is not a store's config" in err and "already exists" not in err, err
    assert f"move {u / 'config'} away" in err, err
    assert sorted(p.name for p in u.iterdir()) == ["config"]
    # a store's config, even damaged, still means a store is there
    s = tmp_path / "s"
    assert run_ckpt("init", s).returncode == 0
    (s / "config").write_bytes((s / "config").read_bytes()[:-3])
    assert "a ckpt store already exists" in _one_line_error(run_ckpt("init", s), ExitCode.CONFLICT)


def test_init_at_a_dangling_link_says_so(tmp_path: Path) -> None:
    (tmp_path / "L").symlink_to(tmp_path / "nowhere")
    err = _one_line_error(run_ckpt("init", tmp_path / "L"), ExitCode.IO_ERROR)
    assert "is a symbolic link to" in err and "dangling" in err and "File exists" not in err, err
    assert not (tmp_path / "nowhere").exists()


# -- ckpt restore of a checkpoint that holds no files ---------------------------------------
def test_restore_delete_of_a_checkpoint_without_files_deletes_nothing(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", "-S", "agent:a", cwd=tmp_path).returncode == 0
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("precious")
    for where in (["--blobs", "out"], ["--in-place"]):
        for extra in ([], ["--dry-run"]):
            r = run_ckpt("restore", "latest", *where, "--delete", *extra, "-o", "back.json", cwd=tmp_path)
            err = _one_line_error(r, ExitCode.INVALID_INPUT)
            assert "holds no files" in err and "nothing was restored or deleted" in err and "ls-files" in err, err
            assert (tmp_path / "out" / "mine.txt").read_text() == "precious"
            assert not (tmp_path / "back.json").exists()  # nothing at all: the state neither
    for where in (["--blobs", "out"], ["--in-place"]):
        r = run_ckpt("restore", "latest", *where, "--no-state", cwd=tmp_path)
        assert r.returncode == 0 and "holds no files" in r.stderr.decode() and "nothing was restored" in r.stderr.decode(), r
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]


def test_restore_delete_of_a_checkpoint_whose_blobs_are_empty_deletes_nothing(tmp_path: Path) -> None:
    # a blob of empty directories holds no file either: --delete into a blobs directory
    # removed everything there (exit 0), the case above only covered no blob at all
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    (tmp_path / "ws" / "empty" / "deeper").mkdir(parents=True)
    r = run_ckpt("take", "s.json", "-S", "agent:a", "--blob", "w=ws", cwd=tmp_path)
    assert r.returncode == 0, r
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("precious")
    for where in (["--blobs", "out"], ["--blobs", "out", "--blob", "w"], ["--in-place"]):
        r = run_ckpt("restore", "latest", *where, "--delete", "--no-state", cwd=tmp_path)
        err = _one_line_error(r, ExitCode.INVALID_INPUT)
        said = "blob 'w' holds no files" if "--blob" in where else "holds no files (its blobs are empty"
        assert said in err and "nothing was restored or deleted" in err, (where, err)
        assert (tmp_path / "out" / "mine.txt").read_text() == "precious"
    # with a file in the blob, --delete does what it says (what the checkpoint lacks goes)
    (tmp_path / "ws" / "empty" / "deeper" / "f").write_text("x")
    assert run_ckpt("take", "s.json", "-S", "agent:a", "--blob", "w=ws", cwd=tmp_path).returncode == 0
    assert run_ckpt("restore", "latest", "--blobs", "out", "--delete", "--no-state", cwd=tmp_path).returncode == 0
    assert not (tmp_path / "out" / "mine.txt").exists() and (tmp_path / "out" / "w" / "empty" / "deeper" / "f").read_text() == "x"


@pytest.fixture
def partly_empty(tmp_path: Path) -> Path:
    """A store whose latest checkpoint has blob w (sub/ and deep/a/b/ empty, pipes/ holding
    only a FIFO, which take skips, and other/f) and blob e (empty directories only); the
    user has since put files in w's sub/, deep/a/b/ and pipes/, and in e."""
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    w, e = tmp_path / "w", tmp_path / "e"
    for d in (w / "sub", w / "deep" / "a" / "b", w / "other", w / "pipes", e / "x"):
        d.mkdir(parents=True)
    (w / "other" / "f").write_text("x")
    os.mkfifo(w / "pipes" / "ff")
    r = run_ckpt("take", "s.json", "-S", "agent:a", "--blob", f"w={w}", "--blob", f"e={e}", cwd=tmp_path)
    assert r.returncode == 0, r
    (w / "pipes" / "ff").unlink()
    for d in (w / "sub", w / "deep" / "a" / "b", w / "pipes", e / "x", e):
        (d / "mine.txt").write_text("precious")
    return tmp_path


def _users_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("mine.txt"))


@pytest.mark.parametrize(
    "choice",
    [
        ["--include", "sub"],
        ["--include", "w/sub"],
        ["--include", "sub", "--include", "deep"],
        ["--include", "b"],  # a nested empty directory, matched by its own name
        ["--include", "w/deep/a"],
        ["--include", "pipes"],  # what it held was skipped when taken: no file either
        ["--blob", "w", "--include", "sub"],
        ["--blob", "e"],
        ["--blob", "e", "--include", "x"],
    ],
)
def test_restore_delete_of_a_selection_without_files_deletes_nothing(partly_empty: Path, choice: list[str]) -> None:
    # the checkpoint holds files, but what --blob and --include chose of it holds none:
    # --delete emptied the user's directories it named (exit 0); the check looked only
    # at the chosen blobs, not at what --include left of them
    t = partly_empty
    (t / "out" / "w" / "sub").mkdir(parents=True)
    (t / "out" / "w" / "sub" / "mine.txt").write_text("precious")
    (t / "out" / "e").mkdir()
    (t / "out" / "e" / "mine.txt").write_text("precious")
    before = _users_files(t)
    for where in (["--in-place"], ["--blobs", "out"], ["--in-place", "--dry-run"], ["--blobs", "out", "--dry-run"]):
        r = run_ckpt("restore", "latest", *where, "--delete", "--no-state", *choice, cwd=t)
        err = _one_line_error(r, ExitCode.INVALID_INPUT)
        assert "nothing was restored or deleted" in err and "or restore without --delete" in err, (where, err)
        if "--include" in choice:
            assert "the paths --include" in err and "hold no files" in err and "include paths that hold files" in err, err
        else:
            assert "blob 'e' holds no files" in err and "choose a blob that holds files" in err and "checkpoint " in err, err
        assert _users_files(t) == before, (where, choice)
    assert not (t / "out" / "w" / "other").exists()


def test_restore_delete_of_a_selection_with_files_still_deletes_what_it_lacks(partly_empty: Path) -> None:
    # the refusal is of a selection holding nothing: one holding a file (other/f beside
    # the empty sub/) restores and deletes as asked, in place and into a directory
    t = partly_empty
    (t / "w" / "other" / "extra").write_text("goes")
    r = run_ckpt("restore", "latest", "--in-place", "--delete", "--no-state", "--include", "sub", "--include", "other", cwd=t)
    assert r.returncode == 0, r
    assert not (t / "w" / "sub" / "mine.txt").exists() and not (t / "w" / "other" / "extra").exists()
    assert (t / "w" / "deep" / "a" / "b" / "mine.txt").exists() and (t / "e" / "mine.txt").exists()
    r = run_ckpt("restore", "latest", "--blobs", "out", "--delete", "--no-state", "--blob", "w", "--blob", "e", cwd=t)
    assert r.returncode == 0, r
    assert (t / "out" / "w" / "other" / "f").read_text() == "x" and (t / "out" / "e" / "x").is_dir()


def test_a_pack_missing_from_the_store_is_damage_to_every_verb_and_nothing_is_written(tmp_path: Path) -> None:
    # restore, show, dump, export, cat and ls-files exited 3 ("... does not exist", as
    # for a name the user got wrong) and copy 5: the store is damaged, exit 5 from all
    assert run_ckpt("init", "s", cwd=tmp_path).returncode == 0
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f").write_bytes(os.urandom(5000))
    (tmp_path / "st.json").write_text(json.dumps({"big": ["x" * 40 + str(i) for i in range(3000)]}))
    assert run_ckpt("take", "st.json", "-s", "s", "-S", "agent:a", "--blob", "w=ws", cwd=tmp_path).returncode == 0
    packs = [p for p in (tmp_path / "s" / "packs").rglob("*") if p.is_file()]
    assert len(packs) == 1
    packs[0].unlink()
    name = str(packs[0].relative_to(tmp_path / "s"))
    (tmp_path / "ws" / "f").write_text("mine")
    assert run_ckpt("init", "d", cwd=tmp_path).returncode == 0
    for args in (
        ["restore", "latest", "--blobs", "out", "-o", "back.json"],
        ["restore", "latest", "--no-state", "--in-place", "--delete"],
        ["restore", "latest", "-o", "back.json"],
        ["show", "latest"],
        ["dump", "latest", "memory"],
        ["export", "latest", "-o", "x.ckpt"],
        ["cat", "latest"],
        ["ls-files", "latest"],
        ["copy", "s", "d"],
    ):
        r = run_ckpt(*args, *([] if args[0] == "copy" else ["-s", "s"]), cwd=tmp_path)
        err = _one_line_error(r, ExitCode.CORRUPT)
        assert f"pack {name} is missing" in err and "the store is damaged" in err and "ckpt verify" in err, (args, err)
        assert r.stdout == b"", args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "s", "st.json", "ws"]
    assert (tmp_path / "ws" / "f").read_text() == "mine"
    assert json.loads(run_ckpt("ls", "-s", "d", "--json", cwd=tmp_path).stdout) == []


def _strict_json(text: bytes | str) -> Any:
    def refuse(const: str) -> Any:
        raise AssertionError(f"{const} is not JSON: {text!r}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_json_output_of_a_state_never_holds_a_bare_nan_or_infinity(tmp_path: Path, value: float) -> None:
    # restore --format json of a state taken as msgpack printed a bare Infinity, which is
    # not JSON: refused now, as a byte string is; every JSON view prints {"$float": ...}
    import msgpack

    tag = {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "a.msgpack").write_bytes(msgpack.packb({"x": 1.0, "l": [1]}))
    (tmp_path / "b.msgpack").write_bytes(msgpack.packb({"x": value, "l": [1, value]}))
    for name in ("a", "b"):
        assert run_ckpt("take", f"{name}.msgpack", "-S", "agent:f", cwd=tmp_path).returncode == 0
    for args in (["--format", "json"], ["--format", "json", "-o", "back.json"]):
        err = _one_line_error(run_ckpt("restore", "latest", *args, cwd=tmp_path), ExitCode.INVALID_INPUT)
        assert "NaN or infinity, which JSON cannot carry" in err and "--format msgpack" in err and "ckpt cat" in err, err
    assert not (tmp_path / "back.json").exists()
    back = run_ckpt("restore", "latest", cwd=tmp_path).stdout  # as taken: msgpack keeps them
    assert msgpack.unpackb(back)["l"][0] == 1 and repr(msgpack.unpackb(back)["x"]) == repr(value)
    views = {
        "cat": _strict_json(run_ckpt("cat", "latest", cwd=tmp_path).stdout)["sections"]["memory"],
        "show": _strict_json(run_ckpt("show", "latest", "--section", "memory", cwd=tmp_path).stdout),
        "show --json": _strict_json(run_ckpt("show", "latest", "--section", "memory", "--json", cwd=tmp_path).stdout),
    }
    for how, got in views.items():
        assert got == {"x": tag, "l": [1, tag]}, how
    patch = _strict_json(run_ckpt("diff", "latest~1", "latest", "--json", cwd=tmp_path).stdout)["patch"]
    assert {"op": "replace", "path": "/x", "value": tag} in patch, patch


def test_a_json_document_holding_nan_comes_back_as_it_was_taken(tmp_path: Path) -> None:
    # Python's json writes and reads NaN and Infinity: such a document is taken, and
    # restore gives it back as it was (strictness is for states that were not JSON)
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": NaN, "b": Infinity, "c": -Infinity, "d": {"$float": "inf"}}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    r = run_ckpt("restore", "latest", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.dumps(json.loads(r.stdout)) == json.dumps(json.loads((tmp_path / "s.json").read_text()))
    got = _strict_json(run_ckpt("cat", "latest", cwd=tmp_path).stdout)["sections"]["memory"]
    assert got == {"a": {"$float": "nan"}, "b": {"$float": "inf"}, "c": {"$float": "-inf"}, "d": {"$map": {"$float": "inf"}}}


@pytest.mark.parametrize("kind", ["device", "FIFO"])
def test_a_blob_path_that_is_a_device_or_a_fifo_is_refused_not_taken_empty(tmp_path: Path, kind: str) -> None:
    # it was skipped with a warning and the blob recorded empty, exit 0
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    path = "/dev/null"
    if kind == "FIFO":
        os.mkfifo(tmp_path / "ff")
        path = "ff"
    err = _one_line_error(run_ckpt("take", "s.json", "--blob", f"w={path}", cwd=tmp_path), ExitCode.INVALID_INPUT)
    assert f"blob w: {path} is a {kind}" in err and "regular file or a directory" in err, err
    assert run_ckpt("ls", "--json", cwd=tmp_path).stdout.strip() == b"[]"


def test_latest_of_a_store_whose_only_checkpoint_is_damaged_is_said_damaged_not_empty(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    (manifest,) = (tmp_path / ".ckpt" / "manifests").iterdir()
    _flipped(manifest, manifest, 30)
    for args in (["show", "latest"], ["restore", "latest", "-o", "r.json"], ["export", "latest", "-o", "x.ckpt"]):
        r = run_ckpt(*args, cwd=tmp_path)
        assert r.returncode == ExitCode.CORRUPT, (args, r)
        err = r.stderr.decode()
        assert "no checkpoint of the store" in err and "ckpt verify" in err and "take one" not in err, err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "x.ckpt").exists()


# -- a checkpoint file damaged where no object lies ----------------------------------------
def _flipped(src: Path, dst: Path, offset: int) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= 0x01
    dst.write_bytes(bytes(data))
    return dst


def test_show_and_restore_refuse_a_file_whose_header_or_trailer_is_damaged_as_verify_does(tmp_path: Path) -> None:
    """The header's reserved bytes and the trailing checksum change nothing that is read,
    but verify refuses them (exit 5): so do show and restore, before writing anything."""
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    assert run_ckpt("export", "latest", "-o", "f.ckpt", cwd=tmp_path).returncode == 0
    good = tmp_path / "f.ckpt"
    size = good.stat().st_size
    for offset in (10, 11, size - 32, size - 1):  # reserved header bytes, first and last of the checksum
        g = _flipped(good, tmp_path / "g.ckpt", offset)
        assert run_ckpt("verify", g).returncode == ExitCode.CORRUPT
        for args in (["show", g], ["restore", g, "-o", tmp_path / "out.json"]):
            err = _one_line_error(run_ckpt(*args), ExitCode.CORRUPT)
            assert "file checksum mismatch" in err and "ckpt verify" in err, (offset, err)
        assert not (tmp_path / "out.json").exists()
    assert run_ckpt("show", good).returncode == 0


def test_restore_of_a_version_1_file_checks_its_whole_checksum(tmp_path: Path) -> None:
    fixture = Path(__file__).parent.parent / "fixtures" / "v1" / "agent.ckpt"
    g = _flipped(fixture, tmp_path / "g.ckpt", fixture.stat().st_size - 1)
    assert run_ckpt("verify", g).returncode == ExitCode.CORRUPT
    err = _one_line_error(run_ckpt("restore", g, "-o", tmp_path / "out.json"), ExitCode.CORRUPT)
    assert "file checksum mismatch" in err, err
    assert not (tmp_path / "out.json").exists()
    assert run_ckpt("restore", fixture, "-o", tmp_path / "out.json").returncode == 0


# -- verbs that take a ref of a store, given a checkpoint file -------------------------------
@pytest.mark.parametrize(
    ("args", "then"),
    [
        (["log", "{F}"], "ckpt show"),
        (["tag", "good", "{F}"], "ckpt import"),
        (["branch", "try", "{F}"], "ckpt import"),
        (["reset", "agent:bot", "{F}"], "ckpt import"),
    ],
)
def test_ref_verbs_given_a_checkpoint_file_say_they_take_a_ref_of_a_store(
    store: tuple[Path, list[str]], args: list[str], then: str
) -> None:
    s, made = store
    f = s.parent / "x.ckpt"
    assert run_ckpt("export", made[0], "-o", f, "--store", s).returncode == 0
    refs_before = run_ckpt("refs", "--store", s, "--json").stdout
    for given in (str(f), "x.ckpt"):
        r = run_ckpt(*[given if a == "{F}" else a for a in args], "--store", s, cwd=s.parent)
        err = _one_line_error(r, ExitCode.USAGE)
        assert "takes a reference of a store" in err and "not a checkpoint file" in err and then in err, err
    assert run_ckpt("refs", "--store", s, "--json").stdout == refs_before


@pytest.mark.parametrize("part", ["kind", "manifest length", "manifest", "table", "table length"])
def test_a_file_damaged_in_its_manifest_or_table_says_what_to_do(tmp_path: Path, part: str) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    assert run_ckpt("export", "latest", "-o", "f.ckpt", cwd=tmp_path).returncode == 0
    good = tmp_path / "f.ckpt"
    size = good.stat().st_size
    offset = {"kind": 4, "manifest length": 12, "manifest": 20, "table": size - 40, "table length": size - 36}[part]
    g = _flipped(good, tmp_path / "g.ckpt", offset)
    for verb in ("show", "restore", "verify", "import"):
        err = _one_line_error(run_ckpt(verb, g, cwd=tmp_path), ExitCode.CORRUPT)
        assert "take it again from its source" in err and err.replace(str(g), "").count("damaged") == 1, (verb, err)


# -- a state document nested deeper than ckpt stores ------------------------------------------
@pytest.mark.parametrize(
    ("text", "where"),
    [
        # deeper than the JSON parser recurses: the line says where the 257th level opens
        ('{"a":\n' + "[" * 5000 + "]" * 5000 + "\n}", "deep.json: nesting is deeper than 256 levels (line 2, column 256)"),
        # parsed, then refused by the encoder, which names the path
        ('{"a": ' + "[" * 300 + "]" * 300 + "}", "memory.a[0][0]"),
    ],
    ids=["5000-deep", "300-deep"],
)
def test_a_state_document_nested_too_deep_says_where_the_limit_and_what_to_do(tmp_path: Path, text: str, where: str) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "deep.json").write_text(text)
    err = _one_line_error(run_ckpt("take", "deep.json", cwd=tmp_path), ExitCode.LIMIT_EXCEEDED)
    assert where in err and "nesting is deeper than 256 levels" in err and "; flatten it to 256 levels or fewer" in err, err
    assert "`ckpt take --blob NAME=PATH`" in err, err


@pytest.mark.parametrize(("part", "offset"), [("file version", 8), ("manifest version", 24), ("manifest body", 40)])
def test_a_file_damaged_in_its_header_says_so_once_and_not_to_run_verify(tmp_path: Path, part: str, offset: int) -> None:
    # the decoders' own hints said "run `ckpt verify`" (the command just run, which can say
    # no more of a file that does not open) or repeated "the file is damaged"
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    assert run_ckpt("export", "latest", "-o", "f.ckpt", cwd=tmp_path).returncode == 0
    g = _flipped(tmp_path / "f.ckpt", tmp_path / "g.ckpt", offset)
    for verb in ("verify", "show"):
        err = _one_line_error(run_ckpt(verb, g, cwd=tmp_path), ExitCode.CORRUPT)
        assert err.replace(str(g), "").count("damaged") == 1 and "ckpt verify" not in err, (part, verb, err)
        assert "take it again from its source (`ckpt export` it again)" in err, (part, verb, err)


def test_run_refuses_the_global_json_with_one_line_and_runs_nothing(tmp_path: Path) -> None:
    # `ckpt --json run` ran the program and printed its status lines as ever: the --json
    # was dropped without a word. Its stdout is the program's, so it is refused.
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    marker = tmp_path / "ran"
    r = run_ckpt("--json", "run", "-S", "process:job", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    err = _one_line_error(r, ExitCode.USAGE)
    assert "--json: ckpt run prints no JSON" in err and "`ckpt ls process:job --json`" in err, err
    assert r.stdout == b"" and not marker.exists()
    assert json.loads(run_ckpt("ls", "--json", cwd=tmp_path).stdout) == []


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (["--exclude-path", "("], "--exclude-path '(' is not a regular expression"),
        (["--tolerance", "-1"], "--tolerance must be a number of 0 or more"),
        (["--significant-digits", "-3"], "--significant-digits must be 0 or more"),
    ],
)
@pytest.mark.parametrize("check", [[], ["--check", "no_such_module:step"]], ids=["replay", "check"])
def test_replay_refuses_a_bad_tolerant_option_with_or_without_check(tmp_path: Path, bad: list[str], said: str, check: list[str]) -> None:
    # without --check they were never looked at (the replay printed the state, exit 0);
    # with it, the step function was imported before they were
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", cwd=tmp_path).returncode == 0
    r = run_ckpt("replay", "latest", *check, *bad, cwd=tmp_path)
    err = _one_line_error(r, ExitCode.USAGE)
    assert said in err and r.stdout == b"", err


def test_restore_delete_removes_a_file_written_where_the_take_skipped_a_link_and_keeps_a_link(tmp_path: Path) -> None:
    # the checkpoint skipped x (a link leaving the tree); a regular file written there
    # since is not what it skipped: --delete removes it, as any file made since (it was kept)
    store, work = tmp_path / "s", tmp_path / "W"
    assert run_ckpt("init", store).returncode == 0
    work.mkdir()
    (work / "a").write_text("keep")
    (work / "x").symlink_to("/etc/passwd")
    (work / "y").symlink_to("/etc/hosts")
    doc = tmp_path / "s.json"
    doc.write_text('{"a": 1}')
    took = run_ckpt("--store", store, "take", doc, "-S", "agent:ip", "--blob", f"w={work}")
    assert took.returncode == 0 and took.stderr.decode().count("skipped") == 2, took.stderr
    (work / "x").unlink()
    (work / "x").write_text("POST-CHECKPOINT")
    dry = run_ckpt("--store", store, "restore", "agent:ip", "--in-place", "--delete", "--dry-run", "-o", os.devnull)
    assert dry.returncode == 0 and f"would delete {work / 'x'}" in dry.stdout.decode() and "/y" not in dry.stdout.decode(), dry
    done = run_ckpt("--store", store, "restore", "agent:ip", "--in-place", "--delete", "-o", os.devnull)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(work)) == ["a", "y"] and os.readlink(work / "y") == "/etc/hosts"
    kept = run_ckpt("--store", store, "restore", "agent:ip", "--in-place", "-o", os.devnull)  # without --delete nothing goes
    assert kept.returncode == 0 and sorted(os.listdir(work)) == ["a", "y"]


def test_a_state_restore_that_would_fail_fails_before_the_blobs_are_written(tmp_path: Path) -> None:
    # the blobs were written first and the state after: a state JSON cannot carry (here a
    # NaN taken as msgpack) failed the command with the blobs directory already restored
    import msgpack

    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "f.txt").write_text("data")
    (tmp_path / "s.msgpack").write_bytes(msgpack.packb({"x": float("nan")}))
    assert run_ckpt("take", "s.msgpack", "-S", "agent:f", "--blob", "w=w", cwd=tmp_path).returncode == 0
    for args in (["-o", "back.json"], []):
        got = run_ckpt("restore", "latest", "--format", "json", "--blobs", "out", *args, cwd=tmp_path)
        err = _one_line_error(got, ExitCode.INVALID_INPUT)
        assert "JSON cannot carry" in err and got.stdout == b"", err
        assert not (tmp_path / "out").exists() and not (tmp_path / "back.json").exists()
    done = run_ckpt("restore", "latest", "--blobs", "out", "-o", "back.msgpack", cwd=tmp_path)  # as taken: it restores
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "w" / "f.txt").read_text() == "data"


def _workspace_checkpoint(tmp_path: Path, text: str) -> Path:
    """A store in tmp_path with one checkpoint of state {"a": 1} and blob w = ws/ holding
    a.txt (`text`); returns ws."""
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text(text)
    (tmp_path / "s.json").write_text('{"a": 1}')
    assert run_ckpt("take", "s.json", "-S", "agent:m", "--blob", "w=ws", cwd=tmp_path).returncode == 0
    return ws


@pytest.mark.parametrize("where", ["nodir/state.json", "adir"])
def test_an_output_that_cannot_be_written_fails_a_restore_before_it_changes_a_file(tmp_path: Path, where: str) -> None:
    # the state was written last: the blobs were restored in place (and --delete removed
    # the user's new file), then -o failed, exit 12, and nothing was put back
    ws = _workspace_checkpoint(tmp_path, "original")
    (ws / "a.txt").write_text("modified")
    (ws / "new.txt").write_text("new work")
    (tmp_path / "adir").mkdir()
    got = run_ckpt("restore", "latest", "--in-place", "--delete", "-o", where, cwd=tmp_path)
    _one_line_error(got, ExitCode.IO_ERROR if where.startswith("nodir") else ExitCode.INVALID_INPUT)
    assert (ws / "a.txt").read_text() == "modified" and (ws / "new.txt").read_text() == "new work"
    assert sorted(os.listdir(tmp_path / "adir")) == [] and not (tmp_path / "nodir").exists()


def test_a_state_written_into_the_restored_directory_survives_delete_and_a_failed_blob_restore_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    ws = _workspace_checkpoint(tmp_path, "original")
    # -o inside the directory --delete empties of what the checkpoint does not hold: its
    # temporary file is not taken for an extra
    done = run_ckpt("restore", "latest", "--in-place", "--delete", "-o", "ws/state.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((ws / "state.json").read_text()) == {"a": 1} and (ws / "a.txt").read_text() == "original"
    assert sorted(os.listdir(ws)) == ["a.txt", "state.json"]
    # a blob restore that fails (a directory where the checkpoint has a file, without
    # --overwrite) leaves -o as it was and no temporary file beside it
    (tmp_path / "out" / "w" / "a.txt").mkdir(parents=True)
    (tmp_path / "old.json").write_text("old")
    failed = run_ckpt("restore", "latest", "--blobs", "out", "-o", "old.json", cwd=tmp_path)
    assert failed.returncode != 0 and (tmp_path / "old.json").read_text() == "old", failed.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("old", ".old"))) == ["old.json"]


def test_restore_delete_rolls_a_file_that_became_a_directory_back(tmp_path: Path) -> None:
    # refused, exit 11 "remove it first", while the other way round (a directory that
    # became a file) was replaced: with --delete the directory is what the checkpoint
    # does not hold, and goes as any such file does; without it, still refused
    ws = _workspace_checkpoint(tmp_path, "orig")
    (ws / "a.txt").unlink()
    (ws / "a.txt").mkdir()
    (ws / "a.txt" / "q").write_text("later")
    refused = run_ckpt("restore", "latest", "--no-state", "--in-place", cwd=tmp_path)
    err = _one_line_error(refused, ExitCode.CONFLICT)
    assert "pass --delete" in err and (ws / "a.txt" / "q").read_text() == "later", err
    dry = run_ckpt("restore", "latest", "--no-state", "--in-place", "--delete", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and f"would delete {ws / 'a.txt'}" in dry.stdout.decode(), dry
    assert (ws / "a.txt" / "q").read_text() == "later"
    done = run_ckpt("restore", "latest", "--no-state", "--in-place", "--delete", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (ws / "a.txt").read_text() == "orig" and sorted(os.listdir(ws)) == ["a.txt"]


@pytest.mark.parametrize("where", ["ws/sub", "ws/a.txt", "ws/a.txt/state.json", "/dev/full"])
def test_an_output_the_blob_restore_would_clash_with_fails_before_it_changes_a_file(tmp_path: Path, where: str) -> None:
    # -o a directory the restore makes, a blob's own file, or below a directory the
    # restore replaces by a file: the state was renamed over the blob's file (exit 0) or
    # failed after the blobs were restored and --delete had removed the user's file; a
    # device (full) failed after them too
    ws = _workspace_checkpoint(tmp_path, "original")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("b")
    assert run_ckpt("take", "s.json", "-S", "agent:m", "--blob", "w=ws", cwd=tmp_path).returncode == 0
    (ws / "sub" / "b.txt").unlink()
    (ws / "sub").rmdir()
    if where == "ws/a.txt/state.json":
        (ws / "a.txt").unlink()
        (ws / "a.txt").mkdir()
    (ws / "user.txt").write_text("mine")
    before = {p.relative_to(ws): p.read_bytes() if p.is_file() else None for p in ws.rglob("*")}
    got = run_ckpt("restore", "latest", "--in-place", "--delete", "-o", where, cwd=tmp_path)
    assert got.returncode in (ExitCode.USAGE, ExitCode.IO_ERROR), got.stderr
    err = _one_line_error(got, got.returncode)
    assert "/dev/full" in err or "the state and the blobs would overwrite each other" in err, err
    assert {p.relative_to(ws): p.read_bytes() if p.is_file() else None for p in ws.rglob("*")} == before


def test_a_reader_that_stops_early_on_stdout_never_stops_the_blob_restore(tmp_path: Path) -> None:
    # `restore --in-place | head -c 10` exited 0 with the state cut short and no blob
    # restored (`| true`: the reader is gone before the state is written)
    ws = _workspace_checkpoint(tmp_path, "original")
    (ws / "a.txt").write_text("edited")
    store = tmp_path / ".ckpt"
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} -m ckptcli --store {shlex.quote(str(store))} restore latest --in-place | true",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (ws / "a.txt").read_text() == "original", proc.stderr
