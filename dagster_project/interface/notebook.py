"""The study from a notebook: ``resdyn.open()`` -> :class:`Study`, polars frames over the published warehouse.

    import resdyn
    study = resdyn.open()                                    # the configured warehouse, read-only
    study = resdyn.open("s3://bucket/prefix")                # one on an object store (docs/configuration.md)
    study.partitions()                                       # polars DataFrame: one row per model@checkpoint
    study.sql("fdr_significant_layers")                      # a named question (sql/questions/), or any SELECT
    study.sql("SELECT * FROM layer_metrics WHERE model = $model", model="tiny-llama")
    study.table("layer_metrics", model="tiny-llama").filter(...).collect()   # LazyFrame, published files only
    study.jacobian("tiny-llama", "step-000400", depth=3)     # float64 d x d numpy array
    study.plot.cumulative_rank("tiny-llama")                 # the UI's figure, drawn inline
    frame, figure = study.compare("henrici_rel_j_minus_i")   # a metric vs relative depth, every partition

SQL runs through the same read-only views as ``resdyn sql`` (the same errors; parameters bound by
DuckDB, never formatted into the text). A LazyFrame scans exactly the files the partitions' manifests
publish when it is made: a generation published later is not mixed in, and the one it reads is kept
on disk until the generation after next (docs/operations.md). ``resdyn.run(...)`` materializes
through the launch API the CLI calls (run_loop.run_request: leases, provenance, publication) with a progress bar.

The notebook says what the CLI says, where it says it: a file left out of an answer (damaged, missing, rewritten
since it was published) is a :class:`LeftOutWarning` (``resdyn: warning: left out ...`` on the CLI), an unknown
model, checkpoint or partition a ``KeyError`` naming the known ones, and an argument of the wrong type a
``TypeError`` naming the type expected (never an empty frame, nor an error about something else).
"""

from __future__ import annotations

import json
import numbers
import os
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from resdyn import figure_frames
from resdyn.dagster_project.configuration.config import SQL_DIRECTORY
from resdyn.dagster_project.store import open_for_reading
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, TABLES
from resdyn.dagster_project.store.views import sql_text
from resdyn.dagster_project.store.warehouse import LOG_TABLES, partition_key_of
from resdyn.models.registry import split_partition_key


class LeftOutWarning(UserWarning):
    """A published file an answer left out (damaged, missing, rewritten since): what ``resdyn sql`` prints as
    ``resdyn: warning: left out ...``; `resdyn check` lists them all."""


def _text(value, name: str, example: str) -> str:
    """``value`` if it is a non-empty str; else a TypeError naming the type expected."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name}={value!r}: give a {'non-empty ' if isinstance(value, str) else ''}str "
                        f"(e.g. {example}), not {type(value).__name__ if not isinstance(value, str) else 'an empty one'}")
    return value


def _partition(value, name: str = "partition") -> tuple[str, str]:
    """``model@checkpoint`` as (model, checkpoint); another type is a TypeError, another form a ValueError."""
    return split_partition_key(_text(value, name, "'tiny-llama@step-000400'"))


def _warn_left_out(problems: list[str]) -> None:
    for problem in problems:  # as the CLI's _warn_problems says it
        warnings.warn(f"left out {problem}", LeftOutWarning, stacklevel=3)


FIGURES = ("metrics_by_depth", "cumulative_rank", "schur_surgery", "eigenvalue_clouds", "coupling_by_depth")
PARTITION_FIGURES = ("schur_surgery", "eigenvalue_clouds")  # one partition's; the others: every checkpoint


class Study:
    """A read-only view of one warehouse (``resdyn.open``)."""

    def __init__(self, warehouse: str | Path | None = None) -> None:
        self.store = open_for_reading(warehouse)  # a folder, or s3://BUCKET/PREFIX
        self.plot = Plots(self)

    def __repr__(self) -> str:
        return f"Study({str(self.store)!r})"

    # -- SQL ------------------------------------------------------------------------------------

    def sql(self, query: str, /, **parameters) -> pl.DataFrame:
        """The answer to ``query`` as a DataFrame: SQL text, a ``.sql`` file (here or in sql/questions/, as
        ``resdyn sql`` finds it) or the bare name of a question (``"fdr_significant_layers"``); ``$name``
        placeholders of the last statement are bound to ``parameters`` by DuckDB. A published file left out of
        the answer (damaged, missing) is a :class:`LeftOutWarning`, as ``resdyn sql`` warns."""
        _text(query, "query", "'SELECT * FROM partitions' or 'fdr_significant_layers'")
        self.store.problems = []
        answer = pl.from_arrow(self.store.query(_sql_text(query), parameters=parameters or None))
        _warn_left_out(getattr(self.store, "problems", []))
        return answer

    def partitions(self) -> pl.DataFrame:
        """One row per partition with its status (the ``partitions`` view)."""
        return self.sql("SELECT * FROM partitions ORDER BY model, checkpoint")

    def models(self) -> pl.DataFrame:
        """Every registered checkpoint: model, family, source, checkpoint, revision, status."""
        status = {(row["model"], row["checkpoint"]): row["status"] for row in self.partitions().iter_rows(named=True)}
        rows = [{"model": name, "family": spec.family, "source": spec.source, "checkpoint": checkpoint,
                 "revision": revision, "status": status.get((name, checkpoint), "-")}
                for name, spec in sorted(self.store.registry_specs().items()) for checkpoint, revision in spec.checkpoints.items()]
        return pl.DataFrame(rows, schema={"model": pl.String, "family": pl.String, "source": pl.String,
                                          "checkpoint": pl.String, "revision": pl.String, "status": pl.String})

    def runs(self, partition: str) -> pl.DataFrame:
        """Every run of ``partition`` (``model@checkpoint``), oldest first; a partition no run was recorded for is a
        KeyError naming those that have runs."""
        model, checkpoint = _partition(partition)
        runs = self.sql("SELECT * FROM runs WHERE model = $model AND checkpoint = $checkpoint ORDER BY started_at",
                        model=model, checkpoint=checkpoint)
        if runs.is_empty():
            known = self.sql("SELECT DISTINCT model || '@' || checkpoint AS partition FROM runs ORDER BY 1")
            raise KeyError(f"no run of {partition} is recorded in {self.store}; partitions with runs: "
                           f"{', '.join(known['partition']) or 'none'}")
        return runs

    def settings(self, partition: str) -> dict:
        """The settings of the run that published ``partition``."""
        model, checkpoint = _partition(partition)
        rows = self.sql("SELECT r.settings FROM partitions p JOIN runs r ON r.run_id = p.run_id AND r.model = p.model "
                        "AND r.checkpoint = p.checkpoint WHERE p.model = $model AND p.checkpoint = $checkpoint",
                        model=model, checkpoint=checkpoint)
        if rows.is_empty():
            raise KeyError(f"partition {partition} has no published run in {self.store}: `study.partitions()` "
                           "lists the partitions there")
        return json.loads(rows["settings"][0])

    # -- tables ---------------------------------------------------------------------------------

    def table(self, name: str, model: str | None = None, checkpoint: str | None = None) -> pl.LazyFrame:
        """Table ``name`` (of ``model`` / ``checkpoint`` when given) as a LazyFrame over exactly the files its
        partitions' manifests publish now (``runs``: every readable run record), with ``model`` and
        ``checkpoint`` columns. Partitions of different widths or schema versions are combined as DuckDB's
        views combine them: fixed-size lists of different lengths become lists, missing columns nulls. A model or
        checkpoint the warehouse has no partition of is a KeyError naming those it has; a published file left out
        (damaged, missing) a :class:`LeftOutWarning`."""
        _text(name, "name", "'layer_metrics'")
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        for value, argument in ((model, "model"), (checkpoint, "checkpoint")):
            if value is not None:
                _text(value, argument, "'tiny-llama'" if argument == "model" else "'step-000400'")
        published, rows, problems = self.store.published_files()
        paths = self.store.readable_run_files() if name in LOG_TABLES else published.get(name, [])
        known = {(row["model"], row["checkpoint"]) for row in rows}
        if name in LOG_TABLES:  # a run's record exists for a partition that never published
            known |= {found for found in map(lambda path: partition_key_of(Path(path)), paths) if found}
        self._require_known(known, model, checkpoint)
        _warn_left_out(problems)
        frames = []
        for path in sorted(paths):
            found = partition_key_of(Path(path))
            if found and (model is None or found[0] == model) and (checkpoint is None or found[1] == checkpoint):
                frames.append(self._scan(path).with_columns(model=pl.lit(found[0]), checkpoint=pl.lit(found[1])))
        if not frames:
            return pl.from_arrow(_empty(name)).lazy()
        frame = frames[0] if len(frames) == 1 else pl.concat(_comparable(frames), how="diagonal_relaxed")
        return PublishedFrame._from_pyldf(frame._ldf)

    def _require_known(self, known: set[tuple[str, str]], model: str | None, checkpoint: str | None) -> None:
        """A KeyError naming what the warehouse holds when ``model`` / ``checkpoint`` is none of its partitions."""
        partitions = ", ".join(f"{m}@{c}" for m, c in sorted(known)) or "none"
        if model is not None and not any(m == model for m, _ in known):
            registered = model in self.store.registry_specs()
            raise KeyError(f"{model} has no partition in {self.store}" + (
                f" (it is registered: `resdyn run --model {model}`)" if registered else " and is not a registered "
                "model") + f"; the partitions there: {partitions} (`study.partitions()`)")
        if checkpoint is not None and (model, checkpoint) not in known and not (
                model is None and any(c == checkpoint for _, c in known)):
            of = ", ".join(sorted({c for m, c in known if model is None or m == model})) or "none"
            raise KeyError(f"{model}@{checkpoint} is no partition in {self.store}; the checkpoints of {model} there: "
                           f"{of}" if model else f"no partition in {self.store} has the checkpoint {checkpoint!r}; "
                           f"the checkpoints there: {of}")

    def _scan(self, path: str) -> pl.LazyFrame:
        """One published file as a LazyFrame: polars reads a local file itself, an object through the store's
        pyarrow filesystem (the credentials and endpoint the warehouse was opened with)."""
        if self.store.arrow_filesystem is None:
            return pl.scan_parquet(path)
        return pl.scan_pyarrow_dataset(ds.dataset(path, filesystem=self.store.arrow_filesystem, format="parquet"))

    def jacobian(self, model: str, checkpoint: str, depth: int) -> np.ndarray:
        """The mean Jacobian of the sublayer at ``depth`` (float64, d x d, a writable copy), from its row group."""
        depth = self._matrix_arguments(model, checkpoint, depth)
        for group in self._matrix_groups("jacobians", model, checkpoint, depth):
            return np.array(group, dtype=np.float64, copy=True)
        raise KeyError(f"{model}@{checkpoint} has no mean Jacobian at depth {depth}")

    def sample_jacobians(self, model: str, checkpoint: str, depth: int) -> np.ndarray:
        """The kept per-sample Jacobians of the sublayer at ``depth`` (k x d x d, by sample_id then position)."""
        depth = self._matrix_arguments(model, checkpoint, depth)
        matrices = list(self._matrix_groups("sample_jacobians", model, checkpoint, depth, keyed=True))
        if not matrices:
            raise KeyError(f"{model}@{checkpoint} kept no per-sample Jacobian at depth {depth}")
        return np.stack([matrix for _, matrix in sorted(matrices, key=lambda item: item[0])])

    def _matrix_arguments(self, model, checkpoint, depth) -> int:
        """``depth`` as an int after checking the types, and the partition against those the warehouse holds."""
        _text(model, "model", "'tiny-llama'")
        _text(checkpoint, "checkpoint", "'step-000400'")
        if isinstance(depth, bool) or not isinstance(depth, numbers.Integral):
            raise TypeError(f"depth={depth!r}: give an int (a sublayer's depth: 0, 1, ...), not "
                            f"{type(depth).__name__}")
        if not self.store.published_table_names(model, checkpoint):  # one manifest read; the whole listing for the error
            self._require_known({(row["model"], row["checkpoint"]) for row in self.store.published_files()[1]}, model,
                                checkpoint)
        return int(depth)

    def _matrix_groups(self, table: str, model: str, checkpoint: str, depth: int, keyed: bool = False):
        matrices = self.store.matrix_table(table, model, checkpoint)
        for index, (at_depth, *key) in matrices.keys(("depth", "sample_id", "position") if keyed else ("depth",)):
            if at_depth == depth:
                yield (tuple(key), matrices.matrix(index)) if keyed else matrices.matrix(index)

    # -- figures --------------------------------------------------------------------------------

    def figure(self, name: str, model: str, checkpoint: str | None = None):
        """The figure ``name`` (one of :data:`FIGURES`) drawn from the tables by the functions the assets use:
        of one partition (``schur_surgery``, ``eigenvalue_clouds``: ``checkpoint`` required) or across the
        checkpoints of ``model`` (the others: no ``checkpoint``)."""
        _text(name, "name", "'cumulative_rank'")
        _text(model, "model", "'tiny-llama'")
        if checkpoint is not None:
            _text(checkpoint, "checkpoint", "'step-000400'")
        if name not in FIGURES:
            raise KeyError(f"no figure {name!r}; figures: {', '.join(FIGURES)}")
        if name in PARTITION_FIGURES:
            if checkpoint is None:
                raise ValueError(f"{name} is one partition's figure: study.figure({name!r}, {model!r}, CHECKPOINT)")
            return getattr(self.plot, name)(model, checkpoint)
        if checkpoint is not None:
            raise ValueError(f"{name} draws every checkpoint of {model}: study.figure({name!r}, {model!r}) (or "
                             "study.compare(...) for chosen partitions)")
        return getattr(self.plot, name)(model)

    def compare(self, metric: str, by: str = "depth", partitions: list[str] | None = None, table: str | None = None):
        """(frame, figure): ``metric`` against relative depth (``by`` / its maximum) for ``partitions``
        (``model@checkpoint``, or a list of them; default every published one) from the table that has the
        column. A partition the table has no rows of is a KeyError naming those it has."""
        _text(metric, "metric", "'henrici_rel_j_minus_i'")
        _text(by, "by", "'depth'")
        if table is not None:
            _text(table, "table", "'layer_metrics'")
        if isinstance(partitions, str):
            partitions = [partitions]
        if partitions is not None and not isinstance(partitions, (list, tuple)):
            raise TypeError(f"partitions={partitions!r}: give a 'model@checkpoint' str or a list of them, not "
                            f"{type(partitions).__name__}")
        wanted = [_partition(key, "partitions") for key in partitions] if partitions is not None else None
        table = table or _table_with(metric, by)
        frame = self.table(table).select("model", "checkpoint", by, metric).collect()
        if wanted is not None:
            present = set(frame.select("model", "checkpoint").unique().iter_rows())
            missing = [f"{m}@{c}" for m, c in wanted if (m, c) not in present]
            if missing:
                raise KeyError(f"{', '.join(missing)}: no published rows of {table} in {self.store}; it has "
                               f"{', '.join(f'{m}@{c}' for m, c in sorted(present)) or 'none'}")
            frame = frame.filter(pl.struct("model", "checkpoint").is_in(
                [{"model": m, "checkpoint": c} for m, c in wanted]))
        frame = figure_frames.relative_depth(frame, by).sort("model", "checkpoint", by)
        labels = pl.DataFrame([{"model": model, "checkpoint": checkpoint, "label": label}
                               for model in frame["model"].unique().to_list()
                               for checkpoint, label in self.store.checkpoint_labels(model).items()],
                              schema={"model": pl.String, "checkpoint": pl.String, "label": pl.String})
        # a stale or mismatched partition is marked in the legend (one join, not a Python call per row)
        drawn = frame.join(labels, on=["model", "checkpoint"], how="left", maintain_order="left").with_columns(
            checkpoint=pl.coalesce("label", "checkpoint")).drop("label")
        return frame, figure_frames.compare_figure(metric, drawn, None)


class PublishedFrame(pl.LazyFrame):
    """A LazyFrame over one published generation. A rerun keeps the generation before it; the one before that is
    removed, and collecting a frame made over it says so (polars alone says only that a file is missing). Frames
    derived from it (filter, select, join...) are PublishedFrames too: polars makes them with ``_from_pyldf`` of the
    frame's own class, the one hook it gives a subclass."""

    def collect(self, *arguments, **options) -> pl.DataFrame:
        try:
            return super().collect(*arguments, **options)
        except FileNotFoundError as error:
            raise FileNotFoundError(f"the generation this frame read was replaced (a partition was rerun twice since "
                                    f"the frame was made: {str(error).splitlines()[0]}); make the frame again "
                                    "(study.table(...))") from None


class Plots:
    """``study.plot.<figure>(...)``: matplotlib figures, each drawn as the asset draws it."""

    def __init__(self, study: Study) -> None:
        self._study = study

    def metrics_by_depth(self, model: str):
        return figure_frames.metrics_figure(model, self._by_checkpoint("layer_metrics", model), None)

    def cumulative_rank(self, model: str):
        return figure_frames.cumulative_rank_figure(model, self._by_checkpoint("cumulative_rank", model), None)

    def schur_surgery(self, model: str, checkpoint: str):
        frame = self._rows("schur_surgery", model, checkpoint)
        return figure_frames.schur_surgery_figure(f"{model}@{checkpoint}", frame, None)

    def eigenvalue_clouds(self, model: str, checkpoint: str):
        frame = self._rows("eigenvalues", model, checkpoint)
        return figure_frames.eigenvalue_figure(f"{model}@{checkpoint}", frame, None)

    def coupling_by_depth(self, model: str):
        return figure_frames.coupling_figure(model, self._by_checkpoint("coupling_tests", model), None)

    def _rows(self, table: str, model: str, checkpoint: str | None = None) -> pl.DataFrame:
        """The published rows a figure is drawn from; none is an error naming what is published (never an empty
        figure)."""
        _text(model, "model", "'tiny-llama'")
        frame = self._study.table(table, model, checkpoint).collect()
        if frame.is_empty():
            wanted = f"{model}@{checkpoint}" if checkpoint else f"model {model}"
            partitions = self._study.partitions()
            published = [f"{row['model']}@{row['checkpoint']} ({row['status']})"
                         for row in partitions.iter_rows(named=True)]
            raise KeyError(f"{wanted} has no published rows of {table} in {self._study.store}; published: "
                           f"{', '.join(published) or 'nothing'} (`resdyn check` names damaged files)")
        return frame

    def _by_checkpoint(self, table: str, model: str) -> dict[str, pl.DataFrame]:
        """The rows by checkpoint, each named as the legend shows it (a stale or mismatched one marked)."""
        frame = self._rows(table, model)
        labels = self._study.store.checkpoint_labels(model)
        return {labels.get(key, key): part for (key,), part in frame.partition_by("checkpoint", as_dict=True).items()}


def _sql_text(query: str) -> str:
    """SQL text as ``resdyn sql`` reads its argument (a ``.sql`` file here or in sql/questions/, else SQL),
    and a bare question name (``fdr_significant_layers``) as that question's file."""
    if query.isidentifier():  # one word is no SQL statement: a question's name, or a misspelt one
        if not (SQL_DIRECTORY / "questions" / f"{query}.sql").is_file():
            names = sorted(path.stem for path in (SQL_DIRECTORY / "questions").glob("*.sql"))
            raise KeyError(f"no question {query!r}; the questions: {', '.join(names)}")
        return (SQL_DIRECTORY / "questions" / f"{query}.sql").read_text()
    return sql_text(query)


def _comparable(frames: list[pl.LazyFrame]) -> list[pl.LazyFrame]:
    """Frames whose fixed-size list columns have different widths (models of different d), with those
    columns as variable-length lists, so that they concatenate."""
    schemas = [frame.collect_schema() for frame in frames]
    widths: dict[str, set] = {}
    for schema in schemas:
        for column, dtype in schema.items():
            if isinstance(dtype, pl.Array):
                widths.setdefault(column, set()).add(dtype)
    varying = {column for column, kinds in widths.items() if len(kinds) > 1}
    if not varying:
        return frames
    return [frame.with_columns([pl.col(column).cast(pl.List(schema[column].inner)) for column in varying
                                if column in schema]) for frame, schema in zip(frames, schemas)]


def _table_with(metric: str, by: str) -> str:
    for name, spec in TABLES.items():
        columns = spec.schema().names
        if metric in columns and by in columns:
            return name
    raise KeyError(f"no table has both {metric!r} and {by!r}: `study.sql('DESCRIBE layer_metrics')` lists columns")


def _empty(name: str) -> pa.Table:
    schema = TABLES[name].schema()
    for column in (*PROVENANCE_COLUMNS, "model", "checkpoint"):
        schema = schema.append(pa.field(column, pa.string()))
    return schema.empty_table()


def open_study(warehouse: str | Path | None = None) -> Study:
    """The warehouse at ``warehouse`` (default: the configured one, RESDYN_WAREHOUSE or ./warehouse)."""
    return Study(_warehouse_argument(warehouse))


def _warehouse_argument(warehouse):
    """``warehouse`` as given to the Python API: None (the configured one) or a non-empty path; anything else is
    the one-line error the CLI gives."""
    if warehouse is None:
        return None
    if not isinstance(warehouse, (str, os.PathLike)) or not str(warehouse).strip():
        raise TypeError(f"warehouse={warehouse!r}: give a directory (a str or pathlib.Path), or leave it out for the "
                        "configured one (RESDYN_WAREHOUSE, else ./warehouse)")
    return warehouse


def run(model: str | None = None, checkpoints: list[str] | None = None, *, suite: str | None = None,
        warehouse: str | Path | None = None, progress: bool = True, **settings) -> Study:
    """Materialize ``model`` (a registered name, a directory, a hub id or a GGUF file; or ``suite``) through the
    launch API ``resdyn run`` calls (:func:`.run_loop.run_request` on the configured executor: registration, leases,
    provenance, publication), with a progress
    bar (tqdm's auto mode: a line in a terminal, a widget in Jupyter where ipywidgets is installed, else a
    text bar); settings by name (``n_samples=32``, ``backend="autodiff"``). Returns the
    Study of the warehouse it wrote."""
    from resdyn.dagster_project.configuration.settings import BY_NAME
    from resdyn.dagster_project.launch.run_loop import run_request
    from resdyn.models.registration import Request

    warehouse = _warehouse_argument(warehouse)
    if isinstance(checkpoints, str):
        checkpoints = [checkpoints]
    if checkpoints is not None and (not isinstance(checkpoints, (list, tuple))
                                    or not all(isinstance(c, str) and c for c in checkpoints)):
        raise TypeError(f"checkpoints={checkpoints!r}: give a checkpoint name or a list of names "
                        "(e.g. checkpoints=['init', 'trained'])")
    for name, value in (("model", model), ("suite", suite)):
        if value is not None and not (isinstance(value, (str, os.PathLike)) and str(value)):
            raise TypeError(f"{name}={value!r}: give a {name} name" + (" or a path" if name == "model" else ""))
    if (model is None) == (suite is None):
        raise ValueError("give a model or a suite: resdyn.run('path/to/model') or resdyn.run(suite='tiny')")
    unknown = [name for name in settings if name not in BY_NAME]
    if unknown:
        raise TypeError(f"resdyn.run() has no setting {unknown[0]!r}; settings: {', '.join(BY_NAME)}")
    for name, value in settings.items():  # checked here so that the error names the keyword, not the CLI flag
        if value is not None:
            BY_NAME[name].parse(value, name)
    request = Request(suite=suite, models=(str(model),) if model is not None else (),
                      checkpoints=tuple(checkpoints or ()))
    bar = _ProgressBar() if progress else None
    try:
        outcome = run_request(request, {**settings, "warehouse": str(warehouse) if warehouse is not None else None},
                              bar, log_level="WARNING")
    finally:
        if bar is not None:
            bar.close()
    if outcome.exit_code != 0:
        what = f"suite {suite}" if suite is not None else f"model {model}"
        raise RuntimeError(f"resdyn.run of {what} ended with exit code {outcome.exit_code}"
                           + (f" (failed: {', '.join(outcome.failed)})" if outcome.failed else "")
                           + " (the lines above name what failed)")
    return Study(warehouse)


class _ProgressBar:
    """Partitions done / total, with the one running, through tqdm's auto mode (notebook widget or terminal)."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, number: int, total: int, key: str, done: bool) -> None:
        from tqdm.auto import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, unit="partition", desc="resdyn run")
        self.bar.set_postfix_str(f"{key} {'done' if done else 'running'}")
        if done:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
