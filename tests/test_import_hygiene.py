"""The core never imports the UI: format, store, api and verify load without typer, rich
or textual (checked in a fresh interpreter, where nothing else has imported them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CORE = [
    "ckptcli",
    "ckptcli.api",
    "ckptcli.errors",
    "ckptcli.format.framing",
    "ckptcli.format.values",
    "ckptcli.format.manifest",
    "ckptcli.format.walk",
    "ckptcli.store.repository",
    "ckptcli.store.single",
    "ckptcli.store.verify",
    "ckptcli.blobs",
    "ckptcli.format.jsonview",
    "ckptcli.document",
    "ckptcli.history.events",
    "ckptcli.history.recorder",
    "ckptcli.history.replay",
    "ckptcli.adapters.generic",
    "ckptcli.doctor",
    "ckptcli.adapters.langgraph.doctor",  # `ckpt doctor` where LangGraph is not installed too
    "ckptcli.history.timeline",  # the TUI's models: the history graph and the event timeline
    "ckptcli.store.stats",
    "ckptcli.store.repair",
]
UI = ("typer", "rich", "textual", "click")


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_no_ui(module: str) -> None:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {UI!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_a_whole_take_and_restore_imports_no_ui(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = f"""
import sys, json, ckptcli
s = ckptcli.init_store({str(tmp_path / "s")!r})
cid = ckptcli.take(s, {{"memory": {{"x": "y" * 100000}}}}, subject="agent:a").id
assert ckptcli.open_checkpoint(cid.hex(), s).state() == {{"memory": {{"x": "y" * 100000}}}}
assert ckptcli.verify(s, read_data=True).ok
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ("typer", "rich", "textual"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_the_cli_and_the_tui_command_start_without_textual() -> None:
    """`ckpt --help` stays fast: Textual is imported inside `ckpt tui` only."""
    code = (
        "import sys, json, ckptcli.cli.app, ckptcli.cli.commands.tui; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'textual')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_the_check_can_fail() -> None:
    """The same probe does see a UI import when there is one."""
    code = "import sys, json, ckptcli.cli.app; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'typer')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) != []
