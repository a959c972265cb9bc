-- Non-normality and rotation against relative depth, one row per sublayer of every partition.
SELECT model, checkpoint, depth,
       (depth + 0.5) / (max(depth) OVER (PARTITION BY model, checkpoint) + 1) AS relative_depth,
       henrici_rel_j_minus_i, frac_complex, operator_type
FROM layer_metrics
ORDER BY model, checkpoint, depth;
