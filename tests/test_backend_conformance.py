"""Every backend runs the conformance suite (tests/backend_suite.py). To add a backend,
add one line to FACTORIES (and its name to ATOMIC when its conditional writes are atomic
between threads, so that the race properties hold on it, and to SAME_BYTES_NEW_ETAG when
a put of the same bytes gives a new ETag)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.backends.local import LocalObjects
from ckptcli.store.backends.memory import MemoryBackend
from tests.backend_suite import CHECKS, RACE_CHECKS, SAME_BYTES_CHECKS
from tests.helpers_backend import FaultyBackend

_names = itertools.count()


def _memory(_tmp: Path) -> ObjectBackend:
    name = f"conformance-{next(_names)}"
    MemoryBackend.forget(name)
    return MemoryBackend(name)


#: name -> a factory of a fresh, empty backend (given a fresh temporary directory)
FACTORIES: dict[str, Callable[[Path], ObjectBackend]] = {
    "local": lambda tmp: LocalObjects(tmp / "store"),
    "memory": _memory,
    "faultless-wrapper": lambda tmp: FaultyBackend(_memory(tmp)),  # the wrapper itself is transparent
}
#: the backends whose put_if_absent and put_if_match are atomic between threads
ATOMIC = ["local", "memory"]
#: the backends whose ETag changes when the same bytes are put again
SAME_BYTES_NEW_ETAG = ["local", "memory", "faultless-wrapper"]


def _open(name: str, tmp_path: Path) -> Iterator[ObjectBackend]:
    backend = FACTORIES[name](tmp_path)
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_conformance(name: str, check: Callable[[ObjectBackend], None], tmp_path: Path) -> None:
    for backend in _open(name, tmp_path):
        check(backend)


@pytest.mark.parametrize("check", RACE_CHECKS, ids=[c.__name__ for c in RACE_CHECKS])
@pytest.mark.parametrize("name", ATOMIC)
def test_races(name: str, check: Callable[[ObjectBackend], None], tmp_path: Path) -> None:
    for backend in _open(name, tmp_path):
        check(backend)


@pytest.mark.parametrize("check", SAME_BYTES_CHECKS, ids=[c.__name__ for c in SAME_BYTES_CHECKS])
@pytest.mark.parametrize("name", SAME_BYTES_NEW_ETAG)
def test_same_bytes(name: str, check: Callable[[ObjectBackend], None], tmp_path: Path) -> None:
    for backend in _open(name, tmp_path):
        check(backend)
