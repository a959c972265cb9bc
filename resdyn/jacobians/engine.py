"""The Jacobian engine: everything measured on the model, one decoder layer at a time.

For every sample s, analysed position t, layer l and sublayer k in {attn, mlp}, the exact
Jacobian J = d out_t / d h_t of the sublayer map (other positions held fixed) is produced by a
backend and folded into a streaming float64 mean (and per-entry variance where the backend gives
per-sample matrices); per-sample matrices are kept only for a subsample. In the same pass the
residuals at both boundaries (pre_attn, pre_mlp) are recorded at the analysed positions, and the
finite-difference probe sums sum_s (f_s(x_s + h v) - f_s(x_s - h v)) / 2h are accumulated for a
few random directions v (:mod:`resdyn.jacobians.probe`), so the model is run once per partition.

Two drivers feed :func:`analyse_layer` the inputs of one decoder layer for every sample batch:

- :func:`measure_layer_major`: a :class:`~resdyn.models.layerwise.LayerwiseModel` carries the
  residual stream of all samples through the network layer by layer, reading one layer's
  weights at a time (memory: one layer + the residual stream + accumulators);
- :func:`measure_whole_model`: a model already in memory (small models, tests), one forward pass
  per batch capturing every layer's inputs.

Both yield one :class:`LayerMeasurement` per layer and give the same numbers (tested to 1e-12).
Backends implement ``accumulate(adapter, layer, inputs, sublayer, position, moments)``,
``sample_jacobians(...)`` and optionally ``finish()`` (called after each layer's last batch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ..corpus import Sample
from ..models.adapters import BOUNDARIES, SUBLAYERS, FamilyAdapter, LayerInputs
from ..models.precision import FULL_PRECISION_ATTENTION, float64_casts
from .probe import PROBE_STEP, central_difference_sum, probe_directions
from .streaming import RunningMoments

log = logging.getLogger(__name__)

Progress = Callable[[int, int, int, int], None]  # (layer, n_layers, batch, n_batches)


class JacobianBackend(Protocol):
    name: str

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor: ...

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor | None: ...


class NonFiniteJacobianError(FloatingPointError):
    pass


@dataclass(frozen=True)
class MeasurementOptions:
    batch_size: int = 16
    keep_sample_jacobians: int = 0  # per-sample matrices of samples with sample_id < this are kept
    probe_directions: int = 2  # 0: no finite-difference probe
    probe_seed: int = 0
    probe_step: float = PROBE_STEP
    # Where kept per-sample matrices go as soon as each is computed: sink(layer, sublayer, sample_id,
    # position, matrix). Without one they are collected in LayerMeasurement.sample_jacobians, which at
    # d = 4096 holds 134 MB per matrix until the layer ends (2 GB for 8 samples x 2 sublayers).
    sample_jacobian_sink: Callable[[int, str, int, int, np.ndarray], None] | None = None
    # Fold means for the sampling uncertainty of each mean (resdyn.sampling): the samples, in their order,
    # cut into this many contiguous blocks of (nearly) equal size, each block's mean kept beside the overall
    # one. 0 or 1: the overall mean only. A batch that straddles two blocks is split (LayerInputs.select),
    # so the blocks do not depend on the batch size.
    folds: int = 0


@dataclass
class LayerMeasurement:
    """What one decoder layer gave: per sublayer the mean Jacobian and its companions."""

    layer: int
    means: dict[str, np.ndarray]
    variances: dict[str, np.ndarray | None]
    counts: dict[str, int]
    backends: dict[str, str]
    activations: dict[str, np.ndarray]  # boundary -> (observations, d) float32
    observation_index: list[tuple[int, int]]  # (sample_id, position) per activation row
    sample_jacobians: dict[str, list[tuple[int, int, np.ndarray]]] = field(default_factory=dict)
    probe_directions: np.ndarray | None = None  # (k, d)
    probe_differences: dict[str, np.ndarray] = field(default_factory=dict)  # sublayer -> (k, d) mean FD
    seconds: dict[str, float] = field(default_factory=dict)  # activations, mean_jacobians, subsample, probe, forward
    fold_means: dict[str, list[np.ndarray]] = field(default_factory=dict)  # sublayer -> one mean per fold (folds > 1)
    fold_counts: dict[str, list[int]] = field(default_factory=dict)  # sublayer -> observations per fold


def sample_batches(samples: Sequence[Sample], batch_size: int) -> list[Sequence[Sample]]:
    if not samples:
        raise ValueError("no samples to analyse")
    positions = samples[0].positions
    if any(sample.positions != positions for sample in samples):
        raise ValueError("all samples must share the same analysed positions")
    return [samples[start : start + batch_size] for start in range(0, len(samples), batch_size)]


def fold_of_samples(samples: Sequence[Sample], folds: int) -> dict[int, int]:
    """sample_id -> fold: the samples in their given order cut into ``folds`` contiguous blocks of sizes
    differing by at most one (block k holds the i-th sample with i folds // n = k). Contiguous blocks of windows
    are blocks of text, so the spread between them includes the correlation of neighbouring windows (a block
    jackknife, Kunsch 1989)."""
    n, folds = len(samples), max(1, min(int(folds), len(samples)))
    return {sample.sample_id: i * folds // n for i, sample in enumerate(samples)}


def _batch_parts(batch: Sequence[Sample], inputs: LayerInputs, fold_of: dict[int, int]):
    """[(fold, samples, inputs)] of one batch: itself when all its samples share a fold, else one part per fold
    (LayerInputs.select); each part's inputs are made once so that the MLP step finds the attention step's rows."""
    folds = [fold_of[sample.sample_id] for sample in batch]
    if len(set(folds)) == 1:
        return [(folds[0], batch, inputs)]
    parts = []
    for fold in sorted(set(folds)):
        rows = [i for i, f in enumerate(folds) if f == fold]
        parts.append((fold, [batch[i] for i in rows], inputs.select(rows)))
    return parts


def _token_ids(batch: Sequence[Sample], device=None) -> torch.Tensor:
    return torch.tensor([sample.token_ids for sample in batch], device=device)


def analyse_layer(
    adapter: FamilyAdapter,
    layer_index: int,
    layer: torch.nn.Module,
    batches: Sequence[tuple[Sequence[Sample], LayerInputs]],
    *,
    backend: JacobianBackend,
    options: MeasurementOptions,
    n_layers: int = 0,
    progress: Progress | None = None,
) -> LayerMeasurement:
    """Every measurement of decoder layer ``layer_index`` over the given sample batches."""
    check_attention_implementation(layer)
    d_model = batches[0][1].hidden.shape[-1]
    device = batches[0][1].hidden.device
    all_samples = [sample for batch, _ in batches for sample in batch]
    fold_of = fold_of_samples(all_samples, options.folds)
    n_folds = len(set(fold_of.values()))
    by_fold = {sublayer: [RunningMoments() for _ in range(n_folds)] for sublayer in SUBLAYERS}
    describe = getattr(backend, "backend_for", None)
    backends = {sublayer: describe(adapter, layer, sublayer) if describe else backend.name for sublayer in SUBLAYERS}
    kept: dict[str, list] = {sublayer: [] for sublayer in SUBLAYERS}
    activations: dict[str, list[np.ndarray]] = {boundary: [] for boundary in BOUNDARIES}
    index: list[tuple[int, int]] = []
    directions = torch_directions = None
    sums = {}
    if options.probe_directions:
        directions = probe_directions(d_model, n_directions=options.probe_directions, seed=options.probe_seed)
        torch_directions = torch.as_tensor(directions, device=device)
        sums = {sublayer: torch.zeros(options.probe_directions, d_model, dtype=torch.float64, device=device)
                for sublayer in SUBLAYERS}
    if options.sample_jacobian_sink is None:
        keep_one = {sublayer: kept[sublayer].append for sublayer in SUBLAYERS}
    else:  # each matrix leaves as soon as it is made
        keep_one = {sublayer: (lambda entry, sublayer=sublayer:
                               options.sample_jacobian_sink(layer_index, sublayer, *entry)) for sublayer in SUBLAYERS}
    clock = _Stopwatch()
    for batch_number, (batch, inputs) in enumerate(batches):
        positions = list(batch[0].positions)
        index.extend((sample.sample_id, t) for sample in batch for t in positions)
        with clock("activations"), float64_casts(inputs.hidden.dtype):  # the pre-MLP residual is the layer's output
            for boundary in BOUNDARIES:
                residual = adapter.sublayer_input(inputs, layer, boundary)[:, positions]
                activations[boundary].append(residual.to(torch.float32).cpu().numpy().reshape(-1, d_model))
        with float64_casts(inputs.hidden.dtype):  # a model's float32 casts of float64 data stay float64
            _measure_batch(clock, backend, adapter, layer, inputs, positions, by_fold, keep_one, batch, options,
                           directions, torch_directions, sums, layer_index, _batch_parts(batch, inputs, fold_of))
        if progress is not None:
            progress(layer_index, n_layers, batch_number + 1, len(batches))
    with clock("mean_jacobians"), float64_casts(batches[0][1].hidden.dtype):
        if hasattr(backend, "finish"):  # backends that defer their weight products to the end of the layer
            backend.finish()
    moments = {sublayer: RunningMoments.merged(parts) for sublayer, parts in by_fold.items()}
    for sublayer, moment in moments.items():
        if not moment.mean_is_finite():
            _raise_non_finite(layer_index, sublayer, batches[-1][0])
    folded = n_folds > 1
    return LayerMeasurement(
        layer=layer_index,
        fold_means={sublayer: [part.mean for part in parts] for sublayer, parts in by_fold.items()} if folded else {},
        fold_counts={sublayer: [part.count for part in parts] for sublayer, parts in by_fold.items()} if folded else {},
        means={sublayer: moment.mean for sublayer, moment in moments.items()},
        variances={sublayer: moment.variance for sublayer, moment in moments.items()},
        counts={sublayer: moment.count for sublayer, moment in moments.items()},
        backends=backends,
        activations={boundary: np.concatenate(parts) for boundary, parts in activations.items()},
        observation_index=index,
        sample_jacobians=kept,
        probe_directions=directions,
        probe_differences={sublayer: (total / len(index)).cpu().numpy() for sublayer, total in sums.items()},
        seconds=clock.totals,
    )


def _measure_batch(clock, backend, adapter, layer, inputs, positions, moments, keep_one, batch, options, directions,
                   torch_directions, sums, layer_index, parts) -> None:
    """One batch's mean-Jacobian moments (per fold part), kept per-sample matrices and probe sums, sublayer by
    sublayer."""
    for sublayer in SUBLAYERS:  # attn first: the structured MLP step reuses the attention's output rows
        for position in positions:
            for fold, part, part_inputs in parts:
                with clock("mean_jacobians"):
                    jacobians = backend.accumulate(adapter, layer, part_inputs, sublayer, position,
                                                   moments[sublayer][fold])
                    if not moments[sublayer][fold].mean_is_finite():
                        _raise_non_finite(layer_index, sublayer, part)
                with clock("subsample"):
                    _keep_subsample(keep_one[sublayer], part, position, jacobians, backend, adapter, layer,
                                    part_inputs, sublayer, options.keep_sample_jacobians)
            if directions is not None:
                with clock("probe"):
                    function, x0 = adapter.row_function(layer, inputs, sublayer, position)
                    sums[sublayer] += central_difference_sum(function, x0, torch_directions, options.probe_step)


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc's malloc keeps them after many mid-sized frees, so
    resident memory would creep up layer after layer); a no-op where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _Stopwatch:
    """Seconds spent per named part of the work (the device is synchronised at each stop)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - started


SUPPORTED_ATTENTION = ("eager", "sdpa", FULL_PRECISION_ATTENTION)


class UnsupportedAttentionError(ValueError):
    pass


def check_attention_implementation(layer: torch.nn.Module) -> None:
    """The engine reads each layer's attention mask as the model passes it; kernels whose masking is
    implicit (flash, flex) would make both backends silently wrong, so they are refused."""
    config = getattr(getattr(layer, "self_attn", None), "config", None)
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in SUPPORTED_ATTENTION:
        raise UnsupportedAttentionError(
            f"attention implementation {implementation!r} is not supported by the Jacobian engine (its masking is "
            f"implicit in the kernel); load the model with attn_implementation='eager' or 'sdpa' "
            f"(supported: {', '.join(SUPPORTED_ATTENTION)})")


SUBSAMPLE_FLOATS = 2**25  # per-sample matrices computed at once for the subsample (256 MB in float64)


def _keep_subsample(keep_one, batch, position, jacobians, backend, adapter, layer, inputs, sublayer, keep):
    wanted = [i for i, sample in enumerate(batch) if sample.sample_id < keep]
    if not wanted:
        return
    if jacobians is not None:  # the backend computed every sample's matrix already
        for i in wanted:
            keep_one((batch[i].sample_id, position, jacobians[i].detach().to(torch.float64).cpu().numpy()))
        return
    # A backend that streams means only: the wanted rows' matrices, a few at a time (at d = 4096 one
    # matrix is 134 MB; eight at once were the measurement stage's peak).
    d = inputs.hidden.shape[-1]
    step = max(1, SUBSAMPLE_FLOATS // (d * d))
    for start in range(0, len(wanted), step):
        chunk = wanted[start:start + step]
        matrices = backend.sample_jacobians(adapter, layer, inputs.select(chunk), sublayer, position)
        for row, i in enumerate(chunk):
            keep_one((batch[i].sample_id, position, matrices[row].detach().to(torch.float64).cpu().numpy()))
        del matrices


def _raise_non_finite(layer: int, sublayer: str, batch: Sequence[Sample]) -> None:
    raise NonFiniteJacobianError(
        f"non-finite Jacobian in layer {layer} sublayer {sublayer} (samples {batch[0].sample_id}.."
        f"{batch[-1].sample_id}): the model overflowed. Run in float64 (--dtype float64), check the checkpoint's "
        "weights for NaN/inf, or drop those samples."
    )


def measure_layer_major(
    layerwise,
    samples: Sequence[Sample],
    *,
    backend: JacobianBackend,
    options: MeasurementOptions = MeasurementOptions(),
    progress: Progress | None = None,
) -> Iterator[LayerMeasurement]:
    """One :class:`LayerMeasurement` per decoder layer of a :class:`~resdyn.models.layerwise.LayerwiseModel`,
    reading one layer's weights at a time (module docstring)."""
    batches = sample_batches(samples, options.batch_size)
    with float64_casts(layerwise.dtype):
        prepared = layerwise.prepare([_token_ids(batch) for batch in batches])
    adapter = layerwise.adapter
    for layer_index in range(layerwise.n_layers):
        started = time.perf_counter()
        with layerwise.materialized(layer_index) as layer:
            read_seconds = time.perf_counter() - started
            inputs = [(batch, LayerInputs(state.hidden, adapter.attention_arguments(state.arguments[layer_index])))
                      for batch, state in zip(batches, prepared)]
            measurement = analyse_layer(adapter, layer_index, layer, inputs, backend=backend, options=options,
                                        n_layers=layerwise.n_layers, progress=progress)
            clock = _Stopwatch()
            if layer_index < layerwise.n_layers - 1:  # no layer reads the last one's output
                with clock("forward"), float64_casts(layerwise.dtype):
                    # from the pre-MLP residuals the measurements computed (adapter.layer_output: the attention is
                    # not run twice), each batch's freed as it is advanced
                    for (_, layer_inputs), state in zip(inputs, prepared):
                        layer_inputs.context = None  # the keys and values the probe held fixed
                        layerwise.advance(layer, state, layer_index, output=adapter.layer_output(layer, layer_inputs))
                        layer_inputs.pre_mlp = None
            del inputs
        measurement.seconds.update(clock.totals, read_weights=read_seconds)
        release_freed_memory()
        log.info("layer %d/%d measured", layer_index + 1, layerwise.n_layers)
        yield measurement
        del measurement  # not kept alive while the next layer is measured


def measure_whole_model(
    model: torch.nn.Module,
    adapter: FamilyAdapter,
    samples: Sequence[Sample],
    *,
    backend: JacobianBackend,
    options: MeasurementOptions = MeasurementOptions(),
    progress: Progress | None = None,
) -> Iterator[LayerMeasurement]:
    """The same measurements for a model held in memory: every layer's inputs captured per batch first."""
    batches = sample_batches(samples, options.batch_size)
    device = next(model.parameters()).device
    layers = adapter.decoder_layers(model)
    for layer in layers:  # refused before any forward: the kernel may not even be installed
        check_attention_implementation(layer)
    with float64_casts(next(model.parameters()).dtype):
        captured = [adapter.capture_layer_inputs(model, _token_ids(batch, device)) for batch in batches]
    for layer_index, layer in enumerate(layers):
        inputs = [(batch, per_layer[layer_index]) for batch, per_layer in zip(batches, captured)]
        yield analyse_layer(adapter, layer_index, layer, inputs, backend=backend, options=options,
                            n_layers=len(layers), progress=progress)


@dataclass
class JacobianAnalysis:
    """All layers' measurements keyed (layer, sublayer) / (layer, boundary), for callers that want them at once."""

    n_layers: int
    d_model: int
    means: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    variances: dict[tuple[int, str], np.ndarray | None] = field(default_factory=dict)
    counts: dict[tuple[int, str], int] = field(default_factory=dict)
    observation_index: list[tuple[int, int]] = field(default_factory=list)
    sample_jacobians: dict[tuple[int, str], list[tuple[int, int, np.ndarray]]] = field(default_factory=dict)
    backend_by_sublayer: dict[tuple[int, str], str] = field(default_factory=dict)
    activations: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    probe_directions: np.ndarray | None = None
    probe_differences: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)

    @classmethod
    def collect(cls, measurements: Iterator[LayerMeasurement]) -> JacobianAnalysis:
        analysis = None
        for measurement in measurements:
            if analysis is None:
                d = next(iter(measurement.means.values())).shape[0]
                analysis = cls(n_layers=0, d_model=d, observation_index=measurement.observation_index,
                               probe_directions=measurement.probe_directions)
            analysis.n_layers += 1
            for sublayer in SUBLAYERS:
                key = (measurement.layer, sublayer)
                analysis.means[key] = measurement.means[sublayer]
                analysis.variances[key] = measurement.variances[sublayer]
                analysis.counts[key] = measurement.counts[sublayer]
                analysis.sample_jacobians[key] = measurement.sample_jacobians.get(sublayer, [])
                analysis.backend_by_sublayer[key] = measurement.backends[sublayer]
                if sublayer in measurement.probe_differences:
                    analysis.probe_differences[key] = measurement.probe_differences[sublayer]
            for boundary in BOUNDARIES:
                analysis.activations[(measurement.layer, boundary)] = measurement.activations[boundary]
        return analysis


def analyse_samples(
    model: torch.nn.Module,
    adapter: FamilyAdapter,
    samples: Sequence[Sample],
    *,
    backend: JacobianBackend,
    batch_size: int = 16,
    keep_sample_jacobians: int = 0,
    probe_directions: int = 0,
) -> JacobianAnalysis:
    """Every layer of an in-memory model at once (:func:`measure_whole_model` collected)."""
    options = MeasurementOptions(batch_size=batch_size, keep_sample_jacobians=keep_sample_jacobians,
                                 probe_directions=probe_directions)
    return JacobianAnalysis.collect(measure_whole_model(model, adapter, samples, backend=backend, options=options))
