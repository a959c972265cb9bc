-- One read-only view per warehouse table over its hive-partitioned Parquet files.
-- {warehouse} is replaced by the warehouse root; model and checkpoint come from the path.
-- A view is created only for tables that have at least one partition.

CREATE OR REPLACE VIEW model_checkpoints AS SELECT * FROM read_parquet('{warehouse}/model_checkpoints/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW training_loss AS SELECT * FROM read_parquet('{warehouse}/training_loss/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW samples AS SELECT * FROM read_parquet('{warehouse}/samples/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW activations AS SELECT * FROM read_parquet('{warehouse}/activations/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW jacobians AS SELECT * FROM read_parquet('{warehouse}/jacobians/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW sample_jacobians AS SELECT * FROM read_parquet('{warehouse}/sample_jacobians/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW eigenvalues AS SELECT * FROM read_parquet('{warehouse}/eigenvalues/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW singular_values AS SELECT * FROM read_parquet('{warehouse}/singular_values/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW layer_metrics AS SELECT * FROM read_parquet('{warehouse}/layer_metrics/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW layer_metrics_per_sample AS SELECT * FROM read_parquet('{warehouse}/layer_metrics_per_sample/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW cumulative_rank AS SELECT * FROM read_parquet('{warehouse}/cumulative_rank/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW schur_surgery AS SELECT * FROM read_parquet('{warehouse}/schur_surgery/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW graph_edges AS SELECT * FROM read_parquet('{warehouse}/graph_edges/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW communities AS SELECT * FROM read_parquet('{warehouse}/communities/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW gamma_scan AS SELECT * FROM read_parquet('{warehouse}/gamma_scan/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW unit_amplification AS SELECT * FROM read_parquet('{warehouse}/unit_amplification/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);

CREATE OR REPLACE VIEW coupling_tests AS SELECT * FROM read_parquet('{warehouse}/coupling_tests/*/*/*.parquet',
    hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true);
