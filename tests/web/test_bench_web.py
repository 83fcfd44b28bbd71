"""`bench web`: our WebGL page, TensorFlow.js (built from the IR) and onnxruntime-web (the IR
written as ONNX) in one headless Chromium, served cross-origin isolated, each output checked
against Keras in float32.

Tolerances: TF.js and onnxruntime-web (WASM and WebGL) compute in float32 as Keras does
(differences of rounding only): > 100 dB on the SR image (measured ~141 / ~140), logits within
1e-4.  The page stores every layer in RGBA8: >= 40 dB (measured ~54 on a random-weight net),
logits within a few 16-bit fixed-point steps.  The threaded WASM rows (TF.js in its frame,
onnxruntime-web) run as many threads as the browser has cores where the page is cross-origin
isolated.
"""
import json

import keras
import numpy as np
import pytest
from tests.conftest import skip_module_without_chromium

skip_module_without_chromium()
from workbench import es2, ir
from workbench.__main__ import main
from workbench.nets.models import sr_x2
from workbench.nets.sr_recipes import sr_x2_recipe
from workbench.studies import peers, web_bench
from workbench.web import browser, ort, tfjs  # noqa: E402

pytestmark = pytest.mark.gl
needs_tfjs = pytest.mark.skipif(tfjs.unavailable() is not None, reason=str(tfjs.unavailable()))
needs_ort = pytest.mark.skipif(ort.unavailable() is not None, reason=str(ort.unavailable()))


def _check_sides(result, backends, grouped=True):
    """Every side's runs and summary; per TF.js peer of ``backends`` both forms of the grouped
    convs (``grouped``), the faster one marked; per onnxruntime-web peer one row (ONNX's
    grouped Conv); the threaded WASM rows with a thread per core where the page is
    cross-origin isolated, the one-thread row with one."""
    sides = result["sides"]
    assert sides[0]["engine"] == "page"
    for s in sides:
        assert len(s["runs_ms"]) == result["runs"]
        assert s["min_ms"] <= s["q1_ms"] <= s["median_ms"] <= s["q3_ms"] <= s["max_ms"]
        assert s["init_ms"] >= 0 and s["first_run_ms"] > 0
    assert result["cross_origin_isolated"] is True and result["hardware_concurrency"] >= 1
    assert [s["peer"] for s in sides if s["engine"] != "page"] == [
        p for p in backends for _ in (peers.GROUPINGS if grouped and p in peers.BACKENDS else [1])]
    for peer in backends:
        mine = [s for s in sides if s.get("peer") == peer]
        assert sum(s["fastest_grouping"] for s in mine) == 1
        if peer in peers.BACKENDS and grouped:
            assert sorted(s["grouping"] for s in mine) == sorted(peers.GROUPINGS)
        if peer in ("wasm-threads", "ort-wasm"):  # SharedArrayBuffer: the pool of every core
            assert all(s["threads"] == result["hardware_concurrency"] for s in mine), peer
            assert result["hardware_concurrency"] == 1 or mine[0]["threads"] > 1
            assert mine[0]["name"].endswith(f", {mine[0]['threads']} threads") or \
                mine[0]["threads"] == 1
        if peer == "wasm":
            assert all(s["threads"] == 1 and s["name"] == "TF.js wasm, 1 thread" for s in mine)
        if peer in peers.ORT_BACKENDS:
            assert [s["grouping"] for s in mine] == ["onnx"]
    return sides


@needs_tfjs
@needs_ort
@pytest.mark.parametrize("anchor", [None, "nearest"])
def test_sr_page_tfjs_and_onnxruntime_match_keras(tmp_path, anchor):
    # with an anchor the sub-pixels correct the nearest upsampling of the input: in TF.js's
    # demux, and as the ONNX model's own nodes
    keras.utils.set_random_seed(0)
    model = sr_x2()
    if anchor:
        model = sr_x2_recipe(init="identity", anchor=anchor, anchor_scale=0.75)
        kernel, bias = model.get_layer("L5").get_weights()
        model.get_layer("L5").set_weights([np.random.default_rng(0).normal(0, 0.2, kernel.shape),
                                           bias])
    [result] = web_bench.bench_web(model, size=16, runs=2, warmup=1, profile_runs=1,
                                   verbose=False)
    # a pinned release without it, or a nearest Resize it lacks (the anchor): a row says so
    webgl_missing = ort.webgl_unavailable() or web_bench.webgl_nearest(ir.from_keras(model))
    assert bool(webgl_missing) >= bool(anchor)
    ran = [p for p in peers.PEERS if not (p == "ort-webgl" and webgl_missing)]
    sides = _check_sides(result, ran)
    pages = 1 + len(web_bench.PAGE_VARIANTS)  # the page, then with 4 and with 8 render targets
    assert len(sides) == pages + 2 * len(peers.BACKENDS) + len(ran) - len(peers.BACKENDS)
    assert result["output_shape"] == [32, 32, 3]
    assert sides[0]["psnr_db"] >= 40
    assert sides[1]["engine"] == "page" and sides[1]["psnr_db"] == sides[0]["psnr_db"]
    for s in sides[pages:]:  # TF.js, and onnxruntime-web with its luma demuxed in JS
        assert s["psnr_db"] > 100, s["name"]
    assert result["ort"]["version"] == ort.ORT_WEB_VERSION
    assert result["not_run"] == ([{"peer": "ort-webgl", "name": "onnxruntime-web webgl",
                                   "reason": webgl_missing}] if webgl_missing else [])
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
    threads = result["hardware_concurrency"]
    assert "| TF.js wasm, 1 thread | " in text and "Raspberry Pi 3: 3.5-4.0 s" in text
    assert "crossOriginIsolated true" in text
    assert f"tf.wasm.setThreadsCount({threads}), tf.wasm.getThreadsCount() {threads}" in text
    assert f"ort.env.wasm.numThreads {threads} asked, {threads} kept" in text
    assert "- ours, 4 render targets (MRT) vs TF.js wasm, 1 thread: " in text  # a verdict per pair
    many = f"{threads} thread" + ("s" if threads > 1 else "")
    for name in (f"TF.js wasm, {many}", f"onnxruntime-web wasm, {many}"):
        assert f"| {name} | " in text and f"- ours (WebGL 1.0 page) vs {name}: " in text
    # the verdict column: on each peer's faster form, the three page rows against it
    cells, header = peers.verdict_cells(result)
    assert header == "the page (one target / 4 targets / 8 targets) vs it" and header in text
    assert sorted(cells) == [i for i, s in enumerate(sides) if s.get("fastest_grouping")]
    for cell in cells.values():
        words = cell.split(" / ")
        assert len(words) == pages and all(w == "level" or w.split()[0] in ("ahead", "behind")
                                           for w in words), cell
    if webgl_missing:
        assert f"| onnxruntime-web webgl | not run: {webgl_missing} |" in text


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
    pages = 1 + len(web_bench.PAGE_VARIANTS)
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
    assert ("--backends: unknown peer(s) gpu; known: webgl, wasm, wasm-threads, cpu, ort-wasm, "
            "ort-webgl") in capsys.readouterr().err
    assert main(["bench", "web", "--gl", "angle", "--out", str(tmp_path)]) == 2
    assert "--gl: unknown GL(s) angle; known: swiftshader, llvmpipe" in capsys.readouterr().err
    assert main(["bench", "web", "--gl", "", "--out", str(tmp_path)]) == 2  # a cut sentence,
    assert capsys.readouterr().err == (  # after the browser had started
        "error: --gl names no GL; give one or more of swiftshader, llvmpipe\n")


@needs_tfjs
@needs_ort
def test_a_pooling_classifier_on_the_page_tfjs_and_onnxruntime():
    """Max and average pooling reach the TF.js peer through its op table (tf.maxPool,
    tf.avgPool; 'same' average pooling counts the taps inside, as Keras) and onnxruntime-web
    through ONNX (MaxPool, AveragePool with explicit pads, count_include_pad 0; GAP + Gemm;
    NCHW RGB in, logits out): both equal Keras to float32 rounding, the page within a few
    fixed-point steps, the same top-1."""
    from workbench.nets.layers import Act, GroupConv2D

    keras.utils.set_random_seed(2)
    x = inputs = keras.Input((16, 16, 3))
    for layer in (GroupConv2D(8, 3), Act("bounded_relu"), keras.layers.MaxPooling2D(2),
                  GroupConv2D(8, 3), Act("bounded_relu"),
                  keras.layers.AveragePooling2D(3, 2, padding="same"),
                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)):
        x = layer(x)
    ran = ["wasm"] + [p for p in peers.ORT_BACKENDS
                      if not (p == "ort-webgl" and ort.webgl_unavailable())]
    [result] = web_bench.bench_web(keras.Model(inputs, x), runs=2, warmup=1,
                                   backends=("wasm", *peers.ORT_BACKENDS), profile_runs=1,
                                   verbose=False)
    sides = _check_sides(result, ran, grouped=False)  # no grouped conv: one TF.js form
    assert [s["engine"] for s in sides].count("page") == 1 + len(web_bench.PAGE_VARIANTS)
    assert result["kind"] == "logits" and all(s["top1_equal"] for s in sides)
    assert sides[0]["max_logit_diff"] <= 8 / 256
    assert all(s["max_logit_diff"] < 1e-4 for s in sides if s["engine"] != "page")


def test_without_tfjs_only_the_page_runs(tmp_path, monkeypatch, capsys):
    """Without the npm packages every peer gets a row saying why, and a line each for TF.js
    and onnxruntime-web; also a row per es2.compile option of PAGE_VARIANTS (here: mediump); a
    GL that WebGL does not reach (here: llvmpipe's flags replaced by SwiftShader's) is skipped
    with a line."""
    monkeypatch.setenv(tfjs.CACHE_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv(ort.CACHE_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(web_bench, "PAGE_VARIANTS",
                        {"mediump": ({"target": es2.Target.of(precision="mediump")}, "m")})
    monkeypatch.setitem(browser.GLS, "llvmpipe", browser.GLS["swiftshader"])
    keras.utils.set_random_seed(0)
    [result] = web_bench.bench_web(sr_x2(), size=8, runs=1, warmup=0, profile_runs=1,
                                   gls=("llvmpipe", "swiftshader"))
    assert result["gl"] == "swiftshader" and result["llvmpipe_compile_ms"] > 0
    assert [s["name"] for s in result["sides"]] == ["ours (WebGL 1.0 page)", "ours, mediump"]
    assert result["sides"][1]["grouping"] == "m" and result["sides"][1]["psnr_db"] >= 40
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("TF.js rows skipped (webgl, wasm, wasm-threads, cpu): "
                               "TensorFlow.js 4.22.0 is not in ")
    assert result["skipped"] in lines[0] and result["sides"][0]["psnr_db"] >= 40
    assert lines[1].startswith("onnxruntime-web rows skipped (ort-wasm, ort-webgl): "
                               f"onnxruntime-web {ort.ORT_WEB_VERSION} is not in ")
    assert lines[2].startswith("WebGL on llvmpipe skipped: Chromium's WebGL runs on 'ANGLE "
                               "(Google, Vulkan 1.3.0 (SwiftShader Device")
    assert [m["peer"] for m in result["not_run"]] == list(peers.PEERS)
    rows = peers.table_rows(result)
    assert [r["side"] for r in rows[2:]] == [peers.PEER_NAMES[p] for p in peers.PEERS]
    assert rows[-1]["convs as"] == f"not run: {result['not_run'][-1]['reason']}"


@needs_tfjs
@needs_ort
def test_a_release_without_onnxruntime_webgl_says_so(tmp_path, monkeypatch):
    """The WebGL back end of onnxruntime-web is deprecated: a pinned release without
    dist/ort.webgl.min.js (here: a cache with the WASM files alone) runs its WASM row and
    gives the WebGL row the reason; a net with no ONNX form (here: ReLU6 scaled activations)
    gives both onnxruntime-web rows the reason and runs TF.js."""
    dist = ort.cache_dir() / "node_modules" / ort.PACKAGE
    cache = tmp_path / "ort" / "node_modules" / ort.PACKAGE
    (cache / "dist").mkdir(parents=True)
    (cache / "package.json").write_bytes((dist / "package.json").read_bytes())
    for name in ort.SCRIPTS["wasm"]:
        (cache / "dist" / name).symlink_to(dist / "dist" / name)
    monkeypatch.setenv(ort.CACHE_ENV, str(tmp_path / "ort"))
    assert ort.unavailable() is None
    assert ort.webgl_unavailable() == (f"onnxruntime-web {ort.ORT_WEB_VERSION} ships no WebGL "
                                       "back end (no dist/ort.webgl.min.js; it was deprecated)")
    keras.utils.set_random_seed(0)
    [result] = web_bench.bench_web(sr_x2(), size=8, runs=1, warmup=0, profile_runs=1,
                                   backends=peers.ORT_BACKENDS, verbose=False)
    _check_sides(result, ["ort-wasm"])
    assert result["sides"][-1]["psnr_db"] > 100
    assert result["not_run"] == [{"peer": "ort-webgl", "name": "onnxruntime-web webgl",
                                  "reason": ort.webgl_unavailable()}]
    text = peers._gl_section(result)
    assert f"| onnxruntime-web webgl | not run: {ort.webgl_unavailable()} |" in text
    relu6 = sr_x2(activation="relu6_scaled")
    reasons = web_bench.unavailable_peers(es2.compile(relu6).graph, (8, 8))
    assert set(reasons) == set(peers.ORT_BACKENDS) and reasons["ort-wasm"] == (
        "the net has no ONNX form (workbench.ir.to_onnx): layer 'L1': activation "
        "'relu6_scaled' has no PyTorch layer; written: bounded_relu, leaky_relu, linear, prelu, "
        "relu, sigmoid, sigmoid_like")


def _side(name, grouping, runs, peer=None, psnr=50.0):
    """A side as _score leaves it (canned)."""
    return {"name": name, "grouping": grouping, **({"peer": peer} if peer else {}),
            "runs_ms": runs, "median_ms": float(np.median(runs)), "min_ms": min(runs),
            "max_ms": max(runs), "psnr_db": psnr}


def test_no_float_table_from_canned_results():
    """Runs, refuses and not run rows: a masked side's runs beside its median with float
    textures, a refusal's reason beside the medians of every form of that peer, a peer that
    never ran its reason; the note says what the probe found."""
    page, mrt = "ours (WebGL 1.0 page)", "ours, 4 render targets (MRT)"
    result = {"kind": "image", "sides": [
        _side(page, "a program per output pack", [10, 11, 12]),
        _side(mrt, "a program per 4 output packs", [4, 5, 6]),
        _side("TF.js webgl", "split", [60, 66, 70], "webgl", 140),
        _side("TF.js webgl", "block-diagonal", [67, 68, 69], "webgl", 140)],
        "not_run": [{"peer": "ort-webgl", "name": "onnxruntime-web webgl", "reason": "no Resize"},
                    {"peer": "cpu", "name": "TF.js cpu", "reason": "no npm"}],
        "no_float": {"runs": 5, "probe": {
            "webgl": {"extensions": [], "rgba32f": False, "rgba16f": False},
            "webgl2": {"extensions": ["EXT_float_blend"], "rgba32f": True, "rgba16f": False}},
            "sides": [_side(page, "a program per output pack", [7, 8, 9, 20, 6], psnr=54.6)],
            "refused": [{"peer": None, "name": mrt, "reason": "no draw buffers"},
                        {"peer": "webgl", "name": "TF.js webgl", "reason": "Error: no floats"}]}}
    rows = peers.no_float_rows(result)
    assert [(r["side"], r["without float textures: ms (quartiles; min..max)"],
             r["with them: median ms"], r["PSNR vs Keras dB"]) for r in rows] == [
        (page, "runs: 8.0 (7..9; 6..20)", "11.0", "54.6"),
        (mrt, "refuses: no draw buffers", "5.0", ""),
        ("TF.js webgl", "refuses: Error: no floats", "66.0 / 68.0", ""),
        ("onnxruntime-web webgl", "not run: no Resize", "", "")]  # not TF.js cpu: not WebGL
    note = peers.no_float_note(result["no_float"])
    assert ("WebGL 1 offers none of them and renders to RGBA32F: no, RGBA16F: no; WebGL 2 "
            "offers EXT_float_blend of them and renders to RGBA32F: yes, RGBA16F: no.") in note
    assert "median of 5 runs" in note


def test_without_float_textures_the_page_runs_and_tfjs_webgl_refuses(tmp_path):
    """The mask takes effect (WebGL 1 and 2 offer no float extension and render to no float
    texture, which they do unmasked); under it the page (one target, 4 render targets) runs as
    it does with float textures, the same bytes, and TF.js's WebGL back end refuses: it needs
    color-renderable floats (it does not fall back)."""
    for mask, offered in ((None, True), (browser.NO_FLOAT_TEXTURES, False)):
        with browser.open_page(init_script=mask) as page:
            probe = page.evaluate(browser.FLOAT_PROBE)
        for found in probe.values():
            assert found["rgba32f"] == found["rgba16f"] == offered
            assert bool(found["extensions"]) == offered
            assert set(found["extensions"]) <= set(browser.FLOAT_EXTENSIONS)
    keras.utils.set_random_seed(0)
    backends = ("webgl",) if tfjs.unavailable() is None else ()
    [result] = web_bench.bench_web(sr_x2(), size=16, runs=2, warmup=0, backends=backends,
                                   profile_runs=1, verbose=False, no_float_runs=3)
    masked = result["no_float"]
    assert masked["probe"] == probe
    sides = masked["sides"]
    assert [s["name"] for s in sides] == [result["sides"][i]["name"] for i in (0, 1)] == [
        "ours (WebGL 1.0 page)", "ours, 4 render targets (MRT)"]
    for s, before in zip(sides, result["sides"]):
        assert len(s["runs_ms"]) == 3 and s["psnr_db"] == before["psnr_db"] >= 40
    if backends:
        [refused] = masked["refused"]
        assert refused["name"] == "TF.js webgl" and refused["reason"].startswith(
            "Error: TF.js backend webgl did not initialise; ")
        assert "GL context does not support color renderable floats" in refused["reason"]
    peers.save_results(tmp_path, result)
    text = (tmp_path / peers.TABLE).read_text()
    assert "renders to RGBA32F: no, RGBA16F: no; WebGL 2 offers none" in text
    assert "| ours, 4 render targets (MRT) | a program per 4 output packs | runs: " in text
    saved = json.loads((tmp_path / peers.RESULT).read_text())["results"][0]["no_float"]
    assert saved["refused"] == masked["refused"]
