"""What every setting is and where its value comes from (flag > ``RESDYN_*`` variable > default), in one place:
``settings.py`` the analysis settings (their flags, variables, defaults, checks and meanings), ``config.py`` the
study configuration built from them (warehouse, executor, corpus directories), ``ports.py`` free loopback ports.
The bottom of ``dagster_project``: it imports nothing else of it."""
