"""The store layer's shape (issue 15): it imports nothing above it, its modules import
each other without a cycle, each on-disk format has one owner, and the adapters'
hooks it uses instead of imports are registered and loaded."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


#: the names of the places beside a store (store/layout), as constants and as spelled
_BESIDE_NAMES = {"JOURNAL_DIR", "LEASE_DIR", "WANT_DIR", "RECOVER_LOCK", "MEMORY_STORE_DIR", "LOG_DIR", "LOCKS"}
_BESIDE_PARTS = {"langgraph", "threads", "want", "recover.lock", "store", "locks"}


def _spells_a_place(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _BESIDE_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _BESIDE_NAMES
    return isinstance(node, ast.Constant) and node.value in _BESIDE_PARTS


def test_the_paths_beside_a_store_are_built_only_in_the_layout() -> None:
    """The LangGraph adapter's journals, leases, hand-over requests, recovery lock and
    memory-store logs (and a store's lock files) get their paths from store/layout: no
    other module joins one of their names onto a path (`root / JOURNAL_DIR / LEASE_DIR`,
    `root / "locks"`), nor lists them to join in a loop."""
    hand_built = [
        f"{p.relative_to(PKG)}:{node.lineno}"
        for p in sorted(PKG.rglob("*.py"))
        if p != STORE / "layout.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (_spells_a_place(node.left) or _spells_a_place(node.right)))
        or (isinstance(node, ast.Tuple | ast.List) and len(node.elts) > 1 and all(map(_spells_a_place, node.elts)))
    ]
    assert hand_built == []


def test_the_langgraph_saver_puts_its_files_where_the_layout_says(tmp_path: Path) -> None:
    """The paths store/layout computes are the ones the saver always used, byte for byte
    (formats/langgraph-journal.md), and a real saver makes its files there; the adapter's
    names for them stay importable."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptcli import api
    from ckptcli.adapters.langgraph import journal, leases, saver, store_log
    from ckptcli.store import layout

    root = tmp_path / ".ckpt"
    assert str(layout.journal_dir(root)) == f"{root}/langgraph"
    assert str(layout.lease_dir(root)) == f"{root}/langgraph/threads"
    assert str(layout.want_dir(root)) == f"{root}/langgraph/want"
    assert str(layout.recover_lock_file(root)) == f"{root}/langgraph/recover.lock"
    assert str(layout.memory_store_dir(root)) == f"{root}/langgraph/store"
    assert str(layout.lock_file(root, store_log.LOCK_NAME)) == f"{root}/locks/langgraph-store.lock"
    assert journal.JOURNAL_DIR == saver.JOURNAL_DIR == "langgraph"
    assert (leases.LEASE_DIR, leases.WANT_DIR, leases.RECOVER_LOCK) == ("threads", "want", "recover.lock")
    assert store_log.log_dir(root) == root / "langgraph" / "store"

    api.init_store(root)
    s = saver.CkptSaver.open(root)
    try:
        cfg: dict[str, Any] = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        s.put(cfg, {**empty_checkpoint(), "id": "1f0-a"}, {"source": "loop", "step": 1, "parents": {}}, {})  # type: ignore[arg-type]
        journals = sorted(p.name for p in (root / "langgraph").glob("*.journal"))
        made = sorted(str(p.relative_to(root)) for p in (root / "langgraph").rglob("*") if not p.name.endswith(".journal"))
    finally:
        s.close()
    assert len(journals) == 1
    assert made == ["langgraph/recover.lock", "langgraph/threads", f"langgraph/threads/{leases.lease_name('t1')}", "langgraph/want"]


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
