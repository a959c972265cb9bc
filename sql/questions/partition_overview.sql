-- What is in the warehouse: one row per model checkpoint with its size and corpus.
SELECT model, checkpoint, family, n_layers, d_model, n_params, dtype, corpus
FROM model_checkpoints
ORDER BY model, checkpoint;
