-- FDR-significant sublayers per model and checkpoint, split by direction and operator type (the study's 0 -> 14 -> 24).
SELECT model, checkpoint,
       count(*)                                                        AS n_sublayers,
       count(*) FILTER (WHERE significant)                             AS n_significant,
       count(*) FILTER (WHERE significant AND direction = 'amplified')  AS n_amplified,
       count(*) FILTER (WHERE significant AND direction = 'suppressed') AS n_suppressed,
       count(*) FILTER (WHERE significant AND operator_type = 'near_symmetric')        AS n_sig_near_symmetric,
       count(*) FILTER (WHERE significant AND operator_type = 'rotational_non_normal') AS n_sig_rotational_non_normal,
       count(*) FILTER (WHERE significant AND operator_type = 'other')                 AS n_sig_other,
       count(*) FILTER (WHERE q_value_by < 0.05)                       AS n_significant_by
FROM coupling_tests
GROUP BY model, checkpoint
ORDER BY model, coalesce(try_cast(regexp_extract(checkpoint, '(\d+)$', 1) AS BIGINT), 0);
