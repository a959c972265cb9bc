"""Kept claims inputs (``resdyn claims M --save-inputs DIR`` / ``--inputs DIR``): a kept folder holds one study,
a refusal leaves it byte for byte as it was, and what cannot be read is a one-line error naming the file."""

import hashlib
import json
import random
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from resdyn.dagster_project.study.claims_inputs import (
    ADDED_SINCE_KEPT,
    COLUMNS,
    NOT_NUMBERS,
    SAVED,
    keep_claims_inputs,
    load_claims_inputs,
)

TEXT = {"coupling_significant": pl.Boolean, "community_significant": pl.Boolean, "replicates": pl.List(pl.Float64),
        "stratum_boundary": pl.List(pl.Int32), "stratum_interior": pl.List(pl.Int32)}


def study_frames(model: str, checkpoints: list[str], *, d_model: int, sha: str, n: int = 8, corpus: str = "c1",
                 settings_hash: str | None = None) -> dict[str, pl.DataFrame]:
    """Frames of every kept kind, one row per checkpoint, with the identity columns as given and random numbers
    elsewhere (the keep logic reads only identities; the values check that what is kept is what was given)."""
    rng = random.Random()
    settings = json.dumps({"n_samples": n})
    identity = {"source_sha256": sha, "registered_sha256": sha, "d_model": d_model, "status": "complete",
                "settings_hash": settings_hash or hashlib.sha256(settings.encode()).hexdigest()[:12],
                "settings": settings, "corpus": f"label-{corpus}", "corpus_sha256": corpus, "n_samples": n}
    frames = {}
    for name in SAVED:
        rows = []
        for checkpoint in checkpoints:
            row = {}
            for column in COLUMNS[name]:
                if column in ("model", "checkpoint"):
                    row[column] = model if column == "model" else checkpoint
                elif column in identity:
                    row[column] = identity[column]
                elif column in TEXT:
                    row[column] = (rng.random() < 0.5 if TEXT[column] == pl.Boolean else
                                   [rng.randrange(50), rng.randrange(50)] if column.startswith("stratum_") else
                                   [rng.random(), rng.random()])
                elif column in NOT_NUMBERS:
                    row[column] = f"text-{rng.randrange(1000)}"
                else:
                    row[column] = rng.random()
            rows.append(row)
        frames[name] = pl.DataFrame(rows, schema_overrides={c: t for c, t in TEXT.items() if c in COLUMNS[name]})
    return frames


def tree_digest(directory: Path) -> dict[str, str]:
    return {str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def test_inputs_kept_then_read_back_are_the_frames_given(tmp_path):
    frames = study_frames("tl", ["init", "trained"], d_model=32, sha="a" * 64)
    written = keep_claims_inputs(frames, tmp_path / "kept")
    assert [path.name for path in written] == ["init", "trained"]
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [".lock", "init", "trained"]  # no generation left
    back = load_claims_inputs(tmp_path / "kept", "tl")
    for name in SAVED:
        assert back[name].sort("checkpoint").equals(frames[name].sort("checkpoint")), name


@pytest.mark.parametrize("second", [["local"], ["init", "trained", "local"]])
def test_a_second_warehouse_of_another_file_never_replaces_a_kept_study(tmp_path, second):
    """The lost drill: warehouse A's study kept in DIR, then warehouse B's (another file, another width) kept into
    the same DIR, either beside it or over all of its checkpoints: refused, and DIR is byte for byte as it was."""
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    before = tree_digest(kept)
    other = study_frames("gm", second, d_model=64, sha="b" * 64)
    with pytest.raises(ValueError, match="nothing was written.*another folder") as refused:
        keep_claims_inputs(other, kept)
    assert "source_sha256" in str(refused.value) and "d_model" in str(refused.value)
    assert tree_digest(kept) == before and sorted(p.name for p in kept.iterdir()) == [".lock", "init", "trained"]


@pytest.mark.parametrize("change", [{"n": 12}, {"corpus": "fallback"}, {"settings_hash": "another"}])
def test_checkpoints_at_other_settings_or_on_another_corpus_are_refused_beside_a_kept_study(tmp_path, change):
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init"], d_model=32, sha="a" * 64), kept)
    before = tree_digest(kept)
    with pytest.raises(ValueError, match="nothing was written"):
        keep_claims_inputs(study_frames("gm", ["trained"], d_model=32, sha="a" * 64, **change), kept)
    assert tree_digest(kept) == before
    # the same, among the warehouse's own checkpoints: refused before anything is written
    mixed = {name: pl.concat([study_frames("gm", ["init"], d_model=32, sha="a" * 64)[name],
                              study_frames("gm", ["trained"], d_model=32, sha="a" * 64, **change)[name]])
             for name in SAVED}
    with pytest.raises(ValueError, match="differ in"):
        keep_claims_inputs(mixed, tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()


def test_the_same_partition_measured_again_replaces_its_folder_and_adds_beside_the_others(tmp_path):
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    again = study_frames("gm", ["trained", "rounding-x1"], d_model=32, sha="a" * 64)
    keep_claims_inputs(again, kept)
    back = load_claims_inputs(kept, "gm")
    assert sorted(back["partitions"]["checkpoint"]) == ["init", "rounding-x1", "trained"]
    assert back["sublayers"].filter(pl.col("checkpoint") == "trained").equals(
        again["sublayers"].filter(pl.col("checkpoint") == "trained"))


def test_a_keep_that_fails_midway_or_was_killed_midway_leaves_the_kept_study_whole(tmp_path, monkeypatch):
    """An error while the folders are swapped puts every kept folder back (and takes the new ones out); a swap a
    crash cut between its two renames is put back by the next read of the folder."""
    from pathlib import Path as PathType

    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    before = tree_digest(kept)
    again = study_frames("gm", ["init", "rounding-x1", "trained"], d_model=32, sha="a" * 64)
    failing = random.choice(["init", "rounding-x1", "trained"])
    rename = PathType.rename

    def broken(self, target):
        if self.parent.name.startswith(".generation-") and self.name == failing:
            raise OSError(28, "No space left on device")
        return rename(self, target)

    monkeypatch.setattr(PathType, "rename", broken)
    with pytest.raises(OSError, match="No space left"):
        keep_claims_inputs(again, kept)
    monkeypatch.undo()
    assert tree_digest(kept) == before and sorted(p.name for p in kept.iterdir()) == [".lock", "init", "trained"]
    # killed between the two renames of `trained`: its kept folder retired, the new one not yet in place
    (kept / "trained").rename(kept / ".retired-trained")
    back = load_claims_inputs(kept, "gm")
    assert sorted(back["partitions"]["checkpoint"]) == ["init", "trained"] and tree_digest(kept) == before


def test_damaged_old_or_mistyped_kept_frames_are_one_line_errors_naming_the_file(tmp_path):
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    name = random.choice([n for n in SAVED if n != "partitions"])
    target = kept / "trained" / f"{name}.parquet"
    original = target.read_bytes()
    target.write_bytes(original[: len(original) // 2])  # truncated
    with pytest.raises(ValueError, match=rf"{target}.*cannot be read as Parquet") as error:
        load_claims_inputs(kept, "gm")
    assert "\n" not in str(error.value)
    target.write_bytes(b"")  # empty
    with pytest.raises(ValueError, match=rf"{target}.*cannot be read"):
        load_claims_inputs(kept, "gm")
    column = random.choice([c for c in COLUMNS[name] if c not in ("model", "checkpoint", *ADDED_SINCE_KEPT.get(name, ()))])
    target.write_bytes(original)
    pl.read_parquet(target).drop(column).write_parquet(target)  # an older schema
    with pytest.raises(ValueError, match=rf"{target} lacks the column\(s\) {column} "):
        load_claims_inputs(kept, "gm")
    target.write_bytes(original)
    for added_to, added in ADDED_SINCE_KEPT.items():  # kept before these columns existed: read, nulls there
        other = kept / "trained" / f"{added_to}.parquet"
        before = other.read_bytes()
        pl.read_parquet(other).drop(*added).write_parquet(other)
        read = load_claims_inputs(kept, "gm")[added_to].filter(pl.col("checkpoint") == "trained")
        assert read.height and all(read[column].null_count() == read.height for column in added)
        other.write_bytes(before)
    numeric = random.choice([c for c in COLUMNS["checkpoints"] if c not in NOT_NUMBERS])
    target = kept / "init" / "checkpoints.parquet"
    pl.read_parquet(target).with_columns(pl.col(numeric).cast(pl.String)).write_parquet(target)
    with pytest.raises(ValueError, match=rf"{target}: column {numeric} holds String, not numbers"):
        load_claims_inputs(kept, "gm")


def test_claims_refuse_checkpoints_measured_on_other_samples_and_warn_of_other_code():
    from resdyn.dagster_project.study.claims import _check_comparable

    frames = {name: pl.concat([study_frames("gm", ["init"], d_model=32, sha="a" * 64, n=12)[name],
                               study_frames("gm", ["trained"], d_model=32, sha="a" * 64, n=8)[name]])
              for name in SAVED}
    data = {"init": SimpleNamespace(n_samples=12), "trained": SimpleNamespace(n_samples=8)}
    with pytest.raises(ValueError, match="measured on different samples.*another n.*rerun trained"):
        _check_comparable("gm", frames, ["init", "trained"], data)
    same_n = {name: pl.concat([study_frames("gm", ["init"], d_model=32, sha="a" * 64, settings_hash="s1")[name],
                               study_frames("gm", ["trained"], d_model=32, sha="a" * 64, settings_hash="s2")[name]])
              for name in SAVED}
    same_n["runs"] = same_n["runs"].with_columns(tables_code_version=pl.Series(["v1", "v2"]))
    data = {"init": SimpleNamespace(n_samples=8), "trained": SimpleNamespace(n_samples=8)}
    warnings = _check_comparable("gm", same_n, ["init", "trained"], data)
    assert len(warnings) == 2 and "different settings" in warnings[0] and "table code versions" in warnings[1]
    alike = {**same_n, "runs": same_n["runs"].with_columns(settings_hash=pl.lit("s1"), tables_code_version=pl.lit("v1"))}
    assert _check_comparable("gm", alike, ["init", "trained"], data) == []
    # another corpus (a partition made on the fallback text): refused; one not recorded: warned of
    other_text = {**alike, "runs": alike["runs"].with_columns(corpus_sha256=pl.Series(["c1", "fallback"]))}
    with pytest.raises(ValueError, match="measured on different samples.*another corpus"):
        _check_comparable("gm", other_text, ["init", "trained"], data)
    unrecorded = {**alike, "runs": alike["runs"].with_columns(corpus_sha256=pl.Series(["c1", None]),
                                                              tables_code_version=pl.Series(["v1", None]))}
    warnings = _check_comparable("gm", unrecorded, ["init", "trained"], data)
    assert any("corpus of some checkpoints is not recorded (trained)" in line for line in warnings)
    assert any("code commits" in line or "not recorded" in line for line in warnings[1:])


def test_a_study_kept_by_an_older_resdyn_takes_new_checkpoints_of_the_same_study(tmp_path):
    """A kept folder whose runs lack the columns this resdyn adds (corpus, table code version): its identity reads
    them as unknown, so the same study's new checkpoints are kept beside it; another file is still refused."""
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init"], d_model=32, sha="a" * 64), kept)
    runs = kept / "init" / "runs.parquet"
    pl.read_parquet(runs).drop("corpus", "corpus_sha256", "tables_code_version").write_parquet(runs)
    keep_claims_inputs(study_frames("gm", ["trained"], d_model=32, sha="a" * 64, corpus="c9"), kept)
    assert sorted(p.name for p in kept.iterdir() if not p.name.startswith(".")) == ["init", "trained"]
    with pytest.raises(ValueError, match="nothing was written"):
        keep_claims_inputs(study_frames("gm", ["other"], d_model=64, sha="b" * 64), kept)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) corpus, corpus_sha256, tables_code_version.*new folder"):
        load_claims_inputs(kept, "gm")  # reading it for claims needs every column


def test_inputs_and_save_inputs_together_are_refused_in_one_line(tmp_path, capsys):
    from resdyn.dagster_project.interface.cli import main

    code = main(["claims", "gm", "--inputs", str(tmp_path / "a"), "--save-inputs", str(tmp_path / "b"),
                 "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 2 and "give one" in error and error.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_kept_inputs_of_a_gguf_file_are_judged_against_its_own_trained_end(tmp_path):
    """--inputs without --trained: the kept checkpoints' one trained end (a GGUF file's `local`, any label), not a
    `trained` that is not there; the controls and doses are never it; two candidates ask for --trained (unless
    one is `trained`)."""
    for label in ("local", random.choice(["mine", "gguf-file"]), "trained"):
        _judged_against_its_trained_end(tmp_path / label, label)


def _judged_against_its_trained_end(tmp_path, label: str) -> None:
    from argparse import Namespace

    from resdyn.dagster_project.interface.cli import _kept_pair

    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "init-quantized", label, "rounding-x1", "rounding-x2"],
                                    d_model=32, sha="a" * 64), kept)
    frames = load_claims_inputs(kept, "gm")
    assert _kept_pair(frames, Namespace(null=None, trained=None)) == ("init", label)
    assert _kept_pair(frames, Namespace(null="init", trained="rounding-x1")) == ("init", "rounding-x1")
    keep_claims_inputs(study_frames("gm", ["other"], d_model=32, sha="a" * 64), kept)
    if label == "trained":
        assert _kept_pair(load_claims_inputs(kept, "gm"), Namespace(null=None, trained=None)) == ("init", "trained")
    else:
        with pytest.raises(ValueError, match="name the trained checkpoint with --trained"):
            _kept_pair(load_claims_inputs(kept, "gm"), Namespace(null=None, trained=None))


def test_legends_mark_a_stale_checkpoint_and_checkpoints_of_other_widths_or_settings():
    from resdyn.dagster_project.store.warehouse import checkpoint_labels

    same = [{"checkpoint": c, "status": "complete", "d_model": 64, "settings_hash": "abcdef123456"}
            for c in ("init", "trained")]
    assert checkpoint_labels(same) == {"init": "init", "trained": "trained"}
    stale = [same[0], {**same[1], "status": "stale", "d_model": 32}]
    assert checkpoint_labels(stale) == {"init": "init (d = 64)", "trained": "trained (stale: made from another file; d = 32)"}
    other = [same[0], {**same[1], "settings_hash": "999999aaaaaa"}]
    assert checkpoint_labels(other) == {"init": "init (settings abcdef)", "trained": "trained (settings 999999)"}


def test_what_a_stopped_keep_left_is_put_right_by_the_next_read_and_said_in_a_line_each(tmp_path):
    """A keep SIGKILLed after writing its generation (before the swap), or between the two renames of a swap, leaves
    ``.generation-*`` / ``.retired-*`` folders: the next read removes or puts them back, and says so, one line each
    naming the folder, what was not kept and what to run."""
    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    before = tree_digest(kept)
    left = kept / ".generation-0123456789ab"
    (left / "rounding-x1").mkdir(parents=True)  # the generation as the kill left it
    (left / "rounding-x1" / "sublayers.parquet").write_bytes(b"PAR1 cut short")
    (kept / "init").rename(kept / ".retired-init")  # a swap cut between its renames
    recovered: list[str] = []
    back = load_claims_inputs(kept, "gm", recovered)
    assert sorted(back["partitions"]["checkpoint"]) == ["init", "trained"] and tree_digest(kept) == before
    assert len(recovered) == 2 and all("\n" not in line for line in recovered)
    assert str(kept / ".retired-init") in recovered[0] and f"put back as {kept / 'init'}" in recovered[0]
    assert str(left) in recovered[1] and "not kept: rounding-x1" in recovered[1] and \
        f"--save-inputs {kept}" in recovered[1]
    assert not left.exists() and load_claims_inputs(kept, "gm", recovered) and len(recovered) == 2  # said once
    (kept / ".generation-feedfacecafe").mkdir()  # and a keep says so too, before it keeps
    keep_claims_inputs(study_frames("gm", ["trained"], d_model=32, sha="a" * 64), kept, recovered)
    assert len(recovered) == 3 and ".generation-feedfacecafe" in recovered[2]


def test_claims_never_write_into_a_kept_inputs_folder(tmp_path, capsys):
    from resdyn.dagster_project.interface.cli import main

    kept = tmp_path / "kept"
    keep_claims_inputs(study_frames("gm", ["init", "trained"], d_model=32, sha="a" * 64), kept)
    before = tree_digest(kept)
    for output in (kept, kept / "trained", kept / "claims"):
        code = main(["claims", "gm", "--inputs", str(kept), "--output", str(output)])
        error = capsys.readouterr().err
        assert code == 2 and error.count("\n") == 1 and f"inside the kept inputs folder {kept}" in error, error
    assert tree_digest(kept) == before and not (kept / "claims").exists()
