"""Imported by pytest before the test modules: ``import workbench`` first, so that its
TensorFlow settings (oneDNN, log level) hold before any test imports TensorFlow."""
import pytest

import workbench  # noqa: F401


def skip_module_without_chromium():
    """For the browser test modules, called at import: skip the whole module, saying why, when
    Playwright or Chromium is not installed."""
    pytest.importorskip("playwright.sync_api", reason="no Playwright: pip install -e '.[dev]'")
    from workbench.web import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as error:
        pytest.skip(str(error), allow_module_level=True)
