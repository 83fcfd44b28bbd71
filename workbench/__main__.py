"""Command line: ``python -m workbench <command>`` (``--help`` lists them)."""
import sys

from workbench.run.cli import main

if __name__ == "__main__":
    sys.exit(main())
