"""Defects of the history reader (`ckpt import temporal`, reader.py and longstr.py) found
by outside testers, each through the real `ckpt` on real histories:

- JSON with no top-level `"events": [...]` list (`{"events": {"item": EVENT}}`, a
  top-level key named "events.item", two "events" keys) was read as a history, ijson's
  dotted prefixes taking it for the events list;
- a lone surrogate escape (`"\\ud800"`) in a string of an event was stored as "?";
- an error line named the wrong event, or the right one twice ("events[7] (its type not
  read yet): event 7 has an unknown event type");
- a number too long was reported at events[0] whatever event held it, invalid UTF-8 as
  ijson's bytes repr, `1e999999999` as malformed JSON, and a closed stdin as a missing
  file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_ckpt

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

import ckptcli
from ckptcli.adapters.temporal.importer import history_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "temporal"
COMPLETE = FIXTURES / "test_replayer_complete_history.json"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _refused(store_dir: Path, path: Path) -> tuple[int, str]:
    r = run_ckpt("--store", store_dir, "import", "temporal", path, "--workflow-id", "w")
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: ") and "Traceback" not in lines[0], r.stderr.decode()
    assert ckptcli.list_checkpoints(ckptcli.open_store(store_dir)) == []  # nothing written
    return r.returncode, lines[0]


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(COMPLETE.read_text())["events"]
    return events


def _with_field(tmp_path: Path, name: str, event: int, field: str) -> Path:
    """The history with `field` (JSON text, `"key": value`) last in event `event` (after
    its id and type)."""
    evs = _events()
    evs[event - 1]["__field__"] = 0
    path = tmp_path / name
    path.write_text(json.dumps({"events": evs}).replace('"__field__": 0', field))
    return path


# -- 1. only a real top-level "events" list is read as the events --------------------------
@pytest.mark.parametrize(
    ("text", "says"),
    [
        (lambda evs: json.dumps({"events": {"item": evs[0]}}), 'its "events" is a JSON object, not a list'),
        (lambda evs: json.dumps({"events.item": evs[0]}), 'a top-level key "events.item"'),
        (lambda evs: json.dumps({"events": evs, "events.item": evs[0]}), 'a top-level key "events.item"'),
        (lambda evs: '{"events": ' + json.dumps(evs) + ', "events": ' + json.dumps(evs[:1]) + "}", 'two "events" keys'),
        (lambda evs: '{"events": {"item": ' + json.dumps(evs[0]) + '}, "events": ' + json.dumps(evs) + "}", "not a list"),
    ],
)
def test_json_without_a_top_level_events_list_is_refused(store_dir: Path, tmp_path: Path, text: Any, says: str) -> None:
    path = tmp_path / "h.json"
    path.write_text(text(_events()))
    code, line = _refused(store_dir, path)
    assert code == 4 and f"{path}: " in line and says in line, line


def test_keys_with_dots_inside_an_event_are_stored_exactly(store_dir: Path, tmp_path: Path) -> None:
    evs = _events()
    evs[1]["events.item"] = {"item": [1, {"a.b": "c"}]}
    evs[2]["x.events.item"] = "y"
    path = tmp_path / "dots.json"
    history = {"meta.item": {"events": [1]}, "events": evs, "more": {"events.items": 1}}
    path.write_text(json.dumps(history))
    r = run_ckpt("--store", store_dir, "import", "temporal", path, "--workflow-id", "w")
    assert r.returncode == 0, r.stderr.decode()
    ck = ckptcli.open_checkpoint("workflow:w", store_path=store_dir)
    assert json.loads(history_json(ck)) == {"events": evs}


# -- 2. a lone surrogate is refused, naming the event and the field ---------------------------
@pytest.mark.parametrize("value", ['"a\\ud800b"', '"\\udc00"', '"' + "z" * 5000 + '\\ud83d"', '["ok \\ud83d\\ude00", "\\ud83dx"]'])
def test_a_lone_surrogate_in_a_string_is_refused_naming_the_event_and_field(store_dir: Path, tmp_path: Path, value: str) -> None:
    path = _with_field(tmp_path, "surrogate.json", 8, f'"note": {value}')
    code, line = _refused(store_dir, path)
    assert code == 4 and "event 8 (" in line and ", field note" in line and "surrogate" in line, line


def test_a_long_string_with_a_lone_surrogate_is_refused_too(store_dir: Path, tmp_path: Path) -> None:
    from ckptcli.adapters.temporal.longstr import LONG

    path = _with_field(tmp_path, "long.json", 5, '"big": "' + "q" * (LONG + 10) + '\\ud800"')
    code, line = _refused(store_dir, path)
    assert code == 4 and "event 5 (" in line and ", field big" in line and "surrogate" in line, line


def test_a_surrogate_pair_is_stored_as_its_character(store_dir: Path, tmp_path: Path) -> None:
    path = _with_field(tmp_path, "pair.json", 8, '"note": "smile \\ud83d\\ude00"')
    r = run_ckpt("--store", store_dir, "import", "temporal", path, "--workflow-id", "w")
    assert r.returncode == 0, r.stderr.decode()
    ck = ckptcli.open_checkpoint("workflow:w", store_path=store_dir)
    assert json.loads(history_json(ck))["events"][7]["note"] == "smile \U0001f600"


# -- 3. an error is located once, at its event ---------------------------------------------------
def test_an_unknown_event_type_is_said_once_at_its_event(store_dir: Path, tmp_path: Path) -> None:
    evs = _events()
    evs[6]["eventType"] = "EVENT_TYPE_NOPE"
    path = tmp_path / "type.json"
    path.write_text(json.dumps({"events": evs}))
    code, line = _refused(store_dir, path)
    assert code == 4 and f"{path}: event 7 has an unknown event type 'EVENT_TYPE_NOPE'" in line, line
    assert "events[" not in line and "not read yet" not in line, line


# -- 4. where and what -----------------------------------------------------------------------------
def test_a_number_too_long_is_reported_at_the_event_that_holds_it(store_dir: Path, tmp_path: Path) -> None:
    path = _with_field(tmp_path, "digits.json", 9, '"x": ' + "9" * 401)
    code, line = _refused(store_dir, path)
    assert code == 4 and "event 9 (" in line and ", field x: a number of more than 400 digits" in line and "events[0]" not in line, line


def test_invalid_utf8_says_so_and_where(store_dir: Path, tmp_path: Path) -> None:
    path = _with_field(tmp_path, "utf8.json", 8, '"x": "aXb"')
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"aXb"', b'"a\xffb"'))
    code, line = _refused(store_dir, path)
    at = raw.index(b'"aXb"') + 2
    assert code == 5 and f"not valid UTF-8 at byte {at}" in line and "event 8" in line, line
    assert "b'" not in line and "lexical error" not in line, line


@pytest.mark.parametrize("number", ["1e999999999", "-1e400", "1.5E+309"])
def test_a_number_out_of_range_says_so_and_where(store_dir: Path, tmp_path: Path, number: str) -> None:
    path = _with_field(tmp_path, "range.json", 8, f'"x": {number}')
    code, line = _refused(store_dir, path)
    assert code == 4 and "out of range" in line and "event 8" in line and "malformed" not in line, line


@pytest.mark.parametrize("source", ["-", "/dev/stdin"])
def test_a_closed_stdin_is_an_io_error(store_dir: Path, source: str) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CKPT_STORE"}
    argv = [sys.executable, "-m", "ckptcli", "--store", str(store_dir), "import", "temporal", source, "--workflow-id", "w"]
    r = subprocess.run(argv, capture_output=True, env=env, preexec_fn=lambda: os.close(0), timeout=300)  # the child's stdin closed
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 12 and len(lines) == 1 and "stdin is closed" in lines[0], r.stderr.decode()


def test_a_history_on_stdin_is_imported(store_dir: Path) -> None:
    r = run_ckpt("--store", store_dir, "import", "temporal", "-", "--workflow-id", "w", input=COMPLETE.read_bytes())
    assert r.returncode == 0, r.stderr.decode()
    ck = ckptcli.open_checkpoint("workflow:w", store_path=store_dir)
    assert json.loads(history_json(ck)) == json.loads(COMPLETE.read_text())


def test_a_lone_surrogate_cut_by_the_edge_of_a_read_is_refused(tmp_path: Path) -> None:
    """The escape `\\ud800` at every place across the edge of one of the Diverter's reads,
    in a string that began in the read before: refused every time, never read as "?"."""
    from ckptcli.adapters.temporal import reader
    from ckptcli.adapters.temporal.longstr import READ
    from ckptcli.adapters.temporal.synth import synthesize
    from ckptcli.errors import InvalidInputError

    base = tmp_path / "base.json"
    synthesize(COMPLETE, 300, base, result_bytes=2_000)
    raw = base.read_bytes()
    j = raw.index(b'"eventId"', 2 * READ - 3_000)
    for cut in range(-8, 8):
        pad = b"z" * (2 * READ + cut - j - len(b'"y":"'))  # then the escape's backslash is `cut` bytes from the edge
        path = tmp_path / "cut.json"
        path.write_bytes(raw[:j] + b'"y":"' + pad + b'\\ud800q",' + raw[j:])
        with pytest.raises(InvalidInputError, match="lone UTF-16 surrogate"):
            sum(1 for _ in reader.read_events(path, check=False))
