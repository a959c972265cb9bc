-- Per sublayer, what the claims need: non-normality, rotation, operator type and the coupling test (resdyn claims).
SELECT l.model, l.checkpoint, l.depth, l.henrici_rel_j_minus_i AS henrici, l.frac_complex AS complex_fraction,
       l.operator_type, c.effect AS coupling_effect, coalesce(c.significant, false) AS coupling_significant
FROM layer_metrics l
LEFT JOIN coupling_tests c USING (model, checkpoint, layer, sublayer)
ORDER BY l.model, l.checkpoint, l.depth;
