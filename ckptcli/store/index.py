"""The index format, encoded and decoded in one place (formats/v1.md, "Index files").

An index file is a record (`framing.KIND_INDEX`) whose body is
``{"packs": [{"id": pack id, "entries": [[oid, type, offset, stored_len, raw_len, codec], ...]}]}``,
named by the SHA-256 of its bytes. The same entry rows make a pack's rebuilt table
(`pack.read_pack`) and a checkpoint file's object table. Index files are written
once and never changed: a take adds one, prune, upgrades and `ckpt repair index`
replace them all with one (`write_index`) and delete the old ones after it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from ckptcli.errors import CorruptError, LimitExceededError
from ckptcli.format import framing, limits
from ckptcli.store import layout
from ckptcli.store.backend import Backend

__all__ = [
    "IndexEntry",
    "ObjectIndex",
    "decode_index",
    "encode_index",
    "parse_entry_rows",
    "read_index_file",
    "write_index",
]

#: (pack id, entry rows) of each pack an index names
PackRows = list[tuple[bytes, list[list[Any]]]]


class IndexEntry(NamedTuple):
    pack: bytes
    obj_type: int
    offset: int
    stored_len: int
    raw_len: int
    codec: int


class ObjectIndex(dict):  # type: ignore[type-arg]
    """Object id -> IndexEntry: where each object of the store is. The entries are kept as
    plain tuples, which Python's garbage collector stops tracking once it has seen them
    hold only bytes and ints (an IndexEntry, a tuple subclass, it walks on every full
    collection): a long-lived process with a big store pays no collector time for its
    index. Reads hand out IndexEntry; `setdefault` is the one way in."""

    def get(self, oid: bytes, default: IndexEntry | None = None) -> IndexEntry | None:  # type: ignore[override]
        t = dict.get(self, oid)
        return default if t is None else IndexEntry._make(t)

    def __getitem__(self, oid: bytes) -> IndexEntry:
        return IndexEntry._make(dict.__getitem__(self, oid))

    def setdefault(self, oid: bytes, entry: IndexEntry) -> IndexEntry:  # type: ignore[override]
        return IndexEntry._make(dict.setdefault(self, oid, tuple(entry)))

    def __setitem__(self, oid: bytes, entry: IndexEntry) -> None:
        dict.__setitem__(self, oid, tuple(entry))

    def values(self) -> Iterator[IndexEntry]:  # type: ignore[override]
        return map(IndexEntry._make, dict.values(self))

    def items(self) -> Iterator[tuple[bytes, IndexEntry]]:  # type: ignore[override]
        return ((oid, IndexEntry._make(t)) for oid, t in dict.items(self))

    def copy(self) -> ObjectIndex:
        out = ObjectIndex()
        dict.update(out, self)
        return out


def parse_entry_rows(rows: Any, pack_id: bytes, where: str) -> Iterator[tuple[bytes, IndexEntry]]:
    """The entries of one pack's rows, each checked (CorruptError, LimitExceededError)."""
    if not isinstance(rows, list):
        raise CorruptError(f"{where}: entry table is not a list")
    for row in rows:
        if not (isinstance(row, list) and len(row) == 6 and isinstance(row[0], bytes) and len(row[0]) == 32):
            raise CorruptError(f"{where}: malformed entry")
        oid, typ, off, slen, rlen, codec = row
        if not all(type(x) is int and x >= 0 for x in (typ, off, slen, rlen, codec)) or typ > 1 or codec > 1:
            raise CorruptError(f"{where}: malformed entry for object {oid.hex()[:12]}")
        if rlen > limits.MAX_OBJECT_SIZE or slen > limits.MAX_OBJECT_SIZE + 1024:
            raise LimitExceededError(f"{where}: object {oid.hex()[:12]} declares {rlen} bytes, over the limit of {limits.MAX_OBJECT_SIZE}")
        yield oid, IndexEntry(pack_id, typ, off, slen, rlen, codec)


def encode_index(packs: PackRows, version: int) -> bytes:
    """The bytes of an index file naming `packs`."""
    body = {"packs": [{"id": pid, "entries": rows} for pid, rows in packs]}
    return framing.encode_record(framing.KIND_INDEX, body, version)


def write_index(backend: Backend, packs: PackRows, version: int) -> str:
    """Write one index file naming `packs`; returns its path (`layout.index_path`)."""
    data = encode_index(packs, version)
    name = layout.index_path(hashlib.sha256(data).digest())
    backend.write_atomic(name, data)
    return name


def decode_index(data: bytes, name: str) -> list[tuple[bytes, Any]]:
    """(pack id, its rows as stored) of each pack the index file `name` names; the rows
    are checked by `parse_entry_rows`. Raises CorruptError."""
    if hashlib.sha256(data).hexdigest() != name.rsplit("/", 1)[-1]:
        raise CorruptError(f"{name}: content does not match its name (the index file is damaged)", hint="run `ckpt verify`")
    _v, body = framing.decode_record(data, framing.KIND_INDEX, name)
    packs = body.get("packs")
    if not isinstance(packs, list):
        raise CorruptError(f"{name}: index has no pack list")
    out = []
    for p in packs:
        if not (isinstance(p, dict) and isinstance(p.get("id"), bytes) and len(p["id"]) == 32):
            raise CorruptError(f"{name}: malformed pack entry")
        out.append((p["id"], p.get("entries")))
    return out


def read_index_file(backend: Backend, name: str) -> list[tuple[bytes, Any]]:
    """`decode_index` of the file `name` of a store."""
    return decode_index(backend.read(name), name)
