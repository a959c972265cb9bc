"""Factored sums of sublayer Jacobians and RMSNorm derivatives, shared by the closed forms.

A closed form (:mod:`resdyn.jacobians.structured` for the MLP map, :mod:`resdyn.jacobians.structured_attention`
for the attention map) adds, batch by batch, sum_s Delta_s in factored form, where

    J_s = s (I + m Delta_s)

with s the map's output scalar and m its branch's (both 1 when the family has none): weight matrices
that are the same for every sample, times per-sample diagonals and rank-one terms summed over the
samples. The d x d mean E[J] = s (I + m sum_s Delta_s / n) is made once per layer, from the summed
factors, by :meth:`FactoredAccumulator.mean`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..models.precision import rms_norm_gain

INNER_BLOCK = 1024  # rows of the inner dimension combined at a time when a term is turned into its d x d total


# -- factored sums ------------------------------------------------------------------------------


@dataclass
class FactoredTerm:
    """One factored piece of sum_s (J_s - I):

        diag(row_gain) left [core + blocks right_b + sum_k diag(weights_k) right_k
                             + sum_j ((A_j B_j) o moments_j) right'_j] diag(column_gain)

    ``core``, ``blocks`` (per head: (heads, m / heads, e), applied to right_b (heads, e, d) head by
    head), ``weights`` and ``moments`` are sums over samples (added batch by batch); ``left``, the
    gains, the right factors and the fixed products A_j B_j are the layer's weights (shared by all
    batches), so the weight products (d x m x d, and A B) happen once, in :meth:`total`.
    """

    left: torch.Tensor  # d x m
    row_gain: torch.Tensor  # d
    column_gain: torch.Tensor  # d
    core: torch.Tensor | None = None  # m x d
    blocked: tuple | None = None  # (blocks heads x m/heads x e, right heads x e x d)
    weighted: list = field(default_factory=list)  # [(weights m, right m x d)]
    hadamard: list = field(default_factory=list)  # [((A m x k, B k x f), moments m x f, right f x d)]

    def absorb(self, other: FactoredTerm) -> None:
        if other.core is not None:
            self.core = other.core.clone() if self.core is None else self.core.add_(other.core)
        if other.blocked is not None:
            self.blocked[0].add_(other.blocked[0])
        for (weights, _), (more, _) in zip(self.weighted, other.weighted):
            weights.add_(more)
        for (_, moments, _), (_, more, _) in zip(self.hadamard, other.hadamard):
            moments.add_(more)

    @torch.no_grad()
    def total(self) -> torch.Tensor:
        """The d x d sum, the inner dimension taken in blocks so that no m x d temporary is ever whole
        (at d = 4096, d_ff = 14336 one such temporary is 470 MB). The blocked part is folded into the
        core (in place) on the first call."""
        m = self.left.shape[1]
        total = torch.zeros(self.left.shape[0], self.column_gain.shape[0], dtype=self.left.dtype,
                            device=self.left.device)
        core = self.core
        if self.blocked is not None:  # m x d already, like the core: added into it, head by head
            blocks, right = self.blocked
            core = torch.zeros(m, right.shape[-1], dtype=right.dtype, device=right.device) if core is None else \
                core.contiguous()
            core.view(blocks.shape[0], -1, right.shape[-1]).baddbmm_(blocks, right)
            self.core, self.blocked = core, None  # folded: a second call gives the same total
        products: dict[int, torch.Tensor] = {}  # once per layer (independent of the samples), once per pair
        for pair, _, _ in self.hadamard:
            if id(pair) not in products:
                products[id(pair)] = pair[0] @ pair[1]
        fixed = [products[id(pair)] for pair, _, _ in self.hadamard]
        for start in range(0, m, INNER_BLOCK):
            rows = slice(start, min(m, start + INNER_BLOCK))
            block = core[rows].clone() if core is not None else None
            for weights, right in self.weighted:
                if block is None:
                    block = weights[rows, None] * right[rows]
                else:
                    block.addcmul_(weights[rows, None], right[rows])
            for product, (_, moments, right) in zip(fixed, self.hadamard):
                part = (product[rows] * moments[rows]) @ right
                block = part if block is None else block.add_(part)
            block.mul_(self.column_gain[None, :])
            total.addmm_(self.left[:, rows], block)
        return total.mul_(self.row_gain[:, None])


@dataclass
class FactoredSum:
    """sum_s Delta_s over one batch, J_s = s (I + m Delta_s): named factored terms plus rank-one terms
    ((d x n, n x d) pairs), with s the map's output scalar (``scale``) and m its branch's (``branch_scale``).
    """

    terms: dict[str, FactoredTerm]
    outer: list
    scale: float | torch.Tensor = 1.0
    branch_scale: float | torch.Tensor = 1.0


class FactoredAccumulator:
    """Running sum of one sublayer's FactoredSums, with one d x d buffer for all rank-one terms."""

    def __init__(self) -> None:
        self.terms: dict[str, FactoredTerm] = {}
        self.outer: torch.Tensor | None = None
        self.scale = 1.0
        self.branch_scale = 1.0
        self.count = 0

    def add(self, partial: FactoredSum, count: int) -> None:
        self.count += count
        self.scale, self.branch_scale = partial.scale, partial.branch_scale
        for name, term in partial.terms.items():
            if name in self.terms:
                self.terms[name].absorb(term)
            else:
                self.terms[name] = term
        if self.outer is None:
            reference = next(iter(partial.terms.values())).left
            d = reference.shape[0]
            self.outer = torch.zeros(d, d, dtype=reference.dtype, device=reference.device)
        for left, right in partial.outer:
            self.outer.addmm_(left, right)

    def mean(self) -> torch.Tensor:
        """s (I + m sum / n)."""
        total = self.outer
        for term in self.terms.values():
            total = total.add_(term.total())
        total.mul_(self.branch_scale / self.count)
        total.diagonal().add_(1.0)
        return total.mul_(self.scale)


# -- norms --------------------------------------------------------------------------------------


def _norm_terms(norm, z: torch.Tensor):
    """(gain g, per-sample c = 1 / r(z)) of an RMSNorm; (1, 1) when the norm is absent."""
    if norm is None:
        return (torch.ones(z.shape[-1], dtype=z.dtype, device=z.device),
                torch.ones(z.shape[0], dtype=z.dtype, device=z.device))
    gain, eps = rms_norm_gain(norm)
    gain = torch.ones(z.shape[-1], dtype=z.dtype, device=z.device) if gain is None else gain.to(z.dtype)
    return gain, torch.rsqrt(z.pow(2).mean(-1) + eps)


@dataclass(frozen=True)
class NormAt:
    """An RMSNorm's derivative at per-sample points z (rows): dN v = c g v - c^3 (g z)(z . v) / m."""

    gain: torch.Tensor
    scale: torch.Tensor  # c per sample
    z: torch.Tensor
    present: bool

    @classmethod
    def of(cls, norm, z: torch.Tensor) -> NormAt:
        gain, scale = _norm_terms(norm, z)
        return cls(gain, scale, z, norm is not None)

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        if not self.present:
            return v
        c = self.scale[:, None]
        return c * self.gain * v - c**3 * (self.gain * self.z) * (self.z * v).sum(-1, keepdim=True) / v.shape[-1]

    def apply_transpose(self, w: torch.Tensor) -> torch.Tensor:
        if not self.present:
            return w
        c = self.scale[:, None]
        return c * self.gain * w - c**3 * self.z * (self.gain * self.z * w).sum(-1, keepdim=True) / w.shape[-1]


def scalar_factor(value, dtype) -> float | torch.Tensor:
    """A described scalar as a factor of the mean: 1 when absent, a tensor in the computation's dtype."""
    if value is None:
        return 1.0
    return value.to(dtype) if isinstance(value, torch.Tensor) else float(value)
