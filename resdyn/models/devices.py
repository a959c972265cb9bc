"""The compute device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, checked before any work.

``auto`` is the first CUDA device when one is available, else the CPU. A device that does not
exist here is a one-line error naming the ones that do.
"""

from __future__ import annotations

import torch

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"


class DeviceError(ValueError):
    pass


def available_devices() -> list[str]:
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def resolve_device(name: str | torch.device, *, dtype: str = "float64") -> torch.device:
    """The torch.device for ``name``; a :class:`DeviceError` naming the available ones otherwise."""
    if isinstance(name, torch.device):
        name = str(name)
    text = (name or "auto").strip().lower()
    available = available_devices()
    if text == "auto":
        text = "cuda:0" if any(d.startswith("cuda") for d in available) else "cpu"
    if text == "cuda":
        text = "cuda:0"
    try:
        device = torch.device(text)
    except RuntimeError:
        raise DeviceError(f"unknown device {name!r}; use one of {DEVICE_CHOICES} (available here: "
                          f"{', '.join(available)})") from None
    canonical = f"{device.type}:{device.index}" if device.type == "cuda" else device.type
    if canonical not in available:
        raise DeviceError(f"device {name!r} is not available here; available: {', '.join(available)}")
    if device.type == "mps" and dtype == "float64":
        raise DeviceError("mps has no float64: use --dtype float32 on mps, or --device cpu for float64")
    return device
