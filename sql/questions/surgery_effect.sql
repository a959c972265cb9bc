-- Surgery effect: full-depth effective rank with the non-normal part removed (alpha = 0) vs kept (alpha = 1),
-- LAPACK's Schur ordering.
WITH last AS (
    SELECT model, checkpoint, alpha, arg_max(effective_rank, depth) AS full_depth_rank
    FROM schur_surgery
    WHERE schur_ordering = 'lapack-default'
    GROUP BY model, checkpoint, alpha
)
SELECT model, checkpoint,
       max(full_depth_rank) FILTER (WHERE alpha = 0.0) AS rank_alpha_0,
       max(full_depth_rank) FILTER (WHERE alpha = 0.5) AS rank_alpha_half,
       max(full_depth_rank) FILTER (WHERE alpha = 1.0) AS rank_alpha_1,
       max(full_depth_rank) FILTER (WHERE alpha = 0.0) / max(full_depth_rank) FILTER (WHERE alpha = 1.0)
           AS bottleneck_dissolved_by
FROM last
GROUP BY model, checkpoint
ORDER BY model, checkpoint;
