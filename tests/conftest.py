"""Imported by pytest before the test modules: ``import workbench`` first, so that its
TensorFlow settings (oneDNN, log level) hold before any test imports TensorFlow."""
import os
import stat

import pytest

import workbench  # noqa: F401


def mode(path):
    """The permission bits of ``path``."""
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Run the test under umask 022 and give it back; returns a setter for other masks."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def skip_module_without_chromium():
    """For the browser test modules, called at import: skip the whole module, saying why, when
    Playwright or Chromium is not installed."""
    pytest.importorskip("playwright.sync_api", reason="no Playwright: pip install -e '.[dev]'")
    from workbench.web import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as error:
        pytest.skip(str(error), allow_module_level=True)


def with_zero_border(net, **options):
    """``net`` with every layer offered it reading its input through a zero border
    (``zero_border``, a form es2.drivers.tune may choose; ``options``: more layer options for
    those layers, where offered), its ops recording it for the emulator.  Returns (net, those
    layers)."""
    from workbench import es2
    from workbench.es2 import drivers

    forms = {op.name: {"zero_border": True, **{k: v for k, v in options.items()
                                               if k in drivers.layer_options(op)}}
             for op in net.graph.ops if "zero_border" in drivers.layer_options(op)}
    graph = drivers.ordered(net.graph, forms)
    return es2.Net(graph, es2.generate(graph, net.target, forms), net.target), list(forms)
