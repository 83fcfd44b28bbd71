"""One module per IR op type, each holding the op's whole ES 2.0 record (its programs,
emulator, limits, cost, textures and output decoding; :mod:`workbench.es2.record`), which it
registers when imported.  Every module here is imported: adding an op to the ES 2.0 back end
is adding a module."""
import importlib
import pkgutil

MODULES = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
