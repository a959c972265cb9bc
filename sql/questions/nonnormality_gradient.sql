-- The spectral gradient through depth: symmetry (asymmetry index of J - I) and rotation (rotation share) early vs
-- late, beside the Henrici and complex-fraction readings, and the operator types (`resdyn claims` tests monotonicity
-- by Spearman's rank correlation with a permutation p).
WITH ranked AS (
    SELECT *, depth < max(depth) OVER (PARTITION BY model, checkpoint) / 2.0 AS early
    FROM layer_metrics
)
SELECT model, checkpoint,
       avg(asymmetry_index) FILTER (WHERE early)                     AS asymmetry_early,
       avg(asymmetry_index) FILTER (WHERE NOT early)                 AS asymmetry_late,
       avg(rotation_share) FILTER (WHERE early)                      AS rotation_early,
       avg(rotation_share) FILTER (WHERE NOT early)                  AS rotation_late,
       regr_slope(henrici_rel_j_minus_i, depth)                      AS henrici_slope,
       avg(henrici_rel_j_minus_i) FILTER (WHERE early)               AS henrici_early,
       avg(henrici_rel_j_minus_i) FILTER (WHERE NOT early)           AS henrici_late,
       avg(frac_complex) FILTER (WHERE early)                        AS complex_early,
       avg(frac_complex) FILTER (WHERE NOT early)                    AS complex_late,
       count(*) FILTER (WHERE operator_type = 'rotation_dominated')  AS n_rotation_dominated,
       count(*) FILTER (WHERE operator_type = 'near_symmetric')      AS n_near_symmetric
FROM ranked
GROUP BY model, checkpoint
ORDER BY model, checkpoint;
