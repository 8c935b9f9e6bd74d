"""The import paths modules had before the 0.3 layout keep working for one minor release."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import ckptcli


@pytest.mark.parametrize(("old", "new"), sorted(ckptcli._MOVED.items()))
def test_an_old_path_gives_the_module_at_its_new_one_and_warns(old: str, new: str) -> None:
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        "assert old is new, (old, new)\n"
        f"assert any(issubclass(w.category, DeprecationWarning) and {new!r} in str(w.message) for w in caught), "
        "[str(w.message) for w in caught]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_new_path_exists() -> None:
    for new in ckptcli._MOVED.values():
        assert importlib.util.find_spec(new) is not None, new


def test_an_unknown_module_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ckptcli.no_such_module")


def test_the_public_paths_of_packages_that_were_modules() -> None:
    from ckptcli.adapters.langgraph import CkptSaver
    from ckptcli.history import bisect, log
    from ckptcli.schema import MigrationSet, load_migrations, migration

    assert CkptSaver.__module__ == "ckptcli.adapters.langgraph.saver"
    assert log.__module__ == bisect.__module__ == "ckptcli.history.query"
    assert {migration.__module__, MigrationSet.__module__, load_migrations.__module__} == {"ckptcli.schema.migrations"}


def test_the_packages_lazy_names_are_their_modules_public_names() -> None:
    """The names `ckptcli.history` and `ckptcli.schema` offer on first use are listed by hand
    (importing the module to read them would load it with the package): each must exist."""
    import ckptcli.adapters.langgraph
    import ckptcli.history
    import ckptcli.schema
    from ckptcli.history import query
    from ckptcli.schema import migrations

    assert set(ckptcli.history._QUERY) == set(query.__all__)
    assert all(hasattr(migrations, name) for name in ckptcli.schema._MIGRATIONS)
    assert all(hasattr(ckptcli.adapters.langgraph, name) for name in ckptcli.adapters.langgraph._EXPORTS)


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("ckptcli.adapters.langgraph", {"CkptSaver"}),
        ("ckptcli.history", {"log", "bisect", "LogEntry", "BisectResult"}),
        ("ckptcli.schema", {"migration", "load_migrations", "migrate_checkpoint", "installed_migrations"}),
    ],
)
def test_a_star_import_of_a_package_that_was_a_module_gives_its_names(package: str, names: set[str]) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert names <= set(namespace), sorted(namespace)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("ckptcli.schema", "storable_problem"),
        ("ckptcli.schema", "ENTRY_POINT_GROUP"),
        ("ckptcli.history", "state_at"),
        ("ckptcli.history", "diff_checkpoints"),
        ("ckptcli.adapters.langgraph", "ROTATE_BYTES"),
        ("ckptcli.adapters.langgraph", "FSYNC_POLICIES"),
        ("ckptcli.diff", "state_line"),
        ("ckptcli.diff", "MAX_ALIGN_PAIRS"),
        ("ckptcli.prune", "pack_version"),
        ("ckptcli.prune", "write_index"),
        ("ckptcli.recorder", "RECORD_HEAD"),
        ("ckptcli.store.backend", "lock_holder"),
    ],
)
def test_a_public_name_keeps_its_old_path(module: str, name: str) -> None:
    """Names found at these paths in 0.2 (found by an outside check of the move)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert getattr(importlib.import_module(module), name) is not None
