-- Full-depth effective rank of the product of J(alpha) per Schur-surgery alpha (resdyn claims).
SELECT model, checkpoint, alpha, arg_max(effective_rank, depth) AS full_depth_rank
FROM schur_surgery
GROUP BY model, checkpoint, alpha
ORDER BY model, checkpoint, alpha;
