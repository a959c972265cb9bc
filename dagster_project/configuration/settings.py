"""What every analysis setting is, in one place: CLI flag, environment variable, default, check.

The order of precedence is the same for the CLI, the UI and the tests: a CLI flag, else the
``RESDYN_*`` variable, else the value of the chosen preset (:data:`PRESETS`; ``--preset`` or
``RESDYN_PRESET``), else the default. Every value is checked before anything is written, and a
bad one is a one-line error naming the flag or variable it came from. ``AnalysisSettings`` (the
Dagster resource), the CLI's options and the settings table of docs/configuration.md are all derived from
:data:`SETTINGS`; :func:`settings_hash` identifies a set of values in every table row.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass


class SettingError(ValueError):
    pass


@dataclass(frozen=True)
class Setting:
    name: str  # field of AnalysisSettings
    flag: str
    variable: str
    kind: type
    default: object
    help: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[object], None] | None = None  # raises ValueError with a reason
    in_hash: bool = True  # does it change the numbers (else: only how fast they come)

    def parse(self, raw, source: str):
        """``raw`` (a string from the environment, or a CLI/Python value) as this setting's type, checked."""
        if not isinstance(raw, str):  # a Python value (resdyn.run, run config): its type must be the setting's
            raw = self._python_value(raw, source)
        try:
            value = self.kind(raw) if not isinstance(raw, self.kind) else raw
        except (TypeError, ValueError):
            raise SettingError(f"{source}={raw!r} is not a valid {self.kind.__name__} ({self.help})") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingError(f"{source}={raw!r} must be a finite number ({self.help})")
        if self.choices and value not in self.choices:
            raise SettingError(f"{source}={raw!r} must be one of {', '.join(map(str, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            raise SettingError(f"{source}={raw!r} must be >= {self.minimum} ({self.help})")
        if self.maximum is not None and value > self.maximum:
            raise SettingError(f"{source}={raw!r} must be <= {self.maximum} ({self.help})")
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as error:
                raise SettingError(f"{source}={raw!r}: {error}") from None
        return value

    def _python_value(self, raw, source: str):
        """``raw`` unchanged where it is a value of this setting's type; else the one-line error the CLI would give
        (a boolean is not a number, 8.5 is not a whole number, 64 is not a text)."""
        import numbers

        whole = isinstance(raw, numbers.Integral) and not isinstance(raw, bool)
        number = whole or (isinstance(raw, numbers.Real) and not isinstance(raw, bool))
        if self.kind is int and whole or self.kind is float and number:
            return self.kind(raw)
        wanted = {int: "a whole number", float: "a number", str: "a text"}.get(self.kind, self.kind.__name__)
        raise SettingError(f"{source}={raw!r} is not {wanted} ({self.help})")


def _check_device(value) -> None:
    from resdyn.models.devices import resolve_device

    resolve_device(value)


DTYPE_CHOICES = ("float64", "float32", "bfloat16")  # resdyn.models.precision.DTYPES (a test keeps them equal)
BACKEND_CHOICES = ("structured", "autodiff", "autodiff-forward")  # resdyn.jacobians.BACKENDS, likewise


SETTINGS: tuple[Setting, ...] = (
    Setting("n_samples", "--samples", "RESDYN_SAMPLES", int, 128, "analysis samples (token windows)", minimum=1),
    Setting("sequence_length", "--seq-len", "RESDYN_SEQ_LEN", int, 64, "tokens per window", minimum=2),
    Setting("seed", "--seed", "RESDYN_SEED", int, 0, "seed of the window draw, Leiden and permutations", minimum=0),
    Setting("bos", "--bos", "RESDYN_BOS", str, "auto", "start each window with the tokenizer's beginning-of-sequence "
            "token where it adds one (auto) or never", choices=("auto", "never")),
    Setting("positions", "--positions", "RESDYN_POSITIONS", str, "last", "analysed positions: the last token or all "
            "from the warm-up on", choices=("last", "all")),
    Setting("warmup", "--warmup", "RESDYN_WARMUP", int, 16, "first analysed position with --positions all", minimum=0),
    Setting("batch_size", "--batch-size", "RESDYN_BATCH_SIZE", int, 16, "samples per forward batch", minimum=1,
            in_hash=False),
    Setting("dtype", "--dtype", "RESDYN_DTYPE", str, "float64", "compute precision", choices=DTYPE_CHOICES),
    Setting("backend", "--backend", "RESDYN_BACKEND", str, "structured", "Jacobian backend: structured (closed-form "
            "means, autodiff where none applies), autodiff (adds per-entry variance) or autodiff-forward",
            choices=BACKEND_CHOICES),
    Setting("device", "--device", "RESDYN_DEVICE", str, "auto", "compute device: auto (cuda when available, else cpu), "
            "cpu, cuda, cuda:N or mps", check=_check_device),
    Setting("workers", "--workers", "RESDYN_WORKERS", int, 0, "processes for spectral and topology work (0: one per "
            "core)", minimum=0, in_hash=False),
    Setting("per_sample_subsample", "--per-sample", "RESDYN_PER_SAMPLE", int, 8, "samples whose per-sample Jacobians "
            "are kept (for per-sample metrics)", minimum=0),
    Setting("graph_construction", "--graph", "RESDYN_GRAPH", str, "knn", "correlation graph: knn, threshold or dense",
            choices=("knn", "threshold", "dense")),
    Setting("graph_k", "--graph-k", "RESDYN_GRAPH_K", int, 0, "neighbours per unit (0: min(30, max(5, d // 4)))",
            minimum=0),
    Setting("graph_threshold", "--graph-threshold", "RESDYN_GRAPH_THRESHOLD", float, 0.3, "|r| threshold of the "
            "threshold graph", minimum=0.0, maximum=1.0),
    Setting("leiden_seeds", "--leiden-seeds", "RESDYN_LEIDEN_SEEDS", int, 5, "Leiden seeds per gamma in the scan",
            minimum=1),
    Setting("n_permutations", "--permutations", "RESDYN_PERMUTATIONS", int, 1000, "degree-stratified permutations "
            "per coupling test", minimum=0),
    Setting("folds", "--folds", "RESDYN_FOLDS", int, 8, "contiguous sample blocks whose means give every measure a "
            "sampling interval (block jackknife, resdyn/sampling.py); 0 or 1: off", minimum=0),
    Setting("fold_max_width", "--fold-max-width", "RESDYN_FOLD_MAX_WIDTH", int, 1024, "widest model the folds run on "
            "(each fold costs one more factorization per sublayer: about 8x the spectral stage at d = 4096)", minimum=0),
)
BY_NAME = {setting.name: setting for setting in SETTINGS}
IN_HASH = frozenset(setting.name for setting in SETTINGS if setting.in_hash)  # the settings that change numbers

PRESET_FLAG, PRESET_VARIABLE = "--preset", "RESDYN_PRESET"
# Named sets of values below the flags and variables: each lists only what differs from the defaults, with why.
PRESETS: dict[str, dict[str, object]] = {
    # docs/paper.md: "1,000 samples of WikiText-2" (the defaults take 128); the paper fixes no other setting, so the
    # rest stay at the defaults docs/paper.md and docs/methods.md describe (64-token windows, last token, float64).
    # 20,000 permutations: a BH family of m tests rejects nothing unless some p <= 0.05 / m, and a permutation p
    # cannot fall below 1 / (1 + B); at B = 1000 that floor is above 0.05 / m for m >= 50 (SmolLM2: 60 sublayers),
    # so rules v4's power (resdyn/coupling_power.py) would be 0 by construction. At 20,000 it reaches m = 1000.
    "paper": {"n_samples": 1000, "n_permutations": 20000},
}


def check_together(values: dict, sources: dict | None = None) -> None:
    """Checks that involve several settings."""
    sources = sources or {}
    if values["positions"] == "all" and not values["warmup"] < values["sequence_length"]:
        raise SettingError(f"{sources.get('warmup', 'warmup')}={values['warmup']} must be below "
                           f"{sources.get('sequence_length', 'seq_len')}={values['sequence_length']} with positions=all")


def preset_values(preset: str | None, environment) -> tuple[dict, str]:
    """The values of the preset ``preset`` names (a --preset flag), else RESDYN_PRESET, else none; and its name
    as a source for error messages."""
    if preset not in (None, ""):
        name, source = str(preset).strip(), PRESET_FLAG
    elif str(environment.get(PRESET_VARIABLE, "")).strip():
        name, source = str(environment[PRESET_VARIABLE]).strip(), PRESET_VARIABLE
    else:
        return {}, ""
    if name not in PRESETS:
        raise SettingError(f"{source}={name!r} is not a preset; the presets: {', '.join(sorted(PRESETS))}")
    return PRESETS[name], f"{source}={name}"


def resolve(given: dict | None, environment, preset: str | None = None) -> dict:
    """Every setting's value: ``given`` (CLI flags, None = not given) > ``environment`` > the preset (``preset``,
    else RESDYN_PRESET) > default, checked."""
    given = given or {}
    chosen, preset_source = preset_values(preset, environment)
    values, sources = {}, {}
    for setting in SETTINGS:
        if given.get(setting.name) is not None:
            values[setting.name] = setting.parse(given[setting.name], setting.flag)
            sources[setting.name] = setting.flag
        elif environment.get(setting.variable, "") != "":
            values[setting.name] = setting.parse(environment[setting.variable], setting.variable)
            sources[setting.name] = setting.variable
        elif setting.name in chosen:
            values[setting.name] = setting.parse(chosen[setting.name], f"{preset_source} {setting.name}")
            sources[setting.name] = preset_source
        else:
            values[setting.name] = setting.default
            sources[setting.name] = f"default {setting.name}"
    check_together(values, sources)
    return values


def validate(values: dict) -> dict:
    """Check a complete set of values (from the resource, e.g. run config typed in the UI)."""
    checked = {setting.name: setting.parse(values[setting.name], setting.name) for setting in SETTINGS}
    check_together(checked)
    return checked


def settings_hash(values: dict) -> str:
    """A short hash of the settings that change the numbers (workers and batch size do not)."""
    relevant = {setting.name: values[setting.name] for setting in SETTINGS if setting.in_hash}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:12]


def presets_table() -> str:
    lines = ["| preset | values (the rest: defaults) |", "|---|---|"]
    for name, values in PRESETS.items():
        changed = ", ".join(f"`{BY_NAME[key].flag} {value}`" for key, value in values.items())
        lines.append(f"| `{name}` | {changed} |")
    return "\n".join(lines) + "\n"


def readme_table() -> str:
    lines = ["| flag | variable | default | meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        choices = f" ({' / '.join(setting.choices)})" if setting.choices else ""
        lines.append(f"| `{setting.flag}` | `{setting.variable}` | `{setting.default}` | {setting.help}{choices} |")
    return "\n".join(lines) + "\n"
