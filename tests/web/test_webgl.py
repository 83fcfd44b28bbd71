"""The WebGL 1.0 page (workbench.web) in headless Chromium (SwiftShader) against TensorFlow and
against the moderngl run of the same shaders (Mesa llvmpipe).

Tolerances, and why:
* SR net vs TF: five layers of 8-bit storage, so a PSNR floor, the issue's 45 dB (as
  tests/es2/test_glsl.py).  SwiftShader vs llvmpipe: both run the ``highp`` shaders in float32 and
  store RGBA8, so they agree but for values rounded on different sides of a half level (FMA,
  operation order): measured 99.92-99.98 % equal bytes and 1 level apart at most on Set5/Set14;
  the test asks >= 99.5 % and 2 levels.
* Classifier: top-1 equal to TF's on 20 test images; logits within a few 16-bit fixed-point steps
  (1/256) of the llvmpipe run, for the same reason.

The SR page uses the quick profile's trained net when ``make reproduce`` has made one (so the
screenshot in figures/ shows a real upscale), else ``sr_x2`` with random weights; the checks are
the same for both.  Data: Set5 and CIFAR-10 from the data root (``WORKBENCH_DATA``); without
CIFAR-10, 32x32 crops of the SR images stand in.
"""
import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest
from tests.conftest import skip_module_without_chromium

skip_module_without_chromium()

from workbench import es2, web
from workbench.__main__ import main  # noqa: E402
from workbench.data import datasets, images, metrics
from workbench.es2 import plan, shaders
from workbench.files import atomic_path, figures_dir, project_root  # noqa: E402
from workbench.nets import classify, superres  # noqa: E402
from workbench.nets.layers import Act, GroupConv2D  # noqa: E402
from workbench.nets.models import dogs_classifier, sr_x2  # noqa: E402

pytestmark = pytest.mark.gl

TRAINED_SR = project_root() / "runs" / "artifacts" / "quick" / "sr" / "finetune" / "model.keras"
SET5_IMAGE = "butterfly"  # 256x256: a 128x128 low-resolution input


@pytest.fixture(scope="module")
def sr(tmp_path_factory):
    """(model, net, page folder, LR image): the page exported, the LR Set5 image beside it
    as ``lr.png``."""
    if TRAINED_SR.exists():
        model = keras.models.load_model(TRAINED_SR)
    else:
        keras.utils.set_random_seed(0)
        model = sr_x2()
    net = es2.compile(model)
    directory = tmp_path_factory.mktemp("sr_page")
    web.export(net, directory)
    set5 = datasets.sr_images("Set5").images
    _, hr = next(((n, i) for n, i in set5 if n == SET5_IMAGE), set5[0])
    lr = images.degrade(images.modcrop(hr, 2), 2, "bicubic_aa")
    images.save_image(directory / "lr.png", lr)
    return model, net, directory, lr


def test_sr_page_matches_tf_and_llvmpipe(sr):
    model, net, directory, lr = sr
    with web.session(directory, image="lr.png", height=600) as page:
        result = page.result()  # as the page put it in the DOM
        page.page.evaluate("document.querySelector('details').open = true")  # per-pass times
        with atomic_path(figures_dir() / "webgl_sr.png") as tmp:
            page.page.screenshot(path=str(tmp), full_page=True)
        # the file picker takes the same path
        (directory / "picked.png").write_bytes((directory / "lr.png").read_bytes())
        page.page.set_input_files("#file", str(directory / "picked.png"))
        page.page.wait_for_function("JSON.parse(document.getElementById('result').textContent).name"
                                    " === 'picked.png'")
        assert np.array_equal(page.result()["output"], result["output"])
        _assert_plan(page, net, [(17, 23), (6, 5)])
    assert np.array_equal(result["input"][..., :3], images.to_uint8(lr)), "PNG decoded differently"
    page_out = result["output"][..., :3]
    assert page_out.shape == (2 * lr.shape[0], 2 * lr.shape[1], 3)
    tf_out, gl_out = superres.upscale(model, lr), images.to_uint8(net.run(lr))
    psnr_tf, psnr_gl = metrics.psnr(tf_out, page_out), metrics.psnr(gl_out, page_out)
    equal = np.mean(page_out == gl_out)
    print(f"\nWebGL (SwiftShader) vs TF {psnr_tf:.2f} dB, vs moderngl (llvmpipe) {psnr_gl:.2f} dB "
          f"({equal:.4%} bytes equal); llvmpipe vs TF {metrics.psnr(tf_out, gl_out):.2f} dB; "
          f"{len(result['passes'])} passes {result['total_ms']:.1f} ms")
    assert psnr_tf >= 45
    assert equal >= 0.995 and np.abs(page_out.astype(int) - gl_out).max() <= 2
    # the page's bicubic is images.upscale_bicubic (rounding ties aside)
    bicubic = images.to_uint8(images.upscale_bicubic(lr, 2))
    assert np.abs(result["bicubic"][..., :3].astype(int) - bicubic).max() <= 1
    assert [name for name, _ in result["passes"]] == [p.name for p in net.passes]
    assert result["total_ms"] > 0 and "WebGL 1.0" in result["renderer"]


def _assert_plan(page, net, sizes):
    """The page's plan from webgl.json's rules (shapes, textures, each pass's uniforms) is the
    IR's and the es2 runner's for input sizes ``sizes``."""
    for hw in sizes:
        page_plan = page.page.evaluate("([h, w]) => workbench.plan(workbench.spec(), h, w)",
                                       list(hw))
        shapes = net.graph.shapes(hw)
        assert {k: tuple(v) for k, v in page_plan["shapes"].items()} == shapes
        formats = {"RGBA8": "f1", "RGBA32F": "f4"}
        assert {(t["tensor"], t["index"]): (t["width"], t["height"], formats[t["format"]])
                for t in page_plan["textures"].values()} == plan.textures(net.graph, hw)
        assert page_plan["uniforms"] == {p.name: {k: list(v) for k, v in
                                                  shaders.uniform_values(p, shapes).items()}
                                         for p in net.passes}


def test_export_command_from_a_saved_net(sr, tmp_path):
    _, net, directory, _ = sr  # the page folder holds net.save's files: a saved net
    assert main(["export-web", "--model", str(directory), "--out", str(tmp_path)]) == 0
    for name in ("webgl.json", "manifest.json", "vertex.glsl") + web.PAGE_FILES:
        assert (tmp_path / name).exists(), name
    spec = json.loads((tmp_path / "webgl.json").read_text())
    assert len(spec["passes"]) == len(net.passes) and spec["output"]["kind"] == "image"


def _page_code() -> dict:
    """``{file: text}`` of the page's JS (workbench.js and its modules), comments removed."""
    folder = Path(web.__file__).parent
    return {name: re.sub(r"/\*.*?\*/|(^|\s)//[^\n]*", "", (folder / name).read_text(), flags=re.S)
            for name in web.PAGE_FILES if name.endswith(".js")}


def test_page_code_knows_no_op_and_edits_no_glsl():
    """The page evaluates webgl.json's rules: no branch on an op kind, no op's shape
    arithmetic, no GLSL text; its modules are ES modules that the export writes."""
    code = _page_code()
    html = (Path(web.__file__).parent / "index.html").read_text()
    assert '<script type="module" src="workbench.js"></script>' in html
    for name, text in code.items():
        imported = set(re.findall(r'from "\./([\w.]+)"', text))
        assert imported <= set(web.PAGE_FILES), (name, imported)
        ops = re.findall(r"""\bkind\b\s*[!=]==?|["'](?:conv|depth_to_space|dense|Conv|"""
                         r"""DepthToSpace|Dense)["']|\b(?:stride|padding|block|convOut|"""
                         r"""convPad)\b|\.ops\b""", text)
        assert not [o for o in ops if "kind" not in o], (name, ops)
        # the one kind compared is the output's decoding: image or logits
        for match in re.finditer(r"""\bkind\b\s*[!=]==?\s*(\S+)""", text):
            assert match.group(1).strip("\"';),") in ("image", "logits"), (name, match.group(0))
        glsl = re.findall(r"gl_Frag\w*|#extension|GL_EXT\w*|\w*[sS]ource\w*(?:\.\w+)*\.replace\(",
                          text)
        assert not glsl, (name, glsl)


@pytest.mark.parametrize("params, image, message", [
    ({"no_webgl": 1}, None, "WebGL 1.0 is not available in this browser"),
    ({"max_texture_image_units": 4}, None,
     "pass L3.0 binds 8 textures, but this browser's MAX_TEXTURE_IMAGE_UNITS .* is 4 "
     r"\(simulated by the URL parameter max_texture_image_units"),
    ({"max_texture_size": 16}, (30, 30),  # over 16: tiles of 8 pixels, too small to tile
     ("a 30x30 image is over this browser's MAX_TEXTURE_SIZE of 16 .*, and tiles of 8 pixels "
      "cannot hold the net's receptive field of 4 pixels each side")),
])
def test_page_names_a_missing_limit(sr, params, image, message):
    _, _, directory, _ = sr
    with web.session(directory, **params) as page:
        if image is not None:  # a limit that depends on the image: smaller images still run
            assert page.state == "ready"
            assert page.run(np.zeros((8, 8, 3)))["output"].shape == (16, 16, 4)
            with pytest.raises(web.PageError, match=message):
                page.run(np.zeros((*image, 3)))
        assert page.state == "error" and re.search(message, page.message)


def test_page_tiles_an_image_over_its_texture_limit(sr):
    """An 80x72 image with MAX_TEXTURE_SIZE 64: 32x32 tiles (textures 64), the output 2.5x the
    limit; the stitched bytes equal the untiled page's (workbench.es2.tiling's rule in JS)."""
    _, _, directory, _ = sr
    image = np.random.default_rng(7).integers(0, 256, (72, 80, 3), np.uint8)
    with web.session(directory) as page:
        untiled = page.run(image)
    with web.session(directory, max_texture_size=64) as page:
        tiled = page.run(image)
    assert (untiled["tiles"], tiled["tiles"]) == (1, 3 * 4)
    assert tiled["output"].shape == (144, 160, 4)
    assert np.array_equal(tiled["input"], untiled["input"])
    assert np.array_equal(tiled["output"], untiled["output"])


def test_fallback_programs_fit_the_nets_own_target(tmp_path):
    """The page's fallbacks are generated for the net's own target: an adreno3xx mediump net
    (16 texture units, 4 render targets) whose conv reads 9 textures ships, for 2 and for 1
    render targets, the mediump programs adreno3xx has for them (2 outputs a program), not
    those of the ES 2.0 limits (8 units: 1 output a program) in highp; also from its folder."""
    x = inputs = keras.Input((None, None, 32))
    y = GroupConv2D(32, 1, name="L3")(x)
    model = keras.Model(inputs, Act("bounded_relu")(keras.layers.Add()([y, x])))
    net = es2.compile(model, es2.Target.of("adreno3xx", "mediump"))
    net.save(tmp_path / "net")
    for net in (net, es2.load(tmp_path / "net")):
        fallbacks = web.page.fallback_passes(net)
        for room in (2, 1):
            fewer = es2.compile(model, es2.Target.of("adreno3xx", "mediump", room))
            shipped = [q for rooms in fallbacks.values() for _, q in rooms[room]]
            assert {len(q.outputs) for q in shipped} == {room}
            assert {q.source for q in shipped} <= {p.source for p in fewer.passes}


def test_fallback_programs_write_the_mrt_pages_bytes(sr, tmp_path):
    """A draw_buffers=4 page where the browser offers fewer targets runs the programs
    webgl.json ships for its passes (generated in Python, no GLSL edited in JS): the
    one-target ones are the one-target net's programs, and every form writes the same bytes."""
    model, one, _, _ = sr
    mrt = es2.compile(model, es2.Target.of(draw_buffers=4))
    web.export(mrt, tmp_path)
    spec = json.loads((tmp_path / "webgl.json").read_text())
    single = {tuple(p.outputs): p.source for p in one.passes}  # by (tensor, pack)s
    shipped = 0
    for p in spec["passes"]:
        assert ("fallback" in p) == (len(p["outputs"]) > 1), p["name"]
        for room, programs in p.get("fallback", {}).items():
            assert [o for q in programs for o in q["outputs"]] == p["outputs"]
            assert all(len(q["outputs"]) <= int(room) for q in programs)
            for q in programs if room == "1" else []:
                key = ((q["outputs"][0]["tensor"], q["outputs"][0]["pack"]),)
                assert (tmp_path / q["shader"]).read_text() == single[key], q["name"]
                shipped += 1
    assert shipped == sum(len(p.outputs) for p in mrt.passes if len(p.outputs) > 1)
    image = np.random.default_rng(5).integers(0, 256, (18, 20, 3), np.uint8)
    with web.session(tmp_path) as page:
        expected = page.run(image)
        assert [name for name, _ in expected["passes"]] == [p.name for p in mrt.passes]
    for params, passes in [({"max_draw_buffers": 1}, len(one.passes)),
                           ({"no_draw_buffers": 1}, len(one.passes)),
                           ({"max_draw_buffers": 2}, None)]:
        with web.session(tmp_path, **params) as page:
            assert page.state == "ready" and "render targets per pass" in page.message
            result = page.run(image)
        assert passes is None or len(result["passes"]) == passes, params
        np.testing.assert_array_equal(result["output"], expected["output"])


def _classifier_images(size=32, count=20):
    """(calibration images, test images, class names): CIFAR-10 (2 a class), else crops of the
    SR images (classes named by number)."""
    try:
        root = datasets.classification_root()
    except FileNotFoundError:
        pictures = [img for _, img in datasets.sr_images("Set5").images]
        rng = np.random.default_rng(0)
        crops = []
        for i in range(2 * count):
            img = pictures[i % len(pictures)]
            y, x = (rng.integers(0, n - size) for n in img.shape[:2])
            crops.append(img[y:y + size, x:x + size])
        return np.stack(crops[:count]), np.stack(crops[count:]), [f"class {i}" for i in range(10)]
    per_class = -(-count // 10)
    calibration, _, _ = datasets.image_folder_files(root, "train", limit=per_class)
    test, _, names = datasets.image_folder_files(root, "test", limit=per_class)
    return _load(calibration, size), _load(test, size)[:count], names


def _load(paths, size):
    return datasets.load_images_uint8(paths, size).astype(np.float32) / 255


@pytest.fixture(scope="module")
def classifier():
    """The tiny preset at 32x32, 10 classes, random weights, BatchNorm calibrated."""
    calibration, test, names = _classifier_images()
    keras.utils.set_random_seed(0)
    model = dogs_classifier("tiny", input_size=32, classes=10)
    classify.calibrate_batchnorm(model, calibration)
    return model, test, names


@pytest.mark.slow
def test_classifier_page_top1_equals_tf(classifier, tmp_path):
    model, test, names = classifier
    net = es2.compile(model)
    web.export(net, tmp_path, labels=names)
    with web.session(tmp_path) as page:
        results = [page.run(image) for image in test]
    logits = np.stack([r["logits"] for r in results])
    tf_logits = model(test, training=False).numpy()
    gl_logits = np.stack([net.run(image) for image in test])
    same = np.mean(logits.argmax(1) == tf_logits.argmax(1))
    print(f"\n{len(test)} images: top-1 WebGL = TF on {same:.0%}; "
          f"max |logit WebGL - llvmpipe| {np.abs(logits - gl_logits).max():.4f}, "
          f"max |logit WebGL - TF| {np.abs(logits - tf_logits).max():.4f}; "
          f"{len(results[0]['passes'])} passes, median "
          f"{np.median([r['total_ms'] for r in results]):.1f} ms")
    np.testing.assert_array_equal(logits.argmax(1), tf_logits.argmax(1))
    assert np.abs(logits - gl_logits).max() <= 4 / 256
    for r, row in zip(results, logits):  # softmax and top-5 in JS
        p = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        np.testing.assert_allclose(r["probabilities"], p, atol=1e-6)
        assert [t["index"] for t in r["top5"]] == list(np.argsort(-p, kind="stable")[:5])
        assert r["top5"][0]["label"] == names[int(row.argmax())] and not r["saturated"]


def test_float_dense_needs_float_textures(classifier, tmp_path):
    model, _, names = classifier
    net = es2.compile(model, dense="float")
    web.export(net, tmp_path, labels=names)
    with web.session(tmp_path, no_float_textures=1) as page:
        _assert_plan(page, net, [(32, 32), (17, 23), (6, 5)])  # strided convs, a dense layer
        assert page.state == "error"
        assert "layer logits computes in float textures (RGBA32F), but this browser lacks " \
            "OES_texture_float and WEBGL_color_buffer_float" in page.message


@pytest.mark.parametrize("gl, shared", [("swiftshader", False), ("llvmpipe", False),
                                        ("llvmpipe", True)])
def test_pooling_net_page_writes_the_emulators_bytes(gl, shared, tmp_path):
    """A net with max and average pooling (a stride-2 'valid' window and a stride-1 'same'
    one) runs on the page with no page code for pooling: its shapes, textures and uniforms
    from webgl.json, its output bytes those of the emulator (SwiftShader: but for values
    rounded on the other side of a half level, as for the SR net).  ``shared``: the convs'
    weights as uniform arrays the page sets at each draw."""
    from workbench.web import browser

    keras.utils.set_random_seed(5)
    x = inputs = keras.Input((None, None, 3))
    for layer in (GroupConv2D(8, 3), Act("sigmoid_like"), keras.layers.MaxPooling2D(2),
                  GroupConv2D(8, 3), Act("sigmoid_like"),
                  keras.layers.AveragePooling2D(3, 1, padding="same"), GroupConv2D(4, 1),
                  Act("sigmoid_like")):
        x = layer(x)
    net = es2.compile(keras.Model(inputs, x), **({"target": "videocore4", "shared": True}
                                                 if shared else {}))
    assert any(p.arrays for p in net.passes) == shared
    web.export(net, tmp_path)
    image = _image_for_page(27, 22)
    try:
        with web.session(tmp_path, gl=gl) as page:
            _assert_plan(page, net, [(27, 22), (8, 9)])
            result = page.run(image)
    except browser.BrowserUnavailable as error:  # llvmpipe: no Mesa EGL for ANGLE
        pytest.skip(str(error))
    emulated = net.emulate(image, keep=True)[net.graph.output]
    out = result["output"][..., :4]
    assert out.shape == emulated.shape == (13, 11, 4)
    assert np.mean(out == emulated) >= (1.0 if gl == "llvmpipe" else 0.995)
    assert np.abs(out.astype(int) - emulated).max() <= 1


def _image_for_page(h, w, seed=0):
    """An RGB image in 8-bit levels (what a PNG the page decodes holds)."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3)).astype(np.float32) / 255


def test_split_conv_page_writes_the_emulators_bytes(tmp_path):
    """A 3x3 conv over 32 channels, split over two programs whose partial sums the page keeps
    in fixed-point textures (workbench.es2.ops.split): no page code for it, the emulator's
    bytes on llvmpipe."""
    from tests.es2.test_split import wide_model
    from workbench.web import browser

    net = es2.compile(wide_model(width=32, residual=True))
    assert net.graph.op("wide").split == 2
    web.export(net, tmp_path)
    image = _image_for_page(13, 17, seed=4)
    try:
        with web.session(tmp_path, gl="llvmpipe") as page:
            result = page.run(image)
    except browser.BrowserUnavailable as error:  # llvmpipe: no Mesa EGL for ANGLE
        pytest.skip(str(error))
    emulated = net.emulate(image, keep=True)[net.graph.output]
    np.testing.assert_array_equal(result["output"][..., :4], emulated)


def test_a_zero_border_page_writes_the_emulators_bytes(tmp_path):
    """Layers read through a zero border (es2.drivers.tune's ``zero_border``; a 5x5 layer of
    stride 2, a 3x3 one, an explicit padding wider than the window's, which the 3x3 layer
    draws around its output): the copies' textures and the drawn ones sized and their
    uniforms set by webgl.json's rules, no page code for the copies (a drawn output: the
    page clears its textures and draws its pass's border area); the emulator's bytes on
    llvmpipe."""
    from tests.conftest import with_zero_border
    from workbench.web import browser

    keras.utils.set_random_seed(9)
    x = inputs = keras.Input((None, None, 3))
    for layer in (GroupConv2D(8, 5, strides=2), Act("sigmoid_like"), GroupConv2D(8, 3),
                  Act("sigmoid_like"),
                  keras.layers.ZeroPadding2D(2), GroupConv2D(4, 3, padding="valid"),
                  Act("sigmoid_like")):
        x = layer(x)
    net, layers = with_zero_border(es2.compile(keras.Model(inputs, x)))
    assert len(layers) == 3 and sum(".border" in p.name for p in net.passes) == 3
    assert [op.border_out for op in net.graph.ops if getattr(op, "border_out", None)] == \
        [(2, 2, 2, 2)]
    web.export(net, tmp_path)
    image = _image_for_page(14, 19, seed=5)
    try:
        with web.session(tmp_path, gl="llvmpipe") as page:
            _assert_plan(page, net, [(14, 19), (9, 6)])
            result = page.run(image)
    except browser.BrowserUnavailable as error:  # llvmpipe: no Mesa EGL for ANGLE
        pytest.skip(str(error))
    emulated = net.emulate(image, keep=True)[net.graph.output]
    assert result["output"].shape == emulated.shape == (9, 12, 4)
    np.testing.assert_array_equal(result["output"], emulated)
