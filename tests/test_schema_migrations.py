"""The subject's own state schema: declaring migrations, planning chains, loading them
from a module, a registry or an entry point, and migrating a checkpoint into a new one
(parent = the old one, blobs shared, the original untouched). The example of
docs/migrations.md is tests/schema_example/, shown there verbatim and run here."""

from __future__ import annotations

import copy
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

import ckptcli
from ckptcli.api import states_equal
from ckptcli.errors import ExitCode, InvalidInputError, NotFoundError, UsageError
from ckptcli.schema.migrations import (
    Migration,
    MigrationError,
    MigrationSet,
    installed_migrations,
    load_migrations,
    migrate_checkpoint,
    migrate_state,
    migration,
    parse_version,
)
from ckptcli.store.repository import Store
from tests import strategies
from tests.schema_example import migrations as example

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "migrations.md"
V1 = {"memory": {"notes": "refund promised", "user": "Ada Lovelace"}, "plan": ["check order", "reply"]}
V3 = {"memory": {"scratchpad": "refund promised", "user": {"first": "Ada", "last": "Lovelace"}}, "plan": ["check order", "reply"]}


def _copy(value: Any) -> Any:
    """A deep copy of a document (migrations may change their argument)."""
    return copy.deepcopy(value)


def _steps(*pairs: tuple[Any, Any]) -> MigrationSet:
    return MigrationSet(migration(from_=a, to=b, description=f"step {a}->{b}")(lambda s: s) for a, b in pairs)


# -- the documented example ----------------------------------------------------------------
def _python_blocks(text: str) -> list[tuple[str | None, str]]:
    """(file marker or None, code) for each ```python block of the page."""
    pattern = re.compile(r"(?:<!-- file: (?P<file>[^ ]+) -->\n)?```python\n(?P<code>.*?)```", re.S)
    return [(m.group("file"), m.group("code")) for m in pattern.finditer(text)]


def test_the_doc_shows_the_example_files_verbatim() -> None:
    shown = {f: code for f, code in _python_blocks(DOC.read_text()) if f}
    assert set(shown) == {"tests/schema_example/migrations.py", "tests/schema_example/state.py"}
    for path, code in shown.items():
        assert code == (REPO / path).read_text(), f"docs/migrations.md shows a stale {path}"


def test_the_doc_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [code for f, code in _python_blocks(DOC.read_text()) if not f]
    assert blocks, "docs/migrations.md lost its Python API example"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), namespace)
    assert (tmp_path / "demo-store").is_dir()


def test_the_example_migrates_v1_to_v3() -> None:
    ms = load_migrations("tests.schema_example.migrations")
    assert ms.current == 3 and len(ms) == 2
    assert [str(m) for m in ms] == [
        "1->2 (memory.notes is now memory.scratchpad)",
        '2->3 (memory.user "First Last" becomes {"first": ..., "last": ...})',
    ]
    assert migrate_state(_copy(V1), ms.plan(1, 3)) == V3
    assert migrate_state(_copy(V1), ms.plan("1", "2"))["memory"] == {"user": "Ada Lovelace", "scratchpad": "refund promised"}
    # a Migration stays callable as the function was
    assert example.rename_notes({"memory": {"notes": 1}}) == {"memory": {"scratchpad": 1}}


# -- versions and plans ------------------------------------------------------------------------
def test_parse_version() -> None:
    assert parse_version(3) == 3 and parse_version("3") == 3 and parse_version(" 12 ") == 12
    assert parse_version("2024-01") == "2024-01"
    for bad in (True, -1, "", "  ", 1.5, None):
        with pytest.raises(InvalidInputError):
            parse_version(bad)


def test_plan_follows_the_chain_and_takes_shortcuts() -> None:
    ms = _steps((1, 2), (2, 3), (3, 4))
    assert [m.name for m in ms.plan(1, 4)] == ["1->2", "2->3", "3->4"]
    assert [m.name for m in ms.plan(2, 3)] == ["2->3"]
    assert ms.plan(3, 3) == []
    assert ms.current == 4
    ms.add(migration(from_=1, to=3)(lambda s: s))
    assert [m.name for m in ms.plan(1, 4)] == ["1->3", "3->4"], "a declared shortcut is the shorter path"


def test_downgrades_are_steps_like_any_other() -> None:
    ms = _steps((1, 2), (2, 3), (3, 2))
    assert [m.name for m in ms.plan(3, 2)] == ["3->2"]
    with pytest.raises(MigrationError, match="no migration path from schema version 2 to 1"):
        ms.plan(2, 1)


def test_a_gap_is_refused_with_what_is_declared() -> None:
    ms = _steps((1, 2), (3, 4))
    with pytest.raises(MigrationError) as info:
        ms.plan(1, 4)
    msg = str(info.value)
    assert "no migration path from schema version 1 to 4" in msg
    assert "declared: 1->2, 3->4" in msg and "from 1 the migrations reach 2" in msg and "add a migration that leads to 4" in msg
    assert info.value.exit_code == ExitCode.FAILURE
    with pytest.raises(MigrationError, match="no migration starts at 7"):
        ms.plan(7, 4)


def test_ambiguity_and_duplicates_are_refused() -> None:
    ms = _steps(("a", "b1"), ("a", "b2"), ("b1", "c"), ("b2", "c"))
    with pytest.raises(MigrationError, match="2 equally short migration paths lead from schema version a to c"):
        ms.plan("a", "c")
    assert ms.current is None, "named versions have no natural newest: SCHEMA_VERSION must say"
    with pytest.raises(InvalidInputError, match="two migrations 1->2"):
        _steps((1, 2), (1, 2))
    with pytest.raises(InvalidInputError, match="goes nowhere"):
        migration(from_=2, to="2")(lambda s: s)


def test_registry_decorator_and_declared_current() -> None:
    reg = MigrationSet(current=2)

    @reg.migration(from_=1, to=2)
    def add_plan(state: Any) -> Any:
        """plan defaults to []"""
        return {**state, "plan": []}

    assert isinstance(add_plan, Migration) and add_plan.description == "plan defaults to []"
    assert list(reg) == [add_plan] and reg.current == 2


# -- loading --------------------------------------------------------------------------------------
def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_load_a_registry_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _module(
        tmp_path,
        monkeypatch,
        "ckpt_test_registry_mod",
        """
        from ckptcli.schema.migrations import MigrationSet
        REGISTRY = MigrationSet(current="v2")
        @REGISTRY.migration(from_="v1", to="v2")
        def up(state):
            return state
        OTHER = 5
        """,
    )
    ms = load_migrations("ckpt_test_registry_mod:REGISTRY")
    assert ms.current == "v2" and [m.name for m in ms] == ["v1->v2"]
    # the module form finds the set-registered step too (it is bound at the top level)
    assert [m.name for m in load_migrations("ckpt_test_registry_mod")] == ["v1->v2"]
    with pytest.raises(InvalidInputError, match="is a int, not a MigrationSet"):
        load_migrations("ckpt_test_registry_mod:OTHER")
    with pytest.raises(NotFoundError, match="has no attribute 'MISSING'"):
        load_migrations("ckpt_test_registry_mod:MISSING")


def test_load_errors_are_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _module(tmp_path, monkeypatch, "ckpt_test_broken_mod", "raise RuntimeError('no config file')\n")
    _module(tmp_path, monkeypatch, "ckpt_test_needs_dep", "import ckpt_test_not_installed_dep\n")
    _module(tmp_path, monkeypatch, "ckpt_test_empty_mod", "X = 1\n")
    with pytest.raises(InvalidInputError, match="importing ckpt_test_broken_mod failed: RuntimeError: no config file"):
        load_migrations("ckpt_test_broken_mod")
    with pytest.raises(InvalidInputError, match="ModuleNotFoundError"):
        load_migrations("ckpt_test_needs_dep")  # a dependency of the module is missing: not "no such module"
    with pytest.raises(NotFoundError, match="no module named 'ckpt_test_nowhere'"):
        load_migrations("ckpt_test_nowhere.migrations")
    with pytest.raises(InvalidInputError, match="declares no migrations"):
        load_migrations("ckpt_test_empty_mod")
    for bad in ("a:b:c", "mod:", ":x", "not a module"):
        with pytest.raises(UsageError):
            load_migrations(bad)


def test_load_from_an_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "ckpt_test_example-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ckpt-test-example\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ckpt.migrations]\nsupport-bot = tests.schema_example.migrations\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "support-bot" in installed_migrations()
    ms = load_migrations("ep:support-bot")
    assert ms.current == 3 and [m.name for m in ms.plan(1, 3)] == ["1->2", "2->3"]
    with pytest.raises(NotFoundError, match=r"no migrations entry point 'nope'.*installed: .*support-bot"):
        load_migrations("ep:nope")


# -- migrating a checkpoint ---------------------------------------------------------------------------
@pytest.fixture
def example_set() -> MigrationSet:
    return load_migrations("tests.schema_example.migrations")


def test_migrate_checkpoint_writes_a_child(store: Store, tmp_path: Path, example_set: MigrationSet) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "report.txt").write_bytes(b"x" * 300_000)
    old = ckptcli.take(
        store, V1, subject="agent:support-bot", schema_version=1, labels={"ticket": "4711"}, blobs={"work": work}, config_hash="cfg1"
    )
    new = migrate_checkpoint(store, "agent:support-bot", 3, example_set)
    m = new.manifest
    assert m.parents == [old.id] and m.schema_version == 3 and m.subject == old.manifest.subject
    assert m.labels == {"ticket": "4711"} and m.config_hash == "cfg1" and m.message == "migrate schema 1 -> 3"
    assert m.sections["blobs"] == old.manifest.sections["blobs"], "blobs are carried over, not re-read"
    assert new.new_bytes < 10_000, "the 300 KB blob is shared, not stored again"
    ck = ckptcli.open_checkpoint(new.hex, store)
    assert ck.state() == V3
    out = tmp_path / "restored"
    ck.restore_blobs(out)
    assert (out / "work" / "report.txt").read_bytes() == b"x" * 300_000
    assert ckptcli.open_checkpoint(old.hex, store).state() == V1
    assert ckptcli.open_checkpoint("agent:support-bot", store).id == new.id, "the migrated checkpoint is the subject's latest"
    assert ckptcli.verify(store, read_data=True).ok


def test_a_failing_migration_writes_nothing(store: Store, example_set: MigrationSet) -> None:
    bad = {"memory": {"notes": "n", "user": 42}}
    old = ckptcli.take(store, bad, subject="agent:support-bot", schema_version=1)
    before = sorted(store.manifest_ids())
    with pytest.raises(MigrationError) as info:
        migrate_checkpoint(store, old.hex, 3, example_set)
    msg = str(info.value)
    assert msg.startswith("migration 2->3 (memory.user") and "raised AttributeError: 'int' object has no attribute 'partition'" in msg
    assert "the checkpoint is unchanged" in msg and info.value.exit_code == ExitCode.FAILURE
    assert isinstance(info.value.__cause__, AttributeError), "the project's exception is kept for CKPT_DEBUG"
    assert sorted(store.manifest_ids()) == before
    assert ckptcli.open_checkpoint(old.hex, store).state() == bad
    assert ckptcli.verify(store, read_data=True).ok


def test_migrate_checkpoint_refusals(store: Store, tmp_path: Path, example_set: MigrationSet) -> None:
    unversioned = ckptcli.take(store, V1, subject="agent:a")
    with pytest.raises(MigrationError, match="has no schema_version; pass --assume-version N"):
        migrate_checkpoint(store, unversioned.hex, 3, example_set)
    assumed = migrate_checkpoint(store, unversioned.hex, 3, example_set, assume_version=1, message="to v3", branch="schema-v3")
    assert assumed.manifest.schema_version == 3 and assumed.manifest.message == "to v3"
    assert store.read_ref("refs/branches/schema-v3") == assumed.id
    with pytest.raises(MigrationError, match="already at schema version 3"):
        migrate_checkpoint(store, assumed.hex, "3", example_set)
    future = ckptcli.take(store, V3, subject="agent:b", schema_version=9)
    with pytest.raises(MigrationError, match="no migration path from schema version 9 to 3"):
        migrate_checkpoint(store, future.hex, 3, example_set)
    exported = tmp_path / "v1.ckpt"
    ckptcli.export_checkpoint(ckptcli.open_checkpoint(unversioned.hex, store), exported)
    with pytest.raises(InvalidInputError, match="import it first"):
        migrate_checkpoint(store, str(exported), 3, example_set, assume_version=1)
    forgot_return = MigrationSet([migration(from_=1, to=2)(lambda s: None)])
    with pytest.raises(MigrationError, match="returned None"):
        migrate_checkpoint(store, unversioned.hex, 2, forgot_return, assume_version=1)
    unstorable = MigrationSet([migration(from_=1, to=2)(lambda s: {"memory": {1: "int key"}})])
    before = sorted(store.manifest_ids())
    with pytest.raises(InvalidInputError, match=r"after migration 1->2: memory.*string keys"):
        migrate_checkpoint(store, unversioned.hex, 2, unstorable, assume_version=1)
    assert sorted(store.manifest_ids()) == before


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(doc=strategies.documents)
def test_migrate_round_trip(tmp_path: Path, doc: Any) -> None:
    """Any document through a chain of identity steps: the child holds exactly the same state."""
    assume(doc is not None)  # a step returning None is refused (a forgotten return)
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        store = ckptcli.init_store(Path(d) / "s")
        old = ckptcli.take(store, doc, subject="agent:prop", schema_version=1)
        new = migrate_checkpoint(store, old.hex, 3, _steps((1, 2), (2, 3)))
        assert new.manifest.parents == [old.id] and new.manifest.schema_version == 3
        assert states_equal(ckptcli.open_checkpoint(new.hex, store).state(), doc)
        assert new.manifest.layout == old.manifest.layout
