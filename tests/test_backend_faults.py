"""The fault-injection wrapper (tests/helpers_backend.py) does what it says, on a real
backend: the Nth call fails before the backend sees it, or moves one flipped byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptcli.errors import StoreIOError
from ckptcli.store.backends.local import LocalObjects
from tests.helpers_backend import FaultyBackend, flip


def _differ(a: bytes, b: bytes) -> list[int]:
    assert len(a) == len(b)
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


def test_flip() -> None:
    assert flip(b"") == b""
    assert flip(b"\x00") == b"\xff"
    assert _differ(flip(b"abcdef"), b"abcdef") == [3]


def test_the_nth_call_fails_and_only_that_one(tmp_path: Path) -> None:
    inner = LocalObjects(tmp_path)
    b = FaultyBackend(inner, fail_on=3)
    b.put("a", b"1")  # 1
    assert b.get("a") == b"1"  # 2
    with pytest.raises(StoreIOError, match=r"injected failure of call 3 \(put .*/b\)"):
        b.put("b", b"2")  # 3: never reaches the backend
    assert not inner.exists("b")
    b.put("b", b"2")  # 4
    assert b.list_paths("") == ["a", "b"]  # 5
    assert [m for m, _p in b.calls] == ["put", "get", "put", "put", "list"]


@pytest.mark.parametrize("method", ["get", "get_range", "get_versioned"])
def test_a_corrupted_read_flips_one_byte_and_leaves_the_object(method: str, tmp_path: Path) -> None:
    inner = LocalObjects(tmp_path)
    data = bytes(range(200))
    inner.put("obj", data)
    b = FaultyBackend(inner, corrupt_on=2)
    read = {
        "get": lambda: b.get("obj"),
        "get_range": lambda: b.get_range("obj", 0, 200),
        "get_versioned": lambda: b.get_versioned("obj")[0],
    }[method]
    assert read() == data  # call 1
    assert len(_differ(read(), data)) == 1  # call 2
    assert read() == data  # call 3
    assert inner.get("obj") == data


@pytest.mark.parametrize("method", ["put", "put_if_absent", "put_if_match"])
def test_a_corrupted_write_stores_one_flipped_byte(method: str, tmp_path: Path) -> None:
    inner = LocalObjects(tmp_path)
    b = FaultyBackend(inner, corrupt_on=1)
    data = b"x" * 64
    {
        "put": lambda: b.put("o", data),
        "put_if_absent": lambda: b.put_if_absent("o", data),
        "put_if_match": lambda: b.put_if_match("o", data, None),
    }[method]()
    assert len(_differ(inner.get("o"), data)) == 1


def test_a_corrupted_call_without_bytes_changes_nothing(tmp_path: Path) -> None:
    inner = LocalObjects(tmp_path)
    inner.put("o", b"")
    b = FaultyBackend(inner, corrupt_on=1)
    assert b.stat("o") == inner.stat("o")
    b2 = FaultyBackend(inner, corrupt_on=1)
    assert b2.get("o") == b""
