"""Index files are read a column at a time (index.row_columns, ObjectIndex.add_columns), not
a Python call a row: the index they make is the one the row-by-row reader made, and every
row the row-by-row reader refuses is refused with the same words (a hostile or damaged
index file is skipped with one warning, as before)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.errors import CkptError
from ckptcli.format import limits
from ckptcli.store.index import IndexEntry, ObjectIndex, parse_entry_rows, row_columns, write_index
from ckptcli.store.repository import Store


def _oid(rng: random.Random) -> bytes:
    return hashlib.sha256(rng.randbytes(16)).digest()


def _rows(rng: random.Random, n: int, again: list[bytes] | None = None) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for i in range(n):
        oid = rng.choice(again) if again and i % 7 == 0 else _oid(rng)
        rows.append([oid, rng.randrange(2), rng.randrange(1 << 40), rng.randrange(1 << 20), rng.randrange(1 << 23), rng.randrange(2)])
    if rows:
        rows.append([rows[0][0], 1, 5, 6, 7, 0])  # the same object twice in one pack: the first row wins
    return rows


def _by_rows(packs: list[tuple[bytes, list[list[Any]]]], idx: ObjectIndex | None = None) -> ObjectIndex:
    idx = idx if idx is not None else ObjectIndex()
    for pack, rows in packs:
        idx.add_many(parse_entry_rows(rows, pack, "test"), settle=False)
    idx.settle()
    return idx


def _by_columns(packs: list[tuple[bytes, list[list[Any]]]], idx: ObjectIndex | None = None) -> ObjectIndex:
    idx = idx if idx is not None else ObjectIndex()
    for pack, rows in packs:
        columns = row_columns(rows)
        assert columns is not None
        idx.add_columns(pack, columns, settle=False)
    idx.settle()
    return idx


@pytest.mark.parametrize("n", [0, 1, 50, 5000])
def test_columns_make_the_index_rows_make(n: int) -> None:
    rng = random.Random(n)
    first = [(_oid(rng), _rows(rng, n)) for _ in range(3)]
    seen = [row[0] for _pack, rows in first for row in rows]
    # a second file naming some objects again, in other packs and in a pack named before
    second = [(_oid(rng), _rows(rng, n // 2 + 1, seen)), (first[0][0], _rows(rng, 3, seen))]
    a, b = _by_rows(first), _by_columns(first)
    assert dict(a.items()) == dict(b.items()) and a._packs == b._packs
    for merged in (False, True):  # the second file meets waiting entries, then a sorted part
        if merged:
            a.merge()
            b.merge()
        a2, b2 = _by_rows(second, a.copy()), _by_columns(second, b.copy())
        assert dict(a2.items()) == dict(b2.items()), merged
        assert a2._packs == b2._packs and len(a2) == len(b2)
        for oid, entry in a2.items():
            assert b2[oid] == entry


def test_a_pack_whose_objects_are_all_known_adds_no_pack() -> None:
    rng = random.Random(3)
    rows = _rows(rng, 10)
    idx = _by_columns([(_oid(rng), rows)])
    other = _oid(rng)
    columns = row_columns([[row[0], 0, 1, 2, 3, 0] for row in rows])
    assert columns is not None
    idx.add_columns(other, columns)
    assert other not in idx._packs and other not in idx._pack_no and len(idx._packs) == 1


OID = hashlib.sha256(b"x").digest()
GOOD = [OID, 0, 10, 20, 30, 1]


def _with(i: int, value: Any) -> list[Any]:
    row = list(GOOD)
    row[i] = value
    return row


HOSTILE: dict[str, Any] = {
    "not a list": {"a": 1},
    "a row not a list": [GOOD, "row"],
    "a short row": [GOOD, GOOD[:5]],
    "a long row": [GOOD, [*GOOD, 0]],
    "a short id": [_with(0, OID[:31])],
    "an id not bytes": [_with(0, OID.hex())],
    "a type of 2": [GOOD, _with(1, 2)],
    "a type true": [_with(1, True)],
    "a float offset": [_with(2, 10.0)],
    "a negative offset": [_with(2, -1)],
    "a negative stored length": [_with(3, -5)],
    "a negative raw length": [_with(4, -5)],
    "a string codec": [_with(5, "zstd")],
    "a codec of 2": [_with(5, 2)],
    "a codec false": [_with(5, False)],
    "a raw length over the limit": [GOOD, _with(4, limits.MAX_OBJECT_SIZE + 1)],
    "a stored length over the limit": [_with(3, limits.MAX_OBJECT_SIZE + 1025)],
    "nothing but a null": [None],
}


def _refusal(rows: Any) -> str:
    try:
        list(parse_entry_rows(rows, OID, "index/x"))
    except CkptError as exc:
        return f"{type(exc).__name__}: {exc.message}"
    return "accepted"


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_row_the_row_reader_refuses_is_left_to_it(case: str) -> None:
    rows = HOSTILE[case]
    assert _refusal(rows) != "accepted"  # the reference refuses it ...
    assert row_columns(rows) is None  # ... and the columns do not take it


def test_rows_at_the_limits_are_taken_by_both() -> None:
    rows = [_with(4, limits.MAX_OBJECT_SIZE), [hashlib.sha256(b"y").digest(), 1, (1 << 64) - 1, limits.MAX_OBJECT_SIZE + 1024, 0, 0]]
    assert _refusal(rows) == "accepted"
    columns = row_columns(rows)
    assert columns is not None
    idx = ObjectIndex()
    idx.add_columns(OID, columns)
    assert dict(idx.items()) == dict(_by_rows([(OID, rows)]).items())
    assert idx[OID] == IndexEntry(OID, 0, 10, 20, limits.MAX_OBJECT_SIZE, 1)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_store_skips_a_hostile_index_file_saying_what_the_row_reader_says(tmp_path: Path, case: str) -> None:
    """A hostile file (a sound file before it) in a real store: the sound one is read, the
    hostile one is damaged with the message row-by-row reading gives, and nothing of it
    is in the index, not even the rows of it that were sound."""
    st = ckptcli.init_store(tmp_path / "s")
    cid = ckptcli.take(st, {"memory": {"x": "y"}}, subject="agent:a").id
    sound = set(st.index())
    other = hashlib.sha256(b"pack").digest()
    fine = [[hashlib.sha256(b"fine").digest(), 0, 0, 1, 1, 0]]
    name = write_index(st.backend, [(other, fine), (other, HOSTILE[case])], st.version)
    reader = Store.open(tmp_path / "s")
    warnings: list[str] = []
    reader.on_warning = warnings.append
    assert set(reader.index()) == sound
    message = _refusal(HOSTILE[case]).split(": ", 1)[1].replace("index/x", name)
    assert reader.damaged_index == {name: message}
    assert len(warnings) == 1 and name in warnings[0]
    assert ckptcli.open_checkpoint(cid.hex(), reader).state() == {"memory": {"x": "y"}}
