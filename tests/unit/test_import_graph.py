"""The import graph has no circles (imports inside functions counted), and only the configuration module
reads the environment."""

import importlib.util
import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("import_cycles", REPOSITORY / "docs" / "tools" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_import_graph_has_no_circles():
    tool = _tool()
    graph = tool.import_graph()
    assert len(graph) > 50 and "resdyn.dagster_project.store.warehouse" in graph["resdyn.dagster_project.cli"]
    assert tool.circles(graph) == []


def test_the_circle_finder_finds_circles_through_any_number_of_modules():
    tool = _tool()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}, "f": {"a"}}
    assert sorted(tool.circles(graph)) == [["a", "b", "c"], ["e", "e2"]]


def test_imports_inside_functions_are_edges(tmp_path, monkeypatch):
    tool = _tool()
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("def f():\n    from .two import g\n")
    (package / "two.py").write_text("from pkg import one\n")
    monkeypatch.setattr(tool, "PACKAGES", {"pkg": package})
    assert tool.circles(tool.import_graph()) == [["pkg.one", "pkg.two"]]


def test_only_the_configuration_module_reads_the_environment():
    readers = [str(path.relative_to(REPOSITORY)) for folder in ("dagster_project", "assets")
               for path in sorted((REPOSITORY / folder).rglob("*.py")) if re.search(r"os\.environ|getenv", path.read_text())]
    assert readers == ["dagster_project/config.py"]
