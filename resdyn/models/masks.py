"""Attention masks as the sublayer maps and the closed forms read them.

Both the one-row attention call of a family adapter (:meth:`FamilyAdapter.row_function`) and the
closed-form attention Jacobian (:mod:`resdyn.jacobians.structured_attention`) need the mask row of
one query position as explicit additive floats, whatever the model's attention implementation passed.
The helper lives with the models so that the adapters need nothing from :mod:`resdyn.jacobians`.
"""

from __future__ import annotations

import torch


def additive_mask_row(mask, attention, position: int, length: int, batch: int, dtype, device) -> torch.Tensor:
    """Row ``position`` of a layer's attention mask as additive floats.

    Parameters
    ----------
    mask : torch.Tensor or None
        What the model passed to the layer: an additive float mask (B, 1, T, T) as it is, a boolean
        mask (True: attend) as 0 / -inf, or None, which is sdpa's causal fast path: the causal mask
        of ``attention`` (nothing masked for a bidirectional module, ``is_causal`` False).
    attention : torch.nn.Module
        The layer's attention module (only its ``is_causal`` is read).
    position : int
        The query position t.
    length : int
        How many key positions the row covers.
    batch : int
        The batch size B.
    dtype, device
        Of the returned row.

    Returns
    -------
    torch.Tensor
        (B, length): m_j = 0 where t may attend to j, -inf where it may not.
    """
    if mask is None:
        allowed = torch.ones(length, dtype=torch.bool, device=device)
        if getattr(attention, "is_causal", True):
            allowed = torch.arange(length, device=device) <= position
        row = torch.zeros(length, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))
        return row.expand(batch, length)
    row = mask[:, 0, position, :length]
    if row.dtype == torch.bool:
        return torch.zeros(row.shape, dtype=dtype, device=device).masked_fill(~row, float("-inf")).expand(batch, length)
    return row.to(dtype).expand(batch, length)
