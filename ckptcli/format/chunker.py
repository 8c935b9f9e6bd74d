"""Content-defined chunking of byte strings and streams (FastCDC).

Boundaries depend only on the bytes since the previous boundary, so a stream can
be chunked window by window: the last piece of a window is carried into the
next one and re-chunked, which gives exactly the chunks of the whole stream
with memory bounded by the window size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

WINDOW = 8 * 1024 * 1024


def _cdc() -> Any:
    # Imported on first use: fastcdc pulls in click, which plain reads never need.
    from fastcdc.fastcdc_cy import fastcdc_cy

    return fastcdc_cy


def chunk_bytes(data: bytes, params: tuple[int, int, int]) -> list[bytes]:
    """Split `data` at content-defined boundaries."""
    mn, avg, mx = params
    view = memoryview(data)
    return [bytes(view[c.offset : c.offset + c.length]) for c in _cdc()(data, mn, avg, mx)]


def iter_chunks(stream: IO[bytes], params: tuple[int, int, int], window: int = WINDOW) -> Iterator[memoryview]:
    """Chunks of a stream, identical to chunk_bytes(stream.read()) but in bounded memory."""
    for pieces in iter_windows(stream, params, window):
        yield from pieces


def iter_windows(stream: IO[bytes], params: tuple[int, int, int], window: int = WINDOW) -> Iterator[list[memoryview]]:
    """The chunks of a stream, a window's worth (~`window` bytes) at a time.

    A chunk's boundary depends only on the bytes since the previous boundary, so the
    piece left at the end of a window (cut only because the window ended) is carried
    over and chunked again together with the start of the next window; everything
    after that first chunk is chunked in place. The chunks are zero-copy views of
    buffers that are never written again, valid for as long as a caller holds them.
    """
    mn, avg, mx = params
    window = max(window, 4 * mx)
    cdc = _cdc()
    carry = b""
    while True:
        data = _read(stream, window)
        eof = len(data) < window
        view = memoryview(data)
        out: list[memoryview] = []
        start = 0
        if carry:
            # The first chunk starts at the carry and is at most mx long; it cannot end
            # inside the carry, whose bytes held no boundary the first time round.
            head = carry + data[:mx]
            first = next(iter(cdc(head, mn, avg, mx))).length
            out.append(memoryview(head)[:first])
            start = first - len(carry)
        carry = b""
        pieces = [(c.offset, c.length) for c in cdc(view[start:], mn, avg, mx)] if start < len(view) else []
        if not eof and pieces:
            last_off, _ = pieces.pop()
            carry = bytes(view[start + last_off :])
        out.extend(view[start + off : start + off + length] for off, length in pieces)
        if out:
            yield out
        if eof:
            return


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
