"""Spectral geometry of one matrix (a mean sublayer Jacobian J), in float64.

Every function states its formula; definitions, known answers and pitfalls follow
``shared/docs/METHODS.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.linalg.lapack
import scipy.sparse.linalg

COMPLEX_TOLERANCE = 1e-6
NEUTRAL_TOLERANCE = 1e-6
NEAR_NORMAL_HENRICI = 0.5  # operator_type_henrici: henrici_rel_j_minus_i below this (one Ginibre matrix sits near 0.71)
ROTATIONAL_COMPLEX_FRACTION = 0.5
# operator_type (the primary rule, issue 30): symmetry and rotation measured themselves, each threshold half the
# value of a matrix of independent Gaussian entries (asymmetry 1/sqrt(2), rotation share 2/pi): below half the
# random asymmetry the skew part carries under 1/8 of ||A||_F^2 (a random matrix: 1/2).
NEAR_SYMMETRIC_ASYMMETRY = 1 / (2 * np.sqrt(2))
ROTATION_DOMINATED_SHARE = 1 / np.pi
GINIBRE_ASYMMETRY = 1 / np.sqrt(2)
GINIBRE_ROTATION_SHARE = 2 / np.pi
TRUNCATED_SVD_MIN_WIDTH = 256  # above this, the alignment metrics' top-k SVD of J - I by Lanczos (d = 1024: 0.05 s, a full SVD 0.34 s; equal to 6e-14)


def _float64(matrix) -> np.ndarray:
    return np.asarray(matrix, dtype=np.float64)


def schur_blocks(schur_form: np.ndarray) -> list[tuple[int, int]]:
    """(start, size) of the diagonal blocks of a real Schur form: size 1, or 2 for a complex pair."""
    blocks, i, n = [], 0, len(schur_form)
    while i < n:
        size = 2 if i + 1 < n and schur_form[i + 1, i] != 0.0 else 1
        blocks.append((i, size))
        i += size
    return blocks


def henrici_departure(matrix) -> float:
    """Henrici's departure from normality dep(A) = sqrt(||A||_F^2 - sum |lambda_i|^2) = ||N||_F.

    Computed from the real Schur form A = Z T Z^T (LAPACK's standardised 2x2 blocks
    [[a, b], [c, a]]): the squared strictly block-upper part of T, plus (b + c)^2 for every 2x2
    block, whose own departure is |b + c|. Never by subtracting eigenvalue moduli from ||A||_F^2,
    which loses everything below ~1e-7 relative. Henrici (1962), Numer. Math. 4, 24-40.
    """
    schur_form, _ = scipy.linalg.schur(_float64(matrix), output="real")
    return departure_of_schur_form(schur_form)


def departure_of_schur_form(schur_form: np.ndarray) -> float:
    blocks = schur_blocks(schur_form)
    block_of = np.empty(len(schur_form), dtype=int)
    total = 0.0
    for index, (start, size) in enumerate(blocks):
        block_of[start : start + size] = index
        if size == 2:
            total += (schur_form[start, start + 1] + schur_form[start + 1, start]) ** 2
    strictly_block_upper = block_of[None, :] > block_of[:, None]
    total += float(np.sum(schur_form[strictly_block_upper] ** 2))
    return float(np.sqrt(total))


def complex_fraction(eigenvalues, tolerance: float = COMPLEX_TOLERANCE) -> float:
    """Fraction of eigenvalues with |Im lambda| > tolerance * spectral radius (rotation content).

    The relative tolerance keeps a defective real double eigenvalue, which rounding splits into
    a pair ~1e-8 off the axis, from counting as a rotation.
    """
    eigenvalues = np.asarray(eigenvalues)
    radius = np.abs(eigenvalues).max()
    if radius == 0:
        return 0.0
    return float(np.mean(np.abs(eigenvalues.imag) > tolerance * radius))


def expanding_fraction(eigenvalues, tolerance: float = NEUTRAL_TOLERANCE) -> float:
    """Fraction of modes with |lambda| > 1 + tolerance."""
    return float(np.mean(np.abs(eigenvalues) > 1 + tolerance))


def neutral_fraction(eigenvalues, tolerance: float = NEUTRAL_TOLERANCE) -> float:
    """Fraction of modes with ||lambda| - 1| <= tolerance."""
    return float(np.mean(np.abs(np.abs(eigenvalues) - 1) <= tolerance))


def condition_number(singular_values) -> float:
    """sigma_max / sigma_min, or inf when sigma_min <= d eps sigma_max (numerically singular)."""
    s = np.sort(np.asarray(singular_values))[::-1]
    if s[-1] <= len(s) * np.finfo(np.float64).eps * s[0]:
        return float("inf")
    return float(s[0] / s[-1])


def log10_condition(singular_values) -> float:
    """log10(sigma_max / sigma_min), finite whenever sigma_min > 0."""
    s = np.asarray(singular_values)
    return float(np.log10(s.max()) - np.log10(s.min())) if s.min() > 0 else float("inf")


def default_alignment_rank(d: int) -> int:
    return max(1, min(32, d // 4))


def subspace_overlap(matrix, k: int | None = None) -> float:
    """Mean squared cosine of the principal angles between the top-k left and right singular subspaces.

    With M = U S V^T: ||U_k^T V_k||_F^2 / k. 1 when M maps its top input subspace onto itself
    (symmetric PSD; rotation inside invariant planes), 0 when it maps it to an orthogonal one;
    random subspaces give k / d.
    """
    u, _, vt = np.linalg.svd(_float64(matrix))
    return _overlap_of_svd(u, vt, k or default_alignment_rank(len(u)))


def _overlap_of_svd(u: np.ndarray, vt: np.ndarray, k: int) -> float:
    return float(np.sum((u[:, :k].T @ vt[:k].T) ** 2) / k)


def signed_alignment(matrix, k: int | None = None) -> float:
    """sum_i sigma_i <u_i, v_i> / sum_i sigma_i over the top k pairs: +1 stretches along itself,
    -1 reflects, 0 rotates each direction away (pairwise, unlike :func:`subspace_overlap`)."""
    u, s, vt = np.linalg.svd(_float64(matrix))
    return _signed_alignment_of_svd(u, s, vt, k or default_alignment_rank(len(u)))


def _signed_alignment_of_svd(u: np.ndarray, s: np.ndarray, vt: np.ndarray, k: int) -> float:
    cosines = np.einsum("ij,ji->i", u[:, :k].T, vt[:k].T)
    return float(np.sum(s[:k] * cosines) / np.sum(s[:k])) if np.sum(s[:k]) > 0 else 0.0


def top_singular_triplets(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(U_k, s_k, V_k^T): the k largest singular triplets, largest first.

    A full SVD up to TRUNCATED_SVD_MIN_WIDTH; beyond it implicitly restarted Lanczos (ARPACK through
    scipy.sparse.linalg.svds, to machine precision, reproducible start): the alignment metrics use the
    top k <= 32 pairs only, and a full SVD with vectors at d = 4096 costs minutes."""
    d = min(matrix.shape)
    if d <= TRUNCATED_SVD_MIN_WIDTH or k >= d - 1:
        u, s, vt = np.linalg.svd(matrix)
        return u[:, :k], s[:k], vt[:k]
    start = np.random.default_rng(0).standard_normal(d)
    u, s, vt = scipy.sparse.linalg.svds(matrix, k=k, v0=start, tol=0, solver="arpack")
    order = np.argsort(-s)
    return u[:, order], s[order], vt[order]


def real_schur_form(matrix: np.ndarray, *, with_basis: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(T, Z) with matrix = Z T Z^T, T quasi upper triangular (LAPACK dgees). Without the basis Z, LAPACK
    skips accumulating the orthogonal factor (scipy.linalg.schur always forms it)."""
    if with_basis:
        return scipy.linalg.schur(matrix, output="real")

    def unsorted(real, imaginary):
        return False

    workspace = scipy.linalg.lapack.dgees(unsorted, matrix, compute_v=0, lwork=-1)[-2]
    form, *_, info = scipy.linalg.lapack.dgees(unsorted, matrix, compute_v=0, lwork=max(int(workspace[0]), 3 * len(matrix)))
    if info != 0:
        raise np.linalg.LinAlgError(f"the real Schur form did not converge (LAPACK dgees info = {info})")
    return form, None


def self_alignment(jacobian, k: int | None = None) -> float:
    """:func:`subspace_overlap` of J - I: on J itself a near-identity map is trivially aligned."""
    jacobian = _float64(jacobian)
    return subspace_overlap(jacobian - np.eye(len(jacobian)), k)


def effective_rank(singular_values) -> float:
    """Roy & Vetterli (2007) effective rank exp(H(p)), p_i = sigma_i / sum_j sigma_j."""
    s = np.asarray(singular_values, dtype=np.float64)
    p = s[s > 0] / s.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def participation_ratio(singular_values) -> float:
    """(sum sigma^2)^2 / sum sigma^4."""
    s2 = np.asarray(singular_values, dtype=np.float64) ** 2
    return float(s2.sum() ** 2 / np.sum(s2**2))


def stable_rank(singular_values) -> float:
    """||A||_F^2 / ||A||_2^2 = sum sigma^2 / sigma_max^2."""
    s = np.asarray(singular_values, dtype=np.float64)
    return float(np.sum(s**2) / s.max() ** 2)


def numerical_rank(singular_values) -> int:
    """Number of sigma > d eps sigma_max (numpy.linalg.matrix_rank's default threshold)."""
    s = np.asarray(singular_values, dtype=np.float64)
    return int(np.sum(s > len(s) * np.finfo(np.float64).eps * s.max()))


def asymmetry_index(update) -> float:
    """||A - A^T||_F / (2 ||A||_F) of the update A = J - I: the norm of A's skew-symmetric part relative to A.

    0 for a symmetric A, 1 for a skew-symmetric one, 1/sqrt(2) in expectation for independent Gaussian entries
    (E ||A - A^T||_F^2 = 2 d (d - 1) against E ||A||_F^2 = d^2); also ~1/sqrt(2) for products of independent
    Gaussian factors (E a_ij a_ji = 0 off the diagonal). Unlike Henrici's departure it separates a rotation
    (normal, skew: 1) from a symmetric map (0). The decomposition A = (A + A^T)/2 + (A - A^T)/2 is orthogonal in
    the Frobenius inner product, so asymmetry^2 is the share of ||A||_F^2 in the skew part. 0 for A = 0.
    """
    update = _float64(update)
    norm = float(np.linalg.norm(update))
    return float(np.linalg.norm(update - update.T)) / (2 * norm) if norm > 0 else 0.0


def rotation_share(update_eigenvalues) -> float:
    """sum |Im mu| / sum |mu| over the eigenvalues mu of the update A = J - I (mu = lambda - 1).

    A graded rotation measure: 0 when every eigenvalue is real, 1 when every one is imaginary (a pure rotation
    generator), 2/pi for eigenvalues uniform on a disc (the circular law of a Gaussian matrix:
    E|Im z| / E|z| = (2/3)(2/pi) / (2/3)). Unlike the complex fraction it does not saturate when a small
    non-symmetric perturbation splits real eigenvalues into pairs close to the axis. 0 for A = 0.
    """
    mu = np.asarray(update_eigenvalues)
    total = float(np.sum(np.abs(mu)))
    return float(np.sum(np.abs(mu.imag))) / total if total > 0 else 0.0


def mean_absolute_argument(eigenvalues) -> float:
    """Mean |arg lambda| (radians, in [0, pi]) over the eigenvalues of J: the mean rotation angle of one step of
    the map (0 for positive real eigenvalues, pi for negative ones)."""
    return float(np.mean(np.abs(np.angle(np.asarray(eigenvalues)))))


def update_size(jacobian, update=None) -> float:
    """||J - I||_F / ||J||_F: how far the sublayer moves the stream relative to the map itself (0 for the identity)."""
    jacobian = _float64(jacobian)
    update = jacobian - np.eye(len(jacobian)) if update is None else update
    norm = float(np.linalg.norm(jacobian))
    return float(np.linalg.norm(update)) / norm if norm > 0 else 0.0


def operator_type(asymmetry: float, rotation: float) -> str:
    """The primary operator type of a sublayer, from the update A = J - I (thresholds at the top of the module):

    ``near_symmetric``: asymmetry_index < 1/(2 sqrt 2) (half a random matrix's); ``rotation_dominated``:
    asymmetry at least that and rotation_share >= 1/pi (half the circular law's 2/pi); ``other``: the rest.
    """
    if asymmetry < NEAR_SYMMETRIC_ASYMMETRY:
        return "near_symmetric"
    if rotation >= ROTATION_DOMINATED_SHARE:
        return "rotation_dominated"
    return "other"


def operator_type_henrici(henrici_rel_j_minus_i: float, frac_complex: float) -> str:
    """The rule before issue 30 (kept beside the primary one): ``near_normal``: dep/||J - I||_F < 0.5 and fewer than
    half the eigenvalues complex; ``rotational_non_normal``: dep/||J - I||_F >= 0.5 and at least half complex;
    ``other``: the rest. Henrici's departure is 0 for every normal matrix, rotations included: this rule cannot
    tell symmetric from rotating."""
    non_normal = henrici_rel_j_minus_i >= NEAR_NORMAL_HENRICI
    rotational = frac_complex >= ROTATIONAL_COMPLEX_FRACTION
    if not non_normal and not rotational:
        return "near_normal"
    if non_normal and rotational:
        return "rotational_non_normal"
    return "other"


def eigenvalues_of_schur_form(schur_form: np.ndarray) -> np.ndarray:
    """Eigenvalues read off a real Schur form's diagonal blocks, in block order.

    A 1x1 block is its entry; a 2x2 block [[a, b], [c, d]] has (a + d)/2 +- sqrt(((a - d)/2)^2 + b c),
    which for LAPACK's standardised complex blocks (a = d, b c < 0) is a +- i sqrt(-b c). Reading
    them off the Schur form that the non-normality metrics need anyway saves an eigendecomposition.
    """
    values = np.empty(len(schur_form), dtype=np.complex128)
    for start, size in schur_blocks(schur_form):
        if size == 1:
            values[start] = schur_form[start, start]
            continue
        a, b = schur_form[start, start], schur_form[start, start + 1]
        c, d = schur_form[start + 1, start], schur_form[start + 1, start + 1]
        root = np.sqrt(complex(((a - d) / 2) ** 2 + b * c))
        values[start], values[start + 1] = (a + d) / 2 + root, (a + d) / 2 - root
    return values


def by_decreasing_modulus(eigenvalues: np.ndarray) -> np.ndarray:
    return eigenvalues[np.argsort(-np.abs(eigenvalues), kind="stable")]


@dataclass(frozen=True)
class SublayerSpectrum:
    """Everything the spectral tables need of one matrix, each factorization computed once."""

    eigenvalues: np.ndarray  # by decreasing modulus
    singular_values: np.ndarray  # decreasing
    schur_form: np.ndarray  # T of J = Z T Z^T (real Schur, LAPACK ordering)
    schur_basis: np.ndarray  # Z
    metrics: dict


def analyse_sublayer(jacobian, k: int | None = None, *, keep_schur: bool = True, alignment: bool = True
                     ) -> SublayerSpectrum:
    """Every per-sublayer metric of the study for one (mean) Jacobian J, from three factorizations:

    the real Schur form of J (eigenvalues, Henrici departure, complex blocks; reused by Schur
    surgery; without its basis when ``keep_schur`` is false), the singular values of J (conditioning,
    ranks), and the top-k singular triplets of J - I (both self-alignment metrics; a full SVD up to
    TRUNCATED_SVD_MIN_WIDTH, Lanczos beyond; skipped, and the two metrics left out, without ``alignment``).
    """
    jacobian = _float64(jacobian)
    if not np.isfinite(jacobian).all():
        raise FloatingPointError("the Jacobian has non-finite entries; rematerialize the jacobians partition")
    d = len(jacobian)
    schur_form, schur_basis = real_schur_form(jacobian, with_basis=keep_schur)
    eigenvalues = by_decreasing_modulus(eigenvalues_of_schur_form(schur_form))
    singular_values = scipy.linalg.svdvals(jacobian)
    deviation = jacobian - np.eye(d)
    k = k or default_alignment_rank(d)
    u, s, vt = top_singular_triplets(deviation, k) if alignment else (None, None, None)
    henrici = departure_of_schur_form(schur_form)
    radius = float(np.abs(eigenvalues).max())
    deviation_norm = float(np.linalg.norm(deviation))
    metrics = {
        "spectral_radius": radius,
        "sigma_max": float(singular_values[0]),
        "sigma_min": float(singular_values[-1]),
        "condition_number": condition_number(singular_values),
        "log10_condition": log10_condition(singular_values),
        "henrici": henrici,
        "henrici_rel_j": henrici / float(np.linalg.norm(jacobian)),
        "henrici_rel_j_minus_i": henrici / deviation_norm if deviation_norm > 0 else 0.0,
        "asymmetry_index": asymmetry_index(deviation),
        "rotation_share": rotation_share(eigenvalues - 1.0),
        "mean_absolute_argument": mean_absolute_argument(eigenvalues),
        "update_size": deviation_norm / float(np.linalg.norm(jacobian)),
        "frac_complex": complex_fraction(eigenvalues),
        "frac_complex_1e8": complex_fraction(eigenvalues, 1e-8),
        "frac_complex_1e4": complex_fraction(eigenvalues, 1e-4),
        "frac_complex_schur": 2 * sum(size == 2 for _, size in schur_blocks(schur_form)) / d,
        "frac_expanding": expanding_fraction(eigenvalues),
        "frac_neutral": neutral_fraction(eigenvalues),
        **({"self_alignment": _overlap_of_svd(u, vt, k), "self_alignment_signed": _signed_alignment_of_svd(u, s, vt, k),
            "self_alignment_k": k, "self_alignment_baseline": k / d} if alignment else {}),
        "effective_rank": effective_rank(singular_values),
        "participation_ratio": participation_ratio(singular_values),
        "stable_rank": stable_rank(singular_values),
        "numerical_rank": numerical_rank(singular_values),
    }
    metrics["operator_type"] = operator_type(metrics["asymmetry_index"], metrics["rotation_share"])
    metrics["operator_type_henrici"] = operator_type_henrici(metrics["henrici_rel_j_minus_i"], metrics["frac_complex"])
    if not keep_schur:
        schur_form = schur_basis = None
    return SublayerSpectrum(eigenvalues, singular_values, schur_form, schur_basis, metrics)


def sublayer_metrics(jacobian, k: int | None = None) -> dict:
    """The metrics of :func:`analyse_sublayer` alone."""
    return analyse_sublayer(jacobian, k, keep_schur=False).metrics


def bootstrap_interval(values, *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (Efron & Tibshirani 1993)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_resamples, len(values)))].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))
