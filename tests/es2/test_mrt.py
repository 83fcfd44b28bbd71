"""Draw buffers (GL_EXT_draw_buffers / WEBGL_draw_buffers) in the ES 2.0 back end: a conv's
program writes up to N output packs that read the same inputs, fetching each input texel once.

The arithmetic of every output pack is its one-target shader's, so the bytes must be equal: on
llvmpipe every tensor of the MRT net equals the one-target net's and the emulator's; in headless
Chromium (SwiftShader, which has WEBGL_draw_buffers) the MRT page equals the one-target page, and
so does its fallback when the extension is missing (simulated by ``no_draw_buffers=1``); so it
does with the browser's WebGL on Mesa llvmpipe (ANGLE's GL back end), whose bytes are also the
moderngl run's.
The fetch counts are checked against a count made here from the conv shapes alone.
"""
import json
import math
from dataclasses import replace

import keras
import numpy as np
import pytest

from workbench import es2, gl, ir
from workbench.es2 import glslang, limits
from workbench.ir import cost
from workbench.nets import classify
from workbench.nets.layers import Act, GroupConv2D
from workbench.nets.models import dogs_classifier, sr_x2

pytestmark = pytest.mark.gl

MRT4 = replace(limits.ES2, draw_buffers=4)
MRT4_TARGET = es2.Target.of(draw_buffers=4)


def _image(h, w, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c)).astype(np.float32) / 255


@pytest.fixture(scope="module")
def sr():
    keras.utils.set_random_seed(5)
    model = sr_x2()
    return es2.compile(model), es2.compile(model, MRT4_TARGET)


@pytest.fixture(scope="module")
def tiny():
    keras.utils.set_random_seed(3)
    model = dogs_classifier("tiny")  # 16x16 input, residual units, shuffles, a fixed16 dense
    classify.calibrate_batchnorm(model, np.stack([_image(16, 16, seed=s) for s in range(8)]))
    return es2.compile(model), es2.compile(model, MRT4_TARGET)


def _expected_fetches(graph, hw, draw_buffers, table=limits.ES2):
    """Texel fetches per run counted from the conv shapes: a program reads each input pack of
    its group once per tap and writes up to ``draw_buffers`` of the group's output packs (fewer
    when its texture units or fetches per fragment would exceed ``table``), plus one residual
    texel per output pack; other ops as in the one-target form."""
    shapes, total = graph.shapes(hw), 0
    for op in graph.ops:
        h, w, _ = shapes[op.name]
        if not isinstance(op, ir.Conv):
            total += es2.record.record(op).cost(op, shapes).texel_fetches
            continue
        in_packs = 1 if op.luma_input else math.ceil(op.kernel.shape[2] / 4)
        out_packs = math.ceil(op.cout / op.groups / 4)  # per group
        res = 1 if op.residual else 0
        n = max(k for k in range(1, draw_buffers + 1)
                if in_packs + k * res <= table.texture_units
                and op.size ** 2 * in_packs + k * res <= table.fetches_per_fragment)
        programs = op.groups * math.ceil(out_packs / n)
        total += h * w * (programs * op.size ** 2 * in_packs + math.ceil(op.cout / 4) * res)
    return total


def _assert_same_tensors(a, b, what):
    """Every tensor of ``b`` equal in ``a`` (the GPU also keeps a dense layer's partial sums)."""
    assert b.keys() <= a.keys()
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what}: {name}")


@pytest.mark.parametrize("which, hw", [("sr", (40, 36)), ("tiny", (16, 16))])
def test_mrt_bytes_equal_one_target_and_emulator(which, hw, request):
    renderer = gl.info()["GL_RENDERER"]
    if "llvmpipe" not in renderer:
        pytest.skip(f"the emulator's order is llvmpipe's; the renderer here is {renderer}")
    one, mrt = request.getfixturevalue(which)
    assert mrt.draw_buffers == 4 and one.draw_buffers == 1 and len(mrt.passes) < len(one.passes)
    image = _image(*hw, seed=6)
    stored = mrt.run(image, keep=True)
    one_stored = one.run(image, keep=True)
    assert stored.keys() == one_stored.keys()
    _assert_same_tensors(stored, one_stored, "MRT vs one target")
    _assert_same_tensors(stored, mrt.emulate(image, keep=True), "MRT vs emulator")


def test_sr_fetches_and_programs():
    keras.utils.set_random_seed(5)
    model = sr_x2()
    one, mrt = es2.compile(model), es2.compile(model, MRT4_TARGET)
    # L1 12 packs -> 3 programs, L2 4 groups of 2 -> 4, L3 6 -> 2, L4 2 groups of 2 -> 2, L5, demux
    assert [len(p.outputs) for p in mrt.passes] == [4, 4, 4, 2, 2, 2, 2, 4, 2, 2, 2, 1, 1]
    hw = (256, 256)
    single, multi = cost.total(one.cost(hw).values()), cost.total(mrt.cost(hw).values())
    assert single.texel_fetches == single.single_target_fetches == 45_613_056  # issue #20's 45.6 M
    assert multi.single_target_fetches == single.texel_fetches
    assert multi.texel_fetches == _expected_fetches(mrt.graph, hw, 4) == 18_153_472
    assert _expected_fetches(one.graph, hw, 1) == single.texel_fetches
    assert multi.programs == len(mrt.passes) == 13 and single.programs == 32
    assert (multi.multiply_adds, multi.texture_bytes) == (single.multiply_adds, single.texture_bytes)
    table = cost.table(mrt.cost(hw))
    assert "fetches, 1 target" in table and "| **total** | 472,907,776 | 18,153,472 | 45,613,056 |" in table
    assert "fetches, 1 target" not in cost.table(one.cost(hw))


def test_classifier_fetches(tiny):
    one, mrt = tiny
    hw = (16, 16)
    single, multi = cost.total(one.cost(hw).values()), cost.total(mrt.cost(hw).values())
    assert multi.texel_fetches == _expected_fetches(mrt.graph, hw, 4) < single.texel_fetches
    assert multi.single_target_fetches == single.texel_fetches == _expected_fetches(one.graph, hw, 1)


@pytest.mark.parametrize("channels, units, outputs", [
    (24, 8, [2, 2, 2]),         # 6 input packs + 1 residual unit per output <= 8 units
    (24, 32, [4, 2]),           # 54 + 4 residual fetches <= 64
    (28, 32, [1] * 7),          # 63 + 1 residual fetch: a second output would make 65 > 64
])
def test_programs_stay_within_units_and_fetches(channels, units, outputs):
    keras.utils.set_random_seed(1)
    x = keras.Input((None, None, channels))
    model = keras.Model(x, Act("bounded_relu")(keras.layers.Add()([GroupConv2D(channels, 3)(x), x])))
    table = replace(limits.ES2, texture_units=units, draw_buffers=4)
    net = es2.compile(model, es2.Target.of(table))
    assert [len(p.outputs) for p in net.passes] == outputs
    hw = (8, 8)
    assert cost.total(net.cost(hw).values()).texel_fetches == _expected_fetches(net.graph, hw, 4, table)
    if units == 8:  # the residual in a program of several outputs, on the GPU
        image = _image(*hw, c=channels, seed=2)
        levels = np.round(net.run(image) * 255)
        np.testing.assert_array_equal(levels, np.round(es2.compile(model).run(image) * 255))
        np.testing.assert_array_equal(levels, np.round(net.emulate(image) * 255))


def test_draw_buffers_follow_the_device():
    keras.utils.set_random_seed(5)
    model = sr_x2()
    assert limits.profile("adreno3xx").draw_buffers == 4
    assert all(limits.profile(d).draw_buffers == 1 for d in ("videocore4", "mali400", "es2-minimum"))
    assert es2.compile(model, "adreno3xx").draw_buffers == 4  # the device's default
    assert es2.compile(model).draw_buffers == 1
    with pytest.raises(limits.LimitError, match="draw_buffers = 4 exceeds the videocore4 limit of 1"):
        es2.Target.of("videocore4", draw_buffers=4)
    with pytest.raises(ValueError, match="draw_buffers must be a whole number >= 1, not 0"):
        es2.Target.of(draw_buffers=0)


def test_save_load_and_older_manifests(sr, tmp_path):
    one, mrt = sr
    image = _image(12, 10, seed=1)
    mrt.save(tmp_path / "mrt")
    again = es2.load(tmp_path / "mrt")
    assert [p.outputs for p in again.passes] == [p.outputs for p in mrt.passes]
    np.testing.assert_array_equal(again.run(image), mrt.run(image))
    with pytest.raises(limits.LimitError, match="render targets per program = 4 exceeds the "
                                                "videocore4 limit of 1"):
        es2.load_net(tmp_path / "mrt", "videocore4")
    # a net saved before draw buffers: each pass has "output", not "outputs"
    one.save(tmp_path / "old")
    path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(path.read_text())
    for p in manifest["passes"]:
        p["output"] = p.pop("outputs")[0]
    path.write_text(json.dumps(es2.saved.sealed(manifest)))
    old = es2.load(tmp_path / "old")
    assert [p.outputs for p in old.passes] == [p.outputs for p in one.passes]
    np.testing.assert_array_equal(old.run(image), one.run(image))


def test_runtime_without_enough_draw_buffers_is_refused(monkeypatch):
    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2(), MRT4_TARGET)
    monkeypatch.setitem(gl.worker().info, "GL_MAX_DRAW_BUFFERS", 2)
    with pytest.raises(ValueError, match="the net writes 4 render targets per pass, over this "
                                         "GPU's GL_MAX_DRAW_BUFFERS of 2; compile it with "
                                         "draw_buffers=2"):
        net.run(_image(8, 8))


def test_mrt_shaders_pass_glslang(sr, tiny):
    if not glslang.available():
        pytest.skip("no glslangValidator (see tests/es2/test_glslang.py)")
    shaders = {f"{i}:{p.name}": p.source for i, net in enumerate([sr[1], tiny[1]])
               for p in net.passes}
    assert any("gl_FragData[3]" in s for s in shaders.values())
    glslang.validate_many(shaders, draw_buffers=4)
    with pytest.raises(glslang.ShaderValidationError, match="array index out of range"):
        glslang.validate_many(shaders, draw_buffers=1)  # the check has teeth


def _pages(sr, folder, gl):
    """Export the one-target and the MRT page into ``folder``, check that with WebGL on ``gl``
    the MRT page writes the one-target page's bytes in its own (fewer) passes; (those bytes,
    the image) for more checks.  Skipped where WebGL does not reach ``gl``."""
    pytest.importorskip("playwright.sync_api", reason="no Playwright: pip install -e '.[dev]'")
    from workbench import web
    from workbench.web import browser
    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as error:
        pytest.skip(str(error))
    one, mrt = sr
    web.export(one, folder / "one")
    web.export(mrt, folder / "mrt")
    image = _image(20, 18, seed=4)
    try:
        with web.session(folder / "one", gl=gl) as page:
            expected = page.run(image)["output"]
    except browser.BrowserUnavailable as error:  # llvmpipe: no Mesa EGL for ANGLE
        pytest.skip(str(error))
    with web.session(folder / "mrt", gl=gl) as page:  # both GLs have WEBGL_draw_buffers
        assert "render targets" not in page.message
        result = page.run(image)
        assert [name for name, _ in result["passes"]] == [p.name for p in mrt.passes]
        np.testing.assert_array_equal(result["output"], expected)
    return expected, image


def test_web_page_mrt_equals_one_target_on_llvmpipe(sr, tmp_path):
    from workbench.data import images
    expected, image = _pages(sr, tmp_path, "llvmpipe")
    # the browser on llvmpipe writes the bytes the es2 runner's moderngl (llvmpipe) writes
    np.testing.assert_array_equal(expected[..., :3], images.to_uint8(sr[0].run(image)))


def test_web_page_mrt_equals_one_target(sr, tmp_path):
    from workbench import web
    expected, image = _pages(sr, tmp_path, "swiftshader")
    with web.session(tmp_path / "mrt", no_draw_buffers=1) as page:  # fallback: split passes
        assert page.state == "ready"
        assert ("The net writes up to 4 render targets per pass, but this browser offers 1 "
                "(WEBGL_draw_buffers (simulated by the URL parameter no_draw_buffers)): its 13 "
                "passes run as 32 one-target passes") in page.message
        result = page.run(image)
        assert len(result["passes"]) == 32
        np.testing.assert_array_equal(result["output"], expected)
    with web.session(tmp_path / "mrt", max_draw_buffers=2) as page:  # passes of 2 targets
        assert ("offers 2 (WEBGL_draw_buffers (simulated by the URL parameter max_draw_buffers; "
                "the real limit is ") in page.message
        result = page.run(image)
        # L1 12 packs: 3 passes of 4 -> 6 of 2; L3 6: 4 + 2 -> 3; L2, L4 and the rest unchanged
        assert len(result["passes"]) == 13 + 3 + 1
        assert "L1.0-3/2" in [name for name, _ in result["passes"]]  # packs 2-3 of L1.0-3
        np.testing.assert_array_equal(result["output"], expected)


def test_bundle_refuses_an_mrt_net(sr):
    from workbench.es2 import bundle
    with pytest.raises(ValueError, match="writes 4 render targets per pass; the bundle runs "
                                         "one-target nets only"):
        bundle.run_plan(sr[1], (8, 8))
    assert len(bundle.run_plan(sr[0], (8, 8))["uniforms"]) == 32


def test_export_web_draw_buffers_option(tmp_path, capsys):
    from workbench.__main__ import main
    keras.utils.set_random_seed(5)
    sr_x2().save(tmp_path / "sr.keras")
    assert main(["export-web", "--model", str(tmp_path / "sr.keras"), "--out",
                 str(tmp_path / "page"), "--draw-buffers", "4"]) == 0
    passes = json.loads((tmp_path / "page" / "manifest.json").read_text())["passes"]
    assert [len(p["outputs"]) for p in passes][:3] == [4, 4, 4] and len(passes) == 13
    capsys.readouterr()
    assert main(["export-web", "--model", str(tmp_path / "sr.keras"), "--out",
                 str(tmp_path / "pi"), "--device", "videocore4", "--draw-buffers", "4"]) == 2
    assert capsys.readouterr().err == ("error: draw_buffers = 4 exceeds the videocore4 limit of 1 "
                                       "(GL_EXT_draw_buffers is optional in ES 2.0)\n")
