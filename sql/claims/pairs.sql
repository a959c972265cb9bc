-- Per model with two or more complete partitions: its first checkpoint in training order (the null model) and its
-- last (the trained model), which `resdyn report` and `resdyn claims` compare; the quantization control is a column.
SELECT model, arg_min(checkpoint, checkpoint_order(checkpoint)) AS null_checkpoint,
       arg_max(checkpoint, checkpoint_order(checkpoint)) AS trained_checkpoint, count(*) AS n_checkpoints
FROM partitions
WHERE status = 'complete' AND checkpoint <> 'init-quantized'  -- the quantization control is neither end
GROUP BY model
HAVING count(*) >= 2
ORDER BY model;
