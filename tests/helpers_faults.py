"""Helpers for tests/test_crash_safety.py and tests/test_hostile_input.py.

* Running the real CLI in a subprocess (`ckpt_argv`), optionally under a memory cap
  (`ckpt_argv(mem_limit=...)`), several at once (`run_parallel`).
* A fault hook (`FAULT_WRAPPER`): the real CLI run in a process that SIGKILLs itself at
  a precise point of the store's write order, chosen by the CKPT_FAULT environment
  variable, without touching library code (it wraps library functions before the
  command runs). It can also trace those points (CKPT_FAULT_TRACE=file).
* Checkpoint files and record files taken apart and put back together byte by byte,
  written from the documented layouts (ckptcli/store/single.py, ckptcli/format/framing.py)
  rather than with the library's writer, so a test can change exactly one thing.
* Directory-tree snapshots, to show that nothing was written where it must not be.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import xxhash
import zstandard

# -- running the CLI ------------------------------------------------------------------------

_ENTRY = "import sys; from ckptcli.cli import entry; entry()"
_LIMITED_ENTRY = "import resource; resource.setrlimit(resource.RLIMIT_AS, ({n}, {n})); import sys; from ckptcli.cli import entry; entry()"


def ckpt_argv(*args: str | os.PathLike[str], mem_limit: int | None = None) -> list[str]:
    """argv that runs the real `ckpt` command (the console script's entry point) with `args`.

    `mem_limit` caps the process's address space (RLIMIT_AS, set in the child before
    ckptcli is imported), so an unbounded allocation fails instead of succeeding slowly.
    """
    code = _ENTRY if mem_limit is None else _LIMITED_ENTRY.format(n=int(mem_limit))
    return [sys.executable, "-c", code, *[str(a) for a in args]]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env["NO_COLOR"] = "1"
    env.update(extra or {})
    return env


def run_cli(
    *args: str | os.PathLike[str],
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    mem_limit: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ckpt_argv(*args, mem_limit=mem_limit), input=input, capture_output=True, env=child_env(env), cwd=cwd, timeout=timeout, check=False
    )


@dataclass
class Cmd:
    args: Sequence[str | os.PathLike[str]]
    env: dict[str, str] | None = None
    input: bytes | None = None
    cwd: Path | None = None
    mem_limit: int | None = None
    timeout: float = 120


def run_parallel(cmds: Sequence[Cmd], workers: int = 4) -> list[subprocess.CompletedProcess[bytes]]:
    """Run several CLI commands at once (they only read); results in the same order."""

    def one(c: Cmd) -> subprocess.CompletedProcess[bytes]:
        return run_cli(*c.args, env=c.env, input=c.input, cwd=c.cwd, timeout=c.timeout, mem_limit=c.mem_limit)

    if len(cmds) <= 1:
        return [one(c) for c in cmds]
    with ThreadPoolExecutor(max_workers=min(workers, len(cmds))) as ex:
        return list(ex.map(one, cmds))


def describe(r: subprocess.CompletedProcess[bytes]) -> str:
    return (
        f"exit {r.returncode}\n"
        f"--- stdout ---\n{r.stdout.decode(errors='replace')[:2000]}\n"
        f"--- stderr ---\n{r.stderr.decode(errors='replace')[:4000]}"
    )


# -- the fault hook ---------------------------------------------------------------------------------

#: Runs `ckpt ARGS...` (as `python -c FAULT_WRAPPER ARGS...`) with hooks around the store's
#: write points. CKPT_FAULT="<point>:<n>:<before|after>" SIGKILLs the process just before
#: or just after the n-th call of <point>:
#:   commit_temp  LocalBackend.commit_temp (every pack, index, manifest and ref file is
#:                committed through it: temp written -> fsync -> rename -> dir fsync)
#:   replace      os.replace as called by the backend (the rename inside commit_temp; not
#:                the head hint's in cache/, which is no step of the write order)
#:   fsync        os.fsync as called by the backend
#:   pack_add     PackWriter.add (one object appended to the pack being written)
#:   delete       LocalBackend.delete (prune removing a manifest, index file, pack or temp)
#:   file_write   single.write_checkpoint_file (a checkpoint file's bytes, before its rename)
#: CKPT_FAULT_TRACE=<file> appends one line per call: "<point> <detail>".
FAULT_WRAPPER = r"""
import os, signal, sys, types
_spec = os.environ.get("CKPT_FAULT", "")
_trace_path = os.environ.get("CKPT_FAULT_TRACE", "")
_target, _n, _when = (_spec.split(":") + ["", "0", ""])[:3] if _spec else ("", "0", "")
_n = int(_n)
_counts = {}
import ckptcli.store.backend as _backend
import ckptcli.store.repository as _repo

def _kill_if(point, phase):
    if point == _target and phase == _when and _counts.get(point) == _n:
        os.kill(os.getpid(), signal.SIGKILL)

def _hook(point, fn, detail, skip=lambda a: False):
    def wrapper(*args, **kwargs):
        if skip(args):
            return fn(*args, **kwargs)
        _counts[point] = _counts.get(point, 0) + 1
        if _trace_path:
            with open(_trace_path, "a") as fh:
                fh.write(f"{point} {detail(args)}\n")
        _kill_if(point, "before")
        result = fn(*args, **kwargs)
        _kill_if(point, "after")
        return result
    return wrapper

_backend.LocalBackend.commit_temp = _hook("commit_temp", _backend.LocalBackend.commit_temp, lambda a: a[3])
_repo.PackWriter.add = _hook("pack_add", _repo.PackWriter.add, lambda a: a[1].hex()[:12])
_backend.LocalBackend.delete = _hook("delete", _backend.LocalBackend.delete, lambda a: a[1])
import ckptcli.store.single as _single
_single.write_checkpoint_file = _hook("file_write", _single.write_checkpoint_file, lambda a: "")

class _Os(types.ModuleType):
    def __getattr__(self, name):
        return getattr(os, name)

_os = _Os("os")
# the head hint (cache/heads/..., written before the manifest) is a cache, not a step of
# the write order: its rename is neither counted nor traced
_os.replace = _hook("replace", os.replace, lambda a: str(a[1]), skip=lambda a: "/cache/" in str(a[1]))
_os.fsync = _hook("fsync", os.fsync, lambda a: "")
_backend.os = _os

from ckptcli.cli.app import run
sys.exit(run(sys.argv[1:]))
"""


def fault_argv(*args: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-c", FAULT_WRAPPER, *[str(a) for a in args]]


# -- checkpoint files and records, byte by byte ----------------------------------------------------

MAGIC_PREFIX = b"\x89CKP"
FILE_MAGIC = MAGIC_PREFIX + b"FILE"
HEADER = struct.Struct(">8sHH")  # magic, version, reserved
RECORD_HEAD = struct.Struct(">8sHBBII")  # magic, version, codec, reserved, stored_len, raw_len
U32 = struct.Struct(">I")
TRAILER = 4 + 32
CODEC_NONE = 0
CODEC_ZSTD = 1


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def make_record(
    kind: bytes,
    raw_body: bytes,
    *,
    version: int = 1,
    compress: bool = False,
    stored: bytes | None = None,
    codec: int | None = None,
    raw_len: int | None = None,
) -> bytes:
    """A record file (framing.py layout) with a correct checksum over whatever the header says.

    `stored`/`codec`/`raw_len` override what is written, to make records that lie.
    """
    if stored is None:
        stored, c = raw_body, CODEC_NONE
        if compress and len(raw_body) >= 64:  # the writer's rule: zstd only when strictly smaller
            packed = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(raw_body)
            if len(packed) < len(raw_body):
                stored, c = packed, CODEC_ZSTD
    else:
        c = CODEC_ZSTD
    head = RECORD_HEAD.pack(
        MAGIC_PREFIX + kind, version, c if codec is None else codec, 0, len(stored), len(raw_body) if raw_len is None else raw_len
    )
    out = head + stored
    return out + sha256(out)


@dataclass
class Record:
    kind: bytes
    version: int
    codec: int
    stored: bytes
    raw_len: int

    def body(self) -> bytes:
        if self.codec == CODEC_NONE:
            return self.stored
        return zstandard.ZstdDecompressor().decompress(self.stored, max_output_size=self.raw_len)

    def value(self) -> Any:
        return msgpack.unpackb(self.body(), raw=False, strict_map_key=False, ext_hook=_keep_ext)


def parse_record(data: bytes) -> Record:
    magic, version, codec, _res, stored_len, raw_len = RECORD_HEAD.unpack_from(data, 0)
    assert magic[:4] == MAGIC_PREFIX, magic
    stored = data[RECORD_HEAD.size : RECORD_HEAD.size + stored_len]
    assert len(data) == RECORD_HEAD.size + stored_len + 32
    assert sha256(data[: RECORD_HEAD.size + stored_len]) == data[RECORD_HEAD.size + stored_len :]
    return Record(magic[4:], version, codec, stored, raw_len)


def _keep_ext(code: int, data: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, data)


def packb(value: Any) -> bytes:
    out: bytes = msgpack.packb(value, use_bin_type=True)
    return out


@dataclass
class StoredObject:
    oid: bytes
    typ: int
    codec: int
    stored: bytes
    raw_len: int

    def content(self) -> bytes:
        if self.codec == CODEC_NONE:
            return self.stored
        return zstandard.ZstdDecompressor().decompress(self.stored, max_output_size=self.raw_len)


@dataclass
class FileParts:
    """A checkpoint file taken apart (single.py layout)."""

    version: int
    manifest: bytes
    objects: list[StoredObject] = field(default_factory=list)

    def obj(self, oid: bytes) -> StoredObject:
        for o in self.objects:
            if o.oid == oid:
                return o
        raise KeyError(oid.hex())

    def manifest_record(self) -> Record:
        return parse_record(self.manifest)


@dataclass
class Layout:
    """Where the regions of a checkpoint file start (byte offsets)."""

    manifest_start: int
    objects_start: int
    table_start: int
    trailer_start: int
    size: int


def stored_check(stored: bytes) -> int:
    """XXH3-64 of an object's stored bytes, as version-2 tables and trailers record it."""
    return xxhash.xxh3_64_intdigest(stored)


def file_checksum(data: bytes) -> bytes:
    """The trailing checksum a checkpoint file must end with (formats/v1.md, v2.md):
    version 1 covers every byte before it; version 2 every byte but the objects."""
    _magic, version, _reserved = HEADER.unpack_from(data, 0)
    if version == 1:
        return sha256(data[:-32])
    lay = file_layout(data)
    return sha256(data[: lay.objects_start] + data[lay.table_start : -32])


def parse_checkpoint_file(data: bytes) -> FileParts:
    magic, version, _reserved = HEADER.unpack_from(data, 0)
    assert magic == FILE_MAGIC, magic
    (mlen,) = U32.unpack_from(data, HEADER.size)
    manifest = data[HEADER.size + 4 : HEADER.size + 4 + mlen]
    assert file_checksum(data) == data[-32:], "file checksum"
    (tlen,) = U32.unpack_from(data, len(data) - TRAILER)
    table = parse_record(data[len(data) - TRAILER - tlen : len(data) - TRAILER])
    assert table.kind == b"PTAB"
    rows = table.value()["entries"]
    objects = []
    for oid, typ, off, slen, rlen, codec, *check in rows:
        stored = data[off : off + slen]
        assert check == ([] if version == 1 else [stored_check(stored)]), "object check"
        objects.append(StoredObject(oid, typ, codec, stored, rlen))
    return FileParts(version, manifest, objects)


def file_layout(data: bytes) -> Layout:
    (mlen,) = U32.unpack_from(data, HEADER.size)
    (tlen,) = U32.unpack_from(data, len(data) - TRAILER)
    objects_start = HEADER.size + 4 + mlen
    return Layout(HEADER.size + 4, objects_start, len(data) - TRAILER - tlen, len(data) - TRAILER, len(data))


def build_checkpoint_file(
    manifest: bytes,
    objects: list[StoredObject],
    *,
    version: int = 2,
    magic: bytes = FILE_MAGIC,
    rows_hook: Any = None,
    compress_table: bool = True,
) -> bytes:
    """A checkpoint file with a correct table and a correct trailing checksum.

    `rows_hook(rows)` may change the object table ([id, type, offset, stored_len,
    raw_len, codec] rows, and the stored bytes' check in version 2) before it is written.
    """
    head = HEADER.pack(magic, version, 0) + U32.pack(len(manifest)) + manifest
    offset = len(head)
    rows: list[list[Any]] = []
    region = bytearray()
    for o in sorted(objects, key=lambda o: o.oid):
        rows.append([o.oid, o.typ, offset, len(o.stored), o.raw_len, o.codec])
        if version >= 2:
            rows[-1].append(stored_check(o.stored))
        region += o.stored
        offset += len(o.stored)
    if rows_hook is not None:
        rows = rows_hook(rows)
    table = make_record(b"PTAB", packb({"entries": rows}), version=version, compress=compress_table)
    body = head + bytes(region) + table + U32.pack(len(table))
    return refresh_checksum(body + bytes(32))


def refresh_checksum(data: bytes) -> bytes:
    """Recompute a checkpoint file's trailing SHA-256 after its bytes were changed."""
    return data[:-32] + file_checksum(data)


# -- ext references inside encoded values ----------------------------------------------------------

EXT_REF = 2


def first_reference(ev: bytes) -> tuple[int, bytes]:
    """(ext code, object id) of the first reference inside an encoded value."""
    stack = [msgpack.unpackb(ev, raw=False, strict_map_key=False, ext_hook=_keep_ext)]
    while stack:
        x = stack.pop(0)
        if isinstance(x, msgpack.ExtType) and len(x.data) == 32:
            return x.code, x.data
        if isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    raise AssertionError("the encoded value holds no reference")


# -- zstd frames that lie about their size ----------------------------------------------------------


def zstd_stream_bomb(size: int) -> bytes:
    """A zstd frame of `size` zero bytes that does NOT record its content size."""
    co = zstandard.ZstdCompressor(level=3).compressobj()
    piece = b"\0" * (1 << 20)
    out = []
    left = size
    while left > 0:
        n = min(left, len(piece))
        out.append(co.compress(piece[:n]))
        left -= n
    out.append(co.flush())
    return b"".join(out)


def zstd_rle_frame(content_size: int, *, actual: int | None = None, byte: int = 0) -> bytes:
    """A hand-made zstd frame (RFC 8878) whose header records `content_size` and whose
    body is RLE blocks that produce `actual` bytes (default: `content_size`) of `byte`:
    four bytes per 128 KiB of output, so a gigabyte is 32 KB, built instantly.

    With `actual` different from `content_size` the frame lies about its size.
    """
    block_max = 128 * 1024
    # Frame_Header_Descriptor: 8-byte Frame_Content_Size (0b11 << 6), not single-segment;
    # Window_Descriptor: exponent 7, mantissa 0 -> a 128 KiB window.
    out = [b"\x28\xb5\x2f\xfd", bytes([0b11 << 6]), bytes([7 << 3]), struct.pack("<Q", content_size)]
    left = content_size if actual is None else actual
    sizes = []
    while left > 0:
        sizes.append(min(block_max, left))
        left -= sizes[-1]
    for i, n in enumerate(sizes or [0]):
        last = 1 if i == len(sizes or [0]) - 1 else 0
        out.append((last | (1 << 1) | (n << 3)).to_bytes(3, "little") + bytes([byte]))
    return b"".join(out)


# -- directory snapshots --------------------------------------------------------------------------


def tree_snapshot(root: Path, *, dir_mtimes: bool = True, skip: Sequence[str] = ()) -> dict[str, tuple[Any, ...]]:
    """Every entry under `root` (not following symlinks): relative path -> what it is.

    Files by content hash, size and mode; symlinks by target; directories by mode (and
    mtime, which changes when an entry is created or removed inside).
    """
    out: dict[str, tuple[Any, ...]] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if any(rel_dir == s or rel_dir.startswith(s + os.sep) for s in skip):
            dirnames[:] = []
            continue
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel in skip:
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns if dir_mtimes else 0)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(Path(p).read_bytes()).hexdigest(), st.st_size, stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    if dir_mtimes:
        out["."] = ("dir", stat.S_IMODE(os.lstat(root).st_mode), os.lstat(root).st_mtime_ns)
    return out


def blob_tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """What `ckpt restore --blobs` must reproduce of a captured tree: files (content,
    mode, mtime), symlinks (target) and directories (mode)."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", hashlib.sha256(Path(p).read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


# -- damaging a copy of a store ----------------------------------------------------------------------
def copy_store(src: Path, tmp_path: Path) -> Path:
    """A copy of the store at `src` as tmp_path/store, to damage."""
    import shutil

    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    return dst


def flip_byte(path: Path, offset: int) -> None:
    """Flip bits of the byte at `offset` (from the end when negative) of `path`."""
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))
