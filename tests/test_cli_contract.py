"""Small contracts of the CLI found by an outside audit: duplicate options refused, user code
that exits or raises a BaseException reported in one line, paths and patterns checked,
a closed pipe ending every command alike."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode


@pytest.fixture
def st(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    return store


def test_take_refuses_a_blob_name_given_twice(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "A").mkdir()
    (tmp_path / "A" / "data.db").write_text("important")
    (tmp_path / "B").mkdir()
    (tmp_path / "B" / "notes.txt").write_text("other")
    r = cli("take", "--store", st, "--blob", f"ws={tmp_path / 'A'}", "--blob", f"ws={tmp_path / 'B'}")
    assert r.code == ExitCode.INVALID_INPUT, r  # as every other wrong --blob (it was 2, the only one)
    assert r.err.count("\n") == 1 and "--blob ws=" in r.err and "twice" in r.err, r.err
    assert json.loads(cli("ls", "--store", st, "--json").out) == []  # nothing taken


HOSTILE_USER_CODE = """
import sys
from ckptcli.schema.migrations import migration

SCHEMA_VERSION = 2

def exit0(state):
    sys.exit(0)  # a helper that 'exits on success'

def exit3(state):
    sys.exit(3)  # would read as exit 3, no such checkpoint

def genexit(state):
    raise GeneratorExit

@migration(from_=1, to=2)
def up(state):
    sys.exit(0)
"""


def test_user_code_that_exits_or_raises_a_base_exception_is_one_line(
    cli, st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "hostile_user_code.py").write_text(HOSTILE_USER_CODE)
    monkeypatch.syspath_prepend(str(mods))
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"memory": {"ok": True}}))
    good = cli("take", doc, "--store", st, "-S", "agent:b").out.strip()
    doc.write_text(json.dumps({"memory": {"ok": False}}))
    for _ in range(3):
        assert cli("take", doc, "--store", st, "-S", "agent:b").code == 0
    for func, did in (("exit0", "called sys.exit(0)"), ("exit3", "called sys.exit(3)"), ("genexit", "raised GeneratorExit")):
        r = cli("bisect", "agent:b", "--store", st, "--good", good, "--check", f"hostile_user_code:{func}", "--json")
        assert r.code == ExitCode.INVALID_INPUT, (func, r)
        assert r.out == "" and r.err.count("\n") == 1 and f"the check hostile_user_code:{func} {did}" in r.err, r.err

    # a migration step that calls sys.exit(0): the migration failed (exit 1), nothing migrated
    doc.write_text(json.dumps({"memory": {"v": 9}}))
    old = cli("take", doc, "--store", st, "-S", "agent:q", "--schema-version", "1").out.strip()
    r = cli("migrate", old, "--store", st, "-M", "hostile_user_code", "--json")
    assert r.code == ExitCode.FAILURE, r
    assert r.err.count("\n") == 1 and "migration 1->2" in r.err and "called sys.exit(0)" in r.err, r.err
    assert [c["id"] for c in json.loads(cli("ls", "--store", st, "--subject", "agent:q", "--json").out)] == [old]

    # a compat adapter that calls sys.exit: that checkpoint is incompatible, named so
    r = cli("compat", "--store", st, "--subject", "agent:b", "--adapter", "hostile_user_code:exit3", "--json")
    assert r.code == ExitCode.FAILURE, r
    assert "called sys.exit(3)" in r.out, r.out


def _take(cli, st: Path, tmp_path: Path, doc: object, *args: str) -> str:  # type: ignore[no-untyped-def]
    f = tmp_path / "doc.json"
    f.write_text(json.dumps(doc))
    r = cli("take", f, "--store", st, *args)
    assert r.code == 0, r.err
    return str(r.out.strip())


def test_output_paths_patterns_and_pointers_are_checked(cli, st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("x")
    _take(cli, st, tmp_path, {"memory": {"v": 1}}, "-S", "agent:bot", "--blob", f"ws={ws}")
    monkeypatch.chdir(tmp_path)
    # -o '' was taken for '.', "cannot write .: it is a directory"
    r = cli("restore", "latest", "--store", st, "-o", "")
    assert r.code == ExitCode.USAGE and "the path is empty" in r.err, r
    # the system's reason, then what to do
    r = cli("restore", "latest", "--store", st, "-o", "nodir/x")
    assert r.code == ExitCode.IO_ERROR and r.err.count("\n") == 1, r
    assert "No such file or directory; create the directory nodir first" in r.err, r.err
    (tmp_path / "afile").write_text("")
    r = cli("restore", "latest", "--store", st, "-o", "afile/x")
    assert r.code == ExitCode.IO_ERROR and "Not a directory; a part of the path is a file" in r.err, r.err
    # RFC 6901: ~0 and ~1 are the only escapes
    r = cli("log", "agent:bot", "--store", st, "--path", "/memory/~2")
    assert r.code == ExitCode.USAGE and "~0 or ~1" in r.err, r
    assert cli("log", "agent:bot", "--store", st, "--path", "/memory/~0~1").code == 0
    # an --include that matches nothing is a typo, not a restore of nothing
    out = tmp_path / "out"
    r = cli("restore", "latest", "--store", st, "--no-state", "--blobs", out, "--include", "ws/src/*.py", "--include", "typo/*")
    assert r.code == ExitCode.NOT_FOUND and "--include 'typo/*' matches no path" in r.err, r
    assert not out.exists()
    r = cli("restore", "latest", "--store", st, "--no-state", "--blobs", out, "--include", "ws/src/*.py", "--include", "a.py")
    assert r.code == 0 and (out / "ws" / "src" / "a.py").read_text() == "x", r


def test_store_given_twice_is_refused_unless_the_same(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "other"
    assert cli("init", other).code == 0
    for args in (("--store", st, "-s", other, "ls"), ("ls", "--store", st, "-s", other), ("ls", f"--store={st}", "--store", other)):
        r = cli(*args)
        assert r.code == ExitCode.USAGE and "--store is given 2 times" in r.err, (args, r)
    assert cli("ls", "--store", st, "--store", f"{st}/").code == 0
    # one before the verb and one after it: the one after wins, as documented
    assert cli("--store", other, "ls", "--store", st).code == 0


def test_a_closed_pipe_ends_every_command_quietly_with_0(tmp_path: Path) -> None:
    """`ckpt log | head`: log and ls-files exited 1 (typer's and rich's EPIPE handling),
    cat and stats 0; all exit 0 now, with nothing on stderr (docs/exit-codes.md)."""
    import subprocess
    import sys

    from tests.conftest import run_ckpt

    st = tmp_path / "store"
    assert run_ckpt("init", st).returncode == 0
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(3000):
        (ws / f"file-{i:05d}").write_text("x")
    big = "m" * 100_000
    for i in range(3):
        r = run_ckpt(
            "take", "-", "--store", st, "-m", big, "--blob", f"ws={ws}", input=json.dumps({"memory": {"v": i, "big": big}}).encode()
        )
        assert r.returncode == 0, r.stderr
    for env in ({"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}):
        for args in (
            ("log", "agent:default"),
            ("ls-files", "latest"),
            ("ls", "--no-pager"),
            ("cat", "latest"),
            ("show", "latest", "--section", "memory"),
            ("stats",),
        ):
            p = subprocess.Popen(
                [sys.executable, "-m", "ckptcli", *args, "--store", str(st)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **env},
            )
            assert p.stdout is not None and p.stderr is not None
            p.stdout.read(10)
            p.stdout.close()  # the reader went away, as `head` does
            err = p.stderr.read()
            p.stderr.close()
            assert p.wait(timeout=120) == 0, (args, env, err)
            assert err == b"", (args, env, err)


def test_an_export_to_stdout_cut_short_fails_with_12(tmp_path: Path) -> None:
    """`ckpt export latest -o - | ssh host ckpt import -` with the transfer cut: the reader
    got part of a checkpoint file, so export must not look successful (exit 12, one line),
    where a listing cut by `head` ends quietly with 0 (the test above)."""
    import subprocess
    import sys

    from tests.conftest import run_ckpt

    st = tmp_path / "store"
    assert run_ckpt("init", st).returncode == 0
    blob = tmp_path / "weights.bin"
    blob.write_bytes(os.urandom(2 << 20))  # far more than a pipe holds
    assert run_ckpt("take", "-", "--store", st, "--blob", f"w={blob}", input=b'{"memory": {"v": 1}}').returncode == 0
    p = subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "export", "latest", "-o", "-", "--store", str(st)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(1000)
    p.stdout.close()  # the transfer was cut
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=120) == ExitCode.IO_ERROR, err
    assert err.count("\n") == 1 and err.startswith("ckpt: error: ") and "incomplete" in err and "Traceback" not in err, err
    whole = run_ckpt("export", "latest", "-o", "-", "--store", st)  # and a reader that takes it all: 0
    assert whole.returncode == 0 and len(whole.stdout) > 2 << 20, whole.stderr


def test_log_says_when_it_stops_at_a_dropped_parent(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c1 = _take(cli, st, tmp_path, {"memory": {"v": 1}}, "-S", "agent:bot")
    packs = st / ".ckpt" / "packs" if (st / ".ckpt").is_dir() else st / "packs"
    before = {p for p in packs.rglob("*") if p.is_file()}
    blob = tmp_path / "u.bin"
    blob.write_bytes(os.urandom(100_000))
    c2 = _take(cli, st, tmp_path, {"memory": {"v": 2}}, "-S", "agent:bot", "--blob", f"d={blob}")
    only_c2 = {p for p in packs.rglob("*") if p.is_file()} - before
    c3 = _take(cli, st, tmp_path, {"memory": {"v": 3}}, "-S", "agent:bot")
    c4 = _take(cli, st, tmp_path, {"memory": {"v": 4}}, "-S", "agent:bot")
    r = cli("log", "agent:bot", "--store", st, "--json")
    assert [e["id"] for e in json.loads(r.out)] == [c4, c3, c2, c1] and r.err == ""  # a root: nothing said
    assert only_c2
    for p in only_c2:
        p.unlink()  # the pack only C2 needs is lost
    assert cli("repair", "index", "--store", st).code in (0, ExitCode.CORRUPT)
    r = cli("repair", "checkpoints", "--drop", "--force", "--store", st)
    assert r.code == 0, r
    r = cli("log", "agent:bot", "--store", st, "--json")
    assert r.code == 0 and [e["id"] for e in json.loads(r.out)] == [c4, c3], r  # stdout stays the JSON
    assert r.err.count("\n") == 1 and f"stops at {c3[:12]}: its parent {c2[:12]} is not in the store" in r.err, r.err
    r = cli("log", "agent:bot", "--store", st)
    assert r.out.count("checkpoint ") == 2 and "stops at" in r.err
    assert "keep it as their parent, so their history breaks there" in " ".join(
        cli("repair", "--help").out.split()
    )  # what --drop does below it


def test_every_store_io_error_says_what_to_do() -> None:
    import errno

    from ckptcli.store.backend import io_error

    for code in (errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.EIO, errno.ENOSPC, errno.EACCES):
        msg = str(io_error(OSError(code, os.strerror(code)), "append to", "logs/refs/latest/agent/bot"))
        assert msg.startswith(f"cannot append to logs/refs/latest/agent/bot: {os.strerror(code)}; "), msg


#: commands that print no JSON, and why: `--json` is not theirs to take
_NO_JSON = {
    "completion": "prints a shell script",
    "dump": "streams a file's bytes",
    "help": "prints help",
    "run": "runs a program; `ckpt checkpoint --json` and `ckpt halt --json` answer for it",
    "tui": "is a terminal application",
}


def test_every_command_that_prints_takes_json_as_its_own_option() -> None:
    # `ckpt cat REF --json` was refused ("no such option") while `ckpt --json cat REF` worked
    import typer.main

    from ckptcli.cli.app import app, load

    load(["help"])  # every command registered
    missing = []
    for name, command in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None) or {"": command}
        for sub, c in subs.items():
            if "--json" not in {o for p in c.params for o in getattr(p, "opts", [])} and name not in _NO_JSON:
                missing.append(f"{name} {sub}".strip())
    assert missing == []
