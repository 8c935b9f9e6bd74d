"""The reader's fast way (reader.read_events: ijson's C item builder over the Diverter,
which scans each read of the file whole) gives what the careful way gives (ijson's parse
events one by one through the depth check, the Diverter string by string, as the reader
always read): the same events, the same positions (where the importer cuts its
checkpoints), the same errors; on histories whose escapes, quotes, long strings and
backslashes fall at and across the edges of the Diverter's reads.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

from ckptcli.adapters.temporal import reader
from ckptcli.adapters.temporal.longstr import LONG, READ, Diverter, LongString
from ckptcli.errors import CkptError
from tests.stress import count
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
    # a lone surrogate (refused), a pair (read), in a short and a long string
    put("surrogate.json", 2 * READ, b'"y": "a\\ud800b",')
    put("pair.json", 2 * READ, b'"y": ["a\\ud83d\\ude00b", "\\\\ud800"],')
    put("surrogate-long.json", READ, b'"y":"' + b"R" * LONG + b'\\udc00",')
    put("overflow.json", 2 * READ, b'"y": 1e999999999,')
    put("utf8.json", 2 * READ, b'"y": "a\xffb",')
    put("dots.json", 2 * READ, b'"events.item": {"item": [1]}, "a.b": 2,')
    # the top level: only one "events" list is read as the events
    body = raw[raw.index(b"[") : raw.rindex(b"]") + 1]
    for name, text in [
        ("before.json", b'{"meta": {"a": [1]}, "events": ' + body + b"}"),
        ("after.json", b'{"events": ' + body + b', "meta": "x"}'),
        ("dotkey.json", b'{"events": ' + body + b', "events.item": {"a": 1}}'),
        ("twice.json", b'{"events": ' + body + b', "events": []}'),
        ("map.json", b'{"events": {"item": ' + body + b"}}"),
        ("spaces.json", b' \n{ "events" :\n' + body + b" \n}\n \n"),
        ("bom.json", b'\xef\xbb\xbf{"events": ' + body + b"}"),  # a UTF-8 byte order mark
        ("bom-spaces.json", b'\xef\xbb\xbf \n{"events": ' + body + b"}"),
        ("garbage.json", b'{"events": ' + body + b'} "x"'),
        ("extra.json", b'{"events": ' + body + b"}}"),
        ("split.json", b'{"events": ' + body + b" " * (-(len(body) + 11) % READ) + b"}"),  # `]` and `}` in two reads
    ]:
        (tmp_path / name).write_bytes(text)
        out.append(tmp_path / name)
    return out


def test_the_fast_way_reads_what_the_careful_way_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _histories(tmp_path):
        for divert in (True, False) if path.name.startswith("long") else (True,):  # passing over is all divert changes
            position = [0]
            fast = _outcome(reader.read_events(path, check=False, position=position, divert=divert), position)
            careful = _careful(path, divert, monkeypatch)
            assert fast == careful, (path.name, divert, fast[1], careful[1], len(fast[0]), len(careful[0]))


# -- random JSON at random edges of the Diverter's reads ----------------------------------
#: strings with what matters to a JSON scanner: quotes, backslashes, brackets, controls, UTF-8
_TEXT = st.text(alphabet=st.sampled_from('"\\[]{},:\n\t\x01 az9é€😀'), max_size=40)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


#: what a JSON string holds: escapes (of a quote and a backslash too, of surrogates: alone
#: or paired), brackets, UTF-8
_IN_STRING = [
    *(b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\/"),
    *(b"a", b"z ", b"[", b"{", b"}", b"]", b"\xc3\xa9", b"\xf0\x9f\x98\x80"),
]


@functools.cache
def _base(root: str) -> bytes:
    from ckptcli.adapters.temporal.synth import synthesize

    path = Path(root) / "base.json"
    synthesize(COMPLETE, 300, path, result_bytes=2_000)
    return path.read_bytes()


@settings(max_examples=count(2_000, 80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edge=st.integers(1, 2),
    value=_JSON,
    pieces=st.lists(st.sampled_from(_IN_STRING), min_size=1, max_size=30),
    inside=st.booleans(),
    ascii_only=st.booleans(),
    at=st.integers(0, 10_000),
    damage=st.none() | st.tuples(st.integers(0, 10_000), st.sampled_from([b"", b"\\", b'"', b'\\"', b"\\u12", b"[", b"}", b"\x00"])),
    near=st.booleans(),
)
def test_random_json_across_a_read_edge_reads_alike_both_ways(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    edge: int,
    value: Any,
    pieces: list[bytes],
    inside: bool,
    ascii_only: bool,
    at: int,
    damage: tuple[int, bytes] | None,
    near: bool,
) -> None:
    """A field holding random JSON (or the text of a random string, inside a string of
    the history), placed so that the edge of a read falls at any byte of it, sometimes
    with one byte replaced (a lone backslash, a quote, a bracket, a NUL) or cut out: the
    fast way gives the events, positions and error the careful way gives."""
    root = tmp_path_factory.getbasetemp() / "fast-diff"
    root.mkdir(exist_ok=True)
    raw = _base(str(root))
    # a JSON value, or the content of a string: its escapes, brackets, quoted quotes, UTF-8
    text = b"".join(pieces) if inside else json.dumps(value, ensure_ascii=ascii_only).encode()
    if damage is not None:  # one byte replaced by others (or cut out)
        k = damage[0] % (len(text) + 1)
        text = text[:k] + damage[1] + text[k + 1 :]
    # the text starts `before` bytes ahead of the edge of a read: anywhere, or (`near`) just
    # before or after a backslash, a quote or a bracket
    marks = [i + d for i, b in enumerate(text) if b in b'\\"[]{}' for d in (0, 1)]
    before = marks[at % len(marks)] if near and marks else at % (len(text) + 1)
    j = raw.index(b'"eventId"', edge * READ - 3_000)  # the field goes here, an event's first
    head = b'"y":"' if inside else b'"y": '
    start = j + len(b'"p":"",') + len(head)
    edge_at = -(-(start + 1 + before) // READ) * READ
    pad = b"z" * (edge_at - before - start)  # a string before it, as long as that takes
    field = b'"p":"' + pad + b'",' + head + text + (b'",' if inside else b",")
    path = root / "case.json"
    path.write_bytes(raw[:j] + field + raw[j:])
    position = [0]
    fast = _outcome(reader.read_events(path, check=False, position=position, divert=True), position)
    careful = _careful(path, True, monkeypatch)
    assert fast == careful, (fast[1], careful[1], len(fast[0]), len(careful[0]))


def test_a_history_shaped_as_temporal_writes_it_is_read_the_fast_way_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the top level (one `"events": [...]` list) sends no history Temporal
    writes, compact or indented, to the careful way; what else is at the top level does."""
    from ckptcli.adapters.temporal.synth import synthesize

    base = tmp_path / "base.json"
    synthesize(COMPLETE, 300, base, result_bytes=2_000)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(base.read_text()), indent=2))
    careful: list[str] = []
    real = reader._read_carefully
    monkeypatch.setattr(reader, "_read_carefully", lambda f, where, *a: careful.append(where) or real(f, where, *a))
    for path in (base, pretty, COMPLETE):
        assert sum(1 for _ in reader.read_events(path, check=False)) > 10
    assert careful == []
    after = tmp_path / "after.json"
    after.write_text(json.dumps({"events": json.loads(base.read_text())["events"], "meta": 1}))
    assert sum(1 for _ in reader.read_events(after, check=False)) == 299
    assert careful == [str(after)]


def test_a_history_that_starts_with_a_byte_order_mark_reads_as_without_it(tmp_path: Path) -> None:
    # an editor on Windows saves one; ijson took it for malformed JSON (exit 5) while
    # `ckpt take` of a JSON document with one reads it. A long string after it is read
    # back from its file offsets, which the mark shifts.
    import codecs

    from ckptcli.adapters.temporal.synth import synthesize

    base = tmp_path / "base.json"
    synthesize(COMPLETE, 30, base, result_bytes=2_000)
    raw = base.read_bytes()
    j = raw.index(b'"eventId"', len(raw) // 2)
    plain = tmp_path / "plain.json"
    plain.write_bytes(raw[:j] + b'"y":"' + b"R" * LONG + b'Q",' + raw[j:])
    marked = tmp_path / "marked.json"
    marked.write_bytes(codecs.BOM_UTF8 + plain.read_bytes())

    def read(path: Path, divert: bool) -> list[Any]:
        position = [0]
        out = []
        for ev in reader.read_events(path, check=True, position=position, divert=divert):
            text = json.dumps(ev.raw, default=lambda o: o.read() if isinstance(o, LongString) else None)
            out.append((ev.seq, ev.ts, ev.name, text, position[0]))
        return out

    for divert in (True, False):
        want = read(plain, divert)
        assert len(want) > 20 and any("R" * LONG + "Q" in e[3] for e in want)
        assert read(marked, divert) == want, divert
    from tests.conftest import run_ckpt

    assert run_ckpt("init", tmp_path / "s").returncode == 0
    r = run_ckpt("import", "temporal", marked, "--store", tmp_path / "s")
    assert r.returncode == 0 and r.stderr == b"", r.stderr
