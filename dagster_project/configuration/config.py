"""The study's configuration, made once: a CLI flag, else its environment variable, else the default.

:class:`StudyConfig` is everything a run needs besides the model: the analysis settings
(dagster_project/configuration/settings.py), where the warehouse and the corpus are, which executor runs the steps
and what cluster it talks to. It is made in one place (:meth:`StudyConfig.resolve`) and, frozen,
handed to everything else: :func:`resdyn.dagster_project.launch.study_definitions.build_definitions` builds the
Dagster definitions from it, and it travels as JSON to every process that runs a step (the
reconstructable job's arguments), so a flag given to the CLI reaches a Ray worker without passing
through anybody's environment.

This is the only module of dagster_project/ and assets/ that reads ``os.environ``: Dagster itself
and the processes it starts by module name (code server, daemon) are pointed at their instance and
configuration through the environment, and that also happens here (:func:`use_dagster_home`,
:func:`child_environment`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType

from resdyn.dagster_project.configuration.locations import LocalLocation, ObjectLocation, parse_location
from resdyn.dagster_project.configuration.settings import SETTINGS, SettingError, resolve, validate
from resdyn.lifeline import OWNER_VARIABLE

EXECUTORS = ("in_process", "multiprocess", "ray")
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
IS_SOURCE_CHECKOUT = (REPOSITORY_ROOT / "pyproject.toml").is_file()
SQL_DIRECTORY = REPOSITORY_ROOT / "sql"  # views.sql, the named questions, the claims' and the report's SQL
# the repository's warehouse/ in a checkout, else ./warehouse (never inside site-packages)
DEFAULT_WAREHOUSE = REPOSITORY_ROOT / "warehouse" if IS_SOURCE_CHECKOUT else Path("warehouse")



@dataclass(frozen=True)
class Variable:
    """A run setting outside the analysis settings (those are dagster_project/configuration/settings.py): its StudyConfig field,
    environment variable, flag, default as the docs say it, and meaning."""

    field: str
    variable: str
    flag: str
    default: str
    meaning: str


ENVIRONMENT = (
    Variable("warehouse", "RESDYN_WAREHOUSE", "--warehouse", "`warehouse/` (in a checkout; else `./warehouse`)",
             "warehouse root: a directory, made by the first `resdyn run`"),
    Variable("executor", "RESDYN_EXECUTOR", "--executor", "`in_process`",
             "Dagster executor: `in_process`, `multiprocess` or `ray`"),
    Variable("ray_address", "RESDYN_RAY_ADDRESS", "--ray-address", "`RAY_ADDRESS`, else none",
             "the Ray cluster: dashboard URL `http://HOST:8265`, GCS `HOST:6379` or `ray://HOST:10001`"),
    Variable("ray_node_cpus", "RESDYN_RAY_NODE_CPUS", "", "`0` (asked of the cluster)",
             "cores of the Ray cluster's largest node: a whole number >= 0"),
    Variable("ray_gpus", "RESDYN_RAY_GPUS", "", "`false`",
             "with `--device auto`: the Ray cluster has GPUs for the model steps (`1`/`true`/`yes`/`on` or "
             "`0`/`false`/`no`/`off`)"),
    Variable("model_runners", "RESDYN_MODEL_RUNNERS", "", "`1`",
             "steps that may run a model at once (the `model_runner` pool): a whole number >= 1"),
    Variable("wikitext_directory", "RESDYN_WIKITEXT_DIR", "", "the Makefile: `../shared/data/wikitext-2-raw` "
             "when present", "directory holding `wiki.test.raw` (WikiText-2 raw)"),
    Variable("wikitext_tokenized_directory", "RESDYN_WIKITEXT_TOKENIZED_DIR", "", "the Makefile: "
             "`../shared/data/wikitext-2-tokenized` when present", "directory holding `valid.txt`, the tiny suite's "
             "training text"),
)
# field of StudyConfig -> its environment variable
VARIABLES = {variable.field: variable.variable for variable in ENVIRONMENT}
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def environment_table() -> str:
    """The markdown table of :data:`ENVIRONMENT` (docs/configuration.md)."""
    from resdyn.dagster_project.configuration.settings import PRESET_FLAG, PRESET_VARIABLE, PRESETS

    preset = Variable("", PRESET_VARIABLE, PRESET_FLAG, "none", "a named set of analysis settings below the flags "
                      f"and variables ({', '.join(sorted(PRESETS))}; the table below)")
    owner = Variable("", OWNER_VARIABLE, "", "set by `resdyn run`", "not a setting: the process that owns the runs "
                     "of a process tree (`pid:start:host`), so that every process of a run ends with it and a lease "
                     "names it (resdyn/lifeline.py); forwarded to Ray steps")
    lines = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for variable in (*ENVIRONMENT, preset, owner):
        flag = f"`{variable.flag}`" if variable.flag else "-"
        lines.append(f"| `{variable.variable}` | {flag} | {variable.default} | {variable.meaning} |")
    return "\n".join(lines) + "\n"

# what a step on a Ray worker needs from the submitting environment when it loads the definitions
# module itself (a run launched from the UI), besides the variables above; the AWS SDK's own variables reach an
# object-store warehouse from the worker (where set here: a cluster whose nodes hold their own IAM role needs none)
AWS_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_EC2_METADATA_DISABLED",
                 "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
FORWARDED_VARIABLES = ("DAGSTER_HOME", "HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_VERBOSITY",
                       "PYTHONPATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "XDG_CACHE_HOME", *AWS_VARIABLES,
                       *VARIABLES.values(), OWNER_VARIABLE)


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names its flag or variable and the fix."""


@dataclass(frozen=True)
class StudyConfig:
    """Every setting of a run, checked. Make it with :meth:`resolve`; change it with :meth:`replace`."""

    settings: Mapping[str, object] = field(default_factory=lambda: MappingProxyType(
        {setting.name: setting.default for setting in SETTINGS}))
    warehouse: str = str(DEFAULT_WAREHOUSE.resolve())
    executor: str = "in_process"
    ray_address: str = ""  # as given; launch.prepare turns it into the job-submission URL
    ray_node_cpus: int = 0  # cores of the cluster's largest node (0: not known)
    ray_gpus: bool = False  # with device auto: does the cluster have GPUs for the model steps
    model_runners: int = 1  # steps that may run a model at once (the model_runner pool)
    wikitext_directory: str = ""
    wikitext_tokenized_directory: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    @classmethod
    def resolve(cls, flags: Mapping | None = None, environment: Mapping | None = None) -> StudyConfig:
        """The configuration from ``flags`` (None: not given) > ``environment`` (default: this process's)
        > the preset (``flags["preset"]``, else RESDYN_PRESET; analysis settings only) > defaults, every value
        checked; a bad one is a :class:`ConfigError` naming where it came from."""
        flags = {name: value for name, value in (flags or {}).items() if value is not None}
        environment = os.environ if environment is None else environment
        settings = resolve({setting.name: flags.get(setting.name) for setting in SETTINGS}, environment,
                           preset=flags.get("preset"))

        def given(name: str) -> tuple[str, str] | None:
            if flags.get(name) not in (None, ""):
                return str(flags[name]), "--" + name.replace("_", "-")
            if str(environment.get(VARIABLES[name], "")).strip():
                return str(environment[VARIABLES[name]]).strip(), VARIABLES[name]
            return None

        values: dict = {"settings": settings, "warehouse": str(_warehouse_directory(
            flags.get("warehouse"), environment, given("warehouse")))}
        for name in ("wikitext_directory", "wikitext_tokenized_directory"):
            if (found := given(name)) is not None:
                values[name] = str(Path(found[0]).expanduser().resolve())
        if (found := given("executor")) is not None:
            values["executor"] = _executor_name(*found)
        address = given("ray_address") or ((environment["RAY_ADDRESS"].strip(), "RAY_ADDRESS")
                                           if environment.get("RAY_ADDRESS", "").strip() else None)
        if address is not None:
            values["ray_address"] = address[0]
        for name, minimum, meaning in (("model_runners", 1, "how many steps may run a model at once; default 1"),
                                       ("ray_node_cpus", 0, "cores of the cluster's largest node; 0: unknown")):
            if (found := given(name)) is not None:
                values[name] = _whole_number(*found, minimum, meaning)
        if (found := given("ray_gpus")) is not None:
            values["ray_gpus"] = _yes_or_no(*found)
        return cls(**values)

    def replace(self, **changes) -> StudyConfig:
        """A copy with ``changes``; analysis settings by name (``samples=...`` is ``n_samples``) are checked."""
        settings = {name: changes.pop(name) for name in list(changes) if name in self.settings}
        config = replace(self, **changes)
        if settings:
            config = replace(config, settings=validate({**self.settings, **settings}))
        return config

    def to_json(self) -> str:
        """The configuration as JSON (it crosses process boundaries as the reconstructable job's argument)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps({**values, "settings": dict(self.settings)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StudyConfig:
        values = json.loads(text)
        return cls(**{**values, "settings": validate(values["settings"])})

    def environment(self) -> dict[str, str]:
        """This configuration as the variables :meth:`resolve` reads: for processes that Dagster starts by
        module name (the UI's code server and daemon), which can be given nothing else."""
        variables = {setting.variable: str(self.settings[setting.name]) for setting in SETTINGS}
        for name, variable in VARIABLES.items():
            value = getattr(self, name)
            if value not in ("", 0, False) or name == "model_runners":
                variables[variable] = str(int(value)) if isinstance(value, bool) else str(value)
        return variables


def _executor_name(value: str, source: str) -> str:
    name = value.strip().replace("-", "_")
    if name not in EXECUTORS:
        raise ConfigError(f"{source}={value!r} must be one of {', '.join(EXECUTORS)}")
    return name


def _yes_or_no(raw: str, source: str) -> bool:
    word = raw.strip().lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise ConfigError(f"{source}={raw!r} must be one of {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}")
    return word in TRUE_WORDS


def _whole_number(raw: str, source: str, minimum: int, meaning: str) -> int:
    try:
        number = int(raw)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ConfigError(f"{source}={raw!r} must be a whole number >= {minimum} ({meaning})")
    return number


def warehouse_location(given: str | os.PathLike | None = None, environment: Mapping | None = None
                       ) -> LocalLocation | ObjectLocation:
    """Where the warehouse lives: ``given`` (a --warehouse flag), else RESDYN_WAREHOUSE (of ``environment``, default
    this process's), else the default; a local directory or ``s3://BUCKET/PREFIX``."""
    environment = os.environ if environment is None else environment
    return parse_location(given or str(environment.get(VARIABLES["warehouse"], "")).strip() or DEFAULT_WAREHOUSE)


def warehouse_root(given: str | os.PathLike | None = None, environment: Mapping | None = None) -> Path:
    """The warehouse root: ``given`` (a --warehouse flag), else RESDYN_WAREHOUSE (of ``environment``, default this
    process's), else the default."""
    location = warehouse_location(given, environment)
    if isinstance(location, ObjectLocation):
        # every command and the UI reach an object store through store/object_warehouse.py (store.open_warehouse);
        # code that asks for a folder is refused here rather than write one named `s3:`
        raise ConfigError(f"warehouse {location} is an object-store warehouse, not a folder: open it with "
                          "resdyn.dagster_project.store.open_warehouse (docs/configuration.md), or give --warehouse "
                          "(or RESDYN_WAREHOUSE) a local directory")
    return location.path


def _warehouse_directory(flag, environment: Mapping, found: tuple[str, str] | None) -> Path | str:
    """The warehouse root, refused when it (or a folder above it) is there but is not a directory; an object store's
    ``s3://bucket/prefix`` as it is (store/object_warehouse.py writes and reads it)."""
    location = warehouse_location(flag, environment)
    if isinstance(location, ObjectLocation):
        return str(location)
    root = location.path
    blocking = next((path for path in (root, *root.parents) if path.exists() and not path.is_dir()), None)
    if blocking is not None:
        source = f"{found[1]}={found[0]}" if found else f"the default warehouse {root}"
        what = "is not a directory" if blocking == root else f"lies under {blocking}, which is not a directory"
        raise ConfigError(f"{source} {what}: give --warehouse (or RESDYN_WAREHOUSE) a directory, new or a "
                          "warehouse `resdyn run` made")
    return root


def dagster_home() -> str | None:
    """The persistent Dagster instance's directory (DAGSTER_HOME), or None: runs use an ephemeral one."""
    return os.environ.get("DAGSTER_HOME") or None


def use_dagster_home(path: str | os.PathLike) -> None:
    """Point Dagster (this process and every process it starts) at the instance in ``path``: Dagster reads
    its instance from DAGSTER_HOME only."""
    set_for_this_process({"DAGSTER_HOME": str(path)})


def cache_directory() -> Path:
    """resdyn's per-user cache (``$XDG_CACHE_HOME/resdyn``, default ``~/.cache/resdyn``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "resdyn"


def child_environment(changes: Mapping[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with ``changes`` and without ``drop``, for a child process."""
    return {**{key: value for key, value in os.environ.items() if key not in drop}, **(changes or {})}


def set_for_this_process(variables: Mapping[str, str]) -> None:
    """Set ``variables`` in this process's environment, for libraries that read nothing else (Ray's node
    address rule, Dagster's instance)."""
    os.environ.update(variables)


def forwarded_variables() -> list[str]:
    """The variables of :data:`FORWARDED_VARIABLES` that are set here (a Ray step copies them)."""
    return [variable for variable in FORWARDED_VARIABLES if os.environ.get(variable)]


def executable_path() -> str:
    """PATH with this interpreter's scripts first: a Ray step's entry point is ``dagster api execute_step``."""
    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


__all__ = ["ConfigError", "SettingError", "StudyConfig", "warehouse_root"]
