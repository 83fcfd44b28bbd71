"""Studies: deployment checks, benchmarks, the activation, shuffle and convolution-algorithm
studies.  Each writes its own results; the report reads them (:mod:`workbench.run.report`)."""
