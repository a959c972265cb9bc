"""Every measure's interval from the samples themselves (block jackknife over fold means).

Each fold k is carried through depth by one worker: per sublayer the leave-one-fold-out mean
J_(-k) = (n J - n_k J_k) / (n - n_k) (``jacobian_folds``, resdyn.sampling) gets the spectral stage's
analysis (Schur form with its basis, SVD, every layer_metrics measure but the alignment ones), and the
products of the J_(-k) and of their alpha = 0 surgery (LAPACK's Schur ordering, and the polar normal part) their
ranks. One row per
(quantity, depth): the full-sample value (from layer_metrics, cumulative_rank, schur_surgery), the
jackknife standard error, the 95% t interval and the K replicates, from which any statistic over
sublayers gets its own interval (resdyn/claims/).
"""


from __future__ import annotations

import math
from itertools import islice

import numpy as np

from resdyn import sampling
from resdyn.depth import RANK_DEFINITIONS
from resdyn.naming import sublayer_depth
from resdyn.stages.result import Preview, StageResult
from resdyn.stages.spectral import PARALLEL_MIN_WIDTH, sublayers_in_depth_order
from resdyn.stages.workers import FOLD_SURGERY_ORDERINGS, fold_through_depth

# The samples' interval of the surgery is under LAPACK's ordering and the polar normal part (FOLD_SURGERY_ORDERINGS):
# the two modulus orderings cost 2 dtrexc passes and 2 more product chains per fold (at d = 576 they were 60% of this
# stage) and their readings carry no interval. The polar normal part costs per fold and sublayer about half a Schur
# form and one more product chain (a fold's step 1.4x at d = 576, 1.6x at d = 640, measured on one BLAS thread).


def sampling_intervals(tools, jacobians, jacobian_folds, layer_metrics, cumulative_rank, schur_surgery,
                       sample_jacobians) -> StageResult:
    """Sampling intervals of every layer_metrics measure, the cumulative ranks and the alpha = 0 surgery: a block
    jackknife over the fold means (resdyn/sampling.py); beside them each sublayer's noise-to-signal ratios."""
    rows = _intervals(tools, jacobians, jacobian_folds, layer_metrics, cumulative_rank, schur_surgery,
                      sample_jacobians)
    ratios = [row["value"] for row in rows if row["quantity"] == "noise_to_signal" and row["value"] is not None
              and np.isfinite(row["value"])]
    return StageResult(tables={"sampling_intervals": rows}, metadata={"sampling_intervals": {
        "preview": Preview(without=("replicates",)), "rows": len(rows),
        "median_noise_to_signal": float(np.median(ratios)) if ratios else float("nan")}})


def _fold_index(jacobian_folds) -> tuple[dict, dict]:
    """(layer, sublayer) -> [fold row groups by fold], and -> [observations per fold]."""
    groups, counts = {}, {}
    for index, group in enumerate(jacobian_folds.row_groups(["layer", "sublayer", "fold", "n_observations"])):
        key = (group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py())
        fold = group.column("fold")[0].as_py()
        groups.setdefault(key, {})[fold] = index
        counts.setdefault(key, {})[fold] = group.column("n_observations")[0].as_py()
    return ({key: [folds[k] for k in sorted(folds)] for key, folds in groups.items()},
            {key: [folds[k] for k in sorted(folds)] for key, folds in counts.items()})


def _row(layer, sublayer, quantity, value, replicates) -> dict:
    interval = sampling.jackknife(value, replicates)
    return {"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "quantity": quantity,
            "value": interval.value, "standard_error": interval.standard_error, "ci_low": interval.low,
            "ci_high": interval.high, "n_folds": interval.n_folds, "replicates": [float(r) for r in replicates]}


def _intervals(tools, jacobians, jacobian_folds, layer_metrics, cumulative_rank, schur_surgery,
               sample_jacobians) -> list[dict]:
    fold_groups, fold_counts = _fold_index(jacobian_folds)
    if not fold_groups:  # folds off (--folds 0, or wider than --fold-max-width): an empty table says so
        tools.log("no fold means (folds off at this width): no sampling intervals")
        return []
    order = sublayers_in_depth_order(jacobians)
    of_mean = {(r["layer"], r["sublayer"]): r for r in layer_metrics.read().to_pylist()}
    cumulative = {r["depth"]: r for r in cumulative_rank.read().to_pylist()}
    surgery = {(r["schur_ordering"], r["depth"]): r for r in schur_surgery.read().to_pylist()
               if r["alpha"] == 0.0 and r["schur_ordering"] in FOLD_SURGERY_ORDERINGS}
    n_folds = len(next(iter(fold_groups.values())))
    steps = {fold: [(jacobians.reference(index), jacobian_folds.reference(fold_groups[(layer, sublayer)][fold]),
                     sum(fold_counts[(layer, sublayer)]),
                     fold_counts[(layer, sublayer)][fold]) for index, layer, sublayer in order] for fold in range(n_folds)}
    progress = tools.progress("sampling intervals (folds through depth)", n_folds)
    kept = _kept_samples_by_sublayer(sample_jacobians)
    # Each sublayer's two noise ratios need no fold's result: they are taken between the results, a share after
    # each (this process only waits while the folds run; after them they took ~10 s per SmolLM2 partition).
    noise, remaining, share = {}, iter(order), math.ceil(len(order) / n_folds)
    by_fold = []
    for fold, result in enumerate(tools.map(fold_through_depth, [(fold, steps[fold]) for fold in range(n_folds)],
                                            parallel=jacobians.width >= PARALLEL_MIN_WIDTH, at_most=n_folds)):
        by_fold.append(result)
        progress.done(f"fold {fold}")
        for index, layer, sublayer in islice(remaining, share):
            tools.check("sampling_intervals")
            noise[(layer, sublayer)] = _noise_ratios(jacobians.matrix(index), jacobian_folds, sample_jacobians,
                                                     fold_groups[(layer, sublayer)], fold_counts[(layer, sublayer)],
                                                     kept.get((layer, sublayer), []))
    rows = []
    for position, (_, layer, sublayer) in enumerate(order):
        tools.check("sampling_intervals")
        fold_results = [by_fold[fold][position] for fold in range(n_folds)]
        for name, value in of_mean[(layer, sublayer)].items():
            if name not in fold_results[0]["metrics"] or isinstance(value, str) or value is None:
                continue  # keys, strings and the alignment metrics (not computed for the folds)
            rows.append(_row(layer, sublayer, name, float(value), [r["metrics"][name] for r in fold_results]))
        of_folds, per_sample = noise[(layer, sublayer)]
        rows.append(_row(layer, sublayer, "noise_to_signal", of_folds, []))
        rows.append(_row(layer, sublayer, "noise_to_signal_per_sample", per_sample, []))
        depth = sublayer_depth(layer, sublayer)
        for rank in RANK_DEFINITIONS:
            rows.append(_row(layer, sublayer, sampling.cumulative_quantity(rank), cumulative[depth][rank],
                             [r["cumulative"][rank] for r in fold_results]))
            for ordering in FOLD_SURGERY_ORDERINGS:
                if (ordering, depth) in surgery:
                    rows.append(_row(layer, sublayer, sampling.surgery_quantity(ordering, rank),
                                     surgery[(ordering, depth)][rank],
                                     [r["surgery"][ordering][rank] for r in fold_results]))
    return rows


def _noise_ratios(mean, jacobian_folds, sample_jacobians, fold_groups: list[int], fold_counts: list[int],
                  kept: list[int]) -> tuple[float, float]:
    """(noise_to_signal of the fold means, noise_to_signal_per_sample of the kept per-sample matrices) of one
    sublayer's mean J (resdyn.sampling), the matrices read one at a time."""
    leave_one_out = sampling.leave_one_out_means(mean, [jacobian_folds.matrix(group) for group in fold_groups],
                                                 fold_counts)
    per_sample = sampling.per_sample_noise_to_signal(mean, (sample_jacobians.matrix(group) for group in kept),
                                                     sum(fold_counts))
    return sampling.noise_to_signal(mean, leave_one_out), per_sample


def _kept_samples_by_sublayer(sample_jacobians) -> dict[tuple, list[int]]:
    """(layer, sublayer) -> the row groups of its kept per-sample Jacobians (read one at a time by the caller)."""
    groups: dict[tuple, list[int]] = {}
    for index, key in sample_jacobians.keys():
        groups.setdefault(key, []).append(index)
    return groups


__all__ = ["sampling_intervals"]
