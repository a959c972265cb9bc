"""Every option that names a place, given an ``s3://`` value against the test S3 server (the ``s3_server`` fixture),
from a working folder of its own: ``claims --output`` and ``report --output`` upload (each object is there, the
printed URLs name them), every other option works with it or refuses it in one line saying what to give, and no
command ever makes a local folder called ``s3:`` (``Path("s3://b/p")`` is the relative path ``s3:/b/p``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.dagster_project.study.claims_inputs import claims_inputs, keep_claims_inputs

from ..cli_helpers import environment, run_cli_in_process
from ..s3_helpers import put_published_generation


@pytest.fixture
def kept(built, tmp_path):
    """A working folder, and claims inputs kept from the built m@local beside a copy of it named ``init`` (a
    null-model checkpoint: the claims then judge two checkpoints without a second model run)."""
    model, root = built
    kept = tmp_path / "kept"
    keep_claims_inputs(claims_inputs(Warehouse(root), "m"), kept)
    (kept / "init").mkdir()
    for path in (kept / "local").glob("*.parquet"):
        pl.read_parquet(path).with_columns(checkpoint=pl.lit("init")).write_parquet(kept / "init" / path.name)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return {"model": model, "root": root, "kept": kept, "cwd": cwd, "env": environment()}


@pytest.fixture
def places(kept, s3_warehouse, s3_environment):
    """:func:`kept`, and the built warehouse on S3."""
    put_published_generation(kept["root"], ObjectStore(s3_warehouse))
    return {**kept, "s3": s3_warehouse, "bucket": s3_warehouse.bucket, "env": environment(**s3_environment)}


def _objects(location, below: str) -> dict[str, int]:
    return {found.relative: found.size for found in ObjectStore(location).list(below)}


def test_every_option_that_names_a_place_uploads_an_s3_url_or_refuses_it_in_one_line(places, tmp_path):
    s3, cwd, kept, bucket = places["s3"], places["cwd"], places["kept"], places["bucket"]
    prefix = f"s3://{bucket}/{s3.prefix}"

    def cli(*arguments):
        completed = run_cli_in_process(*arguments, env=places["env"], cwd=cwd)
        assert not (cwd / "s3:").exists(), f"{arguments} made a local folder s3:"
        assert "Traceback" not in completed.stderr, completed.stderr
        return completed

    def refused(says: str, *arguments) -> None:
        completed = cli(*arguments)
        assert completed.returncode == 2 and completed.stderr.count("\n") == 1, (arguments, completed.stderr)
        assert completed.stderr.startswith("resdyn: error: ") and says in completed.stderr, (arguments, completed.stderr)

    # claims --output s3://: drawn locally, every file uploaded under the prefix, the URLs printed
    done = cli("claims", "m", "--inputs", kept, "--output", f"{prefix}/claims-out")
    assert done.returncode == 0, done.stderr
    uploaded = _objects(s3, "claims-out/")
    assert {"claims-out/claims.json", "claims-out/claims.md", "claims-out/claims.png",
            "claims-out/coupling_power.parquet", "claims-out/figures.json"} == set(uploaded)
    assert done.stdout.rstrip().splitlines()[-1] == "claims: " + ", ".join(
        f"{prefix}/claims-out/{name}" for name in ("claims.md", "claims.json", "claims.png"))
    claims = json.loads(ObjectStore(s3).get("claims-out/claims.json").data)
    assert (claims["null_checkpoint"], claims["trained_checkpoint"]) == ("init", "local")
    # report --output s3://BUCKET/KEY: the report, and the figures an object-store warehouse's report draws beside it
    done = cli("report", "--warehouse", s3, "--output", f"{prefix}/study/report.html")
    assert done.returncode == 0, done.stderr
    study = _objects(s3, "study/")
    assert "study/report.html" in study and "study/report_figures/report/study_fdr_layers.png" in study
    assert ObjectStore(s3).get("study/report.html").data.startswith(b"<!doctype html>")
    assert done.stdout.rstrip().splitlines()[-1] == f"report: {prefix}/study/report.html"

    # refused in one line, naming what to give, before anything is read, kept or written
    refused("--inputs DIR", "claims", "m", "--inputs", f"{prefix}/kept", "--output", tmp_path / "out")
    refused("give a local DIR", "claims", "m", "--warehouse", places["root"], "--save-inputs", f"{prefix}/kept")
    refused("give --output DIR", "claims", "m", "--warehouse", s3, "--save-inputs", tmp_path / "kept-2")
    assert not (tmp_path / "kept-2").exists()
    refused("two slashes", "claims", "m", "--inputs", kept, "--output", f"s3:/{bucket}/claims")
    refused("give --output FILE", "report", "--warehouse", s3)
    refused("s3://BUCKET/KEY", "report", "--warehouse", s3, "--output", f"s3://{bucket}")
    refused("give a local FILE", "run", "--model", places["model"], "--warehouse", tmp_path / "wh", "--summary",
            f"{prefix}/summary.json")
    assert not (tmp_path / "wh").exists()
    refused("no model directory at s3://", "run", "--model", f"{prefix}/model", "--warehouse", tmp_path / "wh")
    refused("no SQL file s3://", "sql", f"{prefix}/question.sql", "--warehouse", s3)
    for command in (["sql", "SELECT 1"], ["models"], ["questions"], ["check"], ["forget", "m@local", "--yes"],
                    ["report"], ["claims", "m"], ["ui"], ["run", "--model", places["model"]]):
        refused("two slashes", *command, "--warehouse", f"s3:/{bucket}/wh")
        refused("gs:// is not supported", *command, "--warehouse", f"gs://{bucket}/wh")
    assert sorted(path.name for path in cwd.iterdir()) == []


def test_claims_name_what_a_stopped_keep_left_and_refuse_to_write_into_the_kept_folder(kept, tmp_path):
    """A keep killed before its swap leaves a ``.generation-*`` folder in DIR: the next claims remove it and say so
    in one line; --output inside a kept folder is refused before anything is written."""
    places = kept
    kept, cwd = places["kept"], places["cwd"]
    before = sorted(path.name for path in kept.iterdir())
    left = kept / ".generation-0123456789ab"  # what a keep SIGKILLed after writing `trained`, before the swap, leaves
    shutil.copytree(kept / "local", left / "trained")
    done = run_cli_in_process("claims", "m", "--inputs", kept, "--output", tmp_path / "out", env=places["env"],
                              cwd=cwd)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("resdyn: warning: ")]
    assert len(warnings) == 1 and str(left) in warnings[0] and "not kept: trained" in warnings[0], done.stderr
    assert "--save-inputs" in warnings[0] and not left.exists()
    assert sorted(path.name for path in kept.iterdir()) == before
    for option in ("--inputs", "--save-inputs"):
        inside = kept / "local" / "claims"
        done = run_cli_in_process("claims", "m", option, kept, "--output", inside, "--warehouse", places["root"],
                                  env=places["env"], cwd=cwd)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "inside the kept inputs folder" in \
            done.stderr, done.stderr
        assert not inside.exists() and sorted(path.name for path in kept.iterdir()) == before
    assert not Path(cwd / "s3:").exists()
