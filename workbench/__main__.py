"""Command line: ``python -m workbench <command>`` (``--help`` lists them)."""
import sys

from workbench.run.cli import main
from workbench.quiet import filtered_stderr

if __name__ == "__main__":
    with filtered_stderr():  # TensorFlow's start-up lines, here and in the notebook kernels
        code = main()
    sys.exit(code)
