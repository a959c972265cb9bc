"""What ``dagster dev`` and ``resdyn ui`` load: the study's definitions under this environment's configuration."""

from .config import StudyConfig
from .launch import build_definitions

defs = build_definitions(StudyConfig.resolve())
