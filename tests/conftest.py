"""Imported by pytest before the test modules: ``import workbench`` first, so that its
TensorFlow settings (oneDNN, log level) hold before any test imports TensorFlow."""
import workbench  # noqa: F401
