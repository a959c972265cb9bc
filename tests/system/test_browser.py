"""The UI as a researcher uses it, in a real headless Chromium (Debian's `chromium`, driven by Playwright):
open the asset graph, add a partition with the launch dialog's own controls, launch it, wait for
success, find its Parquet files, open a materialization's figure and see the image load, and open the
study's report.html with every image loaded. Screenshots go to docs/figures/ (shown in the README).
Then a stage's code version bumped on a complete partition: the UI shows its tables unsynced with the reason,
and materializing what it shows unsynced, from the assets' own pages, makes the partition complete again.

`make test` installs Chromium when it can (root with apt); without it this test is skipped loudly.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

from resdyn.dagster_project.configuration.ports import free_ports

from ..pipeline_helpers import bumped_code_version

REPOSITORY = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIGURES = REPOSITORY / "docs" / "figures"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _skip_loudly(reason: str):
    message = f"BROWSER TEST SKIPPED: {reason}"
    warnings.warn(message, stacklevel=2)
    print("\n" + "!" * 80 + f"\n{message}\n" + "!" * 80, file=sys.stderr)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        _skip_loudly("no chromium on PATH (as root: apt-get install chromium; `make test` tries)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_loudly("playwright is not installed (it is in requirements.lock: run `make test`)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["data"]


LONG_CHECKPOINT = "stage1-step1413814-tokens5931B"  # an OLMo-style revision: long enough to be cut in a chip


def _partition_keys(port: int) -> list[str]:
    nodes = _graphql(port, '{ assetNodes(assetKeys: [{path: ["samples"]}]) { partitionKeys } }')["assetNodes"]
    return nodes[0]["partitionKeys"] if nodes else []


def _random_model_study(tmp_path: Path, checkpoints: dict[str, str]) -> tuple[Path, dict]:
    """A registered random-init model m (``checkpoints``: revision names, all the same weights), its warehouse and
    the environment of a small study (the shipped dagster.yaml as its Dagster instance)."""
    import torch
    from transformers import AutoModelForCausalLM

    from resdyn.models.byte_tokenizer import build_byte_tokenizer
    from resdyn.models.registry import ModelRegistry, ModelSpec
    from resdyn.models.tiny_configs import tiny_config

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=32, n_layers=2)).save_pretrained(tmp_path / "m")
    build_byte_tokenizer().save_pretrained(tmp_path / "m")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    ModelRegistry(warehouse / "registry.json").add(ModelSpec("m", "llama", str(tmp_path / "m"), checkpoints))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPOSITORY / "dagster_home" / "dagster.yaml", home / "dagster.yaml")  # as shipped
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("RESDYN_") or "WIKITEXT" in k},
                   "DAGSTER_HOME": str(home), "RESDYN_WAREHOUSE": str(warehouse), "RESDYN_SAMPLES": "8",
                   "RESDYN_SEQ_LEN": "16", "RESDYN_LEIDEN_SEEDS": "2", "RESDYN_PERMUTATIONS": "50",
                   "RESDYN_PER_SAMPLE": "2"}
    return warehouse, environment


@contextmanager
def _ui(tmp_path: Path, environment: dict, command: list[str]):
    """``command`` (`resdyn ui` or its serve function: webserver + daemon) on a free loopback port, stopped by PID."""
    (port,) = free_ports(1)
    process = subprocess.Popen([*command, "--host", "127.0.0.1", "--port", str(port)],
                               cwd=REPOSITORY, env=environment, stdout=open(tmp_path / "ui.log", "w"),
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or process.poll() is not None:
                    pytest.fail("resdyn ui did not start:\n" + (tmp_path / "ui.log").read_text()[-3000:])
                time.sleep(1)
        yield port
    finally:
        process.terminate()  # the PID this test started; it stops the daemon's process group it started
        try:
            process.wait(timeout=150)  # uvicorn's shutdown, then up to 2 x 30 s for the daemon's group
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def webserver(tmp_path):
    """m (checkpoints local and a long revision name, same weights), and `resdyn ui` on a free loopback port."""
    warehouse, environment = _random_model_study(tmp_path, {"local": "local", LONG_CHECKPOINT: "local"})
    with _ui(tmp_path, environment, [str(BIN / "resdyn"), "ui"]) as port:
        yield {"port": port, "warehouse": warehouse, "environment": environment, "log": tmp_path / "ui.log"}


def _metadata_value_cell(page, label: str):
    """The value cell of a metadata row (Dagster's metadata table: label cell, then value cell)."""
    return page.locator("tr", has=page.locator("td", has_text=label).first).filter(
        has_text=label).first.locator("td").nth(1)


def test_a_partition_launched_from_the_ui_materializes_and_its_figures_and_report_load(browser, webserver):
    port, warehouse = webserver["port"], webserver["warehouse"]
    FIGURES.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    base = f"http://127.0.0.1:{port}"
    foreign = []  # requests that leave the machine (Dagster's telemetry script did, offline: 49 errors)
    page.on("request", lambda request: foreign.append(request.url)
            if not request.url.startswith((base, "data:", "blob:")) else None)

    # Finding 6: no community pop-up (nux off), no telemetry, the graph opens with its groups expanded.
    page.goto(f"{base}/asset-groups")
    assert "expanded=" in page.url
    # an asset's own node: collapsed groups show only group names (the code location may still be
    # loading on a busy machine)
    page.get_by_text("eigenvalues", exact=True).first.wait_for(timeout=240000)
    page.wait_for_timeout(2000)
    assert page.get_by_role("button", name="Skip").count() == 0, "Dagster's first-visit pop-up is showing"
    page.screenshot(path=str(FIGURES / "ui-asset-graph.png"))

    # Finding 3: the registry's keys are partitions without typing them (the daemon runs the sensor).
    deadline = time.time() + 120
    while not {"m@local", f"m@{LONG_CHECKPOINT}"} <= set(_partition_keys(port)):
        assert time.time() < deadline, f"registry keys never became partitions: {_partition_keys(port)}"
        time.sleep(2)
    # Finding 2: a key that names nothing (typed into the UI) is removed by the same sensor.
    _graphql(port, 'mutation { addDynamicPartition(repositorySelector: {repositoryLocationName: '
                   '"resdyn.dagster_project.definitions", repositoryName: "__repository__"}, partitionsDefName: '
                   '"model_checkpoint", partitionKey: "m@nowhere") { __typename } }')
    assert "m@nowhere" in _partition_keys(port)

    page.goto(f"{base}/jobs")
    page.get_by_role("link", name="resdyn_job").first.click()
    page.get_by_role("button", name="Materialize all").first.click()
    page.get_by_text("Select a partition or create one").click()
    page.keyboard.type("m@")
    option = page.get_by_text(f"m@{LONG_CHECKPOINT}", exact=True).first
    option.wait_for(timeout=30000)
    option.click()
    page.get_by_text("m@local", exact=True).first.click()
    page.keyboard.press("Escape")
    # Finding 7: a chip shows its whole key (Dagster cuts chips at 120 px: 'm@stage…5931B').
    chips = page.locator("[class*='TagSelector_tagsContainer'] [class*='BaseTag']")
    assert chips.count() == 2
    shown = sorted(text.splitlines()[0] for text in chips.all_inner_texts())  # then a hidden measuring copy
    assert shown == sorted(["m@local", f"m@{LONG_CHECKPOINT}"]), shown
    page.get_by_role("button", name="Cancel").click()  # then launch m@local alone
    page.get_by_role("button", name="Materialize all").first.click()
    page.get_by_text("Select a partition or create one").click()
    page.keyboard.type("m@local")
    page.get_by_text("m@local", exact=True).first.click()
    page.keyboard.press("Escape")
    launch = page.get_by_role("button", name="Launch 1 run")
    launch.wait_for(timeout=30000)
    launch.click()

    deadline, runs = time.time() + 600, []
    while time.time() < deadline:  # queued, then started by the daemon's run queue
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }")[
            "runsOrError"]["results"]
        if runs and runs[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(3)
    assert runs and runs[0]["status"] == "SUCCESS", (runs, webserver["log"].read_text()[-3000:])
    assert {"key": "dagster/partition", "value": "m@local"} in runs[0]["tags"]
    assert list((warehouse / "jacobians" / "model=m" / "checkpoint=local").glob("*.parquet"))
    assert list((warehouse / "transient_dynamics" / "model=m" / "checkpoint=local").glob("*.parquet"))
    deadline = time.time() + 90
    while "m@nowhere" in _partition_keys(port):
        assert time.time() < deadline, "the unknown key m@nowhere was not removed"
        time.sleep(3)

    # Finding 1: the figure and the preview are inline (no "[Show Markdown]"), and the figure fits.
    page.goto(f"{base}/assets/layer_metrics?view=partitions&partition=m%40local")
    image = page.locator("img[alt='metrics_by_depth']").first
    image.wait_for(timeout=60000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    page.screenshot(path=str(FIGURES / "ui-materialization-figure.png"))
    assert image.evaluate("img => img.getBoundingClientRect().right") <= 1600
    assert page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    assert _metadata_value_cell(page, "preview").locator("table").count() == 1, "the preview is not inline"
    assert _metadata_value_cell(page, "preview").evaluate("cell => cell.getBoundingClientRect().right") <= 1600
    page.goto(f"{base}/assets/activations?view=partitions&partition=m%40local")
    _metadata_value_cell(page, "preview").locator("table").wait_for(timeout=60000)
    assert "pre_attn" in _metadata_value_cell(page, "preview").inner_text()
    assert not foreign, f"the UI requested outside resources: {foreign[:5]}"

    # Finding 8: the study across partitions, as one self-contained report.html.
    report = subprocess.run([sys.executable, "-m", "resdyn", "report", "--warehouse", str(warehouse)], cwd=REPOSITORY,
                            env=webserver["environment"], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    page.goto((warehouse / "report.html").as_uri())
    images = page.locator("img")
    assert images.count() == 5
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(FIGURES / "ui-report.png"), full_page=False)
    page.close()


BUMPED_DEFINITIONS = '''"""The study's definitions with the transient stage's code version bumped, as a developer's edit of
assets/transient.py would make them."""

import resdyn.assets.transient as transient_module
from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset

original = transient_module.transient_analysis
transient_module.transient_analysis = partition_asset(ANALYSIS, settings=original.settings, tables=[
    spec.replace_attributes(code_version=str(int(spec.code_version) + 1)) for spec in original.tables])(original.body)

from resdyn.dagster_project.definitions import defs  # noqa: E402 - the definitions of the edited code
'''

SERVE = '''import argparse, sys
from resdyn.dagster_project.interface.ui import serve
parser = argparse.ArgumentParser()
parser.add_argument("--host")
parser.add_argument("--port", type=int)
arguments = parser.parse_args()
sys.exit(serve(sys.argv[0].rsplit("/", 1)[0] + "/warehouse", arguments.host, arguments.port, module="bumped_definitions"))
'''


def _unsynced_materialized_from_its_page(page, base: str, port: int, asset: str) -> str:
    """Open ``asset``'s page at partition m@local, read why it is unsynced from its tag's tooltip, materialize it with
    the page's own button and the launch dialog, wait for the run; the reason shown."""
    page.goto(f"{base}/assets/{asset}?view=partitions&partition=m%40local")
    tag = page.get_by_text("Unsynced (1)")
    tag.wait_for(timeout=120000)
    tag.hover()
    reason = page.locator("text=has a new").first
    reason.wait_for(timeout=30000)
    shown = reason.inner_text()
    before = {run["runId"] for run in _graphql(port, "{ runsOrError { ... on Runs { results { runId } } } }")[
        "runsOrError"]["results"]}
    page.get_by_role("button", name="Materialize…").first.click()
    confirm = page.get_by_role("button", name="Confirm")  # a multi-asset that cannot be subset: its other tables too
    page.wait_for_timeout(2000)
    if confirm.count():
        confirm.click()
    page.get_by_role("button", name="Launch 1 run").click(timeout=60000)
    deadline = time.time() + 600
    while time.time() < deadline:  # queued, then started by the daemon's run queue
        runs = [run for run in _graphql(port, "{ runsOrError { ... on Runs { results { runId status } } } }")[
            "runsOrError"]["results"] if run["runId"] not in before]
        if runs and runs[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            assert runs[0]["status"] == "SUCCESS", runs
            return shown
        time.sleep(3)
    raise AssertionError(f"the run materializing {asset} did not end")


def test_a_bumped_code_version_shows_unsynced_with_its_reason_and_the_ui_completes_the_partition(browser, tmp_path):
    """Issue 60 (a) in the UI: m@local complete, then the transient stage's code version bumped (the UI loads the
    edited definitions). Its tables show "Unsynced" with "has a new code version"; materialized from the asset's
    page, their consumer layer_metrics_per_sample shows "has a new data version" (a table's data version is its
    identity); materialized too, the partition is complete again under the new versions, and no measurement
    table was rewritten."""
    from resdyn.dagster_project.store.warehouse import Warehouse

    warehouse, environment = _random_model_study(tmp_path, {"local": "local"})
    made = subprocess.run([sys.executable, "-m", "resdyn", "run", "--model", "m", "--checkpoint", "local"],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    measured = {path: path.stat().st_mtime_ns for table in ("activations", "jacobians", "samples")
                for path in (warehouse / table).rglob("*.parquet")}
    (tmp_path / "bumped_definitions.py").write_text(BUMPED_DEFINITIONS)
    (tmp_path / "serve.py").write_text(SERVE)
    environment = {**environment, "PYTHONPATH": str(tmp_path)}
    with _ui(tmp_path, environment, [sys.executable, str(tmp_path / "serve.py")]) as port:
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        base = f"http://127.0.0.1:{port}"
        assert _unsynced_materialized_from_its_page(page, base, port, "transient_dynamics") == "has a new code version"
        page.screenshot(path=str(tmp_path / "after-transient.png"))
        assert (_unsynced_materialized_from_its_page(page, base, port, "layer_metrics_per_sample")
                == "has a new data version")
        page.close()
    # the views judge with the edited code's declarations, as a process that imports the edited module would
    with bumped_code_version("transient_analysis"):
        partitions = Warehouse(warehouse).query("SELECT status, stale_tables FROM partitions").to_pylist()
    assert partitions == [{"status": "complete", "stale_tables": None}], partitions
    assert {path: path.stat().st_mtime_ns for path in measured} == measured
