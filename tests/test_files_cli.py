"""ckpt ls-files, ckpt dump and ckpt stats on real stores."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import ExitCode
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return api.init_store(tmp_path / "store")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_bytes(b"print(1)\n")
    (root / "big.bin").write_bytes(os.urandom(300_000))
    (root / "link").symlink_to("src/main.py")
    return root


@pytest.fixture
def ck(store: Store, ws: Path, tmp_path: Path) -> api.Checkpoint:
    single = tmp_path / "notes.txt"
    single.write_bytes(b"a note\n")
    r = api.take(store, {"memory": {"x": 1}}, subject="agent:a", blobs={"ws": ws, "notes": single})
    return api.open_checkpoint(r.hex, store)


def test_ls_files_lists_paths_sizes_and_origins(cli: Any, store: Store, ck: api.Checkpoint, ws: Path, tmp_path: Path) -> None:
    r = cli("ls-files", ck.hex, "--store", store.location, "--json")
    assert r.code == 0, r.err
    rows = {f["path"]: f for f in json.loads(r.out)}
    assert sorted(rows) == ["notes", "ws", "ws/big.bin", "ws/link", "ws/src", "ws/src/main.py"]
    assert rows["ws/big.bin"]["size"] == 300_000 and rows["ws/big.bin"]["type"] == "file"
    assert rows["ws"]["origin"] == str(ws) and rows["ws/src/main.py"]["origin"] == str(ws / "src" / "main.py")
    assert rows["notes"]["origin"] == str(tmp_path / "notes.txt")
    assert rows["ws/link"]["target"] == "src/main.py"

    r = cli("ls-files", ck.hex, "ws/src", "--store", store.location)
    assert r.code == 0, r.err
    assert [line.split()[-1] for line in r.out.splitlines()] == ["ws/src/", "ws/src/main.py"]
    r = cli("ls-files", ck.hex, "--store", store.location, "--long")
    assert f"(from {ws})" in r.out and "-rw-" in r.out


def test_ls_files_unknown_path(cli: Any, store: Store, ck: api.Checkpoint) -> None:
    r = cli("ls-files", ck.hex, "ws/nope", "--store", store.location)
    assert r.code == ExitCode.NOT_FOUND and r.err.startswith("ckpt: error: ") and "ws/nope does not exist" in r.err


def test_dump_writes_one_file(store: Store, ck: api.Checkpoint, ws: Path, tmp_path: Path) -> None:
    r = run_ckpt("dump", ck.hex, "ws/big.bin", "--store", store.location)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ws / "big.bin").read_bytes()
    r = run_ckpt("dump", ck.hex, "notes", "--store", store.location, "-o", tmp_path / "n.txt")
    assert r.returncode == 0 and r.stdout == b"" and (tmp_path / "n.txt").read_bytes() == b"a note\n"


@pytest.mark.parametrize(
    ("path", "code", "says"),
    [
        ("ws/src", ExitCode.INVALID_INPUT, "is a directory"),
        ("ws/link", ExitCode.INVALID_INPUT, "symlink"),
        ("nope", ExitCode.NOT_FOUND, "does not exist"),
    ],
)
def test_dump_refuses_what_is_not_a_file(cli: Any, store: Store, ck: api.Checkpoint, path: str, code: int, says: str) -> None:
    r = cli("dump", ck.hex, path, "--store", store.location)
    assert r.code == code and says in r.err and r.out == ""


def test_stats_counts_dedup_per_subject(cli: Any, store: Store, ws: Path) -> None:
    for i in range(3):  # the same 300 KB three times: stored once
        api.take(store, {"memory": {"i": i}}, subject="agent:a", blobs={"ws": ws})
    api.take(store, {"memory": {"other": "y" * 50_000}}, subject="workflow:b")
    r = cli("stats", "--store", store.location, "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert (s["checkpoints"], s["subjects"]) == (4, 2)
    a, b = s["per_subject"]["agent:a"], s["per_subject"]["workflow:b"]
    assert a["checkpoints"] == 3 and b["checkpoints"] == 1
    assert a["standalone_bytes"] > 3 * 300_000 and 300_000 < a["unique_bytes"] < 2 * 300_000
    assert s["dedup_ratio"] > 2.0
    assert s["stored_bytes"] <= s["pack_bytes"] and s["packs"] >= 1 and s["objects"] == s["indexed_objects"]
    assert s["unique_bytes"] == a["unique_bytes"] + b["unique_bytes"]  # nothing shared between them
    text = cli("stats", "--store", store.location)
    assert text.code == 0 and "dedup ratio" in text.out and "agent:a" in text.out


def test_stats_of_one_checkpoint_has_no_dedup(cli: Any, store: Store, ws: Path) -> None:
    api.take(store, {"memory": {}}, subject="agent:a", blobs={"ws": ws})
    s = json.loads(cli("stats", "--store", store.location, "--json").out)
    assert s["standalone_bytes"] == s["unique_bytes"] > 300_000 and s["dedup_ratio"] == 1.0


def test_stats_does_not_call_logical_what_is_not_the_sum_of_ls_size(cli: Any, store: Store) -> None:
    """`ckpt ls`'s SIZE is the logical size a take records (strings, bytes, files: a state
    of numbers alone is 0 B); stats counted each checkpoint's encoded objects, structure
    included, and called that "logical" too. It is "standalone" now, in text and JSON
    (where `logical_bytes` stays, deprecated, the same figure, for the scripts reading it)."""
    api.take(store, {"memory": {"n": list(range(1000))}}, subject="agent:a")
    rows = json.loads(cli("ls", "--store", store.location, "--json").out)
    assert [r["stats"]["logical_bytes"] for r in rows] == [0]
    s = json.loads(cli("stats", "--store", store.location, "--json").out)
    assert s["logical_bytes"] == s["standalone_bytes"] and s["per_subject"]["agent:a"]["logical_bytes"] == s["standalone_bytes"], s
    assert s["standalone_bytes"] == s["per_subject"]["agent:a"]["standalone_bytes"] > 1000
    text = cli("stats", "--store", store.location).out
    assert "standalone:" in text and "STANDALONE" in text and "logical" not in text.lower(), text
