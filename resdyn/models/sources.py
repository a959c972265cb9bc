"""Local checkpoint directories for registered models that do not come as one: GGUF files and null models.

A GGUF model's ``gguf`` checkpoint is the file imported once into the model store
(:mod:`resdyn.models.gguf_import`); its ``init`` checkpoint is the null model made from the
imported config (:mod:`resdyn.models.null_model`); its ``init-quantized`` checkpoint is that null model
rounded through the file's own tensor types (:mod:`resdyn.models.quantized_null_model`). All live at
``<models>/<name>/<checkpoint>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .registry import (
    GGUF_REVISION,
    INIT_QUANTIZED_REVISION,
    INIT_REVISION,
    ROUNDING_NOISE_REVISIONS,
    SIMEX_REVISIONS,
    ModelSpec,
)


@dataclass(frozen=True)
class CheckpointOrigin:
    """Where a checkpoint's weights came from (the ``model_checkpoints`` row and the ``runs`` record)."""

    source_file: str = ""  # the GGUF file
    source_sha256: str = ""
    source_quantization: str = ""  # GGML tensor types by count
    initialization: str = ""  # how a null model's weights were drawn

    def as_dict(self) -> dict:
        return asdict(self)


def store_directory(models_directory: Path, spec: ModelSpec, checkpoint: str) -> Path:
    return Path(models_directory) / spec.name / checkpoint


def source_cache_directory(models_directory: Path, spec: ModelSpec) -> Path:
    """Where a GGUF file that ships in parts is concatenated (``_source``: no checkpoint label starts with '_')."""
    return Path(models_directory) / spec.name / "_source"


def gguf_checkpoint_label(spec: ModelSpec) -> str:
    """The checkpoint of ``spec`` that is the GGUF file itself."""
    labels = [label for label, revision in spec.checkpoints.items() if revision == GGUF_REVISION]
    if not labels:
        raise KeyError(f"model {spec.name} has no checkpoint made from its GGUF file (revision {GGUF_REVISION!r})")
    return labels[0]


def registered_origin(spec: ModelSpec, checkpoint: str) -> CheckpointOrigin:
    """What the registry says of a checkpoint's origin, without touching any file."""
    if not spec.is_gguf:
        return CheckpointOrigin()
    revision = spec.checkpoints[checkpoint]
    initialization = {INIT_REVISION: "the registered GGUF's config, freshly initialised",
                      INIT_QUANTIZED_REVISION: "the registered GGUF's config, freshly initialised, then rounded "
                                               "through the file's own tensor types",
                      **{kind: f"the registered GGUF's weights plus {multiple:g}x their own rounding variance"
                         for kind, multiple in ROUNDING_NOISE_REVISIONS.items()},
                      **{kind: simex_description(dose, draw) for kind, (dose, draw) in SIMEX_REVISIONS.items()}
                      }.get(revision, "")
    return CheckpointOrigin(spec.source, spec.sha256, spec.quantization, initialization)


def directory_fingerprint(directory: str | Path) -> str | None:
    """A short hash of a model directory's files by relative name, size and modification time (not content:
    a directory of a large model would take minutes to hash), or None when ``directory`` is not one. A
    directory rewritten in place (new weights, a new config) gets another fingerprint, so ``--resume`` reruns
    what was made from it."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        return None
    entries = []
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            status = path.stat()
            entries.append(f"{relative.as_posix()}\t{status.st_size}\t{status.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def ensure_local_checkpoint(spec: ModelSpec, checkpoint: str, models_directory: Path, *,
                            progress: Callable[[str], None] | None = None) -> tuple[Path, CheckpointOrigin]:
    """The directory of a GGUF model's checkpoint, imported or initialised on first use, and its origin."""
    from .gguf_import import import_gguf
    from .null_model import initialised_checkpoint

    if not spec.is_gguf:
        raise ValueError(f"model {spec.name} ({spec.source}) is not a GGUF model")
    revision = spec.checkpoints[checkpoint]
    trained = store_directory(models_directory, spec, gguf_checkpoint_label(spec))
    if spec.parts:  # concatenated once, beside the model's checkpoints
        from .parts import assembled_gguf

        gguf_file = assembled_gguf(spec, source_cache_directory(models_directory, spec), progress=progress)
    else:
        gguf_file = spec.gguf_path()
    record = import_gguf(gguf_file, trained, progress=progress, expected_sha256=spec.sha256 or None)
    origin = CheckpointOrigin(record.source, record.sha256, record.quantization_summary)
    if revision == GGUF_REVISION:
        return trained, origin
    if revision == INIT_REVISION:
        destination = store_directory(models_directory, spec, checkpoint)
        made = initialised_checkpoint(trained, destination, config_values=spec.init_config)
        return destination, CheckpointOrigin(record.source, record.sha256, record.quantization_summary,
                                             f"{made['initialization']}; seed {made['seed']}")
    if revision == INIT_QUANTIZED_REVISION:  # the null model (at its own label), rounded through the file's types
        from .quantized_null_model import quantized_checkpoint

        labels = [label for label, kind in spec.checkpoints.items() if kind == INIT_REVISION]
        null_model = store_directory(models_directory, spec, labels[0] if labels else INIT_REVISION)
        made = initialised_checkpoint(trained, null_model, config_values=spec.init_config)
        destination = store_directory(models_directory, spec, checkpoint)
        quantized = quantized_checkpoint(gguf_file, null_model, destination, expected_sha256=record.sha256,
                                         progress=progress)
        return destination, CheckpointOrigin(record.source, record.sha256, record.quantization_summary,
                                             f"{made['initialization']}; seed {made['seed']}; "
                                             f"{quantized['initialization']}")
    if revision in ROUNDING_NOISE_REVISIONS:  # the file's weights with more rounding noise: a SIMEX dose
        from .rounding_noise import rounding_noise_checkpoint

        destination = store_directory(models_directory, spec, checkpoint)
        made = rounding_noise_checkpoint(gguf_file, trained, destination, ROUNDING_NOISE_REVISIONS[revision],
                                         expected_sha256=record.sha256, progress=progress)
        return destination, CheckpointOrigin(record.source, record.sha256, record.quantization_summary,
                                             made["initialization"])
    if revision in SIMEX_REVISIONS:  # the SIMEX set: the file's weights as they are, or one noise draw at a dose
        from .rounding_noise import rounding_noise_checkpoint

        dose, draw = SIMEX_REVISIONS[revision]
        if dose == 0.0:  # the paired baseline is the imported file itself, measured at the set's settings
            return trained, CheckpointOrigin(record.source, record.sha256, record.quantization_summary,
                                             simex_description(dose, draw))
        destination = store_directory(models_directory, spec, checkpoint)
        made = rounding_noise_checkpoint(gguf_file, trained, destination, dose, seed=draw,
                                         expected_sha256=record.sha256, progress=progress)
        return destination, CheckpointOrigin(record.source, record.sha256, record.quantization_summary,
                                             made["initialization"])
    raise KeyError(f"model {spec.name}: checkpoint {checkpoint} has revision {revision!r}; a GGUF model's checkpoints "
                   f"are {GGUF_REVISION!r} (the file), {INIT_REVISION!r} (its null model), "
                   f"{INIT_QUANTIZED_REVISION!r} (the null model rounded through the file's types) or "
                   f"{', '.join(map(repr, ROUNDING_NOISE_REVISIONS))} (the file's weights with more rounding noise) or "
                   f"one of the SIMEX set ({', '.join(SIMEX_REVISIONS)})")


def simex_description(dose: float, draw: int) -> str:
    """What a checkpoint of the SIMEX set is made of (resdyn.models.registry.SIMEX_REVISIONS)."""
    if dose == 0.0:
        return "the registered GGUF's weights as they are: the SIMEX set's paired baseline"
    return f"the registered GGUF's weights plus {dose:g}x their own rounding variance (SIMEX draw {draw})"
