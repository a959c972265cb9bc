-- The leave-one-fold-out replicates of every quantity per depth (sampling_intervals; resdyn claims).
SELECT model, checkpoint, depth, quantity, value, replicates
FROM sampling_intervals
ORDER BY model, checkpoint, quantity, depth;
