"""Depth as time: cumulative Jacobian products and Schur surgery.

Cumulative product P_l = J_l ... J_1 in float64, rescaled at every step (P <- J P; c = ||P||_F;
P <- P / c; log_scale += log c), so singular values of the product are svdvals(P) exp(log_scale)
without overflow. QR (Benettin) accumulation is deliberately not used: it estimates Lyapunov
exponents, not the singular values of a finite product.

Schur surgery: with the real Schur form J = Z T Z^T, J(alpha) = Z T(alpha) Z^T scales the
strictly block-upper part of T by alpha and rewrites each standardised 2x2 block
[[a, b], [c, a]] (b c < 0) as [[a, sign(b) beta s], [sign(c) beta / s, a]], beta = sqrt(-b c),
so that its eigenvalues a +- i beta are kept. With t = |b| / beta, METHODS.md suggests s = t^alpha;
that keeps the spectrum and makes J(0) normal, but the block's departure |b + c| = beta |s - 1/s|
then does not scale linearly (measured on a random 8 x 8: dep(J(0.5)) = 2.662 vs 0.5 dep(J) =
2.672). We take s = exp(asinh(alpha sinh(log t))), i.e. s - 1/s = alpha (t - 1/t), which agrees
with t^alpha at alpha = 0 and 1 and gives dep(J(alpha)) = alpha dep(J) exactly.

The normal part depends on the order of the eigenvalues along the diagonal of T (the Schur basis Z
does), so the surgery is also run on T reordered by eigenvalue modulus (:func:`reorder_real_schur`), and
beside the Schur orderings on a normal part that depends on no ordering (``polar-normal``): the polar normal
part N = U Lambda U^* of J = V Lambda V^{-1}, U the unitary polar factor of the unit-column eigenvector matrix
V (resdyn/normal_part.py, from the same Schur form), with J(alpha) = N + alpha (J - N). That path keeps J's
spectrum at alpha = 0 (N) and alpha = 1 (J), not in between.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg.lapack import dtrexc

from .normal_part import PolarNormalForm, polar_normal_form
from .spectra import (
    effective_rank,
    eigenvalues_of_schur_form,
    numerical_rank,
    participation_ratio,
    schur_blocks,
    stable_rank,
)

SURGERY_BLOCK_RULE = "sinh"  # s - 1/s = alpha (t - 1/t); see the module docstring
POLAR_BLOCK_RULE = "polar"  # the polar-normal rows: J(alpha) = N + alpha (J - N), no 2x2 block rebalanced
SCHUR_ORDERING = "lapack-default"  # scipy.linalg.schur(output='real', sort=None)
MODULUS_ASCENDING = "modulus-ascending"  # |lambda| non-decreasing down the diagonal (reorder_real_schur)
MODULUS_DESCENDING = "modulus-descending"  # |lambda| non-increasing down the diagonal
SCHUR_FORM_ORDERINGS = (SCHUR_ORDERING, MODULUS_ASCENDING, MODULUS_DESCENDING)  # orders of T's diagonal
# not an ordering but a definition of the normal part that needs none (polar_surgery_form); recorded in the same
# schur_ordering column
POLAR_NORMAL = "polar-normal"
SCHUR_ORDERINGS = (*SCHUR_FORM_ORDERINGS, POLAR_NORMAL)
RANK_DEFINITIONS = ("effective_rank", "participation_ratio", "stable_rank")  # of a product: rank_summary's real-valued ranks
REORDERED_ALPHAS = (0.0, 1.0)  # the alphas SchurSurgery runs on a reordered form (alpha = 1: a check)


@dataclass(frozen=True)
class ProductStep:
    depth: int
    singular_values_normalised: np.ndarray  # svdvals(P) with ||P||_F = 1
    log_scale: float  # log of the factor removed so far

    @property
    def log_singular_values(self) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.singular_values_normalised) + self.log_scale

    @property
    def log_sigma_max(self) -> float:
        return float(np.log(self.singular_values_normalised[0]) + self.log_scale)


class CumulativeProduct:
    """P <- J P, one factor at a time, rescaled to ||P||_F = 1 (the removed scale kept as a log)."""

    def __init__(self) -> None:
        self.product: np.ndarray | None = None
        self.log_scale = 0.0
        self.depth = -1

    def push(self, jacobian: np.ndarray) -> ProductStep:
        """Multiply by the next factor; the singular values of the product so far."""
        jacobian = np.asarray(jacobian, dtype=np.float64)
        self.depth += 1
        self.product = jacobian.copy() if self.product is None else jacobian @ self.product
        scale = np.linalg.norm(self.product)
        if not np.isfinite(scale) or scale == 0:
            raise FloatingPointError(f"the cumulative product degenerated at depth {self.depth} (norm {scale})")
        self.product /= scale
        self.log_scale += float(np.log(scale))
        return ProductStep(self.depth, scipy.linalg.svdvals(self.product), self.log_scale)


def cumulative_products(jacobians: Iterable[np.ndarray]) -> Iterator[ProductStep]:
    """Singular values of J_1, J_2 J_1, ..., in depth order, by the rescaled float64 product."""
    chain = CumulativeProduct()
    for jacobian in jacobians:
        yield chain.push(jacobian)


@dataclass(frozen=True)
class SchurDecomposition:
    """J = Z T Z^T with T in real Schur form; compute once, operate at many alphas."""

    schur_form: np.ndarray
    basis: np.ndarray

    @classmethod
    def of(cls, jacobian) -> SchurDecomposition:
        schur_form, basis = scipy.linalg.schur(np.asarray(jacobian, dtype=np.float64), output="real")
        return cls(schur_form, basis)

    def operated(self, alpha: float) -> np.ndarray:
        """J(alpha): the same eigenvalues and Schur basis, non-normal part scaled by alpha."""
        return self.basis @ operated_schur_form(self.schur_form, alpha) @ self.basis.T


def _blocks_from(schur_form: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """(first rows, eigenvalue moduli) of the diagonal blocks at or below row ``start`` (a block's first row)
    of a real Schur form, vectorised: a row r > start is a 2x2 block's second row iff T[r, r - 1] != 0;
    a 2x2 block's |lambda| is sqrt(det) (complex pair: lambda conj(lambda) = det)."""
    n = len(schur_form)
    second = np.zeros(n - start, dtype=bool)
    second[1:] = np.diagonal(schur_form, -1)[start:] != 0.0
    firsts = np.flatnonzero(~second)
    pairs = np.zeros(len(firsts), dtype=bool)
    inside = firsts + 1 < n - start
    pairs[inside] = second[firsts[inside] + 1]
    rows = firsts + start
    moduli = np.abs(schur_form[rows, rows])
    two = rows[pairs]
    moduli[pairs] = np.sqrt(np.abs(schur_form[two, two] * schur_form[two + 1, two + 1]
                                   - schur_form[two, two + 1] * schur_form[two + 1, two]))
    return rows, moduli


def reorder_real_schur(schur_form: np.ndarray, basis: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(T', Z'): a real Schur form J = Z' T' Z'^T of the same J = Z T Z^T with the eigenvalue moduli of the
    diagonal blocks in the order ``key`` names: ``modulus-ascending`` or ``modulus-descending``
    (``lapack-default``: T and Z returned as they are). Ties keep their order in T.

    Method: selection by insertion. For each block position p, from the top, the block at or below p of
    least (greatest) modulus is moved to p by one call of LAPACK's DTREXC (Anderson et al., LAPACK Users'
    Guide, 3rd ed., 1999), which moves a diagonal block by a sequence of swaps of adjacent 1x1 / 2x2 blocks
    (DLAEXC: Bai & Demmel 1993, "On swapping diagonal blocks in real Schur form", Linear Algebra Appl. 186,
    73-95): each swap an orthogonal similarity applied to T and accumulated into Z, its 2x2 blocks
    re-standardised (DLANV2), so a complex-conjugate pair moves as one block and T' stays real
    quasi-triangular. At most d calls; the number of adjacent swaps is the number of block inversions
    between the two orders (~ d^2 / 4 from an order unrelated to the modulus, d^2 / 2 at worst).

    Cost: a swap of two 1x1 blocks applies one Givens rotation to two rows and two columns of T and two
    columns of Z, ~ 12 d flops (a swap involving a 2x2 block a small multiple of that), so ~ 3 d^3 flops
    per reordering of an unrelated order, in Level-1 (memory-bound) rotations: measured 0.1-0.3 s at d = 576
    and 1.4-2.3 s at d = 1024 on 2 busy cores, below one real Schur form (the O(d^2) scans that pick each
    block are negligible).
    A swap that DTREXC refuses as too ill-conditioned (INFO = 1) leaves the block where LAPACK stopped it
    (the order then fails there only) and warns.
    """
    if key == SCHUR_ORDERING:
        return schur_form, basis
    if key not in (MODULUS_ASCENDING, MODULUS_DESCENDING):
        raise ValueError(f"unknown Schur ordering {key!r}; expected one of {SCHUR_FORM_ORDERINGS}")
    sign = 1.0 if key == MODULUS_ASCENDING else -1.0
    form = np.array(schur_form, dtype=np.float64, order="F")  # copies: DTREXC then works in place
    vectors = np.array(basis, dtype=np.float64, order="F")
    n, position, refused = len(form), 0, 0
    while position < n:
        rows, moduli = _blocks_from(form, position)
        first = int(rows[np.argmin(sign * moduli)])  # the first of equal moduli: stable
        if first != position:
            form, vectors, info = dtrexc(form, vectors, first + 1, position + 1, overwrite_a=1, overwrite_q=1)
            if info < 0:
                raise ValueError(f"DTREXC: argument {-info} is illegal")
            refused += info == 1
        position += 2 if position + 1 < n and form[position + 1, position] != 0.0 else 1
    if refused:
        warnings.warn(f"reorder_real_schur({key}): DTREXC refused {refused} ill-conditioned swap(s); "
                      "the order fails there", RuntimeWarning, stacklevel=2)
    return form, vectors


def operated_schur_form(schur_form: np.ndarray, alpha: float) -> np.ndarray:
    """T(alpha): strictly block-upper part times alpha; 2x2 blocks rebalanced (module docstring)."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    blocks = schur_blocks(schur_form)
    block_of = np.empty(len(schur_form), dtype=int)
    for index, (start, size) in enumerate(blocks):
        block_of[start : start + size] = index
    operated = schur_form.copy()
    operated[block_of[None, :] > block_of[:, None]] *= alpha
    for start, size in blocks:
        if size != 2:
            continue
        b, c = schur_form[start, start + 1], schur_form[start + 1, start]
        beta = np.sqrt(-b * c)
        log_t = np.log(abs(b) / beta)
        s = np.exp(np.arcsinh(alpha * np.sinh(log_t)))
        operated[start, start + 1] = np.sign(b) * beta * s
        operated[start + 1, start] = np.sign(c) * beta / s
    return operated


def block_eigenvalue_drift(schur_form: np.ndarray, operated: np.ndarray) -> float:
    """max |eigenvalue of a diagonal block of T(alpha) - that of T|: the rebalancing of each 2x2 block
    keeps its eigenvalues by construction, and Z T(alpha) Z^T is similar to T(alpha), so this is the
    spectrum's drift without another O(d^3) eigendecomposition."""
    return float(np.max(np.abs(eigenvalues_of_schur_form(operated) - eigenvalues_of_schur_form(schur_form))))


def polar_surgery_form(schur_form: np.ndarray, polar: PolarNormalForm, alpha: float) -> np.ndarray:
    """T(alpha) of the polar-normal surgery, in the Schur basis: N_T + alpha (T - N_T), so that
    Z T(alpha) Z^T = N + alpha (J - N) for the polar normal part N = Z N_T Z^T of J = Z T Z^T
    (resdyn/normal_part.py). alpha = 0 gives N_T, alpha = 1 gives T itself (the array passed), and only those two
    keep J's spectrum: in between, the eigenvalues of the sum move (:func:`polar_surgery_drift`)."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if alpha == 0.0:
        return polar.normal_form
    if alpha == 1.0:
        return schur_form
    return polar.normal_form + alpha * (schur_form - polar.normal_form)


def spectral_distance(eigenvalues: np.ndarray, reference: np.ndarray) -> float:
    """Hausdorff distance between two spectra, max(max_i min_j |a_i - b_j|, max_j min_i |a_i - b_j|): a lower bound
    on the largest move of an eigenvalue under any matching of the two."""
    distance = np.abs(np.asarray(eigenvalues)[:, None] - np.asarray(reference)[None, :])
    return float(max(distance.min(axis=1).max(), distance.min(axis=0).max()))


def polar_surgery_drift(schur_form: np.ndarray, polar: PolarNormalForm, alpha: float, operated: np.ndarray) -> float:
    """The max_eigenvalue_drift of a polar-normal row (``operated`` = :func:`polar_surgery_form`).

    alpha = 0: the eigenpair residual max_i ||N_T u_i - lambda_i u_i||_2 of the computed N_T with T's own eigenvalues
    and its unit eigenvectors u_i (PolarNormalForm.eigenpair_residual): N_T is built from T's eigenvalues, so this
    is the error of the construction, and for a normal N_T each lambda_i is within it of N_T's spectrum.
    alpha = 1: 0 (the operated form is T itself). Any other alpha: the path does not keep the spectrum, and the
    drift is :func:`spectral_distance` between the eigenvalues of the operated form (scipy.linalg.eigvals, one more
    eigendecomposition, ~ 10 d^3 flops) and T's.
    """
    if alpha == 0.0:
        return polar.eigenpair_residual
    if alpha == 1.0:
        return 0.0
    return spectral_distance(scipy.linalg.eigvals(operated), eigenvalues_of_schur_form(schur_form))


def rank_summary(step: ProductStep) -> dict:
    """The ranks of one cumulative product (resdyn.spectra's definitions) and its log largest singular value."""
    s = step.singular_values_normalised
    return {"depth": step.depth, "effective_rank": effective_rank(s), "participation_ratio": participation_ratio(s),
            "stable_rank": stable_rank(s), "numerical_rank": numerical_rank(s), "log_sigma_max": step.log_sigma_max}


class SchurSurgery:
    """The cumulative products of the operated Jacobians J(alpha), for several alphas and normal parts at once, one
    depth at a time, from each Jacobian's real Schur form J = Z T Z^T (computed once, by its caller): ``alphas`` on
    LAPACK's ordering (``lapack-default``), ``reordered_alphas`` on every other entry of ``orderings``: a Schur
    ordering (J(alpha) = Z' T'(alpha) Z'^T on the form reordered by :func:`reorder_real_schur`), or ``polar-normal``
    (J(alpha) = N + alpha (J - N), N the polar normal part, :func:`polar_surgery_form`). alpha = 1 gives J again
    under every one.

    Per depth, ordering and alpha: T(alpha) costs O(d^2), Z T(alpha) Z^T two d x d products (4 d^3 flops),
    the product update one more (2 d^3) and its singular values one SVD (~ 4/3 d^3 for values only), so
    ~ 7.3 d^3 flops per (ordering, alpha), plus ~ 3 d^3 flops of Level-1 rotations per reordered ordering,
    against ~ 25 d^3 for the Schur form itself; by default (5 + 2 + 2 + 2 alphas) ~ 86 d^3. The polar normal
    part adds, once per depth, DTREVC's eigenvectors of T (~ d^3 / 3), one SVD with vectors and three products
    (resdyn.normal_part.polar_normal_form): measured about half a Schur form at d = 576 and 640. The spectral drift
    is read off the diagonal blocks (:func:`block_eigenvalue_drift`, against the same ordering's T), or for
    ``polar-normal`` off the construction of N (:func:`polar_surgery_drift`), never from another
    eigendecomposition at the default alphas.
    """

    def __init__(self, alphas: Iterable[float], orderings: Iterable[str] = SCHUR_ORDERINGS,
                 reordered_alphas: Iterable[float] = REORDERED_ALPHAS) -> None:
        self.alphas = tuple(alphas)
        self.orderings = tuple(orderings)
        unknown = set(self.orderings) - set(SCHUR_ORDERINGS)
        if unknown:
            raise ValueError(f"unknown Schur orderings {sorted(unknown)}; expected some of {SCHUR_ORDERINGS}")
        self.plan = {ordering: self.alphas if ordering == SCHUR_ORDERING else tuple(reordered_alphas)
                     for ordering in self.orderings}
        self.chains = {(o, alpha): CumulativeProduct() for o, alphas in self.plan.items() for alpha in alphas}
        self.drift = {key: 0.0 for key in self.chains}

    def push(self, schur_form: np.ndarray, schur_basis: np.ndarray) -> list[dict]:
        """One row per (ordering, alpha) for the next depth: the ranks of the operated product so far and the
        largest eigenvalue drift of any block (polar-normal: :func:`polar_surgery_drift`) up to this depth."""
        rows = []
        for ordering, alphas in self.plan.items():
            for alpha, operated, basis, drift, rule in _operated_forms(ordering, alphas, schur_form, schur_basis):
                key = (ordering, alpha)
                self.drift[key] = max(self.drift[key], drift)
                step = self.chains[key].push(basis @ operated @ basis.T)
                rows.append({"alpha": alpha, **rank_summary(step), "max_eigenvalue_drift": self.drift[key],
                             "block_rule": rule, "schur_ordering": ordering})
        return rows


def _operated_forms(ordering: str, alphas: tuple, schur_form: np.ndarray, schur_basis: np.ndarray) -> Iterator[tuple]:
    """(alpha, T(alpha), its basis Z, eigenvalue drift, block rule) under ``ordering``, for each alpha."""
    if not alphas:
        return
    if ordering == POLAR_NORMAL:
        polar = polar_normal_form(schur_form)
        for alpha in alphas:
            operated = polar_surgery_form(schur_form, polar, alpha)
            yield alpha, operated, schur_basis, polar_surgery_drift(schur_form, polar, alpha, operated), POLAR_BLOCK_RULE
        return
    form, basis = reorder_real_schur(schur_form, schur_basis, ordering)
    for alpha in alphas:
        operated = operated_schur_form(form, alpha)
        yield alpha, operated, basis, block_eigenvalue_drift(form, operated), SURGERY_BLOCK_RULE
