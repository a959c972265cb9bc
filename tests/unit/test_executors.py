"""The multiprocess executor's fork server preloads modules by name, and Python's fork server skips a module that
fails to import without a word: the steps would then import it themselves, seconds each, and nothing would fail."""

import importlib

import pytest

from resdyn.dagster_project.launch.executors import STEP_PRELOAD


@pytest.mark.parametrize("module", STEP_PRELOAD)
def test_every_module_the_fork_server_preloads_imports(module):
    assert importlib.import_module(module).__name__ == module
