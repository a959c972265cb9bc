"""Names of the residual-stream maps and boundaries, and depth as time (no heavy imports: the analysis
stages and the warehouse use these without loading torch)."""

SUBLAYERS = ("attn", "mlp")
BOUNDARIES = ("pre_attn", "pre_mlp")


def sublayer_depth(layer: int, sublayer: str) -> int:
    """Depth as time: 2 layer + 1 for the MLP map; the boundary where a sublayer starts has the same depth."""
    return 2 * layer + (sublayer in ("mlp", "pre_mlp"))
