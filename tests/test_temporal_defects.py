"""Defects of `ckpt import temporal` found by outside testers, each in real processes on
real histories (docs/workflows.md, "Importing a history"):

- two imports of the same run at once both wrote it (two root checkpoints of one run):
  the subject's import lock makes the second wait, then add only what is new;
- an error deep inside an event (a nesting bomb, a payload nested too deep) named
  neither the file nor the event;
- a single 50 MB payload was held several times (about 400 MB peak) and parsed in
  quadratic time."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_ckpt

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install 'ckptcli[temporal]'")
pytest.importorskip("ijson", reason="ijson is not installed: pip install 'ckptcli[temporal]'")

import ckptcli
from ckptcli.errors import LockError
from ckptcli.store.repository import Store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "temporal"
COMPLETE = FIXTURES / "test_replayer_complete_history.json"
ALTERNATE = FIXTURES / "test_replayer_event_tracing_alternate.json"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("CKPT_STORE", None)
    return env


def _import_proc(store: Path, path: Path, *more: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "--store", str(store), "import", "temporal", str(path), "--json", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )


def _runs(store: Path, subject: str) -> list[tuple[str, list[str], str]]:
    """(id, parents, events.seq) of the subject's checkpoints."""
    st = Store.open(store)
    out = []
    for cid, summary in ckptcli.list_checkpoints(st):
        if str(summary.subject) == subject:
            m = st.manifest(cid)
            out.append((cid.hex(), [p.hex() for p in m.parents], m.labels["events.seq"]))
    return out


# -- two imports at once -------------------------------------------------------------------------
def _history(tmp: Path, events: int) -> Path:
    from ckptcli.adapters.temporal.synth import synthesize

    path = tmp / "run.json"
    synthesize(COMPLETE, events, path, result_bytes=2 << 10)
    return path


def test_two_imports_of_the_same_run_at_once_store_it_once(store_dir: Path, tmp_path: Path) -> None:
    # both read and check the whole file (a few seconds) before writing: they overlap
    path = _history(tmp_path, 6_000)
    a, b = _import_proc(store_dir, path), _import_proc(store_dir, path)
    outs = [p.communicate(timeout=600) for p in (a, b)]
    for p, (_out, err) in zip((a, b), outs, strict=True):
        assert p.returncode == 0, err.decode()
    results = [json.loads(out) for out, _err in outs]
    runs = _runs(store_dir, "workflow:run")
    roots = [r for r in runs if not r[1]]
    assert len(roots) == 1, runs  # one copy of the run, not two
    # one of them wrote every event, the other found them stored and wrote nothing
    assert sorted(r["events"] for r in results) == [0, results[0]["events"] + results[1]["events"]]
    assert sorted(r["already_present"] for r in results)[1] == results[0]["events"] + results[1]["events"]
    assert len(runs) == max(r["checkpoints"] for r in results)


def test_an_import_refused_while_another_holds_the_run_says_so(store_dir: Path, tmp_path: Path) -> None:
    from ckptcli.adapters.temporal.importer import import_histories

    path = _history(tmp_path, 6_000)
    name = "import-" + hashlib.sha256(b"workflow:run").hexdigest()[:32]
    st = Store.open(store_dir)
    a = _import_proc(store_dir, path)
    deadline = time.monotonic() + 120
    while st.backend.lock_state(name)[0] != "exclusive":
        assert a.poll() is None and time.monotonic() < deadline, a.stderr.read().decode() if a.stderr else ""
        time.sleep(0.005)
    with pytest.raises(LockError) as info:
        import_histories(st, str(path), lock_wait=0)
    assert "workflow:run is being imported by another process" in info.value.message, info.value.message
    _out, err = a.communicate(timeout=600)
    assert a.returncode == 0, err.decode()
    again = import_histories(st, str(path), lock_wait=0)  # free now: nothing new to add
    assert again["events"] == 0 and again["checkpoints"] == 0


# -- errors deep in an event name the file and the event --------------------------------------------
def _refused(store: Path, path: Path) -> tuple[int, str]:
    r = run_ckpt("--store", store, "import", "temporal", path)
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: ") and "Traceback" not in lines[0], r.stderr.decode()
    assert "; " in lines[0] and ("export it again" in lines[0] or "(export the whole history)" in lines[0]), lines  # what to do
    assert ckptcli.list_checkpoints(ckptcli.open_store(store)) == []  # nothing written
    return r.returncode, lines[0]


def test_a_nesting_bomb_names_the_file_the_event_and_what_to_do(store_dir: Path, tmp_path: Path) -> None:
    text = ALTERNATE.read_text()
    bomb = "[" * 5_000 + "]" * 5_000
    after_type = tmp_path / "after.json"
    anchor = '"eventType": "EVENT_TYPE_ACTIVITY_TASK_COMPLETED",'
    assert text.count(anchor) == 1
    after_type.write_text(text.replace(anchor, anchor + ' "x": ' + bomb + ",", 1))
    code, line = _refused(store_dir, after_type)
    assert code == 7 and "after.json: event 7 (ActivityTaskCompleted) nests deeper than 256 levels" in line, line
    before_type = tmp_path / "before.json"
    before_type.write_text(text.replace('"eventId": "7",', '"eventId": "7", "x": ' + bomb + ",", 1))
    code, line = _refused(store_dir, before_type)
    assert code == 7 and "before.json: event 7 (its type not read yet) nests deeper than 256 levels" in line, line
    outside = tmp_path / "outside.json"
    outside.write_text('{"x": ' + bomb + ', "events": []}')
    code, line = _refused(store_dir, outside)
    assert code == 7 and "outside.json: the JSON outside the events list nests deeper" in line, line


def _with_payload(tmp: Path, name: str, raw: bytes) -> tuple[Path, dict[str, Any]]:
    """ALTERNATE with the result of its activity (event 7) a json/plain payload of `raw`."""
    history = json.loads(ALTERNATE.read_text())
    payload = history["events"][6]["activityTaskCompletedEventAttributes"]["result"]["payloads"][0]
    payload["data"] = base64.b64encode(raw).decode()
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(history))
    return path, payload


@pytest.mark.parametrize("depth", [1_000, 6_000])
def test_a_payload_nested_too_deep_is_kept_as_written(store_dir: Path, tmp_path: Path, depth: int) -> None:
    # was `input nests too deeply to process` (exit 7), naming neither the file nor the event
    path, payload = _with_payload(tmp_path, "deep", b"[" * depth + b"]" * depth)
    r = run_ckpt("--store", store_dir, "import", "temporal", path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    r = run_ckpt("--store", store_dir, "replay", "workflow:deep", "--json")
    assert r.returncode == 0, r.stderr.decode()
    activity = json.loads(r.stdout)["state"]["ext"]["temporal"]["activities"]["5"]
    assert activity["status"] == "completed" and activity["result"] == payload  # undecoded, as Temporal wrote it


def test_a_payload_with_a_lone_surrogate_is_kept_as_written(store_dir: Path, tmp_path: Path) -> None:
    # valid JSON that no checkpoint can hold decoded (a lone surrogate): the payload as written
    path, payload = _with_payload(tmp_path, "sur", b'"\\ud800"')
    r = run_ckpt("--store", store_dir, "import", "temporal", path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    r = run_ckpt("--store", store_dir, "replay", "workflow:sur", "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["state"]["ext"]["temporal"]["activities"]["5"]["result"] == payload


# -- one large payload -------------------------------------------------------------------------------
PROBE = (
    "import resource, subprocess, sys; "
    "r = subprocess.run([sys.executable, '-m', 'ckptcli', '--store', sys.argv[1], 'import', 'temporal', sys.argv[2], '--json'], "
    "capture_output=True); "
    "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.stderr.write(r.stderr.decode())"
)


def _peak_kib(store: Path, path: Path) -> int:
    """The max RSS (KiB) of `ckpt import temporal PATH` in a process of its own (Linux: KiB)."""
    ckptcli.init_store(store)
    r = subprocess.run([sys.executable, "-c", PROBE, str(store), str(path)], capture_output=True, text=True, timeout=1800, env=_env())
    code, kib = map(int, r.stdout.split())
    assert code == 0, r.stderr
    return kib


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_one_large_payload_is_not_held_in_memory_and_the_history_comes_back_whole(tmp_path: Path) -> None:
    """A 32 MB payload (43 MB of base64) was held several times (the string, its check,
    the encoder's copies: about 6x its size) and ijson took minutes over it. What the
    import takes beyond a small history's is now the chunker's windows, whatever the
    payload's size (about 19 MB here and for 50 MB alike)."""
    from ckptcli.adapters.temporal.importer import history_json
    from ckptcli.adapters.temporal.synth import synthesize

    big = tmp_path / "big.json"
    synthesize(COMPLETE, 10, big, result_bytes=32_000_000)
    payload = 32_000_002  # the JSON string of 32,000,000 x
    peak = _peak_kib(tmp_path / "s1", big)
    small = _peak_kib(tmp_path / "s2", COMPLETE)  # the same import of a small history: temporalio, the store
    grew = (peak - small) * 1024
    print(f"peak RSS {peak} KiB, {small} KiB for the small history: {grew / 1e6:.1f} MB for a payload of {payload / 1e6:.0f} MB")
    assert grew < 28 << 20, (peak, small)  # less than the payload itself
    ck = ckptcli.open_checkpoint("workflow:big", store_path=tmp_path / "s1")
    assert json.loads(history_json(ck)) == json.loads(big.read_text())  # the history, whole
    r = run_ckpt("--store", tmp_path / "s1", "replay", "workflow:big", "--json")
    assert r.returncode == 0, r.stderr.decode()
    result = json.loads(r.stdout)["state"]["ext"]["temporal"]["activities"]["5"]["result"]
    assert result == {"payload_bytes": payload, "encoding": "json/plain"}
    assert run_ckpt("--store", tmp_path / "s1", "verify").returncode == 0


def test_a_long_string_is_stored_as_the_same_objects_as_the_string_itself(store_dir: Path, tmp_path: Path) -> None:
    """Stored from the file in pieces, a long string is the very STR tree (its EV, its
    objects) that encoding the str in memory gives: the store is what it always was."""
    import ijson

    from ckptcli.adapters.temporal.longstr import LONG, Diverter, put_back, store_long
    from ckptcli.format.encode import Encoder

    text = "".join(chr(0x41 + (i * 7919) % 26) for i in range(3 * LONG + 12345)) + "é" * 1000
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"events": [{"data": text, "short": "x"}]}, ensure_ascii=False), encoding="utf-8")
    with path.open("rb") as f:
        d = Diverter(f, str(path))
        event = next(ijson.items(d, "events.item"))
        assert event["data"] != text and event["short"] == "x" and len(d.placeholders) == 1  # not read into memory
        put_back(event, d.placeholders)
    ls = event["data"]
    assert ls == text and ls.chars == len(text)
    st = Store.open(store_dir)
    got = store_long(st, ls)

    class Sink:
        def __init__(self) -> None:
            self.objects: dict[bytes, bytes] = {}

        def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
            self.objects[oid] = content

    sink = Sink()
    want = Encoder(sink, cdc=st.config.cdc, chunker=st.config.chunker).encode(text)
    assert got.ev == want
    assert all(st.has(oid) for oid in sink.objects)


@pytest.mark.parametrize(
    ("bad", "says"), [(b"\x01", "malformed JSON: a control character in a string"), (b"\xff", "not valid UTF-8 at byte")]
)
def test_a_fault_inside_a_large_payload_names_the_file_and_the_event(store_dir: Path, tmp_path: Path, bad: bytes, says: str) -> None:
    from ckptcli.adapters.temporal.synth import synthesize

    good = tmp_path / "good.json"
    synthesize(COMPLETE, 10, good, result_bytes=3_000_000)  # over 1 MiB: passed over, not parsed
    raw = good.read_bytes()
    at = raw.index(b'"', raw.index(b'"data"', raw.index(b"ACTIVITY_TASK_COMPLETED")) + 6) + 1 + 2_000_000
    path = tmp_path / "bad.json"
    path.write_bytes(raw[:at] + bad + raw[at + 1 :])
    code, line = _refused(store_dir, path)
    assert code == 5 and "bad.json: event 7 (ActivityTaskCompleted), field activityTaskCompletedEventAttributes." in line, line
    assert says in line and (says != "not valid UTF-8 at byte" or f"{says} {at}" in line), line


def test_a_long_string_with_escapes_is_decoded_in_one_pass_not_by_ijson(tmp_path: Path) -> None:
    """ijson (yajl) parses a token spanning its reads again from its start at each read:
    a few MB of a string with escapes took minutes. The Diverter decodes such a string
    itself (json, one pass) and hands ijson a placeholder; the event gets the same str
    ijson would give."""
    import ijson

    from ckptcli.adapters.temporal.longstr import LONG, Diverter, put_back

    text = 'A\n"\\é\u0001' * (LONG // 3) + "\U0001f600"
    raw = json.dumps({"events": [{"data": text, "short": "x"}]}).encode()
    path = tmp_path / "s.json"
    path.write_bytes(raw)
    with path.open("rb") as f:
        d = Diverter(f, str(path))
        event = next(ijson.items(d, "events.item"))
        assert d.tell() < 4096, d.tell()  # ijson was given placeholders, not the strings
        put_back(event, d.placeholders)
    with path.open("rb") as f:
        want = next(ijson.items(f, "events.item"))
    assert event == want and event["data"] == text


_LONE = r"a string at byte 36 holds a lone UTF-16 surrogate escape \(\\ud800\)"


def test_a_long_string_with_a_lone_surrogate_escape_is_refused_not_changed(tmp_path: Path) -> None:
    """ijson reads a lone surrogate escape as "?": the Diverter refuses it (no checkpoint
    holds one), in a long string decoded by json as in a short one."""
    import ijson

    from ckptcli.adapters.temporal.longstr import LONG, Diverter
    from ckptcli.errors import InvalidInputError

    for lone in ("x\\ud800y" * (LONG // 4), "x\\ud800y"):
        path = tmp_path / "s.json"
        path.write_text('{"events": [{"short": "x", "lone": "' + lone + '"}]}')
        with (
            path.open("rb") as f,
            pytest.raises(InvalidInputError, match=_LONE),
        ):
            list(ijson.items(Diverter(f, str(path)), "events.item"))


def test_a_long_string_with_a_bad_escape_is_refused_naming_where(store_dir: Path, tmp_path: Path) -> None:
    from ckptcli.adapters.temporal.synth import synthesize

    good = tmp_path / "good.json"
    synthesize(COMPLETE, 10, good, result_bytes=3_000_000)
    raw = good.read_bytes()
    at = raw.index(b'"', raw.index(b'"data"', raw.index(b"ACTIVITY_TASK_COMPLETED")) + 6) + 1 + 2_000_000
    path = tmp_path / "bad.json"
    path.write_bytes(raw[:at] + b"\\q" + raw[at + 2 :])
    code, line = _refused(store_dir, path)
    assert code == 5 and "bad.json: event 7 (ActivityTaskCompleted), field activityTaskCompletedEventAttributes." in line, line
    assert "malformed JSON in a string" in line, line


def test_an_escape_past_the_first_mib_of_a_long_string_is_decoded(tmp_path: Path) -> None:
    """A string passed over as long (its first LONG bytes had no escape) and holding an
    escape later is read back and decoded: never kept with its escapes as text."""
    import ijson

    from ckptcli.adapters.temporal.longstr import LONG, Diverter, put_back

    text = "B" * (LONG + 70_000) + '\n"tab\there\\' + "C" * 1000
    path = tmp_path / "late.json"
    path.write_text(json.dumps({"events": [{"data": text, "short": "x"}, {"data": "B" * (LONG + 10)}]}))
    with path.open("rb") as f:
        d = Diverter(f, str(path))
        events = list(ijson.items(d, "events.item"))
        for event in events:
            put_back(event, d.placeholders)
    assert events[0]["data"] == text and isinstance(events[0]["data"], str)
    assert events[1]["data"] == "B" * (LONG + 10) and not isinstance(events[1]["data"], str)  # still passed over


def test_a_number_of_millions_of_digits_is_refused_before_it_is_parsed(store_dir: Path, tmp_path: Path) -> None:
    """ijson makes an int of a number token in time quadratic in its digits (minutes for
    20 million): such a number is refused as the file is read, naming the event."""
    raw = COMPLETE.read_bytes()
    path = tmp_path / "hugenum.json"
    path.write_bytes(raw.replace(b'"attempt":1', b'"attempt":' + b"9" * 20_000_000, 1))
    code, line = _refused(store_dir, path)
    assert code == 4 and "hugenum.json: event 1 (WorkflowExecutionStarted), field " in line, line
    assert "attempt: a number of more than 400 digits at byte 815" in line, line


def test_an_event_id_of_thousands_of_digits_is_bad_input_not_an_internal_error(store_dir: Path, tmp_path: Path) -> None:
    raw = COMPLETE.read_bytes()
    path = tmp_path / "eid.json"
    path.write_bytes(raw.replace(b'"eventId":"1"', b'"eventId":"' + b"1" * 4301 + b'"', 1))
    code, line = _refused(store_dir, path)
    assert code == 4 and "eid.json: events[0] has event id '111" in line and "internal error" not in line, line


def test_the_size_ls_shows_counts_a_payload_stored_from_the_file(store_dir: Path, tmp_path: Path) -> None:
    """A long string stored from the file in pieces counts in the checkpoint's logical
    bytes (`ckpt ls` SIZE) as the same string encoded in memory does."""
    from ckptcli.adapters.temporal.synth import synthesize

    big = tmp_path / "big.json"
    synthesize(COMPLETE, 10, big, result_bytes=3_000_000)  # over 1 MiB: stored from the file
    r = run_ckpt("--store", store_dir, "import", "temporal", big)
    assert r.returncode == 0, r.stderr.decode()
    m = Store.open(store_dir).manifest(ckptcli.open_checkpoint("workflow:big", store_path=store_dir).id)
    assert m.stats["logical_bytes"] > 4_000_000, m.stats  # the base64 of 3 MB, at least


def test_every_reader_of_a_history_has_the_importers_guards(tmp_path: Path) -> None:
    """`replay --check` and `compat` read histories without passing long strings over
    (they need every value): they get the same refusal of a number too long to be a
    history's, and long strings decoded in one pass, as plain str."""
    from ckptcli.adapters.temporal.longstr import LONG
    from ckptcli.adapters.temporal.reader import read_events
    from ckptcli.errors import InvalidInputError

    raw = COMPLETE.read_bytes()
    hugenum = tmp_path / "hugenum.json"
    hugenum.write_bytes(raw.replace(b'"attempt":1', b'"attempt":' + b"9" * 5_000, 1))
    with pytest.raises(InvalidInputError, match="a number of more than 400 digits"):
        list(read_events(hugenum, check=False))
    text = 'x\\"y' * (LONG // 2)
    long = tmp_path / "long.json"
    long.write_bytes(raw.replace(b'"taskQueue":{"name":"', b'"note":"' + text.encode() + b'","taskQueue":{"name":"', 1))
    first = next(iter(read_events(long, check=False))).raw
    assert first["workflowExecutionStartedEventAttributes"]["note"] == 'x"y' * (LONG // 2)
