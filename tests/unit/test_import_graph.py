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
    assert len(graph) > 50 and "resdyn.dagster_project.store.warehouse" in graph["resdyn.dagster_project.interface.cli"]
    assert tool.circles(graph) == []


def test_the_parts_import_one_way():
    """No circle between the parts of the code (dagster_project's folders, the assets, the science, the facade),
    imports inside functions included, beyond those docs/tools/import_cycles.py states; and the order
    docs/architecture.md draws holds: the store and the study never reach the asset layer, the launch or the
    interface, and the store imports no Dagster at module level."""
    tool = _tool()
    parts = tool.package_graph()
    assert [c for c in tool.circles(parts) if c not in tool.STATED_PACKAGE_CIRCLES] == []
    layer, store = "resdyn.dagster_project.asset_layer", "resdyn.dagster_project.store"
    assert parts["resdyn.assets"] == {layer, "science"}
    above = {layer, "resdyn.dagster_project.launch", "resdyn.dagster_project.interface"}
    assert not parts[store] & above and not parts["resdyn.dagster_project.study"] & above
    assert parts["resdyn.dagster_project.configuration"] <= {"science"}
    for path in sorted((REPOSITORY / "dagster_project" / "store").glob("*.py")):
        assert not re.search(r"^(import dagster|from dagster)", path.read_text(), re.M), path.name


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
    assert readers == ["dagster_project/configuration/config.py"]


def test_no_asset_module_sees_storage():
    """Issue 44's check as written: no asset module names read_matrix, a .path or the warehouse (bodies get
    handles, matrix references, the checkpoint and the corpus from the asset layer)."""
    found = [f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
             for path in sorted((REPOSITORY / "assets").rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"read_matrix|\.path\b|warehouse", line)]
    assert found == []


def test_an_input_declared_twice_is_refused():
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partition_assets import ANALYSIS, partition_asset

    def body(context, layer_metrics):
        yield from ()

    for arguments in ({"deps": ["layer_metrics"]}, {"deps": [dg.AssetKey("layer_metrics")]},
                      {"deps": [dg.AssetDep("layer_metrics")]},
                      {"tables": [dg.AssetSpec("eigenvalues", deps=["layer_metrics"])]}):
        try:
            partition_asset(ANALYSIS, **arguments)(body)
        except TypeError as error:
            assert "layer_metrics" in str(error) and "both as parameters and in deps" in str(error)
        else:
            raise AssertionError(f"{arguments}: an input declared twice was accepted")
    assert partition_asset(ANALYSIS, deps=["model_checkpoints"])(body).inputs == ["layer_metrics"]
