"""WebGL 1.0: an ES 2.0 net as a static web page (:mod:`.page`: ``index.html`` +
``workbench.js``), and headless Chromium to run it (:mod:`.browser`)."""
from workbench.web.page import (
                                PAGE_FILES,
                                PAGE_PARAMETERS,
                                PageError,
                                Session,
                                decode_result,
                                export,
                                page_spec,
                                png_data_url,
                                session,
                                sessions,
)

__all__ = ["PAGE_FILES", "PAGE_PARAMETERS", "PageError", "Session", "decode_result", "export",
           "page_spec", "png_data_url", "session", "sessions"]
