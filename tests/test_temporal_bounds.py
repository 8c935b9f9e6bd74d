"""Bounds of the Temporal adapter: the derived state of a long history holds the newest
KEEP closed records (and signals) of each kind, the older ones counted, so an import's
memory does not grow with the history's signals or activities (two imports' peak RSS,
each in a subprocess, show it); and hostile inputs found by an outside tester: a directory whose
`*.json` entries are no regular files or link out of it, an integer beyond 64 bits.
Real histories (fixtures/temporal/, and ones made from them through temporalio's
protobufs), real subprocesses, no server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

import ckptcli
from ckptcli.adapters.temporal.events import KEEP
from ckptcli.adapters.temporal.synth import synthesize_signals
from ckptcli.errors import ExitCode
from tests.test_temporal import COMPLETE, _ckpt, _import, _state


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _signals(path: Path) -> list[tuple[str, int, Any]]:
    """The signals of a history, read through temporalio's protobufs and payload converter."""
    conv = DataConverter.default.payload_converter
    out = []
    for e in WorkflowHistory.from_json("x", path.read_text()).events:
        if e.WhichOneof("attributes") == "workflow_execution_signaled_event_attributes":
            a = e.workflow_execution_signaled_event_attributes
            (value,) = conv.from_payloads(list(a.input.payloads))
            out.append((a.signal_name, e.event_id, value))
    return out


def test_a_signal_heavy_history_keeps_the_newest_signals_and_counts_them_all(store_dir: Path, tmp_path: Path) -> None:
    """The derived state held every signal with its decoded input: memory grew with the
    history (657 MB for 200,000 signals). It holds the newest KEEP, and the count."""
    path = tmp_path / "sig.json"
    synthesize_signals(COMPLETE, 2 * KEEP + 500, path, payload_bytes=100)
    want = _signals(path)
    result = _import(store_dir, path)
    assert result["events"] == len(want) + 4
    made = result["workflows"][0]["checkpoints"]
    # the replayed state of each checkpoint of the import (the subject's latest is the last)
    states = {cid: _state(store_dir, cid)["ext"]["temporal"] for cid in made}
    assert ckptcli.open_checkpoint("workflow:sig", store_path=store_dir).id.hex() == made[-1]
    t = states[made[-1]]
    assert [(s["name"], s["event_id"], s["input"]) for s in t["signals"]] == want[-KEEP:]
    assert t["signals_received"] == len(want) and t["left_out"] == {"signals": len(want) - KEEP}
    # each checkpoint of the import is at the state its own reading of the history gives
    for cid in made:
        seq = int(ckptcli.open_checkpoint(cid, store_path=store_dir).manifest.labels["events.seq"])
        got = states[cid]
        upto = [s for s in want if s[1] <= seq]
        assert got["signals_received"] == len(upto) and [s["event_id"] for s in got["signals"]] == [s[1] for s in upto[-KEEP:]]
    # `ckpt show` tells the signals received
    r = _ckpt(store_dir, "show", "workflow:sig", "--section", "ext:temporal")
    assert r.returncode == 0 and f'"signals_received": {len(want)}' in r.stdout.decode(), r.stdout.decode()[:2000]


RSS_PROBE = textwrap.dedent(
    """
    import resource, sys
    import ckptcli.adapters.temporal.importer as importer
    importer.SOFT_EVENTS = 250  # small checkpoints: what is left to grow is the derived state
    from ckptcli.cli import entry
    sys.argv = ["ckpt", "--store", sys.argv[1], "import", "temporal", sys.argv[2], "-q"]
    try:
        entry()
    finally:
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
    """
)


def _peak_kib(store: Path, path: Path) -> int:
    """The import's max RSS (KiB), in a process of its own."""
    ckptcli.init_store(store)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("CKPT_STORE", None)
    r = subprocess.run([sys.executable, "-c", RSS_PROBE, str(store), str(path)], capture_output=True, env=env, timeout=600)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 0 and len(lines) == 1, lines
    return int(lines[0]) // (1024 if sys.platform == "darwin" else 1)  # bytes there, KiB on Linux


def test_a_signal_heavy_import_does_not_grow_with_its_signals(tmp_path: Path) -> None:
    """2,000 and then 8,000 signals of 4 KB (11 and 45 MB of history): the old state held
    every decoded input, twice over with the take cache's packed copy, and its peak grew by
    112 MiB between the two (99 -> 211 MiB); the bounded state holds 1,000, and the peak
    grows by what the store's object index takes (6 MiB measured). (A data limit,
    RLIMIT_DATA, would count the stacks of threads whose number varies with the machine's
    cores: the growth between two sizes does not.)"""
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    synthesize_signals(COMPLETE, 2_000, small, payload_bytes=4_000)
    n = synthesize_signals(COMPLETE, 8_000, big, payload_bytes=4_000)
    growth_mib = (_peak_kib(tmp_path / "s1", big) - _peak_kib(tmp_path / "s2", small)) / 1024
    assert growth_mib < 30, growth_mib
    t = _state(tmp_path / "s1", "workflow:big")["ext"]["temporal"]
    assert t["signals_received"] == n - 4 and len(t["signals"]) == KEEP


def test_a_directory_says_what_it_skips_and_refuses_a_link_out_of_it(store_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    (folder / "a.json").write_text(COMPLETE.read_text())
    (folder / "sub.json").mkdir()
    os.mkfifo(folder / "pipe.json")
    (folder / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (folder / "same.json").symlink_to(folder / "a.json")  # a link inside the directory is read
    r = _ckpt(store_dir, "import", "temporal", folder, "--json")
    assert r.returncode == 0, r.stderr.decode()
    warnings = r.stderr.decode().splitlines()
    assert warnings == [
        f"ckpt: warning: {folder / 'gone.json'}: skipped: a dangling symbolic link",
        f"ckpt: warning: {folder / 'pipe.json'}: skipped: a FIFO",
        f"ckpt: warning: {folder / 'sub.json'}: skipped: a directory",
    ], warnings
    result = json.loads(r.stdout)
    assert [w["subject"] for w in result["workflows"]] == ["workflow:a", "workflow:same"] and len(result["skipped"]) == 3
    outside = tmp_path / "secret.json"
    outside.write_text(COMPLETE.read_text())
    (folder / "out.json").symlink_to(outside)
    r = _ckpt(store_dir, "import", "temporal", folder)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 4 and lines[-1].startswith("ckpt: error: ") and "outside" in lines[-1] and str(outside) in lines[-1], lines
    assert len(ckptcli.open_store(store_dir).manifest_ids()) == 2  # nothing more written


def test_an_integer_beyond_64_bits_is_bad_input_not_corrupt_json(store_dir: Path, tmp_path: Path) -> None:
    """yajl (ijson's C backend) stops at an integer beyond 64 bits with "integer overflow":
    it was reported as malformed JSON (exit 5) for a file that is valid JSON."""
    history = json.loads(COMPLETE.read_text())
    history["events"][4]["taskId"] = 10**30
    path = tmp_path / "big.json"
    path.write_text(json.dumps(history))
    r = _ckpt(store_dir, "import", "temporal", path)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 4 and len(lines) == 1, lines
    assert lines[0].startswith(f"ckpt: error: {path}: event 5 (ActivityTaskScheduled), field taskId holds an integer beyond 64 bits"), lines


def test_a_deeply_nested_file_is_refused_without_taking_gigabytes(tmp_path: Path) -> None:
    """20,000 brackets (40 KB) took 1 GB before the depth limit refused them (100 KB: 6 GB):
    ijson built every parse event of a 64 KiB read, each with a prefix as long as its
    depth, before the first one reached the limit."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"events": ' + "[" * 20_000 + "]" * 20_000 + "}")
    ckptcli.init_store(tmp_path / "d")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("CKPT_STORE", None)
    r = subprocess.run([sys.executable, "-c", RSS_PROBE, str(tmp_path / "d"), str(deep)], capture_output=True, env=env, timeout=600)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == ExitCode.LIMIT_EXCEEDED and "nests deeper than" in lines[0] and len(lines) == 2, lines
    small = tmp_path / "small.json"
    synthesize_signals(COMPLETE, 10, small)
    growth_mib = (int(lines[1]) - _peak_kib(tmp_path / "s", small)) / 1024
    assert growth_mib < 200, growth_mib
