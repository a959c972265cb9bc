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


def test_resume_skips_only_partitions_complete_with_the_same_settings_corpus_and_table_code(tmp_path, capsys):
    import pyarrow as pa

    from resdyn.dagster_project.launch.run_loop import not_yet_complete

    wanted = {"settings_hash": "s1", "corpus_sha256": "c1", "tables_code_version": "t1", "git_commit": "abc"}
    rows = [{"model": "m", "checkpoint": "init", **wanted},
            {"model": "m", "checkpoint": "trained", **wanted, "settings_hash": "another-hash"},
            {"model": "m", "checkpoint": "fallback", **wanted, "corpus_sha256": "c2"},  # made on the fallback text
            {"model": "m", "checkpoint": "older", **wanted, "tables_code_version": None},  # same commit, unrecorded
            {"model": "m", "checkpoint": "oldest", **wanted, "tables_code_version": None, "git_commit": None},
            {"model": "m", "checkpoint": "other-commit", **wanted, "tables_code_version": None, "git_commit": "def"},
            {"model": "m", "checkpoint": "damaged", **wanted}]

    class Store:  # the partitions view of a warehouse holding these partitions complete
        def exists(self):
            return True

        def query(self, sql):
            assert "status = 'complete'" in sql and "corpus_sha256" in sql and "tables_code_version" in sql
            return pa.Table.from_pylist(rows)

        def manifest(self, model, checkpoint):
            return {"model": model, "checkpoint": checkpoint}

        def damaged_figures(self, manifest):  # m@damaged's figure was damaged after publication
            return ["/w/f.png (figure f of m@init) is damaged"] if manifest["checkpoint"] == "damaged" else []

    keys = ["m@init", "m@trained", "m@fallback", "m@older", "m@oldest", "m@other-commit", "m@damaged", "n@init"]
    assert not_yet_complete(Store(), keys, wanted, None) == ["m@trained", "m@fallback", "m@other-commit", "m@damaged",
                                                             "n@init"]
    said = capsys.readouterr().out
    assert "m@init is complete" in said and "not run again" in said
    assert "m@trained is complete, but its analysis settings" in said
    assert "m@fallback is complete, but its analysis corpus" in said
    assert "m@older is complete with these settings" in said  # the same commit made it
    assert "m@oldest is complete with these settings" in said and "recorded no table code version" in said
    assert "m@other-commit is complete, but its table code version" in said
    assert "m@damaged is complete, but 1 of its published figures are damaged or missing (/w/f.png)" in said
    # a local model directory rewritten in place: its recorded fingerprint no longer matches
    import json
    import os

    from resdyn.models.sources import directory_fingerprint

    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(os.urandom(64))
    source = json.dumps({"source": str(directory), "directory_fingerprint": directory_fingerprint(directory)})
    rows[:] = [{"model": "d", "checkpoint": "local", **wanted, "model_source": source}]
    assert not_yet_complete(Store(), ["d@local"], wanted, None) == []
    (directory / "model.safetensors").write_bytes(os.urandom(65))  # new weights, same name
    assert not_yet_complete(Store(), ["d@local"], wanted, None) == ["d@local"]
    assert "d@local is complete, but its model directory (rewritten in place since)" in capsys.readouterr().out
    assert not_yet_complete(Store(), keys, wanted, "group:inputs") == keys  # a partial run: run what was asked
    assert "--resume judges whole partitions" in capsys.readouterr().out


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
