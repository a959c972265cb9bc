-- Ranks of the cumulative Jacobian per depth, every definition (resdyn claims).
SELECT model, checkpoint, depth, effective_rank, participation_ratio, stable_rank
FROM cumulative_rank
ORDER BY model, checkpoint, depth;
