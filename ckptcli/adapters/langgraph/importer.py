"""`ckpt import langgraph DB`: the histories in a LangGraph SqliteSaver database, copied
into a ckpt store as the saver (`CkptSaver`) would have written them.

The database is opened read-only and read through its real schema (tables
``checkpoints`` and ``writes`` of langgraph-checkpoint-sqlite). Nothing in it is
deserialized into objects: each checkpoint's serialized bytes are split where msgpack
puts its fields (the channel values, each list item) and stored as they are, so that
what `CkptSaver` gives LangGraph back for every checkpoint is what LangGraph itself
loads from the database: values, metadata, parent links and pending writes. A list
shared with the parent checkpoint (the conversation so far) is stored once, item by
item, as the saver stores it; checkpoints already in the store are left alone, so
importing again adds only what is new.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgpack

from ckptcli.adapters.langgraph.layout import MSGPACK, split_array
from ckptcli.errors import CorruptError, InvalidInputError, NotFoundError, UsageError
from ckptcli.format.values import map_header
from ckptcli.progress import NULL, Progress
from ckptcli.store.repository import Store

_CHECKPOINT_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata"}
_WRITES_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"}


@dataclass
class ImportReport:
    threads: list[str] = field(default_factory=list)
    checkpoints: int = 0  # imported now
    already: int = 0  # in the store before
    writes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "checkpoints": self.checkpoints, "already_present": self.already, "writes": self.writes}


def _connect(db: Path) -> sqlite3.Connection:
    if not db.is_file():
        raise NotFoundError(f"{db} does not exist (or is not a file)")
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise CorruptError(
            f"{db} is not a SQLite database, or it is damaged ({exc})", hint="give the file SqliteSaver writes (e.g. checkpoints.sqlite)"
        ) from None
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}  # table is one of two constants


def read_database(db: Path, thread: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The put and write records of a SqliteSaver database (all threads, or one), in the
    order a saver replays them, and the threads they belong to.

    Raises:
        NotFoundError (no such file, or no such thread); CorruptError (not SQLite, a
        damaged database, a checkpoint that is not what SqliteSaver writes);
        InvalidInputError (SQLite, but not a SqliteSaver database).
    """
    conn = _connect(db)
    try:
        try:
            have = _columns(conn, "checkpoints")
            if not have >= _CHECKPOINT_COLUMNS:
                what = "has no checkpoints table" if not have else "has a checkpoints table without LangGraph's columns"
                raise InvalidInputError(
                    f"{db} is a SQLite database but not a LangGraph SqliteSaver one: it {what}", hint="give the file SqliteSaver writes"
                )
            wcols = _columns(conn, "writes")
            if wcols and not wcols >= _WRITES_COLUMNS:
                raise InvalidInputError(
                    f"{db}: its writes table does not have LangGraph's columns", hint="give the file SqliteSaver writes"
                )
            where, args = ("WHERE thread_id = ?", (thread,)) if thread is not None else ("", ())
            threads = [r[0] for r in conn.execute(f"SELECT DISTINCT thread_id FROM checkpoints {where} ORDER BY thread_id", args)]
            if thread is not None and not threads:
                raise NotFoundError(f"{db} has no thread {thread!r}", hint="leave --thread out to import every thread")
            puts: list[dict[str, Any]] = []
            previous: dict[tuple[str, str, str], dict[str, Any]] = {}
            rows = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
                f"FROM checkpoints {where} ORDER BY thread_id, checkpoint_ns, checkpoint_id",
                args,
            )
            for t, ns, cid, parent, typ, blob, md in rows:
                rec = _put_record(str(t), ns or "", str(cid), parent, typ, blob, md, previous)
                previous[(rec["t"], rec["n"], rec["i"])] = rec
                puts.append(rec)
            writes: list[dict[str, Any]] = []
            if wcols:
                path = "task_path" if "task_path" in wcols else "''"
                wrows = conn.execute(
                    f"SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, {path}, idx, channel, type, value FROM writes {where} "
                    "ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx",
                    args,
                )
                by_key: dict[tuple[str, str, str], list[list[Any]]] = {}
                for t, ns, cid, task, task_path, idx, channel, typ, value in wrows:
                    key = (str(t), ns or "", str(cid))
                    ts = previous[key]["c"] if key in previous else 0
                    by_key.setdefault(key, []).append(
                        [str(task), str(channel), typ or "null", bytes(value or b""), task_path or "", int(idx), ts]
                    )
                writes = [{"op": "w", "t": k[0], "n": k[1], "i": k[2], "w": w} for k, w in by_key.items()]
            return puts, writes, [str(t) for t in threads]
        except sqlite3.DatabaseError as exc:
            raise CorruptError(
                f"{db} cannot be read: {exc}", hint="the database is damaged; check it with `sqlite3 DB 'PRAGMA integrity_check'`"
            ) from None
    finally:
        conn.close()


def _put_record(
    thread: str,
    ns: str,
    cid: str,
    parent: str | None,
    typ: str | None,
    blob: bytes | None,
    md: Any,
    previous: dict[tuple[str, str, str], dict[str, Any]],
) -> dict[str, Any]:
    """A journal put record (as CkptSaver writes them) for one row of `checkpoints`."""
    where = f"checkpoint {cid} of thread {thread!r}"
    skeleton, values, versions = _split(typ or MSGPACK, bytes(blob or b""), where)
    metadata = _metadata(md, where)
    prev = previous.get((thread, ns, parent)) if parent else None
    prev_versions = prev["v"] if prev is not None else {}
    specs: dict[str, Any] = {}
    items: dict[str, list[bytes]] = {}
    for ch, ver in versions.items():
        value = values.get(ch)
        parent_items = prev["_items"].get(ch) if prev is not None else None
        if prev is not None and prev_versions.get(ch) == ver:
            if parent_items is not None:
                items[ch] = parent_items
            continue  # the parent's value: found again through it
        specs[ch] = [ver, _spec(value, parent_items)]
        if value is not None and value[1] is not None:
            keep = specs[ch][1][1]
            # the parent's bytes objects, not this row's copies: memory stays O(distinct items)
            items[ch] = (parent_items[:keep] if parent_items is not None and keep else []) + value[1][keep:]
    return {
        "op": "p", "t": thread, "n": ns, "i": cid, "p": parent or None, "c": _created(skeleton),
        "k": list(skeleton[:2]), "m": [MSGPACK, metadata], "v": versions, "b": specs, "_items": items,
    }  # fmt: skip


def _spec(value: tuple[str, list[bytes] | None, bytes] | None, parent_items: list[bytes] | None) -> list[Any]:
    if value is None:
        return ["e"]
    tag, items, raw = value
    if items is None:
        return ["t", tag, raw]
    keep = 0
    if parent_items is not None and len(parent_items) <= len(items) and items[: len(parent_items)] == parent_items:
        keep = len(parent_items)
    return ["l", keep, items[keep:]]


def _split(
    typ: str, blob: bytes, where: str
) -> tuple[tuple[str, bytes, Any], dict[str, tuple[str, list[bytes] | None, bytes] | None], dict[str, Any]]:
    """(skeleton typed + its parsed fields, {channel: (type, items or None, bytes)}, versions)."""
    if typ == "json":
        try:
            whole = json.loads(blob)
        except ValueError as exc:
            raise CorruptError(f"{where}: its JSON does not parse ({exc})") from None
        if type(whole) is not dict:
            raise CorruptError(f"{where}: not a checkpoint (a JSON {type(whole).__name__})")
        cv = whole.pop("channel_values", {}) or {}
        skel = json.dumps(whole).encode()
        return (("json", skel, whole)), {ch: ("json", None, json.dumps(v).encode()) for ch, v in cv.items()}, _versions(whole, where)
    if typ != MSGPACK:
        raise CorruptError(f"{where}: stored as {typ!r}, which ckpt does not read (only msgpack and json; never pickle)")
    try:
        u = msgpack.Unpacker(None, raw=False, strict_map_key=False, max_buffer_size=max(len(blob), 1))
        u.feed(blob)
        n = u.read_map_header()
        parts: list[bytes] = []
        fields: dict[str, Any] = {}
        values: dict[str, tuple[str, list[bytes] | None, bytes] | None] = {}
        for _ in range(n):
            k_start = u.tell()
            key = u.unpack()
            v_start = u.tell()
            if key == "channel_values":
                for _ch in range(u.read_map_header()):
                    ch = u.unpack()
                    s = u.tell()
                    u.skip()
                    raw = blob[s : u.tell()]
                    values[str(ch)] = (MSGPACK, split_array(raw), raw)
                continue
            if key in ("channel_versions", "ts"):
                fields[key] = u.unpack()
            else:
                u.skip()
            parts.append(blob[k_start : u.tell()])
            del v_start
        if u.tell() != len(blob):
            raise ValueError("bytes after the checkpoint")
    except (ValueError, TypeError, msgpack.OutOfData, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptError(f"{where}: not a msgpack checkpoint ({type(exc).__name__}: {exc})") from None
    skel = map_header(len(parts)) + b"".join(parts)
    return ((MSGPACK, skel, fields)), values, _versions(fields, where)


def _versions(fields: dict[str, Any], where: str) -> dict[str, Any]:
    versions = fields.get("channel_versions", {})
    if type(versions) is not dict or not all(type(v) in (str, int, float) for v in versions.values()):
        raise CorruptError(f"{where}: its channel versions are malformed")
    return {str(k): v for k, v in versions.items()}


def _created(skeleton: tuple[str, bytes, Any]) -> int:
    ts = skeleton[2].get("ts") if type(skeleton[2]) is dict else None
    if type(ts) is str:
        try:
            return int(datetime.fromisoformat(ts).timestamp() * 1_000_000) * 1000
        except ValueError:
            pass
    return 0


def _metadata(md: Any, where: str) -> bytes:
    """SqliteSaver's metadata is JSON; LangGraph loads it with json.loads. Stored as the
    msgpack of that value, which the saver's serializer loads as the same value."""
    if md is None:
        return msgpack.packb({}, use_bin_type=True)  # type: ignore[no-any-return]
    try:
        value = json.loads(md)
    except (ValueError, TypeError) as exc:
        raise CorruptError(f"{where}: its metadata is not JSON ({exc})") from None
    try:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]
    except (OverflowError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{where}: its metadata holds a value ckpt cannot store ({exc})") from None


def import_sqlite(store: Store, db: str | Path, *, thread: str | None = None, progress: Progress = NULL) -> ImportReport:
    """Copy the checkpoints and pending writes of a SqliteSaver database into `store`
    (one thread, or all): see the module docstring. Everything is read and checked
    before anything is written; checkpoints the store already has are skipped.

    Raises:
        UsageError when LangGraph's checkpoint package is not installed; what
        read_database raises; what committing to the store raises.
    """
    try:
        from ckptcli.adapters.langgraph.saver import CkptSaver
    except ImportError as exc:
        raise UsageError(
            f"importing LangGraph histories needs LangGraph's checkpoint package ({exc.name} is missing)",
            hint="pip install 'ckptcli[langgraph]'",
        ) from None
    puts, writes, threads = read_database(Path(db), thread)
    report = ImportReport(threads=threads)
    saver = CkptSaver(store, fsync="never", seal_idle=0, commit_interval=3600)
    try:
        by_key = {(w["t"], w["n"], w["i"]): w for w in writes}
        progress.start("importing", len(puts))
        for i, rec in enumerate(puts):
            rec = {k: v for k, v in rec.items() if k != "_items"}
            key = (rec["t"], rec["n"], rec["i"])
            if key in saver._entries:
                report.already += 1
            else:
                report.checkpoints += 1
            saver._replay(rec, f"{db} checkpoint {i + 1}", [])
            w = by_key.pop(key, None)
            if w is not None:  # before its child is put: the checkpoint is written once, complete
                e = saver._entries[key]
                saver._load(e)
                before = dict(e.writes)
                saver._replay(w, f"{db} writes of checkpoint {i + 1}", [])
                # only what the store did not have counts (a second import adds none)
                report.writes += sum(1 for k, v in saver._entries[key].writes.items() if before.get(k) is not v)
            progress.advance(1)
        for w in by_key.values():  # writes of no checkpoint in the database: kept in memory only
            report.writes += len(w["w"])
        progress.finish()
    except BaseException:
        saver.abandon()
        raise
    saver.close()
    return report
