"""The big-data path: window-by-window chunking and the pipelined pack writer."""

from __future__ import annotations

import io
import os
import random
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptcli.api import init_store, open_checkpoint, open_store, take, verify
from ckptcli.errors import InvalidInputError
from ckptcli.format.chunker import chunk_bytes, iter_chunks, iter_windows

PARAMS = (16384, 65536, 262144)


class Trickle(io.RawIOBase):
    """A stream that returns at most `step` bytes per read, as a pipe may."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        k = min(n if n >= 0 else len(self.data), self.step, len(self.data) - self.pos)
        out = self.data[self.pos : self.pos + k]
        self.pos += k
        return out


def _data(kind: str, n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if kind == "random":
        return rng.randbytes(n)
    if kind == "zeros":  # no content boundary ever: every chunk is cut at the maximum size
        return bytes(n)
    words = [b"alpha", b"beta", b"gamma", b"tool", b"call", b"result"]
    return b" ".join(rng.choices(words, k=n // 4 + 1))[:n]


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["random", "zeros", "text"]),
    n=st.one_of(st.integers(0, 300_000), st.sampled_from([1 << 20, (1 << 20) + 1, 3 * 262144, 2_500_000])),
    window=st.sampled_from([1 << 20, (1 << 20) + 7, 2 << 20]),
    step=st.sampled_from([None, 70_000, 1 << 20]),
    seed=st.integers(0, 3),
)
def test_windows_cut_exactly_the_chunks_of_the_whole(kind: str, n: int, window: int, step: int | None, seed: int) -> None:
    data = _data(kind, n, seed)
    stream = io.BytesIO(data) if step is None else Trickle(data, step)
    got = [bytes(c) for c in iter_chunks(stream, PARAMS, window)]
    assert got == (chunk_bytes(data, PARAMS) if data else [])


def test_a_window_at_a_time_bounds_what_is_held() -> None:
    data = _data("text", 5_000_000, 1)
    windows = list(iter_windows(io.BytesIO(data), PARAMS, 1 << 20))
    assert len(windows) >= 4
    assert all(sum(len(c) for c in w) <= (1 << 20) + PARAMS[2] for w in windows)
    assert b"".join(bytes(c) for w in windows for c in w) == data


def test_big_take_through_the_io_thread_round_trips(tmp_path: Path) -> None:
    # 12 MiB in three files passes the point where packs are written on the I/O thread.
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i}.bin": _data(kind, 4 << 20, i) for i, kind in enumerate(["random", "text", "zeros"])}
    for name, content in files.items():
        (src / name).write_bytes(content)
    store = init_store(tmp_path / "store")
    result = take(store, {"memory": {"k": 1}}, subject="process:big", blobs={"state": src})
    assert result.new_objects > 100
    assert verify(store, read_data=True).ok
    out = tmp_path / "out"
    open_checkpoint(result.id.hex(), store).restore_blobs(out)
    for name, content in files.items():
        assert (out / "state" / name).read_bytes() == content
    assert not list((tmp_path / "store" / "tmp").iterdir())


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))


def test_a_write_that_fails_on_the_io_thread_is_one_error_line_and_commits_nothing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(8 << 20))  # packs pass the 3 MiB file-size limit
    store_dir = tmp_path / "store"
    init_store(store_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "ckptcli", "take", "--store", str(store_dir), "-S", "process:x", "--blob", f"state={src}"],
        capture_output=True,
        preexec_fn=_limit_file_size,
        timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 12, err
    assert "Traceback" not in err
    assert err.startswith("ckpt: error: cannot write tmp/") and "File too large" in err, err
    assert not list((store_dir / "tmp").iterdir())
    assert not list((store_dir / "manifests").rglob("*"))
    assert verify(open_store(store_dir), read_data=True).ok


def test_a_carried_section_is_shared_not_copied(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(_data("random", 2 << 20, 5))
    store = init_store(tmp_path / "store")
    first = take(store, {"memory": {"v": 1}}, subject="agent:a", blobs={"state": src})
    ev = open_checkpoint(first.id.hex(), store).manifest.sections["blobs"]
    second = take(store, {"memory": {"v": 2}}, subject="agent:a", carry={"blobs": ev}, schema_version=2)
    assert second.new_bytes < 4096  # the memory section and the manifest's roots, no file data
    ck = open_checkpoint(second.id.hex(), store)
    assert ck.state() == {"memory": {"v": 2}}
    ck.restore_blobs(tmp_path / "out")
    assert (tmp_path / "out" / "state" / "w.bin").read_bytes() == (src / "w.bin").read_bytes()
    with pytest.raises(InvalidInputError, match="both carried over and given"):
        take(store, {"memory": {"v": 3}}, subject="agent:a", carry={"memory": ev})
