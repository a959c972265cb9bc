"""Circles in resdyn's import graph, counting imports inside functions too: between modules, and between the
parts of the code (packages) that docs/architecture.md draws as layers.

    python docs/tools/import_cycles.py        # prints each circle; exit 1 when there is one

Every ``import`` and ``from ... import`` statement anywhere in a module (top level, functions,
``TYPE_CHECKING`` blocks) is an edge from that module to the resdyn module it names; ``from . import x``
counts as an edge to ``x`` when ``x`` is a module. The circles are the strongly connected components
with more than one module (Tarjan's algorithm, via graphlib's cycle detection would report only one).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
# import name -> folder (pyproject.toml's package-dir)
PACKAGES = {"resdyn.dagster_project": REPOSITORY / "dagster_project", "resdyn.assets": REPOSITORY / "assets",
            "resdyn": REPOSITORY / "resdyn"}


def modules() -> dict[str, Path]:
    """Every module of the project by its import name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if name.startswith("resdyn.dagster_project") and package == "resdyn":
                continue
            found.setdefault(name, path)
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its body)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.level, node.module)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                while target and target not in known:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)  # (a package's own __init__ is not an edge of its modules)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# The parts whose imports must point one way. The science (resdyn/ with its subpackages) is one part: its own
# modules have no circle (the module graph above), and it imports no other part but through its two entry points
# (resdyn.open / resdyn.run, python -m resdyn: the facade, a part of its own, above the interface).
FACADE = ("resdyn", "resdyn.__main__")
STATED_PACKAGE_CIRCLES: list[list[str]] = []  # none: a circle between parts must be stated here with its reason


def part_of(module: str) -> str:
    """The part (layer) a module belongs to: the facade, the science, the assets, or a folder of dagster_project
    (its top-level modules, definitions.py, are the part ``resdyn.dagster_project``)."""
    if module in FACADE:
        return "facade"
    if module.startswith("resdyn.dagster_project."):
        rest = module.removeprefix("resdyn.dagster_project.").split(".")
        return "resdyn.dagster_project" + (f".{rest[0]}" if len(rest) > 1 or _is_package(module) else "")
    if module == "resdyn.dagster_project":
        return module
    if module.startswith("resdyn.assets") or module == "resdyn.assets":
        return "resdyn.assets"
    return "science"


def _is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


def package_graph(graph: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """part -> the parts its modules import (imports inside functions included)."""
    graph = import_graph() if graph is None else graph
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = part_of(module)
        parts.setdefault(source, set())
        for target in targets:
            if part_of(target) != source:
                parts[source].add(part_of(target))
                parts.setdefault(part_of(target), set())
    return parts


def main() -> int:
    graph = import_graph()
    found = circles(graph)
    for component in found:
        print("circle: " + " <-> ".join(component))
    parts = package_graph(graph)
    between = [component for component in circles(parts) if component not in STATED_PACKAGE_CIRCLES]
    for component in between:
        print("circle between parts: " + " <-> ".join(component))
    for part in sorted(parts):
        print(f"  {part} -> {', '.join(sorted(parts[part])) or '(nothing)'}")
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(found)} circle(s); "
          f"{len(parts)} parts, {len(between)} circle(s) between them")
    return 1 if found or between else 0


if __name__ == "__main__":
    sys.exit(main())
