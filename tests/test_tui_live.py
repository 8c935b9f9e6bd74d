"""`ckpt tui --follow` (and F): a timeline tails a running agent's recorder, its journal and
the checkpoints it takes, as a log reader tails a log. The recorder is real (in this
process for the Pilot tests, in another process for the real-terminal one); nothing here
asserts a time but "before the (generous) timeout": the latency is measured in bench/tui.py."""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.history.recorder import CheckpointPolicy, Durability, Recorder
from ckptcli.tui.app import CkptApp, open_session
from ckptcli.tui.follow import JournalReader, find_journal
from ckptcli.tui.screens.timeline import TimelineScreen
from tests.tui_pilot import run as pilot_run

REPO = Path(__file__).resolve().parents[1]
#: waits for what another process does are bounded by this, for a loaded machine: the tests
#: wait for an outcome, they do not time it
PATIENCE = 60.0
SUBJECT = "agent:live"


def recorder(tmp_path: Path) -> tuple[Path, Path, Recorder]:
    store_dir = tmp_path / ".ckpt"
    store = ckptcli.init_store(store_dir)
    journal = tmp_path / "live.journal"
    rec = Recorder.open(
        store, SUBJECT, journal, policy=CheckpointPolicy(), durability=Durability(batch_size=1, fsync="never", flush_on=frozenset())
    )
    return store_dir, journal, rec


def note(rec: Recorder, text: str) -> None:
    rec.append("memory.set", path=["note"], value=text)


def test_the_journal_is_read_as_it_grows_new_bytes_only_and_again_after_a_checkpoint(tmp_path: Path) -> None:
    _store_dir, journal, rec = recorder(tmp_path)
    try:
        reader = JournalReader(journal)
        assert reader.poll() == [] and reader.header is not None and reader.header["subject"] == SUBJECT
        for i in range(3):
            note(rec, f"n{i}")
        got = reader.poll()
        assert [r["seq"] for r in got] == [1, 2, 3] and got[-1]["value"] == "n2"
        size = journal.stat().st_size
        read = reader.bytes_read
        assert reader.poll() == [] and reader.bytes_read == read  # nothing new: nothing read
        note(rec, "n3")
        assert [r["value"] for r in reader.poll()] == ["n3"]
        assert reader.bytes_read - read == journal.stat().st_size - size  # the new bytes, only those
        # a half-written record is left for the next poll
        with open(journal, "ab") as fh:
            fh.write(b"\x00\x00")
        assert reader.poll() == []
        # a checkpoint replaces the journal: read from its new header on
        took = rec.checkpoint(message="mid-run")
        note(rec, "n4")
        got = reader.poll()
        assert reader.header is not None and reader.header["base"] == took.hex
        assert [r["seq"] for r in got] == [5]
    finally:
        rec.close()
    assert find_journal(SUBJECT, [tmp_path]) == journal
    assert find_journal("agent:other", [tmp_path]) is None


def run_app(
    store_dir: Path, scenario: Any, *, follow: bool = True, size: tuple[int, int] = (120, 30), start: bytes | None = None
) -> CkptApp:
    store = ckptcli.open_store(store_dir)
    cid = store.resolve(SUBJECT) if start is None else start
    return pilot_run(store, scenario, checkpoint=cid, view="timeline", size=size, follow=follow)


async def until(pilot: Any, check: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        assert time.monotonic() < deadline, f"not within {PATIENCE} s: {what}"
        await pilot.pause(0.05)


def test_a_fifo_at_the_journals_path_is_no_journal_and_never_waited_on(tmp_path: Path) -> None:
    # the open for reading blocked until a writer came: `ckpt tui --follow` hung
    fifo = tmp_path / "run.journal"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path; from ckptcli.tui.follow import JournalReader, journal_header\n"
        "p = Path(sys.argv[1]); print(JournalReader(p).poll(), journal_header(p))"
    )
    got = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0 and got.stdout == "[] None\n", got


def test_a_followed_timeline_appends_events_and_checkpoints_and_the_cursor_stays_unless_at_the_end(tmp_path: Path) -> None:
    store_dir, _journal, rec = recorder(tmp_path)
    for i in range(5):
        note(rec, f"before {i}")
    rec.checkpoint(message="five")
    note(rec, "in the journal")

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.follower is not None
        events = screen.events
        # the opened checkpoint holds seq 1-5; the journal's seq 6 is appended, the cursor at the end follows it
        await until(pilot, lambda: len(screen.model) == 7 and events.cursor == 6, "seq 6 from the journal, the cursor on it")
        assert screen.model.seq(6) == 6 and "following" in str(screen.query_one("#tl-title").render())
        note(rec, "seven")
        await until(pilot, lambda: events.cursor == 7, "the cursor follows seq 7")
        # the user moves up: new events are appended below, the cursor stays
        await pilot.press("up", "up")
        assert events.cursor == 5
        rec.checkpoint(message="eight")  # a checkpoint: the journal is replaced
        note(rec, "after the checkpoint")
        note(rec, "and another")
        await until(pilot, lambda: len(screen.model) == 10, "seq 8 and 9, across the checkpoint")
        assert events.cursor == 5 and screen.shown_row == 5
        assert [screen.model.event(r - 1).fields["value"] for r in (8, 9)] == ["after the checkpoint", "and another"]
        assert any(seq == 7 for seq, _hex in screen.live_checkpoints)
        assert "checkpoint " in str(screen.query_one("#tl-title").render()) and "at seq 7" in str(screen.query_one("#tl-title").render())
        # the states of the appended rows are replayed like the others
        await pilot.press("G")
        await until(pilot, lambda: screen.query_one("#state").root.data.value is not None, "a state")
        await until(pilot, lambda: screen.shown_row == 9, "the last row")
        state = screen.model.state(9)
        assert state["memory"]["note"] == "and another"
        # F stops following: nothing more is appended
        await pilot.press("F")
        assert screen.follower is None
        note(rec, "not followed")
        await pilot.pause(0.6)
        assert len(screen.model) == 10

    try:
        run_app(store_dir, scenario)
    finally:
        rec.close()


def test_f_starts_following_inside_the_timeline(tmp_path: Path) -> None:
    store_dir, _journal, rec = recorder(tmp_path)
    note(rec, "one")
    rec.checkpoint()

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.follower is None
        note(rec, "two")
        await pilot.pause(0.6)
        assert len(screen.model) == 2  # not followed: the checkpoint's tail only
        await pilot.press("F")
        await until(pilot, lambda: len(screen.model) == 3 and screen.events.cursor == 2, "seq 2 once F is pressed")

    try:
        run_app(store_dir, scenario, follow=False)
    finally:
        rec.close()


# -- a real terminal ------------------------------------------------------------------------------------
AGENT = textwrap.dedent(
    """
    import sys
    import ckptcli
    from ckptcli.history.recorder import Durability, Recorder

    store = ckptcli.open_store(sys.argv[1])
    rec = Recorder.open(store, "agent:live", sys.argv[2], durability=Durability(batch_size=1, fsync="never"))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "note":
            rec.append("memory.set", path=["note"], value=arg)
        elif cmd == "checkpoint":
            rec.checkpoint(message=arg)
        print("ok", flush=True)
    rec.close()
    """
)


class Agent:
    """A real recorder in another process, told what to record through its stdin."""

    def __init__(self, store_dir: Path, journal: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AGENT, str(store_dir), str(journal)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def do(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Screen:
    """`ckpt tui ARGS` in a pseudo-terminal: what it draws, read as it comes."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        import fcntl
        import pty
        import struct
        import termios

        try:
            master, slave = pty.openpty()
        except OSError as exc:  # pragma: no cover - no pseudo-terminals here
            pytest.skip(f"no pty: {exc}")
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ckptcli", "tui", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.fd = master
        self.seen = b""
        self.since_key = b""  # everything drawn since the last key

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                got = os.read(self.fd, 1 << 20)
            except OSError:
                return
            self.seen += got
            self.since_key += got

    def wait_for(self, *patterns: bytes) -> None:
        """Read until each of `patterns` is drawn (in any order: a frame draws the lines
        from the top) since the last wait; what was read up to them is dropped."""
        rxs = [re.compile(p) for p in patterns]
        deadline = time.monotonic() + PATIENCE
        while True:
            found = [rx.search(self.seen) for rx in rxs]
            if all(found):
                self.seen = self.seen[max(m.end() for m in found if m is not None) :]
                return
            assert self.proc.poll() is None, f"ckpt tui exited {self.proc.returncode}: {self.seen[-500:]!r}"
            missing = [p for p, m in zip(patterns, found, strict=True) if m is None]
            assert time.monotonic() < deadline, f"{missing!r} not drawn within {PATIENCE} s; last output: {self.seen[-500:]!r}"
            self.read(0.2)

    def key(self, data: bytes) -> None:
        self.seen = self.since_key = b""
        os.write(self.fd, data)

    def close(self) -> None:
        try:
            os.write(self.fd, b"q")
            deadline = time.monotonic() + 10
            while self.proc.poll() is None and time.monotonic() < deadline:
                self.read(0.1)
        except OSError:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            os.close(self.fd)


def test_ckpt_tui_follow_in_a_real_terminal_shows_what_a_running_agent_records(tmp_path: Path) -> None:
    """A real `ckpt tui agent:live --follow` in a pty and a real recorder in another process:
    each new event is drawn (its row, and the header of the cursor, which was at the end and
    follows it); once the user moved up, new events are drawn below and the cursor stays."""
    pytest.importorskip("pty")
    store_dir = tmp_path / ".ckpt"
    ckptcli.init_store(store_dir)
    journal = tmp_path / "live.journal"  # beside the store: found without --journal
    agent = Agent(store_dir, journal)
    screen: Screen | None = None
    try:
        for i in range(3):
            agent.do(f"note first-{i}")
        screen = Screen(["agent:live", "--follow", "--store", str(store_dir)], cwd=tmp_path)
        screen.wait_for(rb"; following", rb"seq 3  memory\.set")  # the journal's events, the cursor at the end
        for i in range(4, 7):
            agent.do(f"note live-{i}")
            screen.wait_for(rb"live-%d" % i, rb"seq %d  memory\.set" % i)  # its row; the cursor followed it
        agent.do("checkpoint six")  # the journal is replaced: what follows is read from the new one
        agent.do("note after-checkpoint-7")
        screen.wait_for(rb"after-checkpoint-7", rb"seq 7  memory\.set")
        # the user moves up two rows: the cursor is no longer at the end
        screen.key(b"\x1b[A")
        screen.wait_for(rb"seq 6  memory\.set")
        screen.key(b"\x1b[A")
        screen.wait_for(rb"seq 5  memory\.set")
        for i in range(8, 10):
            agent.do(f"note below-{i}")
            screen.wait_for(rb"below-%d" % i)
        assert re.search(rb"seq (6|7|8|9)  memory", screen.since_key) is None  # the header still says seq 5
        # the cursor stayed on seq 5: Down shows seq 6
        screen.key(b"\x1b[B")
        screen.wait_for(rb"seq 6  memory\.set")
    finally:
        agent.close()
        if screen is not None:
            screen.close()


def test_the_command_refuses_a_journal_without_follow_and_a_file_that_is_no_journal(tmp_path: Path) -> None:
    store_dir, journal, rec = recorder(tmp_path)
    rec.close()
    other = tmp_path / "notes.txt"
    other.write_text("not a journal")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ckptcli", "tui", *args, "--store", str(store_dir)], capture_output=True, text=True, cwd=REPO, timeout=60
        )

    r = cli("--journal", str(journal))
    assert r.returncode == 2 and "--journal is the journal --follow tails" in r.stderr and r.stderr.count("\n") == 1
    r = cli("--follow", "--journal", str(other))
    assert r.returncode == 5 and "is not a ckpt journal" in r.stderr and "Traceback" not in r.stderr
    fifo = tmp_path / "fifo.journal"
    os.mkfifo(fifo)  # it hung in open(), waiting for a writer, before anything was drawn
    r = cli("--follow", "--journal", str(fifo))
    assert r.returncode == 5 and "not a regular file" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cli("--follow", "--journal", str(journal))
    assert r.returncode == 2 and "terminal" in r.stderr  # everything checked; only the terminal is missing


# -- g SEQ across a subject's checkpoints -------------------------------------------------------------------
def test_goto_across_checkpoints_looks_in_a_worker_and_the_keys_stay_live(tmp_path: Path) -> None:
    """`g SEQ` outside the tail reads other checkpoints' tails (up to 64): not on the app's
    thread. While the look-up is held, Down still moves the cursor; once it is let go, the
    checkpoint that holds the seq opens at it."""
    import threading

    store_dir, _journal, rec = recorder(tmp_path)
    ids = []
    for c in range(2):
        for i in range(3):
            note(rec, f"c{c} n{i}")
        ids.append(rec.checkpoint(message=f"part {c}").id)
    rec.close()
    go_on = threading.Event()
    threads: list[int] = []

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.cid == ids[1]
        session = screen.session
        real = session.holder_of_seq

        def held(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.get_ident())
            go_on.wait(30)  # the old code waited here on the app's thread: no key was handled meanwhile
            return real(*args, **kwargs)

        session.holder_of_seq = held  # type: ignore[method-assign]
        await pilot.press("home")
        await pilot.press("g", "2", "enter")
        await until(pilot, lambda: bool(threads), "the look-up to start")
        await pilot.press("down", "down")
        await pilot.pause()
        assert pilot.app.screen is screen and screen.events.cursor == 2 and not go_on.is_set()
        go_on.set()
        await pilot.app.workers.wait_for_complete([w for w in pilot.app.workers if w.group == "goto"])
        await pilot.pause()
        opened = pilot.app.screen
        assert isinstance(opened, TimelineScreen) and opened.cid == ids[0] and opened.model.seq(opened.events.cursor) == 2
        assert threads[0] != threading.get_ident()  # a worker's thread, not the app's

    try:
        run_app(store_dir, scenario, follow=False, start=ids[1])
    finally:
        go_on.set()


def test_goto_a_seq_of_another_checkpoint_opens_the_one_that_holds_it(tmp_path: Path) -> None:
    """A recorder's run (checkpoints holding seq 1-3, 4-6, 7-9) and a fork of the second
    (seq 7-8): `g SEQ` opens the checkpoint that holds it, its own line first (ancestors,
    then descendants, newest first), at that seq; `g 99`: none holds it, said so."""
    store_dir, _journal, rec = recorder(tmp_path)
    ids = []
    for c in range(3):
        for i in range(3):
            note(rec, f"c{c} n{i}")
        ids.append(rec.checkpoint(message=f"part {c}").id)
    rec.close()
    # a fork of the second checkpoint: its own seq 7 and 8
    fork = Recorder.open(ckptcli.open_store(store_dir), SUBJECT, tmp_path / "fork.journal", base=ids[1].hex())
    note(fork, "fork 7")
    note(fork, "fork 8")
    fork_id = fork.checkpoint(message="the fork").id
    fork.close()

    async def goto(pilot: Any, seq: int) -> TimelineScreen:
        await pilot.press("g", *str(seq), "enter")
        await pilot.app.workers.wait_for_complete([w for w in pilot.app.workers if w.group == "goto"])
        await pilot.pause()
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen)
        return screen

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.cid == ids[2]
        screen = await goto(pilot, 5)
        assert screen.cid == ids[1] and screen.model.seq(screen.events.cursor) == 5
        assert any("seq 5 is in checkpoint" in n for n in [n.message for n in pilot.app._notifications])
        screen = await goto(pilot, 2)
        assert screen.cid == ids[0] and screen.model.seq(screen.events.cursor) == 2
        # two lines hold seq 8 after the first checkpoint: the newest, the fork's
        screen = await goto(pilot, 8)
        assert screen.cid == fork_id and screen.model.seq(screen.events.cursor) == 8
        screen = await goto(pilot, 5)  # on the fork: its parent's (an ancestor first)
        assert screen.cid == ids[1]
        screen.app.switch_screen(TimelineScreen(screen.session, fork_id))
        await pilot.pause()
        screen = await goto(pilot, 9)  # the fork has no seq 9: the main line's
        assert screen.cid == ids[2] and screen.model.seq(screen.events.cursor) == 9
        screen = await goto(pilot, 8)  # in its own tail now
        assert screen.cid == ids[2] and screen.model.seq(screen.events.cursor) == 8
        screen = await goto(pilot, 99)
        assert screen.cid == ids[2] and screen.model.seq(screen.events.cursor) == 8  # the cursor stays
        assert any(
            "seq 99 is not in this tail" in n and "nor in any other checkpoint of agent:live" in n
            for n in [n.message for n in pilot.app._notifications]
        )
        # Esc goes back to the history (the timeline was replaced, not stacked)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(pilot.app.screen, TimelineScreen)

    run_app(store_dir, scenario, follow=False, start=ids[2])


# -- the overview strip -----------------------------------------------------------------------------------------
def bursty_tail(tmp_path: Path, n: int = 400) -> tuple[Path, bytes]:
    """A tail of `n` demo events (errors, checkpoint events): the first half 1.5 s apart, the
    second a burst 10 ms apart."""
    from tests.tui_data import demo_events, write

    store_dir = tmp_path / ".ckpt"
    store = ckptcli.init_store(store_dir)
    evs = demo_events(1, n, 10**18)
    t = 10**18
    for i, ev in enumerate(evs):
        ev["ts"] = t
        t += 1_500_000_000 if i < n // 2 else 10_000_000
    snap: dict[str, Any] = {"memory": {"messages": []}, "plan": [], "tools": []}
    return store_dir, write(store, {**snap, "events": evs}, subject="agent:burst", at=0)  # a fixed id (the snapshot test)


def test_the_overview_strip_shows_density_errors_checkpoints_and_the_cursor_and_a_click_jumps(tmp_path: Path) -> None:
    from ckptcli.tui.overview import BARS, OverviewStrip

    store_dir, cid = bursty_tail(tmp_path)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen)
        strip = screen.query_one("#overview", OverviewStrip)
        await until(pilot, lambda: strip.active, "the strip drawn after the first frame")
        text = strip.render()
        width = strip.size.width
        assert len(text.plain) == width
        bars = [c for c in text.plain if c in BARS]
        # the burst (second half) is taller than the slow first half
        assert BARS.index(text.plain[width - 2]) > BARS.index(text.plain[1])
        assert len(bars) >= width // 2
        # errors and checkpoints appear once the jump index exists (started by ]e)
        assert not any("red" in str(span.style) for span in text.spans)
        await pilot.press("right_square_bracket", "e")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        text = strip.render()
        assert any("red" in str(span.style) for span in text.spans)
        assert "┃" in text.plain
        # the cursor's cell is reversed
        cursor_cells = [span for span in text.spans if "reverse" in str(span.style)]
        assert len(cursor_cells) == 1
        x = cursor_cells[0].start
        assert strip.cell_row(x) is not None and strip.cell_row(x) <= screen.events.cursor
        # a click on the last cell moves the cursor there
        await pilot.click("#overview", offset=(width - 1, 0))
        await pilot.pause()
        last = strip.cell_row(width - 1)
        assert last is not None and screen.events.cursor == last > 300

    store = ckptcli.open_store(store_dir)
    app = CkptApp(open_session(store, prefill=False), checkpoint=cid, view="timeline", blink=False)

    async def main() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(main())


def _timeline_app(tmp_path: Path, n: int = 2_000) -> CkptApp:
    store_dir, cid = bursty_tail(tmp_path, n)
    return CkptApp(open_session(ckptcli.open_store(store_dir), prefill=False), checkpoint=cid, view="timeline", blink=False)


def test_a_page_of_the_timeline_is_drawn_ahead_so_pagedown_draws_no_row_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a move is on the screen, the list draws the page below and the page above into
    its row cache: the frame of a PageDown (or PageUp) then draws no row of the list again
    but, at most, the cursor's (it drew each of the page's rows: a page of new rows)."""
    from ckptcli.tui.widgets import VirtualList

    in_frame: list[int] = []  # rows drawn while the screen asked for the list's lines
    framing = [False]
    render_line = VirtualList.render_line

    def drawing(self: VirtualList, y: int) -> Any:
        framing[0] = True
        try:
            return render_line(self, y)
        finally:
            framing[0] = False

    monkeypatch.setattr(VirtualList, "render_line", drawing)
    app = _timeline_app(tmp_path)

    async def main() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            screen = app.screen
            assert isinstance(screen, TimelineScreen)
            events = screen.query_one("#events", VirtualList)
            render_row = events.render_row

            def counting(r: int) -> Any:
                if framing[0]:
                    in_frame.append(r)
                return render_row(r)

            events.render_row = counting
            await pilot.press("down")
            height = events.scrollable_content_region.height
            for key, moved in (("pagedown", height - 1), ("pagedown", height - 1), ("pagedown", height - 1), ("pageup", 1 - height)):
                before = events.cursor
                await until(pilot, lambda: not getattr(events, "_ahead_pending", False), "the rows drawn ahead")
                in_frame.clear()
                await pilot.press(key)
                await pilot.pause()
                assert events.cursor == before + moved
                assert len(in_frame) <= 1, (key, in_frame, height)

    asyncio.run(main())


def test_the_overview_strip_is_drawn_again_only_when_the_cursor_changes_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell of the strip holds many rows of a long tail: a move within it leaves the
    strip as it is drawn (it was drawn again at every move); a move to another cell
    draws it with that cell reversed."""
    from ckptcli.tui.overview import OverviewStrip

    drawn: list[int] = []
    render = OverviewStrip.render

    def counting(self: OverviewStrip) -> Any:
        drawn.append(self.cursor)
        return render(self)

    monkeypatch.setattr(OverviewStrip, "render", counting)
    app = _timeline_app(tmp_path)

    async def main() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            screen = app.screen
            assert isinstance(screen, TimelineScreen)
            strip = screen.query_one("#overview", OverviewStrip)
            await until(pilot, lambda: strip.active and strip._bars is not None, "the strip drawn")
            await pilot.pause()
            rows_per_cell = strip._bars[2][2] - strip._bars[2][1] if strip._bars else 0
            assert rows_per_cell > 3, strip._bars
            screen.events.set_cursor(strip._bars[2][1] if strip._bars else 0)  # the first row of the second cell
            await pilot.pause()
            before = len(drawn)
            for _ in range(rows_per_cell - 1):  # within the cell
                await pilot.press("down")
            await pilot.pause()
            assert len(drawn) == before, drawn[before:]
            await pilot.press("down")  # into the next cell
            await pilot.pause()
            assert len(drawn) > before and drawn[-1] == screen.events.cursor
            cursor_cells = [span.start for span in strip.render().spans if "reverse" in str(span.style)]
            assert cursor_cells == [2], cursor_cells

    asyncio.run(main())


def test_with_follow_the_history_shows_the_checkpoints_a_running_agent_takes(tmp_path: Path) -> None:
    from ckptcli.tui.screens.history import HistoryScreen

    store_dir, _journal, rec = recorder(tmp_path)
    note(rec, "one")
    rec.checkpoint(message="first")

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen)
        before = len(screen.history)
        note(rec, "two")
        took = rec.checkpoint(message="taken while the history is shown")
        await until(pilot, lambda: took.id in screen.history.nodes, "the new checkpoint in the history")
        assert len(screen.history) == before + 1

    store = ckptcli.open_store(store_dir)
    app = CkptApp(open_session(store, prefill=False, follow=True), blink=False)

    async def main() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            await scenario(pilot)

    try:
        asyncio.run(main())
    finally:
        rec.close()


def test_following_a_store_on_object_storage_reads_its_ref_every_eighth_poll(tmp_path: Path) -> None:
    """A `latest` ref on object storage is a request: read every REMOTE_REF_EVERY polls, the
    checkpoints taken found all the same."""
    from ckptcli.history.recorder import Recorder
    from ckptcli.tui.follow import REMOTE_REF_EVERY, Follow

    store = ckptcli.init_store(f"memory://ckpt-tuilive-{os.getpid()}")
    assert store.directory is None
    rec = Recorder.open(store, SUBJECT, tmp_path / "remote.journal", durability=Durability(batch_size=1, fsync="never"))
    try:
        reads = 0
        read_ref = store.read_ref

        def counting(path: str) -> bytes | None:
            nonlocal reads
            reads += 1
            return read_ref(path)

        store.read_ref = counting  # type: ignore[method-assign]
        follow = Follow(store, SUBJECT, rec.last_seq, {bytes.fromhex(rec.base)}, None)
        for _ in range(REMOTE_REF_EVERY * 3):
            assert follow.poll() is None
        assert reads == 3
        note(rec, "one")
        rec.checkpoint(message="remote")
        got = [follow.poll() for _ in range(REMOTE_REF_EVERY)]
        found = [u for u in got if u is not None]
        assert len(found) == 1 and [e["value"] for e in found[0].events] == ["one"] and len(found[0].checkpoints) == 1
    finally:
        rec.close()


def test_following_says_when_the_journal_is_truncated_and_follows_the_new_run_written_there(tmp_path: Path) -> None:
    """The followed journal is emptied in place (`: > live.journal`): a notification says so
    (it stalled silently); a new run then recorded at the same path (its own first
    checkpoint, its seqs from 1 again) is followed in that run's timeline, said too."""
    store_dir, journal, rec = recorder(tmp_path)
    for i in range(3):
        note(rec, f"old {i}")

    def said(pilot: Any, text: str) -> bool:
        return any(text in n.message for n in pilot.app._notifications)

    async def scenario(pilot: Any) -> None:
        nonlocal rec
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.follower is not None
        await until(pilot, lambda: len(screen.model) == 4, "the journal's three events")
        rec.close()
        journal.write_bytes(b"")  # truncated in place
        await until(pilot, lambda: said(pilot, "was truncated"), "a notification that the journal was truncated")
        rec = Recorder.open(
            ckptcli.open_store(store_dir),
            SUBJECT,
            journal,
            state={"memory": {"run": 2}, "plan": [], "tools": []},
            durability=Durability(batch_size=1, fsync="never", flush_on=frozenset()),
        )
        note(rec, "new 1")
        await until(pilot, lambda: said(pilot, "replaced by another run"), "a notification that another run writes the journal")
        await until(pilot, lambda: pilot.app.screen is not screen, "the new run's timeline")
        new = pilot.app.screen
        assert isinstance(new, TimelineScreen) and new.cid.hex() == rec.base
        await until(pilot, lambda: new.follower is not None, "the new run's timeline following")
        note(rec, "new 2")
        await until(pilot, lambda: len(new.model) == 3, "the new run's events, followed")
        assert [new.model.event(r - 1).fields["value"] for r in (1, 2)] == ["new 1", "new 2"]

    try:
        run_app(store_dir, scenario)
    finally:
        rec.close()


def test_a_journal_of_another_line_is_not_appended(tmp_path: Path) -> None:
    """A fork of an earlier checkpoint records the same seqs into its own journal: following
    the main line with that journal appends none of them (its base is not on the line)."""
    from ckptcli.tui.follow import Follow

    store_dir, _journal, rec = recorder(tmp_path)
    note(rec, "main 1")
    first = rec.checkpoint(message="first").id
    note(rec, "main 2")
    second = rec.checkpoint(message="second").id
    rec.close()
    fork = Recorder.open(
        ckptcli.open_store(store_dir), SUBJECT, tmp_path / "fork.journal", base=first.hex(), durability=Durability(batch_size=1)
    )
    try:
        note(fork, "fork 2")
        note(fork, "fork 3")
        store = ckptcli.open_store(store_dir)
        follow = Follow(store, SUBJECT, 2, {second}, tmp_path / "fork.journal")
        assert follow.poll() is None and follow.journal is not None and follow.journal.header is not None  # read, not appended
        # the same journal followed from the checkpoint it continues: its events are appended
        follow = Follow(None, SUBJECT, 1, {first}, tmp_path / "fork.journal")
        got = follow.poll()
        assert got is not None and [e["value"] for e in got.events] == ["fork 2", "fork 3"]
    finally:
        fork.close()


def test_a_journal_that_appears_after_following_started_is_found(tmp_path: Path) -> None:
    """No journal beside the store when F is pressed (the agent's journal is elsewhere for
    now): the polls look again, find it once it is there, and follow it."""
    store_dir, journal, rec = recorder(tmp_path)
    aside = tmp_path / "aside"
    aside.mkdir()
    journal.rename(aside / journal.name)  # the recorder keeps writing to it (its descriptor)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen) and screen.follower is not None and screen.follower.journal is None
        note(rec, "written before it is found")
        (aside / journal.name).rename(journal)
        await until(pilot, lambda: len(screen.model) == 2, "the event, once the journal is found")
        assert any("following the journal" in n.message for n in pilot.app._notifications)

    try:
        run_app(store_dir, scenario)
    finally:
        rec.close()
