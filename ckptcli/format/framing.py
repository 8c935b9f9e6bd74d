"""Magic numbers, record files, and bounded msgpack/zstd decoding.

A *record file* (manifest, index, ref, config, pack table) is::

    0   8  magic        b"\\x89CKP" + kind (4 ASCII bytes)
    8   2  version      container format version, u16 big-endian
    10  1  codec        0 = stored, 1 = zstd
    11  1  reserved     0
    12  4  stored_len   length of the body as stored, u32 big-endian
    16  4  raw_len      length of the body once decoded, u32 big-endian
    20  n  body         msgpack map (compressed when codec = 1)
    20+n 32 checksum    SHA-256 of bytes [0, 20+n)

Every byte of a record is covered by the checksum, so a flipped byte is found; a version
this ckpt does not read is believed only when the checksum holds (`check_header`).
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import xxhash
import zstandard

from ckptcli.errors import CorruptError, LimitExceededError, UnsupportedVersionError
from ckptcli.format import limits

MAGIC_PREFIX = b"\x89CKP"
KIND_MANIFEST = b"MANI"
KIND_INDEX = b"INDX"
KIND_REF = b"REF_"
KIND_CONFIG = b"CONF"
KIND_PACK = b"PACK"
KIND_PACK_TABLE = b"PTAB"  # the object table of a checkpoint file: full rows with ids
KIND_PACK_TRAILER = b"PTRL"  # the end of a pack: what each object is, ids left to the content
KIND_FILE = b"FILE"
KIND_CACHE = b"CACH"  # a reader's private cache (cache/catalog); not part of what readers must know
KIND_NAMES = {
    KIND_MANIFEST: "manifest",
    KIND_INDEX: "index",
    KIND_REF: "ref",
    KIND_CONFIG: "config",
    KIND_PACK: "pack",
    KIND_PACK_TABLE: "object table",
    KIND_PACK_TRAILER: "pack trailer",
    KIND_FILE: "checkpoint file",
    KIND_CACHE: "cache",
}

CODEC_NONE = 0
CODEC_ZSTD = 1

_RECORD_HEAD = struct.Struct(">8sHBBII")
RECORD_HEAD_SIZE = _RECORD_HEAD.size  # 20
CHECKSUM_SIZE = 32
HEADER = struct.Struct(">8sHH")  # magic, version, reserved: the 12-byte file header
HEADER_SIZE = HEADER.size


def sha256(data: bytes | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def stored_check(stored: bytes | memoryview) -> int:
    """XXH3-64 (seed 0) of an object's stored bytes: what a version-2 pack trailer or
    object table records per object (formats/v2.md). It covers the stored bytes against
    damage at ~15 GB/s; the object id (SHA-256 of the content) still covers the content."""
    return xxhash.xxh3_64_intdigest(stored)


def pack_id_v2(header: bytes, object_ids: list[bytes], trailer: bytes) -> bytes:
    """The id of a version-2 pack: SHA-256 of its header, the ids of its objects in pack
    order, its trailer record and the trailer's length (formats/v2.md, "Pack ids")."""
    h = hashlib.sha256(header)
    for oid in object_ids:
        h.update(oid)
    h.update(trailer)
    h.update(struct.pack(">I", len(trailer)))
    return h.digest()


_LOCAL = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    """One compressor per thread and level: a ZstdCompressor is not safe to share between
    threads, and making one per object costs more than compressing a small object."""
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_LOCAL, "compressors", None)
    if cache is None:
        cache = _LOCAL.compressors = {}
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return cache[level]


def _decompressor() -> zstandard.ZstdDecompressor:
    """One decompressor per thread, for the same reasons: making one costs ~15 times as much
    as decompressing a small object with it (each use resets it, also after an error)."""
    d: zstandard.ZstdDecompressor | None = getattr(_LOCAL, "decompressor", None)
    if d is None:
        d = _LOCAL.decompressor = zstandard.ZstdDecompressor()
    return d


def compress(raw: bytes | memoryview, level: int = limits.ZSTD_LEVEL) -> tuple[int, bytes | memoryview]:
    """Compress with zstd when that saves space; returns (codec, stored bytes)."""
    if len(raw) < 64:
        return CODEC_NONE, raw
    packed = _compressor(level).compress(raw)
    if len(packed) >= len(raw):
        return CODEC_NONE, raw
    return CODEC_ZSTD, packed


def decompress(codec: int, stored: bytes | memoryview, raw_len: int, limit: int, where: str) -> bytes:
    """Decode stored bytes, refusing anything larger than declared or than `limit`."""
    if raw_len > limit:
        raise LimitExceededError(
            f"{where}: declares {raw_len} bytes, more than the limit of {limit}",
            hint="the file is damaged or hostile; run `ckpt verify`",
        )
    if codec == CODEC_NONE:
        if len(stored) != raw_len:
            raise CorruptError(f"{where}: stored length {len(stored)} differs from declared {raw_len}")
        return bytes(stored)
    if codec != CODEC_ZSTD:
        raise CorruptError(f"{where}: unknown codec {codec}")
    data = bytes(stored)
    # python-zstandard trusts a frame's declared content size over max_output_size, so a
    # declared size must be exactly raw_len; a frame without one (writers always record
    # it, but the format allows it) is decoded with max_output_size as the bound.
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CorruptError(f"{where}: compressed data is damaged ({exc})") from None
    try:
        if declared == -1:
            raw = _decompressor().decompress(data, max_output_size=raw_len)
        else:
            if declared != raw_len:
                raise CorruptError(f"{where}: compressed frame declares {declared} bytes, the entry declares {raw_len}")
            dobj = _decompressor().decompressobj()
            raw = dobj.decompress(data)
            if dobj.unused_data:
                raise CorruptError(f"{where}: {len(dobj.unused_data)} bytes follow the compressed frame")
    except zstandard.ZstdError as exc:
        raise CorruptError(f"{where}: compressed data is damaged or larger than declared ({exc})") from None
    if len(raw) != raw_len:
        raise CorruptError(f"{where}: decompressed to {len(raw)} bytes, declared {raw_len}")
    return raw


def unpack(data: bytes, where: str, *, ext_hook: Any = None, pairs_hook: Any = None) -> Any:
    """msgpack-decode untrusted bytes with bounded sizes and nesting."""
    kwargs: dict[str, Any] = {
        "raw": False,
        "strict_map_key": False,
        "max_array_len": limits.MAX_CONTAINER_LEN,
        "max_map_len": limits.MAX_CONTAINER_LEN,
    }
    if ext_hook is not None:
        kwargs["ext_hook"] = ext_hook
    if pairs_hook is not None:
        kwargs["object_pairs_hook"] = pairs_hook
    try:
        return msgpack.unpackb(data, **kwargs)
    except msgpack.StackError:
        raise LimitExceededError(f"{where}: nesting is deeper than the decoder allows") from None
    except ValueError as exc:
        if "exceeds max" in str(exc):
            raise LimitExceededError(f"{where}: a container has more than {limits.MAX_CONTAINER_LEN} entries") from None
        raise CorruptError(f"{where}: malformed msgpack ({exc})") from None
    except (msgpack.ExtraData, msgpack.FormatError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptError(f"{where}: malformed msgpack ({exc})") from None


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def encode_header(kind: bytes, version: int = limits.FORMAT_VERSION) -> bytes:
    return HEADER.pack(MAGIC_PREFIX + kind, version, 0)


def check_header(
    data: bytes | memoryview, kind: bytes, where: str, *, outer: bool = False, intact: Callable[[], bool] | None = None
) -> int:
    """Check magic and version of a file header; returns the version.

    A wrong magic on a file the user named (`outer`) means "not a ckpt file" (exit 6);
    on a record inside a store or checkpoint file it means damage (exit 5).

    A version this ckpt does not read is trusted only when what covers it holds:
    `intact` (when given) says whether the file's checksum or name holds under the
    layouts this ckpt knows. When it does not, one flipped bit is the likelier story
    than a newer format, and the error says the file is damaged (exit 5) rather than
    asking for an upgrade (exit 6). Without `intact` (a bare header), the version is
    taken at its word.
    """
    if len(data) < HEADER_SIZE:
        raise CorruptError(f"{where}: truncated ({len(data)} bytes), not a complete ckpt {KIND_NAMES[kind]}")
    magic, version, _reserved = HEADER.unpack_from(data, 0)
    if magic[:4] != MAGIC_PREFIX:
        if not outer:
            raise CorruptError(f"{where}: damaged header (wrong magic {bytes(magic[:4])!r})", hint="run `ckpt verify`")
        raise UnsupportedVersionError(
            f"{where}: not a ckpt file (wrong magic {bytes(magic[:4])!r})",
            hint="check the path",
        )
    if magic[4:] != kind:
        got = KIND_NAMES.get(magic[4:], repr(bytes(magic[4:])))
        raise CorruptError(f"{where}: expected a ckpt {KIND_NAMES[kind]}, found a {got}")
    if version not in limits.READABLE_VERSIONS:
        readable = sorted(limits.READABLE_VERSIONS)
        if intact is not None and not intact():
            raise CorruptError(
                f"{where}: damaged: its header declares format version {version}, which this ckpt does not read "
                f"(it reads {readable[0]} to {readable[-1]}), and the checksum that covers the header does not hold",
                hint="run `ckpt verify` (if a much newer ckpt wrote this file in a layout this one cannot check, upgrade ckpt)",
            )
        if version > readable[-1]:
            raise UnsupportedVersionError(
                f"{where}: written in format version {version}, this ckpt reads up to version {readable[-1]}",
                hint="upgrade ckpt (pip install -U ckptcli)",
            )
        raise UnsupportedVersionError(f"{where}: format version {version} is not readable by this ckpt")
    return int(version)


def _record_checksum_holds(data: bytes) -> bool:
    """Whether a record's checksum holds under the record layout of versions 1 and 2."""
    if len(data) < RECORD_HEAD_SIZE + CHECKSUM_SIZE:
        return False
    stored_len = _RECORD_HEAD.unpack_from(data, 0)[4]
    body_end = RECORD_HEAD_SIZE + stored_len
    return len(data) == body_end + CHECKSUM_SIZE and sha256(data[:body_end]) == data[body_end:]


def encode_record(kind: bytes, body: dict[str, Any], version: int = limits.FORMAT_VERSION) -> bytes:
    raw = pack(body)
    codec, stored = compress(raw)
    head = _RECORD_HEAD.pack(MAGIC_PREFIX + kind, version, codec, 0, len(stored), len(raw))
    out = head + stored
    return out + sha256(out)


def decode_record(data: bytes, kind: bytes, where: str) -> tuple[int, dict[str, Any]]:
    """Check and decode a record file; returns (version, body map)."""
    check_header(data, kind, where, intact=lambda: _record_checksum_holds(data))
    if len(data) < RECORD_HEAD_SIZE + CHECKSUM_SIZE:
        raise CorruptError(f"{where}: truncated ({len(data)} bytes)")
    _magic, version, codec, _res, stored_len, raw_len = _RECORD_HEAD.unpack_from(data, 0)
    expected = RECORD_HEAD_SIZE + stored_len + CHECKSUM_SIZE
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise CorruptError(f"{where}: {what} ({len(data)} bytes, header says {expected})")
    body_end = RECORD_HEAD_SIZE + stored_len
    if sha256(data[:body_end]) != data[body_end:]:
        raise CorruptError(f"{where}: checksum mismatch (the file is damaged)")
    raw = decompress(codec, data[RECORD_HEAD_SIZE:body_end], raw_len, limits.MAX_RECORD_SIZE, where)
    body = unpack(raw, where)
    if not isinstance(body, dict):
        raise CorruptError(f"{where}: record body is not a map")
    return int(version), body
