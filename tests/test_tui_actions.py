"""`ckpt tui`: actions where you look (B fork, T tag, R restore, E export; d diffs with the
mark), each confirmed in a modal, done through the library functions the CLI commands
call, and said with the equivalent command; the ctrl+p palette's ckpt commands; and `:`
in the history (a step, a subject's step, a reference), for the keystroke count of
docs/tui.md."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import Checkpoint, take
from ckptcli.errors import NotFoundError
from ckptcli.history.graph import History
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile
from ckptcli.tui.screens.checkpoint import CheckpointScreen
from ckptcli.tui.screens.confirm import ConfirmScreen
from ckptcli.tui.screens.diff import DiffScreen
from ckptcli.tui.screens.history import HistoryScreen, go_to, match_subject, step_of
from ckptcli.tui.screens.timeline import TimelineScreen
from ckptcli.tui.widgets import VirtualList
from tests.tui_data import T0, build_demo_store, export_demo, write
from tests.tui_pilot import run, settle


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A fresh demo store per test: the actions change it."""
    path = tmp_path / "store" / ".ckpt"
    return path, build_demo_store(path)


def messages(app: Any, severity: str | None = None) -> list[str]:
    return [n.message for n in app._notifications if severity is None or n.severity == severity]


async def go_history_to(pilot: Any, cid: bytes) -> HistoryScreen:
    screen = pilot.app.screen
    assert isinstance(screen, HistoryScreen)
    assert screen.show_checkpoint(cid)
    await pilot.pause()
    return screen


async def confirm_with(pilot: Any, key: str, typed: str | None = None, *, clear: bool = False) -> ConfirmScreen:
    """Press the action's key; in its modal, type `typed` into the first field (after
    clearing it, with `clear`); return the modal (Enter or Esc is the caller's)."""
    await pilot.press(key)
    await pilot.pause()
    modal = pilot.app.screen
    assert isinstance(modal, ConfirmScreen), type(modal)
    if typed is not None:
        box = modal.query("Input").first()
        if clear:
            box.value = ""
        await pilot.press(*typed)
        await pilot.pause()
    return modal


# -- tag -----------------------------------------------------------------------------------------------
def test_tag_from_the_history_is_confirmed_writes_the_tag_and_says_the_command(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["triage"])
        modal = await confirm_with(pilot, "T", "triaged")
        what = str(modal.query_one("#confirm-what").render())
        assert "'triaged'" in what and ids["triage"].hex()[:12] in what  # what will happen, before it does
        assert ckptcli.open_store(path).refs().get("tags/triaged") is None
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(pilot.app.screen, HistoryScreen)
        # the store really changed, and the history shows it
        assert ckptcli.open_store(path).refs()["tags/triaged"] == ids["triage"]
        assert any(r.name == "triaged" for r in pilot.app.screen.history.ref_names(ids["triage"]))
        cmd = f"ckpt tag triaged {ids['triage'].hex()[:12]} --store {pilot.app.session.where}"
        assert any(cmd in m for m in messages(pilot.app)), messages(pilot.app)
        assert pilot.app.clipboard == cmd

    run(path, scenario)


def test_the_command_said_does_the_same_when_run(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    """The notification's command is the real one: run through the CLI, it tags too."""
    path, ids = demo
    said: list[str] = []

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["root"])
        await confirm_with(pilot, "T", "first-one")
        await pilot.press("enter")
        await settle(pilot)
        said.append(pilot.app.clipboard)

    run(path, scenario)
    args = shlex.split(said[0].replace("first-one", "again", 1))[1:]
    got = subprocess.run([sys.executable, "-m", "ckptcli", *args, "--json"], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert ckptcli.open_store(path).refs()["tags/again"] == ids["root"]


def test_esc_cancels_and_nothing_changes(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo
    before = ckptcli.open_store(path).refs()

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["triage"])
        for key, typed in (("T", "never"), ("B", None), ("E", None)):
            await confirm_with(pilot, key, typed)
            await pilot.press("escape")
            await settle(pilot)
            assert isinstance(pilot.app.screen, HistoryScreen)
        assert not messages(pilot.app, "error")

    run(path, scenario)
    store = ckptcli.open_store(path)
    assert store.refs() == before and len(History.from_store(store)) == len(ids)


@pytest.mark.parametrize(
    ("name", "error"),
    [("bad name", "tag name"), ("../up", "tag name"), ("known-good", "tag 'known-good' already points at")],
)
def test_a_bad_tag_is_a_notification_and_nothing_changes(demo: tuple[Path, dict[str, bytes]], name: str, error: str) -> None:
    path, ids = demo
    before = ckptcli.open_store(path).refs()

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["triage"])
        await confirm_with(pilot, "T", name)
        await pilot.press("enter")
        await settle(pilot)
        errors = messages(pilot.app, "error")
        assert len(errors) == 1 and error in errors[0] and "\n" not in errors[0] and "Traceback" not in errors[0], errors
        assert isinstance(pilot.app.screen, HistoryScreen)  # still running

    run(path, scenario)
    assert ckptcli.open_store(path).refs() == before


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` read-only: its modes (a user), or a read-only bind mount of it (root, whom
    modes do not stop); skipped where neither can be had."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            yield
        finally:
            for p, m in modes.items():
                p.chmod(m)
        return
    bind = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot make a read-only store here: {bind.stderr.decode().strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot make a read-only store here: {ro.stderr.decode().strip()}")
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_read_only_store_is_a_notification(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["triage"])
        for key, typed in (("T", "ro"), ("B", None)):
            await confirm_with(pilot, key, typed)
            await pilot.press("enter")
            await settle(pilot)
        errors = messages(pilot.app, "error")
        assert len(errors) == 2 and all("\n" not in e and "Traceback" not in e for e in errors), errors
        assert isinstance(pilot.app.screen, HistoryScreen)

    store = ckptcli.open_store(path)
    n = len(History.from_store(store))
    with read_only(path):
        run(store, scenario)
    assert "tags/ro" not in ckptcli.open_store(path).refs() and len(History.from_store(ckptcli.open_store(path))) == n


def test_tag_on_a_checkpoint_file_says_it_has_no_history(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, ids = demo
    f = export_demo(ckptcli.open_store(path), ids["merge"], tmp_path / "merge.ckpt")

    async def scenario(pilot: Any) -> None:
        assert isinstance(pilot.app.screen, CheckpointScreen)
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(pilot.app.screen, CheckpointScreen)  # no modal: it cannot be done
        assert any("a checkpoint file has no history to tag" in m for m in messages(pilot.app, "error"))

    run(CheckpointFile(f), scenario)


# -- fork ----------------------------------------------------------------------------------------------
def test_fork_at_the_timeline_cursor_writes_a_fork_there_on_a_branch(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen)
        screen.events.set_cursor(12)
        await pilot.pause()
        seq = screen.model.seq(12)
        modal = await confirm_with(pilot, "B", "retry-12")
        assert f"seq {seq}" in str(modal.query_one("#confirm-what").render())
        await pilot.press("enter")
        await settle(pilot)
        assert any(f"ckpt fork {ids['recorded'].hex()[:12]} --at {seq} --branch retry-12" in m for m in messages(pilot.app))
        store = ckptcli.open_store(path)
        fork_id = store.refs()["branches/retry-12"]
        m = store.manifest(fork_id)
        assert m.parents == [ids["recorded"]] and m.labels["fork.at"] == str(seq) and m.labels["fork.of"] == ids["recorded"].hex()
        # its state is the timeline's state at the cursor
        state = Checkpoint(store, fork_id).state()
        assert state["memory"] == screen.model.state(12)["memory"] and state["events"] == []
        assert fork_id in pilot.app.session.history.nodes  # the history was read again

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_the_fork_command_printed_names_the_reducers_the_fork_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tail of custom kinds, replayed with `--reducers tally_mod:REDUCERS`: the command the
    fork prints carries them, and runs as printed (without them the fork cannot replay)."""
    (tmp_path / "tally_mod.py").write_text(
        "def add(state, event):\n"
        "    return {**state, 'ext': {'tally': state.get('ext', {}).get('tally', 0) + event.fields['n']}}\n"
        "REDUCERS = {'tally:add': add}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tally_mod", raising=False)
    from ckptcli.history.replay import load_reducers
    from ckptcli.tui.app import CkptApp
    from ckptcli.tui.session import open_session

    store = ckptcli.init_store(tmp_path / ".ckpt")
    events = [{"seq": i, "ts": T0 + i, "kind": "tally:add", "n": i} for i in range(1, 6)]
    cid = take(store, {"memory": {}, "ext": {"tally": 0}, "events": events}, subject="agent:tally").id
    specs = ["tally_mod:REDUCERS"]
    app = CkptApp(open_session(store, reducers=load_reducers(specs), reducer_specs=specs), checkpoint=cid, view="timeline", blink=False)
    printed: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            screen = pilot.app.screen
            assert isinstance(screen, TimelineScreen)
            screen.events.set_cursor(3)
            await pilot.pause()
            await confirm_with(pilot, "B", "three")
            await pilot.press("enter")
            await settle(pilot)
            printed.extend(m for m in messages(pilot.app) if "$ ckpt fork" in m)

    asyncio.run(main())
    assert printed, messages(app)
    cmd = printed[0].split("$ ", 1)[1].split(" (copied)")[0].strip()
    assert "--reducers tally_mod:REDUCERS" in cmd, cmd
    args = shlex.split(cmd)[1:]
    args[args.index("--branch") + 1] = "three-again"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    got = subprocess.run([sys.executable, "-m", "ckptcli", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert got.returncode == 0, got.stderr
    again = ckptcli.open_store(tmp_path / ".ckpt")
    assert Checkpoint(again, again.refs()["branches/three-again"]).state()["ext"] == {"tally": 1 + 2 + 3}


def test_fork_from_the_history_asks_for_the_seq_the_end_of_the_tail_given(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["recorded"])
        modal = await confirm_with(pilot, "B")
        assert modal.values() == {"at": "40", "branch": ""}
        box = modal.query_one("#field-at")
        box.value = "7"  # type: ignore[attr-defined]
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        assert not messages(pilot.app, "error")
        store = ckptcli.open_store(path)
        forks = [n for n in History.from_store(store).order if n.labels.get("fork.of") == ids["recorded"].hex() and n.id != ids["fork"]]
        assert len(forks) == 1 and forks[0].labels["fork.at"] == "7"
        assert pilot.app.screen.point() == (forks[0].id, None)  # the cursor on the new fork

    run(path, scenario)


def test_fork_errors_are_notifications(demo: tuple[Path, dict[str, bytes]]) -> None:
    """A seq outside the tail, a bad branch name; a checkpoint with no tail at all."""
    path, ids = demo
    store = ckptcli.open_store(path)
    bare = take(store, {"memory": {"a": 1}}, subject="agent:bare").id
    n = len(History.from_store(store))

    async def scenario(pilot: Any) -> None:
        pilot.app.screen.reload()
        await go_history_to(pilot, ids["recorded"])
        modal = await confirm_with(pilot, "B")
        modal.query_one("#field-at").value = "999"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await settle(pilot)
        modal = await confirm_with(pilot, "B")
        modal.query_one("#field-branch").value = "no good"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await settle(pilot)
        await go_history_to(pilot, bare)
        await pilot.press("B")
        await pilot.pause()
        assert isinstance(pilot.app.screen, HistoryScreen)
        errors = messages(pilot.app, "error")
        assert len(errors) == 3 and all("\n" not in e for e in errors), errors
        assert "999" in errors[0] and "branch name" in errors[1] and "no event tail" in errors[2]

    run(path, scenario)
    assert len(History.from_store(ckptcli.open_store(path))) == n


# -- restore -------------------------------------------------------------------------------------------
def with_files(path: Path) -> bytes:
    """A checkpoint with blobs (a small directory) in the store at `path`."""
    files = {
        "type": "dir",
        "mode": 0o755,
        "mtime_ns": T0,
        "entries": {
            "report.csv": {"type": "file", "size": 10, "mode": 0o644, "mtime_ns": T0, "data": b"a,120\nb,8\n"},
            "logs": {
                "type": "dir",
                "mode": 0o755,
                "mtime_ns": T0,
                "entries": {"run.log": {"type": "file", "size": 3, "mode": 0o600, "mtime_ns": T0, "data": b"ok\n"}},
            },
        },
    }
    return write(ckptcli.open_store(path), {"memory": {"rows": 200}}, subject="workflow:files", at=50, blobs={"out": files})


def test_restore_writes_the_state_and_the_blobs_into_a_new_directory(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, _ids = demo
    cid = with_files(path)
    target = tmp_path / "restored"

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, cid)
        await confirm_with(pilot, "R", str(target))
        await pilot.press("enter")
        await settle(pilot)
        want = f"ckpt restore {cid.hex()[:12]} -o {target / 'state.json'} --blobs {target}"
        assert any(want in m for m in messages(pilot.app)), messages(pilot.app)

    run(path, scenario)
    state = json.loads((target / "state.json").read_text())
    assert state["memory"] == {"rows": 200}
    assert (target / "out" / "report.csv").read_bytes() == b"a,120\nb,8\n"
    assert (target / "out" / "logs" / "run.log").read_bytes() == b"ok\n"


def test_restore_refuses_a_directory_that_is_not_empty(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, ids = demo
    target = tmp_path / "busy"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["merge"])
        modal = await confirm_with(pilot, "R", str(target))
        assert "is not empty" in str(modal.query_one("#confirm-what").render())  # said before Enter
        await pilot.press("enter")
        await settle(pilot)
        errors = messages(pilot.app, "error")
        assert len(errors) == 1 and f"{target} is not empty" in errors[0], errors

    run(path, scenario)
    assert sorted(p.name for p in target.iterdir()) == ["mine.txt"] and (target / "mine.txt").read_text() == "keep me"


def test_restore_into_the_store_is_refused(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["merge"])
        await confirm_with(pilot, "R", str(path / "inside"))
        await pilot.press("enter")
        await settle(pilot)
        errors = messages(pilot.app, "error")
        assert len(errors) == 1 and "inside the store" in errors[0], errors

    run(path, scenario)
    assert not (path / "inside").exists()


# -- export --------------------------------------------------------------------------------------------
def test_export_from_the_checkpoint_screen_reads_back(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, ids = demo
    out = tmp_path / "out" / "bot.ckpt"
    out.parent.mkdir()

    async def scenario(pilot: Any) -> None:
        assert isinstance(pilot.app.screen, CheckpointScreen)
        await confirm_with(pilot, "E", str(out), clear=True)
        await pilot.press("enter")
        await settle(pilot)
        assert any(f"ckpt export {ids['recorded'].hex()[:12]} -o {out}" in m for m in messages(pilot.app)), messages(pilot.app)

    run(path, scenario, checkpoint=ids["recorded"], view="checkpoint")
    f = CheckpointFile(out)
    assert f.id == ids["recorded"]
    assert Checkpoint(f, f.id).state() == Checkpoint(ckptcli.open_store(path), ids["recorded"]).state()


def test_export_to_a_directory_is_a_notification(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["root"])
        await confirm_with(pilot, "E", str(tmp_path), clear=True)
        await pilot.press("enter")
        await settle(pilot)
        errors = messages(pilot.app, "error")
        assert len(errors) == 1 and f"{tmp_path} is a directory" in errors[0], errors

    run(path, scenario)


# -- diff with the mark --------------------------------------------------------------------------------
def test_the_checkpoint_screen_diffs_with_the_mark_of_the_history(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await go_history_to(pilot, ids["root"])
        await pilot.press("m")  # m marks, as on the timeline
        await go_history_to(pilot, ids["good"])
        await pilot.press("enter", "d")
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        assert diff.title_text == f"diff {ids['root'].hex()[:12]} → {ids['good'].hex()[:12]}"
        assert any(f"ckpt diff {ids['root'].hex()[:12]} {ids['good'].hex()[:12]}" in m for m in messages(pilot.app))

    run(path, scenario)


# -- the palette ---------------------------------------------------------------------------------------
async def first_hit(pilot: Any, text: str) -> None:
    """Wait until the palette's search (a task of its own) shows `text` first."""
    from textual.command import CommandList

    for _ in range(200):
        await pilot.pause()
        found = pilot.app.screen.query(CommandList)
        if found and found.first().option_count and text in str(found.first().get_option_at_index(0).prompt):
            found.first().highlighted = 0
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the palette never offered {text!r}")


def test_the_palette_offers_ckpt_commands_and_runs_them(demo: tuple[Path, dict[str, bytes]]) -> None:
    from textual.command import CommandPalette

    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(pilot.app.screen, CommandPalette)
        await pilot.press(*"tag known")
        await first_hit(pilot, "Go to tag known-good")
        await pilot.press("enter")
        await settle(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen) and screen.point() == (ids["good"], None)  # went to the tag
        await pilot.press("ctrl+p")
        await pilot.press(*"export")
        await first_hit(pilot, "Export to a file")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(pilot.app.screen, ConfirmScreen) and pilot.app.screen.act.title == "Export"
        await pilot.press("escape")

    run(path, scenario)


def test_the_palette_goes_to_a_tag_from_a_timeline_opened_alone(demo: tuple[Path, dict[str, bytes]]) -> None:
    """`ckpt tui REF --timeline` opens the timeline without a history below it (its first
    paint); "Go to tag" then puts the history in its place, at the tag."""
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        assert isinstance(pilot.app.screen, TimelineScreen) and len(pilot.app.screen_stack) == 2
        await pilot.press("ctrl+p")
        await pilot.press(*"tag known")
        await first_hit(pilot, "Go to tag known-good")
        await pilot.press("enter")
        await settle(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen) and screen.point() == (ids["good"], None)
        assert len(pilot.app.screen_stack) == 2

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_the_palette_lists_what_the_screen_can_do() -> None:
    from ckptcli.tui.palette import COMMANDS, offered

    class Timeline:
        def action_diff(self) -> None: ...
        def action_mark(self) -> None: ...
        def point(self) -> None: ...

    names = [c.name for c in offered(Timeline())]
    assert "Fork here" in names and "Diff with the mark" in names and "Help" in names
    assert "Refresh" not in names  # the screen has no refresh
    assert {c.name for c in COMMANDS} >= {"Tag", "Restore to a directory", "Export to a file", "Open the timeline", "Refresh", "Follow"}


# -- : in the history: steps, subjects, references -----------------------------------------------------
@pytest.fixture
def steps(tmp_path: Path) -> tuple[Store, list[bytes], list[bytes]]:
    """agent:x, 60 checkpoints without labels; agent:y, 60 labelled step=N (and langgraph's)."""
    store = ckptcli.init_store(tmp_path / ".ckpt")
    xs: list[bytes] = []
    ys: list[bytes] = []
    for i in range(60):
        xs.append(take(store, {"memory": {"step": i, "notes": ["n"] * (i % 3)}}, subject="agent:x", parents=[x.hex() for x in xs[-1:]]).id)
        ys.append(take(store, {"memory": {"step": i}}, subject="agent:yak", parents=[y.hex() for y in ys[-1:]], labels={"step": str(i)}).id)
    return store, xs, ys


def test_go_to_a_step_a_subjects_step_or_a_reference(steps: tuple[Store, list[bytes], list[bytes]]) -> None:
    store, xs, ys = steps
    h = History.from_store(store)
    assert step_of(h, "agent:x", 0).id == xs[0] and step_of(h, "agent:x", 41).id == xs[41]
    assert step_of(h, "agent:yak", 41).id == ys[41]
    assert go_to(h, "41", "agent:x", store).id == xs[41]
    assert go_to(h, "x 41", "agent:yak", store).id == xs[41] and go_to(h, "ya 41", None, store).id == ys[41]
    assert go_to(h, "y", None, store).id == ys[-1]  # a subject alone: its newest
    assert go_to(h, xs[3].hex()[:10], None, store).id == xs[3] and go_to(h, "agent:x~2", None, store).id == xs[-3]
    assert match_subject(h, "agent:x") == "agent:x"
    with pytest.raises(NotFoundError, match="steps 0 to 59"):
        step_of(h, "agent:x", 60)
    with pytest.raises(NotFoundError, match="labelled step 99"):
        step_of(h, "agent:yak", 99)
    with pytest.raises(NotFoundError, match="several subjects"):
        match_subject(h, "agent")
    with pytest.raises(NotFoundError):
        go_to(h, "nothing-like-this", None, store)


def test_an_id_prefix_of_only_digits_goes_to_that_checkpoint(tmp_path: Path) -> None:
    """An id prefix can be all digits (CI drew "6086029089"): it is a step only where the
    subject has that step; otherwise it is the checkpoint it names."""
    store = ckptcli.init_store(tmp_path / ".ckpt")
    target = None
    for i in range(2000):
        cid = take(store, {"memory": {"i": i}}, subject="agent:digits").id
        if cid.hex()[:8].isdecimal():
            target = cid
            break
    assert target is not None, "no id with 8 leading decimal digits in 2,000 takes"
    h = History.from_store(store)
    prefix = target.hex()[:8]
    assert go_to(h, prefix, None, store).id == target
    assert go_to(h, prefix, "agent:digits", store).id == target  # far past its last step
    assert go_to(h, "0", "agent:digits", store).id == h.rows("agent:digits")[-1].id  # a step still
    with pytest.raises(NotFoundError, match="steps 0 to"):
        go_to(h, "#" + prefix, "agent:digits", store)  # # always means a step
    with pytest.raises(NotFoundError, match="no subject to count steps in"):
        go_to(h, "99999999", None, store)  # no such id either: the step's error


@pytest.mark.parametrize(("typed", "subject"), [("x 41", "x"), ("y 41", "yak"), ("ya 41", "yak")])
def test_step_40_to_41_of_an_agent_in_few_keys(steps: tuple[Store, list[bytes], list[bytes]], typed: str, subject: str) -> None:
    """docs/tui.md's count: from launch, :, the subject and the step, Enter, d: the diff of
    step 40 to step 41, with or without step labels, among other agents."""
    store, xs, ys = steps
    ids = xs if subject == "x" else ys
    keys = [":", *typed, "enter", "d"]
    assert len(keys) <= 8

    async def scenario(pilot: Any) -> None:
        await pilot.press(*keys)
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        assert diff.title_text == f"diff {ids[40].hex()[:12]} → {ids[41].hex()[:12]}"
        text = "\n".join(t for _k, t in diff.lines)
        assert "step" in text and "40" in text and "41" in text

    run(store, scenario)


def _sup_subjects(tmp_path: Path, steps: int) -> tuple[Store, dict[str, list[bytes]]]:
    """agent:sup, agent:super and agent:supervisor (3+ letters to tell apart), each a chain
    of `steps` checkpoints whose memory holds the step; returns the store and their ids."""
    store = ckptcli.init_store(tmp_path / ".ckpt")
    ids: dict[str, list[bytes]] = {n: [] for n in ("agent:sup", "agent:super", "agent:supervisor")}
    for i in range(steps):
        for n, chain in ids.items():
            chain.append(take(store, {"memory": {"step": i, "who": n}}, subject=n, parents=[c.hex() for c in chain[-1:]]).id)
    return store, ids


def test_step_40_to_41_in_7_keys_whatever_the_subjects_names(tmp_path: Path) -> None:
    """Subjects that need 3+ letters to tell apart (agent:sup, agent:super, agent:supervisor):
    from plain `ckpt tui`, `:`, the hint the sidebar shows beside the subject, ` 41`, Enter,
    `d` is the diff of step 40 to 41: 7 keys (8 with a two-character hint, past 36 subjects)."""
    from textual.widgets import OptionList

    store, ids = _sup_subjects(tmp_path, 45)

    for subject in ("agent:super", "agent:sup"):

        async def scenario(pilot: Any, subject: str = subject) -> None:
            screen = pilot.app.screen
            assert isinstance(screen, HistoryScreen)
            sidebar = screen.query_one("#subjects", OptionList)
            shown = {o.id: str(o.prompt) for o in (sidebar.get_option_at_index(i) for i in range(sidebar.option_count))}
            hint = shown[subject].split()[0]  # as the sidebar shows it
            assert len(hint) == 1 and shown[subject] == f"{hint} {subject}  45"
            keys = [":", *hint, "space", "4", "1", "enter", "d"]
            assert len(keys) == 7
            await pilot.press(*keys)
            await settle(pilot)
            diff = pilot.app.screen
            assert isinstance(diff, DiffScreen)
            assert diff.title_text == f"diff {ids[subject][40].hex()[:12]} → {ids[subject][41].hex()[:12]}"
            text = "\n".join(t for _k, t in diff.lines)
            assert "40" in text and "41" in text

        run(store, scenario)


def test_subject_hints_are_short_and_never_a_subjects_own_name() -> None:
    from ckptcli.tui.screens.history import subject_hints

    few = subject_hints(["agent:a", "agent:b", "agent:zed"])
    assert sorted(few.values()) == ["c", "d", "e"]  # a and b name agent:a and agent:b themselves
    many = subject_hints([f"agent:s{i:02d}" for i in range(36)])
    assert all(len(h) == 1 for h in many.values()) and len(set(many.values())) == 36
    more = subject_hints([f"agent:s{i:02d}" for i in range(37)])
    assert all(len(h) == 2 for h in more.values()) and len(set(more.values())) == 37


def test_colon_with_a_subject_under_the_cursor_needs_only_the_step(steps: tuple[Store, list[bytes], list[bytes]]) -> None:
    store, xs, _ys = steps

    async def scenario(pilot: Any) -> None:
        screen = await go_history_to(pilot, xs[-1])
        await pilot.press(":", "4", "1", "enter")
        await pilot.pause()
        assert screen.point() == (xs[41], None)
        await pilot.press(":", "9", "9", "enter")  # out of range: said, the cursor stays
        await pilot.pause()
        assert screen.point() == (xs[41], None) and any("steps 0 to 59" in m for m in messages(pilot.app, "warning"))
        await pilot.press("g")  # g stays the vim key: the first row
        await pilot.pause()
        assert screen.query_one("#checkpoints", VirtualList).cursor == 0

    run(store, scenario)


def test_opened_at_the_agent_its_step_needs_no_subject(steps: tuple[Store, list[bytes], list[bytes]]) -> None:
    """`ckpt tui agent:x` opens at X's latest: Esc, : 4 1 Enter, d (6 keys, whatever X's name)."""
    store, xs, _ys = steps

    async def scenario(pilot: Any) -> None:
        assert isinstance(pilot.app.screen, CheckpointScreen)
        await pilot.press("escape", ":", "4", "1", "enter", "d")
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen) and diff.title_text == f"diff {xs[40].hex()[:12]} → {xs[41].hex()[:12]}"

    run(store, scenario, checkpoint=xs[-1], view="checkpoint")


def test_the_action_keys_are_letters_in_an_input(demo: tuple[Path, dict[str, bytes]]) -> None:
    """B, T, R, E typed into the filter are the filter's letters, not actions."""
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("f", "T", "R", "E", "B")
        await pilot.pause()
        assert isinstance(pilot.app.screen, HistoryScreen) and pilot.app.screen.query_one("#filter").value == "TREB"  # type: ignore[attr-defined]

    run(path, scenario)


def test_a_refresh_that_moves_the_subjects_hints_says_so(tmp_path: Path) -> None:
    """Hints follow the subjects' name order: a subject taken or pruned by another process
    moves the later ones. `r` says which moved, so `:HINT` is not typed from memory onto
    another subject."""
    store = ckptcli.init_store(tmp_path / ".ckpt")
    for n in ("agent:m", "agent:p"):
        take(store, {"memory": {"who": n}}, subject=n)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen)
        await pilot.press("r")
        await settle(pilot)
        assert not any("hints moved" in n.message for n in pilot.app._notifications)
        take(ckptcli.open_store(tmp_path / ".ckpt"), {"memory": {}}, subject="agent:c")  # sorts first: m and p move
        await pilot.press("r")
        await settle(pilot)
        said = [n.message for n in pilot.app._notifications if "hints moved" in n.message]
        assert len(said) == 1 and "agent:m is" in said[0] and "agent:p is" in said[0], said

    run(store, scenario)


def test_at_80_columns_colon_shows_the_hints_so_the_step_is_still_7_keys(tmp_path: Path) -> None:
    """Narrower than 100 columns the sidebar starts folded; `:` shows it (with the hints)
    while the go-to input is open and folds it again after: `:`, hint, Space, `41`, Enter,
    `d` is 7 keys at 80x24 too."""
    from textual.widgets import OptionList

    store, ids = _sup_subjects(tmp_path, 42)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen) and screen.has_class("-folded")
        await pilot.press(":")
        await settle(pilot)
        assert not screen.has_class("-folded")  # the hints are on screen
        sidebar = screen.query_one("#subjects", OptionList)
        shown = {o.id: str(o.prompt) for o in (sidebar.get_option_at_index(i) for i in range(sidebar.option_count))}
        hint = shown["agent:super"].split()[0]
        keys = [*hint, "space", "4", "1", "enter"]
        await pilot.press(*keys)
        await settle(pilot)
        assert screen.has_class("-folded")  # folded again once the input closed
        await pilot.press("d")
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen) and 1 + len(keys) + 1 == 7
        assert diff.title_text == f"diff {ids['agent:super'][40].hex()[:12]} → {ids['agent:super'][41].hex()[:12]}"

    run(store, scenario, size=(80, 24))
