"""The science package stays framework-free: resdyn imports neither Dagster nor DuckDB."""

import subprocess
import sys


def test_resdyn_imports_neither_dagster_nor_duckdb():
    script = (
        "import sys, pkgutil, importlib, resdyn\n"
        "for module in pkgutil.walk_packages(resdyn.__path__, 'resdyn.'):\n"
        "    if module.name != 'resdyn.__main__':\n"
        "        importlib.import_module(module.name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'duckdb')))\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


REPOSITORY = __import__("pathlib").Path(__file__).resolve().parents[2]
# the package's two entry points: resdyn.open / resdyn.run (the notebook's way in) and python -m resdyn (the CLI)
FACADE = {"resdyn/__init__.py", "resdyn/__main__.py"}
ASSET_COLLECTOR = "dagster_project/launch/assets_index.py"  # the one module of dagster_project that imports assets


def _imported_modules(path):
    """Every module ``path`` imports, at the top or inside a function, relative imports made absolute under the
    installed layout (resdyn.dagster_project, resdyn.assets)."""
    import ast

    relative = path.relative_to(REPOSITORY)
    top = {"resdyn": "resdyn", "dagster_project": "resdyn.dagster_project", "assets": "resdyn.assets"}[relative.parts[0]]
    package = [top, *relative.parts[1:-1]]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def _sources(folder):
    return sorted((REPOSITORY / folder).rglob("*.py"))


def test_no_science_module_reaches_the_orchestration_layer_even_inside_a_function():
    offenders = {}
    for path in _sources("resdyn"):
        if path.relative_to(REPOSITORY).as_posix() in FACADE:
            continue
        bad = [name for name in _imported_modules(path)
               if name.split(".")[0] in ("dagster", "duckdb", "dagster_project", "assets")
               or name.startswith(("resdyn.dagster_project", "resdyn.assets"))]
        if bad:
            offenders[path.relative_to(REPOSITORY).as_posix()] = bad
    assert offenders == {}
    facade_imports = {name for path in FACADE for name in _imported_modules(REPOSITORY / path)}
    assert any(name.startswith("resdyn.dagster_project") for name in facade_imports)  # the check sees imports


def test_only_the_collector_imports_assets_from_dagster_project():
    importers = sorted(path.relative_to(REPOSITORY).as_posix() for path in _sources("dagster_project")
                       if any(name.startswith("resdyn.assets") or name.split(".")[0] == "assets"
                              for name in _imported_modules(path)))
    assert importers == [ASSET_COLLECTOR]


def test_assets_import_only_the_asset_layer_of_dagster_project():
    """The asset layer (dagster_project/asset_layer/) is the one thing an asset module imports from the
    orchestration side, at the top or inside a function: not the store, the launch, the CLI or the study."""
    offenders = {path.name: [name for name in _imported_modules(path)
                             if name.startswith("resdyn.dagster_project")
                             and not name.startswith("resdyn.dagster_project.asset_layer")]
                 for path in _sources("assets")}
    assert {name: bad for name, bad in offenders.items() if bad} == {}
    assert any(name.startswith("resdyn.dagster_project.asset_layer")
               for path in _sources("assets") for name in _imported_modules(path))  # the check sees imports
