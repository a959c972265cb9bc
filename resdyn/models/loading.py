"""Load any supported HF causal LM by local path or hub id + revision, with errors that name the fix."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .adapters import FamilyAdapter, adapter_for
from .hub import hub_is_reachable
from .precision import DTYPES, loading_options, use_full_precision

log = logging.getLogger(__name__)


class ModelNotFoundError(FileNotFoundError):
    pass


class ModelNotReachableError(OSError):
    pass


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    adapter: FamilyAdapter
    family: str
    n_params: int
    dtype: str


def _looks_like_path(source: str) -> bool:
    return source.startswith(("/", ".", "~")) or source.count("/") != 1 or os.sep + os.sep in source


def _check_source(source: str) -> str:
    expanded = os.path.expanduser(source)
    if os.path.isdir(expanded):
        if not (Path(expanded) / "config.json").is_file():
            raise ModelNotFoundError(
                f"{expanded} is a directory but holds no config.json: point --model at a directory made by "
                "save_pretrained (config.json, weights, tokenizer files)"
            )
        return expanded
    if _looks_like_path(source):
        raise ModelNotFoundError(
            f"no model directory at {expanded}. Pass a directory made by save_pretrained, or a hub id "
            "such as 'allenai/Olmo-3-1025-7B' with --revision."
        )
    return source


def _offline(source: str) -> bool:
    """Only the cache for a hub id when the hub is unreachable; a local directory never asks the hub."""
    return not os.path.isdir(source) and not hub_is_reachable()


def load_config(source: str, revision: str | None = None):
    source = _check_source(source)
    try:
        return AutoConfig.from_pretrained(source, revision=revision, local_files_only=_offline(source))
    except OSError as error:
        raise ModelNotReachableError(
            f"cannot load the config of {source!r} at revision {revision!r}: {error}\n"
            f"If the weights are not reachable from here, download them where the hub is reachable "
            f"(`hf download {source} --revision {revision or 'main'} --local-dir DIR`), copy DIR here and run "
            "`resdyn run --model DIR`, or set HF_HOME to a cache that holds them. If the revision is wrong, "
            "list the repository's branches on the hub."
        ) from error


def load_model(source: str, revision: str | None = None, *, dtype: str = "float64") -> LoadedModel:
    """Model (eval mode, eager attention), its tokenizer and its family adapter.

    In float64 the model's norms and attention are switched to full precision
    (:mod:`resdyn.models.precision`), so Jacobians are exact to float64 rounding.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    config = load_config(source, revision)
    adapter = adapter_for(config.model_type)  # fails before any weights are read
    source = _check_source(source)
    try:
        offline = _offline(source)
        model = AutoModelForCausalLM.from_pretrained(
            source, revision=revision, dtype=DTYPES[dtype], attn_implementation="eager", local_files_only=offline,
            **loading_options(config),
        )
        tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, local_files_only=offline)
    except OSError as error:
        raise ModelNotReachableError(f"cannot load weights or tokenizer of {source!r}@{revision}: {error}") from error
    model.eval()
    if dtype == "float64":
        use_full_precision(model)
    n_params = sum(parameter.numel() for parameter in model.parameters())
    log.info("loaded %s@%s (%s, %d parameters, %s)", source, revision, config.model_type, n_params, dtype)
    return LoadedModel(model, tokenizer, adapter, config.model_type, n_params, dtype)
