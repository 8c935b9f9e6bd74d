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
