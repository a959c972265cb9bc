"""Streaming mean and per-entry variance of matrices, in float64, on the device they arrive on.

Chan, Golub & LeVeque (1979) pairwise update: merging a batch of n_b matrices with mean m_b and
sum of squared deviations S_b into the running (n, m, S) gives

    delta = m_b - m,   n' = n + n_b,   m' = m + delta n_b / n',   S' = S + S_b + delta^2 n n_b / n'.

Only three d x d arrays are kept, whatever the number of samples; they stay on the batches'
device (a GPU run never copies per-sample Jacobians to the host) until :attr:`mean` is read.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_float64(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().to(torch.float64)
    return torch.as_tensor(np.asarray(values, dtype=np.float64))


class RunningMoments:
    """Mean and (population) variance of a stream of equally shaped matrices."""

    def __init__(self) -> None:
        self.count = 0
        self._mean: torch.Tensor | None = None
        self._sum_squared_deviations: torch.Tensor | None = None
        self.has_variance = True

    def add_sum(self, total, count: int) -> None:
        """Fold in a batch known only by its sum (a closed-form backend): the mean stays exact,
        the variance becomes unknown."""
        total = _as_float64(total)
        self.has_variance = False
        if self.count == 0:
            self.count, self._mean = count, total / count
        else:
            self._mean = self._mean + (total - count * self._mean) / (self.count + count)
            self.count += count

    def update(self, batch) -> None:
        """Fold in a batch of shape (n_b, *matrix_shape)."""
        values = _as_float64(batch)
        n_batch = values.shape[0]
        if n_batch == 0:
            return
        batch_mean = values.mean(dim=0)
        batch_deviations = ((values - batch_mean) ** 2).sum(dim=0)
        if self.count == 0:
            self.count, self._mean, self._sum_squared_deviations = n_batch, batch_mean, batch_deviations
            return
        total = self.count + n_batch
        delta = batch_mean - self._mean
        self._mean = self._mean + delta * (n_batch / total)
        self._sum_squared_deviations = (
            self._sum_squared_deviations + batch_deviations + delta**2 * (self.count * n_batch / total)
        )
        self.count = total

    @classmethod
    def merged(cls, parts: list[RunningMoments]) -> RunningMoments:
        """The moments of the union of disjoint streams (Chan, Golub & LeVeque's pairwise update, module
        docstring); the variance is known only when every part knows it."""
        total = cls()
        for part in parts:
            if part.count == 0:
                continue
            if total.count == 0:
                total.count, total._mean = part.count, part._mean.clone()
                total._sum_squared_deviations = (None if part._sum_squared_deviations is None
                                                 else part._sum_squared_deviations.clone())
            else:
                count = total.count + part.count
                delta = part._mean - total._mean
                total._mean = total._mean + delta * (part.count / count)
                if total._sum_squared_deviations is not None and part._sum_squared_deviations is not None:
                    total._sum_squared_deviations = (total._sum_squared_deviations + part._sum_squared_deviations
                                                     + delta**2 * (total.count * part.count / count))
                total.count = count
            total.has_variance = total.has_variance and part.has_variance
        return total

    @property
    def mean(self) -> np.ndarray | None:
        return None if self._mean is None else self._mean.cpu().numpy()

    @property
    def variance(self) -> np.ndarray | None:
        """Per-entry population variance; None when a batch arrived as a sum only."""
        if self.count == 0:
            raise ValueError("no observations")
        if not self.has_variance:
            return None
        return (self._sum_squared_deviations / self.count).cpu().numpy()

    def mean_is_finite(self) -> bool:
        return self._mean is None or bool(torch.isfinite(self._mean).all())
