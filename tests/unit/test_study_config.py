"""StudyConfig: flags > environment > defaults, checked, frozen, and the same after a trip through JSON."""

import dataclasses

import pytest

from resdyn.dagster_project.configuration.config import ConfigError, StudyConfig
from resdyn.dagster_project.configuration.settings import SETTINGS, SettingError


def test_a_flag_beats_its_variable_which_beats_the_default(tmp_path):
    environment = {"RESDYN_SAMPLES": "7", "RESDYN_SEED": "3", "RESDYN_WAREHOUSE": str(tmp_path / "from-env"),
                   "RESDYN_EXECUTOR": "multiprocess", "RESDYN_MODEL_RUNNERS": "2"}
    config = StudyConfig.resolve({"n_samples": 5, "warehouse": str(tmp_path / "from-flag")}, environment)
    assert config.settings["n_samples"] == 5 and config.settings["seed"] == 3
    assert config.settings["sequence_length"] == next(s.default for s in SETTINGS if s.name == "sequence_length")
    assert config.warehouse == str((tmp_path / "from-flag").resolve())
    assert (config.executor, config.model_runners) == ("multiprocess", 2)
    assert StudyConfig.resolve({}, environment).warehouse == str((tmp_path / "from-env").resolve())


def test_a_preset_sits_below_flags_and_variables_and_above_the_defaults(tmp_path):
    from resdyn.dagster_project.configuration.settings import BY_NAME, PRESETS

    assert PRESETS["paper"]["n_samples"] == 1000  # the paper's "1,000 samples of WikiText-2"
    defaults = StudyConfig.resolve({}, {}).settings
    for chosen in (StudyConfig.resolve({"preset": "paper"}, {}), StudyConfig.resolve({}, {"RESDYN_PRESET": "paper"})):
        assert chosen.settings == {**defaults, **PRESETS["paper"]}  # every other setting at its default
    assert StudyConfig.resolve({"preset": "paper"}, {"RESDYN_SAMPLES": "7"}).settings["n_samples"] == 7  # env > preset
    assert StudyConfig.resolve({"preset": "paper", "n_samples": 5}, {"RESDYN_SAMPLES": "7"}).settings["n_samples"] == 5
    assert StudyConfig.resolve({"n_samples": 5}, {"RESDYN_PRESET": "paper"}).settings["n_samples"] == 5  # flag > preset
    assert StudyConfig.resolve({}, {}).settings["n_samples"] == BY_NAME["n_samples"].default  # no preset: the default
    with pytest.raises(SettingError) as error:
        StudyConfig.resolve({}, {"RESDYN_PRESET": "papr"})
    assert "RESDYN_PRESET='papr'" in str(error.value) and "paper" in str(error.value)
    with pytest.raises(SettingError, match="--preset='nope'"):
        StudyConfig.resolve({"preset": "nope"}, {"RESDYN_PRESET": "paper"})  # the flag names the preset, not the env
    exported = StudyConfig.resolve({"preset": "paper", "warehouse": str(tmp_path)}, {})
    assert StudyConfig.resolve({}, exported.environment()) == exported  # a child process gets the preset's values


def test_it_is_frozen_and_survives_json():
    config = StudyConfig.resolve({"n_samples": 9, "ray_address": "http://127.0.0.1:8265"},
                                 {"RESDYN_RAY_NODE_CPUS": "6", "RESDYN_RAY_GPUS": "1"})
    assert StudyConfig.from_json(config.to_json()) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.executor = "ray"
    with pytest.raises(TypeError):
        config.settings["n_samples"] = 1
    assert config.replace(n_samples=4).settings["n_samples"] == 4 and config.settings["n_samples"] == 9


@pytest.mark.parametrize("given, environment, named", [
    ({"executor": "threads"}, {}, "--executor='threads'"),
    ({}, {"RESDYN_EXECUTOR": "ray-ish"}, "RESDYN_EXECUTOR='ray-ish'"),
    ({}, {"RESDYN_MODEL_RUNNERS": "0"}, "RESDYN_MODEL_RUNNERS='0'"),
    ({}, {"RESDYN_RAY_NODE_CPUS": "many"}, "RESDYN_RAY_NODE_CPUS='many'"),
    ({"n_samples": 0}, {}, "--samples=0"),
    ({}, {"RESDYN_GRAPH_THRESHOLD": "nan"}, "RESDYN_GRAPH_THRESHOLD='nan'"),
])
def test_a_bad_value_is_named_by_its_flag_or_variable(given, environment, named):
    with pytest.raises((ConfigError, SettingError)) as error:
        StudyConfig.resolve(given, environment)
    assert named in str(error.value) and "\n" not in str(error.value)


def test_the_environment_it_exports_resolves_to_itself(tmp_path):
    config = StudyConfig.resolve({"n_samples": 11, "warehouse": str(tmp_path), "executor": "multiprocess"}, {})
    assert StudyConfig.resolve({}, config.environment()) == config
