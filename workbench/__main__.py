"""Command line: ``python -m workbench <command>`` (``--help`` lists them)."""
from __future__ import annotations

import argparse
import sys

from workbench import classify, deploy, fetch, pipeline, sweep


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (fetch, pipeline, sweep, deploy, classify):
        module.add_parser(commands)
    args = parser.parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
