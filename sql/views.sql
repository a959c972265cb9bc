-- Derived views. Every table of dagster_project/store/schema.py is already a view over exactly the files its
-- partitions' manifests publish (dagster_project/store/views.py), plus two registered relations:
--   published_tables(model, checkpoint, table_name, run_id, settings_hash, generation, rows, intact, identity,
--     code_version, settings, current, stale_reason, partition_settings, settings_conflicts): each published table
--     with its recorded identity (its stage's code version, the settings it declares, its inputs' identities:
--     dagster_project/store/table_identity.py) and whether it is current by lineage, with the reason where not
--   study_tables(table_name, required)
--   partition_sources(model, checkpoint, source_sha256, registered_sha256, d_model): the sha256 of the GGUF file a
--     partition was made from (its null model and quantized control too) and the one its model is registered with now
--
-- checkpoint_order(checkpoint): the training order of a model's checkpoints: `init` (a null model) first, then
-- `init-quantized` (that null model rounded through a GGUF file's types: a control, never the trained end), then
-- the number the name ends with (`step-000400`, `stage1-step471000`), then names without one (`main`, `trained`,
-- `local`: a published or final model), last.
CREATE OR REPLACE MACRO checkpoint_order(checkpoint) AS
    CASE WHEN checkpoint = 'init' THEN -1.0 WHEN checkpoint = 'init-quantized' THEN -0.5
         ELSE coalesce(try_cast(regexp_extract(checkpoint, '(\d+)$', 1) AS DOUBLE), 'infinity'::DOUBLE) END;

-- partitions: one row per partition that has published tables or a recorded run.
--   complete      every required table published, intact and current (its code version the stage's now, made from
--                 its inputs as published now), whichever runs made them, their settings agreeing
--   inconsistent  every required table there, but one is not current (stale_tables says which and why; `resdyn run
--                 --resume` reruns exactly those) or two tables record one setting with different values
--   incomplete    a required table missing or damaged (a run in progress publishes only at its end)
--   failed        not complete and the partition's latest run failed
--   stale         made (wholly or in part) from a source file other than the one its model is registered with now
--                 (the GGUF file changed): the next `resdyn run` of the model reruns it
CREATE OR REPLACE VIEW partitions AS
WITH required AS (
    SELECT count(*) AS n FROM study_tables WHERE required
), published AS (
    SELECT p.model, p.checkpoint,
           count(*) FILTER (WHERE s.required AND p.intact)  AS n_required_published,
           count(*) FILTER (WHERE NOT p.intact)              AS n_damaged,
           count(*) FILTER (WHERE s.required AND p.intact AND NOT p.current) AS n_not_current,
           string_agg(p.table_name || ': ' || p.stale_reason, ' | ' ORDER BY p.table_name)
               FILTER (WHERE s.required AND NOT p.current)    AS stale_tables,
           any_value(p.partition_settings)                    AS settings,
           any_value(p.settings_conflicts)                    AS settings_conflicts,
           arg_max(p.run_id, p.generation)                    AS latest_run_id,
           count(DISTINCT p.run_id)                          AS n_runs,
           count(DISTINCT p.settings_hash)                   AS n_settings,
           min(p.run_id)                                     AS run_id,
           min(p.settings_hash)                              AS settings_hash,
           max(p.generation)                                 AS generation,
           sum(p.rows)                                       AS total_rows
    FROM published_tables p JOIN study_tables s USING (table_name)
    GROUP BY p.model, p.checkpoint
), last_run AS (
    SELECT model, checkpoint,
           arg_max(run_id, started_at) AS last_run_id,
           arg_max(status, started_at) AS last_run_status,
           arg_max(error, started_at)  AS last_error,
           count(*)                    AS n_recorded_runs
    FROM runs
    GROUP BY model, checkpoint
)
SELECT model, checkpoint,
       CASE
           WHEN s.registered_sha256 <> '' AND s.source_sha256 <> '' AND s.source_sha256 <> s.registered_sha256
               THEN 'stale'
           WHEN p.n_required_published IS NULL OR p.n_required_published < (SELECT n FROM required)
                OR p.n_damaged > 0
               THEN CASE WHEN r.last_run_status = 'failed' THEN 'failed' ELSE 'incomplete' END
           WHEN p.n_not_current > 0 OR p.settings_conflicts IS NOT NULL THEN 'inconsistent'
           ELSE 'complete'
       END AS status,
       CASE WHEN p.n_runs = 1 THEN p.run_id ELSE p.latest_run_id END AS run_id,
       CASE WHEN p.n_settings = 1 THEN p.settings_hash END    AS settings_hash,
       coalesce(p.n_required_published, 0)                     AS required_tables_published,
       (SELECT n FROM required)                                AS required_tables,
       coalesce(p.n_runs, 0)                                   AS runs_in_published_tables,
       coalesce(p.n_damaged, 0)                                AS damaged_tables,
       p.stale_tables, p.settings, p.settings_conflicts,
       p.generation, p.total_rows,
       r.last_run_id, r.last_run_status, r.last_error,
       s.source_sha256, s.registered_sha256, s.d_model
FROM published p FULL OUTER JOIN last_run r USING (model, checkpoint)
     LEFT JOIN partition_sources s USING (model, checkpoint)
ORDER BY model, checkpoint;
