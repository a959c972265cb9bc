"""The polar normal part of a square matrix: a normal matrix with its spectrum that depends on no basis choice.

Definition. Let J = V Lambda V^{-1} be an eigendecomposition of J in C^{d x d}, the columns of V scaled to unit
2-norm, and let V = U H be the polar decomposition of V (U unitary, H Hermitian positive definite; from the SVD
V = W Sigma Y^*, U = W Y^* and H = Y Sigma Y^*: Higham, Functions of Matrices, SIAM 2008, ch. 8). The polar
normal part of J is

    N = U Lambda U^*.

U is the unitary matrix nearest to V in every unitarily invariant norm (Fan & Hoffman 1955, Proc. Amer. Math.
Soc. 6, 111-116; Higham 2008, ch. 8), so N is the normal matrix with J's spectrum whose eigenvectors are nearest
to J's unit eigenvectors. It is not in general the normal matrix nearest to J in the Frobenius norm (that one
need not keep J's spectrum; Ruhe 1987, "Closest normal matrix finally found!", BIT 27, 585-598).

Properties (V nonsingular, so that the polar factor U is unique: Higham 2008, ch. 8):

* N is normal: N N^* = U Lambda Lambda^* U^* = U Lambda^* Lambda U^* = N^* N (diagonal matrices commute).
* N has J's spectrum exactly: N = U Lambda U^{-1} is similar to Lambda.
* N does not depend on the order of the eigenpairs: V -> V Q, Lambda -> Q^T Lambda Q for a permutation Q gives
  V Q = (U Q)(Q^T H Q), a polar decomposition (U Q unitary, Q^T H Q Hermitian positive definite), so by
  uniqueness U -> U Q and N -> U Q Q^T Lambda Q Q^T U^* = N.
* nor on the eigenvectors' phases: V -> V Phi, Phi diagonal unitary, gives V Phi = (U Phi)(Phi^* H Phi), so
  U -> U Phi and N -> U Phi Lambda Phi^* U^* = N (Phi and Lambda are diagonal).
* N is real for real J: the eigenpairs of a real J come in conjugate pairs; with each pair's columns adjacent,
  conj(V) = V P and conj(Lambda) = P^T Lambda P for the permutation P that swaps each pair (a real eigenvalue's
  unit eigenvector taken real: by the phase invariance any phase gives the same N). conj(V) = conj(U) conj(H)
  and V P = (U P)(P^T H P) are then two polar decompositions of one matrix, so conj(U) = U P and
  conj(N) = U P P^T Lambda P P^T U^* = N.
* N = J for a normal J: eigenvectors of distinct eigenvalues are then orthogonal, so V^* V and H are block diagonal
  over the eigenspaces, U = V H^{-1} has orthonormal columns spanning each eigenspace, and N = sum_mu mu P_mu = J
  (P_mu the orthogonal projector on the eigenspace of mu). With distinct eigenvalues V is unitary: U = V, H = I.

The unit-norm scaling of V's columns is what fixes N: for a positive diagonal D, V D = U (H D) is not a polar
decomposition (H D is not Hermitian), and the polar factor of V D is in general another unitary matrix, so
without the normalisation N would depend on the lengths of the eigenvectors. For a repeated eigenvalue the unit
eigenvectors are determined only up to a change of basis of the eigenspace; a unitary one leaves N unchanged
(as the phases do), a non-unitary one in general does not (unless J is normal).

From the real Schur form. The pipeline already has J = Z T Z^T (Z orthogonal, T quasi upper triangular), so no
second eigendecomposition of J is made: the eigenvectors X of T come from LAPACK's DTREVC
(:func:`quasi_triangular_eigenvectors`), V = Z X has the column norms of X, and Z X = (Z U_X) H_X for the polar
decomposition X = U_X H_X of X with unit columns (Z U_X is unitary), so U = Z U_X and N = Z (U_X Lambda U_X^*)
Z^T.

In real arithmetic. DTREVC stores the vector of a conjugate pair (lambda, conj(lambda)), Im lambda > 0, at the
pair's columns k, k + 1 as x_k = Re v, x_{k+1} = Im v. With the unit-norm scaling, V = R Omega for the real matrix
R = X S (S diagonal: 1 / ||x_k|| for a real eigenvalue, sqrt(2) / sqrt(||x_k||^2 + ||x_{k+1}||^2) on both columns
of a pair) and the unitary block diagonal Omega (1 for a real eigenvalue, [[1, 1], [i, -i]] / sqrt(2) for a pair):
column k of R Omega is (x_k + i x_{k+1}) / ||x_k + i x_{k+1}||, column k + 1 its conjugate. With the real polar
decomposition R = Q H_R (Q orthogonal), V = (Q Omega)(Omega^* H_R Omega) is V's polar decomposition, so
U = Q Omega and

    N = Q (Omega Lambda Omega^*) Q^T = Q M Q^T,

M block diagonal and real: lambda for a real eigenvalue, [[a, b], [-b, a]] for a pair a +- i b, b > 0. N is thus
computed, and is real, without complex arithmetic: one real SVD R = W Sigma Y^T (Q = W Y^T) and real products.
This is the same N as the complex construction (tested against numpy.linalg.eig and scipy.linalg.polar).

Conditioning. U's sensitivity to V grows like 1 / sigma_min(V) (Higham 2008, ch. 8), and V is ill-conditioned
when J has close eigenvalues with nearly parallel eigenvectors; for a defective J, V is singular and the polar
factor is not unique. When sigma_min(V) <= d eps sigma_max(V) a RuntimeWarning says so and the N of the computed
SVD is returned: still normal, real and with J's eigenvalues, but no longer determined by J alone.
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.linalg.cython_lapack

from .spectra import eigenvalues_of_schur_form, real_schur_form, schur_blocks


def _lapack_dtrevc():
    """LAPACK's DTREVC as a ctypes function. scipy.linalg.lapack has no wrapper for it; scipy.linalg.cython_lapack
    exports the C function of the LAPACK scipy is linked to, as a PyCapsule named by its signature
    (side, howmny, select, n, t, ldt, vl, ldvl, vr, ldvr, mm, m, work, info; Fortran conventions, no string
    lengths)."""
    capsule = scipy.linalg.cython_lapack.__pyx_capi__["dtrevc"]
    name_of = ctypes.pythonapi.PyCapsule_GetName
    name_of.restype, name_of.argtypes = ctypes.c_char_p, [ctypes.py_object]
    pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
    pointer_of.restype, pointer_of.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    char, integer, double = (ctypes.POINTER(t) for t in (ctypes.c_char, ctypes.c_int, ctypes.c_double))
    prototype = ctypes.CFUNCTYPE(None, char, char, integer, integer, double, integer, double, integer, double,
                                 integer, integer, integer, double, integer)
    return prototype(pointer_of(capsule, name_of(capsule)))


_DTREVC = None


def quasi_triangular_eigenvectors(schur_form: np.ndarray) -> np.ndarray:
    """Right eigenvectors of a real quasi upper triangular T (a real Schur form), by LAPACK's DTREVC.

    Parameters
    ----------
    schur_form : (d, d) array
        T, with LAPACK's standardised 2x2 blocks [[a, b], [c, a]], b c < 0, for the complex pairs.

    Returns
    -------
    (d, d) float64 array
        X in DTREVC's real storage: for a real eigenvalue T[k, k], T x_k = T[k, k] x_k; for the pair at rows
        k, k + 1, v = x_k + i x_{k+1} is the eigenvector of the eigenvalue a + i sqrt(-b c) (positive imaginary
        part), T v = lambda v, and conj(v) that of conj(lambda). DTREVC scales each vector so that its element
        of largest |Re| + |Im| has that value 1 (not unit 2-norm). Column k of X is found by back substitution
        in the leading k x k block (Anderson et al., LAPACK Users' Guide, 3rd ed., SIAM 1999), ~ d^3 / 3 flops
        in all.

    Raises
    ------
    np.linalg.LinAlgError
        When DTREVC reports an error (INFO != 0).
    """
    global _DTREVC
    if _DTREVC is None:
        _DTREVC = _lapack_dtrevc()
    form = np.array(schur_form, dtype=np.float64, order="F")
    d = len(form)
    vectors, unused = np.zeros((d, d), order="F"), np.zeros((1, 1), order="F")
    work, select = np.zeros(3 * max(d, 1)), np.zeros(1, dtype=np.intc)
    side, howmny = ctypes.c_char(b"R"), ctypes.c_char(b"A")
    n, leading, one, found, info = (ctypes.c_int(v) for v in (d, max(d, 1), 1, 0, 0))

    def doubles(array):
        return array.ctypes.data_as(ctypes.POINTER(ctypes.c_double))

    _DTREVC(ctypes.byref(side), ctypes.byref(howmny), select.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
            ctypes.byref(n), doubles(form), ctypes.byref(leading), doubles(unused), ctypes.byref(one),
            doubles(vectors), ctypes.byref(leading), ctypes.byref(n), ctypes.byref(found), doubles(work),
            ctypes.byref(info))
    if info.value != 0:
        raise np.linalg.LinAlgError(f"LAPACK dtrevc failed (INFO = {info.value})")
    return vectors


def eigenvalue_blocks(schur_form: np.ndarray) -> np.ndarray:
    """M = Omega Lambda Omega^*: the real block diagonal matrix with T's eigenvalues (module docstring), in T's
    block order: M[k, k] = lambda for a 1x1 block; [[a, b], [-b, a]] for a 2x2 block with eigenvalues a +- i b,
    b > 0 (:func:`resdyn.spectra.eigenvalues_of_schur_form`)."""
    eigenvalues = eigenvalues_of_schur_form(schur_form)
    blocks = np.diag(eigenvalues.real.copy())
    for start, size in schur_blocks(schur_form):
        if size == 2:
            imaginary = eigenvalues[start].imag
            if not imaginary > 0:
                raise ValueError(f"the 2x2 block at row {start} of the Schur form has real eigenvalues "
                                 f"{eigenvalues[start:start + 2]}: not a standardised real Schur form")
            blocks[start, start + 1], blocks[start + 1, start] = imaginary, -imaginary
    return blocks


def _times_tridiagonal(vectors: np.ndarray, tridiagonal: np.ndarray) -> np.ndarray:
    """vectors @ tridiagonal in O(d^2): column j is v_j t_jj + v_{j-1} t_{j-1,j} + v_{j+1} t_{j+1,j}."""
    product = vectors * np.diagonal(tridiagonal)
    product[:, 1:] += vectors[:, :-1] * np.diagonal(tridiagonal, 1)
    product[:, :-1] += vectors[:, 1:] * np.diagonal(tridiagonal, -1)
    return product


def max_eigenpair_residual(matrix: np.ndarray, vectors: np.ndarray, blocks: np.ndarray) -> float:
    """max_i ||A u_i - lambda_i u_i||_2 over the unit eigenvectors u_i that an orthogonal Q and the block diagonal
    M of :func:`eigenvalue_blocks` stand for (U = Q Omega, module docstring).

    With E = A Q - Q M: a real eigenvalue's residual is ||E e_k||; a pair's vector u = (q_k + i q_{k+1}) / sqrt(2)
    has A u - lambda u = (E e_k + i E e_{k+1}) / sqrt(2), of norm sqrt((||E e_k||^2 + ||E e_{k+1}||^2) / 2), and so
    has its conjugate. lambda_i is an exact eigenvalue of A - r_i u_i^* (r_i the residual), a matrix within
    ||r_i||_2 of A; for a normal A = W D W^*, ||r_i|| = ||(D - lambda_i) W^* u_i|| >= min_mu |mu - lambda_i|, so
    lambda_i lies within ||r_i||_2 of A's spectrum. Cost: one product A Q (2 d^3 flops)."""
    residual = np.asarray(matrix) @ vectors - _times_tridiagonal(vectors, blocks)
    squares = np.einsum("ij,ij->j", residual, residual)
    pair = np.flatnonzero(np.diagonal(blocks, -1) != 0.0)
    mean = (squares[pair] + squares[pair + 1]) / 2
    squares[pair], squares[pair + 1] = mean, mean
    return float(np.sqrt(squares.max())) if len(squares) else 0.0


def _unit_eigenvectors(form: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """R = X S: T's eigenvectors in DTREVC's real storage scaled so that V = R Omega has unit columns (module
    docstring); V and R have the same singular values (Omega is unitary)."""
    vectors = quasi_triangular_eigenvectors(form)
    squares = np.einsum("ij,ij->j", vectors, vectors)
    pair = np.flatnonzero(np.diagonal(blocks, -1) != 0.0)
    scale = 1.0 / np.sqrt(squares)
    together = np.sqrt(2.0 / (squares[pair] + squares[pair + 1]))  # both columns of a pair: sqrt(2) / ||x_k + i x_k+1||
    scale[pair], scale[pair + 1] = together, together
    return vectors * scale


def _condition(singular_values: np.ndarray) -> float:
    return float(singular_values[0] / singular_values[-1]) if singular_values[-1] > 0 else float("inf")


def eigenvector_condition_number(schur_form: np.ndarray) -> float:
    """kappa(V) = sigma_max(V) / sigma_min(V) for the unit-column eigenvector matrix V of J = Z T Z^T, from T.

    kappa(V) >= 1; it is 1 for a normal J with distinct eigenvalues and only for a normal J (unit columns that are
    orthonormal); for a defective J it is infinite in exact arithmetic and of the order of 1 / eps in floating
    point (DTREVC perturbs a repeated diagonal: a 2 x 2 Jordan block gives about 1e16). It is the Bauer-Fike constant (every eigenvalue of J + E lies within
    kappa(V) ||E||_2 of J's spectrum: Bauer & Fike 1960, Numer. Math. 2, 137-141) and, with unit columns, within a
    factor sqrt(d) of the smallest condition number over the columns' scalings (van der Sluis 1969, Numer. Math.
    14, 14-23); Trefethen & Embree, Spectra and Pseudospectra (2005), read it as a measure of non-normality. It is
    also the conditioning of the polar
    normal part (module docstring): U's sensitivity to V grows like 1 / sigma_min(V). Z is orthogonal, so V = Z X S
    Omega has the singular values of R = X S (:func:`_unit_eigenvectors`). Cost: DTREVC (~ d^3 / 3) and the
    singular values of R (no vectors).
    """
    form = np.asarray(schur_form, dtype=np.float64)
    return _condition(scipy.linalg.svdvals(_unit_eigenvectors(form, eigenvalue_blocks(form)), overwrite_a=True,
                                           check_finite=False))


@dataclass(frozen=True)
class PolarNormalForm:
    """The polar normal part of J = Z T Z^T in the Schur basis: N = Z normal_form Z^T (module docstring)."""

    normal_form: np.ndarray  # N_T = Q M Q^T
    polar_factor: np.ndarray  # Q: the real orthogonal polar factor of the unit-column eigenvectors R = X S of T
    blocks: np.ndarray  # M: T's eigenvalues, real block diagonal (eigenvalue_blocks)
    eigenvector_condition: float  # sigma_max(V) / sigma_min(V) of the unit-column eigenvector matrix V
    eigenpair_residual: float  # max_eigenpair_residual(N_T, Q, M): how far T's eigenvalues are from N_T's


def polar_normal_form(schur_form: np.ndarray) -> PolarNormalForm:
    """The polar normal part of a real Schur form T, N_T = Q M Q^T, in real arithmetic (module docstring).

    Parameters
    ----------
    schur_form : (d, d) array
        T, quasi upper triangular with standardised 2x2 blocks (scipy.linalg.schur(output='real')).

    Returns
    -------
    PolarNormalForm
        N_T, Q, M, the condition number of V and the eigenpair residual. Steps: X by DTREVC
        (:func:`quasi_triangular_eigenvectors`, ~ d^3 / 3 flops); R = X S (unit-norm eigenvectors, real storage);
        the SVD R = W Sigma Y^T (LAPACK gesdd) and Q = W Y^T; N_T = (Q M) Q^T; the residual
        ||N_T Q - Q M|| (one more product). Measured at d = 576 and 640 on two shared cores: about half the time of
        the real Schur form itself (the SVD most of it).

    Warns
    -----
    RuntimeWarning
        When V is numerically singular (sigma_min <= d eps sigma_max: J defective or nearly so); N_T is then one
        normal matrix with T's eigenvalues, not the unique polar normal part (module docstring).
    """
    form = np.asarray(schur_form, dtype=np.float64)
    d = len(form)
    blocks = eigenvalue_blocks(form)
    left, singular_values, right_transposed = scipy.linalg.svd(_unit_eigenvectors(form, blocks), overwrite_a=True,
                                                               check_finite=False)
    condition = _condition(singular_values)
    if singular_values[-1] <= d * np.finfo(np.float64).eps * singular_values[0]:
        warnings.warn(f"polar normal part: the unit eigenvectors are numerically dependent (condition {condition:.3g}; "
                      "the matrix is defective or nearly so): the polar factor is not unique and N is one normal "
                      "matrix with its eigenvalues, not determined by the matrix alone", RuntimeWarning, stacklevel=2)
    polar_factor = left @ right_transposed
    normal_form = _times_tridiagonal(polar_factor, blocks) @ polar_factor.T
    return PolarNormalForm(normal_form, polar_factor, blocks, condition,
                           max_eigenpair_residual(normal_form, polar_factor, blocks))


def polar_normal_part_from_schur(schur_form: np.ndarray, schur_basis: np.ndarray) -> np.ndarray:
    """N = Z N_T Z^T, the polar normal part of J = Z T Z^T from its real Schur form (module docstring).

    Parameters
    ----------
    schur_form : (d, d) array
        T (scipy.linalg.schur(J, output='real'), or any reordering of it: N does not depend on the order).
    schur_basis : (d, d) array
        Z, orthogonal.

    Returns
    -------
    (d, d) float64 array
        N: normal, real, with J's eigenvalues (see :func:`polar_normal_form` for the cost and the warning).
    """
    basis = np.asarray(schur_basis, dtype=np.float64)
    return basis @ polar_normal_form(schur_form).normal_form @ basis.T


def polar_normal_part(matrix) -> np.ndarray:
    """N = U Lambda U^*, the polar normal part of a real square matrix J (module docstring), through J's real Schur
    form (LAPACK dgees) and :func:`polar_normal_part_from_schur`."""
    schur_form, schur_basis = real_schur_form(np.asarray(matrix, dtype=np.float64))
    return polar_normal_part_from_schur(schur_form, schur_basis)
