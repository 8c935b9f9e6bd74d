"""`ckpt tui` at scale: a store of 10,000 checkpoints and a checkpoint with a 100,000-event tail.

    python -m bench.tui [--workdir DIR] [--runs 5] [--json PATH] [--quick] [--only PARTS] [--against DIR]

Builds (once, cached in --workdir, default /tmp/ckpt-bench-tui) a store of 10,000
checkpoints (10 subjects of 1,000, tags, forks, migrations) and a store holding one
checkpoint with a 100,000-event tail, then measures:

- first paint, in-process: a fresh Python process per run that imports the TUI, opens
  the store (or the checkpoint and its timeline) and runs the app with `App.run_test`;
  the time from the process's start to the first row drawn by the list (the VirtualList
  records when its first line is rendered), and the part after the imports;
- first paint, real terminal: `ckpt tui` started in a pseudo-terminal; the time from
  spawning it until its first frame's text (the list's title) has been written;
- cursor moves in the real terminal: the time from writing a key to the terminal until
  the frame showing the new position ("seq N" in the timeline's header) arrives, for
  Down, PageDown, End and a jump to the middle (g 50000 Enter), and, for jumps, until the
  state at the new position is drawn (replayed in a worker: before and after the
  background replay has kept a state every 1,000 events);
- the in-process UI work of one move (the screen's handler: the state, the changes, the
  tree, and drawing the visible rows), without the terminal;
- Down and PageDown driven by Textual's Pilot (`--only keys`; no terminal): the time from
  the key to the next frame the app composes, keys 0.2 s apart, in a fresh process per
  run; with `--against DIR`, that checkout too, the two taking turns;
- the value viewer (in-process): Enter on a leaf holding a 1 MB string until the viewer's
  first line is drawn (the string wrapped to the width);
- jumps (in-process): `]e`, the next error, until the cursor is on it and drawn: once
  the background scan has indexed the tail's errors, tool calls, failures and plan
  changes (and how long that scan takes), and before it, when the events from the
  cursor on are read (the nearest error, and a sort the tail does not have: every
  event read);
- following a running agent (real terminal): `ckpt tui agent:live --follow` in a
  pseudo-terminal while a recorder in this process appends events (one at a time, at
  random moments of the TUI's poll interval); the time from the append's return (the
  event is in the journal) until its row's text arrives from the terminal;
- the overview strip (in-process): drawing it over the 100,000-event tail (one event read
  per cell) once the first frame is out;
- memory: the TUI process's RSS (VmRSS, and its peak VmHWM) after opening the tail, after
  scrolling through 10,000 events with PageDown, and after the background replay went
  through all 100,000; and, for comparison, the peak RSS of decoding the whole tail
  (`replay.load_tail`, what `ckpt replay` does).

Prints a table with the targets (first paint < 1 s; a cursor move drawn within 50 ms at
the median and 100 ms at p95; the value viewer on 1 MB and a jump to the next error
within 200 ms; a followed event on screen within 1 s; memory bounded) and PASS/FAIL.
Medians over --runs. `--only follow` (or paint, terminal, viewer: comma-separated)
measures only those parts. `--against DIR` also times the tail's first paint in a real
terminal against the checkout in DIR (`git worktree add --detach /tmp/old main`), the two
taking turns, with each one's CPU time until its first frame (`--only none --against DIR`:
that alone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import table, verdict
from bench.common import workdir as made

DEFAULT_WORKDIR = Path("/tmp/ckpt-bench-tui")
CHECKPOINTS = 10_000
EVENTS = 100_000
FIRST_PAINT_TARGET = 1.0
MOVE_MEDIAN_TARGET = 0.050
MOVE_P95_TARGET = 0.100
#: RSS growth allowed from the open timeline to after scrolling 10,000 events
SCROLL_GROWTH_TARGET_MIB = 64
#: the value viewer open on a 1 MB string, a jump to the next error
VIEWER_TARGET = 0.200
JUMP_TARGET = 0.200
#: a recorded event on the screen of `ckpt tui --follow`
FOLLOW_TARGET = 1.0
FOLLOW_EVENTS = 40
BIG_VALUE = 1_000_000
T0 = 1_767_225_600 * 10**9
SIZE = (120, 40)


def log(msg: str) -> None:
    print(f"[bench.tui] {msg}", file=sys.stderr, flush=True)


# -- data -------------------------------------------------------------------------------------
def build_store(path: Path, n: int) -> None:
    """n checkpoints over 10 subjects; every 100th tagged, every 250th forked from 50 back,
    every 500th a schema migration."""
    import ckptcli
    from ckptcli.api import take

    store = ckptcli.init_store(path)
    per = max(1, n // 10)
    latest: dict[str, list[bytes]] = {}
    for i in range(n):
        subject = f"agent:bot{i // per}"
        chain = latest.setdefault(subject, [])
        k = len(chain)
        labels = {"run": str(k // 100)}
        parents = None
        schema = 1 + (k // 500)
        message = f"step {k}"
        if k and k % 250 == 0 and len(chain) > 50:
            parents = [chain[-50].hex()]
            labels.update({"fork.of": chain[-50].hex(), "fork.at": str(k - 50)})
            message = f"fork at step {k - 50}"
        elif k and k % 500 == 0:
            message = f"migrate schema {schema - 1} -> {schema}"
        r = take(
            store,
            {"memory": {"step": k, "note": f"step {k} of {subject}"}},
            subject=subject,
            labels=labels,
            message=message,
            parents=parents,
            schema_version=schema,
        )
        chain.append(r.id)
        if k % 100 == 0:
            store.set_tag(f"{subject.split(':')[1]}-{k}", r.id)
        if i % 1000 == 0:
            log(f"building the store: {i:,}/{n:,}")
    from ckptcli.store import catalog

    catalog.rows(store)  # the catalog, as the first `ckpt ls` builds it


def make_events(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A long agent run: per input (a user message), a plan step pushed, a tool call and
    its result, two memory writes, the step marked done and popped, a reply."""
    rng = random.Random(seed)
    words = [
        "order",
        "ticket",
        "refund",
        "shipping",
        "account",
        "invoice",
        "status",
        "delayed",
        "customer",
        "agent",
        "tool",
        "search",
        "lookup",
        "reply",
    ]
    out: list[dict[str, Any]] = []
    ts = T0
    k = 0

    def add(kind: str, **fields: Any) -> int:
        nonlocal ts
        seq = len(out) + 1
        out.append({"seq": seq, "ts": ts, "kind": kind, **fields})
        ts += rng.randrange(50_000_000, 2_000_000_000)
        return seq

    while len(out) < n:
        k += 1
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(8, 30)))
        inp = add("message.append", message={"role": "user", "content": text, "id": f"m{k}"})
        add("plan.push", item={"step": f"handle m{k}", "status": "running"}, cause=inp)
        add("tool.call", call_id=f"c{k}", tool=rng.choice(["search", "orders.lookup", "crm.get"]), args={"q": text[:40], "k": k}, cause=inp)
        if rng.random() < 0.1:
            add("tool.result", call_id=f"c{k}", status="error", error="timeout", cause=inp)
        else:
            add("tool.result", call_id=f"c{k}", result={"hits": rng.randrange(0, 50), "top": text[:60]}, cause=inp)
        add("memory.set", path=["facts", f"f{k % 500}"], value={"k": k, "v": text[:30]}, cause=inp)
        add("memory.set", path=["counters", "steps"], value=k, cause=inp)
        add("plan.update", value="done", path=["status"], cause=inp)
        add("plan.pop", cause=inp)
        add("message.append", message={"role": "assistant", "content": f"done with m{k}: " + text[:80], "id": f"r{k}"}, cause=inp)
    return out[:n]


def build_tail(path: Path, n: int) -> None:
    import ckptcli
    from ckptcli.api import take

    store = ckptcli.init_store(path)
    snapshot = {
        "memory": {"goal": "work the support queue", "messages": [], "facts": {f"f{i}": {"k": i, "v": "seed"} for i in range(200)}},
        "plan": [{"step": "serve", "status": "running"}],
        "tools": [],
    }
    log(f"generating {n:,} events")
    events = make_events(n)
    log("taking the checkpoint")
    take(store, {**snapshot, "events": events}, subject="agent:long", labels={"events.seq": str(n)}, message=f"{n:,} events")


def prepare(workdir: Path, checkpoints: int, events: int, *, store_too: bool = True) -> tuple[Path, Path]:
    """The store and the tail, built once into `workdir`; the store only with `store_too`."""
    made(workdir)
    store = workdir / f"store-{checkpoints}"
    tail = workdir / f"tail-{events}"
    for path, build, n in ((store, build_store, checkpoints), (tail, build_tail, events)):
        if path == store and not store_too:
            continue
        stamp = path / ".bench-complete"
        if not stamp.exists():
            if path.exists():
                import shutil

                shutil.rmtree(path)
            t = time.perf_counter()
            build(path, n)
            stamp.write_text("ok\n")
            log(f"built {path} in {time.perf_counter() - t:.0f} s")
    return store, tail


# -- in-process: one fresh interpreter per run -------------------------------------------------------
def _inner_first_paint(store: str, ref: str | None) -> dict[str, float]:
    """Runs in a child process: import, open, run the app until its first row is drawn."""
    import asyncio

    start = time.perf_counter()
    from ckptcli.api import open_store
    from ckptcli.tui.app import CkptApp, open_session
    from ckptcli.tui.widgets import VirtualList

    imported = time.perf_counter()
    st = open_store(Path(store))
    session = open_session(st, prefill=False)
    checkpoint = st.resolve(ref) if ref else None
    app = CkptApp(session, checkpoint=checkpoint, view="timeline" if ref else "history", blink=False)
    list_id = "#events" if ref else "#checkpoints"
    out: dict[str, float] = {}

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            lst: VirtualList | None = None
            while lst is None or lst.first_render_at is None:
                try:
                    lst = app.screen.query_one(list_id, VirtualList)
                except Exception:  # noqa: BLE001 - the screen is not there yet
                    lst = None
                await asyncio.sleep(0.001)
            out["first_paint_s"] = lst.first_render_at - start
            out["after_imports_s"] = lst.first_render_at - imported
            out["imports_s"] = imported - start
            if ref:
                out.update(await _inner_moves(pilot, app))

    asyncio.run(main())
    return out


async def _inner_moves(pilot: Any, app: Any) -> dict[str, float]:
    """The UI work of a cursor move, timed on the app's own thread: the handler (state,
    changes, tree) and drawing every visible line of the list and the tree."""
    screen = app.screen
    lst = screen.events
    tree = screen.query_one("#state")
    times: dict[str, list[float]] = {"down": [], "pagedown": []}

    def frame() -> None:
        for y in range(lst.size.height):
            lst.render_line(y)

    for name, delta in (("down", 1), ("pagedown", lst.size.height - 1)):
        for _ in range(60):
            t = time.perf_counter()
            lst.set_cursor(lst.cursor + delta)
            screen._request(lst.cursor)
            frame()
            tree.refresh()
            times[name].append(time.perf_counter() - t)
            await pilot.pause(0)
    return {f"ui_{k}_median_s": statistics.median(v) for k, v in times.items()} | {f"ui_{k}_max_s": max(v) for k, v in times.items()}


def build_big_value(path: Path) -> None:
    """A store with one checkpoint whose memory holds a 1 MB string (words, one line)."""
    import ckptcli
    from ckptcli.api import take

    rng = random.Random(11)
    words = ["order", "refund", "policy", "customer", "never", "always", "cite", "number", "answer", "politely"]
    text = ""
    while len(text) < BIG_VALUE:
        text += " ".join(rng.choice(words) for _ in range(1000)) + " "
    take(ckptcli.init_store(path), {"memory": {"prompt": text[:BIG_VALUE]}}, subject="agent:big", message="a 1 MB value")


def _is_error(ev: Any) -> bool:
    """What `]e` jumps to (ckptcli.tui.screens.timeline.JUMPS)."""
    from ckptcli.tui.screens.timeline import JUMPS

    return bool(JUMPS["e"][1](ev))


def _inner_viewer_and_jumps(big: str, tail: str, ref: str, runs: int) -> dict[str, float]:
    """Runs in a child process: the value viewer on a 1 MB string; jumps on the tail."""
    import asyncio

    from ckptcli.api import open_store
    from ckptcli.tui.app import CkptApp, open_session
    from ckptcli.tui.screens.value import ValueScreen
    from ckptcli.tui.widgets import ValueTree, VirtualList

    out: dict[str, float] = {}

    async def until(check: Any, timeout: float = 60.0) -> None:
        give_up = time.monotonic() + timeout
        while not check():
            if time.monotonic() > give_up:
                raise TimeoutError(f"bench.tui: waited {timeout:.0f} s for the TUI")
            await asyncio.sleep(0.0005)

    async def viewer() -> None:
        st = open_store(Path(big))
        app = CkptApp(open_session(st, prefill=False), checkpoint=st.resolve("agent:big"), view="checkpoint", blink=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("2")
            tree = app.screen.query_one("#memory-tree", ValueTree)
            tree.move_cursor(tree.root.children[0])
            await pilot.pause()
            times = []
            for _ in range(max(runs, 5)):
                t = time.perf_counter()
                await pilot.press("enter")
                await until(lambda: isinstance(app.screen, ValueScreen) and app.screen.query_one("#value", VirtualList).first_render_at)
                times.append(app.screen.query_one("#value", VirtualList).first_render_at - t)
                assert len(app.screen.value) == BIG_VALUE
                await pilot.press("escape")
                await pilot.pause()
            out["viewer_median_s"] = statistics.median(times)
            out["viewer_max_s"] = max(times)

    async def jumps(prefill: bool) -> None:
        st = open_store(Path(tail))
        app = CkptApp(open_session(st, prefill=prefill), checkpoint=st.resolve(ref), view="timeline", blink=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            screen = app.screen
            events = screen.events
            drawn: dict[int, float] = {}
            draw = events.render_line

            def spy(y: int) -> Any:
                index = int(events.scroll_offset.y) + y
                if index == events.cursor:
                    drawn.setdefault(index, time.perf_counter())
                return draw(y)

            events.render_line = spy

            async def jump(keys: tuple[str, ...], target: int, timeout: float = 60.0) -> float:
                # from the key to the frame that draws the cursor on the row jumped to
                drawn.clear()
                t = time.perf_counter()
                await pilot.press(*keys)
                await until(lambda: target in drawn, timeout)
                got = drawn[target] - t
                await app.workers.wait_for_complete([w for w in app.workers if w.group == "replay"])  # the next starts quiet
                return got

            if not prefill:
                # before the index: the events from the cursor on are read (a worker)
                screen.indexing = True  # no index scan in this app
                errors = [r for r in range(1, 3000) if _is_error(screen.model.event(r - 1))]
                out["jump_scan_near_median_s"] = statistics.median([await jump(("right_square_bracket", "e"), r) for r in errors[:10]])
                t = time.perf_counter()
                await pilot.press("right_square_bracket", "c")  # a sort the tail does not have: every event read
                await until(lambda: any("no other" in n.message for n in app._notifications), 600)
                out["jump_scan_none_s"] = time.perf_counter() - t
                return
            # as `ckpt tui` runs: the background replay keeps a state every 1,000 events, then
            # the scan indexes the tail; jumps then look their row up
            t = time.perf_counter()
            await until(lambda: screen.jump_rows is not None, 900)
            out["prefill_and_index_s"] = time.perf_counter() - t
            rows = list(screen.jump_rows["e"])
            picks = [rows[i] for i in range(0, len(rows), max(1, len(rows) // 20))][:20]
            warm = []
            for target in picks:
                events.set_cursor(max(0, target - 1 - (target % 500)))  # somewhere before it
                await pilot.pause()
                warm.append(await jump(("right_square_bracket", "e"), next(r for r in rows if r > events.cursor)))
            events.set_cursor(0)
            await pilot.pause()
            warm.append(await jump(("left_square_bracket", "e"), rows[-1]))  # wraps around, to the tail's last error
            out["jump_indexed_median_s"] = statistics.median(warm)
            out["jump_indexed_max_s"] = max(warm)

    asyncio.run(viewer())
    asyncio.run(jumps(prefill=False))
    asyncio.run(jumps(prefill=True))
    return out


def viewer_and_jumps(workdir: Path, tail: Path, ref: str, runs: int) -> dict[str, Any]:
    big = workdir / "big-value"
    if not (big / ".bench-complete").exists():
        if big.exists():
            import shutil

            shutil.rmtree(big)
        build_big_value(big)
        (big / ".bench-complete").write_text("ok\n")
    code = (
        "import json; from bench.tui import _inner_viewer_and_jumps; "
        f"print(json.dumps(_inner_viewer_and_jumps({str(big)!r}, {str(tail)!r}, {ref!r}, {runs})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def inprocess(store: Path, ref: str | None, runs: int) -> dict[str, Any]:
    results = []
    for _ in range(runs):
        code = f"import json, sys; from bench.tui import _inner_first_paint; print(json.dumps(_inner_first_paint({str(store)!r}, {ref!r})))"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


# -- a real terminal ----------------------------------------------------------------------------------------
class Terminal:
    """`ckpt ARGS` running in a pseudo-terminal of SIZE; reads what it draws."""

    def __init__(self, args: list[str], tree: Path | None = None) -> None:
        """`tree`: run the ckptcli of that checkout (another worktree: --against), else this one's."""
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
        env = {**os.environ, "TERM": "xterm-256color"}
        if tree is not None:  # `-m` puts the working directory first on sys.path: that checkout's ckptcli
            env["PYTHONPATH"] = str(tree)
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ckptcli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            cwd=tree,
        )
        os.close(slave)
        self.pid, self.fd = self.proc.pid, master
        self.buffer = b""
        self.match: re.Match[bytes] | None = None

    def wait_for(self, marker: bytes | re.Pattern[bytes], timeout: float = 120.0) -> float:
        """Read until `marker` (bytes or a pattern) is in what was written since the last
        wait; returns the time it arrived. The match is kept in `self.match`."""
        pattern = marker if isinstance(marker, re.Pattern) else re.compile(re.escape(marker))
        deadline = time.perf_counter() + timeout
        while (m := pattern.search(self.buffer)) is None:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"{pattern.pattern!r} not drawn within {timeout} s; last output: {self.buffer[-300:]!r}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                self.buffer += os.read(self.fd, 1 << 20)
        at = time.perf_counter()
        self.match = m
        self.buffer = self.buffer[m.end() :]
        return at

    def key_seq(self, data: bytes) -> tuple[float, int]:
        """Write a key; (time until the timeline's header is redrawn, the seq it shows)."""
        self.buffer = b""
        t = time.perf_counter()
        os.write(self.fd, data)
        at = self.wait_for(re.compile(rb"seq (\d+)  [a-z]"))
        assert self.match is not None
        return at - t, int(self.match.group(1))

    def wait_idle(self, quiet: float = 1.0, timeout: float = 600.0) -> None:
        """Wait until the process uses no CPU for `quiet` seconds (its workers are done)."""
        deadline = time.perf_counter() + timeout
        last = -1
        while time.perf_counter() < deadline:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            used = int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
            if used == last:
                return
            last = used
            self.drain(quiet)

    def drain(self, quiet: float = 0.3) -> None:
        """Read until nothing more comes for `quiet` seconds."""
        while True:
            ready, _, _ = select.select([self.fd], [], [], quiet)
            if not ready:
                break
            os.read(self.fd, 1 << 20)
        self.buffer = b""

    def key(self, data: bytes, marker: bytes | re.Pattern[bytes], timeout: float = 120.0) -> float:
        self.buffer = b""
        t = time.perf_counter()
        os.write(self.fd, data)
        return self.wait_for(marker, timeout) - t

    def rss_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the TUI process, KiB."""
        fields = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def close(self) -> None:
        try:
            os.write(self.fd, b"q")
            deadline = time.perf_counter() + 10
            while self.proc.poll() is None and time.perf_counter() < deadline:
                self.drain(0.1)
        except OSError:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            os.close(self.fd)


DOWN, PAGEDOWN, END = b"\x1b[B", b"\x1b[6~", b"\x1b[F"


def terminal_store(store: Path, runs: int, checkpoints: int) -> dict[str, Any]:
    paints = []
    for _ in range(runs):
        term = Terminal(["tui", str(store)])
        try:
            paints.append(term.wait_for(f"{checkpoints:,} checkpoints".encode()) - term.start)
            term.drain()
            moves = [term.key(DOWN, b"children:") for _ in range(20)]
        finally:
            term.close()
    return {"first_paint_s": statistics.median(paints), "down_median_s": statistics.median(moves), "down_max_s": max(moves)}


def terminal_tail(tail: Path, ref: str, runs: int, events: int) -> dict[str, Any]:
    args = ["tui", "--store", str(tail), ref, "--timeline"]
    title = b"events, seq 1.."
    paints, ends = [], []
    for _ in range(runs):
        term = Terminal(args)
        try:
            paints.append(term.wait_for(title) - term.start)
            # End at once: the row is drawn from the tail's last leaves, its state replayed
            # by a worker from the snapshot (the background replay has barely started)
            term.buffer = b""
            t = time.perf_counter()
            os.write(term.fd, END)
            row = term.wait_for(at_seq(events), 60) - t
            ends.append((row, term.wait_for(state_at(events), 300) - t))
        finally:
            term.close()
    out: dict[str, Any] = {
        "first_paint_s": statistics.median(paints),
        "end_row_cold_s": statistics.median(r for r, _ in ends),
        "end_state_cold_s": statistics.median(s for _, s in ends),
    }
    term = Terminal(args)
    try:
        term.wait_for(title)
        term.drain(0.05)
        out["rss_first_paint_kib"], _ = term.rss_kib()
        # Down while the background replay runs, then once it is done
        busy = [term.key(DOWN, at_seq(k)) for k in range(1, 101)]
        term.wait_idle()
        out["rss_all_kept_kib"], _ = term.rss_kib()
        downs = [term.key(DOWN, at_seq(k)) for k in range(101, 301)]
        # PageDown through 10,000 events, then 10,000 more: memory must not follow
        pages: list[float] = []
        seq = 300
        for mark in (10_000, 20_000):
            while seq < min(mark, events - 100):
                latency, seq = term.key_seq(PAGEDOWN)
                pages.append(latency)
            term.drain(0.2)
            out[f"rss_after_{mark // 1000}k_kib"], out[f"hwm_after_{mark // 1000}k_kib"] = term.rss_kib()
        out["events_scrolled"] = seq
        jumps = []
        for target in (events // 2, events // 4, 3 * events // 4, events // 8 + 345, events - 1000 + 7):
            term.buffer = b""
            os.write(term.fd, b"g")
            term.wait_for(b"go to seq", 30)
            t = time.perf_counter()
            os.write(term.fd, str(target).encode() + b"\r")
            row = term.wait_for(at_seq(target)) - t
            jumps.append((row, term.wait_for(state_at(target)) - t))
        out["rss_end_kib"], out["hwm_end_kib"] = term.rss_kib()
        out["jump_row_median_s"] = statistics.median(r for r, _ in jumps)
        out["jump_state_warm_median_s"] = statistics.median(s for _, s in jumps)
        out["jump_state_warm_max_s"] = max(s for _, s in jumps)
        out["down_busy_median_s"], out["down_busy_p95_s"] = statistics.median(busy), _p95(busy)
        out["down_median_s"], out["down_p95_s"] = statistics.median(downs), _p95(downs)
        out["pagedown_median_s"], out["pagedown_p95_s"] = statistics.median(pages), _p95(pages)
    finally:
        term.close()
    return out


def paint_against(tail: Path, ref: str, runs: int, other: Path) -> dict[str, Any]:
    """First paint of the tail in a real terminal, this checkout and `other` (a worktree of
    another commit) taking turns, so that both see the same load; and each one's CPU time
    until then (user + sys of the process, which load moves less than wall time)."""
    here = Path(__file__).resolve().parent.parent
    args = ["tui", "--store", str(tail), ref, "--timeline"]
    got: dict[str, list[tuple[float, float]]] = {"this": [], "other": []}
    for _ in range(runs):
        for name, tree in (("other", other), ("this", here)):
            term = Terminal(args, tree)
            try:
                wall = term.wait_for(b"events, seq 1..") - term.start
                got[name].append((wall, _cpu_seconds(term.pid)))
            finally:
                term.close()
    return {
        f"{name}_{k}": statistics.median(v[i] for v in values) for name, values in got.items() for i, k in enumerate(("paint_s", "cpu_s"))
    }


#: The key-to-frame measurement, run with `python -c` in the checkout being measured (its
#: own ckptcli, whatever its bench/ holds): the real app driven by its Pilot on the tail.
_KEYS_SCRIPT = """
import asyncio, json, statistics, sys, time
from pathlib import Path
from textual.events import Key
from ckptcli.api import open_store
from ckptcli.tui.app import CkptApp, open_session
from ckptcli.tui.widgets import VirtualList

tail, ref, presses, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
st = open_store(Path(tail))
app = CkptApp(open_session(st, prefill=False), checkpoint=st.resolve(ref), view="timeline", blink=False)
frames = []
display = app._display

def spy(screen, update):
    if update is not None:
        frames.append(time.perf_counter())
    return display(screen, update)

app._display = spy
out = {}

async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        lst = None
        while lst is None or lst.first_render_at is None:
            try:
                lst = app.screen.query_one("#events", VirtualList)
            except Exception:
                lst = None
            await asyncio.sleep(0.001)
        await pilot.pause()
        for key in ("down", "pagedown"):
            walls, cpus = [], []
            for i in range(presses + 3):
                await asyncio.sleep(gap)
                n = len(frames)
                t, c = time.perf_counter(), time.process_time()
                app.post_message(Key(key, None))
                while len(frames) == n:
                    await asyncio.sleep(0)
                if i >= 3:  # the first few warm the caches
                    walls.append(frames[n] - t)
                    cpus.append(time.process_time() - c)
            out[key + "_median_s"] = statistics.median(walls)
            out[key + "_cpu_median_s"] = statistics.median(cpus)

asyncio.run(main())
print(json.dumps(out))
"""


def keys_against(tail: Path, ref: str, runs: int, other: Path | None, presses: int = 40, gap: float = 0.2) -> dict[str, Any]:
    """Down and PageDown on the tail's timeline, driven by Textual's Pilot in a fresh
    process per run (no terminal): the time from a key to the next frame the app
    composes (`App._display` called with an update), and the process's CPU time in
    between; keys `gap` seconds apart, as a person presses them. With `other` (a
    worktree of another commit), that checkout too, the two taking turns."""
    here = Path(__file__).resolve().parent.parent
    trees = [("this", here)] + ([("other", other)] if other is not None else [])
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(runs):
        for name, tree in reversed(trees):
            done = subprocess.run(
                [sys.executable, "-c", _KEYS_SCRIPT, str(tail), ref, str(presses), str(gap)],
                capture_output=True,
                text=True,
                check=True,
                cwd=tree,
            )
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    out: dict[str, Any] = {"dir": str(other) if other is not None else None}
    for name, results in got.items():
        for k in results[0]:
            out[f"{name}_{k}"] = statistics.median(r[k] for r in results)
    return out


def at_seq(seq: int) -> re.Pattern[bytes]:
    """The timeline's header for the row at `seq`: "seq N  kind"."""
    return re.compile(rb"seq %d  [a-z]" % seq)


def state_at(seq: int) -> bytes:
    """The state tree's root once the state at `seq` is drawn."""
    return f"state at seq {seq:,}".encode()


def _p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def whole_tail_rss(tail: Path, ref: str) -> int:
    """Peak RSS (KiB) of decoding the whole tail, as `ckpt replay` does."""
    code = (
        "import resource, ckptcli; from ckptcli.history.replay import load_tail; "
        f"s = ckptcli.open_store({str(tail)!r}); load_tail(ckptcli.open_checkpoint({ref!r}, s)); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def terminal_follow(workdir: Path) -> dict[str, Any]:
    """`ckpt tui agent:live --follow` in a pty; a recorder in this process appends events:
    from each append's return until its row is drawn."""
    import shutil

    import ckptcli
    from ckptcli.history.recorder import Durability, Recorder

    where = workdir / "follow"
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    store = ckptcli.init_store(where / ".ckpt")
    rng = random.Random(5)
    rec = Recorder.open(store, "agent:live", where / "live.journal", durability=Durability(batch_size=1, fsync="never"))
    try:
        for i in range(3):
            rec.append("memory.set", path=["note"], value=f"start {i}")
        term = Terminal(["tui", "agent:live", "--follow", "--store", str(where / ".ckpt")])
        try:
            term.wait_for(b"; following")
            term.wait_idle(0.5)
            latencies = []
            for i in range(FOLLOW_EVENTS):
                time.sleep(rng.uniform(0.05, 0.5))  # anywhere in the poll interval
                term.buffer = b""
                rec.append("memory.set", path=["note"], value=f"ev{i:05d}")
                t = time.perf_counter()
                latencies.append(term.wait_for(b"ev%05d" % i, timeout=60) - t)
            cpu = _cpu_seconds(term.pid)
            time.sleep(5.0)
            idle_cpu = (_cpu_seconds(term.pid) - cpu) / 5.0
        finally:
            term.close()
    finally:
        rec.close()
    return {
        "follow_median_s": statistics.median(latencies),
        "follow_p95_s": _p95(latencies),
        "follow_max_s": max(latencies),
        "follow_idle_cpu": idle_cpu,
    }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _inner_strip(tail: str, ref: str) -> dict[str, float]:
    """Runs in a child process: the overview strip of the tail, drawn after the first frame."""
    import asyncio

    from ckptcli.api import open_store
    from ckptcli.tui.app import CkptApp, open_session
    from ckptcli.tui.overview import OverviewStrip

    out: dict[str, float] = {}

    async def main() -> None:
        st = open_store(Path(tail))
        app = CkptApp(open_session(st, prefill=False), checkpoint=st.resolve(ref), view="timeline", blink=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            strip = app.screen.query_one("#overview", OverviewStrip)
            times = []
            for _ in range(3):
                strip._bars = None  # its cells read again
                t = time.perf_counter()
                strip.render()
                times.append(time.perf_counter() - t)
            out["strip_cold_s"] = times[0]
            out["strip_median_s"] = statistics.median(times)

    asyncio.run(main())
    return out


def strip(tail: Path, ref: str) -> dict[str, Any]:
    code = f"import json; from bench.tui import _inner_strip; print(json.dumps(_inner_strip({str(tail)!r}, {ref!r})))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tui", description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help=f"where the data is built and kept (default {DEFAULT_WORKDIR})")
    ap.add_argument("--runs", type=int, default=5, help="runs of each first-paint measurement (default 5)")
    ap.add_argument("--quick", action="store_true", help="1,000 checkpoints and 10,000 events, 1 run: checks the harness")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--only", help="measure only these parts, comma-separated: paint, terminal, viewer, follow, keys")
    ap.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also time the tail's first paint in a real terminal against the checkout in DIR (e.g. a worktree of main), taking turns",
    )
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else {"paint", "terminal", "viewer", "follow", "keys"}
    checkpoints, events, runs = (1_000, 10_000, 1) if args.quick else (CHECKPOINTS, EVENTS, args.runs)
    store, tail = prepare(args.workdir, checkpoints, events, store_too=bool(only - {"keys", "none"}))
    ref = "agent:long"
    r: dict[str, Any] = {"checkpoints": checkpoints, "events": events, "runs": runs}
    if "paint" in only:
        log("first paint in-process (store)")
        r["inprocess_store"] = inprocess(store, None, runs)
        log("first paint in-process (tail)")
        r["inprocess_tail"] = inprocess(tail, ref, runs)
    if "terminal" in only:
        log("real terminal (store)")
        r["terminal_store"] = terminal_store(store, runs, checkpoints)
        log("real terminal (tail)")
        r["terminal_tail"] = terminal_tail(tail, ref, runs, events)
        r["whole_tail_peak_rss_kib"] = whole_tail_rss(tail, ref)
    if "viewer" in only:
        log("value viewer and jumps (in-process)")
        r["viewer_jumps"] = viewer_and_jumps(args.workdir, tail, ref, runs)
    if args.against is not None and only - {"keys"}:  # --only keys --against DIR: the keys alone
        log(f"first paint of the tail: this checkout and {args.against}, taking turns")
        r["against"] = {"dir": str(args.against), **paint_against(tail, ref, runs, args.against)}
    if "keys" in only:
        against = f": this checkout and {args.against}, taking turns" if args.against else ""
        log("Down and PageDown on the timeline, key to frame (in-process, Pilot)" + against)
        r["keys"] = keys_against(tail, ref, runs, args.against)
    if "follow" in only:
        log("following a running agent (real terminal), the overview strip (in-process)")
        r["follow"] = terminal_follow(args.workdir)
        r["strip"] = strip(tail, ref)
    report(r)
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0


def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def report(r: dict[str, Any]) -> None:
    n, e = f"{r['checkpoints']:,}", f"{r['events']:,}"
    rows: list[list[str]] = []
    if "inprocess_store" in r:
        rows += _paint_rows(r, n, e)
    if "terminal_store" in r:
        rows += _terminal_rows(r, n, e)
    if "viewer_jumps" in r:
        rows += _viewer_rows(r, e)
    if "against" in r:
        a = r["against"]
        rows += [
            [
                f"first paint, {e}-event tail (terminal): this / {a['dir']}",
                f"{_ms(a['this_paint_s'])} / {_ms(a['other_paint_s'])} ({a['this_paint_s'] / a['other_paint_s']:.2f}x)",
                f"< {FIRST_PAINT_TARGET:.0f} s",
                verdict(a["this_paint_s"] < FIRST_PAINT_TARGET),
            ],
            [
                "  CPU until then (user + sys)",
                f"{_ms(a['this_cpu_s'])} / {_ms(a['other_cpu_s'])} ({a['this_cpu_s'] / a['other_cpu_s']:.2f}x)",
                "",
                "",
            ],
        ]
    if "keys" in r:
        rows += _keys_rows(r["keys"])
    if "follow" in r:
        f, st = r["follow"], r["strip"]
        rows += [
            [
                "--follow: event recorded to its row on screen (median / p95 / max)",
                f"{_ms(f['follow_median_s'])} / {_ms(f['follow_p95_s'])} / {_ms(f['follow_max_s'])}",
                f"< {FOLLOW_TARGET:.0f} s",
                verdict(f["follow_max_s"] < FOLLOW_TARGET),
            ],
            ["--follow: CPU of the idle TUI polling", f"{f['follow_idle_cpu'] * 100:.1f} %", "", ""],
            [
                f"overview strip over the {e}-event tail: first draw / again",
                f"{_ms(st['strip_cold_s'])} / {_ms(st['strip_median_s'])}",
                "",
                "",
            ],
        ]
    print(f"ckpt tui at scale: {n} checkpoints, a {e}-event tail; medians of {r['runs']} runs; terminal {SIZE[0]}x{SIZE[1]}\n")
    print(table(["measure", "value", "target", "result"], rows))


def _keys_rows(k: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, name in (("down", "Down"), ("pagedown", "PageDown")):
        value = f"{_ms(k[f'this_{key}_median_s'])} (CPU {_ms(k[f'this_{key}_cpu_median_s'])})"
        if k["dir"] is not None:
            wall, other = k[f"this_{key}_median_s"], k[f"other_{key}_median_s"]
            value += f" / {k['dir']}: {_ms(other)} (CPU {_ms(k[f'other_{key}_cpu_median_s'])}), {wall / other:.2f}x"
        rows.append([f"timeline, {name}: key to frame (in-process, Pilot), median", value, f"< {_ms(MOVE_MEDIAN_TARGET)}", ""])
    return rows


def _paint_rows(r: dict[str, Any], n: str, e: str) -> list[list[str]]:
    ips, ipt = r["inprocess_store"], r["inprocess_tail"]
    fp = f"< {FIRST_PAINT_TARGET:.0f} s"
    return [
        [f"first paint, store of {n} (in-process)", _ms(ips["first_paint_s"]), fp, verdict(ips["first_paint_s"] < FIRST_PAINT_TARGET)],
        ["  of which imports / the rest", f"{_ms(ips['imports_s'])} / {_ms(ips['after_imports_s'])}", "", ""],
        [f"first paint, {e}-event tail (in-process)", _ms(ipt["first_paint_s"]), fp, verdict(ipt["first_paint_s"] < FIRST_PAINT_TARGET)],
        ["  of which imports / the rest", f"{_ms(ipt['imports_s'])} / {_ms(ipt['after_imports_s'])}", "", ""],
        [
            "timeline: UI work of Down / PageDown (in-process)",
            f"{_ms(ipt['ui_down_median_s'])} / {_ms(ipt['ui_pagedown_median_s'])}",
            "",
            "",
        ],
    ]


def _terminal_rows(r: dict[str, Any], n: str, e: str) -> list[list[str]]:
    ts, tt = r["terminal_store"], r["terminal_tail"]
    fp = f"< {FIRST_PAINT_TARGET:.0f} s"
    mv = f"< {_ms(MOVE_MEDIAN_TARGET)} / {_ms(MOVE_P95_TARGET)}"

    def move_ok(prefix: str) -> str:
        return verdict(tt[f"{prefix}_median_s"] < MOVE_MEDIAN_TARGET and tt[f"{prefix}_p95_s"] < MOVE_P95_TARGET)

    growth = tt["rss_after_20k_kib"] - tt["rss_all_kept_kib"]
    rows = [
        [f"first paint, store of {n} (terminal)", _ms(ts["first_paint_s"]), fp, verdict(ts["first_paint_s"] < FIRST_PAINT_TARGET)],
        [f"first paint, {e}-event tail (terminal)", _ms(tt["first_paint_s"]), fp, verdict(tt["first_paint_s"] < FIRST_PAINT_TARGET)],
        [
            "history: Down, key to frame (median / max)",
            f"{_ms(ts['down_median_s'])} / {_ms(ts['down_max_s'])}",
            f"< {_ms(MOVE_MEDIAN_TARGET)}",
            verdict(ts["down_median_s"] < MOVE_MEDIAN_TARGET),
        ],
        ["timeline: Down, key to frame (median / p95)", f"{_ms(tt['down_median_s'])} / {_ms(tt['down_p95_s'])}", mv, move_ok("down")],
        [
            "timeline: PageDown, key to frame (median / p95)",
            f"{_ms(tt['pagedown_median_s'])} / {_ms(tt['pagedown_p95_s'])}",
            mv,
            move_ok("pagedown"),
        ],
        [
            "timeline: Down while replaying in the background",
            f"{_ms(tt['down_busy_median_s'])} / {_ms(tt['down_busy_p95_s'])}",
            mv,
            move_ok("down_busy"),
        ],
        [
            "timeline: End at once, row drawn",
            _ms(tt["end_row_cold_s"]),
            f"< {_ms(MOVE_P95_TARGET)}",
            verdict(tt["end_row_cold_s"] < MOVE_P95_TARGET),
        ],
        [f"timeline: End at once, state drawn (replays {e})", _ms(tt["end_state_cold_s"]), "", ""],
        [
            "timeline: g SEQ, row drawn (median)",
            _ms(tt["jump_row_median_s"]),
            f"< {_ms(MOVE_P95_TARGET)}",
            verdict(tt["jump_row_median_s"] < MOVE_P95_TARGET),
        ],
        [
            "timeline: g SEQ, state drawn (median / max)",
            f"{_ms(tt['jump_state_warm_median_s'])} / {_ms(tt['jump_state_warm_max_s'])}",
            "",
            "",
        ],
        ["RSS: first paint / every 1,000th state kept", f"{_mib(tt['rss_first_paint_kib'])} / {_mib(tt['rss_all_kept_kib'])}", "", ""],
        [
            "RSS after PageDown through 10,000 / 20,000 events",
            f"{_mib(tt['rss_after_10k_kib'])} / {_mib(tt['rss_after_20k_kib'])}",
            f"+ < {SCROLL_GROWTH_TARGET_MIB} MiB",
            verdict(growth < SCROLL_GROWTH_TARGET_MIB * 1024),
        ],
        ["peak RSS of the TUI, whole run", _mib(tt["hwm_end_kib"]), "", ""],
        ["peak RSS of decoding the whole tail (load_tail)", _mib(r["whole_tail_peak_rss_kib"]), "", ""],
    ]
    return rows


def _viewer_rows(r: dict[str, Any], e: str) -> list[list[str]]:
    vj = r["viewer_jumps"]
    return [
        [
            f"value viewer on a {BIG_VALUE // 1_000_000} MB string: Enter to first line (median / max)",
            f"{_ms(vj['viewer_median_s'])} / {_ms(vj['viewer_max_s'])}",
            f"< {_ms(VIEWER_TARGET)}",
            verdict(vj["viewer_median_s"] < VIEWER_TARGET),
        ],
        [
            "]e next error, indexed: key to frame (median / max)",
            f"{_ms(vj['jump_indexed_median_s'])} / {_ms(vj['jump_indexed_max_s'])}",
            f"< {_ms(JUMP_TARGET)}",
            verdict(vj["jump_indexed_median_s"] < JUMP_TARGET),
        ],
        [f"  the background replay and the scan that indexes the {e} events", _ms(vj["prefill_and_index_s"]), "", ""],
        [
            "]e before the index: nearest error / a sort the tail lacks (all read)",
            f"{_ms(vj['jump_scan_near_median_s'])} / {_ms(vj['jump_scan_none_s'])}",
            "",
            "",
        ],
    ]


if __name__ == "__main__":
    sys.exit(main())
