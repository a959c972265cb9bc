-- Sign rule: are boundary units amplified in near-symmetric sublayers and suppressed in non-normal ones?
SELECT c.model, c.checkpoint, c.operator_type,
       count(*)                                        AS n_sublayers,
       count(*) FILTER (WHERE c.direction = 'undefined') AS n_undefined,
       avg(c.effect)                                   AS mean_effect,
       avg(m.henrici_rel_j_minus_i)                    AS mean_henrici_rel,
       count(*) FILTER (WHERE c.effect > 0)            AS n_positive_effect,
       count(*) FILTER (WHERE c.effect < 0)            AS n_negative_effect,
       count(*) FILTER (WHERE c.significant)           AS n_significant,
       corr(c.effect, m.henrici_rel_j_minus_i)         AS effect_vs_nonnormality_correlation
FROM coupling_tests c
JOIN layer_metrics m USING (model, checkpoint, layer, sublayer)
GROUP BY c.model, c.checkpoint, c.operator_type
ORDER BY c.model, c.checkpoint, c.operator_type;
