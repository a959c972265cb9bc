-- Training vs architecture: each checkpoint's depth-averaged metrics beside its model's first (step-0 or init) checkpoint.
WITH per_checkpoint AS (
    SELECT l.model, l.checkpoint,
           checkpoint_order(l.checkpoint) AS step,
           avg(l.henrici_rel_j_minus_i) AS henrici_rel, avg(l.frac_complex) AS frac_complex,
           avg(l.self_alignment) AS self_alignment, avg(l.effective_rank) AS single_layer_rank,
           any_value(c.full_depth_rank) AS full_depth_rank
    FROM layer_metrics l
    JOIN (SELECT model, checkpoint, arg_max(effective_rank, depth) AS full_depth_rank
          FROM cumulative_rank GROUP BY ALL) c USING (model, checkpoint)
    GROUP BY l.model, l.checkpoint
), baseline AS (
    SELECT model, arg_min(checkpoint, step) AS init_checkpoint, arg_min(henrici_rel, step) AS init_henrici_rel,
           arg_min(frac_complex, step) AS init_frac_complex, arg_min(full_depth_rank, step) AS init_full_depth_rank
    FROM per_checkpoint GROUP BY model
)
SELECT p.model, p.checkpoint, CASE WHEN isfinite(p.step) THEN CAST(p.step AS BIGINT) END AS step, b.init_checkpoint,
       p.henrici_rel, b.init_henrici_rel, p.frac_complex, b.init_frac_complex,
       p.full_depth_rank, b.init_full_depth_rank
FROM per_checkpoint p JOIN baseline b USING (model)
ORDER BY p.model, p.step;
