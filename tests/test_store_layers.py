"""The store layer's shape (issue 15): it imports nothing above it, its modules import
each other without a cycle, each on-disk format has one owner, and the adapters'
hooks it uses instead of imports are registered and loaded."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from ckptcli import plugins

PKG = Path(__file__).resolve().parent.parent / "ckptcli"
STORE = PKG / "store"
#: what a store module may import: its own layer and those below it
BELOW = ("ckptcli.store", "ckptcli.format", "ckptcli.errors", "ckptcli.notices", "ckptcli.progress", "ckptcli._util", "ckptcli.plugins")


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every ckptcli import in `path`: at module level, inside
    functions and under TYPE_CHECKING alike."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name == "ckptcli" or name.startswith("ckptcli."):
                yield node.lineno, name


def _module(path: Path) -> str:
    return "ckptcli.store." + path.stem


def test_the_store_imports_nothing_above_it() -> None:
    upward = [
        f"{p.relative_to(PKG.parent)}:{line} imports {name}"
        for p in sorted(STORE.glob("*.py"))
        for line, name in _imports(p)
        if name != "ckptcli" and not name.startswith(BELOW)
    ]
    assert upward == []


def test_the_store_modules_import_each_other_without_a_cycle() -> None:
    modules = {_module(p): p for p in STORE.glob("*.py") if p.stem != "__init__"}
    graph = {
        m: {n for _l, name in _imports(p) for n in modules if n != m and (name == n or name.startswith(n + "."))}
        for m, p in modules.items()
    }
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        assert m not in path, f"import cycle: {' -> '.join([*path[path.index(m) :], m])}"
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_each_store_format_has_one_owner() -> None:
    """Only pack.py names the pack's record kinds, only index.py the index's, and only
    layout.py spells the store's directories in paths."""
    owners = {"KIND_PACK": "pack.py", "KIND_PACK_TRAILER": "pack.py", "KIND_INDEX": "index.py"}
    found = {
        (kind, p.name)
        for p in PKG.rglob("*.py")
        if p.parent.name != "format"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Attribute) and (kind := node.attr) in owners
    }
    assert found == {(kind, owner) for kind, owner in owners.items()}
    hand_built = [
        f"{p.name}:{node.lineno}"
        for p in sorted(STORE.glob("*.py"))
        if p.name != "layout.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.JoinedStr)
        and node.values
        and isinstance(node.values[0], ast.Constant)
        and str(node.values[0].value).startswith(("packs/", "index/", "manifests/", "refs/", "logs/", "locks/", "tmp/", "cache/"))
    ]
    assert hand_built == []


def test_the_langgraph_hooks_the_store_uses_are_registered() -> None:
    from ckptcli.adapters.langgraph.plugins import Expiry, check_beside

    assert plugins.load(plugins.EXPIRY, ["langgraph"]) == [("langgraph", Expiry)]
    assert plugins.load(plugins.BESIDE_STORE) == [("langgraph", check_beside)]
    assert plugins.names(plugins.RETENTION) == ["langgraph"]
    # a thread's own TTL (minutes, on its newest checkpoint that has one) wins over the default
    assert Expiry.ttl([{}, {"langgraph.ttl": "2 keep_latest"}], 3600, "delete") == (120.0, "keep_latest")
    assert Expiry.ttl([{}], 3600, "delete") == (3600, "delete")


def test_a_journal_beside_the_store_is_checked_through_its_hook(tmp_path: Path) -> None:
    """verify finds a LangGraph journal that is not one through the `ckptcli.beside_store`
    hook, with no import of the adapter in the store layer."""
    from ckptcli import api
    from ckptcli.store.layout import journal_dir
    from ckptcli.store.verify import VerifyReport, verify_store

    store = api.init_store(tmp_path / ".ckpt")
    jdir = journal_dir(tmp_path / ".ckpt")
    jdir.mkdir()
    (jdir / "threads").symlink_to(tmp_path)
    rep = verify_store(store, None, read_data=False)
    assert isinstance(rep, VerifyReport)
    assert [(p.kind, Path(p.name).name) for p in rep.problems] == [("journal", "threads")]
