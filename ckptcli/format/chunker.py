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


def iter_chunks(stream: IO[bytes], params: tuple[int, int, int], window: int = WINDOW) -> Iterator[bytes]:
    """Chunks of a stream, identical to chunk_bytes(stream.read()) but in bounded memory."""
    mn, avg, mx = params
    window = max(window, 4 * mx)
    cdc = _cdc()
    carry = b""
    while True:
        data = stream.read(window)
        eof = not data
        buf = carry + data if carry else data
        if not buf:
            return
        view = memoryview(buf)
        pieces = [(c.offset, c.length) for c in cdc(buf, mn, avg, mx)]
        if not eof and pieces:
            # The last piece may end only because the window ended: re-chunk it with more data.
            last_off, _ = pieces.pop()
            carry = bytes(view[last_off:])
        else:
            carry = b""
        for off, length in pieces:
            yield bytes(view[off : off + length])
        if eof:
            return
