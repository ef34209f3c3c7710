"""The packages' import graph has layers (:data:`LAYERS`): every module imports alone, none
import in a cycle, and none imports a module of a higher layer."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lowkiq", "lowkiq_web")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    module_name(path) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
)


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported_modules(name: str, *, for_typing: bool = False) -> set[str]:
    """The project modules ``name`` imports at run time (anywhere but ``if TYPE_CHECKING:``),
    or with ``for_typing`` also those it imports for type checking only."""
    path = ROOT.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(), name, package, for_typing=for_typing)


def imports_in(source: str, name: str, package: str, *, for_typing: bool) -> set[str]:
    """The project modules the module ``name`` (of ``package``), whose text is ``source``,
    imports."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if is_type_checking_block(node) and not for_typing:
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                # `from package import module` needs the module (and, as
                # every import does, the package's __init__ first).
                found.add(submodule if submodule in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return {module for module in found if module in MODULES and module != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that returns to its start), or ``None``."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_module_imports_in_a_cycle() -> None:
    """A package is a stack of layers; no two modules need each other, even lazily."""
    graph = {name: imported_modules(name) for name in MODULES}
    assert find_cycle(graph) is None


#: (layer, what it must not import): the runtime talks to ownership and health through
#: their interfaces, and ownership to storage, never the other way round.  A module of
#: the layer must not import it, even for typing only, nor import a module that
#: imports it at run time.
FORBIDDEN = (
    ("lowkiq.storage", "lowkiq.ownership"),
    ("lowkiq.ownership", "lowkiq.runtime"),
    ("lowkiq.health", "lowkiq.runtime"),
)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def reached(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """``start`` and every module it imports, directly or through others."""
    seen = set(start)
    todo = list(start)
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def layer_violations(run_time: dict[str, set[str]], typing: dict[str, set[str]]) -> list[str]:
    """Each module that breaks a rule of :data:`FORBIDDEN`, given the modules each imports
    at ``run_time`` and, also for ``typing``, directly."""
    return [
        f"{name} imports {target} (no {forbidden} in {layer})"
        for layer, forbidden in FORBIDDEN
        for name in sorted(typing)
        if within(name, layer)
        for target in sorted(reached(run_time, typing[name]))
        if within(target, forbidden)
    ]


def test_the_layer_checker_finds_a_forbidden_import() -> None:
    imports = imports_in(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..ownership import leases\n",
        "lowkiq.storage.example",
        "lowkiq.storage",
        for_typing=True,
    )
    assert imports == {"lowkiq.ownership.leases"}
    run_time = {
        "lowkiq.storage.example": {"lowkiq.storage.keys"},
        "lowkiq.storage.keys": {"lowkiq.errors"},
        "lowkiq.errors": {"lowkiq.ownership.leases"},
        "lowkiq.ownership.leases": set(),
    }
    typing = {**run_time, "lowkiq.storage.keys": {"lowkiq.errors", *imports}}
    assert layer_violations(run_time, typing) == [
        "lowkiq.storage.example imports lowkiq.ownership.leases"
        " (no lowkiq.ownership in lowkiq.storage)",
        "lowkiq.storage.keys imports lowkiq.ownership.leases"
        " (no lowkiq.ownership in lowkiq.storage)",
    ]
    run_time["lowkiq.errors"] = set()
    assert layer_violations(run_time, typing) == [
        "lowkiq.storage.keys imports lowkiq.ownership.leases"
        " (no lowkiq.ownership in lowkiq.storage)",
    ]


def test_layers_import_only_downwards() -> None:
    """Storage knows nothing of ownership; ownership and health nothing of the runtime."""
    run_time = {name: imported_modules(name) for name in MODULES}
    typing = {name: imported_modules(name, for_typing=True) for name in MODULES}
    assert layer_violations(run_time, typing) == []


def test_the_dashboard_uses_the_engine_s_public_objects_not_its_storage() -> None:
    for name in MODULES:
        if name.startswith("lowkiq_web"):
            storage = sorted(m for m in imported_modules(name) if m.startswith("lowkiq.storage"))
            assert not storage, f"{name} imports {storage}"


#: The layers of the packages, lowest first: (what the layer holds, its entries).  A
#: module imports at run time (``if TYPE_CHECKING:`` aside) only modules of its own
#: layer or of a lower one.  An entry is a module, or a package with its modules; a
#: module belongs to the longest entry that names it (``lowkiq`` names only the
#: package's ``__init__``).  Every module must belong to one: a new package, or a new
#: module at the top of ``lowkiq``, needs a layer here.  docs/architecture.md draws them.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "plain values and strategies, no Redis",
        frozenset(
            {
                "lowkiq.errors",
                "lowkiq.version",
                "lowkiq.serializers",
                "lowkiq.outcomes",
                "lowkiq.middleware",
                "lowkiq.config",
                "lowkiq.strategies",
                # What a Schedule is, which the settings hold; the rest of
                # lowkiq.periodic runs schedules and reads the settings.
                "lowkiq.periodic.schedule",
            }
        ),
    ),
    ("the Redis clients", frozenset({"lowkiq.clients"})),
    ("storage: key names, Lua scripts, a queue's writes and reads", frozenset({"lowkiq.storage"})),
    ("the settings", frozenset({"lowkiq.settings"})),
    (
        "over storage: shard ownership, rate limits and group caps, periodic jobs, workflows",
        frozenset({"lowkiq.ownership", "lowkiq.limits", "lowkiq.periodic", "lowkiq.workflows"}),
    ),
    ("the batch being performed, for user code", frozenset({"lowkiq.running"})),
    ("around one perform: its event loop, its time limit", frozenset({"lowkiq.perform"})),
    ("enqueueing and reads on redis.asyncio", frozenset({"lowkiq.aio"})),
    (
        "enqueueing when a Django transaction commits (perform_async's on_commit)",
        frozenset({"lowkiq.contrib.django.transactions"}),
    ),
    ("the Worker base class", frozenset({"lowkiq.worker"})),
    (
        "beside workers: metrics, health, integrations, iterable workers",
        frozenset({"lowkiq.telemetry", "lowkiq.health", "lowkiq.integrations", "lowkiq.iterable"}),
    ),
    ("the worker process", frozenset({"lowkiq.runtime"})),
    ("users' tests", frozenset({"lowkiq.testing", "lowkiq.pytest_plugin"})),
    ("the public API", frozenset({"lowkiq"})),
    ("the command line", frozenset({"lowkiq.cli", "lowkiq.__main__"})),
    ("the dashboard", frozenset({"lowkiq_web"})),
    (
        "framework apps: the Django app, its command, dashboard and tasks",
        frozenset({"lowkiq.contrib"}),
    ),
)

#: Run-time imports up the layers, known and to be fixed: (module, what it imports).
UPWARD = frozenset(
    {
        # RateLimit only annotates the claims' calls; storage should not need lowkiq.limits.
        ("lowkiq.storage.group_claims", "lowkiq.limits.rate_limit"),
        # A group's rate limit set at run time is a RateLimit (checked and read back).
        ("lowkiq.storage.group_actions", "lowkiq.limits.rate_limit"),
    }
)


def entry_of(module: str, layers: tuple[tuple[str, frozenset[str]], ...] = LAYERS) -> str | None:
    """The entry of ``layers`` that ``module`` belongs to (the longest naming it), or
    ``None``."""
    names = [
        entry
        for _, entries in layers
        for entry in entries
        if module == entry or (entry != "lowkiq" and module.startswith(f"{entry}."))
    ]
    return max(names, key=len, default=None)


def upward_imports(
    graph: dict[str, set[str]],
    layers: tuple[tuple[str, frozenset[str]], ...] = LAYERS,
    allowed: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """Each import of ``graph`` from a module into one of a higher layer of ``layers``,
    but those ``allowed``."""
    number = {entry: n for n, (_, entries) in enumerate(layers) for entry in entries}

    def layer(module: str) -> int:
        entry = entry_of(module, layers)
        assert entry is not None, f"{module} has no layer"
        return number[entry]

    return [
        f"{name} ({layers[layer(name)][0]}) imports {target} ({layers[layer(target)][0]})"
        for name in sorted(graph)
        for target in sorted(graph[name])
        if layer(target) > layer(name) and (name, target) not in allowed
    ]


def test_the_layer_list_finds_an_upward_import_and_a_module_without_a_layer() -> None:
    layers = (
        ("low", frozenset({"lowkiq.storage", "lowkiq.periodic.schedule"})),
        ("high", frozenset({"lowkiq.periodic", "lowkiq"})),
    )
    assert entry_of("lowkiq.storage.keys", layers) == "lowkiq.storage"
    assert entry_of("lowkiq.periodic.schedule", layers) == "lowkiq.periodic.schedule"
    assert entry_of("lowkiq.periodic.runner", layers) == "lowkiq.periodic"
    assert entry_of("lowkiq.newcomer", layers) is None  # "lowkiq" is the __init__ only
    graph = {
        "lowkiq": {"lowkiq.storage.keys"},
        "lowkiq.periodic.runner": {"lowkiq.periodic.schedule"},
        "lowkiq.periodic.schedule": set(),
        "lowkiq.storage.keys": {"lowkiq.periodic"},
        "lowkiq.periodic": {"lowkiq.periodic.schedule"},
    }
    assert upward_imports(graph, layers) == [
        "lowkiq.storage.keys (low) imports lowkiq.periodic (high)"
    ]
    assert (
        upward_imports(graph, layers, frozenset({("lowkiq.storage.keys", "lowkiq.periodic")})) == []
    )


def test_every_module_has_a_layer() -> None:
    """A new package or top-level module fails here until LAYERS names its layer."""
    entries = [entry for _, layer in LAYERS for entry in layer]
    assert len(entries) == len(set(entries)), "an entry is in two layers"
    assert [name for name in MODULES if entry_of(name) is None] == []
    assert [e for e in entries if not any(entry_of(name) == e for name in MODULES)] == []


def test_lower_layers_never_import_higher_ones() -> None:
    run_time = {name: imported_modules(name) for name in MODULES}
    assert upward_imports(run_time, LAYERS, UPWARD) == []
    assert [pair for pair in sorted(UPWARD) if pair[1] not in run_time[pair[0]]] == [], (
        "fixed: delete it from UPWARD"
    )


@pytest.mark.parametrize("name", [name for name in MODULES if not name.endswith("__main__")])
def test_every_module_imports_alone(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
