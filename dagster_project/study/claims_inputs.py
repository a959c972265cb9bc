"""What the claims of one model are computed from, as small frames: read from a warehouse, kept in a folder
(``resdyn claims MODEL --save-inputs DIR``), read back (``--inputs DIR``), and checked to belong together.

A kept folder holds one study of one model: one folder per checkpoint, all made from the same model file
(sha256), at the same width, the same analysis settings (settings hash: n, seed, window, ...) and the same
corpus. Keeping is a new generation: every checkpoint is written beside the folders already kept, checked
against them, and only then swapped in; a refusal (another file, width, settings or corpus) leaves the folder
byte for byte as it was.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import polars as pl

from resdyn.dagster_project.configuration.config import SQL_DIRECTORY
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.files import file_lock

INPUTS = ("sublayers", "cumulative", "surgery", "intervals", "checkpoints", "graphs")  # sql/claims/<name>.sql
SAVED = (*INPUTS, "surgery_by_depth", "partitions", "runs")

# The columns of every kept frame, as claims_inputs makes them (a pipeline test keeps the two equal): a kept frame
# without one of them was kept by an older resdyn, and reading it is an error naming the column (never a verdict
# quietly turned "not testable").
COLUMNS: dict[str, tuple[str, ...]] = {
    "sublayers": ("model", "checkpoint", "depth", "sublayer", "asymmetry_index", "rotation_share",
                  "henrici_rel_j_minus_i", "henrici_rel_j", "eigenvector_condition_number", "frac_complex", "update_size", "mean_absolute_argument",
                  "operator_type", "operator_type_henrici", "coupling_effect", "coupling_significant",
                  "coupling_q_permutation", "n_boundary", "n_interior", "stratum_boundary", "stratum_interior",
                  "community_rho", "community_significant",
                  "n_communities"),
    "cumulative": ("model", "checkpoint", "depth", "effective_rank", "participation_ratio", "stable_rank"),
    "surgery": ("model", "checkpoint", "schur_ordering", "alpha", "effective_rank", "participation_ratio",
                "stable_rank"),
    "intervals": ("model", "checkpoint", "depth", "quantity", "value", "replicates"),
    "checkpoints": ("model", "checkpoint", "d_model", "n_samples"),
    "graphs": ("model", "checkpoint", "median_edge_correlation", "construction", "graph_k", "n_units",
               "n_observations"),
    "surgery_by_depth": ("model", "checkpoint", "alpha", "depth", "effective_rank"),
    "partitions": ("model", "checkpoint", "status", "source_sha256", "registered_sha256", "d_model"),
    "runs": ("model", "checkpoint", "settings_hash", "settings", "git_commit", "resdyn_version", "corpus",
             "corpus_sha256", "tables_code_version"),
}

# kept columns added after kept folders existed: a frame kept before lacks them and is read with nulls there (the
# claims say the measure was not recorded, naming it); any other absent column is an error
ADDED_SINCE_KEPT = {"sublayers": {"eigenvector_condition_number": pl.Float64, "stratum_boundary": pl.List(pl.Int32),
                                   "stratum_interior": pl.List(pl.Int32)}}

# the kept columns that are not numbers; every other kept column must be one (a number kept as text is an error)
NOT_NUMBERS = {"model", "checkpoint", "sublayer", "operator_type", "operator_type_henrici", "schur_ordering",
               "quantity", "construction", "status", "source_sha256", "registered_sha256", "settings_hash", "settings",
               "git_commit", "resdyn_version", "corpus", "corpus_sha256", "tables_code_version",
               "coupling_significant", "community_significant", "replicates", "stratum_boundary",
               "stratum_interior"}


def claims_inputs(store: Warehouse, model: str, *, complete_only: bool = True) -> dict[str, pl.DataFrame]:
    """Everything the claims of ``model`` are computed from, as small frames: the answers of sql/claims/*.sql over
    the complete partitions (every partition with ``complete_only`` false), the surgery through depth, the
    partitions' status and the provenance of the runs that made the tables (settings, corpus, code).
    :func:`keep_claims_inputs` keeps them, so the claims can be recomputed without the warehouse's matrices (a
    study's partitions may be run in different sessions)."""
    from resdyn.depth import SCHUR_ORDERING

    def answer(sql: str, complete: bool = complete_only) -> pl.DataFrame:
        return pl.from_arrow(store.query(sql, complete_only=complete)).filter(pl.col("model") == model)

    frames = {name: answer((SQL_DIRECTORY / "claims" / f"{name}.sql").read_text()) for name in INPUTS}
    frames["surgery_by_depth"] = answer(
        "SELECT model, checkpoint, alpha, depth, effective_rank FROM schur_surgery "
        f"WHERE schur_ordering = '{SCHUR_ORDERING}' ORDER BY depth")
    frames["partitions"] = answer("SELECT model, checkpoint, status, source_sha256, registered_sha256, d_model "
                                  "FROM partitions", complete=False)
    # the runs that made the tables the claims read (their provenance columns), not merely the latest runs
    frames["runs"] = answer(
        "SELECT t.model, t.checkpoint, t.settings_hash, any_value(r.settings) AS settings, "
        "any_value(r.git_commit) AS git_commit, any_value(r.resdyn_version) AS resdyn_version, "
        "any_value(r.corpus) AS corpus, any_value(r.corpus_sha256) AS corpus_sha256, "
        "any_value(r.tables_code_version) AS tables_code_version "
        "FROM (SELECT DISTINCT model, checkpoint, run_id, settings_hash FROM layer_metrics) t "
        "LEFT JOIN runs r ON r.run_id = t.run_id AND r.model = t.model AND r.checkpoint = t.checkpoint "
        "AND r.settings IS NOT NULL GROUP BY ALL").filter(pl.col("settings").is_not_null())
    return frames


# what the SIMEX set's runs publish and its zero-rounding readings read (resdyn.models.registry.SIMEX_SELECTION)
SIMEX_TABLES = ("model_checkpoints", "layer_metrics", "cumulative_rank", "schur_surgery")


def simex_inputs(store: Warehouse, model: str) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """(the frames of :func:`claims_inputs` for ``model``'s SIMEX set, the set's checkpoints left out with why): the
    checkpoints of the set (resdyn.models.registry.SIMEX_REVISIONS) whose SIMEX_TABLES are all published, intact
    and written by one run at one settings hash (the set's runs publish only those, so its partitions are never
    "complete" in the warehouse's sense). Frames of no rows when none is."""
    from resdyn.models.registry import SIMEX_REVISIONS

    published = pl.from_arrow(store.query(
        "SELECT checkpoint, table_name, run_id, settings_hash, intact FROM published_tables WHERE model = $model",
        parameters={"model": model}))
    ready, left_out = [], {}
    for checkpoint in SIMEX_REVISIONS:
        rows = published.filter((pl.col("checkpoint") == checkpoint) & pl.col("table_name").is_in(SIMEX_TABLES))
        if not rows.height:
            continue
        missing = sorted(set(SIMEX_TABLES) - set(rows["table_name"].to_list()))
        damaged = sorted(rows.filter(~pl.col("intact"))["table_name"].to_list())
        if missing or damaged:
            left_out[checkpoint] = f"{', '.join(missing or damaged)} {'not published' if missing else 'damaged'}"
        elif rows["run_id"].n_unique() > 1 or rows["settings_hash"].n_unique() > 1:
            left_out[checkpoint] = "its tables come from several runs or settings (run it again)"
        else:
            ready.append(checkpoint)
    frames = claims_inputs(store, model, complete_only=False)
    return {name: frame.filter(pl.col("checkpoint").is_in(ready)) for name, frame in frames.items()}, left_out


def identity(frames: dict[str, pl.DataFrame], checkpoint: str) -> dict:
    """What makes ``checkpoint``'s numbers what they are, as far as two checkpoints of one study must agree: the
    model, the model file (sha256), the width, the analysis settings (their hash), n and the corpus."""
    partition = frames["partitions"].filter(pl.col("checkpoint") == checkpoint).to_dicts()
    runs = frames["runs"].filter(pl.col("checkpoint") == checkpoint).to_dicts()
    row, run = (partition or [{}])[0], (runs or [{}])[0]
    settings = json.loads(run["settings"]) if run.get("settings") else {}
    return {"model": row.get("model"), "source_sha256": row.get("source_sha256") or "", "d_model": row.get("d_model"),
            "settings_hash": run.get("settings_hash") or "", "n_samples": settings.get("n_samples"),
            "corpus": run.get("corpus") or "", "corpus_sha256": run.get("corpus_sha256") or "", "settings": settings}


def describe(identity_of: dict) -> str:
    """One checkpoint's identity in a few words (for refusals)."""
    sha = identity_of["source_sha256"][:12] or "unknown"
    return (f"file sha256 {sha}, d = {identity_of['d_model']}, n = {identity_of['n_samples']}, settings "
            f"{identity_of['settings_hash'] or 'unknown'}, corpus {identity_of['corpus'] or 'unknown'}")


STUDY_IDENTITY = ("model", "source_sha256", "d_model", "settings_hash", "corpus_sha256")


def differences(first: dict, second: dict) -> list[str]:
    """The parts of :data:`STUDY_IDENTITY` in which two checkpoints differ (an empty one counts as unknown, not as
    a difference)."""
    return [key for key in STUDY_IDENTITY if first[key] and second[key] and first[key] != second[key]]


def complete_checkpoints(frames: dict[str, pl.DataFrame]) -> list[str]:
    return frames["partitions"].filter(pl.col("status") == "complete")["checkpoint"].to_list()


def keep_claims_inputs(frames: dict[str, pl.DataFrame], directory: Path, recovered: list[str] | None = None,
                       checkpoints: list[str] | None = None) -> list[Path]:
    """``frames`` (:func:`claims_inputs`) kept as ``<directory>/<checkpoint>/<name>.parquet``, one folder per
    complete checkpoint (or per one of ``checkpoints``: the SIMEX set's, :func:`simex_inputs`), beside the
    checkpoints kept there before (module docstring). A checkpoint already kept
    is replaced only by inputs of the same identity (the same partition measured again); anything else, or
    checkpoints that differ among themselves, is refused before ``directory`` is touched.

    Under ``<directory>/.lock`` (a second keep into the same folder waits): the new folders are written into a
    ``.generation-*`` folder beside, then each is swapped in by two renames (the kept folder to
    ``.retired-<checkpoint>``, the new one into its place); an error puts every retired folder back, and a
    swap a crash interrupted is put back by the next keep or read of the folder (:func:`_recover`; one line per
    thing put back or removed is added to ``recovered``)."""
    directory = Path(directory)
    checkpoints = complete_checkpoints(frames) if checkpoints is None else checkpoints
    if not checkpoints:
        raise ValueError("the warehouse holds no complete partition of this model to keep")
    new = {checkpoint: identity(frames, checkpoint) for checkpoint in checkpoints}
    first = checkpoints[0]
    for checkpoint in checkpoints[1:]:
        if differing := differences(new[first], new[checkpoint]):
            raise ValueError(f"the warehouse's checkpoints {first} and {checkpoint} differ in {', '.join(differing)} "
                             f"({first}: {describe(new[first])}; {checkpoint}: {describe(new[checkpoint])}): a kept "
                             "folder holds one study; rerun the odd one out at the others' settings, or keep the "
                             "claims from a warehouse whose partitions agree")
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / LOCK):
        (recovered if recovered is not None else []).extend(_recover(directory))
        for name, identity_kept in _kept_identities(directory).items():
            if differing := differences(identity_kept, new[first]):
                raise ValueError(f"{directory / name} keeps {identity_kept['model']}@{name} "
                                 f"({describe(identity_kept)}), and these inputs differ in {', '.join(differing)} "
                                 f"({describe(new[first])}): nothing was written; keep them in another folder "
                                 f"(--save-inputs NEW_DIR), or move {directory} aside first to replace its study")
        generation = directory / f".generation-{uuid.uuid4().hex[:12]}"
        generation.mkdir()
        swapped: list[tuple[str, bool]] = []  # (checkpoint, whether a kept folder was retired for it)
        try:
            for checkpoint in checkpoints:
                (generation / checkpoint).mkdir()
                for name in SAVED:
                    frames[name].filter(pl.col("checkpoint") == checkpoint).write_parquet(
                        generation / checkpoint / f"{name}.parquet")
            for checkpoint in checkpoints:
                target, retired = directory / checkpoint, directory / f"{RETIRED}{checkpoint}"
                had = target.exists()
                if had:
                    target.rename(retired)
                swapped.append((checkpoint, had))
                (generation / checkpoint).rename(target)
        except BaseException:
            for checkpoint, had in reversed(swapped):  # DIR as it was: kept folders back, new ones out
                target, retired = directory / checkpoint, directory / f"{RETIRED}{checkpoint}"
                if target.exists() and (had or not retired.exists()):
                    shutil.rmtree(target)
                if had and retired.exists():
                    retired.rename(target)
            raise
        finally:
            shutil.rmtree(generation, ignore_errors=True)
        for checkpoint, _ in swapped:
            shutil.rmtree(directory / f"{RETIRED}{checkpoint}", ignore_errors=True)
    return [directory / checkpoint for checkpoint in checkpoints]


LOCK, RETIRED = ".lock", ".retired-"


def _recover(directory: Path) -> list[str]:
    """Finish what a crash interrupted (the caller holds the folder's lock): a retired folder whose checkpoint is
    missing goes back into its place, one whose new folder is in place is removed (every folder swapped in was
    checked against those kept, so a mix of old and new folders is still one study), and half-written
    generations are removed; one line per thing done, saying what the folder now holds and what to do."""
    done = []
    for retired in sorted(directory.glob(f"{RETIRED}*")):
        target = directory / retired.name.removeprefix(RETIRED)
        if target.exists():
            shutil.rmtree(retired, ignore_errors=True)
            done.append(f"{retired}: a keep into {directory} was stopped after it swapped in {target.name}; its "
                        "folder from before was removed (the new one is kept)")
        else:
            retired.rename(target)
            done.append(f"{retired}: a keep into {directory} was stopped while it swapped in {target.name}; the "
                        f"folder kept before was put back as {target}")
    for generation in sorted(directory.glob(".generation-*")):
        left = sorted(path.name for path in generation.iterdir()) if generation.is_dir() else []
        shutil.rmtree(generation, ignore_errors=True)
        done.append(f"{generation}: a keep into {directory} was stopped before it finished"
                    + (f" (not kept: {', '.join(left)})" if left else "") + "; removed it, the checkpoints kept "
                    "before are as they were: keep the inputs again (`resdyn claims MODEL --warehouse W "
                    f"--save-inputs {directory}`)")
    return done


def _kept_identities(directory: Path) -> dict[str, dict]:
    """The identity of every checkpoint kept in ``directory`` (a folder per checkpoint); a column an older
    resdyn did not keep counts as unknown here (a kept study stays extendable), though reading it for claims
    needs every column."""
    return {folder.name: identity({name: _read(folder, name, every_column=False) for name in ("partitions", "runs")},
                                  folder.name)
            for folder in _checkpoint_folders(directory)}


def kept_checkpoints(directory: Path) -> list[str]:
    """The checkpoints kept under ``directory`` (none where it is missing or empty)."""
    return [folder.name for folder in _checkpoint_folders(Path(directory))]


def _checkpoint_folders(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.iterdir() if path.is_dir() and not path.name.startswith("."))


def _read(folder: Path, name: str, *, every_column: bool = True) -> pl.DataFrame:
    """One kept frame, checked: a file that is missing, damaged or lacks a column (unless not ``every_column``:
    then it is there as nulls) is a one-line error naming it."""
    path = folder / f"{name}.parquet"
    fix = ("keep the inputs again from the warehouse that made them, into a new folder (`resdyn claims MODEL "
           "--save-inputs NEW_DIR`), or read them with the resdyn that kept them")
    if not path.is_file():
        raise ValueError(f"{path} is missing: {folder} is not a complete kept checkpoint; {fix}")
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars' own errors (ComputeError, ...) are not ValueErrors
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path} cannot be read as Parquet ({type(error).__name__}: {first_line}); {fix}") from None
    frame = frame.with_columns(*(pl.lit(None, kind).alias(column) for column, kind in ADDED_SINCE_KEPT.get(name, {}).items()
                                 if column not in frame.columns))
    absent = [column for column in COLUMNS[name] if column not in frame.columns]
    if absent and not every_column:
        frame = frame.with_columns(*(pl.lit(None).alias(column) for column in absent))
    elif absent:
        raise ValueError(f"{path} lacks the column(s) {', '.join(absent)} (kept by an older resdyn); {fix}")
    not_numbers = [column for column in COLUMNS[name] if column not in NOT_NUMBERS
                   and not (frame.schema[column].is_numeric() or frame.schema[column] == pl.Null)]
    if not_numbers:
        raise ValueError(f"{path}: column {not_numbers[0]} holds {frame.schema[not_numbers[0]]}, not numbers; {fix}")
    return frame


def load_claims_inputs(directory: Path, model: str, recovered: list[str] | None = None) -> dict[str, pl.DataFrame]:
    """The frames :func:`keep_claims_inputs` kept under ``directory`` (every checkpoint folder), for ``model``; what
    a keep a crash interrupted left there is put back or removed first, a line each added to ``recovered``."""
    directory = Path(directory)
    if directory.is_dir() and (any(directory.glob(f"{RETIRED}*")) or any(directory.glob(".generation-*"))):
        try:
            with file_lock(directory / LOCK):
                (recovered if recovered is not None else []).extend(_recover(directory))
        except PermissionError as error:
            raise ValueError(f"{directory} holds what a keep that was stopped left (.retired-* or .generation-* "
                             f"folders), and it cannot be put right here ({error.strerror}): run the command once "
                             "as a user who may write that folder") from None
    folders = _checkpoint_folders(directory)
    if not folders:
        raise ValueError(f"{directory} holds no saved claims inputs (one folder per checkpoint, written by "
                         "`resdyn claims MODEL --save-inputs DIR`)")
    every_model = {}
    for name in SAVED:
        parts = [_read(folder, name) for folder in folders]
        try:
            every_model[name] = pl.concat([part for part in parts if part.height] or parts[:1],
                                          how="diagonal_relaxed")
        except Exception as error:  # a column of another type in one folder (e.g. text where numbers belong)
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ValueError(f"the kept {name}.parquet files under {directory} do not agree in their column types "
                             f"({first_line}); keep the inputs again from the warehouse") from None
    frames = {name: frame.filter(pl.col("model") == model) for name, frame in every_model.items()}
    if not frames["partitions"].height:
        models = sorted(set(every_model["partitions"]["model"].to_list()))
        raise ValueError(f"{directory} holds no claims inputs of {model} (it holds: {', '.join(models) or 'none'})")
    return frames
