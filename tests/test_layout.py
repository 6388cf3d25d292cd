"""The shape of the code, checked: the shared library imports neither process, each process imports only the
library, the module graph has no cycle, no two modules share a basename, and none is over 400 lines."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("mcp_batch", "service", "worker", "mcp_batch_cli", "demo")
# Who may import whom: only the command (the composition root) imports both processes.
ALLOWED = {
    "mcp_batch": set(),
    "service": {"mcp_batch"},
    "worker": {"mcp_batch"},
    "demo": set(),
    "mcp_batch_cli": {"mcp_batch", "service", "worker", "demo"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports (a `from package import module` counts as the module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name in modules}


def test_each_package_imports_only_what_it_may() -> None:
    modules = _modules()
    for name, path in modules.items():
        package = name.split(".")[0]
        others = {imported.split(".")[0] for imported in _imports(path, modules)} - {package}
        assert others <= ALLOWED[package], f"{name} imports {sorted(others - ALLOWED[package])}"


def test_the_module_graph_has_no_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in graph[name]:
            assert state.get(dep) != 1, "import cycle: " + " -> ".join([*path, name, dep])
            if dep not in state:
                visit(dep, [*path, name])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_no_two_modules_share_a_basename_and_none_is_long() -> None:
    paths = list(_modules().values())
    names = Counter(p.name for p in paths if p.name not in ("__init__.py", "__main__.py"))
    assert [n for n, count in names.items() if count > 1] == []
    assert [str(p.relative_to(ROOT)) for p in paths if len(p.read_text().splitlines()) > 400] == []
