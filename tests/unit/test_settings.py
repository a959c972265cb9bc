"""One place says what each setting and each table is: the literal choices, the README tables and the
warehouse README are derived from (and kept equal to) the definitions they document."""

from pathlib import Path

from resdyn.dagster_project import settings
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
    assert block == settings.readme_table(), "regenerate docs/configuration.md's settings table from dagster_project/settings.py"
    for setting in settings.SETTINGS:  # and every flag is one the CLI accepts
        assert setting.flag in block and setting.variable in block
    begin = text.index("<!-- presets:begin")
    block = text[text.index("\n", begin) + 1 : text.index("<!-- presets:end -->")]
    assert block == settings.presets_table(), "regenerate docs/configuration.md's presets table from settings.py"


def test_warehouse_readme_tables_are_generated_from_the_schema():
    readme = REPOSITORY / "warehouse" / "README.md"
    assert readme.read_text() == warehouse_readme(readme.read_text()), "run: python -m resdyn.dagster_project.store.schema"


def test_every_dependency_is_pinned_in_the_lock_file():
    import re
    import tomllib

    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    pinned = {}
    for line in (REPOSITORY / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[re.sub(r"[-_.]+", "-", name).lower()] = version
    for requirement in wanted:
        name = re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0]).lower()
        assert name in pinned, f"{name} is not in requirements.lock: regenerate it (see its header)"
    # polars is there because the notebook API uses it (it was once listed and unused, then dropped)
    assert "polars" in pinned and "import polars" in (REPOSITORY / "dagster_project" / "notebook.py").read_text()
