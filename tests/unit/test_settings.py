"""One place says what each setting and each table is: the literal choices, the README tables and the
warehouse README are derived from (and kept equal to) the definitions they document."""

from pathlib import Path

import pytest

from resdyn.dagster_project.configuration import settings
from resdyn.dagster_project.store.schema import warehouse_readme
from resdyn.jacobians import BACKENDS
from resdyn.models.precision import DTYPES

REPOSITORY = Path(__file__).resolve().parents[2]


def test_literal_choices_equal_the_science_packages_definitions():
    # settings.py lists them literally so that importing it needs no torch; they must not drift
    assert set(settings.DTYPE_CHOICES) == set(DTYPES)
    assert set(settings.BACKEND_CHOICES) == set(BACKENDS)


def test_readme_settings_table_is_generated_from_settings():
    text = (REPOSITORY / "docs" / "configuration.md").read_text()
    begin = text.index("<!-- settings:begin")
    block = text[text.index("\n", begin) + 1 : text.index("<!-- settings:end -->")]
    assert block == settings.readme_table(), "regenerate docs/configuration.md's tables: python docs/tools/configuration_tables.py"
    for setting in settings.SETTINGS:  # and every flag is one the CLI accepts
        assert setting.flag in block and setting.variable in block
    begin = text.index("<!-- presets:begin")
    block = text[text.index("\n", begin) + 1 : text.index("<!-- presets:end -->")]
    assert block == settings.presets_table(), "regenerate docs/configuration.md's tables: python docs/tools/configuration_tables.py"


def test_every_resdyn_variable_the_code_reads_is_in_the_generated_environment_table():
    import re

    from resdyn.dagster_project.configuration import config

    text = (REPOSITORY / "docs" / "configuration.md").read_text()
    begin = text.index("<!-- environment:begin")
    block = text[text.index("\n", begin) + 1 : text.index("<!-- environment:end -->")]
    assert block == config.environment_table(), "regenerate docs/configuration.md's tables: python docs/tools/configuration_tables.py"
    documented = set(re.findall(r"RESDYN_[A-Z_]+", block)) | {setting.variable for setting in settings.SETTINGS}
    read = set()
    for package in ("resdyn", "dagster_project", "assets"):
        for path in (REPOSITORY / package).rglob("*.py"):
            read |= set(re.findall(r"RESDYN_[A-Z0-9_]+", path.read_text()))
    assert read and read <= documented, sorted(read - documented)


@pytest.mark.parametrize("value, expected", [("1", True), ("Yes", True), ("on", True), ("0", False), ("false", False),
                                             ("no", False), ("maybe", None), ("2", None), ("", False)])
def test_a_yes_or_no_variable_is_read_strictly(value, expected):
    from resdyn.dagster_project.configuration.config import ConfigError, StudyConfig

    if expected is None:
        with pytest.raises(ConfigError, match=f"RESDYN_RAY_GPUS={value!r} must be one of"):
            StudyConfig.resolve({}, {"RESDYN_RAY_GPUS": value})
    else:
        assert StudyConfig.resolve({}, {"RESDYN_RAY_GPUS": value}).ray_gpus is expected


def test_a_warehouse_that_is_not_a_directory_is_named_with_its_source(tmp_path):
    from resdyn.dagster_project.configuration.config import ConfigError, StudyConfig

    file = tmp_path / "hostname"
    file.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"RESDYN_WAREHOUSE=.*hostname is not a directory: give --warehouse"):
        StudyConfig.resolve({}, {"RESDYN_WAREHOUSE": str(file)})
    with pytest.raises(ConfigError, match=r"--warehouse=/dev/null is not a directory"):
        StudyConfig.resolve({"warehouse": "/dev/null"}, {})
    with pytest.raises(ConfigError, match=r"lies under .*hostname, which is not a directory"):
        StudyConfig.resolve({"warehouse": str(file / "w")}, {})
    assert StudyConfig.resolve({"warehouse": str(tmp_path / "new")}, {}).warehouse == str(tmp_path / "new")


def test_warehouse_readme_tables_are_generated_from_the_schema():
    readme = REPOSITORY / "warehouse" / "README.md"
    assert readme.read_text() == warehouse_readme(readme.read_text()), "run: python -m resdyn.dagster_project.store.schema"


def test_every_dependency_is_pinned_in_the_lock_file():
    import re
    import tomllib

    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    pinned, hashes = {}, {}
    name = None
    for line in (REPOSITORY / "requirements.lock").read_text().splitlines():
        requirement = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^ \\]+)", line)
        if requirement:
            name = re.sub(r"[-_.]+", "-", requirement.group(1)).lower()
            pinned[name], hashes[name] = requirement.group(3), []
        elif line.strip().startswith("--hash=sha256:") and name is not None:
            hashes[name].append(line.strip().split(":", 1)[1].rstrip(" \\"))
    # every pin carries the sha256 of each file pip may install for it (make installs with --require-hashes)
    assert pinned and all(hashes[name] and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes[name])
                          for name in pinned), [name for name in pinned if not hashes[name]]
    assert "--require-hashes -r requirements.lock" in (REPOSITORY / "Makefile").read_text()
    for requirement in wanted:
        name = re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0]).lower()
        assert name in pinned, f"{name} is not in requirements.lock: regenerate it (see its header)"
    # polars is there because the notebook API uses it (it was once listed and unused, then dropped)
    assert "polars" in pinned and "import polars" in (REPOSITORY / "dagster_project" / "interface" / "notebook.py").read_text()


def test_the_settings_resource_declares_every_setting_with_its_type_and_default():
    """AnalysisSettings is written out field by field (go-to-definition, type checks); it must not drift from
    SETTINGS, the one place that says what each setting is."""
    from resdyn.dagster_project.asset_layer.resources import AnalysisSettings

    fields = AnalysisSettings.model_fields
    assert list(fields) == [setting.name for setting in settings.SETTINGS]
    for setting in settings.SETTINGS:
        assert fields[setting.name].annotation is setting.kind, setting.name
        assert fields[setting.name].default == setting.default, setting.name
    assert AnalysisSettings().values() == {setting.name: setting.default for setting in settings.SETTINGS}
    with pytest.raises(settings.SettingError, match="n_samples"):
        AnalysisSettings(n_samples=0).values()


@pytest.mark.parametrize(("keywords", "message"), [
    ({"n_samples": True}, r"n_samples=True is not a whole number"),
    ({"n_samples": 8.5}, r"n_samples=8.5 is not a whole number"),
    ({"seed": False}, r"seed=False is not a whole number"),
    ({"graph_threshold": True}, r"graph_threshold=True is not a number"),
    ({"dtype": 64}, r"dtype=64 is not a text"),
    ({"checkpoints": 5}, r"checkpoints=5: give a checkpoint name or a list"),
    ({"checkpoints": ["init", 3]}, r"give a checkpoint name or a list"),
    ({"warehouse": 123}, r"warehouse=123: give a directory"),
    ({"warehouse": ""}, r"warehouse='': give a directory"),
])
def test_the_python_api_refuses_what_the_cli_refuses_naming_the_keyword(tmp_path, monkeypatch, keywords, message):
    """resdyn.run validates as the CLI does, before anything is written: one exception naming the setting."""
    import resdyn
    from resdyn.dagster_project.configuration.settings import SettingError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESDYN_WAREHOUSE", str(tmp_path / "warehouse"))
    with pytest.raises((SettingError, TypeError), match=message) as error:
        resdyn.run("tiny-llama", progress=False, **keywords)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, no `tl`-named or other stray folder


def test_resdyn_open_refuses_a_warehouse_that_is_not_a_path(tmp_path, monkeypatch):
    import resdyn

    monkeypatch.chdir(tmp_path)
    for value in (123, "", "   ", ["a"]):
        with pytest.raises(TypeError, match="give a directory"):
            resdyn.open(value)
    assert list(tmp_path.iterdir()) == []


def test_whole_python_numbers_pass_as_they_are():
    import numpy as np

    from resdyn.dagster_project.configuration.settings import BY_NAME

    count = np.random.default_rng().integers(1, 10_000)
    assert BY_NAME["n_samples"].parse(np.int64(count), "n_samples") == count
    assert BY_NAME["graph_threshold"].parse(1, "graph_threshold") == 1.0
    assert BY_NAME["n_samples"].parse(str(count), "RESDYN_SAMPLES") == count  # the environment's text
