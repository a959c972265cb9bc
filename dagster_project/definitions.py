"""What ``dagster dev`` and ``resdyn ui`` load: the study's definitions under this environment's configuration."""

from resdyn.dagster_project.configuration.config import StudyConfig
from resdyn.dagster_project.launch.study_definitions import build_definitions

defs = build_definitions(StudyConfig.resolve())
