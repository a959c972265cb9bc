-- Effective rank of the cumulative Jacobian product against relative depth, every partition.
SELECT model, checkpoint, depth,
       (depth + 0.5) / (max(depth) OVER (PARTITION BY model, checkpoint) + 1) AS relative_depth,
       effective_rank, stable_rank
FROM cumulative_rank
ORDER BY model, checkpoint, depth;
