"""The UI as a researcher uses it, in a real headless Chromium (Debian's `chromium`, driven by Playwright):
open the asset graph, add a partition with the launch dialog's own controls, launch it, wait for
success, find its Parquet files, open a materialization's figure and see the image load, and open the
study's report.html with every image loaded. Screenshots go to docs/figures/ (shown in the README).

`make test` installs Chromium when it can (root with apt); without it this test is skipped loudly.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
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


@pytest.fixture
def webserver(tmp_path):
    """A registered random-init model m@local, and the Dagster webserver on a free loopback port."""
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
    ModelRegistry(warehouse / "registry.json").add(ModelSpec("m", "llama", str(tmp_path / "m"), {"local": "local"}))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(  # as shipped, but launching at once (no daemon in the test)
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n")
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("RESDYN_") or "WIKITEXT" in k},
                   "DAGSTER_HOME": str(home), "RESDYN_WAREHOUSE": str(warehouse), "RESDYN_SAMPLES": "8",
                   "RESDYN_SEQ_LEN": "16", "RESDYN_LEIDEN_SEEDS": "2", "RESDYN_PERMUTATIONS": "50",
                   "RESDYN_PER_SAMPLE": "2"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([str(BIN / "dagster-webserver"), "-m", "dagster_project.definitions", "-h", "127.0.0.1",
                                "-p", str(port)], cwd=REPOSITORY, env=environment,
                               stdout=open(tmp_path / "webserver.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or process.poll() is not None:
                    pytest.fail("the webserver did not start:\n" + (tmp_path / "webserver.log").read_text()[-3000:])
                time.sleep(1)
        yield {"port": port, "warehouse": warehouse, "environment": environment}
    finally:
        process.terminate()  # the PID this test started
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_a_partition_launched_from_the_ui_materializes_and_its_figures_and_report_load(browser, webserver):
    port, warehouse = webserver["port"], webserver["warehouse"]
    FIGURES.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    base = f"http://127.0.0.1:{port}"

    page.goto(f"{base}/asset-groups")
    page.wait_for_timeout(3000)
    if page.get_by_role("button", name="Skip").count():  # Dagster's first-visit newsletter dialog
        page.get_by_role("button", name="Skip").click()
    assert page.get_by_text("measurements").count() and page.get_by_text("transient").count()
    page.screenshot(path=str(FIGURES / "ui-asset-graph.png"))

    page.goto(f"{base}/locations")
    page.goto(f"{base}/jobs")
    page.get_by_role("link", name="resdyn_job").first.click()
    page.get_by_role("button", name="Materialize all").first.click()
    page.get_by_text("Add a partition").click()
    page.get_by_role("button", name="Save").wait_for(timeout=30000)  # the new-partition field is open
    page.wait_for_timeout(1000)
    page.keyboard.type("m@local")
    page.wait_for_timeout(500)
    page.keyboard.press("Enter")
    launch = page.get_by_role("button", name="Launch 1 run")
    launch.wait_for(timeout=30000)
    launch.click()

    deadline, runs = time.time() + 600, []
    while time.time() < deadline:
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }")[
            "runsOrError"]["results"]
        if runs and runs[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(3)
    assert runs and runs[0]["status"] == "SUCCESS", runs
    assert {"key": "dagster/partition", "value": "m@local"} in runs[0]["tags"]
    assert list((warehouse / "jacobians" / "model=m" / "checkpoint=local").glob("*.parquet"))
    assert list((warehouse / "transient_dynamics" / "model=m" / "checkpoint=local").glob("*.parquet"))

    page.goto(f"{base}/assets/eigenvalues?view=partitions&partition=m%40local")
    page.get_by_text("[Show Markdown]").first.click()
    image = page.locator("img[alt='eigenvalue_clouds']").first
    image.wait_for(timeout=30000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    assert image.evaluate("img => img.naturalWidth") > 0
    page.screenshot(path=str(FIGURES / "ui-materialization-figure.png"))

    report = subprocess.run([sys.executable, "-m", "resdyn", "report", "--warehouse", str(warehouse)], cwd=REPOSITORY,
                            env=webserver["environment"], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    page.goto((warehouse / "report.html").as_uri())
    images = page.locator("img")
    assert images.count() == 5
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    page.screenshot(path=str(FIGURES / "ui-report.png"), full_page=False)
    page.close()
