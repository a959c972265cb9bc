-- Where the bottleneck falls: single-sublayer effective rank vs the full-depth cumulative product's.
WITH single AS (
    SELECT model, checkpoint, avg(effective_rank) AS single_layer_rank, any_value(d) AS d_model
    FROM (SELECT *, self_alignment_k / self_alignment_baseline AS d FROM layer_metrics)
    GROUP BY model, checkpoint
), full_depth AS (
    SELECT model, checkpoint, arg_max(effective_rank, depth) AS full_depth_rank,
           arg_min(depth, effective_rank) AS depth_of_minimum, min(effective_rank) AS minimum_rank
    FROM cumulative_rank
    GROUP BY model, checkpoint
)
SELECT s.model, s.checkpoint, s.d_model, s.single_layer_rank, f.full_depth_rank,
       s.single_layer_rank / f.full_depth_rank AS compression, f.minimum_rank, f.depth_of_minimum
FROM single s JOIN full_depth f USING (model, checkpoint)
ORDER BY s.model, s.checkpoint;
