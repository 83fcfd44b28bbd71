"""Command line: ``python -m workbench <command>`` (``--help`` lists them)."""
import sys

from workbench.gl import close_workers
from workbench.quiet import filtered_stderr
from workbench.run.cli import main

if __name__ == "__main__":
    with filtered_stderr():  # TensorFlow's start-up lines, here and in the notebook kernels
        try:
            code = main()
        finally:
            close_workers()  # (a worker left to exit would hold the filter open 2 s)
    sys.exit(code)
