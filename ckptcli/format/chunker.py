"""Content-defined chunking of byte strings and streams (FastCDC).

Two chunkers, named as a store's config names them (formats/v1.md, "Config and refs"):

- ``fastcdc``: the `fastcdc` package's FastCDC (2016); the chunker of every store made
  before the chunker could be chosen, kept for them. Its Cython loop holds the GIL
  while it scans a window.
- ``fastcdc2020``: the `pyfastcdc` package's FastCDC 2020 (normalized chunking level 1),
  about 1.7x faster, and it releases the GIL while it scans a chunk, so chunking runs
  beside the threads that hash and compress. New stores use it (`DEFAULT_CHUNKER`) with
  `PARAMS[DEFAULT_CHUNKER]`: its chunks average about avg + min (the paper's cut-point
  skipping), ~44 KiB with 16/32/256 KiB.

The two cut the same bytes at different places, so a store keeps the chunker it was
made with: data taken with one never shares chunks with data taken with the other
(docs/design.md, "Chunkers"). Boundaries are not part of the format: any reader reads
any store.

Boundaries depend only on the bytes since the previous boundary, so a stream can
be chunked window by window: the last piece of a window is carried into the
next one and re-chunked, which gives exactly the chunks of the whole stream
with memory bounded by the window size.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

WINDOW = 8 * 1024 * 1024

#: the chunker of stores made before there was a choice (and of a config that names none)
LEGACY_CHUNKER = "fastcdc"
#: the chunker `Store.init` records for a new store
DEFAULT_CHUNKER = "fastcdc2020"
CHUNKERS = (LEGACY_CHUNKER, DEFAULT_CHUNKER)
#: the (min, avg, max) a new store of each chunker records. fastcdc2020's chunks average
#: ~44 KiB with these (fastcdc's ~66 KiB with its own): on the big-state benchmark's
#: scattered 45 KB edits an incremental take adds 5.8 MiB with them, 6.3 MiB with
#: fastcdc's, and 9.1 MiB with fastcdc2020 tuned to fastcdc's average
PARAMS: dict[str, tuple[int, int, int]] = {
    LEGACY_CHUNKER: (16 * 1024, 64 * 1024, 256 * 1024),
    DEFAULT_CHUNKER: (16 * 1024, 32 * 1024, 256 * 1024),
}

#: (offset, length) of each chunk of a buffer
Cutter = Callable[[Any], Iterator[tuple[int, int]]]


def check_params(algorithm: str, params: tuple[int, int, int]) -> str | None:
    """What is wrong with chunking by `algorithm` with `params` (None: nothing)."""
    mn, avg, mx = params
    if algorithm not in CHUNKERS:
        return f"unknown chunker {algorithm!r} (this ckpt knows {', '.join(CHUNKERS)})"
    if not (256 <= mn <= avg <= mx <= 4 * 1024 * 1024):
        return f"impossible chunker sizes {params}"
    if algorithm == DEFAULT_CHUNKER and not (mn <= 1024 * 1024 and mx >= 1024):
        return f"chunker sizes {params} are outside what {algorithm} cuts"
    return None


@functools.lru_cache(maxsize=8)
def cutter(params: tuple[int, int, int], algorithm: str = LEGACY_CHUNKER) -> Cutter:
    """The function that cuts a buffer into (offset, length) chunks."""
    mn, avg, mx = params
    if algorithm == DEFAULT_CHUNKER:
        from pyfastcdc import FastCDC

        cdc = FastCDC(avg, min_size=mn, max_size=mx, normalized_chunking=1)

        def cut2020(buf: Any) -> Iterator[tuple[int, int]]:
            # safe on several threads at once: cut_buf keeps its position in the
            # iterator it returns; `cdc` holds only the read-only parameters
            for c in cdc.cut_buf(buf):
                yield c.offset, c.length

        return cut2020
    if algorithm != LEGACY_CHUNKER:
        raise ValueError(f"unknown chunker {algorithm!r}")
    # Imported on first use: fastcdc pulls in click, which plain reads never need.
    from fastcdc.fastcdc_cy import fastcdc_cy

    def cut2016(buf: Any) -> Iterator[tuple[int, int]]:
        for c in fastcdc_cy(buf, mn, avg, mx):
            yield c.offset, c.length

    return cut2016


def chunk_bytes(data: bytes, params: tuple[int, int, int], algorithm: str = LEGACY_CHUNKER) -> list[bytes]:
    """Split `data` at content-defined boundaries."""
    view = memoryview(data)
    return [bytes(view[off : off + length]) for off, length in cutter(params, algorithm)(data)]


def iter_chunks(
    stream: IO[bytes], params: tuple[int, int, int], window: int = WINDOW, algorithm: str = LEGACY_CHUNKER
) -> Iterator[memoryview]:
    """Chunks of a stream, identical to chunk_bytes(stream.read()) but in bounded memory."""
    for pieces in iter_windows(stream, params, window, algorithm):
        yield from pieces


def iter_windows(
    stream: IO[bytes],
    params: tuple[int, int, int],
    window: int = WINDOW,
    algorithm: str = LEGACY_CHUNKER,
    buffers: WindowBuffers | None = None,
) -> Iterator[list[memoryview]]:
    """The chunks of a stream, a window's worth (~`window` bytes) at a time.

    A chunk's boundary depends only on the bytes since the previous boundary, so the
    piece left at the end of a window (cut only because the window ended) is carried
    over and chunked again together with the start of the next window; everything
    after that first chunk is chunked in place. The chunks are zero-copy views of
    buffers that are never written again while a view of them is held, valid for as
    long as a caller holds them. `buffers`: where the windows are read into (a fresh
    buffer per window without).
    """
    mx = params[2]
    window = max(window, 4 * mx)
    cdc = cutter(params, algorithm)
    pool = buffers if buffers is not None and buffers.size == window else WindowBuffers(window, 0)
    carry = b""
    while True:
        view = pool.read(stream)
        eof = len(view) < window
        out: list[memoryview] = []
        start = 0
        if carry:
            # The first chunk starts at the carry and is at most mx long; it cannot end
            # inside the carry, whose bytes held no boundary the first time round.
            head = carry + bytes(view[:mx])
            first = next(iter(cdc(head)))[1]
            out.append(memoryview(head)[:first])
            start = first - len(carry)
        carry = b""
        pieces = list(cdc(view[start:])) if start < len(view) else []
        if not eof and pieces:
            last_off, _ = pieces.pop()
            carry = bytes(view[start + last_off :])
        out.extend(view[start + off : start + off + length] for off, length in pieces)
        del view
        if out:
            yield out
        if eof:
            return


class WindowBuffers:
    """Buffers of `size` bytes that windows are read into (iter_windows), each one read
    into again once nothing holds a view of it: the page faults of a fresh 8 MiB buffer
    per window cost more than the read itself. Up to `keep` buffers are kept (beyond
    that a window gets a buffer of its own), and shared by the threads of one take.

    A buffer is free when its only references are this pool's (CPython's reference
    count: every memoryview of it, however sliced, holds one through its exporter)."""

    def __init__(self, size: int, keep: int) -> None:
        self.size = size
        self.keep = keep
        self.bufs: list[bytearray] = []
        self.lock = threading.Lock()

    def _get(self) -> bytearray | None:
        """A free buffer; None when all `keep` are in use."""
        with self.lock:
            for buf in self.bufs:
                # references: the list, `buf` and getrefcount's argument
                if sys.getrefcount(buf) == 3:
                    return buf
            if len(self.bufs) >= self.keep:
                return None
            buf = bytearray(self.size)
            self.bufs.append(buf)
            return buf

    def read(self, stream: IO[bytes]) -> memoryview:
        """The next up to `size` bytes of `stream`, fewer only at its end (a pipe may
        return less at a time)."""
        buf = self._get()
        readinto = getattr(stream, "readinto", None)
        if buf is None or readinto is None:
            return memoryview(_read(stream, self.size))
        view = memoryview(buf)
        got = 0
        while got < self.size:
            n = readinto(view[got:])
            if not n:
                break
            got += n
        return view[:got]


def _read(stream: IO[bytes], n: int) -> bytes:
    """Up to n bytes; fewer only at the end of the stream (a pipe may return less)."""
    data = stream.read(n)
    if len(data) in (0, n):
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
