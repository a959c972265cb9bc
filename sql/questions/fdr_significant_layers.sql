-- FDR-significant sublayers per model and checkpoint, split by direction and operator type (the study's 0 -> 14 -> 24).
-- Undefined tests (an empty boundary or interior group) are counted apart: they are neither significant nor not.
SELECT model, checkpoint,
       count(*)                                                        AS n_sublayers,
       count(*) FILTER (WHERE direction <> 'undefined')                AS n_tested,
       count(*) FILTER (WHERE direction = 'undefined')                 AS n_undefined,
       count(*) FILTER (WHERE significant)                             AS n_significant,
       count(*) FILTER (WHERE significant AND direction = 'amplified')  AS n_amplified,
       count(*) FILTER (WHERE significant AND direction = 'suppressed') AS n_suppressed,
       count(*) FILTER (WHERE significant AND operator_type = 'near_symmetric')        AS n_sig_near_symmetric,
       count(*) FILTER (WHERE significant AND operator_type = 'rotation_dominated')    AS n_sig_rotation_dominated,
       count(*) FILTER (WHERE significant AND operator_type = 'other')                 AS n_sig_other,
       count(*) FILTER (WHERE q_value_by < 0.05)                       AS n_significant_by
FROM coupling_tests
GROUP BY model, checkpoint
ORDER BY model, checkpoint_order(checkpoint);
