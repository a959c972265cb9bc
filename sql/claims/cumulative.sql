-- Effective rank of the cumulative Jacobian per depth (resdyn claims).
SELECT model, checkpoint, depth, effective_rank
FROM cumulative_rank
ORDER BY model, checkpoint, depth;
