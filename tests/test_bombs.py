"""Decompression bombs within the budget, and memory (issue 12, defect 7).

Two hostile checkpoint files, each about a kilobyte, built with the library's own
encoder plus hand-built chunk-tree nodes that name the same child many times:

* the *1 GiB bomb*: a list of 64 references to one 16 MiB string, whose tree names one
  64 KiB data chunk 256 times. It decodes to 1 GiB. `ckpt cat` and `ckpt restore -o`
  stream it (peak memory O(largest object + depth), not O(state)): the output really is
  1 GiB, its hash is checked without loading it, and the command's peak RSS (os.wait4
  of the real CLI in a subprocess) stays far under 1 GiB;
* the *1 TiB blob*: a blobs section whose one file's BYTES tree declares 2**40 bytes.
  `ckpt restore --blobs` refuses it against the target's free space before writing a
  byte (the target is not even created); `--force` skips that check, shown with a small
  blob and a mocked free space rather than by writing a TiB.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ckptcli import blobs
from ckptcli.api import info_dict, open_checkpoint
from ckptcli.errors import ExitCode
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.format.values import EXT_BYTES, EXT_STR, OBJ_DATA, OBJ_NODE, Encoded, Encoder
from ckptcli.store.repository import Store, Transaction
from tests.helpers_faults import child_env, ckpt_argv, describe, run_cli

GiB = 1 << 30
CHUNK = 64 * 1024
STRING_CHUNKS = 256  # one 16 MiB string
LIST_ITEMS = 64  # 64 x 16 MiB = 1 GiB
#: The bombs' commands must stay this far under the 1 GiB they produce.
RSS_CEILING = 512 * 1024 * 1024
#: Address-space cap for the streaming commands: 1.5 GiB, so holding the state fails.
STREAM_MEM_LIMIT = 3 * GiB // 2


def _node(txn: Transaction, node: list[Any]) -> bytes:
    content = msgpack.packb(node, use_bin_type=True)
    oid = hashlib.sha256(content).digest()
    txn.put(oid, content, OBJ_NODE)
    return oid


def _data(txn: Transaction, data: bytes) -> bytes:
    oid = hashlib.sha256(data).digest()
    txn.put(oid, data, OBJ_DATA)
    return oid


def repeated_tree(txn: Transaction, kind: int, chunk: bytes, fanouts: list[int]) -> bytes:
    """The root id of a BYTES/STR tree whose every node names the same child `fanout` times:
    len(chunk) * prod(fanouts) bytes from one data object and len(fanouts) nodes."""
    child, size = _data(txn, chunk), len(chunk)
    for level, fanout in enumerate(fanouts, start=1):
        child = _node(txn, [kind, level, size * fanout, [[size, child]] * fanout])
        size *= fanout
    return child


def ext(kind: int, oid: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(kind, oid))


def craft(store_path: Path, build: Callable[[Transaction, Encoder], dict[str, bytes]]) -> str:
    """A checkpoint whose sections `build` encodes (as api.take does, minus its checks)."""
    store = Store.open(store_path)
    try:
        txn = store.transaction()
        sections = build(txn, Encoder(txn, cdc=store.config.cdc))
        txn.commit()
        manifest = Manifest(
            subject=Subject.parse("agent:bomb"),
            sections=sections,
            layout={"kind": "document", "format": "json"},
            producer={"name": "bomb-test"},
        )
        return store.write_manifest(manifest).hex()
    finally:
        store.close()


def gib_bomb(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
    string = ext(EXT_STR, repeated_tree(txn, EXT_STR, b"x" * CHUNK, [STRING_CHUNKS]))
    return {"memory": enc.encode_root({"big": [Encoded(string)] * LIST_ITEMS, "note": "a 1 GiB reference bomb"})}


def expected_gib_json(indent: bool, prefix: str = "", suffix: str = "") -> tuple[int, str]:
    """(size, sha256) of the 1 GiB bomb's JSON (between `prefix` and `suffix`), computed
    piece by piece (never more than one 16 MiB string at a time)."""
    s = ('"' + "x" * (CHUNK * STRING_CHUNKS) + '"').encode()

    def parts() -> Iterator[bytes]:
        yield prefix.encode()
        yield b'{\n  "big": [\n' if indent else b'{"big": ['
        for i in range(LIST_ITEMS):
            last = i == LIST_ITEMS - 1
            yield (b"    " if indent else b"") + s + ((b"\n" if last else b",\n") if indent else (b"" if last else b", "))
        yield (
            b'  ],\n  "note": "a 1 GiB reference bomb"\n}\n' if indent else b'], "note": "a 1 GiB reference bomb"}'
        )  # restore ends with a newline
        yield suffix.encode()

    h, n = hashlib.sha256(), 0
    for part in parts():
        h.update(part)
        n += len(part)
    return n, h.hexdigest()


def expected_gib_view(path: Path) -> tuple[int, str]:
    """(size, sha256) of `ckpt cat` of the 1 GiB bomb: the manifest's fields, then the state."""
    ck = open_checkpoint(str(path))
    head = json.dumps({**info_dict(ck.id, ck.manifest), "layout": ck.manifest.layout}, ensure_ascii=False)
    n, h = expected_gib_json(indent=False, prefix=head[:-1] + ', "sections": {"memory": ', suffix="}}\n")
    ck.source.close()
    return n, h


def tib_blob(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
    data = ext(EXT_BYTES, repeated_tree(txn, EXT_BYTES, b"\0" * (1 << 20), [128, 128, 64]))
    entry = {"type": "file", "size": 1 << 40, "mode": 0o644, "mtime_ns": 0, "data": Encoded(data)}
    return {"memory": enc.encode({"x": 1}), "blobs": enc.encode({"huge.bin": entry})}


def export(store: Path, cid: str, out: Path) -> Path:
    r = run_cli("export", cid, "-o", out, "--store", store)
    assert r.returncode == 0, describe(r)
    return out


def run_measured(*args: str | os.PathLike[str], mem_limit: int | None = STREAM_MEM_LIMIT) -> tuple[int, bytes, int, int, str]:
    """Run the real CLI; returns (exit code, stderr, peak RSS in bytes, stdout size,
    stdout sha256). stdout is hashed as it arrives, never held."""
    proc = subprocess.Popen(ckpt_argv(*args, mem_limit=mem_limit), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    assert proc.stdout is not None and proc.stderr is not None
    h, n, err = hashlib.sha256(), [0], [b""]

    def drain_err() -> None:
        assert proc.stderr is not None
        err[0] = proc.stderr.read()

    t = threading.Thread(target=drain_err)
    t.start()
    while piece := proc.stdout.read(1 << 20):
        h.update(piece)
        n[0] += len(piece)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    t.join()
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode, err[0], usage.ru_maxrss * 1024, n[0], h.hexdigest()


def file_digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(1 << 20):
            h.update(piece)
    return path.stat().st_size, h.hexdigest()


@pytest.fixture(scope="module")
def gib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("gib")
    store = root / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft(store, gib_bomb)
    return store, cid, export(store, cid, root / "gib.ckpt")


def test_gib_bomb_is_a_small_file(gib: tuple[Path, str, Path]) -> None:
    assert gib[2].stat().st_size < 2048


@pytest.mark.slow  # writes and hashes 1 GiB: ~15 s
def test_cat_streams_the_gib_bomb(gib: tuple[Path, str, Path]) -> None:
    """`ckpt cat` writes the whole 1 GiB (compact JSON: stdout is a pipe) in bounded memory."""
    code, err, rss, size, digest = run_measured("cat", gib[2])
    assert code == 0, err.decode(errors="replace")
    assert (size, digest) == expected_gib_view(gib[2])
    assert rss < RSS_CEILING, f"ckpt cat peaked at {rss / 2**20:.0f} MiB"


@pytest.mark.slow  # writes and hashes 1 GiB: ~15 s
def test_restore_streams_the_gib_bomb(gib: tuple[Path, str, Path], tmp_path: Path) -> None:
    """`ckpt restore -o` writes exactly the document json.dumps would, in bounded memory."""
    out = tmp_path / "state.json"
    try:
        code, err, rss, _size, _digest = run_measured("restore", gib[2], "-o", out)
        assert code == 0, err.decode(errors="replace")
        assert file_digest(out) == expected_gib_json(indent=True)
        assert rss < RSS_CEILING, f"ckpt restore -o peaked at {rss / 2**20:.0f} MiB"
    finally:
        out.unlink(missing_ok=True)


def _capped_argv(*args: str | os.PathLike[str], fsize: int) -> list[str]:
    """The real CLI under RLIMIT_AS (STREAM_MEM_LIMIT) and RLIMIT_FSIZE: a regression
    cannot fill the disk, a write past `fsize` fails (EFBIG) instead."""
    code = (
        "import resource, signal; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({STREAM_MEM_LIMIT}, {STREAM_MEM_LIMIT})); "
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize})); "
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "from ckptcli.cli import entry; entry()"
    )
    return [sys.executable, "-c", code, *[str(a) for a in args]]


def test_restore_refuses_the_tib_blob(tmp_path: Path) -> None:
    """A 1 KB file whose one blob declares 1 TiB: `restore --blobs` refuses it against the
    free space (LIMIT_EXCEEDED, one line) before writing a byte; the target is not created."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft(store, tib_blob)
    path = export(store, cid, tmp_path / "tib.ckpt")
    assert path.stat().st_size < 2048
    assert shutil.disk_usage(tmp_path).free < 1 << 40, "this test needs a file system with less than 1 TiB free"
    target = tmp_path / "target"
    r = subprocess.run(
        _capped_argv("restore", path, "--blobs", target, "--no-state", fsize=64 << 20),
        capture_output=True,
        env=child_env(),
        timeout=120,
        check=False,
    )
    assert r.returncode == ExitCode.LIMIT_EXCEEDED, describe(r)
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: the blobs to restore hold 1.0 TiB"), lines
    assert "--force" in lines[0]
    assert not target.exists()


def small_blob(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
    data = ext(EXT_BYTES, repeated_tree(txn, EXT_BYTES, b"ab" * (1 << 19), [4]))
    entry = {"type": "file", "size": 4 << 20, "mode": 0o644, "mtime_ns": 0, "data": Encoded(data)}
    return {"memory": enc.encode({"x": 1}), "blobs": enc.encode({"four.bin": entry})}


def test_free_space_check_and_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> None:  # type: ignore[no-untyped-def]
    """A 4 MiB blob against a mocked free space: refused (nothing written) when the free
    space is short of it plus the margin, written with --force, and written when there
    is room; the library's restore_blobs(force=...) is what the option sets."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft(store, small_blob)
    free = {"bytes": (4 << 20) + blobs.FREE_SPACE_MARGIN - 1}
    asked: list[Path] = []

    def fake_free_space(path: Path) -> int:
        asked.append(path)
        return free["bytes"]

    monkeypatch.setattr(blobs, "free_space", fake_free_space)
    refused = tmp_path / "refused" / "deeper"
    r = cli("restore", cid, "--store", store, "--blobs", refused, "--no-state")
    assert r.code == ExitCode.LIMIT_EXCEEDED, r
    assert r.err.count("\n") == 1 and r.err.startswith("ckpt: error: the blobs to restore hold 4.0 MiB"), r.err
    assert not (tmp_path / "refused").exists()
    assert asked == [refused]

    forced = tmp_path / "forced"
    r = cli("restore", cid, "--store", store, "--blobs", forced, "--no-state", "--force")
    assert r.code == 0, r
    assert (forced / "four.bin").read_bytes() == b"ab" * (2 << 20)

    free["bytes"] += 1
    roomy = tmp_path / "roomy"
    r = cli("restore", cid, "--store", store, "--blobs", roomy, "--no-state")
    assert r.code == 0, r
    assert (roomy / "four.bin").stat().st_size == 4 << 20


def test_free_space_of_a_missing_target_is_its_nearest_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []

    def disk_usage(path: Path) -> Any:
        seen.append(Path(path))
        return shutil._ntuple_diskusage(100, 50, 50)  # type: ignore[attr-defined]

    monkeypatch.setattr(blobs.shutil, "disk_usage", disk_usage)
    assert blobs.free_space(tmp_path / "a" / "b" / "c") == 50
    (tmp_path / "a").mkdir()
    assert blobs.free_space(tmp_path / "a" / "b") == 50
    assert seen == [tmp_path, tmp_path / "a"]


def bad_tail(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
    """37 MiB of good string (streamed, past the stdout spool's 32 MiB in memory), then a
    string that is not UTF-8: found only after most of the document is written."""
    good = ext(EXT_STR, repeated_tree(txn, EXT_STR, b"x" * CHUNK, [600]))
    bad = ext(EXT_STR, repeated_tree(txn, EXT_STR, b"\xff", [1]))
    return {"memory": enc.encode_root({"good": Encoded(good), "bad": Encoded(bad)})}


def test_a_failure_mid_stream_leaves_no_output(tmp_path: Path) -> None:
    """Streaming does not mean half a document: stdout stays empty (spooled until
    complete) and -o leaves neither the file nor its temporary behind."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft(store, bad_tail)
    out = tmp_path / "out" / "state.json"
    out.parent.mkdir()
    for args in (["cat", cid], ["restore", cid], ["restore", cid, "-o", out]):
        r = run_cli(*args, "--store", store, mem_limit=STREAM_MEM_LIMIT, timeout=120)
        assert r.returncode == ExitCode.CORRUPT, describe(r)
        assert r.stdout == b"", f"ckpt {args[0]} printed {len(r.stdout)} bytes"
        assert r.stderr.decode().startswith("ckpt: error: ") and r.stderr.count(b"\n") == 1, describe(r)
    assert list(out.parent.iterdir()) == []
