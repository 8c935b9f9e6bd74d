"""`ckpt compat`, the CI step: fixtures made with the real API (take + export), the
example migrations and adapter of tests/schema_example/, run through the real CLI.
Each checkpoint is compatible as-is, after migration, or incompatible with its reason;
any incompatible one exits 1, and the JUnit report names it and why."""

from __future__ import annotations

import hashlib
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.errors import ExitCode, UsageError
from ckptcli.format import framing
from ckptcli.schema.compat import AFTER_MIGRATION, AS_IS, INCOMPATIBLE, CompatCheck, load_adapter, load_validator
from ckptcli.schema.migrations import MigrationSet, load_migrations, migration
from ckptcli.store.single import CheckpointFile
from tests.conftest import run_ckpt

REPO = Path(__file__).resolve().parent.parent
MIGRATIONS = "tests.schema_example.migrations"
ADAPTER = "tests.schema_example.state:load"
NOTES = "the customer was promised a refund " * 20  # long enough to be an object of its own

V1 = {"memory": {"notes": NOTES, "user": "Ada Lovelace"}, "plan": ["check order"]}
V2 = {"memory": {"scratchpad": NOTES, "user": "Grace Hopper"}, "plan": []}
V3 = {"memory": {"scratchpad": NOTES, "user": {"first": "Ada", "last": "Lovelace"}}, "plan": ["reply"]}

# name -> (state, schema_version); plus corrupt.ckpt and newer-format.ckpt made from v1
GOOD = {"v1.ckpt": (V1, 1), "v2.ckpt": (V2, 2), "v3.ckpt": (V3, 3)}
BAD = {
    "future.ckpt": (V3, 7),  # no migration path 7 -> 3
    "rejected.ckpt": ({"memory": {"user": {"first": "A", "last": "B"}}}, 3),  # no scratchpad: the adapter refuses
    "raises.ckpt": ({"memory": {"notes": "n", "user": 42}}, 1),  # migration 2->3 raises
    "unversioned.ckpt": (V1, None),
}
EXPECTED = {
    "v1.ckpt": (AFTER_MIGRATION, None),
    "v2.ckpt": (AFTER_MIGRATION, None),
    "v3.ckpt": (AS_IS, None),
    "future.ckpt": (INCOMPATIBLE, "no-migration-path"),
    "rejected.ckpt": (INCOMPATIBLE, "adapter-rejected"),
    "raises.ckpt": (INCOMPATIBLE, "migration-failed"),
    "unversioned.ckpt": (INCOMPATIBLE, "no-schema-version"),
    "corrupt.ckpt": (INCOMPATIBLE, "unreadable"),
    "newer-format.ckpt": (INCOMPATIBLE, "format-version"),
}


def _export(store: Any, directory: Path, name: str, state: Any, version: int | None) -> Path:
    cid = ckptcli.take(store, state, subject="agent:support-bot", schema_version=version, parents=[]).id
    path = directory / name
    ckptcli.export_checkpoint(ckptcli.open_checkpoint(cid.hex(), store), path)
    return path


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """good/ (all compatible), one_bad/ (good + one incompatible), mixed/ (every kind)."""
    base = tmp_path_factory.mktemp("compat")
    store = ckptcli.init_store(base / "store")
    dirs = {k: base / k for k in ("good", "one_bad", "mixed")}
    for d in dirs.values():
        d.mkdir()
    for name, (state, version) in GOOD.items():
        for d in dirs.values():
            _export(store, d, name, state, version)
    _export(store, dirs["one_bad"], "future.ckpt", *BAD["future.ckpt"])
    for name, (state, version) in BAD.items():
        _export(store, dirs["mixed"], name, state, version)
    # a flipped byte in the object region of a real export
    source = (dirs["good"] / "v1.ckpt").read_bytes()
    f = CheckpointFile(dirs["good"] / "v1.ckpt")
    at = f.objects_start + 3
    f.close()
    damaged = bytearray(source)
    damaged[at] ^= 0x40
    (dirs["mixed"] / "corrupt.ckpt").write_bytes(bytes(damaged))
    # the same file as a newer ckpt would write it: its checksum covers the new version
    # (a version whose checksum does not hold is damage, not a newer format)
    newer = framing.encode_header(framing.KIND_FILE, 99) + source[framing.HEADER_SIZE : -32]
    newer += hashlib.sha256(newer).digest()
    (dirs["mixed"] / "newer-format.ckpt").write_bytes(newer)
    dirs["store"] = base / "store"
    return dirs


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_one_incompatible_checkpoint_fails_the_run_and_the_junit_names_it(cli, fixtures: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "compat.xml"
    r = cli("compat", fixtures["one_bad"], "--migrations", MIGRATIONS, "--adapter", ADAPTER, "--junit", report)
    assert r.code == ExitCode.FAILURE == 1
    assert r.err.strip().splitlines() == [f"ckpt: error: 1 of 4 checkpoint(s) incompatible; see above and {report}"]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "1"
    failed = [case for case in suite.iter("testcase") if case.find("failure") is not None]
    assert len(failed) == 1
    case, failure = failed[0], failed[0].find("failure")
    assert failure is not None
    assert case.get("name") == str(fixtures["one_bad"] / "future.ckpt")
    assert failure.get("type") == "no-migration-path"
    assert "no migration path from schema version 7 to 3" in (failure.get("message") or "")
    assert "future.ckpt" in r.out and "incompatible" in r.out


def test_mixed_fixtures_are_classified(cli, fixtures: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = _digest(fixtures["mixed"])
    report = tmp_path / "compat.xml"
    r = cli("compat", fixtures["mixed"], "-M", MIGRATIONS, "-a", ADAPTER, "--json", "--junit", report)
    assert r.code == 1
    out = json.loads(r.out)
    got = {Path(c["name"]).name: (c["status"], c["problem"]) for c in out["checkpoints"]}
    assert got == EXPECTED
    assert out["ok"] is False and out["target"] == 3
    assert out["counts"] == {AS_IS: 1, AFTER_MIGRATION: 2, INCOMPATIBLE: 6}
    by_name = {Path(c["name"]).name: c for c in out["checkpoints"]}
    assert by_name["v1.ckpt"]["steps"] == ["1->2", "2->3"] and by_name["v2.ckpt"]["steps"] == ["2->3"]
    assert by_name["v3.ckpt"]["schema_version"] == 3 and by_name["v3.ckpt"]["subject"] == "agent:support-bot"
    reasons = {name: c["reason"] for name, c in by_name.items()}
    assert "adapter raised KeyError: 'scratchpad'" in reasons["rejected.ckpt"]
    assert reasons["raises.ckpt"].startswith("migration 2->3 (") and "raised AttributeError" in reasons["raises.ckpt"]
    assert "has no schema_version; pass --assume-version N" in reasons["unversioned.ckpt"]
    assert "damaged" in reasons["corrupt.ckpt"]
    assert "format version 99" in reasons["newer-format.ckpt"] and "upgrade ckpt" in reasons["newer-format.ckpt"]
    assert by_name["corrupt.ckpt"]["checkpoint"] is not None, "a damaged file whose manifest reads is still named"
    # the JUnit report carries the same verdicts
    cases = {Path(c.get("name") or "").name: c for c in ET.parse(report).getroot().iter("testcase")}
    assert set(cases) == set(EXPECTED)
    for name, (status, problem) in EXPECTED.items():
        failure = cases[name].find("failure")
        if status == INCOMPATIBLE:
            assert failure is not None and failure.get("type") == problem and failure.get("message") == reasons[name]
        else:
            assert failure is None and name in (cases[name].findtext("system-out") or "")
    assert _digest(fixtures["mixed"]) == before, "compat writes nothing to the fixtures"


def test_all_compatible_exits_0_with_a_table(cli, fixtures: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "ok.xml"
    r = cli("compat", fixtures["good"], "--migrations", MIGRATIONS, "--adapter", ADAPTER, "--junit", report)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["RESULT", "CHECKPOINT", "SUBJECT", "VERSION", "DETAIL"]
    assert lines[1].split()[:4] == ["after-migration", str(fixtures["good"] / "v1.ckpt"), "agent:support-bot", "1"]
    assert lines[1].endswith("via 1->2, 2->3")
    assert lines[3].split() == ["as-is", str(fixtures["good"] / "v3.ckpt"), "agent:support-bot", "3"]
    assert lines[-1] == "3 checkpoint(s) checked against schema version 3: 1 compatible as-is, 2 after migration, 0 incompatible"
    assert "\x1b[" not in r.out and r.err == ""
    assert ET.parse(report).getroot().get("failures") == "0"
    # one file named directly works as well
    assert cli("compat", fixtures["good"] / "v3.ckpt", "-M", MIGRATIONS).code == 0


def test_a_fifo_a_device_link_or_a_dangling_link_among_the_fixtures_is_incompatible_not_skipped(
    cli, fixtures: dict[str, Path], tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # found in a directory, they were left out without a word and the run passed
    fixtures_dir = tmp_path / "fixtures"
    fixtures_dir.mkdir()
    (fixtures_dir / "v3.ckpt").write_bytes((fixtures["good"] / "v3.ckpt").read_bytes())
    os.mkfifo(fixtures_dir / "fifo.ckpt")
    (fixtures_dir / "zero.ckpt").symlink_to("/dev/zero")
    (fixtures_dir / "gone.ckpt").symlink_to(tmp_path / "gone")
    r = cli("compat", fixtures_dir, "-M", MIGRATIONS)
    assert r.code == 1, r.err
    rows = {line.split()[1].rsplit("/", 1)[-1]: line for line in r.out.splitlines()[1:-1]}
    assert sorted(rows) == ["fifo.ckpt", "gone.ckpt", "v3.ckpt", "zero.ckpt"], r.out
    assert rows["v3.ckpt"].startswith("as-is")
    for name in ("fifo.ckpt", "zero.ckpt"):
        assert rows[name].startswith("incompatible") and "is not a regular file" in rows[name], rows[name]
    assert rows["gone.ckpt"].startswith("incompatible") and "does not exist" in rows["gone.ckpt"]


def test_assume_version_and_target(cli, fixtures: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    unversioned = fixtures["good"].parent / "unversioned"
    unversioned.mkdir(exist_ok=True)
    store = ckptcli.open_store(fixtures["store"])
    _export(store, unversioned, "old.ckpt", V1, None)
    assert cli("compat", unversioned, "-M", MIGRATIONS).code == 1
    r = cli("compat", unversioned, "-M", MIGRATIONS, "--assume-version", "1", "--json")
    assert r.code == 0 and json.loads(r.out)["checkpoints"][0]["steps"] == ["1->2", "2->3"]
    # --target overrides SCHEMA_VERSION: to version 2, v3 has no way down
    out = json.loads(cli("compat", fixtures["good"], "-M", MIGRATIONS, "--target", "2", "--json").out)
    assert [(Path(c["name"]).name, c["status"]) for c in out["checkpoints"]] == [
        ("v1.ckpt", AFTER_MIGRATION),
        ("v2.ckpt", AS_IS),
        ("v3.ckpt", INCOMPATIBLE),
    ]


def test_without_migrations_the_adapter_decides(cli, fixtures: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    out = json.loads(cli("compat", fixtures["good"], "--adapter", ADAPTER, "--json").out)
    assert out["target"] is None
    assert [(Path(c["name"]).name, c["status"], c["problem"]) for c in out["checkpoints"]] == [
        ("v1.ckpt", INCOMPATIBLE, "adapter-rejected"),  # a v1 document is not what the code reads
        ("v2.ckpt", INCOMPATIBLE, "adapter-rejected"),
        ("v3.ckpt", AS_IS, None),
    ]
    # a target without migrations: anything else has no path
    out = json.loads(cli("compat", fixtures["good"], "--target", "3", "--json").out)
    assert [c["problem"] for c in out["checkpoints"]] == ["no-migration-path", "no-migration-path", None]


def test_a_store_is_checked_without_writing_to_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = ckptcli.init_store(tmp_path / "s")
    a = ckptcli.take(store, V1, subject="agent:support-bot", schema_version=1)
    b = ckptcli.take(store, V3, subject="agent:support-bot", schema_version=3)
    c = ckptcli.take(store, {"memory": {"notes": "n", "user": 42}}, subject="agent:other", schema_version=1)
    before = sorted(store.manifest_ids())
    r = cli("compat", "--store", tmp_path / "s", "-M", MIGRATIONS, "-a", ADAPTER, "--json")
    assert r.code == 1
    got = {x["checkpoint"]: (x["name"], x["status"]) for x in json.loads(r.out)["checkpoints"]}
    assert got == {
        a.hex: (f"{a.hex[:12]} agent:support-bot", AFTER_MIGRATION),
        b.hex: (f"{b.hex[:12]} agent:support-bot", AS_IS),
        c.hex: (f"{c.hex[:12]} agent:other", INCOMPATIBLE),
    }
    r = cli("compat", "--store", tmp_path / "s", "-M", MIGRATIONS, "-a", ADAPTER, "--subject", "agent:support-bot")
    assert r.code == 0 and "2 checkpoint(s) checked" in r.out
    r = cli("compat", b.hex[:10], "agent:support-bot~1", "--store", tmp_path / "s", "-M", MIGRATIONS, "--json")
    assert r.code == 0 and [x["checkpoint"] for x in json.loads(r.out)["checkpoints"]] == [b.hex, a.hex]
    assert cli("compat", "no-such-tag", "--store", tmp_path / "s", "-M", MIGRATIONS).code == ExitCode.NOT_FOUND
    assert sorted(store.manifest_ids()) == before
    assert ckptcli.verify(store, read_data=True).ok


def test_bad_invocations(cli, fixtures: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = fixtures["good"]
    r = cli("compat", good, "--adapter", "tests.schema_example.state")
    assert r.code == ExitCode.USAGE and "is not MODULE:FUNCTION" in r.err
    r = cli("compat", good, "--adapter", "tests.schema_example.state:BotState.nope")
    assert r.code == ExitCode.NOT_FOUND
    r = cli("compat", good, "--adapter", "tests.schema_example.migrations:SCHEMA_VERSION")
    assert r.code == ExitCode.INVALID_INPUT and "not a function" in r.err
    r = cli("compat", tmp_path / "missing", "-M", MIGRATIONS)
    assert r.code == ExitCode.NOT_FOUND and "does not exist" in r.err
    (tmp_path / "empty").mkdir()
    r = cli("compat", tmp_path / "empty", "-M", MIGRATIONS)
    assert r.code == ExitCode.NOT_FOUND and "no checkpoints found" in r.err and "ckpt export" in r.err
    r = cli("compat", good, "-M", "ckpt_no_such_project.migrations")
    assert r.code == ExitCode.NOT_FOUND and "pip install -e ." in r.err
    r = cli("compat", good, "-M", MIGRATIONS, "--target", "")
    assert r.code == ExitCode.INVALID_INPUT
    for r in (cli("compat", good, "--adapter", "x"), cli("compat", tmp_path / "empty")):
        assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_unstorable_migration_result_and_named_versions(fixtures: dict[str, Path]) -> None:
    to_set = MigrationSet([migration(from_=1, to=2)(lambda s: {"memory": {"tags": {"a", "b"}}})])
    check = CompatCheck(migrations=to_set)
    assert check.target == 2
    [r] = check.files([fixtures["good"] / "v1.ckpt"])
    assert (r.status, r.problem) == (INCOMPATIBLE, "unstorable") and "after migration 1->2, ckpt cannot store the state" in r.reason
    named = MigrationSet([migration(from_="a", to="b")(lambda s: s)])
    with pytest.raises(UsageError, match="pass --target N"):
        CompatCheck(migrations=named)
    # the library gives the same verdicts as the command
    check = CompatCheck(migrations=load_migrations(MIGRATIONS), validator=load_validator(ADAPTER))
    report = check.report(check.files([fixtures["mixed"]]))
    assert {Path(r.name).name: (r.status, r.problem) for r in report.results} == EXPECTED
    assert not report.ok


def test_the_real_command_one_line_and_ckpt_debug(fixtures: dict[str, Path]) -> None:
    args = ("compat", fixtures["mixed"] / "raises.ckpt", "--migrations", MIGRATIONS)
    p = run_ckpt(*args, env={"NO_COLOR": "1"}, cwd=REPO)
    assert p.returncode == 1
    assert p.stderr.decode().splitlines() == ["ckpt: error: 1 of 1 checkpoint(s) incompatible; see above"]
    assert b"raised AttributeError" in p.stdout and b"\x1b[" not in p.stdout
    p = run_ckpt(*args, env={"CKPT_DEBUG": "1"}, cwd=REPO)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "Traceback" in err and "split_user" in err and "AttributeError" in err, "CKPT_DEBUG shows the migration's traceback"


def test_help_documents_exit_status_1() -> None:
    p = run_ckpt("compat", "--help")
    text = p.stdout.decode()
    assert p.returncode == 0 and "Exit status 1 when any checkpoint is incompatible" in " ".join(text.split())
    assert "  1  failure" in text


def test_the_library_imports_no_ui() -> None:
    """ckptcli.schema.migrations and ckptcli.schema.compat are core: no typer, rich, textual or click
    (the same probe as tests/test_import_hygiene.py)."""
    import subprocess
    import sys

    code = (
        "import sys, json, ckptcli.schema.migrations, ckptcli.schema.compat; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'textual', 'click'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_the_validator_was_the_adapter_and_the_old_names_still_work(cli, fixtures: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    # --validator is the flag; --adapter (-a), its name before 0.3, is a hidden alias of it
    verdicts = {}
    for flag in ("--validator", "--adapter", "-a"):
        r = cli("compat", fixtures["mixed"], "-M", MIGRATIONS, flag, ADAPTER, "--json")
        verdicts[flag] = {Path(c["name"]).name: (c["status"], c["problem"]) for c in json.loads(r.out)["checkpoints"]}
    assert verdicts["--validator"] == verdicts["--adapter"] == verdicts["-a"] == EXPECTED
    assert (
        cli("compat", fixtures["good"], "--validator", ADAPTER, "--adapter", ADAPTER, "--json").code == ExitCode.FAILURE
    )  # the same spec twice
    r = cli("compat", fixtures["good"], "--validator", ADAPTER, "--adapter", "tests.schema_example.state:other")
    assert r.code == ExitCode.USAGE and r.err.strip().splitlines() == [
        "ckpt: error: --validator and --adapter (its old name) are both given; give --validator alone"
    ], r.err
    shown = cli("compat", "--help").out
    assert "--validator" in shown and "--adapter" not in shown
    # the library's old names warn, and check the same
    with pytest.warns(DeprecationWarning, match="load_validator"):
        old = load_adapter(ADAPTER)
    assert old is load_validator(ADAPTER)
    with pytest.warns(DeprecationWarning, match="validator="):
        check = CompatCheck(migrations=load_migrations(MIGRATIONS), adapter=old)
    assert check.validator is old
    report = check.report(check.files([fixtures["mixed"]]))
    assert {Path(r.name).name: (r.status, r.problem) for r in report.results} == EXPECTED
    with pytest.warns(DeprecationWarning), pytest.raises(UsageError, match="both validator= and adapter="):
        CompatCheck(validator=old, adapter=lambda s: s)
