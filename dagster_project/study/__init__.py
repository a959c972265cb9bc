"""The study over published tables, without Dagster: ``report.py`` (report.html and the checkpoint comparisons),
``claims.py`` and ``claims_inputs.py`` (the
paper's claims judged by the committed rules, and their kept inputs). The figures drawn from frames, as the
notebook and the stages draw them, are resdyn/figure_frames.py."""
