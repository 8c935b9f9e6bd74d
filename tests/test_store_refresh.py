"""A long-lived Store finds objects other processes wrote after it read the index,
through their new index files, without reopening and without reading packs whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.history.recorder import Recorder

FORK = """
import sys
from ckptcli import api
st = api.open_store(sys.argv[1])
r = api.take(st, {"memory": {"n": 2, "big": "y" * 200000}, "plan": [], "tools": [], "events": []}, subject="agent:fork", parents=[])
print(r.hex)
"""


def test_recorder_opens_a_fork_another_process_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = api.init_store(tmp_path / "store")
    api.take(st, {"memory": {"n": 1, "big": "x" * 200000}}, subject="agent:main")
    assert st.index()  # read now: the fork below is written after
    out = subprocess.run([sys.executable, "-c", FORK, str(tmp_path / "store")], capture_output=True, text=True, timeout=120, check=True)
    fork = out.stdout.strip()

    reads: list[str] = []
    real_read = st.backend.read

    def read(path: str) -> Any:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(st.backend, "read", read)
    rec = Recorder.open(st, "agent:fork", tmp_path / "j.journal", base=fork)
    try:
        assert rec.state["memory"]["n"] == 2 and len(rec.state["memory"]["big"]) == 200000
    finally:
        rec.close()
    assert not [p for p in reads if p.startswith("packs/")], f"packs read whole instead of the new index file: {reads}"
    assert [p for p in reads if p.startswith("index/")], reads
