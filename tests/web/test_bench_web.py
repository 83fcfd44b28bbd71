"""`bench web`: our WebGL page and TensorFlow.js (built from the IR) in one headless Chromium,
each output checked against Keras in float32.

Tolerances: TF.js computes in float32 as Keras does (differences of rounding only): > 100 dB on
the SR image (measured ~141), logits within 1e-4.  The page stores every layer in RGBA8: >= 40
dB (measured ~54 on a random-weight net), logits within a few 16-bit fixed-point steps.
"""
import json

import keras
import pytest
from tests.conftest import skip_module_without_chromium

skip_module_without_chromium()
from workbench.__main__ import main
from workbench.nets.models import sr_x2
from workbench.studies import peers
from workbench.web import browser, tfjs  # noqa: E402

pytestmark = pytest.mark.gl
needs_tfjs = pytest.mark.skipif(tfjs.unavailable() is not None, reason=str(tfjs.unavailable()))


def _check_sides(result, backends):
    sides = result["sides"]
    assert sides[0]["engine"] == "page"
    for s in sides:
        assert len(s["runs_ms"]) == result["runs"]
        assert s["min_ms"] <= s["q1_ms"] <= s["median_ms"] <= s["q3_ms"] <= s["max_ms"]
        assert s["init_ms"] >= 0 and s["first_run_ms"] > 0
    for backend in backends:  # both forms of the grouped convs, the faster one marked
        mine = [s for s in sides if s.get("backend") == backend]
        assert sorted(s["grouping"] for s in mine) == sorted(peers.GROUPINGS)
        assert sum(s["fastest_grouping"] for s in mine) == 1
    return sides


@needs_tfjs
def test_sr_page_and_tfjs_match_keras(tmp_path):
    keras.utils.set_random_seed(0)
    [result] = peers.bench_web(sr_x2(), size=16, runs=2, warmup=1, profile_runs=1, verbose=False)
    sides = _check_sides(result, peers.BACKENDS)
    pages = 1 + len(peers.PAGE_VARIANTS)  # the page, then the page with 4 and with 8 render targets
    assert len(sides) == pages + 2 * len(peers.BACKENDS) and result["output_shape"] == [32, 32, 3]
    assert sides[0]["psnr_db"] >= 40
    assert sides[1]["engine"] == "page" and sides[1]["psnr_db"] == sides[0]["psnr_db"]
    for s in sides[pages:]:
        assert s["psnr_db"] > 100, s["name"]
    # the profiles name every pass once, in the page's order, and add up per layer
    names = [p[0] for p in result["page_passes"]]
    assert names == [p[0] for p in result["llvmpipe_passes"]] and len(names) == result["programs"]
    rows = peers.profile_rows(result)
    assert rows[-1]["layer"] == "total"
    assert rows[-1]["page ms"] == pytest.approx(sum(p[2] for p in result["page_passes"]))
    assert sum(r["page %"] for r in rows[:-1]) == pytest.approx(100)
    mrt = result["variant_passes"]["ours, 4 render targets (MRT)"]  # profiled too
    assert rows[-1]["4 render targets (MRT) ms"] == pytest.approx(sum(p[2] for p in mrt))
    assert len(mrt) < len(names) and {p[1] for p in mrt} == {p[1] for p in result["page_passes"]}
    peers.save_results(tmp_path, result)
    saved = json.loads((tmp_path / peers.RESULT).read_text())["results"]
    assert len(saved) == 1 and saved[0]["sides"][1]["psnr_db"] == sides[1]["psnr_db"]
    text = (tmp_path / peers.TABLE).read_text()
    assert "| TF.js wasm | " in text and "Raspberry Pi 3: 3.5-4.0 s" in text
    assert "- ours, 4 render targets (MRT) vs TF.js wasm: " in text  # a verdict per pair


@needs_tfjs
def test_classifier_preset_from_the_command_line_on_both_gls(tmp_path, capsys):
    # WASM alone: TF.js WebGL would compile this net's shaders for ~8 s (the SR test has it)
    assert main(["bench", "web", "--model", "tiny", "--runs", "2", "--backends", "wasm",
                 "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / peers.RESULT).read_text())["results"]
    out = capsys.readouterr().out
    if "WebGL on llvmpipe skipped" in out:  # no Mesa EGL for ANGLE here: SwiftShader alone
        assert [r["gl"] for r in results] == ["swiftshader"]
    else:
        assert [r["gl"] for r in results] == ["swiftshader", "llvmpipe"]  # the default: both
        assert "llvmpipe" in results[1]["renderer"] and "### WebGL on Mesa llvmpipe" in out
    assert "SwiftShader" in results[0]["renderer"] and "max logit diff vs Keras" in out
    pages = 1 + len(peers.PAGE_VARIANTS)
    for result in results:
        sides = _check_sides(result, ["wasm"])
        assert len(sides) == pages + 2
        assert result["kind"] == "logits" and result["size"] == [16, 16]
        assert all(s["top1_equal"] for s in sides)
        for s in sides[:pages]:  # 8-bit storage, 16-bit fixed-point logits; MRT: the same bytes
            assert s["max_logit_diff"] == sides[0]["max_logit_diff"] <= 8 / 256, s["name"]
        for s in sides[pages:]:
            assert s["max_logit_diff"] < 1e-4, s["name"]
    assert main(["bench", "web", "--backends", "webgl,gpu", "--out", str(tmp_path)]) == 2
    assert "--backends: unknown TF.js backend(s) gpu; known: webgl, wasm, cpu" in \
        capsys.readouterr().err
    assert main(["bench", "web", "--gl", "angle", "--out", str(tmp_path)]) == 2
    assert "--gl: unknown GL(s) angle; known: swiftshader, llvmpipe" in capsys.readouterr().err


@needs_tfjs
def test_a_pooling_classifier_on_the_page_and_tfjs():
    """Max and average pooling reach the TF.js peer through its op table (tf.maxPool,
    tf.avgPool; 'same' average pooling counts the taps inside, as Keras): TF.js equals Keras
    to float32 rounding, the page within a few fixed-point steps, the same top-1."""
    from workbench.nets.layers import Act, GroupConv2D

    keras.utils.set_random_seed(2)
    x = inputs = keras.Input((16, 16, 3))
    for layer in (GroupConv2D(8, 3), Act("sigmoid_like"), keras.layers.MaxPooling2D(2),
                  GroupConv2D(8, 3), Act("sigmoid_like"),
                  keras.layers.AveragePooling2D(3, 2, padding="same"),
                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)):
        x = layer(x)
    [result] = peers.bench_web(keras.Model(inputs, x), runs=2, warmup=1, backends=("wasm",),
                               profile_runs=1, verbose=False)
    sides = _check_sides(result, [])  # no grouped conv: one TF.js form
    assert [s["engine"] for s in sides].count("page") == 1 + len(peers.PAGE_VARIANTS)
    assert result["kind"] == "logits" and all(s["top1_equal"] for s in sides)
    assert sides[0]["max_logit_diff"] <= 8 / 256
    assert all(s["max_logit_diff"] < 1e-4 for s in sides if s["engine"] != "page")


def test_without_tfjs_only_the_page_runs(tmp_path, monkeypatch, capsys):
    """Also a row per es2.compile option of PAGE_VARIANTS (here: mediump); a GL that WebGL
    does not reach (here: llvmpipe's flags replaced by SwiftShader's) is skipped with a line."""
    monkeypatch.setenv(tfjs.CACHE_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(peers, "PAGE_VARIANTS", {"mediump": ({"precision": "mediump"}, "m")})
    monkeypatch.setitem(browser.GLS, "llvmpipe", browser.GLS["swiftshader"])
    keras.utils.set_random_seed(0)
    [result] = peers.bench_web(sr_x2(), size=8, runs=1, warmup=0, profile_runs=1,
                               gls=("llvmpipe", "swiftshader"))
    assert result["gl"] == "swiftshader" and result["llvmpipe_compile_ms"] > 0
    assert [s["name"] for s in result["sides"]] == ["ours (WebGL 1.0 page)", "ours, mediump"]
    assert result["sides"][1]["grouping"] == "m" and result["sides"][1]["psnr_db"] >= 40
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("TF.js rows skipped: TensorFlow.js 4.22.0 is not in ")
    assert result["skipped"] in lines[0] and result["sides"][0]["psnr_db"] >= 40
    assert lines[1].startswith("WebGL on llvmpipe skipped: Chromium's WebGL runs on 'ANGLE "
                               "(Google, Vulkan 1.3.0 (SwiftShader Device")
