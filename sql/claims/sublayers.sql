-- Per sublayer, what the claims need: symmetry, rotation and non-normality measures (with the eigenvector
-- condition number, the polar normal part's conditioning), operator types, the unit-level and
-- community-level coupling tests with the sizes their power depends on (resdyn claims). A unit-level test is
-- significant by BH on its degree-stratified permutation p (rules v4: the p that guards against the degree confound).
SELECT l.model, l.checkpoint, l.depth, l.sublayer, l.asymmetry_index, l.rotation_share, l.henrici_rel_j_minus_i,
       l.henrici_rel_j, l.eigenvector_condition_number, l.frac_complex, l.update_size, l.mean_absolute_argument,
       l.operator_type, l.operator_type_henrici,
       c.effect AS coupling_effect, coalesce(c.q_value_permutation < 0.05, false) AS coupling_significant,
       c.q_value_permutation AS coupling_q_permutation, c.n_boundary, c.n_interior,
       c.stratum_boundary, c.stratum_interior,
       cc.rho AS community_rho, coalesce(cc.significant, false) AS community_significant, cc.n_communities
FROM layer_metrics l
LEFT JOIN coupling_tests c USING (model, checkpoint, layer, sublayer)
LEFT JOIN community_coupling cc USING (model, checkpoint, layer, sublayer)
ORDER BY l.model, l.checkpoint, l.depth;
