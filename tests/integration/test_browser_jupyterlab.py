"""JupyterLab in headless Chromium: run notebooks/widgets.ipynb, check that its widgets render and
react, and save a screenshot to figures/jupyterlab_widgets.png.

The server runs on loopback with a token, from the repository's .venv, with temporary Jupyter
config/data/runtime/settings folders (nothing from the user's own set-up) and a ``python3``
kernelspec that points at the same interpreter.  It and its kernels are stopped at the end.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from workbench.files import atomic_path, figures_dir
from workbench.web import browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "widgets.ipynb"
SCREENSHOT = "jupyterlab_widgets.png"


def _python():
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jupyter_dirs(base: Path, python: str) -> dict:
    """Temporary Jupyter folders; a python3 kernelspec for ``python``; JupyterLab settings that
    render every cell (no windowing), expose ``window.jupyterapp`` to the test and switch the
    news announcements off."""
    dirs = {name: base / name for name in ("config", "data", "runtime", "settings", "workspaces",
                                           "ipython")}
    for path in dirs.values():
        path.mkdir(parents=True)
    kernel = dirs["data"] / "kernels" / "python3"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (workbench .venv)", "language": "python"}))
    tracker = dirs["settings"] / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # nothing reaches the network: no news feed, no update check, no PyPI extension manager
    (dirs["config"] / "jupyter_server_config.json").write_text(json.dumps({"LabApp": {
        "news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
        "extension_manager": "readonly", "expose_app_in_browser": True}}))
    (dirs["config"] / "labconfig").mkdir()
    (dirs["config"] / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    return dirs


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def _processes_mentioning(text):
    """pids of the processes whose command line contains ``text`` (our kernels)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                pids.append(int(entry.name))
    return pids


@pytest.fixture
def jupyterlab(tmp_path):
    """``(base_url, token)`` of a JupyterLab serving a copy of notebooks/widgets.ipynb.
    Skips when there is no Chromium (or no Playwright) to look at it."""
    try:
        browser.chromium_path()
        import playwright  # noqa: F401
    except (browser.BrowserUnavailable, ImportError) as error:
        pytest.skip(str(error))
    python = _python()
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    dirs = _jupyter_dirs(tmp_path / "jupyter", python)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]),
           "JUPYTER_DATA_DIR": str(dirs["data"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
           "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
           "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
           "IPYTHONDIR": str(dirs["ipython"]), "MPLBACKEND": "Agg",
           "JUPYTER_PREFER_ENV_PATH": "0"}  # the temporary folders before the venv's own
    for extra in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH"):
        env.pop(extra, None)
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "jupyterlab.log", "wb")
    server = subprocess.Popen(
        [python, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}"] + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 45
        while True:
            if server.poll() is not None:
                log_text = (tmp_path / "jupyterlab.log").read_text()[-3000:]
                raise RuntimeError("JupyterLab exited:\n" + log_text)
            try:
                _get(f"{base}/api/status?token={token}")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("JupyterLab did not answer in 45 s")
                time.sleep(0.3)
        yield base, token
    finally:
        try:  # shut the kernels down through the server, then the server itself
            for kernel in _get(f"{base}/api/kernels?token={token}"):
                request = urllib.request.Request(
                    f"{base}/api/kernels/{kernel['id']}?token={token}", method="DELETE")
                urllib.request.urlopen(request, timeout=10).close()
        except OSError:
            pass
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        strays = _processes_mentioning(str(dirs["runtime"]))
        for pid in strays:  # kernels of this server only (their connection file is ours)
            os.kill(pid, signal.SIGKILL)
        assert not strays, f"kernels left running after the server stopped: {strays}"


def _image_src(page, css):
    return page.eval_on_selector(f"{css} img", "img => img.src")


def _text(page, css):
    return page.inner_text(css)


def test_widgets_notebook_in_jupyterlab(jupyterlab):
    base, token = jupyterlab
    spec = _get(f"{base}/api/kernelspecs?token={token}")["kernelspecs"]["python3"]["spec"]
    assert spec["argv"][0] == _python()  # the kernel runs in the repository's .venv
    with browser.open_page(width=1400, height=2900) as page:
        page.set_default_timeout(60_000)
        page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        # the kernel of the open notebook started and is idle; the widget manager is loaded
        page.wait_for_function("""() => {
            const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session &&
                      w.sessionContext.session.kernel;
            return k && k.status === 'idle' && k.name === 'python3';
        }""")
        page.evaluate("""() => {
            const app = window.jupyterapp;
            if (!app.shell.leftCollapsed) app.commands.execute('application:toggle-left-area');
            return app.commands.execute('notebook:run-all-cells');
        }""")
        for css in (".wb-activation-explorer", ".wb-shuffle-visualiser", ".wb-sr-viewer"):
            page.wait_for_selector(f"{css} img[src]", state="attached")
        # every widget rendered as ipywidgets DOM
        assert page.locator(".jupyter-widgets").count() >= 20
        # probe, iterations, crop x/y/size, (range)
        assert page.locator(".widget-slider").count() >= 6
        assert page.locator(".widget-dropdown select").count() >= 4
        assert page.locator(".widget-select-multiple select").count() == 1
        assert "iteration 1: 0, 8, 16, 24, 1, 9, 17, 25" in _text(page, ".wb-shuffle-table")
        assert "sigmoid_like" in _text(page, ".wb-activation-explorer .wb-table")
        assert "GPU" in _text(page, ".wb-sr-viewer .wb-table")
        errors = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert not any("Traceback" in t for t in errors.all_inner_texts())

        # a dropdown: the shuffle step 8 -> 4 redraws the diagram and the table
        before = _image_src(page, ".wb-shuffle-visualiser")
        page.select_option(".wb-shuffle-step select", label="4")
        page.wait_for_function("""() => document.querySelector('.wb-shuffle-table')
                                    .innerText.includes('iteration 1: 0, 4, 8, 12')""")
        page.wait_for_function(
            "src => document.querySelector('.wb-shuffle-visualiser img').src !== src", arg=before)
        page.select_option(".wb-shuffle-step select", label="8")
        page.wait_for_function("""() => document.querySelector('.wb-shuffle-table')
                                    .innerText.includes('iteration 1: 0, 8, 16, 24')""")

        # a slider, from the keyboard: the probe point moves, the table's numbers change
        table = _text(page, ".wb-activation-explorer .wb-table")
        handle = page.locator(".wb-activation-probe .noUi-handle")
        handle.focus()
        handle.press("PageUp")  # 5 steps of 0.05: x = 1.25
        page.wait_for_function("""t => document.querySelector('.wb-activation-explorer .wb-table')
                                    .innerText.includes('1.2500')""", arg=table)
        assert _text(page, ".wb-activation-explorer .wb-table") != table

        page.wait_for_timeout(500)  # let the last redraw paint
        path = figures_dir() / SCREENSHOT
        with atomic_path(path) as tmp:
            page.screenshot(path=str(tmp))
    assert path.stat().st_size > 50_000
