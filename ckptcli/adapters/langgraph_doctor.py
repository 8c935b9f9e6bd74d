"""`ckpt doctor`'s checks of the LangGraph saver's files beside a store: its journals
(size, backlog, journals of savers that are gone, damage) and its thread leases.

Imports nothing of LangGraph (the files are read with `langgraph_journal` and
`langgraph_leases`, their format owners), so it runs where LangGraph is not installed.
docs/langgraph.md ("What to watch") says what each finding means.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

from ckptcli.adapters import langgraph_layout as layout
from ckptcli.adapters.langgraph_journal import DAMAGED_SUFFIX, JOURNAL_DIR, check_journals, read_journal
from ckptcli.adapters.langgraph_leases import WANT_DIR, lease_states
from ckptcli.doctor import FAIL, OK, WARN, Check, Context
from ckptcli.units import human_size

#: a live journal this big has not been started again after commits: they fail or lag
BIG_JOURNAL = 64 * 1024 * 1024
#: this many puts not in the store yet: commits lag far behind the graph
BIG_BACKLOG = 10_000


def check(ctx: Context) -> Iterable[Check]:
    if ctx.store_path is None:
        return
    jdir = ctx.store_path / JOURNAL_DIR
    if not jdir.is_dir():
        yield Check("langgraph journals", OK, "none: no LangGraph saver has used this store")
        return
    dead = sum(1 for p in jdir.glob("*.journal") if _live(p) is False)
    yield from _journals(ctx, jdir)
    yield from _leases(ctx.store_path, jdir, dead)


def _committed(ctx: Context) -> set[tuple[str, str, str]]:
    """(thread, namespace, checkpoint id) of every LangGraph checkpoint in the store."""
    from ckptcli.store import catalog

    out: set[tuple[str, str, str]] = set()
    for row in catalog.rows(ctx.store).values():
        found = layout.key_of_row(row)
        if found is not None:
            k = found[0]
            out.add((k.thread_id, k.ns, k.checkpoint_id))
    return out


def _live(path: Path) -> bool | None:
    """Whether a live saver holds the journal (its flock); None if it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def _journals(ctx: Context, jdir: Path) -> Iterable[Check]:
    committed: set[tuple[str, str, str]] | None = None
    live_n = dead_n = total = backlog = 0
    findings: list[Check] = []
    for path in sorted(jdir.glob("*.journal")):
        if path.is_symlink() or not path.is_file():
            continue
        live = _live(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            findings.append(Check("langgraph journals", FAIL, f"{path.name} cannot be read: {exc.strerror}", f"check the permissions of {jdir}"))
            continue
        contents = read_journal(data)
        if committed is None:
            committed = _committed(ctx)
        puts = {(str(r.get("t")), str(r.get("n")), str(r.get("i"))) for r in contents.records if r.get("op") == "p"}
        waiting = len(puts - committed)
        total += len(data)
        if live:
            live_n += 1
            backlog += waiting
            if len(data) > BIG_JOURNAL:
                findings.append(
                    Check(
                        "langgraph journals", WARN, f"{path.name} is {human_size(len(data))}: its saver has not started it again after commits",
                        "its commits are failing or far behind: look at that process's errors (the saver raises them at its next call)",
                    )
                )
        else:
            dead_n += 1
            findings.append(
                Check(
                    "langgraph journals", WARN,
                    f"{path.name} was left by a saver that is gone: {len(contents.records)} record(s), {waiting} put(s) not in the store",
                    "nothing is lost: the next CkptSaver to open the store (or take one of its threads) replays it and deletes it",
                )
            )
    if backlog > BIG_BACKLOG:
        findings.append(
            Check(
                "langgraph backlog", WARN, f"{backlog} put(s) of live savers are not in the store yet",
                "commits lag behind the graphs: the disk may be slow, or commits fail; reads still see every put",
            )
        )
    yield Check(
        "langgraph journals", OK,
        f"{live_n + dead_n} journal(s), {human_size(total)}: {live_n} of live savers (backlog: {backlog} put(s) not committed yet), {dead_n} of savers that are gone",
    )
    yield from findings
    for path, message in check_journals(ctx.store_path or jdir.parent):
        kept = path.name.endswith(DAMAGED_SUFFIX)
        yield Check(
            "langgraph journal damage", WARN if kept else FAIL, f"{path.name}: {message}",
            "`ckpt verify` reports it too" if kept else "open the store with CkptSaver to recover the records after the damage; the file is then kept as .damaged",
        )


def _leases(store_path: Path, jdir: Path, dead_journals: int) -> Iterable[Check]:
    states = lease_states(store_path)
    held = sum(1 for s in states if s.held)
    orphaned = sum(1 for s in states if s.dirty and not s.held)
    wants = 0
    with contextlib.suppress(OSError):
        wants = len(os.listdir(jdir / WANT_DIR))
    detail = f"{len(states)} thread(s) ever used, {held} held by a live saver now, {wants} hand-over request(s) waiting"
    if orphaned and not dead_journals:  # their journals were replayed since: the mark goes at the next use
        detail += f", {orphaned} still marked by a saver that died (its journal was replayed since; cleared when the thread is next used)"
    yield Check("langgraph thread leases", OK, detail)
    if orphaned and dead_journals:
        yield Check(
            "langgraph thread leases", WARN, f"{orphaned} thread(s) whose last saver died before committing them",
            "nothing is lost: the next saver to take one replays the dead saver's journal first",
        )
