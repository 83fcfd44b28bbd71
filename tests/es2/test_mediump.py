"""The mediump prediction (``es2.emulate`` with ``precision="mediump"``: float16 arithmetic,
fetches and constants), its per-op study against TF and the compile-time warning.

References: llvmpipe's bytes for the untouched highp path; a float64 computation rounded to
float16 after every operation for one op (exact products and sums of float16 numbers fit a
float64, so that is correctly rounded float16, independent of numpy's float16 loops); TF
run in float16 for the whole net (not bit-exact: it keeps wider sums; bounds measured).
"""
import warnings

import keras
import numpy as np
import pytest

from workbench import es2, gl, ir
from workbench.es2 import emulate, fixed16, mediump, ops
from workbench.nets import classify
from workbench.nets.models import dogs_classifier, sr_x2
from workbench.studies import deploy, precision


def _sr(seed=0):
    keras.utils.set_random_seed(seed)
    model = sr_x2()
    return model, es2.compile(model)


def test_float32_is_the_default_and_still_llvmpipes_bytes():
    """The emulator's arithmetic is its own argument (not the shaders' precision): float32 by
    default, llvmpipe's bytes; a name it does not know is refused."""
    _, net = _sr(5)
    image = np.random.default_rng(6).integers(0, 256, (24, 20, 3)).astype(np.float32) / 255
    default = net.emulate(image, keep=True)
    highp = net.emulate(image, keep=True, arithmetic="float32")
    with pytest.raises(ValueError, match="arithmetic must be one of \\('float32', 'float16'\\)"):
        net.emulate(image, arithmetic="mediump")
    for name in default:
        np.testing.assert_array_equal(default[name], highp[name], err_msg=name)
    renderer = gl.info()["GL_RENDERER"]
    if "llvmpipe" not in renderer:
        pytest.skip(f"the exact order is llvmpipe's; the renderer here is {renderer}")
    stored = net.run(image, keep=True)
    for name in stored:
        np.testing.assert_array_equal(stored[name], highp[name], err_msg=name)


def _r16(v):
    """Round a float64 to float16 (round to nearest even), back as a Python float."""
    return float(np.float16(v))


def test_one_conv_rounds_as_float16_after_every_operation():
    rng = np.random.default_rng(3)
    kernel = rng.normal(0, 0.7, (1, 1, 4, 4)).astype(np.float32)
    bias = rng.normal(0, 0.3, 4).astype(np.float32)
    op = ir.Conv("c", "image", kernel, bias, 1, "same", 1, "sigmoid_like")
    levels = rng.integers(0, 256, (3, 5, 4))
    got = ops.conv.emulate(op, emulate.load(levels, "float16"))
    assert got.dtype == np.float16
    expected = np.zeros(got.shape)
    for y, x, o in np.ndindex(*got.shape):
        inputs = [_r16(levels[y, x, c] / 255) for c in range(4)]   # the fetch
        product = None                                             # mat4 * vec4, in order
        for c in range(4):
            term = _r16(inputs[c] * _r16(kernel[0, 0, c, o]))
            product = term if product is None else _r16(product + term)
        s = _r16(_r16(bias[o]) + product)
        # clamp(0.05 * s + clamp(0.1 * s, -0.05, 0.05) + clamp(0.05 * s, -0.125, 0.125) + 0.5, 0, 1)
        a = _r16(_r16(0.05) * s)
        b = min(max(_r16(_r16(0.1) * s), _r16(-0.05)), _r16(0.05))
        c = min(max(_r16(_r16(0.05) * s), -0.125), 0.125)
        expected[y, x, o] = min(max(_r16(_r16(_r16(a + b) + c) + 0.5), 0.0), 1.0)
    np.testing.assert_array_equal(got.astype(np.float64), expected)
    # ... which float32 arithmetic rounded to float16 at the end does not reproduce
    once = ops.conv.emulate(op, emulate.load(levels)).astype(np.float16)
    assert (once != got).any()


def test_fixed16_glsl_in_float32_is_the_value_model_and_in_float16_keeps_11_bits():
    v = np.array([-100.3, -1.7, -0.01, 0.0, 0.3, 1.234, 50.55, 127.9])
    for dtype in (np.float32, np.float16):
        levels = emulate.store(fixed16.glsl_enc(v.astype(dtype)))
        decoded = fixed16.glsl_dec(emulate.load(levels, np.dtype(dtype).name))
        if dtype == np.float32:
            np.testing.assert_array_equal(decoded, fixed16.quantize(v))
            np.testing.assert_array_equal(levels, fixed16.encode(v))
        else:  # hi * 256 + lo keeps 11 significant bits: steps of 1/16 below 0, 1/8 above
            np.testing.assert_array_equal(decoded,
                                          [-100.3125, -1.6875, 0, 0, 0.25, 1.25, 50.5, 127.875])


def test_classifier_dense_fixed16_loses_its_low_byte_in_mediump():
    keras.utils.set_random_seed(2)
    model = dogs_classifier("tiny")
    pictures = np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32)
    classify.calibrate_batchnorm(model, pictures)
    image = pictures[0]
    diffs = {}
    for dense in ("fixed16", "float"):
        net = es2.compile(model, dense=dense)
        high, medium = net.emulate(image), net.emulate(image, arithmetic="float16")
        diffs[dense] = np.abs(medium - high).max()
        if dense == "fixed16":  # read back exactly from bytes whose low byte is a multiple of 16
            assert np.all((medium * 16) == np.round(medium * 16))
            assert np.any((high * 16) != np.round(high * 16))
            rows, summary = precision.compare(model, net, [image])
            assert rows[-1]["op"] == "logits" and rows[-1]["mediump dB"] < rows[-1]["highp dB"] - 10
            logit_diff = summary["max logit diff mediump vs TF"]
            assert logit_diff > 5 * summary["max logit diff highp vs TF"]
    assert 0.05 < diffs["fixed16"] < 0.3   # measured 0.137: steps of 1/8 and 1/16
    assert diffs["float"] < 0.01           # measured 0.0039: float16 arithmetic alone


def test_random_sr_net_mediump_against_tf_and_tf_float16():
    model, net = _sr(0)
    image = mediump.probe_image(net.graph, 32, seed=0)
    rows, summary = precision.compare(model, net, [image])
    assert [r["op"] for r in rows] == ["L1", "L2", "L3", "L4", "L5", "subpixels"]
    high, medium = summary["PSNR highp vs TF"], summary["PSNR mediump vs TF"]
    # measured: highp 53.93 dB, mediump 53.47 dB, mediump vs highp 52.38 dB, TF float16 vs
    # TF 64.3 dB, mediump vs TF float16 53.46 dB
    assert summary["PSNR mediump vs highp"] < 58            # the prediction differs
    assert high - 3 < medium < high and medium > 45          # lower, within a sensible band
    assert summary["PSNR mediump vs TF float16"] > 52         # agreement with TF float16
    assert summary["PSNR TF float16 vs TF"] > medium + 5      # TF float16 keeps wider sums
    assert all(r["mediump dB"] <= r["highp dB"] + 0.5 for r in rows)
    text = deploy.mediump_section({"rows": rows, "summary": summary})
    assert "| L1 |" in text and "first op below 40 dB with mediump: none" in text


def test_compile_warns_when_an_op_falls_below_the_threshold():
    model, net = _sr(0)
    scores = mediump.per_op(net.graph, mediump.probe_image(net.graph))
    assert 55 < scores["L1"] < 70 and scores["subpixels"] < scores["L1"]  # measured 62.0, 52.4
    with pytest.warns(mediump.MediumpWarning, match=r"op 'L1' is predicted at 6\d\.\d dB PSNR"):
        es2.compile(model, mediump_warn_db=70)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mediump.MediumpWarning)
        es2.compile(model, mediump_warn_db=20)
        es2.compile(model)
