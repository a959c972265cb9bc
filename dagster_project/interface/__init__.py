"""What a person types or calls: ``cli.py`` (``resdyn``), ``notebook.py``
(``resdyn.open`` / ``resdyn.run``), ``ui.py`` and ``ui_proxy.py`` (``resdyn ui``: the Dagster webserver behind
a proxy that serves figures)."""
