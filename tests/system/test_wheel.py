"""The wheel is a complete install: built from this checkout, installed (not editable) into a fresh venv,
it runs ``resdyn sql`` and ``resdyn questions`` from a directory outside the repository, ships sql/, and
claims no generic top-level names (no ``assets``, no ``dagster_project``: everything is under ``resdyn``).

The fresh venv reaches the third-party packages (torch, Dagster, DuckDB, ...) of the test's own venv
through one path line, because installing them again would take minutes; nothing of resdyn is on that
path (the checkout is installed editable there, through a finder this venv never runs), so every
resdyn module the commands import comes from the wheel, which the test asserts.
"""

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, table_spec
from resdyn.dagster_project.store.warehouse import Warehouse

REPOSITORY = Path(__file__).resolve().parents[2]


def _run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _tiny_warehouse(root: Path, rng: np.random.Generator) -> dict[str, float]:
    """One partition's layer_metrics table with random values (what the questions read)."""
    store = Warehouse(root)
    metrics = table_spec("layer_metrics")
    n = 4
    columns = {}
    for field in metrics.schema():
        if field.name in PROVENANCE_COLUMNS:  # the writer adds them
            continue
        if field.name in ("layer",):
            columns[field.name] = pa.array(np.arange(n) // 2, field.type)
        elif field.name == "sublayer":
            columns[field.name] = pa.array(["attn", "mlp"] * (n // 2), field.type)
        elif field.name == "depth":
            columns[field.name] = pa.array(np.arange(n), field.type)
        elif pa.types.is_floating(field.type):
            columns[field.name] = pa.array(rng.random(n), field.type)
        elif pa.types.is_integer(field.type):
            columns[field.name] = pa.array(rng.integers(0, 5, n), field.type)
        elif pa.types.is_string(field.type):
            columns[field.name] = pa.array(["x"] * n, field.type)
        elif pa.types.is_boolean(field.type):
            columns[field.name] = pa.array(rng.random(n) > 0.5, field.type)
        else:
            columns[field.name] = pa.nulls(n, field.type)
    table = pa.table(columns)
    store.write("layer_metrics", "m", "local", table)
    return {"rows": n, "spectral_radius_sum": float(np.sum(table.column("spectral_radius").to_numpy()))}


def test_the_wheel_installs_alone_and_answers_sql_outside_the_repository(tmp_path, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
          str(tmp_path / "dist"), str(REPOSITORY)])
    wheel = next((tmp_path / "dist").glob("resdyn-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"resdyn"}, f"the wheel claims top-level names {sorted(top_level)}"
    shipped_sql = {Path(name).relative_to("resdyn/sql").as_posix() for name in names
                   if name.startswith("resdyn/sql/") and name.endswith(".sql")}
    in_repository = {p.relative_to(REPOSITORY / "sql").as_posix() for p in (REPOSITORY / "sql").rglob("*.sql")}
    assert shipped_sql == in_repository
    assert "resdyn/dagster_home/dagster.yaml" in names and "resdyn/assets/spectra.py" in names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "third_party_of_the_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    expected = _tiny_warehouse(outside / "wh", rng)
    environment = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "RESDYN_WAREHOUSE": str(outside / "wh")}
    where = _run([str(python), "-c", "import json, resdyn, resdyn.dagster_project.configuration.config as c, "
                  "importlib.util as u; print(json.dumps([resdyn.__file__, str(c.SQL_DIRECTORY), str(c.DEFAULT_WAREHOUSE), "
                  "u.find_spec('assets') is None, u.find_spec('dagster_project') is None]))"],
                 cwd=outside, env=environment)
    module, sql_directory, default_root, no_assets, no_dagster_project = json.loads(where.stdout)
    assert Path(module).is_relative_to(site) and Path(sql_directory).is_relative_to(site)
    assert default_root == "warehouse" and no_assets and no_dagster_project

    answer = _run([str(venv / "bin" / "resdyn"), "sql", "SELECT count(*) AS n, sum(spectral_radius) AS s FROM "
                   "layer_metrics", "--csv"], cwd=outside, env=environment)
    n, total = answer.stdout.strip().splitlines()[-1].split(",")
    assert int(n) == expected["rows"] and abs(float(total) - expected["spectral_radius_sum"]) < 1e-9
    questions = _run([str(venv / "bin" / "resdyn"), "questions"], cwd=outside, env=environment)
    sections = {section.split(":")[0]: section for section in questions.stdout.split("\n== ")[1:]}
    assert set(sections) == {path.stem for path in (REPOSITORY / "sql" / "questions").glob("*.sql")}
    unanswered = [name for name, section in sections.items() if "(not answerable" in section]
    assert not unanswered, questions.stdout[-3000:]  # every question's SQL ran against the shipped views
    # the notebook API from the installed wheel: the same numbers through polars
    notebook = _run([str(python), "-c", "import resdyn; frame = resdyn.open().sql('SELECT count(*) AS n, "
                     "sum(spectral_radius) AS s FROM layer_metrics'); print(frame['n'][0], repr(frame['s'][0]))"],
                    cwd=outside, env=environment)
    n, total = notebook.stdout.split()
    assert int(n) == expected["rows"] and abs(float(total) - expected["spectral_radius_sum"]) < 1e-9
