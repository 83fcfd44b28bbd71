"""`python -m workbench sweep`: one table from a grid of executed notebooks, the same whether
the points run serially, on local processes or on a Dask cluster.  Uses a tiny notebook made
here."""
import nbformat
import pytest
import yaml

from workbench.run import sweep

EXPECTED = [{"x": 1, "y": 2, "note": "ok"}, {"x": 2, "y": 8, "note": "ok"},
            {"x": 3, "y": 18, "note": "ok"}]


@pytest.fixture
def square(tmp_path, monkeypatch):
    """A notebook computing ``summary = {"y": scale * x * x}``, a profile giving it scale 2,
    and ``run(name, **kw)``: the sweep over x = 1, 2, 3 into ``tmp_path / name``."""
    monkeypatch.setenv("WORKBENCH_FIGURES", str(tmp_path / "figures"))
    books = tmp_path / "notebooks"
    books.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                  "language": "python"}}
    params = nbformat.v4.new_code_cell("x = 0\nscale = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "assert x != 99, 'made to fail'\nsummary = {'y': scale * x * x, 'note': 'ok'}")]
    nbformat.write(nb, books / "square.ipynb")
    profiles = tmp_path / "profiles.yml"
    profiles.write_text(yaml.safe_dump({"quick": {"square": {"scale": 2}}}))

    def run(name, xs=(1, 2, 3), **kw):
        return sweep.run("square", {"x": list(xs)}, out_dir=tmp_path / name,
                         notebooks_dir=books, profiles=profiles, **kw)
    return tmp_path, run


def test_grid():
    assert sweep.grid({"a": [1, 2], "b": ["u", "v"]}) == [
        {"a": 1, "b": "u"}, {"a": 1, "b": "v"}, {"a": 2, "b": "u"}, {"a": 2, "b": "v"}]


def test_serial_sweep_collects_one_table(square):
    root, run = square
    assert run("serial") == EXPECTED
    assert (root / "serial" / "sweep.csv").read_text().splitlines() == [
        "x,y,note", "1,2,ok", "2,8,ok", "3,18,ok"]
    assert len(list((root / "serial").glob("square-*.ipynb"))) == 3
    assert (root / "figures" / "quick" / "sweep_square.png").exists()


def test_failed_point_is_named_and_keeps_its_output(square):
    root, run = square
    with pytest.raises(SystemExit, match=r"sweep points failed: \{'x': 99\} \(failed in cell "
                                         r"\d+: AssertionError: made to fail\)"):
        run("failing", xs=(1, 99))
    cells = nbformat.read(root / "failing" / "square-1.ipynb", as_version=4).cells
    assert any(o.get("ename") == "AssertionError" for c in cells for o in c.get("outputs", []))


def test_typos_are_refused_before_any_point_runs(square):
    """An unknown profile, an unknown -p key, a value of the wrong kind and --workers 0 are one
    line each; nothing runs and no folder is written (they used to run with the notebook's
    defaults and exit 0, or fail in a cell after the kernel started)."""
    root, run = square
    books, profiles = root / "notebooks", root / "profiles.yml"
    cases = [(dict(profile="quik"), r"no profile 'quik'; profiles: quick"),
             (dict(workers=0), r"--workers 0: give a whole number >= 1")]
    for kwargs, says in cases:
        with pytest.raises(ValueError, match=says):
            run("typo", **kwargs)
    with pytest.raises(ValueError, match=r"-p sclae: notebook 'square' has no parameter "
                                         r"'sclae' \(it has: scale, x\)"):
        sweep.run("square", {"sclae": [1]}, out_dir=root / "typo", notebooks_dir=books,
                  profiles=profiles)
    with pytest.raises(ValueError, match=r"-p x 'abc': square's x takes a number \(as 0\), "
                                         r"not a string"):
        run("typo", xs=(1, "abc"))
    assert not (root / "typo").exists()


@pytest.mark.slow
def test_parallel_sweeps_give_the_same_table(square):
    distributed = pytest.importorskip("dask.distributed")
    root, run = square
    assert run("serial") == EXPECTED
    assert run("workers", workers=2) == EXPECTED
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert run("dask", dask=cluster.scheduler_address) == EXPECTED
    for name in ("serial", "workers", "dask"):
        assert (root / name / "sweep.csv").read_text() == (root / "serial" / "sweep.csv").read_text()
        assert len(list((root / name).glob("square-*.ipynb"))) == 3  # collected back here


def test_an_unreachable_dask_scheduler_is_one_line_before_any_folder(square, monkeypatch):
    """It was a traceback after 30 s, with the sweep's folder already made."""
    import socket
    import time

    from workbench.run import sweep

    pytest.importorskip("dask.distributed")
    monkeypatch.setattr(sweep, "CONNECT_SECONDS", 2)  # (10 in use; the test's time)
    root, run = square
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"--dask tcp://127.0.0.1:{port}: no Dask "
                                              r"scheduler answers there \(") as err:
        run("nodask", dask=f"tcp://127.0.0.1:{port}")
    assert "\n" not in str(err.value) and time.monotonic() - start < 10
    assert not (root / "nodask").exists()
