"""The Jacobian engine: mean sublayer Jacobians and boundary activations over a set of samples.

For every sample s, analysed position t, layer l and sublayer k in {attn, mlp}, the exact
Jacobian J = d out_t / d h_t of the sublayer map (other positions held fixed) is produced by a
backend and folded into a streaming float64 mean and per-entry variance; per-sample matrices are
kept only for an optional subsample (for per-sample metrics). :func:`capture_activations` records
the residuals at both boundaries (pre_attn, pre_mlp) at the analysed positions.

Backends implement ``accumulate(adapter, layer, inputs, sublayer, position, moments)`` and
``sample_jacobians(...)``; see :class:`resdyn.jacobians.autodiff.AutodiffBackend`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ..corpus import Sample
from ..models.adapters import BOUNDARIES, SUBLAYERS, FamilyAdapter
from .streaming import RunningMoments

log = logging.getLogger(__name__)


class JacobianBackend(Protocol):
    name: str

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor: ...

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor | None: ...


class NonFiniteJacobianError(FloatingPointError):
    pass


@dataclass
class JacobianAnalysis:
    """Everything the engine measured for one model checkpoint."""

    n_layers: int
    d_model: int
    moments: dict[tuple[int, str], RunningMoments] = field(default_factory=dict)
    observation_index: list[tuple[int, int]] = field(default_factory=list)  # (sample_id, position)
    # (layer, sublayer) -> list of (sample_id, position, d x d float64) for the subsample
    sample_jacobians: dict[tuple[int, str], list[tuple[int, int, np.ndarray]]] = field(default_factory=dict)
    backend_by_sublayer: dict[tuple[int, str], str] = field(default_factory=dict)  # which one made each mean


def analyse_samples(
    model: torch.nn.Module,
    adapter: FamilyAdapter,
    samples: Sequence[Sample],
    *,
    backend: JacobianBackend,
    batch_size: int = 16,
    keep_sample_jacobians: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> JacobianAnalysis:
    """Mean Jacobians of every sublayer and boundary activations over ``samples``.

    ``keep_sample_jacobians`` keeps the per-sample matrices of the first that many samples.
    """
    if not samples:
        raise ValueError("no samples to analyse")
    layers = adapter.decoder_layers(model)
    parameter = next(model.parameters())
    d_model = int(model.config.hidden_size)
    analysis = JacobianAnalysis(n_layers=len(layers), d_model=d_model)
    for key in ((layer, sublayer) for layer in range(len(layers)) for sublayer in SUBLAYERS):
        analysis.moments[key] = RunningMoments()
        analysis.sample_jacobians[key] = []
        describe = getattr(backend, "backend_for", None)
        analysis.backend_by_sublayer[key] = describe(adapter, layers[key[0]], key[1]) if describe else backend.name
    positions = samples[0].positions
    batches = [samples[start : start + batch_size] for start in range(0, len(samples), batch_size)]
    for batch_number, batch in enumerate(batches):
        if any(sample.positions != positions for sample in batch):
            raise ValueError("all samples must share the same analysed positions")
        input_ids = torch.tensor([sample.token_ids for sample in batch], device=parameter.device)
        captured = adapter.capture_layer_inputs(model, input_ids)
        sample_ids = [sample.sample_id for sample in batch]
        analysis.observation_index.extend((s, t) for s in sample_ids for t in positions)
        for layer_index, (layer, inputs) in enumerate(zip(layers, captured)):
            for sublayer in SUBLAYERS:
                key = (layer_index, sublayer)
                for position in positions:
                    jacobians = backend.accumulate(
                        adapter, layer, inputs, sublayer, position, analysis.moments[key]
                    )
                    if analysis.moments[key].mean is not None:
                        _check_finite(analysis.moments[key].mean, key, sample_ids)
                    _keep_subsample(analysis, key, batch, position, jacobians, backend, adapter, layer,
                                    inputs, sublayer, keep_sample_jacobians)
        if progress is not None:
            progress(batch_number + 1, len(batches))
        log.info("jacobians: batch %d/%d done", batch_number + 1, len(batches))
    if hasattr(backend, "finish"):  # backends that defer their weight products to the end
        backend.finish()
    for key, moments in analysis.moments.items():
        _check_finite(moments.mean, key, [samples[0].sample_id, samples[-1].sample_id])
    return analysis


def _keep_subsample(analysis, key, batch, position, jacobians, backend, adapter, layer, inputs, sublayer, keep):
    kept = analysis.sample_jacobians[key]
    wanted = [i for i, sample in enumerate(batch) if sample.sample_id < keep]
    if not wanted:
        return
    if jacobians is None:  # a backend that streams means only: ask for the few per-sample matrices
        jacobians = backend.sample_jacobians(adapter, layer, inputs, sublayer, position)
    for i in wanted:
        kept.append((batch[i].sample_id, position, jacobians[i].detach().to(torch.float64).cpu().numpy()))


def _check_finite(mean: np.ndarray, key: tuple[int, str], sample_ids: list[int]) -> None:
    if not np.isfinite(mean).all():
        raise NonFiniteJacobianError(
            f"non-finite Jacobian in layer {key[0]} sublayer {key[1]} (samples {sample_ids[0]}..{sample_ids[-1]}): "
            "the model overflowed. Run in float64 (dtype='float64'), check the checkpoint's weights for "
            "NaN/inf, or drop those samples."
        )


@torch.no_grad()
def capture_activations(
    model: torch.nn.Module, adapter: FamilyAdapter, samples: Sequence[Sample], *, batch_size: int = 16
) -> tuple[dict[tuple[int, str], np.ndarray], list[tuple[int, int]]]:
    """Residuals at both boundaries of every layer at the analysed positions (forward passes only).

    Returns ``{(layer, boundary): (observations, d_model) float32}`` and the observation index
    ``[(sample_id, position), ...]`` giving each row's sample and position.
    """
    layers = adapter.decoder_layers(model)
    device = next(model.parameters()).device
    parts: dict[tuple[int, str], list[np.ndarray]] = {}
    index: list[tuple[int, int]] = []
    for start in range(0, len(samples), batch_size):
        batch = samples[start : start + batch_size]
        positions = list(batch[0].positions)
        captured = adapter.capture_layer_inputs(model, torch.tensor([s.token_ids for s in batch], device=device))
        index.extend((s.sample_id, t) for s in batch for t in positions)
        for layer_index, (layer, inputs) in enumerate(zip(layers, captured)):
            for boundary in BOUNDARIES:
                residual = adapter.sublayer_input(inputs, layer, boundary)[:, positions]
                rows = residual.to(torch.float32).cpu().numpy().reshape(-1, residual.shape[-1])
                parts.setdefault((layer_index, boundary), []).append(rows)
    return {key: np.concatenate(value) for key, value in parts.items()}, index
