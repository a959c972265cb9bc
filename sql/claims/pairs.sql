-- Per model with two or more complete partitions: its first checkpoint in training order (the null model) and its
-- last (the trained model), which `resdyn report` and `resdyn claims` compare; the quantization control is a column.
SELECT model, arg_min(checkpoint, checkpoint_order(checkpoint)) AS null_checkpoint,
       arg_max(checkpoint, checkpoint_order(checkpoint)) AS trained_checkpoint, count(*) AS n_checkpoints
FROM partitions
-- the quantization control and the rounding-noise doses (resdyn/models/rounding_noise.py) are neither end
WHERE status = 'complete' AND checkpoint NOT IN ('init-quantized', 'rounding-x1', 'rounding-x2')
GROUP BY model
HAVING count(*) >= 2
ORDER BY model;
