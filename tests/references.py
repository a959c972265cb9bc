"""Independent float64 references for the Jacobian tests, written apart from resdyn's own code."""

import torch
from torch.overrides import TorchFunctionMode


class UpcastFloat32(TorchFunctionMode):
    """This test's own rule, written apart from resdyn's: if any tensor argument is float64, every float32
    the call names becomes float64 (and ``.float()`` becomes ``.double()``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        if any(t.dtype == torch.float64 for t in tensors):
            if func is torch.Tensor.float:
                func = torch.Tensor.double
            args = [torch.float64 if a is torch.float32 else a for a in args]
            kwargs = {k: (torch.float64 if v is torch.float32 else v) for k, v in kwargs.items()}
        return func(*args, **kwargs)
