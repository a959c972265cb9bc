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
