"""The single-file form of one checkpoint (`ckpt export` / `ckpt import`): header, manifest
(byte for byte: its SHA-256 is the id), objects in ascending id order, their table and a
checksum. formats/v1.md ("Checkpoint files") and formats/v2.md specify the layout.

Invariant: objects are copied exactly as stored, never recompressed, so export -> import
-> export gives the same bytes."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from pathlib import Path
from typing import IO, Any

from ckptcli.errors import CkptError, CorruptError, DataError, InvalidInputError, NotFoundError, StoreIOError
from ckptcli.format import framing, limits
from ckptcli.format.manifest import Manifest
from ckptcli.store.index import IndexEntry, parse_entry_rows

_U32 = struct.Struct(">I")
TRAILER = 4 + 32


def is_checkpoint_file(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return head == framing.MAGIC_PREFIX + framing.KIND_FILE


def write_checkpoint_file(
    out: IO[bytes],
    manifest_bytes: bytes,
    objects: list[tuple[bytes, int, int, bytes, int]],
    version: int = limits.FORMAT_VERSION,
) -> int:
    """Write one checkpoint file; returns its size. `objects`: (id, type, codec, stored
    bytes, raw_len), any order."""
    h = hashlib.sha256()
    size = 0

    def w(data: bytes, covered: bool = True) -> None:
        nonlocal size
        out.write(data)
        size += len(data)
        if covered or version == 1:
            h.update(data)

    w(framing.encode_header(framing.KIND_FILE, version))
    w(_U32.pack(len(manifest_bytes)))
    w(manifest_bytes)
    offset = framing.HEADER_SIZE + 4 + len(manifest_bytes)
    rows: list[list[Any]] = []
    for oid, typ, codec, stored, raw_len in sorted(objects, key=lambda o: o[0]):
        w(stored, covered=False)
        row = [oid, typ, offset, len(stored), raw_len, codec]
        if version >= 2:
            row.append(framing.stored_check(stored))
        rows.append(row)
        offset += len(stored)
    table = framing.encode_record(framing.KIND_PACK_TABLE, {"entries": rows}, version)
    w(table)
    w(_U32.pack(len(table)))
    out.write(h.digest())
    return size + 32


def not_a_checkpoint_file(path: Path | str, mode: int) -> InvalidInputError:
    """The error for a path given as a checkpoint file that is a directory, a FIFO, a
    device... (`mode`: its st_mode): bad input, exit 4, as a directory given to `ckpt
    take` as its state document is."""
    if stat.S_ISDIR(mode):
        return InvalidInputError(
            f"{path} is a directory, not a checkpoint file",
            hint="give a .ckpt file (`ckpt export` writes one); a store's directory is --store DIR, and `ckpt copy` copies its checkpoints",
        )
    return InvalidInputError(f"{path} is not a regular file, so not a checkpoint file", hint="give a .ckpt file (`ckpt export` writes one)")


def add_damaged_hint(exc: CkptError, path: Path | str) -> None:
    """Give an error about a checkpoint file, found as it is opened (damage, or a size it
    declares past a limit), the what-to-do its decoder could not know: it says what is
    wrong where, and the remedy is the same whichever part of the file it is in. The
    decoders' own hints send the user to `ckpt verify`, which is no remedy for a file
    that does not open (verify of it says the same line); a hint that says more is kept.
    A message that already says the file is damaged (`path` aside) is not told so again."""
    if exc.hint is not None and "ckpt verify" not in exc.hint and exc.hint != "the file is truncated or damaged":
        return
    remedy = "take it again from its source (`ckpt export` it again)"
    if "upgrade ckpt" in (exc.hint or ""):
        # its header names a format version this ckpt does not read, and its checksum fails
        remedy += ", or upgrade ckpt if a much newer one wrote it"
    exc.hint = remedy if "damaged" in exc.message.replace(str(path), "") else f"the file is damaged; {remedy}"


class CheckpointFile:
    """A checkpoint file opened for reading; an ObjectSource like a store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        self.fd = -1
        try:
            # O_NONBLOCK: a FIFO named here is refused below, not waited on forever
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            st = os.fstat(self.fd)
        except FileNotFoundError:
            raise NotFoundError(f"{path} does not exist") from None
        except OSError as exc:
            raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            os.close(self.fd)
            self.fd = -1
            raise not_a_checkpoint_file(path, st.st_mode)
        self.size = st.st_size
        try:
            self._parse(path)
        except DataError as exc:
            # the decoders say what is wrong where; what to do about a damaged file is the
            # same whichever part it is in
            add_damaged_hint(exc, path)
            self.close()
            raise

    def _parse(self, path: Path) -> None:
        """Read the header, manifest and table (formats/v1.md and v2.md, "Checkpoint files")."""
        where = str(path)
        head = self._read(0, framing.HEADER_SIZE + 4)
        self.version = framing.check_header(head, framing.KIND_FILE, where, outer=True, intact=self._checksum_holds_any_layout)
        if len(head) < framing.HEADER_SIZE + 4 or self.size < framing.HEADER_SIZE + 4 + TRAILER:
            raise CorruptError(f"{where}: truncated ({self.size} bytes)", hint="the file was cut short; export it again")
        (mlen,) = _U32.unpack_from(head, framing.HEADER_SIZE)
        if mlen > limits.MAX_RECORD_SIZE or framing.HEADER_SIZE + 4 + mlen + TRAILER > self.size:
            raise CorruptError(
                f"{where}: manifest length {mlen} does not fit in a file of {self.size} bytes", hint="the file is truncated or damaged"
            )
        self.manifest_bytes = self._read(framing.HEADER_SIZE + 4, mlen)
        self.id = hashlib.sha256(self.manifest_bytes).digest()
        self._manifest = Manifest.decode(self.manifest_bytes, f"{where} (manifest)")
        (tlen,) = _U32.unpack_from(self._read(self.size - TRAILER, 4), 0)
        objects_start = framing.HEADER_SIZE + 4 + mlen
        table_start = self.size - TRAILER - tlen
        if tlen > limits.MAX_RECORD_SIZE or table_start < objects_start:
            raise CorruptError(f"{where}: object table length {tlen} does not fit", hint="the file is truncated or damaged")
        _v, body = framing.decode_record(self._read(table_start, tlen), framing.KIND_PACK_TABLE, f"{where} (object table)")
        rows = body.get("entries")
        self.checks: dict[bytes, int] = {}
        if self.version >= 2:
            rows = self._split_checks(rows, f"{where} (object table)")
        self.entries: dict[bytes, IndexEntry] = {}
        end = objects_start
        for oid, entry in parse_entry_rows(rows, b"", f"{where} (object table)"):
            if entry.offset < objects_start or entry.offset + entry.stored_len > table_start:
                raise CorruptError(f"{where}: object {oid.hex()[:12]} lies outside the object region")
            if self.version >= 2 and entry.offset != end:
                # version 2: the objects tile their region exactly, in table order, so
                # that the checks in the table cover every byte the checksum leaves out
                raise CorruptError(f"{where}: object {oid.hex()[:12]} is not where the previous one ends")
            end = entry.offset + entry.stored_len
            self.entries[oid] = entry
        if self.version >= 2 and end != table_start:
            raise CorruptError(f"{where}: {table_start - end} bytes between the last object and the table")
        self.objects_start = objects_start
        self.table_start = table_start
        self.table_len = tlen

    def _checksum_holds_any_layout(self) -> bool:
        """Whether the trailing checksum holds under the layout of version 1 (every byte
        before it) or version 2 (all but the objects); asked only of a file whose header
        declares a version this ckpt does not read, to tell damage from a newer writer."""
        if self.size < framing.HEADER_SIZE + 4 + TRAILER:
            return False
        checksum = self._read(self.size - 32, 32)
        (mlen,) = _U32.unpack_from(self._read(framing.HEADER_SIZE, 4), 0)
        (tlen,) = _U32.unpack_from(self._read(self.size - TRAILER, 4), 0)
        layouts = [[(0, self.size - 32)]]
        objects_start, table_start = framing.HEADER_SIZE + 4 + mlen, self.size - TRAILER - tlen
        if objects_start <= table_start:
            layouts.append([(0, objects_start), (table_start, self.size - 32)])
        return any(self._hash_regions(regions) == checksum for regions in layouts)

    def _hash_regions(self, regions: list[tuple[int, int]]) -> bytes:
        h = hashlib.sha256()
        for start, stop in regions:
            offset = start
            while offset < stop:
                piece = self._read(offset, min(stop - offset, 1 << 22))
                if not piece:
                    break
                h.update(piece)
                offset += len(piece)
        return h.digest()

    def _split_checks(self, rows: Any, where: str) -> list[Any]:
        """Version-2 rows end with the XXH3-64 of the stored bytes; keep it apart."""
        if not isinstance(rows, list):
            raise CorruptError(f"{where}: entry table is not a list")
        out = []
        prev = b""
        for row in rows:
            if not (isinstance(row, list) and len(row) == 7 and type(row[6]) is int and 0 <= row[6] < 1 << 64):
                raise CorruptError(f"{where}: malformed entry (version 2 rows have 7 elements, the last a u64 check)")
            oid = row[0]
            if isinstance(oid, bytes):
                if oid <= prev:
                    raise CorruptError(f"{where}: entries are not in ascending id order")
                prev = oid
                self.checks[oid] = row[6]
            out.append(row[:6])
        return out

    def _read(self, offset: int, length: int) -> bytes:
        try:
            return os.pread(self.fd, length, offset)
        except OSError as exc:
            raise StoreIOError(f"cannot read {self.path}: {exc.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()

    def manifest(self, cid: bytes | None = None) -> Manifest:
        if cid is not None and cid != self.id:
            raise NotFoundError(f"{self.path} holds checkpoint {self.id.hex()[:12]}, not {cid.hex()[:12]}")
        return self._manifest

    def resolve(self, ref: str) -> bytes:
        if ref in ("", "latest") or self.id.hex().startswith(ref.lower()):
            return self.id
        raise NotFoundError(f"{self.path} holds only checkpoint {self.id.hex()[:12]}", hint="a checkpoint file holds one checkpoint")

    def manifest_ids(self) -> list[bytes]:
        return [self.id]

    def read_stored(self, oid: bytes) -> tuple[IndexEntry, bytes]:
        entry = self.entries.get(oid)
        if entry is None:
            raise CorruptError(f"{self.path}: object {oid.hex()[:12]} is missing", hint="the file is incomplete; export it again")
        return entry, self._read(entry.offset, entry.stored_len)

    def get(self, oid: bytes) -> bytes:
        return self.read_checked(oid)[2]

    def read_checked(self, oid: bytes) -> tuple[IndexEntry, bytes, bytes]:
        """(table entry, stored bytes, content) of an object, its hash checked (as Store.read_checked)."""
        entry, stored = self.read_stored(oid)
        where = f"{self.path}: object {oid.hex()[:12]}"
        raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
        if hashlib.sha256(raw).digest() != oid:
            raise CorruptError(f"{where}: content does not match its hash (the file is damaged)")
        return entry, stored, raw

    def check_checksum(self, *, objects: bool = False) -> None:
        """Raise CorruptError unless the trailing checksum holds over the bytes it covers.

        Version 2 leaves the objects out of it (their checks and ids cover them), so this
        hashes only the header, the manifest and the table, which every reader reads
        anyway: every command that opens the file calls it, so that a flipped byte
        there (the header's reserved bytes, the checksum itself) is refused by `ckpt
        show` and `ckpt restore` as by `ckpt verify`, not passed over because nothing
        read depends on it. A version-1 checksum covers every byte, objects included:
        checked only with `objects` (a restore, which reads them all anyway); a reader
        that only displays relies on the record checksums and object hashes
        (formats/v1.md, "Checkpoint files")."""
        if self.version == 1 and not objects:
            return
        regions = [(0, self.size - 32)] if self.version == 1 else [(0, self.objects_start), (self.table_start, self.size - 32)]
        if self._read(self.size - 32, 32) != self._hash_regions(regions):
            raise CorruptError(
                f"{self.path}: file checksum mismatch (a byte of its header, manifest, table or checksum is damaged)",
                hint=f"`ckpt verify {self.path}` lists every problem; take the file again from its source (`ckpt export`)",
            )

    def check_whole_file(self) -> str | None:
        """Check every byte of the file against the checksum (and, in version 2, the
        objects against their checks); returns an error message, or None when all hold."""
        if self.version == 1:
            regions = [(0, self.size - 32)]
        else:
            regions = [(0, self.objects_start), (self.table_start, self.size - 32)]
        if self._read(self.size - 32, 32) != self._hash_regions(regions):
            return f"{self.path}: file checksum mismatch (some byte of the file is damaged)"
        for oid, entry in sorted(self.entries.items(), key=lambda kv: kv[1].offset):
            if self.version >= 2 and framing.stored_check(self._read(entry.offset, entry.stored_len)) != self.checks.get(oid):
                return f"{self.path}: object {oid.hex()[:12]} at offset {entry.offset} does not match its check (the file is damaged)"
        return None


def check_output_path(path: Path) -> None:
    if path.exists() and path.is_dir():
        raise InvalidInputError(f"{path} is a directory", hint="give a file name, e.g. -o agent.ckpt")
