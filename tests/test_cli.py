"""The everyday verbs through the CLI: take / ls / show / cat / restore / tag / branch /
refs / export / import, references, filters, --json, NO_COLOR and error lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgpack
import pytest

from ckptcli.errors import ExitCode
from tests.conftest import run_ckpt


@pytest.fixture
def st(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    return store


def _take(cli, store: Path, tmp_path: Path, doc: object, *args: str) -> str:  # type: ignore[no-untyped-def]
    f = tmp_path / "doc.json"
    f.write_text(json.dumps(doc))
    r = cli("take", f, "--store", store, *args)
    assert r.code == 0, r.err
    return r.out.strip()


def test_take_ls_show_restore(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st, tmp_path, {"memory": {"goal": "a"}, "plan": [1]}, "-S", "agent:bot", "-l", "run=1", "-m", "first")
    b = _take(cli, st, tmp_path, {"memory": {"goal": "b"}, "plan": [1, 2]}, "-S", "agent:bot", "-l", "run=2")
    c = _take(cli, st, tmp_path, [1, 2, 3], "-S", "workflow:etl")
    rows = json.loads(cli("ls", "--store", st, "--json").out)
    assert [r["id"] for r in rows] == [c, b, a]
    assert rows[1]["parents"] == [a] and rows[2]["parents"] == []
    assert [r["id"] for r in json.loads(cli("ls", "--store", st, "--json", "--subject", "agent:bot").out)] == [b, a]
    assert [r["id"] for r in json.loads(cli("ls", "--store", st, "--json", "-l", "run=1").out)] == [a]
    assert [r["id"] for r in json.loads(cli("ls", "--store", st, "--json", "--limit", "1").out)] == [c]
    assert json.loads(cli("ls", "--store", st, "--json", "--since", "1h").out)
    assert json.loads(cli("ls", "--store", st, "--json", "--until", "2000-01-01").out) == []
    info = json.loads(cli("show", a[:8], "--store", st, "--json").out)
    assert info["id"] == a and info["labels"] == {"run": "1"} and info["message"] == "first"
    assert info["sections"]["plan"] == {"type": "list", "items": 1, "bytes": 8}
    assert json.loads(cli("show", "agent:bot", "--store", st, "--section", "memory", "--json").out) == {"goal": "b"}
    assert json.loads(cli("restore", "agent:bot~1", "--store", st).out) == {"memory": {"goal": "a"}, "plan": [1]}
    assert json.loads(cli("restore", "latest", "--store", st).out) == [1, 2, 3]
    cat = json.loads(cli("cat", b, "--store", st).out)
    assert cat["sections"] == {"memory": {"goal": "b"}, "plan": [1, 2]}


def test_msgpack_documents_keep_bytes_and_big_integers(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    doc = {"memory": {"blob": b"\x00\xff", "n": 2**80, "nan": float("inf")}}
    f = tmp_path / "doc.msgpack"
    f.write_bytes(
        msgpack.packb(
            {"memory": {"blob": b"\x00\xff", "n": msgpack.ExtType(1, (2**80).to_bytes(11, "big", signed=True)), "nan": float("inf")}}
        )
    )
    cid = cli("take", f, "--store", st).out.strip()
    out = tmp_path / "back.msgpack"
    assert cli("restore", cid, "--store", st, "-o", out).code == 0  # msgpack in, msgpack out
    back = msgpack.unpackb(out.read_bytes(), ext_hook=lambda c, d: int.from_bytes(d, "big", signed=True))
    assert back == doc
    r = cli("restore", cid, "--store", st, "--format", "json")
    assert r.code == ExitCode.INVALID_INPUT and "--format msgpack" in r.err
    cat = json.loads(cli("cat", cid, "--store", st).out)
    assert cat["sections"]["memory"]["blob"] == {"$bytes": "AP8="}
    assert cat["sections"]["memory"]["nan"] == {"$float": "inf"}


def test_tags_branches_refs(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = _take(cli, st, tmp_path, {"memory": 1})
    assert cli("tag", "good", "--store", st).code == 0
    b = _take(cli, st, tmp_path, {"memory": 2})
    assert cli("tag", "good", b, "--store", st).code == ExitCode.CONFLICT
    assert cli("tag", "good", b, "--store", st, "--force").code == 0
    assert json.loads(cli("tag", "--store", st, "--json").out) == {"good": b}
    assert cli("branch", "exp", a, "--store", st).code == 0
    c = _take(cli, st, tmp_path, {"memory": 3}, "--branch", "exp")
    assert json.loads(cli("show", c, "--store", st, "--json").out)["parents"] == [a]
    assert json.loads(cli("branch", "--store", st, "--json").out) == {"exp": c}
    refs = json.loads(cli("refs", "--store", st, "--json").out)
    assert refs == {"branches/exp": c, "latest/agent/default": c, "tags/good": b}
    assert cli("tag", "--delete", "good", "--store", st).code == 0
    assert cli("show", "good", "--store", st).code == ExitCode.NOT_FOUND
    d = _take(cli, st, tmp_path, {"memory": 4}, "--parent", a, "--parent", b)
    assert json.loads(cli("show", d, "--store", st, "--json").out)["parents"] == [a, b]
    e = _take(cli, st, tmp_path, {"memory": 5}, "--root")
    assert json.loads(cli("show", e, "--store", st, "--json").out)["parents"] == []


def test_blobs_export_import(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    (work / "d" / "f.bin").write_bytes(os.urandom(150_000))
    (work / "a.txt").write_text("a")
    cid = _take(cli, st, tmp_path, {"memory": {"x": 1}}, "--blob", f"ws={work}", "--blob", f"one={work / 'a.txt'}")
    out = tmp_path / "out"
    assert cli("restore", cid, "--store", st, "--blobs", out, "--no-state").code == 0
    assert (out / "ws" / "d" / "f.bin").read_bytes() == (work / "d" / "f.bin").read_bytes()
    assert (out / "one").read_text() == "a"
    again = cli("restore", cid, "--store", st, "--blobs", out, "--no-state")
    assert again.code == ExitCode.CONFLICT and "--overwrite" in again.err
    assert cli("restore", cid, "--store", st, "--blobs", out, "--no-state", "--overwrite").code == 0
    f = tmp_path / "x.ckpt"
    assert cli("export", cid, "-o", f, "--store", st).code == 0
    other = tmp_path / "other"
    cli("init", other)
    assert cli("import", f, "--store", other).out.strip() == cid
    assert json.loads(cli("ls", f, "--json").out)[0]["id"] == cid
    sections = json.loads(cli("show", f, "--json").out)["sections"]
    assert sections["blobs"]["files"] == 3


def test_errors_are_one_line_with_documented_codes(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cases = [
        (("show", "nope", "--store", st), ExitCode.NOT_FOUND),
        (("show", "latest", "--store", st), ExitCode.NOT_FOUND),
        (("ls", "--store", tmp_path / "missing"), ExitCode.NO_STORE),
        (("init", st), ExitCode.CONFLICT),
        (("take", "--store", st), ExitCode.INVALID_INPUT),
        (("take", tmp_path / "missing.json", "--store", st), ExitCode.NOT_FOUND),
        (("take", tmp_path, "--store", st), ExitCode.INVALID_INPUT),
        (("take", "-", "--store", st, "-S", "robot:x"), ExitCode.INVALID_INPUT),
        (("ls", "--store", st, "--since", "yesterday"), ExitCode.INVALID_INPUT),
        (("show", "latest~x", "--store", st), ExitCode.INVALID_INPUT),
        (("take", "--blob", "noequals", "--store", st), ExitCode.INVALID_INPUT),
        (("take", "--blob", f"bad/name={tmp_path}", "--store", st), ExitCode.INVALID_INPUT),
        (("show",), ExitCode.USAGE),
        (("frobnicate",), ExitCode.USAGE),
    ]
    for args, code in cases:
        r = cli(*args)
        assert r.code == code, (args, r.code, r.err)
        if code != ExitCode.USAGE:
            assert r.err.count("\n") == 1 and r.err.startswith("ckpt: error: "), (args, r.err)


def test_prefixes_resolve_and_ambiguity_is_refused(cli, st: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cid = _take(cli, st, tmp_path, {"memory": 1})
    assert json.loads(cli("show", cid[:4], "--store", st, "--json").out)["id"] == cid
    assert cli("show", cid[:3], "--store", st).code == ExitCode.NOT_FOUND  # fewer than 4 digits is not an id
    # a second manifest sharing the first 6 digits (a copy under another name: resolve
    # matches names; reading the copy would then report it damaged)
    twin = cid[:6] + ("0" if cid[6] != "0" else "1") + cid[7:]
    (st / "manifests" / twin).write_bytes((st / "manifests" / cid).read_bytes())
    r = cli("show", cid[:6], "--store", st)
    assert r.code == ExitCode.INVALID_INPUT and "ambiguous" in r.err
    assert json.loads(cli("show", cid[:7], "--store", st, "--json").out)["id"] == cid
    r = cli("show", twin, "--store", st)
    assert r.code == ExitCode.CORRUPT and "does not match its name" in r.err


def test_store_is_found_by_walking_up(tmp_path: Path) -> None:
    assert run_ckpt("init", cwd=tmp_path).returncode == 0
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert run_ckpt("take", "-", input=b'{"memory": 1}', cwd=sub).returncode == 0
    assert len(json.loads(run_ckpt("ls", "--json", cwd=sub).stdout)) == 1
    env_store = run_ckpt("ls", "--json", env={"CKPT_STORE": str(tmp_path / ".ckpt")}, cwd="/")
    assert len(json.loads(env_store.stdout)) == 1


def test_no_color_is_respected(tmp_path: Path) -> None:
    run_ckpt("init", tmp_path / "s")
    run_ckpt("take", "-", "--store", tmp_path / "s", input=b'{"memory": 1}')
    colored = run_ckpt("show", "latest", "--section", "memory", "--store", tmp_path / "s", env={"FORCE_COLOR": "1"})
    plain = run_ckpt("show", "latest", "--section", "memory", "--store", tmp_path / "s", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert b"\x1b[" in colored.stdout  # the check can see colour when there is some
    assert b"\x1b[" not in plain.stdout


def test_version_and_help(cli) -> None:  # type: ignore[no-untyped-def]
    import ckptcli

    assert cli("--version").out.strip() == f"ckpt {ckptcli.__version__}"
    r = cli("--help")
    assert r.code == 0 and "Commands" in r.out


def test_init_makes_the_store_every_other_command_would_use(tmp_path: Path) -> None:
    """`ckpt --store X init` and `CKPT_STORE=X ckpt init` make X (as `restic -r X init`),
    not ./.ckpt beside it; PATH and a different --store are two stores: a usage error."""
    work = tmp_path / "work"
    work.mkdir()
    r = run_ckpt("--store", tmp_path / "a", "init", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a" / "config").is_file() and not (work / ".ckpt").exists()
    r = run_ckpt("init", env={"CKPT_STORE": str(tmp_path / "b")}, cwd=work)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b" / "config").is_file() and not (work / ".ckpt").exists()
    assert run_ckpt("ls", env={"CKPT_STORE": str(tmp_path / "b")}, cwd=work).returncode == 0
    r = run_ckpt("--store", tmp_path / "c", "init", tmp_path / "d", cwd=work)
    assert r.returncode == ExitCode.USAGE and b"name two different stores" in r.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
    r = run_ckpt("init", tmp_path / "e", env={"CKPT_STORE": str(tmp_path / "b")}, cwd=work)
    assert r.returncode == 0 and (tmp_path / "e" / "config").is_file()  # PATH given: the environment is only a default


def test_a_take_that_latest_passed_over_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Concurrent takes of one subject: latest never moves back to an older one, and the take
    that was passed over says so (stderr note, "latest_moved" in --json) instead of nothing."""
    import dataclasses
    import json

    from ckptcli import api
    from ckptcli.cli.commands import take as take_cmd

    st = api.init_store(tmp_path / "s")
    result = dataclasses.replace(api.take(st, {"memory": {}}, subject="agent:z"), latest_moved=False)
    take_cmd._report(result, None, as_json=False)
    assert "latest of agent:z stays at a newer checkpoint" in capsys.readouterr().err
    take_cmd._report(result, None, as_json=True)
    assert json.loads(capsys.readouterr().out)["latest_moved"] is False


def test_an_in_process_run_gives_the_caller_its_notice_handlers_back(tmp_path: Path) -> None:
    """`app.run` left the CLI's warning handler installed: every store opened later in the
    process printed its warnings instead of giving them to the caller (a library's
    ThreadForkWarning was never raised in a test run after a CLI test)."""
    from ckptcli import notices
    from ckptcli.cli.app import run

    mine: list[str] = []
    notices.set_handler(mine.append)
    try:
        assert run(["--store", str(tmp_path / "none"), "ls"]) == 10
        assert notices.handler() == mine.append and notices.info_handler() is None
        notices.set_handler(None)
        run(["--version"])
        assert notices.handler() is None
    finally:
        notices.set_handler(None)
