"""Shared test set-up: offline hub, the shared WikiText-2 copy, small random models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if (SHARED_DATA / "wikitext-2-raw").is_dir():
    os.environ.setdefault("RESDYN_WIKITEXT_DIR", str(SHARED_DATA / "wikitext-2-raw"))
    os.environ.setdefault("RESDYN_WIKITEXT_TOKENIZED_DIR", str(SHARED_DATA / "wikitext-2-tokenized"))

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "olmo2", "olmo3", "gemma3", "gemma4"]


def random_tiny_model(family: str, seed: int, hidden_size: int = 32, n_layers: int = 2, *,
                      attention: str = "full_precision", dtype=torch.float64, **overrides):
    """A tiny model whose every parameter and buffer is randomised (float64, full-precision norms and
    attention by default; ``attention="eager"`` or ``"sdpa"`` keeps HF's own implementation).

    Norm weights, biases, Gemma's ``layer_scalar`` and the like start at constants; perturbing them
    makes the tests see each term of every sublayer map.
    """
    from transformers import AutoModelForCausalLM

    from resdyn.models.precision import use_full_precision, use_full_precision_norms
    from resdyn.models.tiny_configs import tiny_config

    torch.manual_seed(seed)
    config = tiny_config(family, hidden_size=hidden_size, n_layers=n_layers, **overrides)
    implementation = "eager" if attention == "full_precision" else attention
    extra = {"experts_implementation": "eager"} if getattr(config, "enable_moe_block", False) else {}
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=implementation, **extra).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "scalar" in name or name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
        for name, buffer in model.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.copy_(0.5 + torch.rand_like(buffer))
    if attention == "full_precision":
        use_full_precision(model)
    elif dtype == torch.float64:
        use_full_precision_norms(model)
    return model


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None,
                     help="the seed of the fresh_seed fixture (a failing test prints the one it drew)")


@pytest.fixture
def fresh_seed(request) -> int:
    """A different seed every run, unless ``--seed N`` gives one; a failing test's report names it."""
    seed = request.config.getoption("--seed")
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    request.node.user_properties.append(("fresh_seed", seed))
    return seed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    seeds = [value for name, value in item.user_properties if name == "fresh_seed"]
    if report.failed and seeds:
        report.sections.append(("fresh_seed", f"fresh_seed = {seeds[0]}: rerun with --seed {seeds[0]} {item.nodeid}"))
    return report


SYSTEM_TESTS = Path(__file__).resolve().parent / "system"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/system/ (webserver, browser, Ray, wheel, kill drills) carries the system marker."""
    for item in items:
        if SYSTEM_TESTS in Path(item.fspath).parents:
            item.add_marker(pytest.mark.system)
