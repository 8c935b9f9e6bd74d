"""The index format, encoded and decoded in one place (formats/v1.md, "Index files").

An index file is a record (`framing.KIND_INDEX`) whose body is
``{"packs": [{"id": pack id, "entries": [[oid, type, offset, stored_len, raw_len, codec], ...]}]}``,
named by the SHA-256 of its bytes. The same entry rows make a pack's rebuilt table
(`pack.read_pack`) and a checkpoint file's object table. Index files are written
once and never changed: a take adds one, prune, upgrades and `ckpt repair index`
replace them all with one (`write_index`) and delete the old ones after it.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import operator
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from ckptcli.errors import CorruptError, LimitExceededError
from ckptcli.format import framing, limits
from ckptcli.store import layout
from ckptcli.store.backend import Backend

__all__ = [
    "SNAPSHOT_HEAD_SIZE",
    "IndexEntry",
    "ObjectIndex",
    "decode_index",
    "decode_snapshot",
    "encode_index",
    "encode_snapshot",
    "parse_entry_rows",
    "read_index_file",
    "row_columns",
    "snapshot_size",
    "write_index",
]

#: (pack id, entry rows) of each pack an index names
PackRows = list[tuple[bytes, list[list[Any]]]]
#: one pack's entry rows as columns (`row_columns`): ids, types, offsets, stored lengths,
#: raw lengths, codecs
Columns = tuple[Sequence[bytes], Sequence[int], Sequence[int], Sequence[int], Sequence[int], Sequence[int]]


class IndexEntry(NamedTuple):
    pack: bytes
    obj_type: int
    offset: int
    stored_len: int
    raw_len: int
    codec: int


#: one entry of the compact part of an ObjectIndex: pack number (into its pack list),
#: offset, stored length, raw length, type | codec << 1
_REC = struct.Struct(">IQIIB")
_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF


class ObjectIndex:
    """Object id -> IndexEntry: where each object of the store is, in about 54 bytes an
    object (docs/design.md, "The object index in memory").

    Most entries sit in two byte strings: the object ids, 32 bytes each, sorted, and their
    entries, fixed-size records (`_REC`) in the same order, the packs named by number in a
    list. A bucket table (the first bits of an id -> where its ids start) narrows a lookup
    to about 8 ids, which `bytes.find` scans. Entries added since the last merge wait in
    a dict of records (`_pending`); once it holds 1/32 of the sorted part (at least
    `MERGE_MIN`), it is merged in (one pass of slices: O(n) copying, O(new log n) Python
    work), so they cost about 6 bytes an object more. An entry whose numbers do not fit
    a record (only a damaged index file declares those) is kept as it is (`_odd`). The
    index holds bytes and ints only, nothing the garbage collector walks. `setdefault`
    and `add_many` are the ways in: the first entry of an object wins."""

    MERGE_MIN = 4096

    def __init__(self) -> None:
        self._keys = b""  # sorted object ids, 32 bytes each
        self._vals = b""  # their records, _REC.size bytes each, same order
        self._bits = 0  # bucket table over the first `_bits` bits of an id
        self._starts: array[int] = array("I", [0, 0])
        self._packs: list[bytes] = []
        self._pack_no: dict[bytes, int] = {}
        self._pending: dict[bytes, bytes] = {}  # id -> record, not merged yet
        self._odd: dict[bytes, tuple[bytes, int, int, int, int, int]] = {}  # entries no record holds

    # -- lookups -------------------------------------------------------------------
    def _find(self, oid: bytes) -> int:
        """The position of `oid` in the sorted part, or -1."""
        if len(oid) != 32 or not self._keys:
            return -1
        b = int.from_bytes(oid[:2], "big") >> (16 - self._bits)
        keys, lo, hi = self._keys, self._starts[b] * 32, self._starts[b + 1] * 32
        while True:
            at = keys.find(oid, lo, hi)
            if at < 0:
                return -1
            if at % 32 == 0:
                return at // 32
            lo = at + 1  # straddles two ids: keep looking

    def _entry(self, rec: bytes | memoryview, at: int = 0) -> IndexEntry:
        pack, off, slen, rlen, tc = _REC.unpack_from(rec, at)
        try:
            return IndexEntry(self._packs[pack], tc & 1, off, slen, rlen, tc >> 1)
        except IndexError:  # only a snapshot (its checksum holding) could say so
            raise CorruptError(f"{SNAPSHOT}: names pack number {pack} of {len(self._packs)}", hint=f"delete {SNAPSHOT}") from None

    def get(self, oid: bytes, default: IndexEntry | None = None) -> IndexEntry | None:
        rec = self._pending.get(oid)
        if rec is not None:
            return self._entry(rec)
        i = self._find(oid)
        if i >= 0:
            return self._entry(self._vals, i * _REC.size)
        t = self._odd.get(oid)
        return default if t is None else IndexEntry._make(t)

    def __getitem__(self, oid: bytes) -> IndexEntry:
        e = self.get(oid)
        if e is None:
            raise KeyError(oid)
        return e

    def __contains__(self, oid: object) -> bool:
        return isinstance(oid, bytes) and (oid in self._pending or self._find(oid) >= 0 or oid in self._odd)

    def __len__(self) -> int:
        return len(self._keys) // 32 + len(self._pending) + len(self._odd)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[bytes]:
        keys = self._keys
        for i in range(0, len(keys), 32):
            yield keys[i : i + 32]
        yield from list(self._pending)
        yield from list(self._odd)

    def keys(self) -> Iterator[bytes]:
        return iter(self)

    def values(self) -> Iterator[IndexEntry]:
        return (e for _oid, e in self.items())

    def items(self) -> Iterator[tuple[bytes, IndexEntry]]:
        keys, vals, size = self._keys, self._vals, _REC.size
        for i in range(len(keys) // 32):
            yield keys[i * 32 : i * 32 + 32], self._entry(vals, i * size)
        for oid, rec in list(self._pending.items()):
            yield oid, self._entry(rec)
        for oid, t in list(self._odd.items()):
            yield oid, IndexEntry._make(t)

    # -- additions -----------------------------------------------------------------
    def setdefault(self, oid: bytes, entry: IndexEntry) -> IndexEntry:
        found = self.get(oid)
        if found is not None:
            return found
        self.add_many([(oid, entry)])
        return IndexEntry._make(entry)

    def __setitem__(self, oid: bytes, entry: IndexEntry) -> None:
        self.pop(oid)
        self.add_many([(oid, entry)])

    def pop(self, oid: bytes, default: IndexEntry | None = None) -> IndexEntry | None:
        """Remove the entry of `oid` (O(n) when it is in the sorted part); returns it."""
        found = self.get(oid)
        if found is None:
            return default
        i = self._find(oid)
        if i >= 0:
            self._keys = self._keys[: i * 32] + self._keys[i * 32 + 32 :]
            self._vals = self._vals[: i * _REC.size] + self._vals[(i + 1) * _REC.size :]
            self._rebucket()
        self._pending.pop(oid, None)
        self._odd.pop(oid, None)
        return found

    def add_many(self, entries: Iterable[tuple[bytes, IndexEntry]], *, settle: bool = True) -> None:
        """`setdefault` of each. `settle`: merge the waiting entries into the sorted part
        if they are many enough now (False while reading many index files: `settle()`
        after the last)."""
        pending, odd, pack_no, packs, pack = self._pending, self._odd, self._pack_no, self._packs, _REC.pack
        has_keys = bool(self._keys)
        for oid, e in entries:
            if oid in pending or oid in odd or (has_keys and self._find(oid) >= 0):
                continue
            p, typ, off, slen, rlen, codec = e
            if off > _U64_MAX or slen > _U32_MAX or rlen > _U32_MAX or typ > 1 or codec > 1:
                odd[oid] = tuple(e)  # type: ignore[assignment]
                continue
            no = pack_no.get(p)
            if no is None:
                no = pack_no[p] = len(packs)
                packs.append(p)
            pending[oid] = pack(no, off, slen, rlen, typ | codec << 1)
        if settle:
            self.settle()

    def add_columns(self, pack: bytes, columns: Columns, *, settle: bool = True) -> None:
        """`add_many` of the entries of one pack given as the columns `row_columns` made of
        its rows (checked), without a Python call an entry."""
        oids, typs, offs, slens, rlens, codecs = columns
        if not oids:
            return
        known = pack in self._pack_no
        no = self._pack_no.setdefault(pack, len(self._packs))
        tcs = map(operator.or_, typs, map(operator.lshift, codecs, itertools.repeat(1)))
        recs = map(_REC.pack, itertools.repeat(no), offs, slens, rlens, tcs)
        new = dict(zip(reversed(oids), reversed(list(recs)), strict=True))  # the first entry of an object wins
        pending, odd = self._pending, self._odd
        if pending:
            for oid in new.keys() & pending.keys():
                del new[oid]
        if odd:
            for oid in new.keys() & odd.keys():
                del new[oid]
        if self._keys:
            for oid in [oid for oid in new if self._find(oid) >= 0]:
                del new[oid]
        if new:
            if not known:
                self._packs.append(pack)
            pending.update(new)
        elif not known:
            del self._pack_no[pack]  # no entry of it was added (as add_many would not add it)
        if settle:
            self.settle()

    def settle(self) -> None:
        """Merge the waiting entries when they hold 1/32 of the sorted part (at least MERGE_MIN)."""
        if len(self._pending) >= max(self.MERGE_MIN, len(self._keys) // 32 // 32):
            self.merge()

    def merge(self) -> None:
        """Move every waiting entry into the sorted part."""
        recs, self._pending = self._pending, {}
        if not recs:
            return
        new = sorted(recs)
        keys, vals, size = self._keys, self._vals, _REC.size
        n = len(keys) // 32
        if not n:
            self._keys, self._vals = b"".join(new), b"".join(map(recs.__getitem__, new))
            self._rebucket()
            return
        kparts: list[bytes] = []
        vparts: list[bytes] = []
        prev = 0
        for oid in new:
            at = self._insertion(oid)
            if at > prev:
                kparts.append(keys[prev * 32 : at * 32])
                vparts.append(vals[prev * size : at * size])
            kparts.append(oid)
            vparts.append(recs[oid])
            prev = at
        kparts.append(keys[prev * 32 :])
        vparts.append(vals[prev * size :])
        self._keys, self._vals = b"".join(kparts), b"".join(vparts)
        self._rebucket()

    def _insertion(self, oid: bytes) -> int:
        """Where `oid` (not present) goes in the sorted part."""
        b = int.from_bytes(oid[:2], "big") >> (16 - self._bits)
        lo, hi = self._starts[b], self._starts[b + 1]
        keys = self._keys
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[mid * 32 : mid * 32 + 32] < oid:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _rebucket(self) -> None:
        """The bucket table of the sorted part: up to 2**16 buckets by the first bits of
        an id, about 8 ids each; found by bisecting the ids' first two bytes."""
        n = len(self._keys) // 32
        bits = max(0, min(16, (n // 8).bit_length()))
        if bits:
            pre = array("H", memoryview(self._keys).cast("H")[::16].tobytes())
            if sys.byteorder == "little":
                pre.byteswap()
            # one bisect a bucket, called from C (map): 2**16 of them at a million ids
            starts = array("I", map(bisect.bisect_left, itertools.repeat(pre), range(0, 1 << 16, 1 << (16 - bits))))
            starts.append(n)
        else:
            starts = array("I", [0, n])
        self._bits, self._starts = bits, starts

    def copy(self) -> ObjectIndex:
        out = ObjectIndex()
        out._keys, out._vals, out._bits, out._starts = self._keys, self._vals, self._bits, array("I", self._starts)
        out._packs, out._pack_no = list(self._packs), dict(self._pack_no)
        out._pending, out._odd = dict(self._pending), dict(self._odd)
        return out

    def resident_bytes(self) -> int:
        """About the bytes this index holds: its sorted part and bucket table, 64 a pack,
        and the waiting entries at 120 bytes each (a dict slot, an id, a record)."""
        return (
            len(self._keys)
            + len(self._vals)
            + len(self._starts) * 4
            + 64 * len(self._packs)
            + 120 * len(self._pending)
            + 200 * len(self._odd)
        )


#: a copy of a store's whole object index, written by a process that read many index
#: files, so that the next one reads one file (docs/design.md, "The object index in memory").
#: Its bytes: MAGIC, then _SNAP_HEAD (version, index files, packs, objects, bucket bits),
#: the index files' ids (32 bytes each), the pack ids (32 each), the object ids (32
#: each, sorted), their records (_REC each), the bucket table (4 bytes each, big-endian),
#: then the SHA-256 of all that. Not compressed: it is read at every opening of a big store.
SNAPSHOT = layout.INDEX_SNAPSHOT
SNAPSHOT_VERSION = 1
_SNAP_MAGIC = b"CKPTIXS\n"
_SNAP_HEAD = struct.Struct(">IIIIB")


def encode_snapshot(idx: ObjectIndex, files: Iterable[str]) -> bytes | None:
    """The bytes of `cache/index-snapshot` for `idx`, read from the index files `files`
    (paths `index/<hex>`); None when some entry fits no record (then no snapshot)."""
    if idx._odd:
        return None
    idx.merge()
    ids = sorted(bytes.fromhex(f.rsplit("/", 1)[-1]) for f in files)
    starts = array("I", idx._starts)
    if sys.byteorder == "little":
        starts.byteswap()
    n = len(idx._keys) // 32
    head = _SNAP_MAGIC + _SNAP_HEAD.pack(SNAPSHOT_VERSION, len(ids), len(idx._packs), n, idx._bits)
    out = b"".join([head, *ids, *idx._packs, idx._keys, idx._vals, starts.tobytes()])
    return out + hashlib.sha256(out).digest()


#: the bytes of a snapshot's magic and head, which say how long it is (snapshot_size)
SNAPSHOT_HEAD_SIZE = len(_SNAP_MAGIC) + _SNAP_HEAD.size
#: the fewest bytes an entry row takes in an index file (a 32-byte id as a msgpack bin,
#: five integers, the array's header): how many rows the index files can hold at most
_MIN_ROW_BYTES = 40


def snapshot_size(head: bytes, index_files: int) -> int | None:
    """The length a snapshot whose first SNAPSHOT_HEAD_SIZE bytes are `head` has, when
    it is plausible for a store with `index_files` index files: it names no more files
    than that, and no more objects than their rows could hold (each file at most a record
    file's size), so reading it costs no more memory than reading those files would.
    None otherwise (a damaged or planted file: it is not read further)."""
    if len(head) < SNAPSHOT_HEAD_SIZE or not head.startswith(_SNAP_MAGIC):
        return None
    version, nfiles, npacks, n, bits = _SNAP_HEAD.unpack_from(head, len(_SNAP_MAGIC))
    if version != SNAPSHOT_VERSION or bits > 16 or nfiles > index_files:
        return None
    if n > nfiles * (layout.RECORD_FILE_MAX // _MIN_ROW_BYTES) or npacks > n + nfiles:
        return None
    size: int = SNAPSHOT_HEAD_SIZE + 32 * nfiles + 32 * npacks + 32 * n + _REC.size * n + 4 * ((1 << bits) + 1) + 32
    return size


def decode_snapshot(data: bytes) -> tuple[ObjectIndex, set[str]] | None:
    """(the index, the index files it was read from) of a snapshot; None when it is
    damaged, of another version or malformed (it is a cache: then the files are read)."""
    at = len(_SNAP_MAGIC) + _SNAP_HEAD.size
    if len(data) < at + 32 or not data.startswith(_SNAP_MAGIC):
        return None
    version, nfiles, npacks, n, bits = _SNAP_HEAD.unpack_from(data, len(_SNAP_MAGIC))
    if version != SNAPSHOT_VERSION or bits > 16:
        return None
    sizes = (32 * nfiles, 32 * npacks, 32 * n, _REC.size * n, 4 * ((1 << bits) + 1))
    if len(data) != at + sum(sizes) + 32 or hashlib.sha256(memoryview(data)[:-32]).digest() != data[-32:]:
        return None
    parts = []
    for size in sizes:
        parts.append(data[at : at + size])
        at += size
    files, packs, keys, vals, table = parts
    starts = array("I", table)
    if sys.byteorder == "little":
        starts.byteswap()
    if starts[0] != 0 or starts[-1] != n:
        return None
    idx = ObjectIndex()
    idx._packs = [packs[i : i + 32] for i in range(0, len(packs), 32)]
    idx._pack_no = {p: i for i, p in enumerate(idx._packs)}
    idx._keys, idx._vals, idx._bits, idx._starts = keys, vals, bits, starts
    names = {f"{layout.INDEX}/{files[i : i + 32].hex()}" for i in range(0, len(files), 32)}
    return idx, names


def parse_entry_rows(rows: Any, pack_id: bytes, where: str) -> Iterator[tuple[bytes, IndexEntry]]:
    """The entries of one pack's rows, each checked (CorruptError, LimitExceededError)."""
    if not isinstance(rows, list):
        raise CorruptError(f"{where}: entry table is not a list")
    max_raw, max_stored, make = limits.MAX_OBJECT_SIZE, limits.MAX_OBJECT_SIZE + 1024, IndexEntry._make
    for row in rows:
        if not (isinstance(row, list) and len(row) == 6 and isinstance(row[0], bytes) and len(row[0]) == 32):
            raise CorruptError(f"{where}: malformed entry")
        oid, typ, off, slen, rlen, codec = row
        # (one check a field, not a generator: a million rows are read when a store opens)
        if not (
            type(typ) is int
            and type(off) is int
            and type(slen) is int
            and type(rlen) is int
            and type(codec) is int
            and 0 <= typ <= 1
            and 0 <= codec <= 1
            and off >= 0
            and slen >= 0
            and rlen >= 0
        ):
            raise CorruptError(f"{where}: malformed entry for object {oid.hex()[:12]}")
        if rlen > max_raw or slen > max_stored:
            raise LimitExceededError(f"{where}: object {oid.hex()[:12]} declares {rlen} bytes, over the limit of {limits.MAX_OBJECT_SIZE}")
        yield oid, make((pack_id, typ, off, slen, rlen, codec))


def row_columns(rows: Any) -> Columns | None:
    """The columns (ids, types, offsets, stored lengths, raw lengths, codecs) of one pack's
    entry rows when every row passes the checks of `parse_entry_rows` and fits a record of
    an ObjectIndex: checked a column at a time, in C (a store's index files hold a million
    rows). None when some row is not plainly well-formed: `parse_entry_rows` then reads
    them row by row, and says which row is wrong and how."""
    if type(rows) is not list:
        return None
    if not rows:
        return (), (), (), (), (), ()
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {6}:
        return None
    oids, typs, offs, slens, rlens, codecs = zip(*rows, strict=True)
    if set(map(type, oids)) != {bytes} or set(map(len, oids)) != {32}:
        return None
    for column in (typs, offs, slens, rlens, codecs):
        if set(map(type, column)) != {int}:  # exactly int, as `type(x) is int`: no bool
            return None
    if min(typs) < 0 or max(typs) > 1 or min(codecs) < 0 or max(codecs) > 1:
        return None
    if min(offs) < 0 or min(slens) < 0 or min(rlens) < 0 or max(offs) > _U64_MAX:
        return None
    if max(rlens) > min(limits.MAX_OBJECT_SIZE, _U32_MAX) or max(slens) > min(limits.MAX_OBJECT_SIZE + 1024, _U32_MAX):
        return None
    return oids, typs, offs, slens, rlens, codecs


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
