"""Per-table identity (store/table_identity.py): what a change makes stale, against an independent reachability
reference on random stage graphs; the reasons; lineage for the views; the declared-settings guard; the rerun plan's
model-directory check; log |det J| against the eigenvalues."""

import json
import os

import numpy as np
import pytest

from resdyn.dagster_project.store.table_identity import (
    NO_IDENTITY,
    StageDeclaration,
    expected_identities,
    lineage_reasons,
    merged_settings,
    stale_tables,
)

SETTING_NAMES = ("alpha", "beta", "gamma", "delta", "speed")
IN_HASH = {"alpha", "beta", "gamma", "delta"}  # "speed" changes no number


def random_stages(rng) -> dict[str, StageDeclaration]:
    """A random DAG of 8 stages (stage i reads tables of stages < i), one or two tables each, random settings."""
    stages = {}
    for index in range(8):
        tables = {f"t{index}{part}": str(rng.integers(1, 4)) for part in "ab"[: rng.integers(1, 3)]}
        earlier = [table for stage in stages.values() for table in stage.tables]
        inputs = tuple(rng.choice(earlier, size=min(len(earlier), rng.integers(0, 3)), replace=False)) if earlier \
            else ()
        settings = tuple(rng.choice(SETTING_NAMES, size=rng.integers(0, 3), replace=False))
        stages[f"s{index}"] = StageDeclaration(f"s{index}", tables, settings, inputs, bool(rng.integers(0, 2)))
    return stages


def downstream_of(stages: dict[str, StageDeclaration], changed_stages: set[str]) -> set[str]:
    """Reference: every table of a changed stage and of every stage reading (transitively) one of their tables."""
    tainted = {table for name in changed_stages for table in stages[name].tables}
    grew = True
    while grew:
        grew = False
        for stage in stages.values():
            if set(stage.inputs) & tainted and not set(stage.tables) <= tainted:
                tainted |= set(stage.tables)
                grew = True
    return tainted


def published(identities) -> dict[str, dict]:
    return {table: {"identity": identity.record()} for table, identity in identities.items()}


def test_a_changed_setting_makes_stale_exactly_the_stages_reading_it_and_their_downstream(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    for _ in range(30):
        stages = random_stages(rng)
        settings = {name: int(rng.integers(0, 5)) for name in SETTING_NAMES}
        made = published(expected_identities(settings, IN_HASH, "corpus-1", stages))
        name = str(rng.choice(SETTING_NAMES))
        changed = {**settings, name: settings[name] + 1}
        stale = stale_tables(made, expected_identities(changed, IN_HASH, "corpus-1", stages))
        readers = {stage.stage for stage in stages.values() if name in stage.settings} if name in IN_HASH else set()
        assert set(stale) == downstream_of(stages, readers)
        for why in stale.values():
            assert why.startswith(f"setting {name} ") or why.startswith("input ")
        # the corpus: only the stages that read it, and downstream
        stale = stale_tables(made, expected_identities(settings, IN_HASH, "corpus-2", stages))
        assert set(stale) == downstream_of(stages, {s.stage for s in stages.values() if s.reads_corpus})


def test_a_bumped_code_version_makes_stale_that_table_and_its_downstream_only(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    for _ in range(30):
        stages = random_stages(rng)
        settings = {name: 1 for name in SETTING_NAMES}
        made = published(expected_identities(settings, IN_HASH, "c", stages))
        stage = stages[f"s{rng.integers(0, 8)}"]
        table = next(iter(stage.tables))
        bumped = {**stages, stage.stage: StageDeclaration(stage.stage, {**stage.tables, table: "99"}, stage.settings,
                                                          stage.inputs, stage.reads_corpus)}
        stale = stale_tables(made, expected_identities(settings, IN_HASH, "c", bumped))
        reference = {table} | downstream_of_tables(bumped, {table})
        assert set(stale) == reference
        assert stale[table] == f"code version {stage.tables[table]!r} -> '99'"
        # the views' judgment, with no request: the same tables are not current once the code is bumped
        versions = {t: v for s in bumped.values() for t, v in s.tables.items()}
        assert set(lineage_reasons(made, versions)) == reference


def downstream_of_tables(stages, tables: set[str]) -> set[str]:
    readers = {stage.stage for stage in stages.values() if set(stage.inputs) & tables}
    return downstream_of(stages, readers) if readers else set()


def test_reasons_name_what_differs_and_unrecorded_or_missing_tables_are_stale():
    stages = {"make": StageDeclaration("make", {"raw": "1"}, ("alpha",), ()),
              "derive": StageDeclaration("derive", {"derived": "1"}, ("beta", "speed"), ("raw",))}
    settings = {"alpha": 1, "beta": 2, "speed": 3}
    expected = expected_identities(settings, IN_HASH, "", stages)
    assert expected["derived"].settings == {"beta": 2}  # a setting that changes no number is not part of it
    made = published(expected)
    assert stale_tables(made, expected) == {}
    assert stale_tables({}, expected) == {"raw": "not published", "derived": "not published"}
    # a table made from its input's identity as it is now stays current while that input is remade (an identity
    # is what a table is made from, not which bytes a run wrote)
    assert stale_tables({"raw": {"file": "x"}, "derived": made["derived"]}, expected) == {"raw": NO_IDENTITY}
    assert stale_tables(made, expected, intact={"raw": False})["raw"].startswith("damaged")
    changed = expected_identities({**settings, "alpha": 5}, IN_HASH, "", stages)
    assert stale_tables(made, changed, flags={"alpha": "--alpha"}) == {
        "raw": "setting --alpha 1 -> 5", "derived": "input raw is stale"}
    assert stale_tables(made, expected_identities({**settings, "speed": 9}, IN_HASH, "", stages)) == {}


def test_lineage_a_table_made_from_an_input_remade_since_is_not_current_and_settings_merge():
    stages = {"make": StageDeclaration("make", {"raw": "1"}, ("alpha",), ()),
              "derive": StageDeclaration("derive", {"derived": "1"}, ("beta",), ("raw",))}
    first = published(expected_identities({"alpha": 1, "beta": 2}, IN_HASH, "", stages))
    assert lineage_reasons(first) == {}
    remade = {**first, "raw": published(expected_identities({"alpha": 7, "beta": 2}, IN_HASH, "", stages))["raw"]}
    assert lineage_reasons(remade) == {"derived": "input raw changed since"}
    assert lineage_reasons({"derived": first["derived"]}) == {"derived": "input raw not published"}
    assert lineage_reasons({**first, "raw": {"file": "x"}}) == {"raw": NO_IDENTITY, "derived": "input raw changed since"}
    assert merged_settings(first) == ({"alpha": 1, "beta": 2}, [])
    clash = {"a": {"identity": {"hash": "1", "settings": {"alpha": 1}}},
             "b": {"identity": {"hash": "2", "settings": {"alpha": 2}}}}
    assert merged_settings(clash)[1] == ["alpha: 1 (a) vs 2 (b)"]


def test_a_stage_reading_a_setting_it_did_not_declare_fails_naming_the_declaration():
    from resdyn.dagster_project.asset_layer.partition_assets import DeclaredSettings
    from resdyn.dagster_project.asset_layer.resources import AnalysisSettings

    settings = DeclaredSettings(AnalysisSettings(n_permutations=17), "coupling_tests", ("n_permutations",))
    assert settings.n_permutations == 17
    with pytest.raises(AttributeError, match=r"coupling_tests reads the setting 'seed' without declaring it"):
        _ = settings.seed


def test_every_asset_declares_only_known_settings_and_each_table_has_one_maker():
    from resdyn.dagster_project.configuration.settings import BY_NAME
    from resdyn.dagster_project.launch.assets_index import ALL_ASSETS
    from resdyn.dagster_project.store.table_identity import declarations, stage_of_tables

    made = stage_of_tables(declarations())
    for definition in ALL_ASSETS:
        for key, version in definition.code_versions_by_key.items():
            assert made[key.to_user_string()].tables[key.to_user_string()] == str(version or "")
    assert all(set(stage.settings) <= set(BY_NAME) for stage in declarations().values())


def test_a_model_directory_rewritten_in_place_is_seen(tmp_path):
    from resdyn.dagster_project.launch.rerun_plan import _directory_rewritten
    from resdyn.models.sources import directory_fingerprint

    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(os.urandom(64))
    source = json.dumps({"source": str(directory), "directory_fingerprint": directory_fingerprint(directory)})
    assert not _directory_rewritten(source)
    (directory / "model.safetensors").write_bytes(os.urandom(65))  # new weights, same name
    assert _directory_rewritten(source)
    assert not _directory_rewritten(None) and not _directory_rewritten("not json")


def test_volume_change_is_the_sum_of_log_eigenvalue_moduli_and_the_trace(fresh_seed):
    from resdyn.volume import volume_change

    rng = np.random.default_rng(fresh_seed)
    for width in (3, 17, 64):
        matrix = np.eye(width) + rng.normal(scale=0.3, size=(width, width))
        got = volume_change(matrix)
        eigenvalues = np.linalg.eigvals(matrix)
        assert got["log_abs_determinant"] == pytest.approx(np.sum(np.log(np.abs(eigenvalues))), rel=1e-9, abs=1e-9)
        assert got["determinant_sign"] == int(np.sign(np.real(np.prod(eigenvalues))))
        assert got["mean_log_abs_eigenvalue"] == pytest.approx(got["log_abs_determinant"] / width)
        assert got["trace_j_minus_i"] == pytest.approx(np.sum(eigenvalues.real) - width, abs=1e-9)
    # a scaling by c multiplies volume by c^d, far beyond float64's range at d = 4096: no overflow in the log
    assert volume_change(np.eye(4096) * 1e3)["log_abs_determinant"] == pytest.approx(4096 * np.log(1e3))
    assert volume_change(np.diag([1.0, -2.0]))["determinant_sign"] == -1
    with pytest.raises(ValueError, match="square"):
        volume_change(np.ones((2, 3)))


def test_the_declarations_file_is_what_the_assets_declare():
    """stage_declarations.json (what `resdyn sql` reads without importing the assets) equals the assets' own
    declarations: a bumped code version or a new setting without `python -m
    resdyn.dagster_project.launch.assets_index` fails here."""
    from resdyn.dagster_project.launch.assets_index import PARTITION_ASSETS
    from resdyn.dagster_project.store.table_identity import DECLARATIONS_FILE, declarations_text

    assert DECLARATIONS_FILE.read_text() == declarations_text({a.name: a.declaration for a in PARTITION_ASSETS}), (
        "run `python -m resdyn.dagster_project.launch.assets_index` to rewrite it")
