"""``bench loop`` (workbench.studies.loop): its runs read what `upscale` prints, its table
says of every time whether it is a first run or the steady state."""
import numpy as np
import pytest

from workbench.__main__ import main
from workbench.data import images
from workbench.studies import loop


def _run(first, exit_, ms, db=()):
    return {"first": first, "exit": exit_, "ms": list(ms), "db": list(db)}


def test_the_table_tells_first_runs_from_the_steady_state():
    runs = {"folder": _run(1.0, 1.5, [80]), "model": _run(7.0, 9.0, [80]),
            "sets": _run(1.0, 5.0, [200, 30, 50, 70], [30, 32, 34, 36])}
    result = {"cold": runs, "warm": {case: [r, r] for case, r in runs.items()},
              "sets": {"Set5": 1, "Set14": 3}, "model": "sr.keras"}
    rows = loop.rows(result)
    assert all(r["kind"].startswith(("first run", "steady state")) for r in rows)
    assert [r["goal"] for r in rows if r["goal"]] == ["<= 5 s", "<= 10 s", "<= 30 s"]
    steady = rows[-1]
    assert steady["kind"].startswith("steady state") and steady["median"] == "50.0"
    assert steady["range"] == "30.0-70.0" and rows[-2]["cold"] == "200.0"
    text = loop.report(result, "a machine")
    assert "warm: median of 2" in text and "Machine: a machine" in text
    assert "Set5 30.00 dB, Set14 34.00 dB" in text


def test_a_failed_run_raises_its_last_line(tmp_path):
    with pytest.raises(ChildProcessError, match=r"exit 2: error: .*missing\.png"):
        loop.timed(["upscale", tmp_path / "missing.png", tmp_path / "out.png"], tmp_path)


def test_the_bench_needs_the_sr_sets(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    monkeypatch.setattr(loop, "machine", lambda: "a machine")
    assert main(["bench", "loop", "--repeat", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: Set5, Set14: not in the data root ({tmp_path}); python -m workbench "
                   "fetch-data Set5 Set14\n")
    assert main(["bench", "loop", "--model", str(tmp_path)]) == 2
    assert "--model" in capsys.readouterr().err


@pytest.mark.gl
def test_a_run_times_upscale_from_a_saved_folder(tmp_path):
    """One real run: its first result before its exit, the GPU time and PSNR it printed."""
    from workbench import es2
    from workbench.nets.models import load_model, reference_sr

    es2.compile(load_model(reference_sr())).save(tmp_path / "net")
    rng = np.random.default_rng(0)
    hr = images.round_8bit(images.imresize(rng.random((8, 9, 3)), output_shape=(32, 36)))
    images.save_image(tmp_path / "hr.png", hr)
    images.save_image(tmp_path / "lr.png", images.degrade(hr, 2, "bicubic_aa"))
    run = loop.timed(["upscale", "--model", tmp_path / "net", tmp_path / "lr.png",
                      tmp_path / "out.png", "--reference", tmp_path / "hr.png"],
                     tmp_path / "cache" / "net")
    assert 0 < run["first"] <= run["exit"] and len(run["ms"]) == len(run["db"]) == 1
    assert any((tmp_path / "cache" / "net").iterdir())  # Mesa's shader cache, where told
