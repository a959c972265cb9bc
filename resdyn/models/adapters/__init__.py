"""Family adapters: the attention and MLP residual maps of every decoder layer."""

from .base import BOUNDARIES, SUBLAYERS, FamilyAdapter, LayerInputs, sublayer_depth
from .families import SUPPORTED_FAMILIES, UnsupportedArchitectureError, adapter_for, family_of

__all__ = [
    "BOUNDARIES",
    "SUBLAYERS",
    "SUPPORTED_FAMILIES",
    "FamilyAdapter",
    "LayerInputs",
    "UnsupportedArchitectureError",
    "adapter_for",
    "family_of",
    "sublayer_depth",
]
