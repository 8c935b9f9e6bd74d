"""Recovery of a LangGraph saver: replaying the journals of savers that are gone (no one
holds their lock) on open, or when a thread's last holder died with puts not committed,
then committing what they hold and deleting them. A damaged journal is said, kept as
``*.damaged``, and what it still holds recovered. formats/langgraph-journal.md is the file
format; docs/langgraph.md ("Durability: what a crash can lose") the user's view.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from typing import Any

from ckptcli.adapters.langgraph import crosshost
from ckptcli.adapters.langgraph.core import SaverCore
from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    blank,
    hole_message,
    mapped,
    newer_journal,
    read_journal,
    record_error,
    record_problem,
    record_where,
)
from ckptcli.adapters.langgraph.layout import Write
from ckptcli.adapters.langgraph.leases import open_recover_lock
from ckptcli.errors import CorruptError, StoreIOError
from ckptcli.store.backend import fsync_dir
from ckptcli.store.layout import recover_lock_file

__all__ = ["Deletion", "Deletions", "Recovery", "lock_orphan_journals", "recover_lock"]

#: a journaled delete being replayed: keys, threads, and the store's checkpoints it removes (None: older records)
Deletion = tuple[list[tuple[str, str, str]], set[str], set[bytes] | None]
Deletions = list[Deletion]  # (an alias: `list` is a method's name in CkptSaver)


def recover_lock(store_dir: Path) -> int:
    """Hold the store's recovery lock: one saver replays a dead saver's journal at a time."""
    fd = open_recover_lock(store_dir)
    assert fd is not None  # made when missing
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        os.close(fd)
        raise StoreIOError(f"cannot lock {recover_lock_file(store_dir)}: {exc.strerror}") from None
    return fd


def lock_orphan_journals(jdir: Path) -> list[tuple[float, Path, int]]:
    """The journals of savers that are gone (no one holds their lock), locked by us."""
    found: list[tuple[float, Path, int]] = []
    for path in jdir.glob("*.journal"):
        try:  # a symlink, a FIFO, a directory is no journal (`ckpt doctor` names it)
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            found.append((os.fstat(fd).st_mtime, path, fd))
        except OSError:
            os.close(fd)  # a live saver's
    return sorted(found)


class Recovery:
    """Replays dead savers' journals into a saver's core."""

    def __init__(self, saver: SaverCore) -> None:
        self.saver = saver

    def recover(self, found: list[tuple[float, Path, int]]) -> None:
        """Replay the orphaned journals, commit what they hold, then delete them."""
        if not found:
            return
        deletions: list[Deletion] = []
        damaged: list[Path] = []
        replayed: set[str] = set()  # the threads the journals put checkpoints of
        with self.saver._lock:
            waiting = set(self.saver._orphan_writes)  # this saver's own writes whose put is on its way
        try:
            for _mtime, path, fd in found:
                try:
                    data = mapped(fd)  # the file locked (no other saver writes it), mapped: a huge one costs no memory
                except OSError as exc:
                    raise StoreIOError(
                        f"cannot read the LangGraph journal {path}: {exc.strerror}", hint="nothing of it was replayed or removed"
                    ) from None
                contents = read_journal(data)
                newer = newer_journal(path, data, contents)
                if newer is not None:
                    raise newer
                if contents.version == 0 and not blank(data):  # not empty, not zeros: not a journal
                    damaged.append(path)
                    self.saver.store.warn(
                        f"LangGraph journal {path} is not a journal (unknown header): nothing in it was replayed; "
                        f"it is kept as {path.name}{DAMAGED_SUFFIX}"
                    )
                    continue
                # after a hole, a put that builds on what the hole held (its parent unknown,
                # a list value continuing one that is not there) is left out: replayed, it
                # would make a wrong state (writes may come before their put: they stay)
                after = contents.before_holes
                replayed.update(str(r["t"]) for r in contents.records if r.get("op") == "p" and isinstance(r.get("t"), str))
                left_out = 0
                for i, rec in enumerate(contents.records):
                    where = record_where(path, i)
                    if i < after:
                        self.replay(rec, where, deletions)
                        continue
                    if rec.get("op") == "p" and rec.get("p") and (rec.get("t"), rec.get("n"), rec.get("p")) not in self.saver._entries:
                        left_out += 1
                        continue
                    try:
                        self.replay(rec, where, deletions)
                    except CorruptError:
                        left_out += 1
                if contents.holes:  # damage, not a crash: said, and the file kept to look at
                    damaged.append(path)
                    lost = f"; {left_out} record(s) after them built on what they held and are left out" if left_out else ""
                    self.saver.store.warn(
                        f"LangGraph journal {path}: {hole_message(path, contents)}{lost}; "
                        f"the other records are recovered and the file is kept as {path.name}{DAMAGED_SUFFIX}"
                    )
            self.drop_stray_writes(waiting, said=bool(damaged))
            if self.saver._remote and replayed:  # what another host extended meanwhile is not committed (crosshost.py)
                with self.saver._lock:
                    crosshost.stale_replays(self.saver, sorted(replayed))
            self.saver.flush()
            for keys, threads, ids in deletions:  # only now: every checkpoint that stays is in the store
                self.saver._delete_from_store(keys, threads, ids)
        finally:
            for _m, _p, fd in found:
                os.close(fd)
        for _mtime, path, _fd in found:
            with contextlib.suppress(OSError):
                if path in damaged:
                    path.rename(path.with_name(path.name + DAMAGED_SUFFIX))  # `ckpt verify` reports it until removed
                else:
                    path.unlink()
        fsync_dir(self.saver._jdir)

    def drop_stray_writes(self, waiting: set[tuple[str, str, str]], said: bool) -> None:
        """After replaying journals of savers that are gone: pending writes whose checkpoint
        no journal and not the store holds are dropped. Their put can no longer come, and
        kept they would hold their thread for good (a thread with writes waiting is never
        let go). After a crash they are the writes of puts that had not returned (with
        LangGraph's async durability a step's writes may be put before its checkpoint):
        dropped silently, as the puts were. With a damaged journal (`said`) they may be
        the writes of puts lost in it, or left out after it: said once."""
        with self.saver._lock:
            stray = [key for key in self.saver._orphan_writes if key not in waiting and key not in self.saver._entries]
            n = sum(len(self.saver._orphan_writes.pop(key)) for key in stray)
        if stray and said:
            threads = sorted({key[0] for key in stray})
            self.saver.store.warn(
                f"LangGraph journals in {self.saver._jdir}: {n} pending write(s) of {len(stray)} checkpoint(s) that no "
                "journal and not the store holds "
                f"(thread(s) {', '.join(map(repr, threads[:5]))}{', ...' if len(threads) > 5 else ''}) are dropped"
            )

    def replay(self, rec: dict[str, Any], where: str, deletions: list[Deletion]) -> None:
        """Replay journal record `rec` (`where`: `record_where`); CorruptError (`record_error`) if it is malformed."""
        op = rec.get("op")
        bad = record_problem(rec)
        if bad:
            raise record_error(where, bad, self.saver._jdir)
        try:
            with self.saver._lock:
                if op == "p":
                    self.saver._apply_put(rec, None, where)
                elif op == "w":
                    key = (rec["t"], rec["n"], rec["i"])
                    self.saver._apply_writes(key, [Write(t, c, (ty, d), p, i, ts) for t, c, ty, d, p, i, ts in rec["w"]])
                elif op == "d":
                    keys = [(k[0], k[1], k[2]) for k in rec["k"]]
                    self.saver._drop(keys)
                    # a record names the store's checkpoints it removes (since 0.3): exactly
                    # those go, never ones a thread used again after the delete got since
                    ids = set(rec["ids"]) if "ids" in rec else None
                    deletions.append((keys, set(rec.get("threads", [])), ids))
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError) as exc:
            raise record_error(where, f"{type(exc).__name__}: {exc}", self.saver._jdir) from None

    def recover_dead(self) -> None:
        """A thread's last holder died with puts not committed: replay the journals no
        live saver holds (as opening the store does), the threads they name read from
        the store again first."""
        fd = recover_lock(self.saver._local_root)
        try:
            found = lock_orphan_journals(self.saver._jdir)
            if not found:
                return
            threads: set[str] = set()
            for _mtime, _path, fd in found:
                with contextlib.suppress(OSError):  # the file locked, not one found again by its name
                    records = read_journal(mapped(fd)).records
                    threads.update(str(r["t"]) for r in records if "t" in r)
            with self.saver._lock:
                busy = {key[0] for key in self.saver._open} | {key[0] for key in self.saver._orphan_writes}
                for t in threads - busy:
                    self.saver._reload_thread(t)
            self.recover(found)
        finally:
            os.close(fd)
