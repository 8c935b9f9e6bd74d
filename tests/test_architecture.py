"""The package's shape: imports go only downward through the layers (docs/design.md "Layers"),
and no import cycle exists among ckptcli's modules, counting imports inside functions and
type-checking-only ones (they are the ones that hide a cycle)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "ckptcli"


def import_graph(root: Path) -> dict[str, set[str]]:
    """Every ckptcli module and the ckptcli modules it imports anywhere in its source."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                found = known(target)
                if found and found != name:
                    graph[name].add(found)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_among_ckptcli_modules() -> None:
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "ckptcli"
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("")
    (pkg / "api.py").write_text("from ckptcli.store import repository\n")
    (pkg / "store" / "repository.py").write_text("def f():\n    from ckptcli import api\n")
    assert find_cycle(import_graph(pkg)) == ["ckptcli.api", "ckptcli.store.repository", "ckptcli.api"]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], cwd=cwd, capture_output=True, text=True)


def test_the_layers_contract_holds() -> None:
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("ckptcli/store/repository.py", "from ckptcli.history import events"),  # store -> history
        ("ckptcli/format/values.py", "    from ckptcli.store import repository"),  # inside a function
        ("ckptcli/history/events.py", "from ckptcli.cli import app"),  # history -> cli
    ],
)
def test_the_layers_contract_fails_on_an_upward_import(tmp_path: Path, module: str, upward: str) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    shutil.copytree(PACKAGE, copy / "ckptcli", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    text = target.read_text()
    if upward.startswith(" "):
        text += f"\n\ndef _upward() -> None:\n{upward}\n"
    else:
        text += f"\n{upward}  # noqa\n"
    target.write_text(text)
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=copy,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BROKEN" in proc.stdout, proc.stdout


def test_every_part_of_the_package_sits_in_a_layer() -> None:
    """A module the contract does not name is unconstrained: each child of ckptcli is in one layer."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "layers"]
    named = [m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")]
    assert len(named) == len(set(named)), "a module is named in two layers"
    children = {
        f"ckptcli.{p.stem if p.suffix else p.name}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").is_file()
    }
    assert children == set(named), f"not in a layer: {sorted(children - set(named))}; no such module: {sorted(set(named) - children)}"
