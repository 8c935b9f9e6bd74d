"""The pack format, in one place: writing packs, taking them apart and peeking at them
(formats/v1.md and v2.md, "Pack files").

A pack is a header, stored objects back to back, and a trailer record listing each
object's type, lengths and codec (and, in version 2, a check of its stored bytes),
followed by the trailer's length as a u32. Version 1 names a pack by the SHA-256 of
every byte; version 2 by its header, object ids and trailer (`framing.pack_id_v2`).
A pack is written once, in tmp/, and renamed into place under `layout.pack_path`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ckptcli._util.threads import executor
from ckptcli.errors import CkptError, CorruptError
from ckptcli.format import framing, limits
from ckptcli.store.backend import Backend, io_error
from ckptcli.store.index import IndexEntry
from ckptcli.store.layout import pack_path

__all__ = [
    "PackTable",
    "PackWriter",
    "check_pack_at",
    "check_pack_data",
    "pack_version",
    "read_pack",
    "read_pack_at",
    "read_pack_table",
    "stored_bytes",
]

_U32 = struct.Struct(">I")


_IO_AFTER = 1024 * 1024


class PackWriter:
    """Appends stored objects to one pack file in tmp/; `finish` commits it.

    Once a pack passes `io_after` bytes (small takes never do: a thread hand-off would
    cost them more than it saves), its writes, the pack hash and the final fsync and
    rename run on one I/O thread, in order, while the caller goes on encoding: the
    offsets and rows are bookkept here, synchronously, so they never wait for I/O. At
    most `_IO_AHEAD` bytes are queued; a write error surfaces at the next call.
    """

    def __init__(self, backend: Backend, version: int = limits.FORMAT_VERSION, io_after: int | None = _IO_AFTER) -> None:
        self.backend = backend
        self.version = version
        self.io: ThreadPoolExecutor | None = None
        self.io_after = io_after
        self.pending: collections.deque[tuple[int, Future[None]]] = collections.deque()
        self.queued = 0
        # writes for the I/O thread, handed over _IO_BATCH bytes at a time: one hand-off
        # (and one wake-up of that thread) per ~16 objects rather than per object
        self.batch: list[bytes | memoryview] = []
        self.batch_bytes = 0
        #: the first write that failed on the I/O thread: the pack is then never committed
        #: (a batch stops at its failed write, so the file may end cleanly where it broke)
        self.failed: BaseException | None = None
        self.temp, self.fh = backend.open_temp()
        # the I/O thread's writes: their descriptor (None: through the handle, object by
        # object), where in the file they are, and where writeback was last started
        self.fd: int | None = None
        self.written = 0
        self.writeback_from = 0
        # version 1 names a pack by the SHA-256 of every byte; version 2 by its header,
        # object ids and trailer, with an XXH3-64 of each object's stored bytes in the
        # trailer, so the pack's bytes are not hashed with SHA-256 a second time
        self.hasher: Any = hashlib.sha256() if version == 1 else None
        self.checks: list[int] = []
        self.size = 0
        self.rows: list[list[Any]] = []
        self.header = framing.encode_header(framing.KIND_PACK, version)
        self._write(self.header)

    def _write(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self.io is None and self.io_after is not None and self.size > self.io_after:
            self.io = _io_pool()  # a big pack: hand the rest of it to the I/O thread
            self.written = self.writeback_from = self.size - len(data)
            self.fd = _descriptor(self.fh)
        if self.io is None:
            self._write_now(data)
            return
        self.batch.append(data)
        self.batch_bytes += len(data)
        if self.batch_bytes >= _IO_BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        """Queue the batched writes for the I/O thread (at most _IO_AHEAD bytes queued)."""
        if not self.batch or self.io is None:
            return
        batch, n = self.batch, self.batch_bytes
        self.batch, self.batch_bytes = [], 0
        self.pending.append((n, self.io.submit(self._write_many, batch)))
        self.queued += n
        while self.queued > _IO_AHEAD:
            self._wait_one()

    def _write_many(self, batch: list[bytes | memoryview]) -> None:
        """Write a batch on the I/O thread: in one writev(2) where the handle is a file
        (one system call, and one wait for the GIL, per batch rather than per object),
        then have the writeback of each _WRITEBACK bytes written started, so that the
        fsync that commits the pack has less left to write."""
        if self.failed is not None:
            raise self.failed
        try:
            if self.fd is None:
                for data in batch:
                    self._write_now(data)
                return
            try:
                self.fh.flush()  # what was written through the handle before the I/O thread took over
                self.written += _writev_all(self.fd, batch)
            except OSError as exc:
                raise io_error(exc, "write", self.temp) from None
            if self.hasher is not None:
                for data in batch:
                    self.hasher.update(data)
            if self.written - self.writeback_from >= _WRITEBACK and self.backend.starts_writeback:
                # on the thread that commits packs (idle meanwhile), before this pack's
                # commit: submitting the writeback costs ~0.5 ms of kernel time an 8 MiB
                start, self.writeback_from = self.writeback_from, self.written
                _sync_pool(self.backend).submit(self.backend.start_writeback, self.fh, start, self.written - start)
        except BaseException as exc:
            self.failed = exc
            raise

    def _wait_one(self) -> None:
        n, fut = self.pending.popleft()
        self.queued -= n
        fut.result()

    def _write_now(self, data: bytes | memoryview) -> None:
        try:
            self.fh.write(data)
        except OSError as exc:
            raise io_error(exc, "write", self.temp) from None
        if self.hasher is not None:
            self.hasher.update(data)

    def add(self, oid: bytes, obj_type: int, codec: int, stored: bytes | memoryview, raw_len: int) -> int:
        offset = self.size
        if self.hasher is None:
            self.checks.append(framing.stored_check(stored))
        self._write(stored)
        self.rows.append([oid, obj_type, offset, len(stored), raw_len, codec])
        return offset

    def add_many(self, items: Sequence[tuple[bytes, int, bytes | memoryview, int, int]], start: int, obj_type: int, target: int) -> int:
        """`add` of items[start:] (each (id, codec, stored bytes, raw length, the stored
        bytes' framing.stored_check), all of `obj_type`), one after another, until the
        pack holds `target` bytes or more; returns the index of the first item not
        added. The same pack as `add` of each: one call a window of chunks instead of
        one a chunk (take's main thread), and the checks were taken where the bytes
        were made."""
        rows, checks = self.rows, self.checks
        v2 = self.hasher is None
        i, n = start, len(items)
        while i < n:
            oid, codec, stored, raw_len, check = items[i]
            i += 1
            slen = len(stored)
            if v2:
                checks.append(check)
            rows.append([oid, obj_type, self.size, slen, raw_len, codec])
            self._write(stored)
            if self.size >= target:
                break
        return i

    def finish(self) -> Callable[[], tuple[bytes, list[list[Any]]]]:
        """Write the trailer and commit the pack; returns a call that waits for the
        commit and gives (pack id, rows)."""
        # The trailer makes a pack self-describing (an index can be rebuilt from it)
        # without repeating the 32-byte ids the index holds: an id is the hash of the
        # content, and offsets follow from the lengths.
        objects: list[list[int]] = [[typ, slen, rlen, codec] for _oid, typ, _off, slen, rlen, codec in self.rows]
        if self.hasher is None:
            for obj, check in zip(objects, self.checks, strict=True):
                obj.append(check)
        table = framing.encode_record(framing.KIND_PACK_TRAILER, {"objects": objects}, self.version)
        self._write(table)
        self._write(_U32.pack(len(table)))
        self._hand_over()
        v2_id = None if self.hasher is not None else framing.pack_id_v2(self.header, [r[0] for r in self.rows], table)

        def pack_id() -> bytes:
            return v2_id if v2_id is not None else self.hasher.digest()  # type: ignore[no-any-return]

        if self.io is None:
            done = self._commit(pack_id())
            return lambda: done
        # The fsync of a finished pack runs on a thread of its own, so that the I/O
        # thread goes on filling the next pack while the disk catches up with this one.
        sealed = self.io.submit(lambda: _sync_pool(self.backend).submit(self._commit, pack_id()))

        def wait() -> tuple[bytes, list[list[Any]]]:
            self._wait_all()
            return sealed.result().result()

        return wait

    def _commit(self, pack_id: bytes) -> tuple[bytes, list[list[Any]]]:
        if self.failed is not None:
            self.backend.discard_temp(self.temp, self.fh)
            raise self.failed
        self.backend.commit_temp(self.temp, self.fh, pack_path(pack_id))
        return pack_id, self.rows

    def _wait_all(self) -> None:
        while self.pending:
            self._wait_one()

    def abort(self) -> None:
        self.batch, self.batch_bytes = [], 0
        for _n, fut in self.pending:
            with contextlib.suppress(Exception):
                fut.result()
        self.pending.clear()
        self.backend.discard_temp(self.temp, self.fh)


_IO_AHEAD = 16 << 20  # bytes of pack writes queued for the I/O thread
_IO_BATCH = 1 << 20  # bytes of pack writes handed to the I/O thread at once
_WRITEBACK = 8 << 20  # bytes written by the I/O thread between two starts of writeback
#: buffers one writev(2) takes at most (Linux's IOV_MAX)
_IOV_MAX = 1024


def _descriptor(fh: Any) -> int | None:
    """The descriptor of a pack's handle, for the I/O thread's writev; None when it has
    none (then it writes through the handle)."""
    try:
        fd = fh.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) and hasattr(os, "writev") else None


def _writev_all(fd: int, bufs: list[bytes | memoryview]) -> int:
    """Write every buffer, in order, with as few writev(2) calls as it takes (a call may
    write only part: the rest is written by the next); returns the bytes written."""
    total = 0
    i = 0
    while i < len(bufs):
        part = bufs[i : i + _IOV_MAX]
        want = sum(len(b) for b in part)
        n = os.writev(fd, part)
        total += n
        if n == want:
            i += len(part)
            continue
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        # a short write: skip what went out, and go on from the middle of the buffer it stopped in
        bufs = bufs[i:]
        i = 0
        while n >= len(bufs[i]):
            n -= len(bufs[i])
            i += 1
        bufs = [memoryview(bufs[i])[n:], *bufs[i + 1 :]]
        i = 0
    return total


def _io_pool() -> ThreadPoolExecutor:
    """The thread that writes and hashes big packs, in order."""
    return executor("ckpt-io", 1)


def _sync_pool(backend: Backend) -> ThreadPoolExecutor:
    """The threads that commit finished packs: one that fsyncs and renames them on a
    local disk; several that upload them to object storage (`Backend.commit_threads`)."""
    n = backend.commit_threads
    return executor("ckpt-sync" if n == 1 else f"ckpt-upload-{n}", n)


@dataclass
class PackTable:
    """A whole pack file taken apart through its trailer (formats/v1.md and v2.md, "Pack files")."""

    version: int
    rows: list[list[Any]]  # [id, type, offset, stored_len, raw_len, codec] of each object that decoded
    errors: dict[int, str]  # offset -> what is wrong with the object stored there
    trailer: bytes  # the trailer record, as stored
    header: bytes = b""  # the 12-byte header, as stored (every byte of it, reserved ones too, is in the id)

    def pack_id(self) -> bytes | None:
        """The id this pack should be named by; None for a version-2 pack with a damaged
        object (its id cannot be recovered)."""
        if self.version == 1:
            return None  # the SHA-256 of the whole file: the caller has the bytes
        if self.errors:
            return None
        return framing.pack_id_v2(self.header, [r[0] for r in self.rows], self.trailer)


#: stored bytes of a pack's objects checked as one task when read_pack is given a pool
SLICE_BYTES = 4 * 1024 * 1024
#: bytes read_pack_at reads at once, inside a slice: the objects are checked straight
#: after they are read, while they are still in the reading core's cache
READ_BYTES = 256 * 1024

#: (type, offset, stored length, raw length, codec, check or None) of one object
_Obj = tuple[int, int, int, int, int, int | None]


def _check_objects(data: bytes | memoryview, objs: list[_Obj], where: str, base: int = 0) -> list[list[Any] | str]:
    """Each object's index row, or what is wrong with it: its stored bytes against their
    check (version 2), then decompressed (zstd only: stored-as-is bytes are hashed where
    they lie, never copied) and hashed for its id. hashlib and zstandard release the GIL.
    `data` holds the pack's bytes from offset `base` on."""
    view = memoryview(data)
    out: list[list[Any] | str] = []
    sha256, decompress, check = hashlib.sha256, framing.decompress, framing.stored_check
    for typ, offset, slen, rlen, codec, want in objs:
        stored = view[offset - base : offset - base + slen]
        try:
            if len(stored) != slen:
                raise CorruptError(f"{where}: truncated at the object at offset {offset} (the file shrank while it was read)")
            if want is not None and check(stored) != want:
                raise CorruptError(
                    f"{where}: the object at offset {offset} does not match its check in the trailer (its stored bytes are damaged)"
                )
            if codec == framing.CODEC_NONE and slen == rlen and rlen <= limits.MAX_OBJECT_SIZE:
                oid = sha256(stored).digest()
            else:
                oid = sha256(decompress(codec, stored, rlen, limits.MAX_OBJECT_SIZE, f"{where} at offset {offset}")).digest()
            out.append([oid, typ, offset, slen, rlen, codec])
        except CkptError as exc:
            out.append(exc.message)
    return out


def _read_and_check(read: Callable[[int, int], bytes], objs: list[_Obj], where: str) -> list[list[Any] | str]:
    """`_check_objects` of objects read with `read(offset, length)`, READ_BYTES (or one
    larger object) at a time, each run checked as soon as it is read."""
    out: list[list[Any] | str] = []
    i = 0
    while i < len(objs):
        base = objs[i][1]
        j = i + 1
        while j < len(objs) and objs[j][1] + objs[j][2] - base <= READ_BYTES:
            j += 1
        last = objs[j - 1]
        out += _check_objects(read(base, last[1] + last[2] - base), objs[i:j], where, base)
        i = j
    return out


def _layout(header: bytes | memoryview, trailer: bytes, trailer_at: int, where: str, version: int) -> tuple[PackTable, list[_Obj]]:
    """The pack's table (no rows yet) and its objects, from the header and the trailer
    record found at `trailer_at`: structural damage raises CorruptError."""
    tversion, body = framing.decode_record(trailer, framing.KIND_PACK_TRAILER, f"{where} (trailer)")
    if tversion != version:
        raise CorruptError(f"{where}: a version-{tversion} trailer in a version-{version} pack")
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise CorruptError(f"{where}: trailer has no object list")
    width = 4 if version == 1 else 5
    table = PackTable(version, [], {}, trailer, bytes(header[: framing.HEADER_SIZE]))
    offset = framing.HEADER_SIZE
    objs: list[_Obj] = []
    for obj in objects:
        if not (isinstance(obj, list) and len(obj) == width and all(type(x) is int and x >= 0 for x in obj)):
            raise CorruptError(f"{where}: malformed trailer entry (version {version} entries have {width} elements)")
        typ, slen, rlen, codec = obj[:4]
        if offset + slen > trailer_at:
            raise CorruptError(f"{where}: trailer names more bytes than the pack holds")
        objs.append((typ, offset, slen, rlen, codec, obj[4] if version >= 2 else None))
        offset += slen
    if offset != trailer_at:
        raise CorruptError(f"{where}: {trailer_at - offset} bytes between the last object and the trailer")
    return table, objs


def _slices(objs: list[_Obj]) -> list[list[_Obj]]:
    """`objs` cut into runs of about SLICE_BYTES of stored bytes."""
    slices: list[list[_Obj]] = [[]]
    size = 0
    for o in objs:
        if size >= SLICE_BYTES:
            slices.append([])
            size = 0
        slices[-1].append(o)
        size += o[2]
    return slices


def _fill(table: PackTable, objs: list[_Obj], results: list[list[Any] | str]) -> PackTable:
    for o, res in zip(objs, results, strict=True):
        if isinstance(res, str):
            table.errors[o[1]] = res
        else:
            table.rows.append(res)
    return table


def read_pack(data: bytes | memoryview, where: str, name: bytes | None = None, pool: ThreadPoolExecutor | None = None) -> PackTable:
    """Take a whole pack apart: every object is checked against the trailer (version 2)
    and decompressed and hashed to recover its id. Structural damage (header, trailer,
    lengths) raises CorruptError; a damaged object is listed in `errors`.

    `name`: the pack's id as its file name gives it. A header version this ckpt does not
    read is then damage unless the name still matches the bytes (a store whose config
    this ckpt reads holds no pack of a newer version; formats/v2.md, "Stores of both
    versions").

    `pool`: the objects are checked there, SLICE_BYTES of stored bytes a task, so that
    one pack keeps every core busy (the result is the same as without)."""
    if len(data) < framing.HEADER_SIZE + 4:
        raise CorruptError(f"{where}: truncated")
    intact = None if name is None else (lambda: hashlib.sha256(data).digest() == name)
    version = framing.check_header(data, framing.KIND_PACK, where, intact=intact)
    (tlen,) = _U32.unpack_from(data, len(data) - 4)
    start = len(data) - 4 - tlen
    if start < framing.HEADER_SIZE:
        raise CorruptError(f"{where}: trailer length {tlen} does not fit")
    table, objs = _layout(data, bytes(data[start : len(data) - 4]), start, where, version)
    if pool is None or len(objs) < 2:
        return _fill(table, objs, _check_objects(data, objs, where))
    futures = [pool.submit(_check_objects, data, s, where) for s in _slices(objs)]
    return _fill(table, objs, [r for fut in futures for r in fut.result()])


def read_pack_at(
    read: Callable[[int, int], bytes], size: int, where: str, name: bytes | None = None, pool: ThreadPoolExecutor | None = None
) -> PackTable:
    """`read_pack` of a pack of `size` bytes that is read piecewise, `read(offset,
    length)`: the same table and errors, without ever holding the pack. Only its header
    and trailer are read here; its objects are read by the tasks that check them
    (SLICE_BYTES a task on `pool`), READ_BYTES at a time, each run checked while it is
    still in the reading core's cache. A pack whose header version needs its whole
    bytes to be believed (`read_pack`'s `name`) is read whole for that."""
    if size < framing.HEADER_SIZE + 4:
        return read_pack(read(0, size), where, name, pool)
    header = read(0, framing.HEADER_SIZE)
    intact = None if name is None else (lambda: hashlib.sha256(read(0, size)).digest() == name)
    version = framing.check_header(header, framing.KIND_PACK, where, intact=intact)
    (tlen,) = _U32.unpack(read(size - 4, 4))
    start = size - 4 - tlen
    if start < framing.HEADER_SIZE:
        raise CorruptError(f"{where}: trailer length {tlen} does not fit")
    table, objs = _layout(header, read(start, tlen), start, where, version)
    if pool is None or len(objs) < 2:
        return _fill(table, objs, _read_and_check(read, objs, where))
    futures = [pool.submit(_read_and_check, read, s, where) for s in _slices(objs)]
    try:
        return _fill(table, objs, [r for fut in futures for r in fut.result()])
    finally:
        for fut in futures:
            fut.cancel()


def read_pack_table(data: bytes | memoryview, where: str, name: bytes | None = None) -> list[Any]:
    """The entries of a whole pack file, rebuilt from its trailer: each object is
    decompressed and hashed to recover its id. Returns [[id, type, offset, stored_len,
    raw_len, codec], ...], the rows an index holds; a damaged object is CorruptError."""
    table = read_pack(data, where, name)
    if table.errors:
        raise CorruptError(next(iter(table.errors.values())))
    return table.rows


def pack_version(backend: Backend, pack_id: bytes) -> int:
    """The format version in a pack's header (its first bytes only are read)."""
    path = pack_path(pack_id)
    return framing.check_header(backend.read_range(path, 0, framing.HEADER_SIZE), framing.KIND_PACK, path)


def stored_bytes(backend: Backend, pack_id: bytes) -> int | None:
    """The bytes a pack's objects take, between its header and its trailer (whose length
    is the pack's last four bytes), read without reading the pack; None when the pack
    cannot be read."""
    path = pack_path(pack_id)
    try:
        size = backend.size(path)
        tlen = int(_U32.unpack(backend.read_range(path, size - 4, 4))[0])
    except (CkptError, OSError, struct.error):
        return None
    return size - framing.HEADER_SIZE - 4 - tlen


def check_pack_data(
    data: bytes | memoryview,
    hexname: str,
    path: str,
    entries: Iterable[tuple[bytes, IndexEntry]],
    pool: ThreadPoolExecutor | None = None,
) -> tuple[str | None, dict[bytes, str]]:
    """`ckpt verify --read-data` of one whole pack named `hexname`: (what is wrong with
    the pack as a file, or None; object id -> what is wrong with it) for the objects
    `entries` say it holds. `pool`: where a version-2 pack's objects are checked, a
    slice at a time (read_pack)."""
    damaged = None
    is_v2 = data[:8] == framing.MAGIC_PREFIX + framing.KIND_PACK and int.from_bytes(data[8:10], "big") >= 2
    if is_v2:
        try:
            table = read_pack(data, path, bytes.fromhex(hexname), pool)
        except CkptError as exc:
            damaged = exc.message  # the objects are checked one by one below
        else:
            return _check_v2(table, hexname, entries)
    elif hashlib.sha256(data).hexdigest() != hexname:
        damaged = "content does not match its name (some byte of the pack is damaged)"
        pid = bytes.fromhex(hexname)
        for check in (
            lambda: read_pack_table(data, path, pid),
            lambda: framing.check_header(data, framing.KIND_PACK, path, intact=lambda: False),
        ):
            try:
                check()
            except CkptError as exc:
                damaged += f"; {exc.message}"
    found: dict[bytes, str] = {}
    for oid, entry in entries:
        stored = data[entry.offset : entry.offset + entry.stored_len]
        where = f"object {oid.hex()[:12]} in pack {hexname[:12]}"
        try:
            if len(stored) != entry.stored_len:
                raise CorruptError(f"{where}: pack is truncated")
            raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
            if hashlib.sha256(raw).digest() != oid:
                raise CorruptError(f"{where}: content does not match its hash")
        except CkptError as exc:
            found[oid] = exc.message
    return damaged, found


def check_pack_at(
    read: Callable[[int, int], bytes],
    size: int,
    hexname: str,
    path: str,
    entries: Iterable[tuple[bytes, IndexEntry]],
    pool: ThreadPoolExecutor | None = None,
) -> tuple[str | None, dict[bytes, str]]:
    """`check_pack_data` of a pack of `size` bytes read piecewise, `read(offset, length)`:
    the same result. A version-2 pack whose header and trailer hold is never held whole
    (`read_pack_at`: each byte is read once, by the task that checks it); a version-1
    pack (named by the hash of every byte) or one whose structure is damaged (its
    objects are then checked one by one) is read whole and given to check_pack_data."""
    head = read(0, min(size, framing.HEADER_SIZE))
    if head[:8] == framing.MAGIC_PREFIX + framing.KIND_PACK and int.from_bytes(head[8:10], "big") >= 2:
        try:
            table = read_pack_at(read, size, path, bytes.fromhex(hexname), pool)
        except CkptError:
            pass  # check_pack_data says what is wrong, and checks each object
        else:
            return _check_v2(table, hexname, entries)
    return check_pack_data(read(0, size), hexname, path, entries, pool)


def _check_v2(table: PackTable, hexname: str, entries: Iterable[tuple[bytes, IndexEntry]]) -> tuple[str | None, dict[bytes, str]]:
    """Version 2: the id covers header, object ids and trailer; the trailer's checks
    cover the stored bytes (formats/v2.md, "Verification")."""
    found: dict[bytes, str] = {}
    damaged = None
    if table.errors:
        damaged = f"{len(table.errors)} damaged object(s); first: {next(iter(table.errors.values()))}"
    elif (table.pack_id() or b"").hex() != hexname:
        damaged = "content does not match its name (its header, trailer or an object is damaged)"
    rows = {r[2]: r for r in table.rows}
    for oid, entry in entries:
        row = rows.get(entry.offset)
        if entry.offset in table.errors:
            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: {table.errors[entry.offset]}"
        elif row is None or row[3] != entry.stored_len or row[5] != entry.codec or row[4] != entry.raw_len:
            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: the index entry does not match the pack's trailer"
        elif row[0] != oid:
            found[oid] = f"object {oid.hex()[:12]} in pack {hexname[:12]}: content does not match its hash"
    return damaged, found
