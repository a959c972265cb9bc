"""Circles in resdyn's import graph, counting imports inside functions too.

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


def main() -> int:
    graph = import_graph()
    found = circles(graph)
    for component in found:
        print("circle: " + " <-> ".join(component))
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
