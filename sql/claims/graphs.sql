-- How far the correlation graphs stand above sampling noise: median edge |r|, construction, k, units and
-- observations (resdyn claims).
SELECT g.model, g.checkpoint, median(abs(g.weight)) AS median_edge_correlation, any_value(g.construction) AS construction,
       any_value(g.k) AS graph_k, any_value(g.n_units) AS n_units, any_value(s.n_observations) AS n_observations
FROM graph_edges g
JOIN (SELECT model, checkpoint, count(*) AS n_observations FROM samples GROUP BY ALL) s USING (model, checkpoint)
GROUP BY g.model, g.checkpoint;
