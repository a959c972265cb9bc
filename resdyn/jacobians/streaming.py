"""Streaming mean and per-entry variance of matrices, in float64.

Chan, Golub & LeVeque (1979) pairwise update: merging a batch of n_b matrices with mean m_b and
sum of squared deviations S_b into the running (n, m, S) gives

    delta = m_b - m,   n' = n + n_b,   m' = m + delta n_b / n',   S' = S + S_b + delta^2 n n_b / n'.

Only three d x d arrays are kept, whatever the number of samples.
"""

from __future__ import annotations

import numpy as np
import torch


class RunningMoments:
    """Mean and (population) variance of a stream of equally shaped matrices."""

    def __init__(self) -> None:
        self.count = 0
        self.mean: np.ndarray | None = None
        self.sum_squared_deviations: np.ndarray | None = None
        self.has_variance = True

    def add_sum(self, total: torch.Tensor | np.ndarray, count: int) -> None:
        """Fold in a batch known only by its sum (a closed-form backend): the mean stays exact,
        the variance becomes unknown."""
        total = total.detach().to(torch.float64).cpu().numpy() if isinstance(total, torch.Tensor) else total
        total = np.asarray(total, dtype=np.float64)
        self.has_variance = False
        if self.count == 0:
            self.count, self.mean = count, total / count
        else:
            self.mean = self.mean + (total - count * self.mean) / (self.count + count)
            self.count += count

    def update(self, batch: torch.Tensor | np.ndarray) -> None:
        """Fold in a batch of shape (n_b, *matrix_shape)."""
        values = batch.detach().to(torch.float64).cpu().numpy() if isinstance(batch, torch.Tensor) else batch
        values = np.asarray(values, dtype=np.float64)
        n_batch = values.shape[0]
        if n_batch == 0:
            return
        batch_mean = values.mean(axis=0)
        batch_deviations = ((values - batch_mean) ** 2).sum(axis=0)
        if self.count == 0:
            self.count, self.mean, self.sum_squared_deviations = n_batch, batch_mean, batch_deviations
            return
        total = self.count + n_batch
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n_batch / total)
        self.sum_squared_deviations = (
            self.sum_squared_deviations + batch_deviations + delta**2 * (self.count * n_batch / total)
        )
        self.count = total

    @property
    def variance(self) -> np.ndarray | None:
        """Per-entry population variance; None when a batch arrived as a sum only."""
        if self.count == 0:
            raise ValueError("no observations")
        return self.sum_squared_deviations / self.count if self.has_variance else None
