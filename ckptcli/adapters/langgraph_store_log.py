"""The files of `CkptStore` (LangGraph's long-term memory store on ckpt) beside a store:
their names, framing and the check `ckpt verify` runs on them. formats/langgraph-store.md
is the spec.

Imports nothing of LangGraph, so that `ckpt verify` checks the log of a store where
LangGraph is not installed.

``<store>/langgraph/store/<generation:016x>.log`` is a log framed as the saver's journal
(version 2: ``"CKPTLGJ2" salt record*``, `langgraph_journal.frame`), shared by every
process: records are appended at the end of the file under the store's exclusive lock
``locks/langgraph-store.lock``, read under its shared lock. The first record of a log is
its base (``{"op": "base", "snapshot": manifest id or nil}``): the checkpoint of subject
`SNAPSHOT_SUBJECT` holding every item when the log began. The log with the highest
generation is the live one; older ones are left only by a crash during a compaction.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ckptcli.adapters.langgraph_journal import HEADER_V2, JOURNAL_DIR, MAGIC, hole_message, read_journal

LOG_DIR = "store"  # under JOURNAL_DIR
LOCK_NAME = "langgraph-store"  # locks/langgraph-store.lock
SNAPSHOT_SUBJECT = "workflow:langgraph-store"
SNAPSHOT_BRANCH = "langgraph-store"
SNAPSHOT_VERSION = 1
_LOG_RE = re.compile(r"^([0-9a-f]{16})\.log$")


def log_dir(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR / LOG_DIR


def log_name(gen: int) -> str:
    return f"{gen:016x}.log"


def generations(directory: Path) -> list[int]:
    """The generations of the logs in `directory`, oldest first."""
    try:
        names = [e.name for e in directory.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1), 16) for m in map(_LOG_RE.match, names) if m)


def base_of(records: list[dict[str, Any]]) -> bytes | str | None:
    """The snapshot id a log's first record names (None: no snapshot), or a string
    saying why the log has no valid base record."""
    if not records or records[0].get("op") != "base":
        return "its first record is not a base record"
    snap = records[0].get("snapshot")
    if snap is not None and (type(snap) is not bytes or len(snap) != 32):
        return "its base record names no valid snapshot"
    return snap


def check_store_logs(store_dir: Path, manifests: Collection[bytes] | None = None) -> list[tuple[Path, str]]:
    """Problems of the memory store's logs under `store_dir` for `ckpt verify`: a log
    that is not one (bad header, no base record), a log with a hole (damage between
    records; a crash leaves none), and the live log's base snapshot missing from
    `manifests` (the store's checkpoint ids, when given). A log being appended to is
    read twice and a hole counts only if both reads show it."""
    found: list[tuple[Path, str]] = []
    d = log_dir(store_dir)
    gens = generations(d)
    for gen in gens:
        path = d / log_name(gen)
        if path.is_symlink() or not path.is_file():
            found.append((path, "is not a regular file; remove it"))
            continue
        try:
            data = path.read_bytes()
            if data[: len(MAGIC)] != MAGIC or len(data) < HEADER_V2:
                found.append((path, "is not a LangGraph store log (bad header): the memories recorded in it cannot be read"))
                continue
            first = read_journal(data)
            if first.holes:
                second = read_journal(path.read_bytes())
                holes = [h for h in first.holes if h in second.holes]
                if holes:
                    second.holes = holes
                    found.append((path, hole_message(path, second).replace("the puts", "the memories") + "; opening the store with CkptStore reads on past it"))
            why = base_of(first.records)
            if isinstance(why, str):
                found.append((path, f"is damaged: {why}"))
            elif why is not None and manifests is not None and gen == gens[-1] and why not in manifests:
                found.append(
                    (path, f"starts from the snapshot {why.hex()[:12]}, which the store does not have: the memories in it are lost; restore the store from a backup")
                )
        except OSError as exc:
            found.append((path, f"cannot be read: {exc.strerror}"))
    return found
