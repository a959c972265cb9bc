"""The two residual-stream maps of a decoder layer, built from the model's own submodules.

Every decoder layer l is split at the paper's boundaries into

    attn: h_l (pre-attention residual)  ->  m_l (pre-MLP residual)
    mlp:  m_l (pre-MLP residual)        ->  h_{l+1} (next pre-attention residual)

so that ``mlp(attn(h)) == layer(h)`` exactly. Where a family puts norms (pre-norm, post-norm,
sandwich), scalars (Gemma 4's ``layer_scalar``, Granite's ``residual_multiplier``) or extra branches
(Gemma 4's per-layer input) is the family adapter's business: its maps compute them, and its
:meth:`FamilyAdapter.attention_parts` / :meth:`FamilyAdapter.mlp_parts` describe them
(:class:`AttentionParts`, :class:`MlpParts`) for the closed forms of :mod:`resdyn.jacobians`, which
read those descriptions and know no family. Everything else (capturing what the model passes to each
layer, slicing positions, the registry of families) is shared here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ...naming import BOUNDARIES, SUBLAYERS, sublayer_depth  # noqa: F401 - re-exported
from ..masks import additive_mask_row


@dataclass
class LayerInputs:
    """What the model passed to one decoder layer during a forward pass."""

    hidden: torch.Tensor  # (batch, tokens, d_model): the pre-attention residual
    arguments: dict = field(default_factory=dict)  # mask, rotary tables, per-layer inputs, ...
    output: torch.Tensor | None = None  # the layer's own output, kept for verification
    pre_mlp: torch.Tensor | None = None  # the attention map's output, computed once when first needed
    pre_mlp_rows: dict = field(default_factory=dict)  # position -> pre-MLP residual there (batch, d)
    context: object = None  # FixedContextCache holding every position's keys and values, once recorded

    def select(self, rows: list[int]) -> LayerInputs:
        """The same inputs for a subset of the batch: every tensor whose leading dimension is the batch
        size (residual, masks, per-layer inputs, shared keys and values) is sliced, the rest kept."""
        batch = self.hidden.shape[0]
        index = torch.as_tensor(rows, device=self.hidden.device)

        def pick(value):
            if isinstance(value, torch.Tensor):
                return value.index_select(0, index) if value.dim() and value.shape[0] == batch else value
            if isinstance(value, tuple):
                return tuple(pick(item) for item in value)
            if isinstance(value, MutableMapping):
                return type(value)({key: pick(item) for key, item in value.items()})
            return value

        return LayerInputs(pick(self.hidden), {key: pick(value) for key, value in self.arguments.items()})


@dataclass(frozen=True)
class AttentionParts:
    """Where a family puts the pieces of its attention residual map

        m = h + s * N_after(Attn(N_before(h))),

    N_before, N_after RMSNorms (absent: the identity), s the branch's output scalar (absent: 1).
    Pre-norm families have N_before only, post-norm ones N_after only, sandwich ones both; Granite has
    N_before and s = ``residual_multiplier``. What happens inside the attention module (projections,
    RoPE, q/k/v norms, its ``scaling``, keys and values shared with an earlier layer) is the module's
    own and is read from it.

    Attributes
    ----------
    attention : nn.Module
        The layer's attention module.
    norm_before : nn.Module or None
        N_before, the norm of the branch's input.
    norm_after : nn.Module or None
        N_after, the norm of the branch's output, before the scalar and the add.
    branch_scale : float or None
        s; None when the family has no such scalar.
    """

    attention: nn.Module
    norm_before: nn.Module | None
    norm_after: nn.Module | None
    branch_scale: float | None = None


@dataclass(frozen=True)
class PerLayerInputParts:
    """Gemma 4's third residual branch, B(h1) = N(W_projection (phi(W_gate h1) * p_t)), with p_t the
    per-layer input of token t (held fixed: an input of the layer, not a function of the residual).

    Attributes
    ----------
    gate : nn.Module
        The linear map W_gate, d -> d_pl.
    projection : nn.Module
        The linear map W_projection, d_pl -> d.
    norm : nn.Module
        The RMSNorm N of the branch's output.
    activation : Callable
        phi.
    """

    gate: nn.Module
    projection: nn.Module
    norm: nn.Module
    activation: Callable[[torch.Tensor], torch.Tensor]


MLP_KINDS = ("gated", "mixture_of_experts")


@dataclass(frozen=True)
class MlpParts:
    """Where a family puts the pieces of its MLP residual map

        h1  = x + s_b * N_after(M(N_before(x)))
        h2  = h1 + B(h1)      (the per-layer-input branch, where the family has one)
        out = s_out * h2,

    N_before, N_after RMSNorms (absent: the identity), s_b the branch's output scalar (Granite's
    ``residual_multiplier``), s_out the scalar of the whole map (Gemma 4's ``layer_scalar``); absent
    scalars are 1.

    Attributes
    ----------
    mlp : nn.Module
        The layer's MLP module M.
    kind : str or None
        ``"gated"``: M(n) = W_down (phi(W_gate n + b_gate) * (W_up n + b_up)) + b_down, with the module's
        ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn``; ``"mixture_of_experts"``: a routed block
        beside the dense MLP (Gemma 4), which has no closed form; None: any other shape.
    norm_before, norm_after : nn.Module or None
        N_before and N_after.
    branch_scale : float or None
        s_b.
    per_layer_input : PerLayerInputParts or None
        B, Gemma 4's per-layer-input branch.
    output_scale : torch.Tensor or float or None
        s_out.
    """

    mlp: nn.Module
    kind: str | None
    norm_before: nn.Module | None
    norm_after: nn.Module | None
    branch_scale: float | None = None
    per_layer_input: PerLayerInputParts | None = None
    output_scale: torch.Tensor | float | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in MLP_KINDS:
            raise ValueError(f"MLP kind {self.kind!r} is not one of {MLP_KINDS} (or None: no closed form)")


def mlp_kind(mlp: nn.Module) -> str | None:
    """``"gated"`` when ``mlp`` has the four pieces of a gated MLP (:class:`MlpParts`), else None."""
    pieces = ("gate_proj", "up_proj", "down_proj", "act_fn")
    return "gated" if all(hasattr(mlp, name) for name in pieces) else None


_REGISTERED: list[type[FamilyAdapter]] = []


def register_family(adapter: type[FamilyAdapter]) -> type[FamilyAdapter]:
    """Class decorator: make ``adapter`` the one :func:`~resdyn.models.adapters.adapter_for` returns for
    each config ``model_type`` in its ``families``, so that a family is added by one module that
    defines and registers its adapter."""
    taken = {family for registered in _REGISTERED for family in registered.families}
    clashing = taken & set(adapter.families)
    if clashing:
        raise ValueError(f"{adapter.__name__}: model types {sorted(clashing)} already have an adapter")
    _REGISTERED.append(adapter)
    return adapter


def registered_adapters() -> tuple[type[FamilyAdapter], ...]:
    """Every registered adapter class, in the order of registration."""
    return tuple(_REGISTERED)


def attention_output(attention: nn.Module, hidden: torch.Tensor, arguments: dict) -> torch.Tensor:
    """The attention module's output (after o_proj) for a whole sequence."""
    arguments = dict(arguments)
    shared = arguments.get("shared_kv_states")
    if isinstance(shared, MutableMapping):
        # Gemma 4 layers that own a KV cache write into this mapping (a KVSharingDict, which is a
        # UserDict, not a dict); a private copy keeps the states of the model's own forward intact
        # for the layers that read them, whatever this (perhaps perturbed) call computes.
        arguments["shared_kv_states"] = type(shared)(shared)
    output = attention(hidden_states=hidden, **arguments)
    return output[0] if isinstance(output, tuple) else output


class FamilyAdapter:
    """Base class: subclasses implement :meth:`attention_map` and :meth:`mlp_map`, and describe them by
    :meth:`attention_parts` and :meth:`mlp_parts` where a closed form may apply.

    Parameters
    ----------
    model_type : str or None
        The config's ``model_type`` the adapter serves (:attr:`family` names it in messages).
    """

    families: tuple[str, ...] = ()
    # arguments that hold one entry per token and must follow a position selection in the MLP map
    per_token_arguments: tuple[str, ...] = ()
    # what each sublayer map holds fixed, stated once (README, ``runs.map_conventions``)
    conventions: dict[str, str] = {
        "attention": "the map of one position's residual; the other positions' residuals (their keys and values) "
                     "are held fixed, so the Jacobian is the diagonal block d out_t / d h_t",
        "mlp": "position-wise: the map of one position's residual",
    }

    # The HF layer's forward is exactly mlp_map after attention_map (the same modules, in the same order, on the
    # same arguments: tested bit for bit on every family), so the layer-major driver takes a layer's output from
    # the pre-MLP residual it has already computed instead of running the whole sequence's attention again.
    forward_is_the_two_maps: bool = True

    def __init__(self, model_type: str | None = None) -> None:
        self.model_type = model_type

    @property
    def family(self) -> str:
        """The family's name (``gemma3_text`` -> ``gemma3``), for messages and cache keys."""
        return (self.model_type or (self.families[0] if self.families else type(self).__name__)).removesuffix("_text")

    def attention_map(self, layer: nn.Module, hidden: torch.Tensor, arguments: dict) -> torch.Tensor:
        raise NotImplementedError

    def mlp_map(self, layer: nn.Module, hidden: torch.Tensor, arguments: dict) -> torch.Tensor:
        raise NotImplementedError

    def attention_parts(self, layer: nn.Module) -> AttentionParts | None:
        """What :meth:`attention_map` is made of in ``layer`` (:class:`AttentionParts`); None: not described,
        so no closed form applies."""
        return None

    def mlp_parts(self, layer: nn.Module) -> MlpParts | None:
        """What :meth:`mlp_map` is made of in ``layer`` (:class:`MlpParts`); None: not described, so no
        closed form applies."""
        return None

    # -- shared machinery -------------------------------------------------------------------

    @staticmethod
    def attention_arguments(arguments: dict) -> dict:
        """The arguments the model passed to the layer, minus cache bookkeeping."""
        skip = {"cache", "past_key_values", "past_key_value", "use_cache", "output_attentions"}
        return {key: value for key, value in arguments.items() if key not in skip}

    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
        layers = getattr(decoder, "layers", None)
        if layers is None:
            raise TypeError(f"{type(model).__name__} exposes no decoder layers (expected get_decoder().layers)")
        return layers

    @torch.no_grad()
    def capture_layer_inputs(self, model: nn.Module, input_ids: torch.Tensor) -> list[LayerInputs]:
        """Run the model once and record, per decoder layer, its input residual and arguments."""
        layers = self.decoder_layers(model)
        captured: list[LayerInputs | None] = [None] * len(layers)
        handles = []

        def before(index: int, module: nn.Module, args: tuple, kwargs: dict) -> None:
            bound = inspect.signature(module.forward).bind(*args, **kwargs)
            named = dict(bound.arguments)
            named.update(named.pop("kwargs", {}))
            hidden = named.pop("hidden_states")
            captured[index] = LayerInputs(hidden, self.attention_arguments(named))

        def after(index: int, module: nn.Module, args: tuple, output) -> None:
            captured[index].output = output[0] if isinstance(output, tuple) else output

        for index, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(_bind(before, index), with_kwargs=True))
            handles.append(layer.register_forward_hook(_bind(after, index)))
        try:
            decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
            decoder(input_ids=input_ids, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        return captured  # type: ignore[return-value]

    def sublayer_input(self, inputs: LayerInputs, layer: nn.Module, boundary: str) -> torch.Tensor:
        """The residual at ``boundary`` (pre_attn or pre_mlp) for every token."""
        if boundary == "pre_attn":
            return inputs.hidden
        if boundary == "pre_mlp":
            return self.pre_mlp(layer, inputs)
        raise ValueError(f"unknown boundary {boundary!r}; expected one of {BOUNDARIES}")

    def pre_mlp(self, layer: nn.Module, inputs: LayerInputs) -> torch.Tensor:
        """The pre-MLP residual of every token (cached on ``inputs``). The same pass records every position's
        keys and values (``inputs.context``), which :meth:`row_function` holds fixed: one whole-sequence attention
        pass serves both. The module takes back from the empty :class:`FixedContextCache` the keys and values it
        gave it, so the output is the one without a cache."""
        if inputs.pre_mlp is None:
            inputs.context = FixedContextCache()
            with torch.no_grad():
                inputs.pre_mlp = self.attention_map(layer, inputs.hidden, {**inputs.arguments, "cache": inputs.context})
        return inputs.pre_mlp

    def layer_output(self, layer: nn.Module, inputs: LayerInputs) -> torch.Tensor | None:
        """The decoder layer's output for every token, mlp_map(pre_mlp(h)), from the pre-MLP residual
        (:meth:`pre_mlp`, computed if missing); None where the layer's forward does more than its two maps
        (:attr:`forward_is_the_two_maps`), so that only the layer itself gives its output."""
        if not self.forward_is_the_two_maps:
            return None
        with torch.no_grad():
            return self.mlp_map(layer, self.pre_mlp(layer, inputs), inputs.arguments)

    def positional_function(
        self, layer: nn.Module, inputs: LayerInputs, sublayer: str, position: int
    ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
        """``(f, x0)``: f maps the residual at ``position`` (batch, d) to the sublayer output there.

        Every other position is held at its captured value, so the Jacobian of f is the diagonal
        block d out_t / d h_t of the sublayer's full Jacobian.
        """
        if sublayer == "attn":
            hidden = inputs.hidden
            before, after = hidden[:, :position], hidden[:, position + 1 :]

            def attention_at_position(x: torch.Tensor) -> torch.Tensor:
                sequence = torch.cat([before, x.unsqueeze(1), after], dim=1)
                return self.attention_map(layer, sequence, inputs.arguments)[:, position]

            return attention_at_position, hidden[:, position]
        if sublayer == "mlp":
            pre_mlp = self.pre_mlp(layer, inputs)
            arguments = {
                key: (value[:, position : position + 1] if key in self.per_token_arguments and value is not None
                      else value)
                for key, value in inputs.arguments.items()
            }

            def mlp_at_position(x: torch.Tensor) -> torch.Tensor:
                return self.mlp_map(layer, x.unsqueeze(1), arguments)[:, 0]

            return mlp_at_position, pre_mlp[:, position]
        raise ValueError(f"unknown sublayer {sublayer!r}; expected one of {SUBLAYERS}")

    def row_function(
        self, layer: nn.Module, inputs: LayerInputs, sublayer: str, position: int
    ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
        """Like :meth:`positional_function`, but f recomputes only the analysed row.

        For the attention map the keys and values of every position are computed once by the
        module itself (a :class:`FixedContextCache` records them) and held fixed; f runs the module
        on the one row x with that cache, splicing in the row's own key and value, so a call costs
        one query's attention instead of the whole sequence's. The MLP map is position-wise already.
        """
        if sublayer != "attn":
            return self.positional_function(layer, inputs, sublayer, position)
        if inputs.context is None:
            self.pre_mlp(layer, inputs)  # its one whole-sequence pass records the keys and values
        keys, values = inputs.context.keys, inputs.context.values  # None: the layer reuses another's (Gemma 4)
        batch, length, _ = inputs.hidden.shape
        arguments = row_arguments(inputs.arguments, position, layer.self_attn, batch, length, inputs.hidden.dtype,
                                  inputs.hidden.device)

        def attention_at_row(x: torch.Tensor) -> torch.Tensor:
            cache = FixedContextCache(keys, values, position) if keys is not None else None
            return self.attention_map(layer, x.unsqueeze(1), {**arguments, "cache": cache})[:, 0]

        return attention_at_row, inputs.hidden[:, position]


class FixedContextCache:
    """Stands in for a KV cache in one call of an HF attention module.

    Empty, :meth:`update` records the keys and values the module computed for every position
    (post-RoPE, post-norm: the module's own code made them) and returns them. Given recorded
    ``keys``/``values`` and a ``position``, :meth:`update` returns them with that position's key
    and value replaced by the ones just computed from the analysed row: the only keys and values
    that depend on it. The module then attends from that one query row to every position.
    """

    is_compileable = False

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                 position: int | None = None) -> None:
        self.keys, self.values, self.position = keys, values, position

    def update(self, key_states, value_states, layer_idx=None, *args, **kwargs):
        if self.position is None:
            self.keys, self.values = key_states, value_states
            return key_states, value_states
        t = self.position
        keys = torch.cat([self.keys[:, :, :t], key_states, self.keys[:, :, t + 1 :]], dim=2)
        values = torch.cat([self.values[:, :, :t], value_states, self.values[:, :, t + 1 :]], dim=2)
        return keys, values

    def get_seq_length(self, *args, **kwargs) -> int:
        return 0


def row_arguments(arguments: dict, position: int, attention: nn.Module, batch: int, length: int, dtype,
                  device) -> dict:
    """The layer's arguments for a one-token call at ``position``: rotary tables and position ids sliced
    to that token, and the mask row made explicit and additive (B, 1, 1, T): sdpa passes no mask on its
    causal fast path, which a one-query call would read as 'attend to everything'."""
    sliced = dict(arguments)
    t = slice(position, position + 1)
    if sliced.get("position_embeddings") is not None:
        cos, sin = sliced["position_embeddings"]
        sliced["position_embeddings"] = (cos[:, t], sin[:, t])
    mask = additive_mask_row(sliced.get("attention_mask"), attention, position, length, batch, dtype, device)
    sliced["attention_mask"] = mask[:, None, None, :]
    if isinstance(sliced.get("position_ids"), torch.Tensor):
        sliced["position_ids"] = sliced["position_ids"][:, t]
    return sliced


def _bind(function, index):
    def hook(*args, **kwargs):
        return function(index, *args, **kwargs)

    return hook
