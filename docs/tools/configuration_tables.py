"""Rewrite the generated tables of docs/configuration.md (settings, presets, environment) from the code that
defines them: dagster_project/configuration/settings.py and config.py. tests/unit/test_settings.py keeps them equal.

    python docs/tools/configuration_tables.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PAGE = REPOSITORY / "docs" / "configuration.md"


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with the lines between ``<!-- name:begin ...-->`` and ``<!-- name:end -->`` replaced by ``block``."""
    begin = text.index(f"<!-- {name}:begin")
    start, end = text.index("\n", begin) + 1, text.index(f"<!-- {name}:end -->")
    return text[:start] + block + text[end:]


def main() -> int:
    from resdyn.dagster_project.configuration import config, settings

    text = PAGE.read_text()
    updated = replace_block(text, "settings", settings.readme_table())
    updated = replace_block(updated, "presets", settings.presets_table())
    updated = replace_block(updated, "environment", config.environment_table())
    if updated != text:
        PAGE.write_text(updated)
    print(f"{'rewrote' if updated != text else 'unchanged:'} {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
