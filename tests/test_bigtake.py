"""The big-state take: several large blob files are read and chunked at once
(Encoder.encode_streams), and the store is the same whatever the threads' timing."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from ckptcli.api import init_store, open_checkpoint, open_store, take
from ckptcli.errors import StoreIOError
from ckptcli.format import chunker, encode
from ckptcli.store import layout

_iter_windows = chunker.iter_windows


def _tree(root: Path) -> Path:
    """Large files of random bytes and of text (some sharing a stretch of bytes, so
    that files read at the same time hold the same chunks), and small ones between."""
    rng = random.Random(5)
    shared = rng.randbytes(1 << 20)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.bin").write_bytes(rng.randbytes(2 << 20) + shared)
    lines = [json.dumps({"seq": i, "text": " ".join(rng.choices(["alpha", "beta", "tool", "call"], k=12))}) + "\n" for i in range(800)]
    (root / "b.jsonl").write_text("".join(rng.choices(lines, k=40_000)))
    (root / "small.txt").write_text("a small file, stored inline\n")
    (root / "sub" / "c.bin").write_bytes(shared + rng.randbytes(1 << 20) + shared)
    (root / "sub" / "medium.bin").write_bytes(rng.randbytes(300_000))
    (root / "sub" / "deeper" / "d.bin").write_bytes(rng.randbytes((1 << 20) + 12345))
    (root / "sub" / "deeper" / "e.bin").write_bytes(shared)
    (root / "z.bin").write_bytes(rng.randbytes(3 << 20))
    return root


def _store_files(path: Path) -> dict[str, bytes]:
    """Every pack and index file of a store, by path: the same takes give the same bytes."""
    out = {}
    for sub in (layout.PACKS, layout.INDEX):
        for f in sorted((path / sub).rglob("*")):
            if f.is_file():
                out[str(f.relative_to(path))] = f.read_bytes()
    return out


def _windows(delays: random.Random | None) -> Any:
    """iter_windows in 1 MiB windows (several per file), each handed over after a random
    pause when `delays` is given: the threads then finish in a different order each run."""

    def windows(
        stream: IO[bytes], params: tuple[int, int, int], window: int = chunker.WINDOW, algorithm: str = "", buffers: Any = None
    ) -> Iterator[Any]:
        for pieces in _iter_windows(stream, params, 1 << 20, algorithm, buffers):
            if delays is not None:
                time.sleep(delays.random() * 0.004)
            yield pieces

    return windows


def _take(tmp_path: Path, name: str, src: Path) -> tuple[dict[str, bytes], bytes, Any]:
    store = init_store(tmp_path / name)
    result = take(store, {"step": 1}, subject="process:big", blobs={"state": src})
    return _store_files(tmp_path / name), result.manifest.sections["blobs"], result


def test_the_same_tree_gives_the_same_store_whatever_the_threads_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    # one file after another, on this thread (the take before files were read at once)
    monkeypatch.setattr(chunker, "iter_windows", _windows(None))
    monkeypatch.setattr(encode, "READ_AHEAD_MIN", 1 << 62)
    files, blobs, first = _take(tmp_path, "sequential", src)
    assert first.new_objects > 100 and any(k.startswith(layout.PACKS) for k in files)
    monkeypatch.setattr(encode, "READ_AHEAD_MIN", 1 << 20)
    monkeypatch.setattr(encode, "WINDOW", 1 << 20)  # the window buffers are read into again and again
    for seed in range(3):
        monkeypatch.setattr(chunker, "iter_windows", _windows(random.Random(seed)))
        got_files, got_blobs, result = _take(tmp_path, f"at-once-{seed}", src)
        assert got_blobs == blobs
        assert got_files == files  # byte for byte: objects in the same order in the same packs
        assert (result.new_objects, result.new_bytes) == (first.new_objects, first.new_bytes)
        assert result.capture.files == first.capture.files == 8 and result.capture.bytes == first.capture.bytes


def test_several_large_files_are_read_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader of the first large file waits (up to 20 s) for the second one's reader
    to start: one file after another, it never would."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(random.Random(1).randbytes(2 << 20))
    (src / "b.bin").write_bytes(random.Random(2).randbytes(2 << 20))
    b_started = threading.Event()
    seen: dict[str, bool] = {}

    def windows(
        stream: IO[bytes], params: tuple[int, int, int], window: int = chunker.WINDOW, algorithm: str = "", buffers: Any = None
    ) -> Iterator[Any]:
        name = Path(str(getattr(stream, "name", ""))).name
        if name == "b.bin":
            b_started.set()
        elif name == "a.bin":
            seen["b started while a was read"] = b_started.wait(20)
        yield from _iter_windows(stream, params, window, algorithm, buffers)

    monkeypatch.setattr(chunker, "iter_windows", windows)
    store = init_store(tmp_path / "s")
    result = take(store, {}, subject="process:big", blobs={"state": src})
    assert seen == {"b started while a was read": True}
    assert result.capture.files == 2 and result.new_bytes > 4 << 20
    out = tmp_path / "out"
    open_checkpoint(result.hex, open_store(tmp_path / "s")).restore_blobs(out)
    assert (out / "state" / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert (out / "state" / "b.bin").read_bytes() == (src / "b.bin").read_bytes()


def test_a_file_that_fails_to_read_fails_the_take_naming_it_and_stores_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The error of a file read ahead surfaces when its turn comes, naming it; the files
    read beside it are stopped and the transaction leaves nothing in the index."""
    src = tmp_path / "src"
    src.mkdir()
    for i, name in enumerate(["a.bin", "b.bin", "c.bin", "d.bin"]):
        (src / name).write_bytes(random.Random(i).randbytes(3 << 20))

    def windows(
        stream: IO[bytes], params: tuple[int, int, int], window: int = chunker.WINDOW, algorithm: str = "", buffers: Any = None
    ) -> Iterator[Any]:
        for n, pieces in enumerate(_iter_windows(stream, params, 1 << 20, algorithm, buffers)):
            if n == 1 and str(getattr(stream, "name", "")).endswith("b.bin"):
                raise OSError(errno.EIO, "Input/output error")
            yield pieces

    monkeypatch.setattr(chunker, "iter_windows", windows)
    store = init_store(tmp_path / "s")
    take(store, {"step": 0}, subject="process:big")
    before = len(open_store(tmp_path / "s").index())
    with pytest.raises(StoreIOError) as err:
        take(store, {"step": 1}, subject="process:big", blobs={"state": src})
    assert err.value.message == f"cannot read {src / 'b.bin'}: Input/output error"
    assert len(open_store(tmp_path / "s").index()) == before
    # nothing of it is left running: the next take of the same files works
    monkeypatch.setattr(chunker, "iter_windows", _iter_windows)
    result = take(store, {"step": 2}, subject="process:big", blobs={"state": src})
    assert result.capture.files == 4 and result.new_bytes > 12 << 20


def test_a_window_buffer_is_read_into_again_only_once_no_view_of_it_is_held() -> None:
    data = random.Random(9).randbytes(9 << 20)
    params = chunker.PARAMS[chunker.DEFAULT_CHUNKER]
    whole = chunker.chunk_bytes(data, params, chunker.DEFAULT_CHUNKER)
    # every view held: no buffer is free, so each window gets one of its own
    buffers = chunker.WindowBuffers(1 << 20, 3)
    held = [c for w in _iter_windows(io.BytesIO(data), params, 1 << 20, chunker.DEFAULT_CHUNKER, buffers) for c in w]
    assert [bytes(c) for c in held] == whole
    assert len(buffers.bufs) == 3
    # views dropped as the windows go by: the same buffers serve the whole stream
    buffers = chunker.WindowBuffers(1 << 20, 3)
    got = [bytes(c) for w in _iter_windows(io.BytesIO(data), params, 1 << 20, chunker.DEFAULT_CHUNKER, buffers) for c in w]
    assert got == whole
    assert len(buffers.bufs) <= 2


def test_after_a_chunk_zstd_cannot_shrink_the_next_is_tried_on_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random bytes cost one whole-chunk zstd attempt per window, then 4 KiB samples; text
    after them in the same window is still compressed whole, and every chunk's id is the
    SHA-256 of its bytes."""
    from ckptcli.format import framing

    rng = random.Random(3)
    text = "".join(json.dumps({"seq": i, "kind": rng.choice(["a", "b"]), "n": i * 7}) + "\n" for i in range(60_000)).encode()
    data = rng.randbytes(1 << 20) + text[: 2 << 20]
    pieces = chunker.chunk_bytes(data, chunker.PARAMS[chunker.DEFAULT_CHUNKER], chunker.DEFAULT_CHUNKER)
    sizes: list[int] = []
    real = framing.compress

    def counting(raw: Any, level: int = 3) -> Any:
        sizes.append(len(raw))
        return real(raw, level)

    monkeypatch.setattr(framing, "compress", counting)
    out = encode._hash_and_compress([memoryview(p) for p in pieces], lambda oid: False)
    assert [oid for oid, _n, _s in out] == [hashlib.sha256(p).digest() for p in pieces]
    random_chunks = [i for i, p in enumerate(pieces) if sum(len(q) for q in pieces[: i + 1]) <= 1 << 20]
    assert len(random_chunks) > 10
    assert all((out[i][2] or (None,))[0] == framing.CODEC_NONE for i in random_chunks)
    assert sizes[1 : len(random_chunks)] == [encode._SAMPLE] * (len(random_chunks) - 1)  # one whole attempt, then samples
    text_chunks = [s for _oid, n, s in out[len(random_chunks) + 1 :] if s is not None]
    assert text_chunks and all(codec == framing.CODEC_ZSTD for codec, _stored, _check in text_chunks)
    assert sum(len(stored) for _c, stored, _check in text_chunks) < sum(n for _o, n, _s in out[len(random_chunks) + 1 :]) // 2
    # each stored form comes with the check a version-2 pack records of it
    assert all(s[2] == framing.stored_check(s[1]) for _oid, _n, s in out if s is not None)
