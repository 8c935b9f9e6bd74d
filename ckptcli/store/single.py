"""The single-file form of one checkpoint (`ckpt export` / `ckpt import`).

Layout (formats/v1.md "Checkpoint files")::

    0     12  header       b"\\x89CKPFILE", u16 version, u16 reserved
    12     4  manifest_len u32 big-endian
    16     m  manifest     the manifest file, byte for byte (its SHA-256 is the id)
    16+m   …  objects      stored objects back to back, in ascending id order
    …      t  table        a PTAB record: [[id, type, offset, stored_len, raw_len, codec], …]
    …      4  table_len    u32 big-endian
    …     32  checksum     SHA-256 of every byte before it

Objects are copied exactly as stored, never recompressed, so export -> import ->
export gives the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import IO, Any

from ckptcli.errors import CorruptError, InvalidInputError, NotFoundError, StoreIOError
from ckptcli.format import framing, limits
from ckptcli.format.manifest import Manifest
from ckptcli.store.repository import IndexEntry, parse_entry_rows

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
) -> None:
    """Write one checkpoint file. `objects`: (id, type, codec, stored bytes, raw_len), any order."""
    h = hashlib.sha256()

    def w(data: bytes) -> None:
        out.write(data)
        h.update(data)

    w(framing.encode_header(framing.KIND_FILE))
    w(_U32.pack(len(manifest_bytes)))
    w(manifest_bytes)
    offset = framing.HEADER_SIZE + 4 + len(manifest_bytes)
    rows: list[list[Any]] = []
    for oid, typ, codec, stored, raw_len in sorted(objects, key=lambda o: o[0]):
        w(stored)
        rows.append([oid, typ, offset, len(stored), raw_len, codec])
        offset += len(stored)
    table = framing.encode_record(framing.KIND_PACK_TABLE, {"entries": rows})
    w(table)
    w(_U32.pack(len(table)))
    out.write(h.digest())


class CheckpointFile:
    """A checkpoint file opened for reading; an ObjectSource like a store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        self.fd = -1
        try:
            self.fd = os.open(path, os.O_RDONLY)
            self.size = os.fstat(self.fd).st_size
        except FileNotFoundError:
            raise NotFoundError(f"{path} does not exist") from None
        except OSError as exc:
            raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
        where = str(path)
        head = self._read(0, framing.HEADER_SIZE + 4)
        framing.check_header(head, framing.KIND_FILE, where, outer=True)
        if len(head) < framing.HEADER_SIZE + 4 or self.size < framing.HEADER_SIZE + 4 + TRAILER:
            raise CorruptError(f"{where}: truncated ({self.size} bytes)", hint="the file was cut short; export it again")
        (mlen,) = _U32.unpack_from(head, framing.HEADER_SIZE)
        if mlen > limits.MAX_RECORD_SIZE or framing.HEADER_SIZE + 4 + mlen + TRAILER > self.size:
            raise CorruptError(f"{where}: manifest length {mlen} does not fit in a file of {self.size} bytes", hint="the file is truncated or damaged")
        self.manifest_bytes = self._read(framing.HEADER_SIZE + 4, mlen)
        self.id = hashlib.sha256(self.manifest_bytes).digest()
        self._manifest = Manifest.decode(self.manifest_bytes, f"{where} (manifest)")
        (tlen,) = _U32.unpack_from(self._read(self.size - TRAILER, 4), 0)
        objects_start = framing.HEADER_SIZE + 4 + mlen
        table_start = self.size - TRAILER - tlen
        if tlen > limits.MAX_RECORD_SIZE or table_start < objects_start:
            raise CorruptError(f"{where}: object table length {tlen} does not fit", hint="the file is truncated or damaged")
        _v, body = framing.decode_record(self._read(table_start, tlen), framing.KIND_PACK_TABLE, f"{where} (object table)")
        self.entries: dict[bytes, IndexEntry] = {}
        for oid, entry in parse_entry_rows(body.get("entries"), b"", f"{where} (object table)"):
            if entry.offset < objects_start or entry.offset + entry.stored_len > table_start:
                raise CorruptError(f"{where}: object {oid.hex()[:12]} lies outside the object region")
            self.entries[oid] = entry
        self.objects_start = objects_start
        self.table_start = table_start

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
        entry, stored = self.read_stored(oid)
        where = f"{self.path}: object {oid.hex()[:12]}"
        raw = framing.decompress(entry.codec, stored, entry.raw_len, limits.MAX_OBJECT_SIZE, where)
        if hashlib.sha256(raw).digest() != oid:
            raise CorruptError(f"{where}: content does not match its hash (the file is damaged)")
        return raw

    def check_whole_file(self) -> str | None:
        """Re-hash the file; returns an error message, or None when the checksum holds."""
        h = hashlib.sha256()
        remaining = self.size - 32
        offset = 0
        while remaining > 0:
            piece = self._read(offset, min(remaining, 1 << 22))
            if not piece:
                break
            h.update(piece)
            offset += len(piece)
            remaining -= len(piece)
        if self._read(self.size - 32, 32) != h.digest():
            return f"{self.path}: file checksum mismatch (some byte of the file is damaged)"
        return None


def check_output_path(path: Path) -> None:
    if path.exists() and path.is_dir():
        raise InvalidInputError(f"{path} is a directory", hint="give a file name, e.g. -o agent.ckpt")
