"""The stages called alone: frames built here, no warehouse, no Dagster; each result against an independent
reference (numpy / scipy factorizations, scipy's tests, the definitions) and against its table's schema."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import scipy.linalg
import scipy.stats

from resdyn.dagster_project.store.arrow_tables import record_batch
from resdyn.dagster_project.store.schema import conform, rows_table
from resdyn.naming import sublayer_depth
from resdyn.stages import MatrixFrames, StageTools, TableFrame, spectral, topology, transient
from resdyn.stages import coupling as coupling_stage
from resdyn.topology import normalized_mutual_information

from ..synthetic import jacobian_with_boundary_gain, planted_activations

SUBLAYERS = [(layer, sublayer) for layer in range(3) for sublayer in ("attn", "mlp")]


def _jacobians(rng, d=8):
    """I + noise per sublayer, stored in an order that is not depth order (the stages sort by depth)."""
    keys = list(reversed(SUBLAYERS))
    return {key: np.eye(d) + 0.4 * rng.normal(size=(d, d)) / np.sqrt(d) for key in keys}


def _conforms(table, result, width=None):
    """The stage's rows of ``table`` match its schema (the factory's check): rows, tables and streams alike."""
    value = result.tables[table]
    if isinstance(value, list):
        return rows_table(table, value)
    if isinstance(value, pa.Table):
        return conform(table, value)
    batches = value.batches if hasattr(value, "batches") else list(value)
    return pa.Table.from_batches([record_batch(table, width, columns) for columns in batches])


def test_the_spectral_stage_equals_numpy_factorizations_and_the_product_through_depth(fresh_seed, tmp_path):
    rng = np.random.default_rng(fresh_seed)
    matrices = _jacobians(rng)
    result = spectral.spectral_analysis(StageTools(figures=tmp_path), jacobians=MatrixFrames(matrices))
    tables = {name: _conforms(name, result, width=8) for name in spectral.TABLES}
    by_depth = sorted(matrices, key=lambda key: sublayer_depth(*key))
    eigenvalues = tables["eigenvalues"].to_pylist()
    for key, matrix in matrices.items():
        depth = sublayer_depth(*key)
        mine = np.array([complex(r["re"], r["im"]) for r in eigenvalues if r["depth"] == depth])
        theirs = np.linalg.eigvals(matrix)
        np.testing.assert_allclose(np.sort_complex(mine), np.sort_complex(theirs), atol=1e-10)
        sigma = [r["sigma"] for r in tables["singular_values"].to_pylist() if r["depth"] == depth]
        np.testing.assert_allclose(sorted(sigma, reverse=True), np.linalg.svd(matrix, compute_uv=False), rtol=1e-10)
        (metrics,) = [r for r in result.rows("layer_metrics") if r["depth"] == depth]
        assert metrics["sigma_max"] == pytest.approx(np.linalg.norm(matrix, 2), rel=1e-10)
        assert metrics["spectral_radius"] == pytest.approx(np.max(np.abs(theirs)), rel=1e-10)
        schur = np.array([r["values"] for r in tables["schur_forms"].to_pylist() if r["depth"] == depth])
        np.testing.assert_allclose(np.sort_complex(np.linalg.eigvals(schur)), np.sort_complex(theirs), atol=1e-10)
        assert np.allclose(np.tril(schur, -2), 0)  # quasi-upper-triangular: the real Schur form
    product = np.eye(8)
    for depth, key in enumerate(by_depth):
        product = matrices[key] @ product
        (row,) = [r for r in tables["cumulative_rank"].to_pylist() if r["depth"] == depth]
        singular = np.linalg.svd(product, compute_uv=False)
        np.testing.assert_allclose(row["cumulative_singular_values"], singular, rtol=1e-9)
        assert row["log_sigma_max"] == pytest.approx(np.log(singular[0]), rel=1e-9)
    surgery = tables["schur_surgery"].to_pylist()
    ranks = {r["depth"]: r["effective_rank"] for r in tables["cumulative_rank"].to_pylist()}
    for row in surgery:  # alpha = 1 keeps J whatever the ordering: the product's ranks again
        if row["alpha"] == 1.0:
            assert row["effective_rank"] == pytest.approx(ranks[row["depth"]], rel=1e-8)
    assert {r["schur_ordering"] for r in surgery} == set(spectral.SCHUR_ORDERINGS)
    assert all(figure.path.is_file() for values in result.metadata.values() for figure in values.values()
               if hasattr(figure, "path"))


def test_the_transient_stage_equals_norms_of_explicit_products_and_the_definitions(fresh_seed, tmp_path):
    rng = np.random.default_rng(fresh_seed)
    matrices = _jacobians(rng)
    schur_forms = {key: scipy.linalg.schur(matrix, output="real")[0] for key, matrix in matrices.items()}
    layer_metrics = TableFrame([{"layer": layer, "sublayer": sublayer, "sigma_max": np.linalg.norm(matrices[key], 2),
                                 "henrici_rel_j_minus_i": float(rng.uniform())}
                                for key in matrices for layer, sublayer in [key]])
    result = transient.transient_analysis(SimpleNamespace(device="cpu"), StageTools(figures=tmp_path),
                                          jacobians=MatrixFrames(matrices), schur_forms=MatrixFrames(schur_forms),
                                          layer_metrics=layer_metrics)
    for name in ("transient_dynamics", "pseudospectra", "transient_growth"):
        _conforms(name, result)
    for row in result.rows("transient_dynamics"):
        matrix = matrices[(row["layer"], row["sublayer"])]
        radius = np.max(np.abs(np.linalg.eigvals(matrix)))
        assert row["spectral_norm"] == pytest.approx(np.linalg.norm(matrix, 2), rel=1e-10)
        assert row["spectral_radius"] == pytest.approx(radius, rel=1e-10)
        assert row["numerical_abscissa"] == pytest.approx(np.linalg.eigvalsh((matrix + matrix.T) / 2)[-1], rel=1e-10)
        assert row["growth_beyond_spectrum"] == pytest.approx(np.linalg.norm(matrix, 2) / radius, rel=1e-10)
    for row in result.rows("pseudospectra"):  # every eps-disc around an eigenvalue lies in the eps-pseudospectrum
        (dynamics,) = [r for r in result.rows("transient_dynamics") if r["depth"] == row["depth"]]
        assert row["pseudospectral_radius"] >= dynamics["spectral_radius"] + row["eps"] * (1 - 1e-6)
    by_depth = [matrices[key] for key in sorted(matrices, key=lambda key: sublayer_depth(*key))]
    windows = [r for r in result.rows("transient_growth") if r["window_length"] == 2]
    assert len(windows) == len(by_depth) - 1
    for row in windows:
        start = row["start_depth"]
        product = by_depth[start + 1] @ by_depth[start]
        assert row["product_norm"] == pytest.approx(np.linalg.norm(product, 2), rel=1e-9)
        radii = [np.max(np.abs(np.linalg.eigvals(m))) for m in by_depth[start:start + 2]]
        assert row["spectral_radius_product"] == pytest.approx(np.prod(radii), rel=1e-9)


def _activations(rng, n_units_per_community=12):
    """Planted communities at every (layer, boundary) of two layers, as the activations table holds them."""
    rows, truths = [], {}
    for layer in range(2):
        for boundary in ("pre_attn", "pre_mlp"):
            values, truth = planted_activations(rng, n_communities=3, size=n_units_per_community, n_observations=300)
            truths[(layer, boundary)] = truth
            rows += [{"layer": layer, "boundary": boundary, "depth": sublayer_depth(layer, boundary),
                      "sample_id": i, "position": 0, "values": row.astype(np.float32).tolist()}
                     for i, row in enumerate(values)]
    table = pa.Table.from_pylist(rows).cast(pa.schema([
        ("layer", pa.int32()), ("boundary", pa.string()), ("depth", pa.int32()), ("sample_id", pa.int64()),
        ("position", pa.int64()), ("values", pa.list_(pa.float32(), 3 * n_units_per_community))]))
    return TableFrame(table, groups=("layer", "boundary")), truths


def test_the_topology_stages_link_each_unit_to_its_strongest_correlates_and_find_the_planted_communities(
        fresh_seed, tmp_path):
    rng = np.random.default_rng(fresh_seed)
    activations, truths = _activations(rng)
    model_checkpoints = TableFrame([{"n_layers": 2, "d_model": 36}])
    settings = SimpleNamespace(graph_construction="knn", graph_k=4, graph_threshold=0.3, leiden_seeds=3, seed=0)
    tools = StageTools(figures=tmp_path)
    edges = topology.graph_edges(settings, tools, activations=activations, model_checkpoints=model_checkpoints)
    edge_table = _conforms("graph_edges", edges)
    graphs = list(topology.activation_matrices(activations))
    assert [key for key, _ in graphs] == list(truths)
    for (layer, boundary), values in graphs:
        correlation = np.corrcoef(values, rowvar=False)
        mine = edge_table.filter(pa.compute.and_(pa.compute.equal(edge_table["layer"], layer),
                                                 pa.compute.equal(edge_table["boundary"], boundary))).to_pylist()
        linked = {(r["source"], r["target"]) for r in mine}
        for row in mine:
            assert row["weight"] == pytest.approx(correlation[row["source"], row["target"]], abs=1e-5)
        for unit in range(36):  # every unit keeps its 4 strongest |r|
            strength = np.abs(correlation[unit])
            strength[unit] = 0
            for other in np.argsort(-strength)[:4]:
                assert (min(unit, other), max(unit, other)) in linked
    result = topology.community_tables(settings, tools, graph_edges=TableFrame(edge_table, ("layer", "boundary")),
                                       activations=activations, model_checkpoints=model_checkpoints)
    communities = _conforms("communities", result)
    for key, truth in truths.items():
        rows = [r for r in communities.to_pylist() if (r["layer"], r["boundary"]) == key]
        assert [r["unit"] for r in rows] == list(range(36))
        assert normalized_mutual_information(np.array([r["community"] for r in rows]), truth) > 0.9
        assert all(0.0 <= r["participation"] <= 1.0 for r in rows)
    scan = _conforms("gamma_scan", result)
    chosen = [(r["layer"], r["boundary"]) for r in scan.to_pylist() if r["chosen"]]
    assert sorted(chosen) == sorted(truths)


def test_the_coupling_stages_equal_numpy_norms_scipy_tests_and_benjamini_hochberg(fresh_seed, tmp_path):
    rng = np.random.default_rng(fresh_seed)
    d = 40
    is_boundary = {key: rng.uniform(size=d) < 0.3 for key in SUBLAYERS}
    gains = {key: gain for key, gain in zip(SUBLAYERS, (3.0, 1.0, 0.3, 1.0, 2.5, 1.0))}
    matrices = {key: jacobian_with_boundary_gain(rng, is_boundary[key], gains[key]) for key in SUBLAYERS}
    tools = StageTools(figures=tmp_path)
    model_checkpoints = TableFrame([{"n_layers": 3, "d_model": d}])
    amplification = coupling_stage.unit_amplification(tools, jacobians=MatrixFrames(matrices),
                                                      model_checkpoints=model_checkpoints)
    amplification_table = _conforms("unit_amplification", amplification)
    for key, matrix in matrices.items():
        rows = [r for r in amplification_table.to_pylist() if (r["layer"], r["sublayer"]) == key]
        np.testing.assert_allclose([r["log_column_norm"] for r in rows], np.log(np.linalg.norm(matrix, axis=0)),
                                   rtol=1e-12)
    degree = {key: rng.integers(3, 9, size=d) for key in SUBLAYERS}
    communities = TableFrame([{"layer": layer, "boundary": coupling_stage.STARTING_BOUNDARY[sublayer], "unit": unit,
                               "is_boundary": bool(is_boundary[(layer, sublayer)][unit]),
                               "degree": int(degree[(layer, sublayer)][unit])}
                              for layer, sublayer in SUBLAYERS for unit in range(d)])
    layer_metrics = TableFrame([{"layer": layer, "sublayer": sublayer, "operator_type": "other"}
                                for layer, sublayer in SUBLAYERS])
    settings = SimpleNamespace(n_permutations=200, seed=int(rng.integers(1000)))
    result = coupling_stage.coupling_tests(settings, tools, unit_amplification=TableFrame(amplification_table),
                                           communities=communities, layer_metrics=layer_metrics)
    rows = _conforms("coupling_tests", result).to_pylist()
    for row in rows:
        key = (row["layer"], row["sublayer"])
        values = np.log(np.linalg.norm(matrices[key], axis=0))
        assert row["p_value"] == pytest.approx(scipy.stats.mannwhitneyu(values[is_boundary[key]],
                                                                        values[~is_boundary[key]]).pvalue, rel=1e-9)
    np.testing.assert_allclose([r["q_value"] for r in rows],
                               scipy.stats.false_discovery_control([r["p_value"] for r in rows]), rtol=1e-12)
    decided = scipy.stats.false_discovery_control([r["p_permutation"] for r in rows])
    assert [r["significant"] for r in rows] == [bool(q < 0.05) for q in decided]
    by_gain = {(r["layer"], r["sublayer"]): r for r in rows}
    assert by_gain[(0, "attn")]["direction"] == "amplified" and by_gain[(1, "attn")]["direction"] == "suppressed"
