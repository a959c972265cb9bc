-- Which depths amplify most beyond their spectral radius, per model and checkpoint: the three windows
-- (start depth, length) whose product norm most exceeds the product of their maps' spectral radii,
-- beside the single-map numbers of their first sublayer (numerical abscissa, Kreiss lower bound).
WITH ranked AS (
    SELECT g.model, g.checkpoint, g.start_depth, g.window_length, g.product_norm, g.spectral_radius_product,
           g.growth_beyond_spectrum,
           row_number() OVER (PARTITION BY g.model, g.checkpoint ORDER BY g.growth_beyond_spectrum DESC) AS rank
    FROM transient_growth g
    WHERE isfinite(g.growth_beyond_spectrum)
)
SELECT r.model, r.checkpoint, r.rank, r.start_depth, r.window_length, r.growth_beyond_spectrum, r.product_norm,
       r.spectral_radius_product, t.sublayer AS first_sublayer, t.numerical_abscissa, t.numerical_radius,
       t.kreiss_lower_bound
FROM ranked r
JOIN transient_dynamics t ON t.model = r.model AND t.checkpoint = r.checkpoint AND t.depth = r.start_depth
WHERE r.rank <= 3
ORDER BY r.model, r.checkpoint, r.rank;
