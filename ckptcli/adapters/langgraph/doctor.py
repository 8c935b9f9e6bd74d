"""`ckpt doctor`'s checks of the LangGraph saver's files beside a store: its journals
(size, backlog, journals of savers that are gone, damage) and its thread leases.

A check fails for what makes `CkptSaver.open` refuse the store (a directory of the
saver's that is a link or no directory, a journal of a saver that is gone with a
malformed record or of a newer ckpt, a recovery lock that cannot be opened), with the
error the saver raises, found by the saver's own functions (`dir_problem`,
`newer_journal`, `malformed_record`, `open_recover_lock`); and for what stops a saver
from using a thread (an entry of `threads/` that is no lease). What a saver reads past
or sets aside with a warning (a hole in a journal, a file named as a journal that is
none) is a warning here too.

Imports nothing of LangGraph (the files are read with journal.py and
leases.py, their format owners), so it runs where LangGraph is not installed.
docs/langgraph.md ("What to watch") says what each finding means.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckptcli._util.units import human_size
from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    JournalContents,
    dir_problem,
    hole_message,
    malformed_record,
    newer_journal,
    open_regular,
    read_journal,
)
from ckptcli.adapters.langgraph.leases import lease_states, open_recover_lock
from ckptcli.checks import FAIL, OK, WARN, Check, Context
from ckptcli.errors import CkptError
from ckptcli.store.layout import LEASE_DIR, journal_dir, lease_dir, want_dir

#: a live journal this big has not been started again after commits: they fail or lag
BIG_JOURNAL = 64 * 1024 * 1024
#: this many puts not in the store yet: commits lag far behind the graph
BIG_BACKLOG = 10_000
#: a journal is read up to this much (its records beyond are not counted): memory stays bounded
READ_CAP = 64 * 1024 * 1024


def check(ctx: Context) -> Iterable[Check]:
    root, where = ctx.store_path, ""
    if root is not None and ctx.journal_dir is not None:
        yield Check(
            "langgraph journals", FAIL, f"--journal-dir is for a store on object storage; the local store {root} keeps its journal in it",
            "leave --journal-dir out",
        )  # fmt: skip
        return
    if root is None:  # a store on object storage: the saver's files of it on this host (hostdir.py)
        if ctx.store is None:
            return
        from ckptcli.adapters.langgraph.hostdir import default_dir, local_root

        try:
            root = local_root(ctx.store, ctx.journal_dir, create=False)
        except CkptError as exc:
            yield _refused("langgraph journals", exc)
            return
        where = f" in {root if root is not None else ctx.journal_dir or default_dir(ctx.store.location)}"
        if root is None:
            yield Check("langgraph journals", OK, f"none{where}: no LangGraph saver on this host has used this store")
            return
    yield from _check_root(ctx, root, where)


def _check_root(ctx: Context, root: Path, where: str) -> Iterable[Check]:
    """The checks of the saver's files under `root` (a local store's directory, or this
    host's journal directory of a store on object storage, named in `where`)."""
    jdir = journal_dir(root)
    problem = dir_problem(jdir)
    if problem is not None:
        yield _refused("langgraph journals", problem)
        return
    if not jdir.exists():
        yield Check("langgraph journals", OK, f"none{where}: no LangGraph saver has used this store")
        return
    for d in (lease_dir(root), want_dir(root)):
        problem = dir_problem(d)
        if problem is not None:
            yield _refused("langgraph thread leases", problem)
    try:
        lock = open_recover_lock(root, create=False)  # opened as a saver opens it, made nothing
    except CkptError as exc:
        yield _refused("langgraph journals", exc)
    else:
        if lock is not None:
            os.close(lock)
    dead = 0
    for path in jdir.glob("*.journal"):
        with contextlib.suppress(OSError):
            fd = open_regular(path)
            if isinstance(fd, int):
                try:
                    dead += _live(fd) is False
                finally:
                    os.close(fd)
    yield from _journals(ctx, jdir, where)
    yield from _leases(root, dead)
    yield from _memory_store(ctx, root)


def _refused(name: str, err: CkptError, who: str = "CkptSaver.open") -> Check:
    """A failed check for what `who` refuses the store with: the error it raises."""
    return Check(name, FAIL, f"{who} refuses the store: {err.message}", err.hint or "move it away")


def _committed(ctx: Context) -> set[tuple[str, str, str]]:
    """(thread, namespace, checkpoint id) of every LangGraph checkpoint in the store."""
    from ckptcli.store import catalog

    out: set[tuple[str, str, str]] = set()
    for row in catalog.rows(ctx.store, save=False).values():
        found = layout.key_of_row(row)
        if found is not None:
            k = found[0]
            out.add((k.thread_id, k.ns, k.checkpoint_id))
    return out


def _live(fd: int) -> bool | None:
    """Whether a live saver holds the journal open at `fd` (its flock); None if that cannot be told."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _read(fd: int) -> tuple[bytes, int]:
    """The journal at `fd` (its first `READ_CAP` bytes) and its size."""
    size = os.fstat(fd).st_size
    parts: list[bytes] = []
    got = 0
    while got < min(size, READ_CAP):
        chunk = os.pread(fd, min(size, READ_CAP) - got, got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts), size


def _not_journal(jdir: Path, name: str, what: str) -> Check:
    return Check(
        "langgraph journals",
        WARN,
        f"{name} is {what}, not a journal: savers skip it",
        f"something other than ckpt put it in {jdir}; remove it",
    )


@dataclass
class _Tally:
    """What `_journals` found so far: counts, sizes and the findings, in order."""

    live: int = 0
    dead: int = 0
    total: int = 0
    backlog: int = 0
    findings: list[Check] = field(default_factory=list)
    damage: list[Check] = field(default_factory=list)
    committed: set[tuple[str, str, str]] | None = None  # read once, when a journal needs it


def _journals(ctx: Context, jdir: Path, where: str = "") -> Iterable[Check]:
    tally = _Tally()
    for path in sorted(jdir.iterdir()):
        if path.name.endswith(".journal") or path.name.endswith(".journal" + DAMAGED_SUFFIX):
            _journal(ctx, jdir, path, tally)
    if tally.backlog > BIG_BACKLOG:
        tally.findings.append(
            Check(
                "langgraph backlog", WARN, f"{tally.backlog} put(s) of live savers are not in the store yet",
                "commits lag behind the graphs: the disk may be slow, or commits fail; reads still see every put",
            )
        )  # fmt: skip
    yield Check(
        "langgraph journals", OK,
        f"{tally.live + tally.dead} journal(s){where}, {human_size(tally.total)}: {tally.live} of live savers (backlog: "
        f"{tally.backlog} put(s) not committed yet), "
        f"{tally.dead} of savers that are gone",
    )  # fmt: skip
    yield from tally.findings
    yield from tally.damage


def _open_journal(jdir: Path, path: Path, findings: list[Check]) -> tuple[bool | None, JournalContents, bytes, int] | None:
    """Whether a live saver holds the journal at `path`, what it holds, its bytes read
    and its size; None (and a finding) when it cannot be read or is no journal."""
    name = path.name
    try:
        fd = open_regular(path)
    except OSError as exc:  # nor opened by a saver: it skips it
        findings.append(
            Check("langgraph journals", WARN, f"{name} cannot be read: {exc.strerror}; savers skip it", f"check the permissions of {jdir}")
        )
        return None
    if isinstance(fd, str):
        findings.append(_not_journal(jdir, name, fd))
        return None
    try:
        live = _live(fd)
        data, size = _read(fd)
        contents = read_journal(data)
        if contents.holes and live:  # a record being written while read is no damage: read again
            again = read_journal(_read(fd)[0])
            contents.holes = [h for h in contents.holes if h in again.holes]
    except OSError as exc:
        findings.append(Check("langgraph journals", FAIL, f"{name} cannot be read: {exc.strerror}", f"check the permissions of {jdir}"))
        return None
    finally:
        os.close(fd)
    return live, contents, data, size


def _journal(ctx: Context, jdir: Path, path: Path, tally: _Tally) -> None:
    """Add what the journal (or kept damaged journal) at `path` says to `tally`."""
    got = _open_journal(jdir, path, tally.findings)
    if got is None:
        return
    live, contents, data, size = got
    name, findings = path.name, tally.findings
    capped = f" (records counted in its first {human_size(READ_CAP)} of {human_size(size)})" if size > READ_CAP else ""
    if name.endswith(DAMAGED_SUFFIX):
        what = hole_message(path, contents) if contents.holes else "has no hole now"
        tally.damage.append(
            Check(
                "langgraph journal damage", WARN,
                f"{name}: kept by recovery, which found damage: {what}{capped}; the records after the damage were recovered; "
                "delete the file once looked at",
                "`ckpt verify` reports it too",
            )
        )  # fmt: skip
        return
    refusal = newer_journal(path, data, contents) or (malformed_record(path, contents) if contents.version else None)
    if refusal is not None:
        tally.total += size
        if live:
            tally.live += 1
        else:
            tally.dead += 1
        if live is False:
            findings.append(_refused("langgraph journals", refusal))
        else:  # a live saver's journal is no other saver's to replay, while it lives
            findings.append(
                Check(
                    "langgraph journals",
                    WARN,
                    f"{name} is a live saver's; once that saver is gone, CkptSaver.open will refuse the store: {refusal.message}",
                    refusal.hint or "",
                )
            )
        return
    if contents.version == 0 and any(data):  # zeros alone: a journal just made, its header not written yet
        findings.append(
            Check(
                "langgraph journals", WARN,
                f"{name} ({human_size(size)}) is damaged or no journal: it does not start with a journal header; "
                f"a saver replays nothing of it and keeps it as {name}{DAMAGED_SUFFIX}",
                f"something other than ckpt wrote it; move it out of {jdir} to look at it",
            )
        )  # fmt: skip
        return
    if contents.holes:
        tally.damage.append(
            Check(
                "langgraph journal damage", WARN,
                f"{name}: {hole_message(path, contents)}{capped}; "
                "opening the store with the saver recovers the records after the damage",
                "open the store with CkptSaver to recover the records after the damage; the file is then kept as .damaged",
            )
        )  # fmt: skip
    if tally.committed is None:
        tally.committed = _committed(ctx)
    puts = {(str(r.get("t")), str(r.get("n")), str(r.get("i"))) for r in contents.records if r.get("op") == "p"}
    waiting = len(puts - tally.committed)
    tally.total += size
    if live:
        tally.live += 1
        tally.backlog += waiting
        if size > BIG_JOURNAL:
            findings.append(
                Check(
                    "langgraph journals", WARN, f"{name} is {human_size(size)}: its saver has not started it again after commits",
                    "its commits are failing or far behind: look at that process's errors (the saver raises them at its next call)",
                )
            )  # fmt: skip
    else:
        tally.dead += 1
        findings.append(
            Check(
                "langgraph journals", WARN,
                f"{name} was left by a saver that is gone: {len(contents.records)} record(s), {waiting} put(s) not in the store{capped}",
                "nothing is lost: the next CkptSaver to open the store (or take one of its threads) replays it and deletes it",
            )
        )  # fmt: skip


def _leases(store_path: Path, dead_journals: int) -> Iterable[Check]:
    odd: list[tuple[str, str]] = []
    states = lease_states(store_path, odd)
    held = sum(1 for s in states if s.held)
    orphaned = sum(1 for s in states if s.dirty and not s.held)
    wants = 0
    with contextlib.suppress(OSError):
        wants = len(os.listdir(want_dir(store_path)))
    detail = (
        f"{len(states)} thread lease(s) (threads used and not deleted), {held} held by a live saver now, "
        f"{wants} hand-over request(s) waiting"
    )
    if orphaned and not dead_journals:  # their journals were replayed since: the mark goes at the next use
        detail += f", {orphaned} still marked by a saver that died (its journal was replayed since; cleared when the thread is next used)"
    yield Check("langgraph thread leases", OK, detail)
    for name, what in odd:
        yield Check(
            "langgraph thread leases",
            FAIL,
            f"{LEASE_DIR}/{name} is {what}, not a thread lease: savers skip it, and cannot take its thread",
            f"something other than ckpt put it in {lease_dir(store_path)}; remove it",
        )
    if orphaned and dead_journals:
        yield Check(
            "langgraph thread leases",
            WARN,
            f"{orphaned} thread(s) whose last saver died before committing them",
            "nothing is lost: the next saver to take one replays the dead saver's journal first",
        )


def _memory_store(ctx: Context, store_path: Path) -> Iterable[Check]:
    """The logs of LangGraph's memory store (CkptStore), checked as `ckpt verify` does."""
    from ckptcli.adapters.langgraph.store_log import check_store_logs, generations, log_dir

    d = log_dir(store_path)
    problem = dir_problem(d)
    if problem is not None:
        yield _refused("langgraph memory store", problem, "CkptStore.open")
        return
    if not d.is_dir():
        return
    gens = generations(d)
    problems = check_store_logs(store_path, set(ctx.store.manifest_ids()) if ctx.store is not None else None)
    yield Check("langgraph memory store", OK, f"{len(gens)} log(s) in {d.relative_to(store_path)}")
    for path, message in problems:
        yield Check("langgraph memory store", FAIL, f"{path.name}: {message}", "`ckpt verify` reports it too")
