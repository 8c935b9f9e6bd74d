"""Refs and CLI habits: migrate and fork leave `latest` alone, `ckpt reset` and the
reflog undo a move, exit codes and one-line usage errors, the lock holder is named,
global options before the verb, one meaning per short flag, completion, `ckpt help`,
and an `ls` that fits the terminal."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take
from ckptcli.errors import ExitCode
from tests.conftest import REPO, run_ckpt

MIGRATIONS = "tests.schema_example.migrations"
V1 = {"memory": {"notes": "refund promised", "user": "Ada Lovelace"}, "plan": ["check order"]}


@pytest.fixture
def st(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _latest(store: Path, subject: str) -> str:
    return open_checkpoint(subject, open_store(store)).hex


def _take(store: Path, doc: Any, subject: str = "agent:bot", **kw: Any) -> str:
    return take(open_store(store), doc, subject=subject, **kw).hex


# -- 1. migrate and fork never move latest away from the newest state --------------------------------------


def test_migrating_an_old_checkpoint_keeps_latest(cli: Any, st: Path) -> None:
    old = _take(st, V1, schema_version=1)
    new = _take(st, {**V1, "plan": ["check order", "refund"]}, schema_version=1)
    r = cli("migrate", old, "--migrations", MIGRATIONS, "--store", st, "--json")
    assert r.code == 0, r.err
    migrated = json.loads(r.out)["id"]
    assert _latest(st, "agent:bot") == new  # was: the migrated old state
    assert json.loads(r.out)["latest_moved"] is False
    # and the next take still extends the newest state, not the migrated one
    nxt = _take(st, {"memory": {}})
    assert open_checkpoint(nxt, open_store(st)).manifest.parents[0].hex() == new
    # asked for, latest moves
    r = cli("migrate", old, "--migrations", MIGRATIONS, "--store", st, "--to", "2", "--move-latest", "--json")
    assert r.code == 0, r.err
    assert _latest(st, "agent:bot") == json.loads(r.out)["id"] != migrated


def test_migrating_the_latest_itself_upgrades_in_place(cli: Any, st: Path) -> None:
    _take(st, V1, schema_version=1)
    r = cli("migrate", "agent:bot", "--migrations", MIGRATIONS, "--store", st, "--json")
    assert r.code == 0, r.err
    assert _latest(st, "agent:bot") == json.loads(r.out)["id"] and json.loads(r.out)["latest_moved"] is True


def _with_tail(store: Path) -> str:
    events = [{"seq": 1, "ts": 1, "kind": "plan.push", "item": "a"}, {"seq": 2, "ts": 2, "kind": "plan.push", "item": "b"}]
    return _take(store, {"memory": {}, "plan": [], "events": events})


def test_fork_keeps_latest_unless_asked(cli: Any, st: Path) -> None:
    head = _with_tail(st)
    r = cli("fork", head, "--at", "1", "--store", st, "--json")
    assert r.code == 0, r.err
    fork = json.loads(r.out)["id"]
    assert _latest(st, "agent:bot") == head  # was: the fork, an earlier state
    nxt = _take(st, {"memory": {}})  # the fork left no head hint behind either
    assert open_checkpoint(nxt, open_store(st)).manifest.parents[0].hex() == head
    r = cli("fork", nxt, "--at", "0", "--store", st, "--json", "--move-latest")
    assert r.code == 0, r.err
    assert _latest(st, "agent:bot") == json.loads(r.out)["id"] != fork


# -- reset and the reflog ---------------------------------------------------------------------------------


def test_reset_moves_latest_and_the_reflog_undoes_it(cli: Any, st: Path) -> None:
    a = _take(st, {"memory": {"v": 1}})
    b = _take(st, {"memory": {"v": 2}})
    r = cli("reset", "agent:bot", a, "--store", st)
    assert r.code == 0, r.err
    assert json.loads(cli("restore", "agent:bot", "--store", st).out) == {"memory": {"v": 1}}
    rows = json.loads(cli("reflog", "agent:bot", "--store", st, "--json").out)
    assert [(x["old"], x["new"]) for x in rows] == [(b, a), (a, b), (None, a)]
    assert rows[0]["reason"].startswith("reset") and rows[1]["reason"].startswith("take")
    assert rows[0]["ref"] == "latest/agent/bot" and rows[0]["pid"] > 0 and rows[0]["host"]
    assert "ckpt reset" in rows[0]["command"]
    r = cli("reset", "agent:bot", "agent:bot@{1}", "--store", st, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"subject": "agent:bot", "old": a, "new": b}
    assert _latest(st, "agent:bot") == b
    # a take after a reset extends the reset target
    assert cli("reset", "agent:bot", a, "--store", st).code == 0
    c = _take(st, {"memory": {"v": 3}})
    assert open_checkpoint(c, open_store(st)).manifest.parents[0].hex() == a


def test_reset_refuses_another_subjects_checkpoint(cli: Any, st: Path) -> None:
    _take(st, {"memory": 1})
    other = _take(st, {"memory": 2}, subject="agent:other")
    r = cli("reset", "agent:bot", other, "--store", st)
    assert r.code == ExitCode.INVALID_INPUT and r.err.startswith("ckpt: error:") and r.err.count("\n") == 1


def test_reflog_lists_tags_and_branches_newest_first(cli: Any, st: Path) -> None:
    a = _take(st, {"memory": 1})
    assert cli("tag", "good", a, "--store", st).code == 0
    assert cli("branch", "exp", a, "--store", st).code == 0
    r = cli("tag", "-d", "good", "--store", st, "--json")
    assert r.code == 0 and json.loads(r.out) == {"name": "good", "deleted": a}
    r = cli("branch", "-d", "exp", "--store", st, "--json")
    assert r.code == 0 and json.loads(r.out) == {"name": "exp", "deleted": a}
    rows = json.loads(cli("reflog", "--store", st, "--json").out)
    assert [(x["ref"], x["old"], x["new"]) for x in rows] == [
        ("branches/exp", a, None),
        ("tags/good", a, None),
        ("branches/exp", None, a),
        ("tags/good", None, a),
        ("latest/agent/bot", None, a),
    ]
    assert [x["ref"] for x in json.loads(cli("reflog", "good", "--store", st, "--json").out)] == ["tags/good", "tags/good"]
    text = cli("reflog", "--store", st).out
    assert "tags/good@{0}" in text and a[:12] in text


def test_a_torn_reflog_entry_is_skipped_with_a_warning(cli: Any, st: Path) -> None:
    a = _take(st, {"memory": 1})
    log = st / "logs" / "refs" / "latest" / "agent" / "bot"
    with open(log, "ab") as fh:
        fh.write(b'{"old": "ab", "new"')  # a write cut short by a crash
    r = cli("reflog", "agent:bot", "--store", st, "--json")
    assert r.code == 0 and [x["new"] for x in json.loads(r.out)] == [a]
    assert "ckpt: warning:" in r.err and "Traceback" not in r.err
    b = _take(st, {"memory": 2})  # the next entry starts on a line of its own
    assert [x["new"] for x in json.loads(cli("reflog", "agent:bot", "--store", st, "--json").out)] == [b, a]


def test_a_torn_reflog_entry_stays_until_the_next_entry_not_a_tag_force_to_the_same_target(cli: Any, st: Path) -> None:
    a, b = _take(st, {"memory": 1}), _take(st, {"memory": 2})
    assert cli("tag", "good", a, "--store", st).code == 0
    with open(st / "logs" / "refs" / "tags" / "good", "ab") as fh:
        fh.write(b'{"old": "ab", "new"')  # a write cut short by a crash
    assert cli("tag", "good", a, "--force", "--store", st).code == 0  # names what it named: no entry
    r = cli("reflog", "good", "--store", st, "--json")
    assert "the next entry recorded in this reflog removes it" in r.err, r.err
    assert cli("tag", "good", b, "--force", "--store", st).code == 0
    r = cli("reflog", "good", "--store", st, "--json")
    assert "cut short" not in r.err and [x["new"] for x in json.loads(r.out)] == [b, a], r.err


# -- 2. exit codes, usage errors, the lock holder ----------------------------------------------------------


def test_migrate_with_nothing_to_do_exits_0(cli: Any, st: Path) -> None:
    cid = _take(st, V1, schema_version=3)
    r = cli("migrate", cid, "--migrations", MIGRATIONS, "--store", st)
    assert r.code == 0, r.err
    assert "nothing to migrate" in r.out
    r = cli("migrate", cid, "--migrations", MIGRATIONS, "--store", st, "--json")
    assert r.code == 0 and json.loads(r.out)["id"] == cid and json.loads(r.out)["migrated"] is False


def test_init_on_a_file_is_an_io_error(cli: Any, tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    r = cli("init", f)
    assert r.code == ExitCode.IO_ERROR and r.err.count("\n") == 1, r.err


@pytest.mark.parametrize("argv", [["ls", "--bogus"], ["take", "--subject"], ["nosuchverb"], ["tag", "a", "b", "c"]])
def test_usage_errors_are_one_line_exit_2(cli: Any, st: Path, argv: list[str]) -> None:
    r = cli(*argv)
    assert r.code == ExitCode.USAGE
    assert r.err.startswith("ckpt: error: ") and r.err.count("\n") == 1, r.err
    assert "--help" in r.err and r.out == ""


def test_a_take_waiting_for_the_lock_says_who_holds_it(st: Path) -> None:
    store = open_store(st)
    doc = st.parent / "doc.json"
    doc.write_text('{"memory": 1}')
    lines: queue.Queue[bytes] = queue.Queue()
    with store.backend.lock("store", shared=False):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckptcli", "take", str(doc), "--store", str(st)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stderr.readline, b"")], daemon=True)
        reader.start()
        # the lock is let go once the take has said it waits (however long a loaded machine takes to start it)
        first = lines.get(timeout=120)
        assert proc.poll() is None, first
    assert proc.wait(timeout=60) == 0
    reader.join(timeout=10)
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()
    text = (first + b"".join(lines.get() for _ in range(lines.qsize()))).decode()
    assert f"pid {os.getpid()}" in text and text.count("waiting for the store lock") == 1, text


# -- 3. global options before the verb, short flags, quiet, completion, help -------------------------------


def test_global_options_before_the_verb(cli: Any, st: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _take(st, {"memory": 1})
    r = cli("--store", st, "ls", "--json")
    assert r.code == 0, r.err
    assert [x["id"] for x in json.loads(r.out)] == [a]
    assert [x["id"] for x in json.loads(cli("--json", "--store", st, "ls").out)] == [a]
    assert [x["id"] for x in json.loads(cli("-s", st, "--json", "ls").out)] == [a]
    assert json.loads(cli("--json", "-s", st, "refs").out) == {"latest/agent/bot": a}
    # before the verb beats CKPT_STORE; after the verb beats both
    monkeypatch.setenv("CKPT_STORE", str(tmp_path / "nowhere"))
    assert cli("--store", st, "ls").code == 0
    assert cli("--store", tmp_path / "nowhere", "ls", "--store", st).code == 0
    # --quiet and --no-color before and after the verb
    assert cli("-q", "--no-color", "--store", st, "ls").code == 0
    assert cli("ls", "-q", "--no-color", "--store", st).code == 0


def test_global_options_keep_the_per_verb_import(st: Path) -> None:
    code = (
        "import sys; from ckptcli.cli.app import _register; _register(sys.argv[1:]);"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('ckptcli.cli.commands.')))"
    )
    p = subprocess.run([sys.executable, "-c", code, "--store", str(st), "--json", "-q", "ls"], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "['ls']", p.stderr


def test_one_meaning_per_short_flag() -> None:
    from ckptcli.cli.app import _register, build_command

    _register()
    group = build_command()
    meaning: dict[str, set[str]] = {}
    for cmd in group.commands.values():
        for p in cmd.params:
            longs = [o for o in p.opts if o.startswith("--")]
            for o in p.opts + p.secondary_opts:
                if len(o) == 2 and o.startswith("-"):
                    meaning.setdefault(o, set()).update(longs)
    clashes = {k: v for k, v in meaning.items() if len(v) > 1}
    assert clashes == {}
    assert meaning["-m"] == {"--message"} and meaning["-b"] == {"--branch"} and meaning["-n"] == {"--dry-run"}
    assert meaning["-M"] == {"--migrations"} and meaning["-q"] == {"--quiet"}


def test_quiet_silences_notices_not_errors(cli: Any, st: Path) -> None:
    head = _with_tail(st)
    r = cli("fork", head, "--at", "1", "--store", st)
    assert r.code == 0 and "forked" in r.err
    r = cli("fork", head, "--at", "1", "--store", st, "-q")
    assert r.code == 0 and r.err == ""
    assert "replayed" in cli("replay", head, "--store", st).err
    r = cli("replay", head, "--store", st, "--quiet")
    assert r.code == 0 and r.err == "" and json.loads(r.out)
    r = cli("-q", "show", "no-such-ref", "--store", st)
    assert r.code == ExitCode.NOT_FOUND and r.err.startswith("ckpt: error:")


def test_completion_prints_a_bash_script_that_completes(tmp_path: Path) -> None:
    p = run_ckpt("completion", "bash")
    assert p.returncode == 0, p.stderr.decode()
    script = p.stdout.decode()
    assert "_CKPT_COMPLETE=complete_bash" in script and "complete " in script
    env = {"_CKPT_COMPLETE": "complete_bash", "COMP_WORDS": "ckpt re", "COMP_CWORD": "1"}
    p = run_ckpt(env=env)
    words = p.stdout.decode().split()
    assert {"reflog", "reset", "restore", "repair"} <= set(words), p.stdout.decode() + p.stderr.decode()
    assert run_ckpt("completion", "tcsh").returncode == ExitCode.USAGE


def test_help_command(cli: Any) -> None:
    r = cli("help", "take")
    assert r.code == 0 and "Take a checkpoint." in r.out and "--subject" in r.out
    r = cli("help")
    assert r.code == 0 and "reflog" in r.out and "--store" in r.out
    r = cli("help", "nosuch")
    assert r.code == ExitCode.USAGE and r.err.startswith("ckpt: error:")


def test_verify_and_repair_respect_a_deliberate_latest(cli: Any, st: Path) -> None:
    a = _take(st, V1, schema_version=1)
    b = _take(st, {"memory": {"v": 2}})
    assert cli("migrate", a, "--migrations", MIGRATIONS, "--store", st).code == 0  # latest stays on b
    assert cli("reset", "agent:bot", a, "--store", st).code == 0
    head = _with_tail(st)
    assert cli("fork", head, "--at", "1", "--store", st).code == 0  # latest stays on head
    assert cli("reset", "agent:bot", b, "--store", st).code == 0
    assert json.loads(cli("verify", "--json", "--store", st).out)["notes"] == []
    r = cli("repair", "refs", "--store", st, "--json")
    assert r.code == 0 and json.loads(r.out)["moved"] == {}, r.out
    assert _latest(st, "agent:bot") == b


# -- 4. ls fits the terminal, shows refs and sizes, chooses columns, pages only on a terminal ---------------

LONG = {
    "recorder.run": "3f2a9c0b1d2e4f5a6b7c8d9e0f1a2b3c",
    "events.seq": "120",
    "fork.of": "ab" * 32,
    "fork.at": "17",
    "langgraph.checkpoint": "1ef9c1c2-4b5a-6c7d-8e9f-0a1b2c3d4e5f",
    "langgraph.thread": "thread-with-a-rather-long-name",
    "ticket": "4711",
}


def test_ls_fits_the_terminal_and_shows_refs_and_size(cli: Any, st: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _take(st, {"memory": {"x": "y" * 5000}}, labels=LONG, message="a long message " * 10)
    b = _take(st, {"memory": 1}, subject="workflow:etl")
    assert cli("tag", "good", a, "--store", st).code == 0
    monkeypatch.setenv("COLUMNS", "100")
    r = cli("ls", "--store", st)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert max(len(line) for line in lines) <= 100, r.out  # was: 250 columns, wrapped
    head = lines[0].split()
    assert {"ID", "REFS", "SIZE", "LABELS"} <= set(head)
    row = next(line for line in lines if line.startswith(a[:12]))
    assert "latest" in row and "tag:good" in row and "ticket=4711" in row
    assert "langgraph." not in row and "recorder." not in row  # machine labels leave the default view
    assert "KiB" in row  # the state's size
    assert next(line for line in lines if line.startswith(b[:12]))
    # --json keeps everything, refs included
    rows = {x["id"]: x for x in json.loads(cli("ls", "--store", st, "--json").out)}
    assert rows[a]["labels"] == LONG and sorted(rows[a]["refs"]) == ["latest/agent/bot", "tags/good"]


def test_ls_columns(cli: Any, st: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # output to no terminal: nothing is cut (a narrow COLUMNS cuts the column, not this test's point)
    monkeypatch.delenv("COLUMNS", raising=False)
    a = _take(st, {"memory": 1}, labels=LONG, message="hello")
    r = cli("ls", "--store", st, "--columns", "id,all-labels,message")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0].split() == ["ID", "LABELS", "MESSAGE"]
    assert a[:12] in r.out and "langgraph.thread=thread-with-a-rather-long-name" in r.out and "hello" in r.out
    r = cli("ls", "--store", st, "--columns", "id,nosuch")
    assert r.code == ExitCode.USAGE and "nosuch" in r.err and r.err.count("\n") == 1


def test_ls_pages_only_on_a_terminal(st: Path, tmp_path: Path) -> None:
    for i in range(5):
        _take(st, {"memory": i})
    marker = tmp_path / "paged"
    pager = f"sh -c 'cat > {marker}'"
    p = run_ckpt("ls", "--store", st, env={"PAGER": pager, "LINES": "3"})
    assert p.returncode == 0 and len(p.stdout.decode().splitlines()) == 6 and not marker.exists()
    import pty

    leader, follower = pty.openpty()
    env = {**os.environ, "PAGER": pager, "LINES": "3", "COLUMNS": "120"}
    env.pop("CKPT_STORE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "ckptcli", "ls", "--store", str(st)], stdout=follower, stderr=subprocess.PIPE, env=env, timeout=60
    )
    os.close(follower)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr.decode()
    assert marker.exists() and len(marker.read_text().splitlines()) == 6


def test_verify_names_a_damaged_reflog_entry_and_notes_a_torn_one(cli: Any, st: Path) -> None:
    a = _take(st, {"memory": 1})
    b = _take(st, {"memory": 2})
    log = st / "logs" / "refs" / "latest" / "agent" / "bot"
    good = log.read_bytes()
    first = good.index(b"\n")
    flipped = bytearray(good)
    flipped[first // 2] ^= 0x01  # inside the first entry: a still well-formed line is caught by its checksum
    log.write_bytes(bytes(flipped))
    r = cli("verify", "--json", "--store", st)
    assert r.code == ExitCode.CORRUPT and any(p["name"] == "logs/refs/latest/agent/bot" for p in json.loads(r.out)["problems"]), r.out
    r = cli("reflog", "agent:bot", "--json", "--store", st)
    assert r.code == 0 and [x["new"] for x in json.loads(r.out)] == [b] and "damaged reflog entry" in r.err
    log.write_bytes(good + b'{"old":')
    r = cli("verify", "--json", "--store", st)
    assert r.code == 0 and any("cut short" in n for n in json.loads(r.out)["notes"]), r.out
    assert [x["new"] for x in json.loads(cli("reflog", "agent:bot", "--json", "--store", st).out)] == [b, a]


def test_a_tag_or_branch_named_like_a_checkpoint_file_is_refused(st: Path) -> None:
    """`ckpt tag rel.ckpt REF` was accepted, and then every verb read `rel.ckpt` as a
    checkpoint file that does not exist (exit 3): the tag could never be used."""
    a = _take(st, {"n": 1})
    for args in (["tag", "rel.ckpt", a], ["tag", "rel.CKPT", a], ["branch", "x.ckpt", a], ["fork", a, "--at", "0", "--branch", "y.ckpt"]):
        r = run_ckpt("--store", str(st), *args)
        assert r.returncode == ExitCode.INVALID_INPUT, (args, r.stderr)
        assert r.stderr.count(b"\n") == 1 and b".ckpt" in r.stderr and b"checkpoint file" in r.stderr, r.stderr
    assert open_store(st).refs(prefix="refs/tags") == {} and open_store(st).refs(prefix="refs/branches") == {}


def test_a_tag_or_branch_cannot_hide_a_checkpoint_id(st: Path) -> None:
    """`ckpt tag <another checkpoint's full id> REF` was accepted, and from then on that id
    meant the tagged checkpoint (show, restore); a prefix did the same, and `latest` as a
    branch name could never be reached."""
    a = _take(st, {"n": 1})
    b = _take(st, {"n": 2})
    for name in (a, a[:12], a[:4].upper()):
        r = run_ckpt("--store", str(st), "tag", name, b)
        assert r.returncode == ExitCode.INVALID_INPUT, r.stderr
        assert r.stderr.count(b"\n") == 1 and b"checkpoint" in r.stderr, r.stderr
    r = run_ckpt("--store", str(st), "fork", a, "--at", "0", "--branch", "latest")
    assert r.returncode == ExitCode.INVALID_INPUT and b"'latest' cannot be used" in r.stderr, r.stderr
    assert open_store(st).refs(prefix="refs/tags") == {} and open_store(st).refs(prefix="refs/branches") == {}
    # a full id is that checkpoint even where an old store has a tag of that name
    from ckptcli.store.refs import _Move

    store = open_store(st)
    store._swap(f"refs/tags/{a}", lambda _seen: _Move(bytes.fromhex(b), "planted"))
    assert store.resolve(a).hex() == a and store.resolve(f"tags/{a}@{{0}}").hex() == b
    r = run_ckpt("--store", str(st), "tag", "v1", b)
    assert r.returncode == 0, r.stderr


def test_a_tag_that_a_later_checkpoint_id_starts_with_is_ambiguous_not_the_tag(st: Path) -> None:
    """A tag made before a checkpoint whose id starts with its name came in (a copy, an
    import, another host) silently won: `show` and `restore` of the id `ls` printed acted
    on the tagged checkpoint."""
    a = _take(st, {"n": 1})
    store = open_store(st)
    from ckptcli.store.refs import _Move

    b = _take(st, {"n": 2})
    store._swap(f"refs/tags/{b[:12]}", lambda _seen: _Move(bytes.fromhex(a), "made before b came in"))
    r = run_ckpt("--store", str(st), "show", b[:12])
    assert r.returncode == ExitCode.INVALID_INPUT and b"ambiguous" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr
    assert open_store(st).resolve(b).hex() == b and open_store(st).resolve(f"tags/{b[:12]}@{{0}}").hex() == a


def test_advance_latest_many_moves_each_ref_as_advance_latest_does_with_one_durable_write(st: Path) -> None:
    """The LangGraph saver moves every thread's latest of a commit at once: one refs lock,
    one write_atomic_many (one file-system sync), and each ref ends where advance_latest
    one at a time would put it (a newer checkpoint already named stays)."""
    from ckptcli.format.manifest import Subject

    store = open_store(st)
    a1, b1, c1 = (bytes.fromhex(_take(st, {"m": i}, subject=f"agent:{s}")) for i, s in enumerate("abc"))
    a2 = bytes.fromhex(_take(st, {"m": 10}, subject="agent:x"))  # newer than a1: moves agent:a
    b0 = b1  # agent:b to itself: still named
    old = store.manifest(c1)
    store = open_store(st)
    calls: list[int] = []
    real = store.backend.write_atomic_many

    def counted(items: Any) -> None:
        calls.append(len(items))
        real(items)

    store.backend.write_atomic_many = counted  # type: ignore[method-assign]
    moved = store.advance_latest_many(
        [
            (Subject.parse("agent:a"), a2, store.manifest(a2).created_ns, False),
            (Subject.parse("agent:b"), b0, store.manifest(b0).created_ns, False),
            (Subject.parse("agent:c"), a1, old.created_ns - 1, False),  # older than c's latest: c stays
        ],
        log=False,
    )
    assert moved == [True, True, False] and calls == [2]
    fresh = open_store(st)
    assert [fresh.resolve(f"agent:{s}") for s in "abc"] == [a2, b1, c1]


def test_advance_latest_many_reads_back_no_manifest_it_moved_a_ref_to_itself(st: Path) -> None:
    """The saver's commit thread moves every thread's latest at each commit: whether the
    ref's target is newer is known from the move that put it there (a manifest never
    changes), not read from its manifest again; a target moved elsewhere is read."""
    from ckptcli.format.manifest import Subject

    a1, b1, a2, b2, a3 = (bytes.fromhex(_take(st, {"m": i}, subject=f"agent:x{i}")) for i in range(5))
    store = open_store(st)
    created = {c: store.manifest(c).created_ns for c in (a1, b1, a2, b2, a3)}
    a, b = Subject.parse("agent:a"), Subject.parse("agent:b")
    store = open_store(st)  # nothing cached
    read: list[bytes] = []
    real = store.manifest

    def counted(cid: bytes) -> Any:
        read.append(cid)
        return real(cid)

    def advance(*moves: tuple[Subject, bytes]) -> list[bool]:
        return store.advance_latest_many([(s, c, created[c], False) for s, c in moves], log=False)

    def latest(subject: str) -> bytes:
        return open_store(st).resolve(subject)

    store.manifest = counted  # type: ignore[method-assign]
    assert advance((a, a2), (b, b1)) == [True, True] and read == []  # no refs yet: nothing to compare
    # older than a2, which agent:a names: it stays, decided without reading a2's manifest
    assert advance((a, a1), (b, b2)) == [False, True] and read == [] and latest("agent:a") == a2
    assert advance((a, a3), (b, b1)) == [True, False] and read == [] and (latest("agent:a"), latest("agent:b")) == (a3, b2)
    with store.ref_lock():  # another writer moves agent:a back to a1: its target is read, as before
        store.write_ref(store.latest_ref(a), a1, log=False)
    assert advance((a, a2), (b, b2)) == [True, True] and read == [a1] and latest("agent:a") == a2


def test_a_checkpoint_file_given_as_the_store_is_not_told_to_run_init(st: Path, tmp_path: Path) -> None:
    """`ckpt --store agent.ckpt show latest` advised `ckpt init` (over a file): it says the
    file is no store and how a checkpoint file is read."""
    _take(st, {"n": 1})
    f = tmp_path / "agent.ckpt"
    assert run_ckpt("--store", str(st), "export", "latest", "-o", str(f)).returncode == 0
    r = run_ckpt("--store", str(f), "show", "latest")
    assert r.returncode == ExitCode.NO_STORE, r.stderr
    assert r.stderr.count(b"\n") == 1 and b"is a file, not a ckpt store" in r.stderr and b"ckpt init" not in r.stderr, r.stderr
    assert run_ckpt("show", str(f)).returncode == 0  # as the hint says
