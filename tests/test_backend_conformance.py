"""Every backend runs the conformance suite (tests/backend_suite.py). To add a backend,
add one line to FACTORIES (and to ATOMIC when its conditional writes are atomic between
threads, so that the race properties hold on it)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.backends.local import LocalObjects
from ckptcli.store.backends.memory import MemoryBackend
from tests.backend_suite import CHECKS, RACE_CHECKS
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
