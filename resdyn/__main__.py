"""``python -m resdyn``: the CLI (which lives in dagster_project; imported only when run)."""

import sys

if __name__ == "__main__":
    from resdyn.dagster_project.interface.cli import main

    sys.exit(main())
