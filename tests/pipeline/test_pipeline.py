"""The whole graph for one tiny partition, in-process, into a temporary warehouse."""

import numpy as np
import pytest

from resdyn.dagster_project.store.warehouse import Warehouse

from ..pipeline_helpers import TINY_PARTITION as KEY
from ..pipeline_helpers import materialize_partition

TABLES = ["model_checkpoints", "samples", "activations", "jacobians", "sample_jacobians", "eigenvalues",
          "singular_values", "schur_forms", "layer_metrics", "cumulative_rank", "schur_surgery", "layer_metrics_per_sample",
          "graph_edges", "communities", "gamma_scan", "unit_amplification", "coupling_tests",
          "transient_dynamics", "pseudospectra", "transient_growth", "jacobian_folds", "sampling_intervals",
          "community_coupling"]


def test_every_asset_and_check_succeeds(tiny_study):
    store, checks, _ = tiny_study
    assert {c.check_name for c in checks} >= {"jacobians_are_finite", "jacobians_row_count",
                                               "jacobians_match_finite_differences",
                                               "activations_are_finite_and_complete"}
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert all(c.metadata["partition"].value == KEY and KEY in c.description for c in checks)  # UI finding 5
    for table in TABLES:
        assert store.has(table, "tiny-olmo3", "step-000000"), table
    status = store.query("SELECT status, run_id, settings_hash FROM partitions").to_pylist()
    assert len(status) == 1 and status[0]["status"] == "complete" and status[0]["run_id"] and status[0]["settings_hash"]


def test_duckdb_answers_over_the_parquet(tiny_study):
    store, _, _ = tiny_study
    counts = store.query(
        "SELECT model, checkpoint, sublayer, count(DISTINCT layer) AS layers, count(*) AS rows "
        "FROM jacobians GROUP BY ALL ORDER BY sublayer").to_pylist()
    d, n_layers = store.query("SELECT d_model, n_layers FROM model_checkpoints").to_pylist()[0].values()
    assert counts == [
        {"model": "tiny-olmo3", "checkpoint": "step-000000", "sublayer": s, "layers": n_layers, "rows": n_layers * d}
        for s in ("attn", "mlp")
    ]
    # depth = 2 * layer + (sublayer = 'mlp'), and each row holds d values
    bad = store.query("SELECT count(*) AS n FROM jacobians WHERE depth <> 2 * layer + (sublayer = 'mlp')::INT "
                      "OR len(values) <> " + str(d)).to_pylist()[0]["n"]
    assert bad == 0
    # the mean over the stored per-sample subsample is a genuine average of Jacobians near I + small
    diagonal = store.query("SELECT avg(values[row + 1]) AS diagonal FROM jacobians").to_pylist()[0]["diagonal"]
    assert 0.5 < diagonal < 1.5


def test_rerun_is_idempotent_and_keeps_data_versions(tiny_study):
    store, _, instance = tiny_study
    before = {t: store.query(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"] for t in TABLES}
    hashes = {t: store.content_hash(t, "tiny-olmo3", "step-000000") for t in ("jacobians", "activations")}
    first_run = store.query("SELECT run_id FROM partitions").to_pylist()[0]["run_id"]
    for _ in range(2):
        result, _, _ = materialize_partition(store.root, KEY, instance=instance)
        assert result.success
    after = {t: store.query(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"] for t in TABLES}
    assert before == after
    assert hashes == {t: store.content_hash(t, "tiny-olmo3", "step-000000") for t in ("jacobians", "activations")}
    runs = store.query("SELECT run_id, status FROM runs ORDER BY started_at").to_pylist()
    assert [r["status"] for r in runs] == ["success"] * 3 and runs[0]["run_id"] == first_run
    partition = store.query("SELECT status, run_id FROM partitions").to_pylist()
    assert partition == [{"status": "complete", "run_id": runs[-1]["run_id"]}]
    # the published generation and the one before it are on disk; the first run's files are collected
    names = sorted(p.stem for p in (store.root / "jacobians").rglob("*.parquet"))
    assert names == sorted(r["run_id"] for r in runs[1:])


def test_sample_jacobians_cover_every_sublayer(tiny_study):
    store, _, _ = tiny_study
    mean = dict(store.matrix_table("jacobians", "tiny-olmo3", "step-000000").matrices())
    per_sample = dict(store.matrix_table("sample_jacobians", "tiny-olmo3", "step-000000").matrices(
        ("layer", "sublayer", "sample_id", "position")))
    assert {(k[0], k[1]) for k in per_sample} == set(mean)
    for matrix in mean.values():
        assert matrix.shape == (64, 64) and np.isfinite(matrix).all()


def test_every_named_question_answers_for_the_partition(tiny_study):
    from resdyn.dagster_project.configuration.config import SQL_DIRECTORY

    store, _, _ = tiny_study
    questions = sorted((SQL_DIRECTORY / "questions").glob("*.sql"))
    assert len(questions) >= 5
    for path in questions:
        rows = store.query(path.read_text()).to_pylist()
        assert {(r["model"], r["checkpoint"]) for r in rows} == {("tiny-olmo3", "step-000000")}, path.name


def test_spectral_tables_agree_with_numpy_on_the_stored_jacobians(tiny_study):
    store, _, _ = tiny_study
    matrices = dict(store.matrix_table("jacobians", "tiny-olmo3", "step-000000").matrices())
    jacobian = matrices[(1, "mlp")]
    stored = store.query("SELECT sigma FROM singular_values WHERE depth = 3 ORDER BY idx").column("sigma").to_numpy()
    np.testing.assert_allclose(stored, np.linalg.svd(jacobian, compute_uv=False), rtol=1e-12)
    moduli = store.query("SELECT modulus FROM eigenvalues WHERE depth = 3 ORDER BY idx").column("modulus").to_numpy()
    np.testing.assert_allclose(np.sort(moduli), np.sort(np.abs(np.linalg.eigvals(jacobian))), rtol=1e-10)
    first = store.query("SELECT effective_rank FROM cumulative_rank WHERE depth = 0").to_pylist()[0]
    single = store.query("SELECT effective_rank FROM layer_metrics WHERE depth = 0").to_pylist()[0]
    assert first["effective_rank"] == pytest.approx(single["effective_rank"], rel=1e-12)


def test_structured_backend_through_the_pipeline_passes_the_finite_difference_probe(tmp_path):
    result, checks, _ = materialize_partition(tmp_path, "tiny-llama@step-000000", backend="structured")
    assert result.success
    assert all(c.passed for c in checks), [c.check_name for c in checks if not c.passed]
    backends = Warehouse(tmp_path).query(
        "SELECT sublayer, any_value(backend) AS backend, bool_and(variance IS NULL) AS no_variance "
        "FROM jacobians GROUP BY sublayer ORDER BY sublayer").to_pylist()
    assert backends == [{"sublayer": "attn", "backend": "structured", "no_variance": True},
                        {"sublayer": "mlp", "backend": "structured", "no_variance": True}]


def test_transient_tables_are_filled_and_agree_with_numpy(tiny_study):
    """Every sublayer has its transient row and eps rows; the growth windows match explicit products."""
    store, _, _ = tiny_study
    matrices = dict(store.matrix_table("jacobians", "tiny-olmo3", "step-000000").matrices())
    n = len(matrices)
    dynamics = store.query("SELECT * FROM transient_dynamics ORDER BY depth").to_pylist()
    assert [r["depth"] for r in dynamics] == list(range(n))
    by_depth = {2 * layer + (sublayer == "mlp"): m for (layer, sublayer), m in matrices.items()}
    for row in dynamics:
        matrix = by_depth[row["depth"]]
        assert row["numerical_abscissa"] == pytest.approx(np.linalg.eigvalsh((matrix + matrix.T) / 2)[-1], abs=1e-10)
        assert row["spectral_norm"] == pytest.approx(np.linalg.norm(matrix, 2), rel=1e-10)
        assert row["spectral_radius"] <= row["numerical_radius"] * (1 + 1e-9) <= row["numerical_radius_upper"] * (1 + 1e-9)
    eps = store.query("SELECT depth, eps, pseudospectral_radius, excess_over_normal FROM pseudospectra").to_pylist()
    assert len(eps) == 3 * n and all(r["excess_over_normal"] >= 1 - 1e-6 for r in eps)
    # the stage read its Schur forms from schur_forms: each is J's (same eigenvalues as the eigenvalues table,
    # quasi-triangular, ||T||_F = ||J||_F), and the numbers equal a standalone analysis that factors J itself
    from resdyn.transient import analyse_transient
    schur_forms = dict(store.matrix_table("schur_forms", "tiny-olmo3", "step-000000").matrices())
    assert schur_forms.keys() == matrices.keys()
    pseudospectra = {(r["depth"], r["eps"]): r["pseudospectral_radius"] for r in store.query(
        "SELECT depth, eps, pseudospectral_radius FROM pseudospectra").to_pylist()}
    for (layer, sublayer), schur_form in schur_forms.items():
        matrix, depth = matrices[layer, sublayer], 2 * layer + (sublayer == "mlp")
        assert np.allclose(np.tril(schur_form, -2), 0) and np.isclose(np.linalg.norm(schur_form), np.linalg.norm(matrix))
        stored = store.query(f"SELECT re, im FROM eigenvalues WHERE depth = {depth}").to_pylist()
        assert np.allclose(np.sort_complex(np.linalg.eigvals(matrix)),
                           np.sort_complex(np.array([r["re"] + 1j * r["im"] for r in stored])), atol=1e-10)
        standalone = analyse_transient(matrix)
        row = dynamics[depth]
        for field in ("spectral_radius", "spectral_norm", "numerical_abscissa", "numerical_radius",
                      "numerical_radius_upper", "kreiss_lower_bound"):
            assert row[field] == pytest.approx(getattr(standalone, field), rel=1e-10), field
        for epsilon, radius in standalone.pseudospectral_radii.items():
            assert pseudospectra[depth, epsilon] == pytest.approx(radius, rel=1e-10)
    growth = store.query("SELECT * FROM transient_growth WHERE window_length = 2").to_pylist()
    for row in growth:
        product = by_depth[row["start_depth"] + 1] @ by_depth[row["start_depth"]]
        assert row["product_norm"] == pytest.approx(np.linalg.norm(product, 2), rel=1e-10)
    assert store.query("SELECT max(window_length) AS w FROM transient_growth").to_pylist() == [{"w": n}]


def test_study_report_tables_figures_and_html(tiny_study, tmp_path):
    """The study sections answer from the complete partition; (a) equals a count made here from the
    coupling_tests rows; the HTML embeds every figure and names the run that made the partition."""
    import base64

    from resdyn.dagster_project.study.report import SECTIONS, build_report

    store, _, _ = tiny_study
    output, results = build_report(store, tmp_path / "report.html")
    assert set(results) == {section.name for section in SECTIONS}
    rows = store.query("SELECT significant, direction FROM coupling_tests").to_pylist()
    fdr = results["study_fdr_layers"][0].to_pylist()
    assert len(fdr) == 1 and fdr[0]["n_significant"] == sum(r["significant"] for r in rows)
    assert fdr[0]["n_sublayers"] == len(rows)
    depth = results["study_nonnormality_by_depth"][0].column("relative_depth").to_numpy()
    assert np.all((depth > 0) & (depth < 1)) and np.all(np.diff(depth) > 0)
    text = output.read_text()
    images = text.count("src='data:image/png;base64,")
    assert images == len(SECTIONS)
    first = text.split("src='data:image/png;base64,", 1)[1].split("'", 1)[0]
    assert base64.b64decode(first)[:8] == b"\x89PNG\r\n\x1a\n"
    run_id = store.query("SELECT run_id FROM partitions").to_pylist()[0]["run_id"]
    assert run_id in text and "tiny-olmo3" in text


def test_study_assets_materialize_with_figures_in_their_metadata(tiny_study):
    import dagster as dg

    from resdyn.assets.report import study
    from resdyn.dagster_project.asset_layer.resources import WarehouseResource

    store, _, _ = tiny_study
    result = dg.materialize([study], resources={"warehouse": WarehouseResource(root=str(store.root))})
    assert result.success
    materializations = {m.asset_key.path[-1]: m for m in result.get_asset_materialization_events()}
    assert set(materializations) == {"study_fdr_layers", "study_nonnormality_by_depth", "study_cumulative_rank_by_depth",
                                     "study_surgery_effect", "study_coupling_by_operator", "study_report"}
    metadata = materializations["study_fdr_layers"].materialization.metadata
    assert metadata["rows"].value == 1
    assert "data:image/png;base64," in str(metadata["figure_study_fdr_layers_embedded"].value)
    inline = str(metadata["figure_study_fdr_layers"].value)  # shown in place by the UI: under 1000 characters
    assert len(inline) < 1000 and "/resdyn/artefacts/" in inline
    thumbnail = inline[inline.index("/resdyn/artefacts/") + len("/resdyn/artefacts/"):].split(")")[0]
    from PIL import Image
    with Image.open(store.root / "_artefacts" / thumbnail) as image:  # what resdyn ui serves at that URL
        assert image.format == "PNG" and 0 < image.width <= 480
    assert (store.root / "report.html").is_file()


def test_every_analysis_stage_logs_its_progress_item_by_item(tiny_study):
    """Each stage says done / total with seconds as each sublayer or graph finishes (not once at the end)."""
    import re

    store, _, instance = tiny_study
    run_id = store.query("SELECT run_id FROM partitions").to_pylist()[0]["run_id"]
    messages = [entry.user_message for entry in instance.all_logs(run_id) if entry.user_message]
    n_layers = store.read("model_checkpoints", "tiny-olmo3", "step-000000").column("n_layers")[0].as_py()
    for stage in ("spectra", "transient dynamics", "per-sample metrics", "communities", "correlation graphs",
                  "unit amplification", "coupling tests"):
        counts = [tuple(map(int, found.groups())) for message in messages
                  if (found := re.search(rf"{stage} (\d+)/(\d+) \(.*\) done, \d+ s", message))]
        assert counts, (stage, messages[-5:])
        totals = {total for _, total in counts}
        assert len(totals) == 1 and [done for done, _ in counts] == list(range(1, totals.pop() + 1)), (stage, counts)
        assert counts[-1][1] >= 2 * n_layers if stage != "per-sample metrics" else counts[-1][1] > 2 * n_layers
    assert sum(message.startswith(f"{KEY}: spectra ") for message in messages) == 2 * n_layers


def test_sampling_intervals_are_the_jackknife_of_the_stored_fold_means(tiny_study):
    """The fold means average back to the mean Jacobian (to float32), and each stored replicate of a measure, a
    cumulative rank and the noise-to-signal ratio equals its recomputation from the stored matrices in numpy."""
    import scipy.linalg

    from resdyn import sampling, spectra

    store, _, _ = tiny_study
    model = "tiny-olmo3"
    query = "SELECT layer, sublayer, {extra} row, values FROM {table} WHERE model = '{m}' ORDER BY layer, sublayer, {order} row"

    def matrices(table, extra="", order=""):
        rows = store.query(query.format(table=table, extra=extra, order=order, m=model)).to_pylist()
        grouped = {}
        for r in rows:
            key = (r["layer"], r["sublayer"]) + ((r["fold"],) if "fold" in r else ())
            grouped.setdefault(key, []).append(r["values"])
        return {key: np.asarray(values, dtype=np.float64) for key, values in grouped.items()}
    means = matrices("jacobians")
    folds = matrices("jacobian_folds", "fold, n_observations,", "fold,")
    counts = {(r["layer"], r["sublayer"], r["fold"]): r["n"] for r in store.query(
        "SELECT layer, sublayer, fold, any_value(n_observations) AS n FROM jacobian_folds GROUP BY ALL").to_pylist()}
    intervals = {(r["layer"], r["sublayer"], r["quantity"]): r for r in store.query(
        "SELECT * FROM sampling_intervals").to_pylist()}
    n_folds = len({key[2] for key in folds})
    assert n_folds >= 2
    order = sorted(means, key=lambda key: 2 * key[0] + (key[1] == "mlp"))
    product = np.eye(len(means[order[0]]))
    loo_products = [np.eye(len(product)) for _ in range(n_folds)]
    for layer, sublayer in order:
        fold_means = [folds[(layer, sublayer, k)] for k in range(n_folds)]
        fold_counts = [counts[(layer, sublayer, k)] for k in range(n_folds)]
        weighted = sum(c * m for c, m in zip(fold_counts, fold_means)) / sum(fold_counts)
        np.testing.assert_allclose(weighted, means[(layer, sublayer)], rtol=1e-5, atol=1e-6)
        loo = sampling.leave_one_out_means(means[(layer, sublayer)], fold_means, fold_counts)
        row = intervals[(layer, sublayer, "asymmetry_index")]
        expected = [spectra.asymmetry_index(m - np.eye(len(m))) for m in loo]
        np.testing.assert_allclose(row["replicates"], expected, rtol=1e-6)
        assert row["value"] == pytest.approx(spectra.asymmetry_index(means[(layer, sublayer)] - np.eye(len(product))))
        assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["n_folds"] == n_folds
        ratio = intervals[(layer, sublayer, "noise_to_signal")]["value"]
        assert ratio == pytest.approx(sampling.noise_to_signal(means[(layer, sublayer)], loo), rel=1e-5)
        loo_products = [m @ p for m, p in zip(loo, loo_products)]
        s = scipy.linalg.svdvals(loo_products[0])
        assert intervals[(layer, sublayer, "cumulative_effective_rank")]["replicates"][0] == pytest.approx(
            spectra.effective_rank(s), rel=1e-6)


def test_checkpoint_comparisons_are_assets_downstream_of_what_they_draw_and_equal_the_notebooks(tiny_study, tmp_path):
    """The figures across a model's checkpoints are drawn by an unpartitioned asset whose lineage names the tables
    it reads (no partition step reads another partition), pixel for pixel the notebook's figure."""
    import dagster as dg
    from PIL import Image

    import resdyn
    from resdyn.assets.comparisons import checkpoint_comparison_figures
    from resdyn.dagster_project.asset_layer.resources import WarehouseResource

    store, _, _ = tiny_study
    upstream = {key.to_user_string(): {dep.to_user_string() for dep in deps}
                for key, deps in checkpoint_comparison_figures.asset_deps.items()}
    assert upstream == {"metrics_by_checkpoint": {"layer_metrics"}, "cumulative_rank_by_checkpoint": {"cumulative_rank"},
                        "coupling_by_checkpoint": {"coupling_tests"}}
    result = dg.materialize([checkpoint_comparison_figures],
                            resources={"warehouse": WarehouseResource(root=str(store.root))})
    assert result.success
    materializations = {m.asset_key.path[-1]: m.materialization.metadata for m in result.get_asset_materialization_events()}
    study = resdyn.open(store.root)
    for name, figure_name in (("metrics_by_checkpoint", "metrics_by_depth"), ("cumulative_rank_by_checkpoint",
                              "cumulative_rank"), ("coupling_by_checkpoint", "coupling_by_depth")):
        metadata = materializations[name]
        assert metadata["models"].value == 1
        published = metadata[f"figure_tiny-olmo3_{figure_name}_path"].value
        inline = study.figure(figure_name, "tiny-olmo3")
        rendered = tmp_path / f"{name}.png"
        inline.savefig(rendered, dpi=110, bbox_inches="tight", format="png")  # as the assets save it
        assert np.array_equal(np.asarray(Image.open(rendered)), np.asarray(Image.open(published))), name
