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
from ckptcli.store.backends.generic import FsspecBackend
from ckptcli.store.backends.local import LocalObjects
from ckptcli.store.backends.memory import MemoryBackend
from ckptcli.store.backends.s3 import S3Backend
from tests.backend_suite import CHECKS, RACE_CHECKS, SAME_BYTES_CHECKS
from tests.helpers_backend import FaultyBackend
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

_names = itertools.count()


def _memory(_request: pytest.FixtureRequest, _tmp: Path) -> ObjectBackend:
    name = f"conformance-{next(_names)}"
    MemoryBackend.forget(name)
    return MemoryBackend(name)


def _s3(request: pytest.FixtureRequest, _tmp: Path) -> ObjectBackend:
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")  # a fresh bucket on the loopback moto server
    return S3Backend.from_url(f"{bucket.url}/stores/one", {})


def _fsspec_memory(_request: pytest.FixtureRequest, _tmp: Path) -> ObjectBackend:
    return FsspecBackend.from_url(f"memory://ckpt-conformance-{next(_names)}/store", {})


#: name -> a factory of a fresh, empty backend (given the test's request, for fixtures,
#: and a fresh temporary directory)
FACTORIES: dict[str, Callable[[pytest.FixtureRequest, Path], ObjectBackend]] = {
    "local": lambda _request, tmp: LocalObjects(tmp / "store"),
    "memory": _memory,
    "faultless-wrapper": lambda request, tmp: FaultyBackend(_memory(request, tmp)),  # the wrapper itself is transparent
    "s3": _s3,
    "fsspec-memory": _fsspec_memory,
}
#: the backends whose put_if_absent and put_if_match are atomic between threads (moto's
#: conditional writes answer 412 but are not atomic under racing writers, and fsspec's are
#: check-then-write: the race properties are proven on the others)
ATOMIC = ["local", "memory"]
#: the backends whose ETag changes when the same bytes are put again
SAME_BYTES_NEW_ETAG = ["local", "memory", "faultless-wrapper"]


def _open(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectBackend]:
    backend = FACTORIES[name](request, tmp_path)
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_conformance(name: str, check: Callable[[ObjectBackend], None], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    for backend in _open(name, request, tmp_path):
        check(backend)


@pytest.mark.parametrize("check", RACE_CHECKS, ids=[c.__name__ for c in RACE_CHECKS])
@pytest.mark.parametrize("name", ATOMIC)
def test_races(name: str, check: Callable[[ObjectBackend], None], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    for backend in _open(name, request, tmp_path):
        check(backend)


@pytest.mark.parametrize("check", SAME_BYTES_CHECKS, ids=[c.__name__ for c in SAME_BYTES_CHECKS])
@pytest.mark.parametrize("name", SAME_BYTES_NEW_ETAG)
def test_same_bytes(name: str, check: Callable[[ObjectBackend], None], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    for backend in _open(name, request, tmp_path):
        check(backend)
