-- Non-normality gradient through depth: slope of dep/||J - I||_F and of the complex fraction vs depth, and early vs late halves.
WITH ranked AS (
    SELECT *, depth < max(depth) OVER (PARTITION BY model, checkpoint) / 2.0 AS early
    FROM layer_metrics
)
SELECT model, checkpoint,
       regr_slope(henrici_rel_j_minus_i, depth)                      AS henrici_slope,
       avg(henrici_rel_j_minus_i) FILTER (WHERE early)               AS henrici_early,
       avg(henrici_rel_j_minus_i) FILTER (WHERE NOT early)           AS henrici_late,
       regr_slope(frac_complex, depth)                               AS complex_slope,
       avg(frac_complex) FILTER (WHERE early)                        AS complex_early,
       avg(frac_complex) FILTER (WHERE NOT early)                    AS complex_late,
       count(*) FILTER (WHERE operator_type = 'rotational_non_normal') AS n_rotational_non_normal,
       count(*) FILTER (WHERE operator_type = 'near_symmetric')      AS n_near_symmetric
FROM ranked
GROUP BY model, checkpoint
ORDER BY model, checkpoint;
