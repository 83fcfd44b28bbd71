"""One module per IR op type, each holding the op's ES 3.1 kernels, plan, loads, cost and
its :class:`~workbench.es31.record.OpRules` entry, which it registers when imported.  Every
module here is imported: adding an op to the ES 3.1 back end is adding a module."""
import importlib
import pkgutil

MODULES = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
