"""Full-precision RMSNorms and attention for float64 analysis.

HF's RMSNorms cast their input to float32, and its eager attention takes the softmax in float32
(both to be safe in bf16). Run in float64, those casts make every Jacobian exact only to ~1e-7
and finite differences meaningless. :func:`use_full_precision` replaces both: the attention by
the same eager formula with the softmax in max(input dtype, float32), registered with HF's
``AttentionInterface``; the norms by the same formula in the input's own dtype:

- Llama / Mistral / Qwen / OLMo style (``variance_epsilon``): w * x / sqrt(mean(x^2) + eps)
- Gemma 3 style (``eps``, zero-initialised weight):           (1 + w) * x / sqrt(mean(x^2) + eps)
- Gemma 4 style (``eps``, ``with_scale``):                     [w *] x / sqrt(mean(x^2) + eps)

Those two patches cover the casts HF writes in its norms and attention; any other one (Gemma 4's
mixture-of-experts router takes ``softmax(..., dtype=torch.float32)``, others may follow) is caught
by :class:`Float64Casts`, a torch function mode under which every request for float32 on float64 data
(``x.float()``, ``x.to(torch.float32)``, ``dtype=torch.float32``) stays in float64. The measurement
engine computes every Jacobian, probe and forward pass under it: a general rule, not a list of modules.
"""

from __future__ import annotations

import logging
import types

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

log = logging.getLogger(__name__)

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def loading_options(config) -> dict:
    """Extra from_config / from_pretrained options: mixture-of-experts blocks computed by plain loops
    (HF's grouped-matmul kernels take no float64)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    moe = getattr(text, "enable_moe_block", False) or getattr(text, "num_experts", None)
    return {"experts_implementation": "eager"} if moe else {}


def _inverse_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _scaled_weight_norm(self, x):
    return self.weight * (x * _inverse_rms(x, self.variance_epsilon))


def _one_plus_weight_norm(self, x):
    return (x * _inverse_rms(x, self.eps)) * (1.0 + self.weight)


def _optional_weight_norm(self, x):
    normed = x * _inverse_rms(x, self.eps)
    return normed * self.weight if self.with_scale else normed


def _norm_form(module: nn.Module) -> str | None:
    """Which RMSNorm formula a module computes (module docstring), or None if it is not a known one."""
    name = type(module).__name__
    if not name.endswith("RMSNorm"):
        return None
    if hasattr(module, "variance_epsilon"):
        return "scaled_weight"
    if hasattr(module, "with_scale"):
        return "optional_weight"
    if name.startswith("Gemma") and hasattr(module, "eps"):
        return "one_plus_weight"
    return None


_FULL_PRECISION_FORWARD = {
    "scaled_weight": _scaled_weight_norm,
    "optional_weight": _optional_weight_norm,
    "one_plus_weight": _one_plus_weight_norm,
}


def rms_norm_gain(module: nn.Module) -> tuple[torch.Tensor | None, float] | None:
    """(g, eps) with module(x) = g * x / sqrt(mean(x^2) + eps) (g None: no gain), or None for an
    unknown norm form."""
    form = _norm_form(module)
    if form == "scaled_weight":
        return module.weight, module.variance_epsilon
    if form == "optional_weight":
        return (module.weight if module.with_scale else None), module.eps
    if form == "one_plus_weight":
        return 1.0 + module.weight, module.eps
    return None


def use_full_precision_norms(model: nn.Module) -> int:
    """Patch every RMSNorm of ``model`` in place; returns how many were patched."""
    patched = 0
    for module in model.modules():
        form = _norm_form(module)
        if form is None:
            if type(module).__name__.endswith("RMSNorm"):
                log.warning("%s has an unknown RMSNorm form; left in HF's own precision", type(module).__name__)
            continue
        module.forward = types.MethodType(_FULL_PRECISION_FORWARD[form], module)
        patched += 1
    return patched


FULL_PRECISION_ATTENTION = "resdyn_full_precision"


def full_precision_eager_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                   softcap=None, **kwargs):
    """softmax(q k^T * scaling [softcapped] + mask) v, as HF's eager attention, minus the float32 cast."""
    if scaling is None:
        scaling = module.head_dim**-0.5
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(query.dtype, torch.float32)).to(value.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(FULL_PRECISION_ATTENTION, full_precision_eager_attention)
    AttentionMaskInterface.register(FULL_PRECISION_ATTENTION, eager_mask)


def use_full_precision(model: nn.Module) -> int:
    """Full-precision attention and norms for ``model`` (in place); returns the norms patched."""
    _register_attention()
    model.set_attn_implementation(FULL_PRECISION_ATTENTION)
    return use_full_precision_norms(model)


def _has_float64_tensor(values) -> bool:
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.dtype == torch.float64:
                return True
        elif isinstance(value, (list, tuple)) and _has_float64_tensor(value):
            return True
    return False


class Float64Casts(TorchFunctionMode):
    """Within: a float32 cast of float64 data keeps float64 (module docstring).

    A call is rewritten only when it asks for float32 (``Tensor.float``, or ``torch.float32`` among its
    arguments) and one of its tensor arguments is float64; float32 data (RoPE's integer positions cast
    to float32, float32 buffers) and every other call pass through unchanged, so a model computed
    without a float64 tensor (bfloat16, float32 runs) is unaffected.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            if args and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float64:
                return args[0]
        elif any(value is torch.float32 for value in args) or any(value is torch.float32 for value in kwargs.values()):
            if _has_float64_tensor(args) or _has_float64_tensor(kwargs.values()):
                args = tuple(torch.float64 if value is torch.float32 else value for value in args)
                kwargs = {key: torch.float64 if value is torch.float32 else value for key, value in kwargs.items()}
        return func(*args, **kwargs)


def float64_casts(dtype: torch.dtype):
    """:class:`Float64Casts` for a float64 computation; nothing for any other (a float32 or bfloat16 run casts
    to its own dtype on purpose)."""
    import contextlib

    return Float64Casts() if dtype == torch.float64 else contextlib.nullcontext()
