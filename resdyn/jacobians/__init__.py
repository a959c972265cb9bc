"""Exact sublayer Jacobians: backends and the streaming engine."""

from .autodiff import AutodiffBackend
from .structured import StructuredBackend

BACKENDS = ("autodiff", "autodiff-forward", "structured")


def make_backend(name: str):
    """A backend by name: "autodiff" (torch.func, reverse mode), "autodiff-forward", or
    "structured" (closed-form means where they apply, autodiff elsewhere)."""
    if name == "autodiff":
        return AutodiffBackend("jacrev")
    if name == "autodiff-forward":
        return AutodiffBackend("jacfwd")
    if name == "structured":
        return StructuredBackend()
    raise ValueError(f"unknown Jacobian backend {name!r}; choose one of {', '.join(BACKENDS)}")
