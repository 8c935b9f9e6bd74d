"""The reader's fast way (reader.read_events: ijson's C item builder over the Diverter,
which scans each read of the file whole) gives what the careful way gives (ijson's parse
events one by one through the depth check, the Diverter string by string, as the reader
always read): the same events, the same positions (where the importer cuts its
checkpoints), the same errors; on histories whose escapes, quotes, long strings and
backslashes fall at and across the edges of the Diverter's reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

from ckptcli.adapters.temporal import reader
from ckptcli.adapters.temporal.longstr import LONG, READ, Diverter, LongString
from ckptcli.errors import CkptError
from tests.test_temporal import COMPLETE


def _outcome(events: Any, position: list[int]) -> tuple[list[Any], str | None]:
    """(seq, ts, name, event, position) of each event read, and the error that ended it."""
    out: list[Any] = []
    try:
        for ev in events:
            raw = json.dumps(ev.raw, default=lambda o: [o.start, o.end, o.chars, o.head, o.tail] if isinstance(o, LongString) else None)
            out.append((ev.seq, ev.ts, ev.name, raw, position[0]))
    except CkptError as exc:
        return out, f"{type(exc).__name__}: {exc.message} ({exc.hint})"
    return out, None


def _careful(path: Path, divert: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], str | None]:
    """The reading as it was: the careful way, each read scanned string by string."""
    with monkeypatch.context() as m:
        m.setattr(Diverter, "_fast", lambda self: False)
        position = [0]
        with path.open("rb") as f:
            return _outcome(reader._read_carefully(f, str(path), None, 0, position, divert, 0, 0), position)


def _histories(tmp_path: Path) -> list[Path]:
    from ckptcli.adapters.temporal.synth import synthesize

    base = tmp_path / "base.json"
    synthesize(COMPLETE, 300, base, result_bytes=2_000)
    raw = base.read_bytes()
    assert len(raw) > 3 * READ + 8_000
    out = []

    def put(name: str, at: int, text: bytes) -> None:
        """`text` as a field of the event that holds file offset `at` (before its eventId)."""
        j = raw.index(b'"eventId"', at)
        (tmp_path / name).write_bytes(raw[:j] + text + raw[j:])
        out.append(tmp_path / name)

    for k in (1, 2):
        j = raw.index(b'"eventId"', k * READ - 3_000)
        for delta in (-1, 0) if k == 1 else (0, 1):
            pad = b"z" * ((k + 1) * READ + delta - j - len(b'"y":"'))  # the escape's backslash at that offset of the file
            for escape in (b'\\"', b"\\\\", b"\\n", b"\\u00e9"):
                put(f"esc{k}{delta}{escape[1]}.json", j - 1, b'"y":"' + pad + escape + b'zz",')
            put(f"quote{k}{delta}.json", j - 1, b'"y":"' + pad + b'",')
            put(f"long{k}{delta}.json", j - 1, b'"y":"' + pad + b"R" * LONG + (b"\\n" if delta % 2 else b"") + b'",')
    put("spans.json", READ, b'"y":"' + b'ab\\\\\\"[{99' * 30_000 + b'",')
    # a backslash outside a string (no JSON has one), then a number too long
    put("outside.json", 2 * READ, b'"y": \\"abc", "n": ' + b"9" * 500 + b",")
    put("deep.json", 2 * READ, b'"y": ' + b"[" * 300 + b"]" * 300 + b",")
    put("digits.json", 2 * READ, b'"y": "' + b"9" * 500 + b'",')
    put("number.json", 2 * READ, b'"y": ' + b"9" * 500 + b",")
    return out


def test_the_fast_way_reads_what_the_careful_way_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _histories(tmp_path):
        for divert in (True, False) if path.name.startswith("long") else (True,):  # passing over is all divert changes
            position = [0]
            fast = _outcome(reader.read_events(path, check=False, position=position, divert=divert), position)
            careful = _careful(path, divert, monkeypatch)
            assert fast == careful, (path.name, divert, fast[1], careful[1], len(fast[0]), len(careful[0]))
