"""Import layering, read from the source: the data flow's rules between packages
(docs/architecture.md) and no import cycles, TYPE_CHECKING imports included.

A cycle hidden behind `if TYPE_CHECKING:` still couples two modules both ways; the broker's
seams (topic ↔ subscriptions ↔ storage, consumer ↔ its wire) are Protocols instead. The
helpers take any set of packages, so further layer rules can reuse the graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name → file, for every .py file under the given top-level packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(module: str, path: Path, modules: Iterable[str]) -> set[str]:
    """The modules an import statement anywhere in the file names (functions and
    TYPE_CHECKING blocks too): `from a import b` is module a.b when there is one, else a."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                names.add(submodule if submodule in known else base)
    return {name for name in names if name in known and name != module}


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module → the modules of the given packages its source imports.

    The package __init__ Python runs on the way to a submodule is not counted, so a package
    that re-exports from its submodules is not a cycle with each of them.
    """
    modules = module_files(root, packages)
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


PACKAGES = [
    "pulsar_protocol",
    "results_contract",
    "broker",
    "drivers",
    "harness",
    "spark_analysis",
    "reports",
]

# What each package may take from the others (docs/architecture.md): the tree reads as the
# data flow, and the two shared packages at the bottom import nothing of the project.
ALLOWED = {
    "pulsar_protocol": set(),
    "results_contract": set(),
    "broker": {"pulsar_protocol"},
    "drivers": {"pulsar_protocol", "results_contract"},
    "harness": {"drivers.base", "drivers.config", "results_contract"},
    "spark_analysis": {"results_contract"},
    "reports": {"results_contract", "spark_analysis"},
}
# The `bench` command and the end of `bench run` hand over to the other stages' entry points.
ORCHESTRATORS = {
    "harness.cli": {"broker.cli", "spark_analysis", "reports"},
    "harness.run_command": {"broker.cli", "spark_analysis", "reports"},
}


def _allowed(module: str, target: str) -> bool:
    rules = ALLOWED[module.split(".")[0]] | ORCHESTRATORS.get(module, set())
    return any(target == rule or target.startswith(rule + ".") for rule in rules)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses packages against ALLOWED, as `importer -> imported`."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] != module.split(".")[0] and not _allowed(module, target)
    )


def test_each_package_imports_only_what_the_data_flow_allows() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert {m.split(".")[0] for m in graph} == set(PACKAGES)
    assert layer_violations(graph) == []


def test_a_driver_importing_the_broker_is_a_violation() -> None:
    graph = {
        "drivers.pulsar.x": {"broker.core.topic", "pulsar_protocol.frames"},
        "spark_analysis.job": {"harness.hlog"},
        "harness.worker": {"drivers.pulsar.driver", "drivers.base"},
    }
    assert layer_violations(graph) == [
        "drivers.pulsar.x -> broker.core.topic",
        "harness.worker -> drivers.pulsar.driver",
        "spark_analysis.job -> harness.hlog",
    ]


def test_no_package_has_an_import_cycle() -> None:
    assert find_cycles(import_graph(ROOT, PACKAGES)) == []


def test_the_broker_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, ["broker", "pulsar_protocol"])
    assert "broker.subscriptions.subscription" in graph  # the graph did find the modules
    assert find_cycles(graph) == []


def test_a_cycle_behind_type_checking_is_still_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    )
    (package / "c.py").write_text("from . import a\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.c"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b"]]


def test_the_harness_spells_nothing_of_pulsar() -> None:
    """Topic names, admin paths and the wire belong to the driver (OMB's seam): a second
    driver must not inherit Pulsar's naming from the harness."""
    spelled = [
        f"{path.relative_to(ROOT)}: {word!r}"
        for path in sorted((ROOT / "harness").rglob("*.py"))
        for word in ("persistent://", "/admin/v2", "pulsar_protocol", ":6650")
        if word in path.read_text()
    ]
    assert spelled == []
