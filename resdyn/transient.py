"""What non-normality does to the dynamics: field of values, pseudospectra, Kreiss bound, growth of products.

Eigenvalues say what a map does after many steps; a non-normal map can amplify for a while even
when every eigenvalue is small (Trefethen & Embree, *Spectra and Pseudospectra*, Princeton 2005,
abbreviated T&E below). For one real d x d matrix A (a mean sublayer Jacobian), in float64:

- numerical abscissa          omega(A) = lambda_max((A + A^T) / 2)                              (T&E 17)
  the initial growth rate d/dt ||e^{tA}|| at t = 0; also reported for A - I (the residual update).
- numerical radius            w(A) = max{|z| : z in W(A)}, W(A) = {x* A x : ||x|| = 1}          (T&E 17)
  computed as max_theta f(theta), f(theta) = lambda_max((e^{i theta} A + e^{-i theta} A*) / 2)
  (Johnson 1978, SIAM J. Numer. Anal. 15), by an adaptive angle grid that keeps a certified
  bracket: every evaluated f is attained in W(A) (lower bound) and W(A) lies inside the polygon
  of the supporting lines Re(e^{i theta} z) <= f(theta), whose largest vertex modulus is an
  upper bound; the interval with the largest vertex is halved until upper/lower - 1 <= tolerance.
- pseudospectral radius       rho_eps(A) = max{|z| : sigma_min(z I - A) <= eps}                 (T&E 2, 16)
  along rays from the origin (a uniform angle grid plus the angles of the largest eigenvalues),
  marching in from |z| = ||A||_2 + 2 eps, where the pseudospectrum cannot reach, to the
  outermost crossing of sigma_min(z I - A) = eps: safeguarded Newton on r with the derivative
  d sigma_min / dr = Re(e^{i theta} u* v) of the singular triple, bisection when a step lands
  inside; then the best angle is refined by a bounded scalar search. Every crossing is a point of
  the eps-pseudospectrum (to RADIAL_TOLERANCE), so the result is a lower bound on rho_eps, exact
  where the boundary's farthest point lies on the searched rays' basin (normal matrices, Jordan
  blocks, the near-identity maps the study measures); a ragged boundary can hide a farther lobe:
  on a Ginibre matrix at d = 1024, eps = 1e-3, two refinement starts gave maxima 4e-4 apart. The
  global answer needs the criss-cross method (Mengi & Overton 2005, IMA J. Numer. Anal. 25), whose
  every step is an eigenproblem of order 2d, several times one Schur form; not used here.
  sigma_min comes from the
  complex Schur form A = Q T Q* computed once: a dense SVD of z I - T for d <= DENSE_SVD_LIMIT,
  otherwise Lanczos on (R* R)^{-1}, R = z I - T, two triangular solves per step, warm-started from
  the previous z (T&E 39, the EigTool method): in complex arithmetic with full reorthogonalization
  and ARPACK's residual criterion (the inverse's largest eigenvalue is well separated, so a warm
  start converges in a few steps: 1.7-4x faster than ARPACK's restarted real embedding at d = 1024,
  equal to 1e-12), ARPACK when it does not converge in LANCZOS_STEPS (a basis of 160 vectors:
  10 MiB at d = 4096). T comes from the real Schur form split into complex
  1 x 1 blocks (scipy.linalg.rsf2csf: 3x faster than a complex Schur form at d = 4096); in the
  pipeline that real Schur form is the one resdyn.spectra computed (table schur_forms), so the
  transient stage does not factor J again (the numerical radius still takes one Hermitian
  eigenvalue per angle, and sigma_min a dense SVD per point up to DENSE_SVD_LIMIT).
  Every ARPACK run on a complex Hermitian operator M acts on its real symmetric embedding
  [[Re M, -Im M], [Im M, Re M]] (same eigenvalues, each twice): scipy's eigsh treats any complex
  operator with ARPACK's non-Hermitian Arnoldi, about 10x slower.
  Known answers (tested): a normal matrix has rho_eps = rho + eps; a Jordan block J_n(0) has a
  disc of radius ~eps^(1/n).
- Kreiss lower bound          K_grid(A) = max over the eps grid of (rho_eps(A) - 1) / eps
  a lower bound on the Kreiss constant K(A) = sup_eps (rho_eps(A) - 1) / eps, which bounds the
  transient growth of powers: K(A) <= sup_k ||A^k|| <= e d K(A) (Kreiss matrix theorem, T&E 18).
- transient growth of a window of maps, ||J_{l+k-1} ... J_l||_2 against prod_i rho(J_i): the
  product of spectral radii is what the eigenvalues predict, the norm is what happens.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse.linalg

PSEUDOSPECTRAL_EPSILONS = (1e-3, 1e-2, 1e-1)
GROWTH_WINDOWS = (1, 2, 4, 8)  # plus the full depth
# At or below this width dense eigensolvers and norms, beyond it Lanczos. Measured on 2 cores, dense vs Lanczos:
# numerical radius 4.6 s vs 4.5 s at d = 1024, 34 s vs 18 s at 2048; at d = 1536 the 2-norm 0.92 s vs 0.28 s,
# the norm of a product of 8 maps 1.46 s vs 1.24 s, the numerical abscissa 0.27 s vs 0.16 s (equal to 1e-13).
DENSE_LIMIT = 1024
DENSE_SVD_LIMIT = 96  # above this, sigma_min(zI - T) by inverse iteration on the Schur form beats a dense SVD
NUMERICAL_RADIUS_TOLERANCE = 1e-6
INITIAL_ANGLES = 5  # the first angle grid on [0, pi] (real A) or [0, 2 pi]: 9 evaluations in all at d = 1024, not 20
LANCZOS_TOLERANCE = 1e-10  # relative residual of a Lanczos eigenpair (lambda_max of H(theta))
SIGMA_MIN_TOLERANCE = 1e-10  # relative accuracy of the Lanczos eigenvalue 1/sigma_min^2 behind rho_eps
GRID_TOLERANCE = 1e-6  # relative accuracy of 1/sigma_min^2 on a contour-plot grid (drawn, not reported)
RADIAL_TOLERANCE = 1e-9


def _float64(matrix) -> np.ndarray:
    matrix = np.asarray(matrix)
    return matrix.astype(np.complex128 if np.iscomplexobj(matrix) else np.float64)


def _largest_hermitian_eigenvalue(hermitian: np.ndarray, dense_limit: int = DENSE_LIMIT) -> float:
    d = len(hermitian)
    if d <= dense_limit:
        return float(scipy.linalg.eigvalsh(hermitian, subset_by_index=[d - 1, d - 1])[0])
    if not np.iscomplexobj(hermitian):
        return _largest_real_symmetric_eigenpair(lambda x: hermitian @ x, d, None)[0]
    return _largest_real_symmetric_eigenpair(_as_real_operator(lambda x: hermitian @ x, d), 2 * d, None)[0]


def _as_real_operator(apply_complex, d: int):
    """x -> M x for complex Hermitian M, acting on R^{2d} through [[Re M, -Im M], [Im M, Re M]].

    That real symmetric matrix has M's eigenvalues, each twice (v and i v), so lambda_max is M's. ARPACK's
    symmetric Lanczos on it converges about 10x faster than its complex (non-Hermitian) Arnoldi, which
    scipy's eigsh uses for any complex operator (measured at d = 1024: 0.36 s vs 3.5 s)."""
    def apply_real(stacked):
        image = apply_complex(stacked[:d] + 1j * stacked[d:])
        return np.concatenate([image.real, image.imag])
    return apply_real


def _largest_real_symmetric_eigenpair(apply, size: int, start: np.ndarray | None, *,
                                      tolerance: float = LANCZOS_TOLERANCE, which: str = "LA",
                                      ncv: int | None = None) -> tuple[float, np.ndarray]:
    """The largest (``which``) eigenpair of a real symmetric operator by implicitly restarted Lanczos.

    tol: ||residual|| <= tol |lambda|, which bounds the Ritz value's error by tol |lambda| (symmetric)."""
    if start is None:
        start = np.random.default_rng(0).standard_normal(size)  # reproducible Lanczos start
    operator = scipy.sparse.linalg.LinearOperator((size, size), matvec=apply, dtype=np.float64)
    values, vectors = scipy.sparse.linalg.eigsh(operator, k=1, which=which, v0=start, tol=tolerance, ncv=ncv)
    return float(values[0]), vectors[:, 0]


LANCZOS_BACKEND = "complex"  # "arpack": the real-embedding ARPACK path for every sigma_min (the reference)
LANCZOS_STEPS = 160  # at d = 2048 the largest warm-started run took ~100 steps; 40 left 12% of runs to ARPACK (1.7x slower)


def _largest_hermitian_eigenvector(apply, start: np.ndarray, tolerance: float) -> np.ndarray | None:
    """The eigenvector of the largest eigenvalue of a positive definite Hermitian operator (here (R* R)^{-1}) by
    Lanczos in complex arithmetic with full reorthogonalization, from ``start``; stops when the Ritz pair's
    residual ||M x - theta x|| = beta_m |y_m| <= tolerance theta (ARPACK's criterion, so the same accuracy).
    From the previous point's vector a few steps suffice, where ARPACK's restarted real embedding takes a
    Krylov basis of ncv = 6 real vectors per restart. None when LANCZOS_STEPS did not converge."""
    basis = np.empty((LANCZOS_STEPS + 1, len(start)), dtype=np.complex128)
    basis[0] = start / np.linalg.norm(start)
    alphas, betas = [], []
    for step in range(LANCZOS_STEPS):
        w = apply(basis[step])
        alphas.append(float(np.real(np.vdot(basis[step], w))))
        for _ in range(2):  # full reorthogonalization, twice ("twice is enough", Parlett 1998, sec. 6.9)
            w -= basis[:step + 1].T @ (basis[:step + 1].conj() @ w)
        beta = float(np.linalg.norm(w))
        values, vectors = scipy.linalg.eigh_tridiagonal(alphas, betas, select="i", select_range=(step, step))
        theta, ritz = values[0], vectors[:, 0]
        if beta * abs(ritz[-1]) <= tolerance * abs(theta) or beta == 0.0:
            return basis[:step + 1].T @ ritz
        betas.append(beta)
        basis[step + 1] = w / beta
    return None


def numerical_abscissa(matrix, *, dense_limit: int = DENSE_LIMIT) -> float:
    """omega(A) = lambda_max((A + A*) / 2), the largest real part of the field of values (T&E 17)."""
    matrix = _float64(matrix)
    return _largest_hermitian_eigenvalue((matrix + matrix.conj().T) / 2, dense_limit)


@dataclass(frozen=True)
class NumericalRadius:
    """w(A) bracketed: ``lower`` is attained by a point of W(A), ``upper`` bounds all of W(A)."""

    lower: float
    upper: float
    evaluations: int
    abscissa: float  # f(0) = lambda_max((A + A*) / 2): the numerical abscissa, evaluated on the way

    @property
    def value(self) -> float:
        return self.lower


def numerical_radius(matrix, *, tolerance: float = NUMERICAL_RADIUS_TOLERANCE, max_evaluations: int = 4096,
                     dense_limit: int = DENSE_LIMIT, initial_angles: int | None = None) -> NumericalRadius:
    """w(A) = max_theta lambda_max(H(theta)), H(theta) = (e^{i theta} A + e^{-i theta} A*) / 2 (Johnson 1978).

    The supporting line of W(A) in direction theta is Re(e^{i theta} z) = f(theta); two adjacent
    lines at theta_a < theta_b meet at the vertex z with e^{i theta_a} z = f_a + i t, whose modulus
    bounds |W(A)| over that sector. Halving the sector with the largest vertex shrinks the bracket
    where it matters. For real A, W(A) is symmetric about the real axis, so theta in [0, pi] suffices.
    """
    matrix = _float64(matrix)
    real = not np.iscomplexobj(matrix)
    hermitian_part = (matrix + matrix.conj().T) / 2
    skew_part = (matrix - matrix.conj().T) / 2  # H(theta) = cos(theta) hermitian + i sin(theta) skew

    d = len(matrix)
    ritz_vectors: dict[float, np.ndarray] = {}

    def support(theta: float) -> float:
        """f(theta). Lanczos (d > dense_limit): matrix-free on the real embedding of H(theta), started from the
        Ritz vector of the nearest angle already seen (neighbouring angles have near eigenvectors: at d = 2048
        the numerical radius takes 18.4 s so against 21.2 s from a fixed start)."""
        if d <= dense_limit:
            return _largest_hermitian_eigenvalue(np.cos(theta) * hermitian_part + 1j * np.sin(theta) * skew_part,
                                                 dense_limit)
        cosine, sine = np.cos(theta), np.sin(theta)
        if real:  # H(theta)(a + ib) = (c S a - s K b) + i (c S b + s K a), S, K real: real products only
            def apply(stacked):
                pair = stacked.reshape(2, d).T  # columns a, b
                symmetric, skew = hermitian_part @ pair, skew_part @ pair
                return np.concatenate([cosine * symmetric[:, 0] - sine * skew[:, 1],
                                       cosine * symmetric[:, 1] + sine * skew[:, 0]])
        else:
            apply = _as_real_operator(lambda x: cosine * (hermitian_part @ x) + 1j * sine * (skew_part @ x), d)
        # ARPACK here, not the complex Lanczos of sigma_min: lambda_max of H(theta) sits at the edge of a dense
        # spectrum (small gap), where 40 unrestarted steps do not converge (2.4x slower at d = 2048, measured)
        nearest = min(ritz_vectors, key=lambda seen: abs(seen - theta), default=None)
        value, ritz_vectors[theta] = _largest_real_symmetric_eigenpair(
            apply, 2 * d, None if nearest is None else ritz_vectors[nearest])
        return value

    initial_angles = initial_angles or INITIAL_ANGLES
    if initial_angles < 3:
        raise ValueError(f"initial_angles must be at least 3 (adjacent supporting lines less than pi apart), got {initial_angles}")
    span = np.pi if real else 2 * np.pi
    angles = list(np.linspace(0.0, span, initial_angles))
    values = [support(theta) for theta in angles]
    if not real:
        values[-1] = values[0]  # theta = 2 pi is theta = 0

    def vertex(i: int) -> complex:
        a, b = angles[i], angles[i + 1]
        fa, fb, gap = values[i], values[i + 1], b - a
        # e^{i a} z = fa + i t with Re(e^{i b} z) = fb  =>  t = (fa cos(gap) - fb) / sin(gap)
        t = (fa * np.cos(gap) - fb) / np.sin(gap)
        return complex(np.exp(-1j * a) * (fa + 1j * t))

    while True:
        vertices = [vertex(i) for i in range(len(angles) - 1)]
        moduli = np.abs(vertices)
        lower = max(values)
        upper = max(float(moduli.max()), lower)
        if upper - lower <= tolerance * max(lower, np.finfo(float).tiny) or len(values) >= max_evaluations:
            return NumericalRadius(lower, upper, len(values), values[0])
        worst = int(np.argmax(moduli))
        # look straight at the worst vertex: if it is a corner of W(A) this closes the bracket at once
        # (Re(e^{i theta} z) = |z| at theta = -arg z; for real A its mirror +arg z is the same line's twin)
        theta = abs(np.angle(vertices[worst])) if real else -np.angle(vertices[worst]) % span
        if min(abs(np.array(angles) - theta)) < 1e-9 * span:  # already there: halve the interval instead
            theta = (angles[worst] + angles[worst + 1]) / 2
        position = int(np.searchsorted(angles, theta))
        angles.insert(position, theta)
        values.insert(position, support(theta))


def complex_schur_of_real_schur(real_schur_form: np.ndarray) -> np.ndarray:
    """The upper triangular complex Schur form of a real Schur form T: each 2 x 2 block split by one
    Givens rotation, O(d^2) in all. scipy.linalg.rsf2csf's loop, line for line (so its T bit for bit), without
    the basis it also rotates: that would be a d x d complex identity here (256 MiB at d = 4096), unused."""
    triangular = np.array(real_schur_form, dtype=np.complex128, order="F")
    eps = np.finfo(np.float64).eps
    for m in range(len(triangular) - 1, 0, -1):
        if abs(triangular[m, m - 1]) > eps * (abs(triangular[m - 1, m - 1]) + abs(triangular[m, m])):
            mu = scipy.linalg.eigvals(triangular[m - 1:m + 1, m - 1:m + 1]) - triangular[m, m]
            r = np.linalg.norm([mu[0], triangular[m, m - 1]])
            c, s = mu[0] / r, triangular[m, m - 1] / r
            rotation = np.array([[c.conj(), s], [-s, c]], dtype=np.complex128)
            triangular[m - 1:m + 1, m - 1:] = rotation.dot(triangular[m - 1:m + 1, m - 1:])
            triangular[:m + 1, m - 1:m + 1] = triangular[:m + 1, m - 1:m + 1].dot(rotation.conj().T)
        triangular[m, m - 1] = 0.0
    return triangular


def _distinct(angles: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
    """Sorted angles with those closer than ``tolerance`` merged: a conjugate pair's |arg| agree only to
    rounding, and np.unique kept both (one ray marched twice)."""
    angles = np.sort(angles)
    return angles[np.concatenate([[True], np.diff(angles) > tolerance])]


def _check_schur_form_of(matrix: np.ndarray, schur_form) -> None:
    """A stored Schur form must be this matrix's: same shape, trace and Frobenius norm (similarity by an
    orthogonal Z keeps both; a backward-stable Schur form agrees to ~d eps). O(d^2): it catches a Schur
    form left from Jacobians that have since been remeasured."""
    if np.iscomplexobj(matrix) or np.shape(schur_form) != matrix.shape:
        raise ValueError(f"a real Schur form of shape {np.shape(schur_form)} does not belong to this "
                         f"{'complex ' if np.iscomplexobj(matrix) else ''}{matrix.shape} matrix")
    scale = max(float(np.linalg.norm(matrix)), np.finfo(float).tiny)
    trace_gap = abs(float(np.trace(schur_form)) - float(np.trace(matrix))) / scale
    norm_gap = abs(float(np.linalg.norm(schur_form)) - float(np.linalg.norm(matrix))) / scale
    if max(trace_gap, norm_gap) > 1e-9:
        raise ValueError(f"the stored Schur form does not belong to this matrix (trace and Frobenius norm differ by "
                         f"{trace_gap:.1e} and {norm_gap:.1e} of ||J||_F): the Jacobians changed after the Schur "
                         "forms were computed; rematerialize spectral_analysis for this partition")


class ShiftedSchur:
    """sigma_min(z I - A) for many z from one complex Schur form A = Q T Q* (unitary invariance)."""

    def __init__(self, matrix, *, dense_limit: int = DENSE_LIMIT, svd_limit: int = DENSE_SVD_LIMIT,
                 real_schur_form: np.ndarray | None = None, spectral_norm: float | None = None) -> None:
        """``real_schur_form``: T of A = Z T Z^T when another step already factored A (resdyn.spectra's), so A is
        not factored again; ``spectral_norm``: ||A||_2 when its singular values are already known."""
        matrix = _float64(matrix)
        if not np.isfinite(matrix).all():
            raise FloatingPointError("the matrix has non-finite entries; rematerialize the jacobians partition")
        self.real = not np.iscomplexobj(matrix)
        if real_schur_form is not None:
            _check_schur_form_of(matrix, real_schur_form)
            triangular = complex_schur_of_real_schur(real_schur_form)
        elif self.real:  # real Schur form, then its 2 x 2 blocks split by Givens rotations: 3x faster at d = 4096
            triangular = complex_schur_of_real_schur(scipy.linalg.schur(matrix, output="real")[0])
        else:
            triangular, _ = scipy.linalg.schur(matrix, output="complex")
        # Fortran order (what LAPACK returns; pinned here and kept by z I - T): a C-ordered factor would be
        # copied transposed at every triangular solve (measured at d = 4096: 0.27 s per solve against 0.008 s)
        self.triangular = np.asfortranarray(triangular)
        self.eigenvalues = np.diag(self.triangular).copy()
        if spectral_norm is not None:
            self.norm = float(spectral_norm)
        else:
            self.norm = float(scipy.linalg.norm(matrix, 2)) if len(matrix) <= dense_limit else _spectral_norm(matrix)
        self.dense = len(matrix) <= min(dense_limit, svd_limit)  # sigma_min by a dense SVD per point
        self.dense_grid = len(matrix) <= min(dense_limit, 256)  # contour grids: batched dense SVDs
        self._negated = -self.triangular  # z I - T for the point at hand (_shifted_in_place), Fortran-ordered
        self._start = np.random.default_rng(0).standard_normal(len(matrix)) + 0j
        self.sigma_at_zero = self.smallest_singular_value(0.0)

    def shifted(self, z: complex) -> np.ndarray:
        """A new z I - T (Fortran-ordered)."""
        return self._shifted_in_place(z).copy(order="F")

    def _shifted_in_place(self, z: complex) -> np.ndarray:
        """z I - T in one buffer kept between points, only its diagonal rewritten: a fresh copy is O(d^2) per
        point (at d = 1024 copying cost more than the Lanczos solves it feeds). Valid until the next call."""
        self._negated[np.diag_indices_from(self._negated)] = -self.eigenvalues + z
        return self._negated

    def smallest_singular_triple(self, z: complex, tolerance: float = SIGMA_MIN_TOLERANCE) -> tuple[float, np.ndarray, np.ndarray]:
        """(sigma_min, u, v) of R = z I - T with R v = sigma u; ``tolerance``: relative accuracy of the Lanczos
        eigenvalue 1 / sigma_min^2 (d > DENSE_SVD_LIMIT)."""
        shifted = self._shifted_in_place(z)
        if self.dense:
            u, s, vh = np.linalg.svd(shifted)
            return float(s[-1]), u[:, -1], vh[-1].conj()
        def inverse_gram(x):  # (R* R)^{-1} x by two triangular solves: O(d^2), never an inverse
            # T was checked finite once (__init__); scipy's default check rereads all of R at every solve
            # (at d = 4096: 0.036 s per solve with it, 0.008 s without)
            inner = scipy.linalg.solve_triangular(shifted, x, trans="C", check_finite=False)
            return scipy.linalg.solve_triangular(shifted, inner, check_finite=False)

        # Lanczos for the largest eigenvalue 1 / sigma_min^2, warm-started from the previous z's vector
        d = len(shifted)
        v = _largest_hermitian_eigenvector(inverse_gram, self._start, tolerance) if LANCZOS_BACKEND == "complex" else None
        if v is None:  # not converged in LANCZOS_STEPS (or asked for): ARPACK on the real embedding
            _, stacked = _largest_real_symmetric_eigenpair(_as_real_operator(inverse_gram, d), 2 * d,
                                                           np.concatenate([self._start.real, self._start.imag]),
                                                           tolerance=tolerance, which="LM", ncv=6)
            v = stacked[:d] + 1j * stacked[d:]
        v /= np.linalg.norm(v)
        self._start = v
        image = shifted @ v
        sigma = float(np.linalg.norm(image))
        return sigma, image / sigma if sigma > 0 else image, v

    def smallest_singular_value(self, z: complex, tolerance: float = SIGMA_MIN_TOLERANCE) -> float:
        if self.dense:
            return float(np.linalg.svd(self._shifted_in_place(z), compute_uv=False)[-1])
        return self.smallest_singular_triple(z, tolerance)[0]

    def outermost_crossing(self, theta: float, epsilon: float, tolerance: float = RADIAL_TOLERANCE, *,
                           outside: float | None = None) -> float:
        """The largest r with sigma_min(r e^{i theta} I - A) <= epsilon (0 if the ray never enters).

        ``outside``: a radius beyond which the ray is known to stay outside (default ||A|| + 2 eps, where
        sigma_min(z I - A) >= |z| - ||A|| > eps); the crossing for a larger eps is one (pseudospectra nest)."""
        direction = np.exp(1j * theta)
        if outside is not None and self.smallest_singular_value(outside * direction) <= epsilon:
            outside = None  # the hint was not outside after all: start from where nothing can be inside
        outside = self.norm + 2 * epsilon if outside is None else outside
        r = outside
        for _ in range(200):  # Newton from outside; the first point found inside closes a bracket
            sigma, u, v = self.smallest_singular_triple(r * direction)
            if sigma <= epsilon:
                break
            slope = float(np.real(direction * np.vdot(u, v)))
            step = (sigma - epsilon) / slope if slope > 1e-12 else sigma - epsilon
            if step <= tolerance * max(r, 1.0):
                return r  # converged from outside: within tolerance of the crossing
            outside, r = r, r - step
            if r <= 0.0:  # overshot the origin: the ray may never enter
                if self.sigma_at_zero > epsilon:
                    r = max(outside - (sigma - epsilon), 0.0)  # Lipschitz march: nothing skipped is inside
                    if r == 0.0:
                        return 0.0
                else:
                    r = 0.0
        else:
            return r
        if outside - r <= tolerance * max(outside, 1.0) or sigma >= epsilon * (1 - 1e-9):
            return r  # already at the crossing (to rounding)
        try:
            return float(scipy.optimize.brentq(lambda radius: self.smallest_singular_value(radius * direction) - epsilon,
                                               r, outside, xtol=tolerance * max(outside, 1.0)))
        except ValueError:  # the two sigma_min routines disagree in the last bits at the bracket's end
            return r

    def pseudospectral_radius(self, epsilon: float, *, angles: int = 8) -> float:
        """rho_eps(A) = max over rays of the outermost crossing, the best ray refined (module docstring)."""
        return self.pseudospectral_radii([epsilon], angles=angles)[epsilon]

    def pseudospectral_radii(self, epsilons: Iterable[float], *, angles: int = 8) -> dict[float, float]:
        """rho_eps(A) for each eps, largest eps first: each ray starts at its crossing for the previous eps."""
        largest = self.eigenvalues[np.argsort(-np.abs(self.eigenvalues))[:4]]
        if self.real:  # the pseudospectra of a real matrix are symmetric about the real axis
            thetas = _distinct(np.concatenate([np.linspace(0, np.pi, angles // 2 + 1), np.abs(np.angle(largest))]))
        else:
            thetas = _distinct(np.concatenate([np.linspace(-np.pi, np.pi, angles, endpoint=False), np.angle(largest)]))
        width = 2 * np.pi / angles
        starts = [None] * len(thetas)
        radii_by_epsilon = {}
        for epsilon in sorted({float(e) for e in epsilons}, reverse=True):
            radii = np.array([self.outermost_crossing(theta, epsilon, outside=start)
                              for theta, start in zip(thetas, starts)])
            best = int(np.argmax(radii))
            # a hint only: checked, and dropped if inside. A closer start (best + eps / 2) is ~20% cheaper on
            # average but moved one Ginibre matrix's rho_eps (d = 1024, eps = 1e-3) to another local maximum, 4e-4 away
            beyond = radii[best] * 1.05 + epsilon

            def negative_crossing(theta, epsilon=epsilon, beyond=beyond):
                return -self.outermost_crossing(theta, epsilon, outside=beyond)

            refined = scipy.optimize.minimize_scalar(negative_crossing, bounds=(thetas[best] - width, thetas[best] + width),
                                                     method="bounded", options={"xatol": 1e-3})
            radii_by_epsilon[epsilon] = float(max(radii[best], -refined.fun))
            starts = [radius + 1e-12 if radius > 0 else None for radius in radii]
        return radii_by_epsilon

    def sigma_min_grid(self, real: np.ndarray, imaginary: np.ndarray, *, device: str = "cpu") -> np.ndarray:
        """sigma_min(z I - A) on the grid z = real[j] + i imaginary[i] (pseudospectra contours): batched
        dense singular values on ``device`` (torch: the GPU when there is one) up to d = 256, Lanczos
        iteration beyond."""
        points = (real[None, :] + 1j * imaginary[:, None]).ravel()
        if not self.dense_grid:
            return np.array([self.smallest_singular_value(z, GRID_TOLERANCE)
                             for z in points]).reshape(len(imaginary), len(real))
        import torch  # only here: the rest of this module is numpy/scipy

        from resdyn.models.devices import resolve_device

        device = resolve_device(device)
        triangular = torch.as_tensor(self.triangular, device=device)
        identity = torch.eye(len(triangular), dtype=triangular.dtype, device=device)
        values = []
        per_chunk = max(1, int(2**28 // (16 * len(triangular) ** 2)))  # about 256 MB of shifted matrices
        for chunk in np.array_split(points, max(1, len(points) // per_chunk)):
            shifts = torch.as_tensor(chunk, device=device)[:, None, None]
            values.append(torch.linalg.svdvals(shifts * identity - triangular)[:, -1].cpu().numpy())
        return np.concatenate(values).reshape(len(imaginary), len(real))

    def contour_grid(self, margin: float, *, points: int = 48,
                     device: str = "cpu") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """sigma_min on a grid over the eigenvalues' bounding box widened by ``margin`` on every side (the
        caller passes how far the largest eps-pseudospectrum reaches beyond the spectrum), square cells."""
        low_re, high_re = self.eigenvalues.real.min() - margin, self.eigenvalues.real.max() + margin
        low_im, high_im = self.eigenvalues.imag.min() - margin, self.eigenvalues.imag.max() + margin
        half = max(high_re - low_re, high_im - low_im) / 2
        centre_re, centre_im = (low_re + high_re) / 2, (low_im + high_im) / 2
        real = np.linspace(centre_re - half, centre_re + half, points)
        imaginary = np.linspace(centre_im - half, centre_im + half, points)
        return real, imaginary, self.sigma_min_grid(real, imaginary, device=device)


def _spectral_norm(matrix: np.ndarray) -> float:
    start = np.random.default_rng(0).standard_normal(min(matrix.shape))
    return float(scipy.sparse.linalg.svds(matrix, k=1, v0=start, tol=1e-13, return_singular_vectors=False)[0])


def kreiss_lower_bound(pseudospectral_radii: dict[float, float]) -> float:
    """max over the eps grid of (rho_eps - 1) / eps: a lower bound on the Kreiss constant (T&E 18)."""
    return float(max((radius - 1.0) / epsilon for epsilon, radius in pseudospectral_radii.items()))


@dataclass
class TransientDynamics:
    """The per-sublayer scalars of the ``transient_dynamics`` table and its rows of ``pseudospectra``;
    ``contour`` = (real grid, imaginary grid, sigma_min on it, eigenvalues) when one was asked for."""

    spectral_radius: float
    spectral_norm: float
    numerical_abscissa: float
    numerical_abscissa_j_minus_i: float
    numerical_radius: float
    numerical_radius_upper: float
    pseudospectral_radii: dict[float, float]
    contour: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def kreiss_lower_bound(self) -> float:
        return kreiss_lower_bound(self.pseudospectral_radii)


def analyse_transient(matrix, *, epsilons: Iterable[float] = PSEUDOSPECTRAL_EPSILONS,
                      dense_limit: int = DENSE_LIMIT, contour_points: int = 0, device: str = "cpu",
                      real_schur_form: np.ndarray | None = None, spectral_norm: float | None = None) -> TransientDynamics:
    """Every transient scalar of one matrix from one complex Schur form; with ``contour_points`` also the
    sigma_min grid for a pseudospectra plot, reusing that Schur form (margin: 1.5 x how far the largest
    eps-pseudospectrum reaches beyond the spectral radius, at least 1.5 x the largest eps).

    Given the matrix's ``real_schur_form`` and ``spectral_norm`` (what resdyn.spectra.analyse_sublayer already
    computed), the matrix is not factored again: the complex form comes from T (complex_schur_of_real_schur),
    the same one a fresh real Schur form gives (bit for bit in the tests; LAPACK run with other thread counts
    may differ in the last bits), after a check that T is this matrix's (trace and Frobenius norm)."""
    matrix = _float64(matrix)
    schur = ShiftedSchur(matrix, dense_limit=dense_limit, real_schur_form=real_schur_form, spectral_norm=spectral_norm)
    radius = numerical_radius(matrix, dense_limit=dense_limit)
    rho = float(np.abs(schur.eigenvalues).max())
    radii = schur.pseudospectral_radii(epsilons)
    contour = None
    if contour_points:
        reach = max(max(radii.values()) - rho, max(radii))
        contour = (*schur.contour_grid(1.5 * reach, points=contour_points, device=device), schur.eigenvalues)
    return TransientDynamics(
        spectral_radius=rho,
        spectral_norm=schur.norm,
        numerical_abscissa=radius.abscissa,
        numerical_abscissa_j_minus_i=radius.abscissa - 1.0,  # omega(A - I) = omega(A) - 1: its Hermitian part is H - I
        numerical_radius=radius.lower,
        numerical_radius_upper=radius.upper,
        pseudospectral_radii=radii,
        contour=contour,
    )


def product_norm(factors: list[np.ndarray], *, dense_limit: int = DENSE_LIMIT) -> float:
    """||F_k ... F_1||_2 for factors in application order F_1 first; a matrix-free Lanczos SVD above
    dense_limit (k matrix-vector products per step, never the d x d product)."""
    d = factors[0].shape[0]
    if d <= dense_limit:
        product = factors[0]
        for factor in factors[1:]:
            product = factor @ product
        return float(np.linalg.norm(product, 2))

    def forward(x):
        for factor in factors:
            x = factor @ x
        return x

    def adjoint(x):
        for factor in reversed(factors):
            x = factor.T @ x
        return x

    operator = scipy.sparse.linalg.LinearOperator((d, d), matvec=forward, rmatvec=adjoint, dtype=np.float64)
    start = np.random.default_rng(0).standard_normal(d)
    return float(scipy.sparse.linalg.svds(operator, k=1, v0=start, tol=1e-13, return_singular_vectors=False)[0])


@dataclass(frozen=True)
class GrowthWindow:
    start_depth: int
    window: int
    product_norm: float
    spectral_radius_product: float

    @property
    def growth_beyond_spectrum(self) -> float:
        return self.product_norm / self.spectral_radius_product if self.spectral_radius_product > 0 else np.inf


def transient_growth(matrices: Iterable[np.ndarray], spectral_radii: Iterable[float], *,
                     windows: Iterable[int] = GROWTH_WINDOWS, full_depth: bool = True,
                     dense_limit: int = DENSE_LIMIT, spectral_norms: Iterable[float] | None = None) -> Iterator[GrowthWindow]:
    """Every window of consecutive maps in depth order, streamed: at most max(windows) matrices are held,
    plus the running full-depth product (one more matrix) when ``full_depth``. ``spectral_norms``: each map's
    ||J||_2 when its singular values are already known (the window of one map then costs nothing)."""
    windows = sorted(set(windows))
    recent: deque = deque(maxlen=max(windows))
    full, full_radius, count = None, 1.0, 0
    norms = spectral_norms if spectral_norms is not None else itertools.repeat(None)
    for end, (matrix, radius, known_norm) in enumerate(zip(matrices, spectral_radii, norms, strict=spectral_norms is not None)):
        matrix = np.asarray(matrix, dtype=np.float64)
        recent.append((matrix, float(radius)))
        count += 1
        for window in windows:
            if window <= len(recent):
                chosen = list(recent)[-window:]
                norm = float(known_norm) if window == 1 and known_norm is not None else \
                    product_norm([m for m, _ in chosen], dense_limit=dense_limit)
                yield GrowthWindow(end - window + 1, window, norm, float(np.prod([r for _, r in chosen])))
        if full_depth:
            full = matrix.copy() if full is None else matrix @ full
            full_radius *= float(radius)
    if full_depth and count > 0 and count not in windows:
        yield GrowthWindow(0, count, float(np.linalg.norm(full, 2)) if count and len(full) <= dense_limit
                           else _spectral_norm(full), full_radius)
