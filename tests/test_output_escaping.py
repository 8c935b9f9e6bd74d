"""Names, messages, labels and keys from a checkpoint someone else made reach a terminal
escaped: every human (not --json) listing shows control characters (newline, ESC, C1,
bidi overrides) as escapes, `\\n`, `\\x1b`, `\\u202e`, and rich markup in them literally;
--json keeps the exact values. docs/security.md tells users to inspect untrusted
checkpoints with exactly these commands."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ckptcli.cli.output import safe
from tests.conftest import run_ckpt

# what a terminal acts on: C0 but for the line ends we expect, DEL, C1, separators, bidi
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SGR = re.compile("\x1b\\[[0-9;]*m")  # rich's own colours, when asked for

HOSTILE_FILE = "zz\x1b[1A\x1b[2K"
FORGED_FILE = "notes\nwould write nothing else; 0 deleted"
BIDI_FILE = "invoice\u202egpj.exe"
MARKUP_FILE = "[red]x"  # rich would print a red x
MESSAGE = "clear\x1b[2J\x9b31m now [bold]loud[/bold]\u202e"
LABEL = "k=v\x1b]0;title\x07"


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "store"
    assert run_ckpt("init", store).returncode == 0
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "authorized_keys").write_text("ssh-ed25519 ATTACKER\n")
    for name in (HOSTILE_FILE, FORGED_FILE, BIDI_FILE, MARKUP_FILE):
        (ws / name).write_text("x")
    doc = json.dumps({"memory": {"k\x1b[31m": 1, "[b]m[/b]": "v"}}).encode()
    r = run_ckpt("take", "-", "--store", store, "-S", "agent:w", "-m", MESSAGE, "-l", LABEL, input=doc)
    assert r.returncode == 0, r.stderr
    doc = json.dumps({"memory": {"k\x1b[31m": 2, "[b]m[/b]": "w", "new\u202ekey": 3}}).encode()
    r = run_ckpt("take", "-", "--store", store, "-S", "agent:w", "-m", MESSAGE, "-l", LABEL, "--blob", f"ws={ws}", input=doc)
    assert r.returncode == 0, r.stderr
    assert run_ckpt("tag", "v1", "latest", "--store", store).returncode == 0
    return store, tmp_path


COMMANDS = [
    ("ls",),
    ("ls", "--columns", "id,labels,all-labels,message"),
    ("log", "agent:w"),
    ("log", "agent:w", "-p"),
    ("show", "latest"),
    ("reflog",),
    ("reflog", "agent:w"),
    ("ls-files", "latest"),
    ("ls-files", "latest", "--long"),
    ("restore", "latest", "--no-state", "--in-place", "--dry-run"),
    ("diff", "agent:w~1", "agent:w"),
    ("tag",),
    ("refs",),
    ("stats",),
]


@pytest.mark.parametrize("color", [False, True], ids=["plain", "color"])
def test_listings_escape_control_characters_and_show_markup_literally(hostile: tuple[Path, Path], color: bool) -> None:
    store, cwd = hostile
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "400"} if color else {"NO_COLOR": "1", "COLUMNS": "400"}
    if not color:
        os.environ.pop("FORCE_COLOR", None)
    seen: dict[str, str] = {}
    for args in COMMANDS:
        r = run_ckpt(*args, "--store", store, env=env, cwd=cwd)
        assert r.returncode == 0, (args, r.stderr)
        out = r.stdout.decode()
        text = SGR.sub("", out) if color else out
        assert not RAW_CONTROL.search(text), (args, text)
        assert not RAW_CONTROL.search(SGR.sub("", r.stderr.decode())), (args, r.stderr)
        seen[" ".join(args)] = text
    joined = "\n".join(seen.values())
    # each hostile name is there, escaped, on its own line: no line forged, none erased
    for args in (("ls-files latest"), ("restore latest --no-state --in-place --dry-run")):
        lines = seen[args].splitlines()
        assert any(line.endswith(safe(HOSTILE_FILE)) for line in lines), seen[args]
        assert any(line.endswith(safe(FORGED_FILE)) for line in lines), seen[args]
        assert not any(line.startswith("would write nothing") for line in lines), seen[args]
        assert any(line.endswith("invoice\\u202egpj.exe") for line in lines), seen[args]
        assert any(line.endswith("[red]x") for line in lines), seen[args]  # markup shown, not applied
    assert "ws/zz\\x1b[1A\\x1b[2K" in seen["ls-files latest"]
    for args in ("ls", "log agent:w", "show latest"):
        assert "clear\\x1b[2J\\x9b31m now [bold]loud[/bold]\\u202e" in seen[args], (args, seen[args])
    assert "k=v\\x1b]0;title\\x07" in seen["show latest"] and "k=v\\x1b]0;title\\x07" in seen["ls --columns id,labels,all-labels,message"]
    assert "[b]m[/b]" in seen["diff agent:w~1 agent:w"]  # keys print quoted and escaped, as JSON (k\\u001b[31m)
    assert "new\\u202ekey" in seen["log agent:w -p"]
    assert "\\u202e" in joined


def test_json_keeps_the_exact_values(hostile: tuple[Path, Path]) -> None:
    store, _ = hostile
    files = {f["path"] for f in json.loads(run_ckpt("ls-files", "latest", "--json", "--store", store).stdout)}
    assert {f"ws/{n}" for n in (HOSTILE_FILE, FORGED_FILE, BIDI_FILE, MARKUP_FILE)} <= files
    info = json.loads(run_ckpt("show", "latest", "--json", "--store", store).stdout)
    assert info["message"] == MESSAGE and info["labels"] == {"k": "v\x1b]0;title\x07"}


def test_safe_escapes_unambiguously() -> None:
    assert safe("plain name-1.txt") == "plain name-1.txt"
    assert safe("a\nb\tc\rd\x1b\x7f\x85\u202e\u2028") == "a\\nb\\tc\\rd\\x1b\\x7f\\x85\\u202e\\u2028"
    assert safe("C:\\dir\\n") == "C:\\\\dir\\\\n"  # a backslash in a name is not an escape
    assert safe("C:\\dir\n", backslash=False) == "C:\\dir\\n"
    assert safe("café 中文 👩\u200d💻") == "café 中文 👩\u200d💻"  # printable Unicode (and emoji joiners) as they are
