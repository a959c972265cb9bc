"""Exact sublayer Jacobians: backends and the streaming engine."""

from .autodiff import AutodiffBackend


def make_backend(name: str):
    """A backend by name: "autodiff" (torch.func, reverse mode) or "autodiff-forward"."""
    if name == "autodiff":
        return AutodiffBackend("jacrev")
    if name == "autodiff-forward":
        return AutodiffBackend("jacfwd")
    raise ValueError(f"unknown Jacobian backend {name!r}; choose 'autodiff' or 'autodiff-forward'")
