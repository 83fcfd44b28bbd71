"""How far a run is from the limit (workbench.studies.peak) and the bench tables' GMAC/s and %
of peak columns.

References: hand arithmetic (the article's x2, 0.4727 G multiply-adds in 130 ms; the QPUs'
14.4 GMAC/s at 300 MHz), the peak shader's own text (its lines of the form ``a * b + c``
counted with a regular expression, not by the generator), canned results for the tables
(no browser, no Beatmup).
"""
import re

import pytest

from workbench import gl
from workbench.studies import beatmup_measure, beatmup_pi, bench, peak, peers, web_bench


def test_gmacs_and_share_are_the_hand_computed_ones():
    assert peak.gmacs(472_700_000, 130.0) == pytest.approx(0.4727 / 0.130)  # 3.636
    assert peak.share(3.636, 14.4) == pytest.approx(25.25, abs=0.01)
    assert peak.rate_cells(1e9, 100.0, 20.0) == {"GMAC/s": "10.00", "% of peak": "50.0"}
    assert peak.rate_cells(1e9, 100.0, None)["% of peak"] is None


def test_the_peak_shader_does_the_multiply_adds_it_counts():
    source = peak.fragment_source(mads=12, chains=3)
    body = source.split("void main() {")[1]
    mads = re.findall(r"(x\d) = \1 \* u_m \+ u_a;", body)
    assert len(mads) == 12 and body.count("*") == 12  # no other multiply
    assert sorted(set(mads)) == ["x0", "x1", "x2"]
    assert all(f"vec4 {x} =" in body for x in ("x0", "x1", "x2"))  # vec4: 4 lanes a line
    assert peak.multiply_adds_per_fragment(12) == 4 * 12


def test_the_forms_do_the_work_they_count():
    body = peak.mat4_source(products=5).split("void main() {")[1]
    products = re.findall(r"s \+= mat4\(([^)]*)\) \* v;", body)
    weights = [w for line in products for w in line.split(", ")]
    assert len(products) == 5 and len(weights) == 5 * 16 == len(set(weights))  # each used once
    assert body.count("*") == 5
    fetches = peak.fetch_source(fetches=12).split("void main() {")[1]
    assert fetches.count("texture2D(u_t, ") == 12
    assert {name: macs for name, (_, macs) in peak.FORMS.items()} == {
        "1 chain": 1024, "4 chains": 1024, "mat4 literals": 1024, "64 fetches": 0}


def test_a_fetch_costs_its_time_in_multiply_adds_of_the_mat4_form():
    side, fetches = peak.SIDE ** 2, peak.FETCHES  # fetch draw 2x the mat4 draw's time
    cost = peak.fetch_cost({peak.MAT4_FORM: [10.0, 20.0, 30.0], peak.FETCH_FORM: [40.0] * 3})
    assert cost["ns"] == pytest.approx(40e6 / (side * fetches))
    assert cost["macs"] == pytest.approx(2 * 1024 / fetches)  # 32 multiply-adds a fetch
    forms = {name: peak.summary([20.0] * 3, side * macs, "here") if macs else {"runs_ms": [40.0]}
             for name, (_, macs) in peak.FORMS.items()}
    text = peak.forms_text({**forms[peak.PEAK_FORM], "forms": forms, "fetch": cost})
    assert "1 chain 53.7, 4 chains 53.7, mat4 literals 53.7" in text  # 1.07 G in 20 ms
    assert "32 multiply-adds of the mat4 form" in text
    assert peak.forms_text(forms[peak.PEAK_FORM]) is None  # a peak without forms


def test_a_summary_is_the_rate_at_the_median_and_quartile_times():
    s = peak.summary([10.0, 20.0, 40.0, 20.0, 30.0], 2e8, "here")
    assert s["gmacs"] == pytest.approx(10.0)  # 0.2 G in 20 ms
    assert s["q1"] == pytest.approx(0.2 / 0.030) and s["q3"] == pytest.approx(0.2 / 0.020)


@pytest.mark.gl
def test_this_gl_has_a_positive_peak_with_its_spread():
    try:
        p = peak.gl_peak()
    except gl.GLUnavailable as error:
        pytest.skip(f"no GL: {error}")
    assert 0 < p["q1"] <= p["gmacs"] <= p["q3"]
    assert len(p["runs_ms"]) == peak.RUNS and p["where"] == gl.info()["GL_RENDERER"]
    assert p["multiply_adds"] == peak.SIDE ** 2 * 4 * peak.MADS


# --- the tables, from canned results ---------------------------------------------------------

def _side(name, engine, ms, **more):
    runs = [ms * f for f in (0.9, 1.0, 1.1)]
    return {"name": name, "engine": engine, "grouping": "none", "init_ms": 5.0,
            "first_run_ms": 2 * ms, "runs_ms": runs, "median_ms": ms, "q1_ms": runs[0],
            "q3_ms": runs[2], "min_ms": runs[0], "max_ms": runs[2], "psnr_db": 50.0, **more}


def _web_result():
    native = peak.summary([50.0] * 5, 1e9, "llvmpipe")
    return {"kind": "image", "gl": "swiftshader", "multiply_adds": 5e8,
            "layer_multiply_adds": {"L1": 4e8, "L2": 1e8, "subpixels": 0},
            "peak": peak.summary([100.0] * 5, 1e9, "WebGL on SwiftShader"), "gl_peak": native,
            "sides": [_side("ours (WebGL 1.0 page)", "page", 50.0),
                      _side("TF.js wasm, 1 thread", "tfjs", 100.0, peer="wasm",
                            fastest_grouping=True)],
            "not_run": [{"peer": "cpu", "name": "TF.js cpu", "reason": "not here"}],
            "page_passes": [["L1.0", "L1", 30.0], ["L2.0", "L2", 10.0], ["s", "subpixels", 1.0]],
            "llvmpipe_passes": [["L1.0", "L1", 20.0], ["L2.0", "L2", 5.0], ["s", "subpixels", 1.0]]}


def test_bench_web_rows_each_have_gmacs_and_share_of_the_pages_peak():
    result = _web_result()
    rows = peers.table_rows(result)
    assert [(r["GMAC/s"], r["% of peak"]) for r in rows] == [
        ("10.00", "100.0"), ("5.00", "50.0"), ("", "")]  # 0.5 G in 50 / 100 ms; peak 10 GMAC/s
    profile = {r["layer"]: r for r in peers.profile_rows(result)}
    assert profile["L1"]["page GMAC/s"] == pytest.approx(0.4 / 0.030)
    assert profile["L2"]["moderngl GMAC/s"] == pytest.approx(0.1 / 0.005)
    assert profile["subpixels"]["page GMAC/s"] is None
    assert profile["total"]["page GMAC/s"] == pytest.approx(0.5 / 0.041)
    assert list(profile)[-1] == "total"
    note = peers.peak_note(result)
    assert "10.0 GMAC/s" in note and "20.0 GMAC/s" in note  # the page's, the native one


def _timing(ms_beatmup, ms_ours, count):
    return {"ms": {side: {"median": ms, "q25": ms, "q75": ms} for side, ms in
                   (("Beatmup", ms_beatmup), ("workbench", ms_ours))}, "multiply_adds": count}


def test_bench_beatmup_timing_rows_here_and_on_the_boards():
    rows = beatmup_measure.timing_rows(_timing(50.0, 25.0, 4.727e8), "x2", {"gmacs": 18.908})
    assert [r["where"] for r in rows] == ["this machine", "this machine",
                                          "Raspberry Pi 3 B / B+", "Raspberry Pi Zero W"]
    assert [r["GMAC/s"] for r in rows] == ["9.45", "18.91", "3.64", "2.76"]
    assert [r["% of peak"] for r in rows[:2]] == ["50.0", "100.0"]
    # 3.636 GMAC/s of 12 x 4 x 300 MHz = 14.4, of 19.2 at 400 MHz
    assert rows[2]["% of peak"] == "25.3 (article's 300 MHz) / 18.9 (documented 400 MHz)"
    assert all(set(r) == set(rows[0]) for r in rows)


def test_bench_beatmup_pi_rows_get_the_qpu_share_at_their_clock():
    row = {"board": "Raspberry Pi 3 B / B+", "V3D MHz": 300, "net": "x2", "model ms": 200.0,
           **{f"calibrated ms ({c})": 100.0 for c in beatmup_pi.PI_COUNTS}}
    ours = {**row, "calibrated ms (cycles)": 50.0}
    [theirs, mine] = beatmup_pi.pi_rates([row, ours], {"x2": 1.44e9})
    assert theirs["GMAC/s (model; calibrated)"] == "7.20; 14.40"
    assert theirs["% of QPU peak (model; calibrated)"] == "50.0; 100.0"
    assert mine["GMAC/s (model; calibrated)"] == "7.20; 14.40-28.80"
    assert beatmup_pi.pi_rates([row], {"x2": None}) == [row]  # a run saved before the counts


def test_bench_sr_rows_have_gmacs_and_the_gpu_rows_a_share(capsys):
    t = {"median": 0.1, "min": 0.09, "max": 0.11}
    bench.print_sr({"size": 256, "repeat": 5, "programs": 32, "renderer": "llvmpipe (LLVM)",
                    "generate": 1.0, "compile_link": 0.5, "first_run": 0.2, "gpu": t,
                    "gpu_passes": t, "cpu_first": 0.3, "cpu": {**t, "median": 0.2},
                    "runtime": "TensorFlow", "multiply_adds": 1e9,
                    "peak": peak.summary([25.0] * 5, 1e9, "llvmpipe")})
    lines = {line.split(" | ")[0].strip("| "): line.split(" | ")
             for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    gpu = lines["GPU (llvmpipe) net.run: upload, passes, read-back"]
    assert gpu[4:6] == ["10.00", "25.0"]  # 1 G in 100 ms; of 40 GMAC/s
    assert lines["TensorFlow CPU run"][4:6] == ["5.00", ""]


# --- Ctrl-C ------------------------------------------------------------------------------------

@pytest.mark.gl
def test_ctrl_c_in_bench_web_stops_it_with_130_and_writes_no_table(tmp_path, monkeypatch, capsys):
    from workbench.run.cli import INTERRUPTED, main

    runs = []

    def interrupted(folder, gl_name, config):  # Ctrl-C inside the browser's run
        runs.append(gl_name)
        raise KeyboardInterrupt
    monkeypatch.setattr(web_bench, "_browser_run", interrupted)
    code = main(["bench", "web", "--size", "16", "--runs", "1", "--backends", "", "--gl",
                 "swiftshader", "--out", str(tmp_path / "out")])
    assert runs == ["swiftshader"]
    assert code == INTERRUPTED and "interrupted" in capsys.readouterr().err
    assert not (tmp_path / "out" / peers.TABLE).exists()
    assert not (tmp_path / "out" / peers.RESULT).exists()
