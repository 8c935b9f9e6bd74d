"""The Temporal adapter where temporalio (and ijson) are not installed: `ckpt doctor`
says so with the install hint, `ckpt import temporal` is one line naming the install,
and what needs neither (the reducers: `ckpt replay`, `show` of an imported history)
still works. The packages are hidden from a real `ckpt` process (sys.modules[name] =
None, which is how Python spells "not importable"), so these run whether or not they
are installed here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ckptcli

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "temporal" / "test_replayer_event_tracing_alternate.json"


def _ckpt_without_temporalio(*args: str | Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "for name in ('temporalio', 'ijson'):\n"
        "    sys.modules[name] = None\n"
        "from ckptcli.cli import entry\n"
        "sys.argv = ['ckpt', *sys.argv[1:]]\n"
        "entry()\n"
    )
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_doctor_says_not_installed_with_the_install_hint() -> None:
    r = _ckpt_without_temporalio("doctor", "--adapter", "temporal", "--json")
    assert r.returncode == 1, r.stderr
    (row,) = json.loads(r.stdout)["adapters"]
    assert row["name"] == "temporal" and row["loaded"] is True
    assert row["ok"] is False
    assert row["reason"] == "temporalio and ijson not installed: pip install 'ckptcli[temporal]'"
    assert row["details"] == {"temporalio": None, "missing": ["temporalio", "ijson"]}
    r = _ckpt_without_temporalio("doctor", "--adapter", "temporal")
    assert "adapter temporal  not usable here: workflow: temporalio and ijson not installed: pip install 'ckptcli[temporal]'" in r.stdout
    # in a full doctor run an optional package not installed is said, not a failure
    r = _ckpt_without_temporalio("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["adapter temporal"]["status"] == "ok" and checks["adapter temporal"]["detail"].startswith("not installed")
    # the component row reads the distribution's metadata (still there): it names the extra
    from ckptcli.doctor import COMPONENTS

    assert "component temporalio" in checks and COMPONENTS["temporalio"][1] == "pip install 'ckptcli[temporal]'"


def test_import_without_temporalio_is_one_line_naming_the_install(tmp_path: Path) -> None:
    ckptcli.init_store(tmp_path / "store")
    r = _ckpt_without_temporalio("--store", tmp_path / "store", "import", "temporal", FIXTURE)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "ckpt: error: the temporal adapter needs temporalio and ijson, which are not installed; pip install 'ckptcli[temporal]'"
    ]


def test_an_imported_history_replays_without_temporalio(tmp_path: Path) -> None:
    pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]' (to import the history first)")
    pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")
    from tests.conftest import run_ckpt

    store = tmp_path / "store"
    ckptcli.init_store(store)
    assert run_ckpt("--store", store, "import", "temporal", FIXTURE).returncode == 0
    r = _ckpt_without_temporalio("--store", store, "replay", f"workflow:{FIXTURE.stem}", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["state"]["ext"]["temporal"]
    assert t["status"] == "completed" and [s["input"] for s in t["signals"]] == ["1", "2"]
    r = _ckpt_without_temporalio("--store", store, "replay", f"workflow:{FIXTURE.stem}", "--check", "x:Y")
    assert r.returncode == 2 and "pip install 'ckptcli[temporal]'" in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("argv", [["--help"], ["import", "--help"], ["doctor", "--adapter", "temporal"], ["compat", "--help"]])
def test_start_up_and_listing_import_neither_temporalio_nor_ijson(argv: list[str]) -> None:
    """`ckpt --help` must not grow: temporalio (protobuf and a Rust core) is imported only
    when a history is read or replayed."""
    code = (
        "import sys\n"
        "from ckptcli.cli import entry\n"
        "sys.argv = ['ckpt', *sys.argv[1:]]\n"
        "try:\n"
        "    entry()\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m.split('.')[0] in ('temporalio', 'ijson', 'google'))))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert r.stderr.splitlines()[-1] == "[]", r.stderr
