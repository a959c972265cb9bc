"""resdyn: the transformer residual stream as a dynamical system (framework-free science)."""

__version__ = "0.1.0"
