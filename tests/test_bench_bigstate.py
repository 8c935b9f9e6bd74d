"""bench.bigstate's one-core row "the format's work" stands for what a take must do: it
cuts the same chunks a take of the same files stores (so its SHA-256 and zstd run over the
same bytes), and it runs as the benchmark runs it, a process of its own."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import ckptcli
from bench.bigstate import format_work
from ckptcli.format.ev import OBJ_DATA
from tests.conftest import REPO


def test_the_format_work_cuts_the_chunks_a_take_stores(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    data.mkdir()
    rng = random.Random(5)
    (data / "random.bin").write_bytes(rng.randbytes(3 * 2**20))
    (data / "text.jsonl").write_bytes(b"".join(b'{"step": %d, "note": "%s"}\n' % (i, b"x" * rng.randrange(90)) for i in range(40_000)))
    ids = format_work(data)
    assert len(ids) > 40  # several chunks a file: the comparison below means something
    store = tmp_path / "store"
    assert cli("init", store).code == 0
    assert cli("take", "--blob", f"state={data}", "-S", "process:b", "--store", store).code == 0
    index = ckptcli.open_store(store).index()
    assert {oid for oid, entry in index.items() if entry.obj_type == OBJ_DATA} == set(ids)


def test_the_format_work_runs_as_the_benchmark_runs_it(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc" * 100_000)
    out = subprocess.run([sys.executable, "-m", "bench.bigstate", "--format-work", str(tmp_path)], cwd=REPO, capture_output=True)
    assert out.returncode == 0, out.stderr
