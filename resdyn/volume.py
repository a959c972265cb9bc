"""How a sublayer map changes volume in the residual stream: the log-determinant and the divergence of its Jacobian.

For h' = f(h) with Jacobian J, the map scales an infinitesimal volume around h by |det J| (the change of variables
formula; Liouville's formula for a flow: d/dt log det = trace of the generator). ``log_abs_determinant`` =
log |det J| = sum_i log |lambda_i(J)|, computed from an LU factorization in float64 (numpy.linalg.slogdet, LAPACK
getrf) so that it neither overflows nor underflows at d in the thousands; ``trace_j_minus_i`` = trace(J - I), the
divergence of the residual update h' - h at first order (log det(I + A) = trace A + O(||A||^2)).
Reference: V. I. Arnold, *Ordinary Differential Equations* (1992), section 27.3 (Liouville's theorem).
"""

from __future__ import annotations

import numpy as np


def volume_change(jacobian: np.ndarray) -> dict[str, float]:
    """log |det J|, the sign of det J (-1, 0 or 1), log |det J| / d, and trace(J - I), in float64."""
    matrix = np.asarray(jacobian, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"volume_change needs a square matrix, got shape {matrix.shape}")
    sign, log_abs = np.linalg.slogdet(matrix)
    width = matrix.shape[0]
    return {"log_abs_determinant": float(log_abs), "determinant_sign": int(sign),
            "mean_log_abs_eigenvalue": float(log_abs) / width, "trace_j_minus_i": float(np.trace(matrix) - width)}
