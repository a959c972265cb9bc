-- Width and sample count of each partition (resdyn claims).
SELECT m.model, m.checkpoint, m.d_model, count(DISTINCT s.sample_id) AS n_samples
FROM model_checkpoints m JOIN samples s USING (model, checkpoint)
GROUP BY m.model, m.checkpoint, m.d_model;
