"""resdyn: the transformer residual stream as a dynamical system (framework-free science).

``resdyn.open()`` and ``resdyn.run()`` are the notebook's way in (docs/notebook.md); they live with the
storage (``resdyn.dagster_project.interface.notebook``) and are imported only when called, so ``import resdyn``
loads neither Dagster, DuckDB, polars nor torch.
"""

__version__ = "0.1.0"


def open(warehouse=None):  # noqa: A001 - resdyn.open() is the API's name, like io.open
    """The study in ``warehouse`` (default: the configured one), read-only: a
    :class:`resdyn.dagster_project.interface.notebook.Study` with polars frames, SQL, matrices and figures."""
    from .dagster_project.interface.notebook import open_study

    return open_study(warehouse)


def run(model=None, checkpoints=None, **keywords):
    """Materialize ``model`` (or ``suite=...``) through the CLI's launch API with a progress bar, then open the
    warehouse it wrote (:func:`resdyn.dagster_project.interface.notebook.run`)."""
    from .dagster_project.interface.notebook import run as run_study

    return run_study(model, checkpoints, **keywords)
