"""The digest cache: the SHA-256 of chunks a subject's takes hashed, by their BLAKE3.

A take of a big file that changed in a few places cuts it at the same boundaries as
before, except around the edits, so most of its chunks are chunks it stored last time.
Their SHA-256 (their object id) is what costs: ~230 MiB/s on a core without SHA
extensions, where BLAKE3 runs at ~2 GiB/s. So each chunk a take reads is hashed with
BLAKE3 first; when an earlier take recorded that BLAKE3 digest, the chunk's id is the
SHA-256 it recorded, else the chunk is hashed with SHA-256 as always.

Equal BLAKE3 digests mean equal bytes (a collision is as hard to find as one of
SHA-256), so the mapping is a fact about the bytes, the same for every store. The file
that keeps it is the user's own (ckptcli/store/digestcache.py: never in the store, where
whoever can write the store could plant a pair), and it is checked besides: the first
chunk a take finds in it, and one in VERIFY_EVERY after that at random, is hashed with
SHA-256 as well, and so is every chunk it names by an object the store did not have when
the take began; any difference abandons the cache (`DigestMismatchError`).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import secrets
import struct
import threading
from collections.abc import Callable, Iterable

from blake3 import blake3

from ckptcli.errors import CorruptError

__all__ = ["MAX_ENTRIES", "MIN_KEEP", "VERIFY_EVERY", "DigestMismatchError", "Digests", "decode_file", "encode_file"]

_MAGIC = b"CKPTDGS1"
_HEAD = struct.Struct("<8sI")  # magic, number of entries
_ENTRY = 64  # BLAKE3 (32 bytes), SHA-256 (32 bytes)
_SUM = 16  # BLAKE3 of everything before it, first 16 bytes: a torn or damaged file is ignored

#: entries a cache file holds at most (32 MiB; ~22 GiB of files at the default chunk size;
#: ~90 MiB of memory while a take reads it and records as many again)
MAX_ENTRIES = 1 << 19
#: entries kept from earlier takes whatever the size of this one's files
MIN_KEEP = 1 << 16
#: of the chunks found in the cache, about one in this many is hashed with SHA-256 too
VERIFY_EVERY = 64
_VERIFY_FRACTION = 1 / VERIFY_EVERY

HEAD_SIZE = _HEAD.size


class DigestMismatchError(CorruptError):
    """A chunk's SHA-256 is not the one the digest cache recorded for its BLAKE3."""


class Digests:
    """The BLAKE3 -> SHA-256 pairs of one take: those known from earlier takes (from
    `loader`, called once, on the first chunk), and those of every chunk this take
    hashed (`seen`, in the order first hashed). `id_of` is called from the chunk
    pool's threads at once; past the first load every step of it is one C call under
    the GIL (dict get and set, next() of a counter)."""

    def __init__(self, known: dict[bytes, bytes] | None = None, loader: Callable[[], dict[bytes, bytes]] | None = None) -> None:
        self._known = known
        self._loader = loader
        self._lock = threading.Lock()
        # which hits are checked: unknown to whoever wrote the cache (seeded from the
        # system's randomness), without a system call per chunk
        self._sample = random.Random(secrets.randbits(64)).random
        #: the length the store held for an object before the take (None: not one it
        #: had): a chunk the cache names by an object of another length is a lie, caught
        #: at no cost, and one it names by an object the store did not have is hashed
        #: (unset: every hit is hashed, so the cache saves nothing)
        self.length_of: Callable[[bytes], int | None] | None = None
        self.seen: dict[bytes, bytes] = {}
        self._hits = itertools.count(1)
        self._checked = itertools.count(1)
        #: chunks found in `known` (after the take: how many SHA-256 runs it saved)
        self.hits = 0
        #: of them, those hashed with SHA-256 too
        self.checked = 0

    @property
    def known(self) -> dict[bytes, bytes]:
        known = self._known
        if known is None:
            with self._lock:
                if self._known is None:
                    self._known = self._loader() if self._loader is not None else {}
                known = self._known
        return known

    def id_of(self, piece: bytes | memoryview) -> bytes:
        """The SHA-256 of `piece`, from the cache when its BLAKE3 is there. An id taken on
        the cache's word is always one of an object the store had when the take began
        (`length_of`), of the chunk's length: the cache never puts bytes into the store."""
        key = blake3(piece).digest()
        oid = self.known.get(key)
        if oid is None:
            oid = hashlib.sha256(piece).digest()
        else:
            hit = self.hits = next(self._hits)  # (this thread's own count: another may set `hits` meanwhile)
            n = self.length_of(oid) if self.length_of is not None else None
            if n is not None and n != len(piece):
                raise DigestMismatchError(f"the digest cache names a chunk of {len(piece)} bytes by an object of {n}")
            # an object the store did not have before this take (not in the store, or stored
            # earlier in this take) is never taken on the cache's word; the others are
            # checked on the first hit and at random after it
            if n is None or hit == 1 or self._sample() < _VERIFY_FRACTION:
                self.checked = next(self._checked)
                if hashlib.sha256(piece).digest() != oid:
                    raise DigestMismatchError("a chunk's SHA-256 is not the one the digest cache recorded for it")
        self.seen[key] = oid
        return oid

    def pairs(self, keep: int) -> list[tuple[bytes, bytes]]:
        """What to write back: this take's pairs, then the earlier ones it did not see
        (most recent first, as the file keeps them), `keep` at most in all."""
        out = list(self.seen.items())[:keep]
        if len(out) < keep:
            more = ((k, v) for k, v in self.known.items() if k not in self.seen)
            out.extend(itertools.islice(more, keep - len(out)))
        return out


def encode_file(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A cache file: head, the pairs, and the sum of all that."""
    pairs = list(pairs)
    body = b"".join(k + v for k, v in pairs)
    data = _HEAD.pack(_MAGIC, len(pairs)) + body
    return data + blake3(data).digest()[:_SUM]


def file_size(head: bytes) -> int | None:
    """The whole size of a cache file from its first HEAD_SIZE bytes; None when they are
    not a cache file's head or declare more than MAX_ENTRIES entries (never read whole)."""
    if len(head) < HEAD_SIZE:
        return None
    magic, count = _HEAD.unpack_from(head)
    if magic != _MAGIC or count > MAX_ENTRIES:
        return None
    return int(HEAD_SIZE + count * _ENTRY + _SUM)


def decode_file(data: bytes) -> dict[bytes, bytes] | None:
    """The pairs of a cache file, in its order; None when it is not one whole and sound."""
    size = file_size(data[:HEAD_SIZE])
    if size is None or len(data) != size or blake3(data[:-_SUM]).digest()[:_SUM] != data[-_SUM:]:
        return None
    view = memoryview(data)[HEAD_SIZE:-_SUM]
    return {bytes(view[i : i + 32]): bytes(view[i + 32 : i + _ENTRY]) for i in range(0, len(view), _ENTRY)}
