"""The study over published tables, without Dagster: ``report.py`` (report.html and the checkpoint comparisons),
``figure_frames.py`` (the figures as the notebook draws them), ``claims.py`` and ``claims_inputs.py`` (the
paper's claims judged by the committed rules, and their kept inputs)."""
