"""The shape of the code, checked: the shared library imports neither process, each process imports only the
library, the module graph has no cycle, a package qualifies its modules' names (unique within it), and none is over
400 lines. bench/ is read too: its scripts import each other by bare name (their folder is on sys.path)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("mcp_batch", "service", "worker", "mcp_batch_cli", "demo", "bench")
# Who may import whom: only the command (the composition root) imports both processes.
ALLOWED = {
    "mcp_batch": set(),
    "service": {"mcp_batch"},
    "worker": {"mcp_batch"},
    "demo": set(),
    "mcp_batch_cli": {"mcp_batch", "service", "worker", "demo"},
    "bench": {"mcp_batch", "mcp_batch_cli"},
}
# Inside the shared library, folder by folder (its root's modules are the floor): the store hands back plain data and
# the contract renders it; credentials (the record, sealing) sit under the store; ops observes the store (metrics of
# its overview, spans of its claims).
FOLDERS = {
    "mcp_batch": set(),
    "mcp_batch.client": {"mcp_batch", "mcp_batch.credentials"},
    "mcp_batch.backends": {"mcp_batch"},
    "mcp_batch.credentials": {"mcp_batch", "mcp_batch.backends"},
    "mcp_batch.store": {"mcp_batch", "mcp_batch.backends", "mcp_batch.credentials"},
    "mcp_batch.contract": {"mcp_batch", "mcp_batch.backends", "mcp_batch.store"},
    "mcp_batch.ops": {"mcp_batch", "mcp_batch.store"},
}
# Every door goes through the one application layer, which imports no door; the body readers know no use case.
# Two packages are entered through their __init__ only (nothing outside them imports their modules).
SERVICE_LOWER = {"service.application": ("service.routes", "service.doors", "service.bodies")}
SERVICE_LOWER["service.bodies"] = ("service.application", "service.routes", "service.doors")
ENTERED_BY_INIT = ("service.bodies", "service.doors.mcp")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports (a `from package import module` counts as the module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    if name.startswith("bench."):  # a bench script's sibling, imported by its bare name
        names |= {f"bench.{imported}" for imported in names}
    return {imported for imported in names if imported in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) - {name} for name, path in modules.items()}


def test_each_package_imports_only_what_it_may() -> None:
    for name, imported in _graph().items():
        package = name.split(".")[0]
        others = {module.split(".")[0] for module in imported} - {package}
        assert others <= ALLOWED[package], f"{name} imports {sorted(others - ALLOWED[package])}"


def test_the_module_graph_has_no_cycle() -> None:
    graph = _graph()
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


def _folder(name: str, modules: dict[str, Path]) -> str:
    return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]


def test_the_shared_librarys_folders_import_one_way() -> None:
    modules = _modules()
    for name, imported in _graph().items():
        if name.split(".")[0] != "mcp_batch":
            continue
        folder = _folder(name, modules)
        others = {_folder(module, modules) for module in imported if module.startswith("mcp_batch")} - {folder}
        assert others <= FOLDERS[folder], f"{name} imports {sorted(others - FOLDERS[folder])}"


def test_the_application_layer_imports_no_door_and_two_packages_are_entered_by_their_init() -> None:
    for name, imported in _graph().items():
        for lower, above in SERVICE_LOWER.items():
            if name.startswith(lower):
                assert [m for m in imported if m.startswith(above)] == [], f"{name} imports a layer above it"
        for package in ENTERED_BY_INIT:
            if not name.startswith(package):
                inside = [m for m in imported if m.startswith(package + ".")]
                assert inside == [], f"{name} imports {inside}: enter {package} by its __init__"


def test_a_package_qualifies_its_modules_names_and_no_module_is_long() -> None:
    """`doors/mcp/tasks.py` beside `worker/tasks.py`, `client/errors.py` beside `errors.py`; but within one folder no
    two names for one import (a module and a sub-package, or two names that differ in case), no module named after
    its folder (`worker/worker_metrics.py`), and no three modules named by one first word (`mcp_*.py`): those are a
    package of their own."""
    paths = list(_modules().values())
    folders: dict[Path, list[str]] = {}
    for path in paths:
        if path.name != "__init__.py":
            folders.setdefault(path.parent, []).append(path.stem)
        if path.name == "__init__.py" and path.parent.parent != ROOT:
            folders.setdefault(path.parent.parent, []).append(path.parent.name)
    for folder, names in folders.items():
        where = folder.relative_to(ROOT)
        clashes = [n for n, count in Counter(n.casefold() for n in names).items() if count > 1]
        assert clashes == [], f"{where}: {clashes} name one import twice"
        assert [n for n in names if n.startswith(f"{folder.name}_")] == [], f"{where}: a module named after its folder"
        words = Counter(n.split("_")[0] for n in names if "_" in n)
        assert [w for w, count in words.items() if count >= 3] == [], f"{where}: modules grouped by a name's prefix"
    assert [str(p.relative_to(ROOT)) for p in paths if len(p.read_text().splitlines()) > 400] == []


# The queue and the key layout belong to the store: the processes call its parts (store/queue.py for enqueue, wake
# and heartbeats), never arq's pool methods nor a key's name. The channels a listener subscribes to and the
# durability probe are handed to the store's and ops' own objects at start-up, so those names may be passed on.
ARQ_METHODS = {"enqueue_job", "all_job_results", "queued_jobs"}
PASSED_ON = {"done_channel", "released_channel", "cancel_channel", "credentials_channel", "durability_probe", "prefix"}


def _key_names() -> set[str]:
    from mcp_batch.keys import Keys

    return {name for name in vars(Keys) if not name.startswith("_")} - PASSED_ON


def test_the_processes_touch_no_queue_method_and_no_key_name() -> None:
    key_names = _key_names()
    for package in ("service", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Attribute):
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert node.attr not in ARQ_METHODS, f"{where}: arq's {node.attr}; use the store's queue"
                owner = node.value
                named_keys = (isinstance(owner, ast.Name) and owner.id == "keys") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "keys"
                )
                assert not (named_keys and node.attr in key_names), f"{where}: key name {node.attr}; ask the store"
