"""From a request to Dagster runs: ``study_definitions.py`` builds the Definitions for a configuration (assets
with their step tags, checks, sensors, the job on its executor), ``run_loop.py`` is the one launch API that
``resdyn run`` and ``resdyn.run`` call, ``executors.py`` / ``ray_local.py`` the executors and a local Ray
cluster, ``assets_index.py`` the one module that imports ``assets/``, ``console.py`` how a run logs."""
