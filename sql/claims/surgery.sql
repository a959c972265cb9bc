-- Full-depth ranks of the product of J(alpha) per Schur ordering and alpha, every definition (resdyn claims).
SELECT model, checkpoint, schur_ordering, alpha, arg_max(effective_rank, depth) AS effective_rank,
       arg_max(participation_ratio, depth) AS participation_ratio, arg_max(stable_rank, depth) AS stable_rank
FROM schur_surgery
GROUP BY model, checkpoint, schur_ordering, alpha
ORDER BY model, checkpoint, schur_ordering, alpha;
