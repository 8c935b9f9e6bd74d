"""LocalBackend.read_range from many threads: the descriptors of recently read packs are
shared, evicted when more than 64 are open, and a descriptor evicted while a read uses it
is closed only when that read is over, so its number is never reused by another file under
the read (restore and verify read with every core). Real files and real threads."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from ckptcli.store.backend import LocalBackend

FILES = 150  # more than the 64 descriptors kept open: eviction happens all the time
SIZE = 4096


def _store(tmp_path: Path) -> LocalBackend:
    for i in range(FILES):
        d = tmp_path / "packs" / f"{i % 256:02x}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"p{i}").write_bytes(bytes([i % 256]) * SIZE)
    return LocalBackend(tmp_path)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd (Linux)")
def test_threads_reading_many_packs_get_their_own_bytes_and_leak_no_descriptor(tmp_path: Path) -> None:
    backend = _store(tmp_path)
    before = _open_fds()
    wrong: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(3000):
            i = rng.randrange(FILES)
            off = rng.randrange(SIZE - 16)
            got = backend.read_range(f"packs/{i % 256:02x}/p{i}", off, 16)
            if got != bytes([i % 256]) * 16:
                wrong.append(f"p{i}@{off}: {got[:4]!r}")

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong[:5]
    assert 0 < len(backend._fds) <= 64
    backend.close()
    assert _open_fds() == before  # every descriptor closed, none twice (a double close would hit another file's)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd (Linux)")
def test_a_descriptor_evicted_under_a_read_is_closed_by_that_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _store(tmp_path)
    first = "packs/00/p0"
    started, resume = threading.Event(), threading.Event()
    real_pread = os.pread

    def slow_pread(fd: int, n: int, offset: int) -> bytes:
        if threading.current_thread().name == "slow":
            started.set()
            assert resume.wait(10)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", slow_pread)
    got: list[bytes] = []
    slow = threading.Thread(target=lambda: got.append(backend.read_range(first, 0, 8)), name="slow")
    slow.start()
    assert started.wait(10)
    fd = backend._fds[first].fd
    for i in range(1, 80):  # evicts the first pack's descriptor while the slow read holds it
        backend.read_range(f"packs/{i % 256:02x}/p{i}", 0, 8)
    assert first not in backend._fds
    os.fstat(fd)  # still open: the slow read uses it
    resume.set()
    slow.join()
    assert got == [b"\x00" * 8]
    with pytest.raises(OSError):
        os.fstat(fd)  # closed by the read that used it last (no other file took the number meanwhile)
    backend.close()
