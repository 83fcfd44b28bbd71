"""Command line: ``python -m workbench <command>`` (``--help`` lists them)."""
from __future__ import annotations

import argparse
import sys

from workbench import classify, deploy, fetch, pipeline, sweep, webgl


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (fetch, pipeline, sweep, deploy, classify, webgl):
        module.add_parser(commands)
    from workbench import es31
    es31.add_bench(commands.choices["bench"])  # `bench es31`: ES 2.0 vs ES 3.1 on dogs120
    args = parser.parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
