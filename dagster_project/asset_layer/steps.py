"""What an asset declares about its step, fixed in code: its kind, its retries, its concurrency pool.

The kind (``model``: loads and runs the network; ``analysis``: numerics on tables) is all an asset says
(:func:`resdyn.dagster_project.asset_layer.partition_assets.partition_asset`); what a kind asks of a cluster depends on the
run's configuration and is derived from it when the definitions are built
(:func:`resdyn.dagster_project.launch.study_definitions.step_tags`).
"""

import dagster as dg

STEP_KIND_TAG = "resdyn/step"
MODEL_RUNNER_POOL = "model_runner"  # steps that run a model share its slots (StudyConfig.model_runners)
# a worker that dies mid-step costs that step, not the run
STEP_RETRIES = dg.RetryPolicy(max_retries=2, delay=1)
