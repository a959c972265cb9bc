"""A checkpoint opened one decoder layer at a time: memory = one layer, never the model.

The model is built from its config with transformers' own classes, every parameter on the meta
device (no memory) and every buffer real (rotary tables, embedding scales), exactly as
``from_config`` computes them. Then:

1. :meth:`LayerwiseModel.prepare` runs the decoder's own forward once per sample batch with each
   decoder layer replaced by a recorder, to collect what the model passes to every layer (masks,
   rotary tables, Gemma 4's per-layer inputs and shared-KV storage) and the embedded input. The
   embedding tables hold only the rows of the tokens used (``safe_open`` slicing), the final norm
   and the LM head are never loaded.
2. :meth:`LayerwiseModel.materialized` reads one decoder layer's tensors from the safetensors
   files (bf16/fp16/fp32 on disk), cast to the compute dtype on the compute device, and puts them
   back on the meta device when the caller is done.

No layer is implemented a second time: the recorders only observe the decoder's forward and the
layers are the HF modules themselves. :attr:`LayerwiseModel.ledger` counts the decoder layers and
bytes materialized at once, so tests can assert the bound.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from .adapters import FamilyAdapter, adapter_for
from .checkpoint import CheckpointFiles, locate_checkpoint
from .devices import resolve_device
from .precision import DTYPES, FULL_PRECISION_ATTENTION, loading_options, use_full_precision

log = logging.getLogger(__name__)


@contextmanager
def parameters_on_meta():
    """Every nn.Parameter registered inside goes to the meta device; buffers stay real.

    (accelerate's ``init_empty_weights(include_buffers=False)``, written out because it is one
    small function and accelerate is not otherwise needed.)
    """
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, parameter):
        register(module, name, parameter)
        if parameter is not None:
            kind = type(module._parameters[name])
            module._parameters[name] = kind(module._parameters[name].to("meta"), requires_grad=parameter.requires_grad)

    nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


class _StopForward(Exception):
    """Raised by the last recorder: nothing after the decoder layers is needed."""


class _ArgumentRecorder(nn.Module):
    """Stands in for decoder layer ``index`` during :meth:`LayerwiseModel.prepare`: records the
    layer's arguments by the real layer's own signature and passes the residual through."""

    def __init__(self, index: int, real_layer: nn.Module, store: list, last: bool) -> None:
        super().__init__()
        self.index, self.store, self.last = index, store, last
        self.signature = inspect.signature(real_layer.forward)

    def forward(self, *args, **kwargs):
        named = dict(self.signature.bind(*args, **kwargs).arguments)
        named.update(named.pop("kwargs", {}))
        self.store[self.index] = named
        if self.last:
            raise _StopForward
        return named["hidden_states"]


@dataclass
class MaterializationLedger:
    """What is materialized right now and at most: decoder layers and their parameter bytes."""

    live_layers: set = field(default_factory=set)
    live_bytes: int = 0
    peak_layers: int = 0
    peak_bytes: int = 0
    largest_layer_bytes: int = 0
    loads: int = 0

    def enter(self, index: int, n_bytes: int) -> None:
        self.live_layers.add(index)
        self.live_bytes += n_bytes
        self.loads += 1
        self.largest_layer_bytes = max(self.largest_layer_bytes, n_bytes)
        self.peak_layers = max(self.peak_layers, len(self.live_layers))
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def leave(self, index: int, n_bytes: int) -> None:
        self.live_layers.discard(index)
        self.live_bytes -= n_bytes


@dataclass
class PreparedBatch:
    """One batch of samples at the input of the first decoder layer."""

    input_ids: torch.Tensor  # (B, T)
    hidden: torch.Tensor  # (B, T, d): the residual stream, advanced layer by layer
    arguments: list[dict]  # per decoder layer: what the model passes to it besides the residual


class LayerwiseModel:
    """A causal LM checkpoint read layer by layer (see the module docstring)."""

    def __init__(self, source: str, revision: str | None = None, *, dtype: str = "float64",
                 device: str = "auto") -> None:
        from transformers import AutoConfig, AutoModelForCausalLM

        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
        self.directory = locate_checkpoint(source, revision)
        self.config = AutoConfig.from_pretrained(self.directory)
        self.adapter: FamilyAdapter = adapter_for(self.config.model_type)  # fails before any weights are read
        self.files = CheckpointFiles(self.directory)
        self.dtype_name = dtype
        self.dtype = DTYPES[dtype]
        self.device = resolve_device(device, dtype=dtype)
        attention = FULL_PRECISION_ATTENTION if dtype == "float64" else "eager"
        with parameters_on_meta():
            self.model = AutoModelForCausalLM.from_config(self.config, dtype=self.dtype, **loading_options(self.config))
        self.model.eval().requires_grad_(False)
        if dtype == "float64":
            use_full_precision(self.model)
        else:
            self.model.set_attn_implementation(attention)
        self.decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model
        self.layers = self.adapter.decoder_layers(self.model)
        self.text_config = getattr(self.layers[0].self_attn, "config", self.config)
        self.n_layers = len(self.layers)
        self.d_model = int(self.text_config.hidden_size)
        self.names = {parameter: name for name, parameter in self.model.named_parameters(remove_duplicate=False)}
        self.module_names = {module: name for name, module in self.model.named_modules(remove_duplicate=False)}
        self.ledger = MaterializationLedger()

    # -- reading tensors ------------------------------------------------------------------------

    def _key(self, full_name: str) -> str:
        """The checkpoint's name for the model's parameter or buffer ``full_name``."""
        if full_name in self.files:
            return full_name
        parts = full_name.split(".")
        for start in range(1, len(parts)):  # wrappers (model.language_model. ...) differ in prefix
            key = self.files.find_by_suffix(".".join(parts[start:]))
            if key is not None:
                return key
        raise KeyError(
            f"the checkpoint in {self.directory} has no tensor for {full_name!r}: it does not match "
            f"{type(self.model).__name__}'s parameter names"
        )

    def _materialize(self, module: nn.Module, *, rows: Sequence[int] | None = None) -> int:
        """Read ``module``'s parameters and persistent buffers; returns the bytes made real."""
        prefix = self.module_names[module]
        total = 0
        for name, parameter in list(module.named_parameters(recurse=True)):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            key = self._key(f"{prefix}.{name}" if prefix else name)
            if rows is not None:
                value = self.files.read_rows(key, rows, dtype=parameter.dtype, device=self.device)
            else:
                value = self.files.read(key, dtype=parameter.dtype, device=self.device)
            if rows is None and tuple(value.shape) != tuple(parameter.shape):
                raise ValueError(f"{key}: checkpoint shape {tuple(value.shape)} != model shape {tuple(parameter.shape)}")
            owner._parameters[leaf] = nn.Parameter(value, requires_grad=False)
            total += value.numel() * value.element_size()
        for name, buffer in list(module.named_buffers(recurse=True)):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            full_name = f"{prefix}.{name}" if prefix else name
            persistent = leaf not in owner._non_persistent_buffers_set
            key = None
            if persistent:
                try:
                    key = self._key(full_name)
                except KeyError:
                    key = None  # a persistent buffer the checkpoint lacks keeps its initial value, as from_pretrained does
            if key is not None:
                owner._buffers[leaf] = self.files.read(key, dtype=buffer.dtype, device=self.device)
            else:
                owner._buffers[leaf] = buffer.to(self.device)
        return total

    @staticmethod
    def _release(module: nn.Module) -> None:
        for name, parameter in list(module.named_parameters(recurse=True)):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            owner._parameters[leaf] = nn.Parameter(torch.empty(parameter.shape, dtype=parameter.dtype, device="meta"),
                                                   requires_grad=False)

    @contextmanager
    def materialized(self, index: int) -> Iterator[nn.Module]:
        """Decoder layer ``index`` with its weights on the compute device, for the ``with`` block."""
        layer = self.layers[index]
        n_bytes = self._materialize(layer)
        self.files.close()  # unmap the shards: their pages would otherwise stay resident, a layer's worth each time
        self.ledger.enter(index, n_bytes)
        try:
            yield layer
        finally:
            self._release(layer)
            self.ledger.leave(index, n_bytes)

    # -- the layers' inputs -----------------------------------------------------------------------

    def _outer_modules(self) -> list[nn.Module]:
        """The decoder's own modules outside its layers (embeddings, rotary tables, per-layer projections)."""
        inside = {id(m) for layer in self.layers for m in layer.modules()}
        outer = []
        for module in self.decoder.children():
            if module is self.layers or id(module) in inside:
                continue
            outer.append(module)
        return outer

    @torch.no_grad()
    def prepare(self, batches: Sequence[torch.Tensor]) -> list[PreparedBatch]:
        """Embed every batch of token ids and record each decoder layer's arguments."""
        token_rows = torch.unique(torch.cat([ids.reshape(-1) for ids in batches])).tolist()
        lookup = torch.tensor(token_rows, dtype=torch.long, device=self.device)
        hooks, outer = [], self._outer_modules()
        try:
            for module in outer:
                if isinstance(module, nn.Embedding):
                    self._materialize(module, rows=token_rows)
                    module.padding_idx = None  # only gradients use it; the row subset would break its check
                    hooks.append(module.register_forward_pre_hook(
                        lambda _, args: (torch.searchsorted(lookup, args[0]),)))
                else:
                    self._materialize(module)
            prepared = [self._record(ids.to(self.device)) for ids in batches]
        finally:
            for hook in hooks:
                hook.remove()
            for module in outer:
                self._release(module)
            self.files.close()
        return prepared

    def _record(self, input_ids: torch.Tensor) -> PreparedBatch:
        store: list[dict | None] = [None] * self.n_layers
        originals = list(self.layers)
        for index, layer in enumerate(originals):
            self.layers[index] = _ArgumentRecorder(index, layer, store, last=index == self.n_layers - 1)
        try:
            self.decoder(input_ids=input_ids, use_cache=False)
        except _StopForward:
            pass
        finally:
            for index, layer in enumerate(originals):
                self.layers[index] = layer
        hidden = store[0]["hidden_states"]
        arguments = [{key: value for key, value in named.items() if key != "hidden_states"} for named in store]
        return PreparedBatch(input_ids, hidden, arguments)

    @torch.no_grad()
    def advance(self, layer: nn.Module, batch: PreparedBatch, index: int, output: torch.Tensor | None = None) -> None:
        """Replace the batch's residual by decoder layer ``index``'s output: ``output`` where the caller has it
        already (FamilyAdapter.layer_output), else the HF layer's own forward (which also fills Gemma 4's
        shared-KV storage for the layers that reuse it)."""
        if output is None:
            output = layer(batch.hidden, **batch.arguments[index])
            output = output[0] if isinstance(output, tuple) else output
        batch.hidden = output
        batch.arguments[index] = {}  # this layer's masks and per-layer inputs are no longer needed


def describe_checkpoint(source: str, revision: str | None = None) -> dict:
    """Config and parameter count of a checkpoint without reading any weight."""
    from transformers import AutoConfig

    directory = locate_checkpoint(source, revision)
    config = AutoConfig.from_pretrained(directory)
    adapter_for(config.model_type)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    files = CheckpointFiles(directory)
    return {"config": config, "text_config": text, "n_params": files.parameter_count(),
            "stored_dtypes": files.stored_dtypes(), "directory": directory}
