"""`ckpt restore` pays at start-up for what it uses: ckptcli.api imports the module of a
name when the name is first used, so a restore imports neither the writer, copy nor
transfer (checked in a fresh interpreter, the restore a real one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ckptcli
import ckptcli.api

NOT_FOR_RESTORE = ("ckptcli.writer", "ckptcli.copy", "ckptcli.transfer", "ckptcli.store.verify")


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('ckptcli'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_a_restore_imports_no_writer(tmp_path: Path) -> None:
    st = ckptcli.init_store(tmp_path / "s")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f.bin").write_bytes(bytes(range(256)) * 4096)
    ckptcli.take(st, {"memory": {"k": 1}}, subject="agent:a", blobs={"data": tmp_path / "data"})
    code = f"""
from ckptcli.cli import app
app._register(["restore"])
assert app.run(["restore", "latest", "--no-state", "--blobs", {str(tmp_path / "out")!r}, "--store", {str(tmp_path / "s")!r}]) == 0
"""
    loaded = _modules_after(code)
    assert "ckptcli.checkpoint" in loaded and "ckptcli.blobs" in loaded  # the probe sees what it uses ...
    assert not loaded & set(NOT_FOR_RESTORE), loaded & set(NOT_FOR_RESTORE)  # ... and nothing of a take
    assert (tmp_path / "out" / "data" / "f.bin").read_bytes() == bytes(range(256)) * 4096


def test_every_name_of_the_api_is_there_when_asked_for() -> None:
    for name in ckptcli.api.__all__:
        assert getattr(ckptcli.api, name) is not None, name
    assert set(ckptcli.api.__all__) <= set(dir(ckptcli.api))
    from ckptcli.api import CopyResult, take, write_document  # from-imports resolve the lazy names too
    from ckptcli.document import write_value
    from ckptcli.writer import take as writer_take

    assert take is writer_take and write_document is write_value and CopyResult.__name__ == "CopyResult"
    loaded = _modules_after("from ckptcli.api import take")
    assert "ckptcli.writer" in loaded and "ckptcli.copy" not in loaded
