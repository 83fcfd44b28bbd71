"""The ES 2.0 back end on the GPU (Mesa llvmpipe) vs the numpy emulator vs TensorFlow: nets of
several ops, the SR demux, the program forms, limits, saving.  Each op's cases are the op
table's (tests/ops); here only what it lacks (a pooled dense layer over many packs or chunked,
the softmax's sum and argmax).

Tolerances, and why:
* GPU vs emulator: both store every tensor as RGBA8 and compute in float32 in the shader's
  order, so on Mesa llvmpipe the bytes are equal: every one for a random-weight net
  (test_emulator_is_exact_on_llvmpipe), all but ~1 in 10^6 for a trained one.
  A GPU that fuses multiply-adds or sums in another order differs only where a value lies
  within float32 rounding of a half level: the per-op tests allow that, >= 99.99 % equal
  bytes and at most 1 level apart, and end to end (5 layers, where a one-level difference
  spreads) the issue's >= 99.9 %.
* Emulator vs TensorFlow: TF computes in float without storage; for one op on the same
  8-bit input the emulator is TF rounded to the nearest of 256 levels, so the largest
  difference is half a level, 0.5/255 ~ 0.002 (+ float error).  For reference, a peer
  library's tests allow max abs error 0.003-0.0086 against TF.
"""
import json
import os
import re
import signal
from dataclasses import replace

import keras
import numpy as np
import pytest

from workbench import es2, gl, ir, references
from workbench.data import metrics
from workbench.es2 import emulate, glslang, limits, plan
from workbench.es2.ops.conv.orders import LAST
from workbench.ir import cost
from workbench.nets.layers import Act, DepthToSpace, GroupConv2D
from workbench.nets.models import sr_x2

HALF_LEVEL = 0.5 / 255 + 1e-5


def _image(h, w, c, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c)).astype(np.float32) / 255


def _model(channels, *layers, residual=False):
    x = inputs = keras.Input((None, None, channels))
    y = x
    for layer in layers:
        if residual and isinstance(layer, Act):
            y = keras.layers.Add()([y, x])
        y = layer(y)
    return keras.Model(inputs, y)


def _compare(model, image, luma_input=False, tf_tolerance=HALF_LEVEL):
    """Run on GPU, emulator and TF; check the tolerances above; return the net."""
    net = es2.compile(model, luma_input=luma_input)
    gpu, emu = net.run(image), net.emulate(image)
    tf_out = model(image[None]).numpy()[0]
    assert gpu.shape == emu.shape == tf_out.shape
    equal = np.mean(np.round(gpu * 255) == np.round(emu * 255))
    assert equal >= 0.9999, f"only {equal:.5%} of bytes equal to the emulator"
    assert np.abs(gpu - emu).max() <= 1 / 255 + 1e-6
    assert np.abs(emu - tf_out).max() <= tf_tolerance
    return net


def test_add_and_concat():
    """A two-input Add (not the conv-fused residual: both inputs activated) with a bounded
    activation after it, and a Concatenate of three tensors whose channels are not whole
    packs (8 + 8 + 6): every tensor's bytes equal the emulator's, within half a level of TF,
    also with the passes drawn back to back (``timed=False``: no timings);
    an Add without a bounded activation, one of whose parts is stored as it is (clamped at 1),
    is refused where the calibrated sum leaves [0, 1] (es2.calibrate)."""
    keras.utils.set_random_seed(7)
    x = inputs = keras.Input((None, None, 6))
    a = Act("sigmoid_like")(GroupConv2D(8, 3)(x))
    b = Act("sigmoid_like")(GroupConv2D(8, 1)(a))
    s = Act("bounded_relu")(keras.layers.Add(name="sum")([a, b]))
    c = keras.layers.Concatenate(name="cat")([s, a, x])
    model = keras.Model(inputs, Act("sigmoid_like")(GroupConv2D(4, 3)(c)))
    net = _compare(model, _image(11, 9, 6, seed=3), tf_tolerance=2 / 255)  # 3 layers deep
    assert [es2.record.record(op).name for op in net.graph.ops] == [
        "Conv", "Conv", "Add", "Concat", "Conv"]
    image = _image(11, 9, 6, seed=3)
    gpu, emu = net.run(image, keep=True), net.emulate(image, keep=True)
    for name in ("sum", "cat"):
        np.testing.assert_array_equal(gpu[name], emu[name], err_msg=name)
    assert list(net.timings) == [p.name for p in net.passes]  # each pass waited for
    untimed = net.run(image, keep=True, timed=False)  # drawn back to back: the same bytes
    assert net.timings == {} and all(np.array_equal(untimed[k], gpu[k]) for k in gpu)
    unbounded = keras.Model(inputs, keras.layers.Add(name="raw")([a, b]))
    with pytest.raises(ValueError, match="the deployed net is not the model, .* dB from "
                       "TensorFlow.*most clipped: 'raw'"):
        es2.compile(unbounded)  # a linear sum in [0, 2], the output image: clamped at 1


def test_softmax_after_the_logits_runs_on_the_cpu():
    """Dense then Softmax: the GPU stores the logits; net.run and net.emulate return their
    softmax, which TF's probabilities match to the fixed-point logits' rounding."""
    keras.utils.set_random_seed(8)
    model = _classifier(8, 6, 4)
    probabilities = keras.Model(model.inputs[0], keras.layers.Softmax()(model.outputs[0]))
    net = es2.compile(probabilities)
    image = _image(4, 4, 4, seed=11)
    gpu, emu, tf_out = net.run(image), net.emulate(image), probabilities(image[None]).numpy()[0]
    assert net.graph.ops[-1].softmax and gpu.sum() == pytest.approx(1, abs=1e-6)
    np.testing.assert_array_equal(gpu, emu)
    assert np.abs(gpu - tf_out).max() < 0.01 and gpu.argmax() == tf_out.argmax()


def test_sr_demux_beyond_1024_output_pixels():
    """Before: every odd output column from 1024 on was wrong on llvmpipe (up to 255 levels):
    the demux computed with gl_FragCoord, mediump in GLSL ES 1.00, which Mesa evaluated in fp16."""
    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2())
    image = _image(2, 520, 3, seed=12)
    np.testing.assert_array_equal(net.run(image, keep=True)["subpixels"],
                                  net.emulate(image, keep=True)["subpixels"])


def test_luma_input_and_sr_demux():
    # The SR demux: luma of the net + chroma of the input, bilinear (half-pixel centres).
    model = sr_x2()
    net = _compare_sr(model, _image(21, 17, 3, seed=4))
    assert [p.name for p in net.passes][-1] == "subpixels.0"


@pytest.mark.parametrize("anchor,law", [("nearest", "linear"), ("bilinear", "linear"),
                                        ("nearest", "sqrt")])
def test_sr_demux_with_an_anchor(anchor, law):
    # The sub-pixels correct the input's luma upsampled: every byte as the emulator predicts,
    # TF's output to 45 dB, and the same texel fetches as the plain demux (the anchor is
    # computed from the chroma's 4 taps).  With the sqrt storage law L5 stores its output
    # companded and the demux decodes it: the same bytes again, and no fetch more.
    from workbench.nets.sr_recipes import sr_x2_recipe

    keras.utils.set_random_seed(7)
    model = sr_x2_recipe(init="identity", anchor=anchor, anchor_scale=0.75, anchor_storage=law)
    rng = np.random.default_rng(0)
    kernel, bias = model.get_layer("L5").get_weights()
    model.get_layer("L5").set_weights([rng.normal(0, 0.2, kernel.shape), bias])
    net = _compare_sr(model, _image(23, 19, 3, seed=8))
    image = _image(40, 36, 3, seed=6)
    stored, predicted = net.run(image, keep=True), net.emulate(image, keep=True)
    for name in stored:
        np.testing.assert_array_equal(stored[name], predicted[name], err_msg=name)
    demux = net.graph.op("subpixels")
    assert (demux.anchor, demux.anchor_scale, demux.input) == (anchor, 0.75, "L5")
    assert (net.graph.op("L5").storage, demux.anchor_storage) == (law, law)
    assert ("sqrt(" in net.passes[-2].source) == (law == "sqrt")
    plain = es2.compile(sr_x2())
    assert (cost.total(net.cost((64, 64)).values()).texel_fetches
            == cost.total(plain.cost((64, 64)).values()).texel_fetches)


def _compare_sr(model, image):
    from workbench.nets import superres

    net = es2.compile(model)
    gpu, emu = net.run(image), net.emulate(image)
    ref = superres.upscale(model, image)  # TF, float chroma, rounded to 8 bits
    assert gpu.shape == ref.shape == (image.shape[0] * 2, image.shape[1] * 2, 3)
    assert np.mean(np.round(gpu * 255) == np.round(emu * 255)) >= 0.999
    # Op by op from the GPU's own stored inputs, each shader agrees as a single op does.
    stored = net.run(image, keep=True)
    for name, predicted in emulate.stepwise(net.graph, stored).items():
        assert np.mean(stored[name] == predicted) >= 0.9999, name
    # Five layers of 8-bit storage: errors add up, so a PSNR floor (the 45 dB) rather
    # than the single-op half level.
    assert metrics.psnr(ref, emu) >= 45 and metrics.psnr(ref, gpu) >= 45
    return net


def test_emulator_is_exact_on_llvmpipe():
    # float32 in llvmpipe's order (no FMA, dot summed last component first, mix as
    # a + t(b - a), stores rounded to nearest even): every byte of every tensor is predicted.
    renderer = gl.info()["GL_RENDERER"]
    if "llvmpipe" not in renderer:
        pytest.skip(f"the exact order is llvmpipe's; the renderer here is {renderer}")
    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2())
    image = _image(40, 36, 3, seed=6)
    stored = net.run(image, keep=True)
    predicted = net.emulate(image, keep=True)
    for name in stored:
        np.testing.assert_array_equal(stored[name], predicted[name], err_msg=name)


@pytest.mark.parametrize("order", ["chain", "taps", "rows", "columns"])
def test_every_summation_order_is_predicted_byte_for_byte(order):
    """Each order the tuner may choose (es2.drivers.tune) on llvmpipe: every tensor's bytes
    those of the emulator following the same order; a luma 5x5, grouped 3x3 convolutions
    over several packs, a residual (added to the bias first, after the order's first or
    second term, or last), a strided 'valid' one and draw buffers among them.  The orders
    round differently: some bytes differ from the chain's."""
    if "llvmpipe" not in gl.info()["GL_RENDERER"]:
        pytest.skip("the exact order is llvmpipe's")
    from workbench.es2 import drivers
    from workbench.es2.ops import conv
    from workbench.es2.ops.conv import ConvForm

    keras.utils.set_random_seed(7)
    image = _image(40, 36, 3, seed=8)
    strided = _model(8, GroupConv2D(8, 3, groups=2, strides=2, padding="valid"),
                     Act("sigmoid_like"))
    residual = _model(8, GroupConv2D(8, 3, groups=2), Act("sigmoid_like"), residual=True)
    after = {"chain": 0, "taps": 1, "rows": 2, "columns": LAST}[order]  # the residual's place
    sr = sr_x2()
    for model, x, buffers in ((sr, image, 1), (strided, _image(17, 15, 8), 2),
                              (residual, _image(15, 13, 8), 1)):
        net = es2.compile(model, es2.Target.of(draw_buffers=buffers))
        graph = drivers.ordered(net.graph, {
            op.name: {"order": order, **({"residual_after": after} if op.residual else {})}
            for op in net.graph.ops if isinstance(op, ir.Conv)})
        assert all(isinstance(op, ConvForm) and op.order == order
                   for op in graph.ops if isinstance(op, ir.Conv))
        ordered = es2.Net(graph, es2.generate(graph, net.target), net.target)
        if model is sr and order != "chain":  # a luma tap's mask on its scalar luma
            luma = next(p.source for p in ordered.passes if p.op == "L1")
            assert re.search(r"vec3\([^()]*\)\) \* [m(]", luma), order
        stored, predicted = ordered.run(x, keep=True), ordered.emulate(x, keep=True)
        for name in stored:
            np.testing.assert_array_equal(stored[name], predicted[name], err_msg=name)
        if order != "chain" and model is sr:  # the order is the emulator's, not a no-op
            op = next(op for op in net.graph.ops if isinstance(op, ir.Conv) and op.cin > 4)
            x = np.random.default_rng(9).random((9, 7, op.cin)).astype(np.float32)
            assert not np.array_equal(conv.emulate(op, x), conv.emulate(graph.op(op.name), x))
        if after != LAST and model is residual:  # so is the residual's place
            op = graph.op(next(op.name for op in graph.ops if getattr(op, "residual", None)))
            x, r = np.random.default_rng(10).random((2, 9, 7, op.cin)).astype(np.float32)
            last = conv.emulate(replace(op, residual_after=LAST), x, r)
            assert not np.array_equal(conv.emulate(op, x, r), last)


def test_a_zero_border_reads_what_the_masks_read(tmp_path):
    """zero_border (a form es2.drivers.tune may choose): each bordered layer's input copied
    once into textures with its padding as zeros, or, where a stride-1 convolution makes it
    for this layer alone, drawn so by that producer (the SR net's L2, L4 and L5: L1, a
    bordered 5x5 layer, and L3, a 1x1 one, draw theirs); its programs without masks; on
    llvmpipe every tensor's bytes those of the masked net and of the emulator (a luma 5x5
    and grouped 3x3 layers, a residual, an explicit asymmetric padding, strides of 2 over an
    odd and an even size, draw buffers, programs of 2 channels), the bordered texture the
    input padded with zeros as far as the windows reach; the copies' fetches and programs,
    the producers' larger textures (their draws the output's own pixels) in the cost; a
    stride-1 window's copy draws the input's own pixels (the runtime clears its border), a
    fetch each, another's every texel; saved and loaded with it.  A luma layer's copy (a
    stride of 1 or 2) holds the luma at two bytes (within half a step of a byte's step of
    numpy's float64 luma of the image's bytes), its bytes a step from the masked net's, at a
    tenth of a percent of them."""
    if "llvmpipe" not in gl.info()["GL_RENDERER"]:
        pytest.skip("the exact order is llvmpipe's")
    from tests.conftest import with_zero_border
    from workbench.es2.ops.conv.padding import border_tensor
    from workbench.studies import compilers

    keras.utils.set_random_seed(13)
    residual = _model(8, GroupConv2D(8, 3, groups=2), Act("sigmoid_like"), residual=True)
    explicit = _model(8, keras.layers.ZeroPadding2D(((1, 2), (0, 1))),
                      GroupConv2D(8, 3, padding="valid"), Act("sigmoid_like"))
    strided = _model(3, GroupConv2D(8, 5, strides=2), Act("sigmoid_like"),
                     GroupConv2D(8, 3, strides=2, groups=2), Act("sigmoid_like"))
    strided_luma = _model(1, GroupConv2D(8, 5, strides=2), Act("sigmoid_like"))
    sr = sr_x2()
    for model, x, buffers, channels in ((sr, _image(40, 36, 3, seed=14), 1, None),
                                        (residual, _image(15, 13, 8), 2, None),
                                        (explicit, _image(15, 13, 8), 1, 2),
                                        (strided, _image(21, 18, 3), 1, None),
                                        (strided_luma, _image(21, 18, 3), 1, None)):
        net = es2.compile(model, es2.Target.of(draw_buffers=buffers),
                          luma_input=model is strided_luma or None)
        bordered, layers = with_zero_border(net, luma_copy=True,
                                            **({"channels": channels} if channels else {}))
        assert layers, model.name
        graph = bordered.graph
        for name in layers:
            programs = [p.source for p in bordered.passes
                        if p.op == name and border_tensor(graph.op(name)) not in p.outputs[0]]
            assert programs and not any("step(" in source for source in programs), name
        masked = es2.Net(net.graph, es2.generate(net.graph, net.target,
                                                 {n: {"channels": channels} for n in layers}
                                                 if channels else None), net.target)
        stored, predicted = bordered.run(x, keep=True), bordered.emulate(x, keep=True)
        plain, raw = masked.run(x, keep=True), bordered.runner.run(x, keep=True)
        textures = {name: np.concatenate([raw[k] for k in sorted(raw) if k[0] == name], -1)
                    for name, _ in raw}  # as drawn, borders and all
        luma_copies = [name for name in layers if graph.op(name).luma_copy]
        assert len(luma_copies) == (model in (sr, strided_luma)), luma_copies
        for name in predicted:
            np.testing.assert_array_equal(stored[name], predicted[name], err_msg=name)
            if not luma_copies:
                np.testing.assert_array_equal(stored[name], plain[name], err_msg=name)
        for name in luma_copies:  # its luma at two bytes: its bytes a step apart, seldom
            step = np.abs(stored[name].astype(int) - plain[name])
            assert step.max() <= 1 and step.mean() < 1e-3, (name, step.mean())
        drawn = [op.name for op in graph.ops if getattr(op, "border_out", None)]
        assert bool(drawn) == (model.name == sr.name), drawn
        for name in layers:  # its copy, or its input as drawn: with the padding as zeros
            op = graph.op(name)
            copied = not op.input_bordered
            (h, w) = stored[op.input].shape[:2]
            copy = textures[border_tensor(op) if copied else op.input]
            (top, left), (oh, ow) = op.pads((h, w)), op.out_hw((h, w))
            assert copy.shape[:2] == ((oh - 1) * op.stride + op.size,
                                      (ow - 1) * op.stride + op.size)
            inside = copy[top:top + h, left:left + w]
            image = stored[op.input][:len(inside), :inside.shape[1]]
            if op.luma_copy:  # the luma times 255: its whole part, its fraction's byte
                luma = image[..., :3].astype(np.float64) @ [0.299, 0.587, 0.114]
                held = inside[..., 0] + inside[..., 1] / 255.0
                assert np.abs(held - luma).max() <= 0.5 / 255 + 1e-4
                assert not inside[..., 2:].any()
            else:
                np.testing.assert_array_equal(inside, image, err_msg=name)
            assert copy.sum() == inside.sum()
        hw = x.shape[:2]
        fragments = dict(compilers.draws(bordered, hw))  # a drawn output's own pixels
        copying = {p.name: p.op for p in bordered.passes  # a copy, and whose input it copies
                   if p.outputs[0][0] == border_tensor(graph.op(p.op))}
        assert [fragments[i] for i, p in enumerate(bordered.passes) if p.border] == \
            [np.prod(stored[graph.op(copying[p.name]).input if p.name in copying
                            else p.op].shape[:2]) for p in bordered.passes if p.border]
        assert {p.op for p in bordered.passes if p.border and p.name not in copying} == \
            set(drawn)
        assert all((p.border is not None) == (graph.op(op).stride == 1)
                   for name, op in copying.items() for p in bordered.passes if p.name == name)
        costs = (plan.cost(graph, hw, es2.shaders.programs(graph, bordered.passes)),
                 plan.cost(net.graph, hw, es2.shaders.programs(net.graph, masked.passes)))
        for name in layers:  # a fetch a texel of each copy; a drawn output's own pixels
            op = graph.op(name)
            texels = 0 if op.input_bordered else np.prod(  # what its copy draws
                (stored[op.input] if op.stride == 1 else textures[border_tensor(op)]).shape[:2])
            area, pixels = np.prod(textures[name].shape[:2]), np.prod(stored[name].shape[:2])
            assert (area > pixels) == (name in drawn)
            n = sum(p.op == name for p in bordered.passes) - sum(p.op == name
                                                                 for p in masked.passes)
            assert costs[0][name].programs == costs[1][name].programs + n
            assert (n > 0) == (not op.input_bordered)
            assert costs[0][name].multiply_adds == costs[1][name].multiply_adds
            assert costs[0][name].texel_fetches == costs[1][name].texel_fetches + n * texels
            assert costs[0][name].texture_bytes * pixels == costs[1][name].texture_bytes * area
    bordered.save(tmp_path / "bordered")
    loaded = es2.load(tmp_path / "bordered")
    assert all(loaded.graph.op(name).zero_border for name in layers)
    np.testing.assert_array_equal(loaded.run(x, keep=True)[graph.output], stored[graph.output])


def test_unit_masks_keep_every_byte():
    """unit_masks (a form es2.drivers.tune may choose on vc4): where no tap lies in the
    padding (a zero border's window, a 1x1 layer) and the order groups the taps, each
    column's products times max(x<d>, 1.0), exactly 1: on llvmpipe every tensor's bytes those
    of the same forms without them and of the emulator (the SR net: a luma 5x5, grouped 3x3
    and 1x1 layers; a residual; strides of 2); a program whose taps may lie in the padding,
    masked, is left as it was."""
    if "llvmpipe" not in gl.info()["GL_RENDERER"]:
        pytest.skip("the exact order is llvmpipe's")
    from workbench.es2 import drivers

    keras.utils.set_random_seed(15)
    residual = _model(8, GroupConv2D(8, 3, groups=2), Act("sigmoid_like"), residual=True)
    strided = _model(3, GroupConv2D(8, 5, strides=2), Act("sigmoid_like"),
                     GroupConv2D(8, 3, strides=2, groups=2), Act("sigmoid_like"))
    for model, x in ((sr_x2(), _image(31, 27, 3, seed=16)), (residual, _image(15, 13, 8)),
                     (strided, _image(21, 18, 3))):
        net = es2.compile(model)
        for order, border in (("columns", True), ("rows", True), ("taps", False)):
            forms = {op.name: {"order": order, "zero_border": border}
                     for op in net.graph.ops if "unit_masks" in drivers.layer_options(op)}
            forms = {name: {k: v for k, v in form.items()
                            if k in drivers.layer_options(net.graph.op(name))}
                     for name, form in forms.items()}
            unit = {name: {**form, "unit_masks": True} for name, form in forms.items()}
            graph = drivers.ordered(net.graph, forms)
            plain, kept = (es2.Net(graph, es2.generate(graph, net.target, f), net.target)
                           for f in (forms, unit))
            for p, q in zip(plain.passes, kept.passes):
                inside = p.op in forms and (forms[p.op].get("zero_border")
                                            or graph.op(p.op).size == 1)
                assert ("max(x" in q.source) == (inside and "border" not in p.name), q.name
                assert (p.source == q.source) == ("max(x" not in q.source), q.name
            stored, predicted = kept.run(x, keep=True), kept.emulate(x, keep=True)
            without = plain.run(x, keep=True)
            for name in predicted:
                np.testing.assert_array_equal(stored[name], predicted[name], err_msg=name)
                np.testing.assert_array_equal(stored[name], without[name], err_msg=name)


def test_weights_as_uniforms_share_programs_and_keep_every_byte(tmp_path):
    """shared=True: each layer's weights as a uniform array set at each draw, so passes of
    one shape share a program (the SR net's 32 passes: 5 programs); the same float32 values
    as the literals, so every tensor's bytes are those of the literal net (an RGB input's
    products over its 3 components alone: the absent 4th neither read nor multiplied); saved
    and loaded with each array's file and its sha256."""
    keras.utils.set_random_seed(11)
    sr = sr_x2()
    residual = _model(8, GroupConv2D(8, 3, groups=2), Act("sigmoid_like"), residual=True)
    rgb = _model(3, GroupConv2D(8, 3), Act("sigmoid_like"))
    for model, image in ((sr, _image(40, 36, 3, seed=12)), (residual, _image(15, 13, 8)),
                         (rgb, _image(15, 13, 3))):
        plain = es2.compile(model)
        shared = es2.compile(model, "videocore4", shared=True)
        assert [p.name for p in shared.passes] == [p.name for p in plain.passes]
        assert all(p.arrays["u_w"].dtype == np.float32 for p in shared.passes if p.arrays)
        assert {p.op for p in shared.passes if p.arrays} == {
            op.name for op in shared.graph.ops if isinstance(op, ir.Conv)}
        stored, literal = shared.run(image, keep=True), plain.run(image, keep=True)
        for name in literal:
            np.testing.assert_array_equal(stored[name], literal[name], err_msg=name)
    assert len({p.source for p in shared.passes}) < len(shared.passes)
    assert "mul3(" in shared.passes[0].source and "mat4(" not in shared.passes[0].source
    assert len(shared.passes[0].arrays["u_w"]) == 1 + 9 * 3  # the bias, 3 columns a tap
    sr_shared = es2.compile(sr, "videocore4", shared=True)
    assert len(sr_shared.passes) == 32 and len({p.source for p in sr_shared.passes}) == 5
    with pytest.raises(limits.LimitError, match="fragment uniform vectors"):
        limits.check_passes(sr_shared.passes)  # the ES 2.0 minimum: 16 vec4s
    sr_shared.save(tmp_path / "net")
    manifest = json.loads((tmp_path / "net" / "manifest.json").read_text())
    assert manifest["passes"][12]["arrays"] == {"u_w": "L2.0.u_w.npy"}
    assert "L2.0.u_w.npy" in manifest["files"]
    loaded = es2.load(tmp_path / "net")
    np.testing.assert_array_equal(loaded.passes[12].arrays["u_w"],
                                  sr_shared.passes[12].arrays["u_w"])
    image = _image(20, 18, 3, seed=13)
    np.testing.assert_array_equal(loaded.run(image), sr_shared.run(image))


def test_shared_pixel_count_keeps_literals_in_the_larger_layers_and_every_byte():
    """shared=N (a pixel count): weights as uniforms in the layers whose output has at most N
    pixels, literals in the larger ones (a program a pass) with the bias a uniform, so that
    each sum starts from it as the shared program's does: every byte is the shared=True
    net's.  A net of any size is refused."""
    keras.utils.set_random_seed(13)
    x = inputs = keras.Input((24, 20, 3))
    for layer in (GroupConv2D(8, 3), Act("sigmoid_like"), GroupConv2D(8, 3, strides=2),
                  Act("sigmoid_like"), GroupConv2D(8, 3, groups=2), Act("sigmoid_like")):
        x = layer(x)
    model = keras.Model(inputs, x)
    shared, mixed = (es2.compile(model, "videocore4", shared=n) for n in (True, 12 * 10))
    first = mixed.graph.ops[0].name  # 24x20 pixels: literals; the others 12x10: uniforms
    for p in mixed.passes:
        rows = len(p.arrays["u_w"])
        assert rows == 1 if p.op == first else rows > 1, p.name
    assert "mat4(" in mixed.passes[0].source and "u_w[0];" in mixed.passes[0].source
    assert len({p.source for p in mixed.passes}) > len({p.source for p in shared.passes})
    image = _image(24, 20, 3, seed=14)
    stored, wanted = mixed.run(image, keep=True), shared.run(image, keep=True)
    for name in wanted:
        np.testing.assert_array_equal(stored[name], wanted[name], err_msg=name)
    assert "pixels" in mixed.plan_line()
    with pytest.raises(ValueError, match="needs a net of a fixed input size"):
        es2.compile(_model(3, GroupConv2D(8, 3)), shared=100)


def test_sr_x2_cost_at_256():
    net = es2.compile(sr_x2())
    total = cost.total(net.cost((256, 256)).values())
    assert total.programs == len(net.passes) == 32
    assert total.multiply_adds == 7216 * 256 * 256
    # texture memory: 48+32+24+16+4 channels at 256x256 plus the 512x512 RGBA output
    assert total.texture_bytes == (48 + 32 + 24 + 16 + 4) * 256 * 256 + 4 * 512 * 512


def test_every_generated_shader_passes_glslang():
    """The SR net's programs (a luma input, the demux) at highp and mediump, and the vertex
    shader; each op's programs at highp: tests/ops (the op table's glslang column)."""
    if os.environ.get("WORKBENCH_SKIP_GLSLANG"):
        pytest.skip("WORKBENCH_SKIP_GLSLANG is set")
    nets = [es2.compile(sr_x2()), es2.compile(sr_x2(), es2.Target.of(precision="mediump"))]
    shaders = {f"{i}:{p.name}": p.source for i, net in enumerate(nets) for p in net.passes}
    glslang.validate_many(shaders)
    glslang.validate(es2.VERTEX_SHADER, stage="vert", name="vertex")


@pytest.mark.parametrize("build, message", [
    # one row of one pack, 65 taps: nothing to split (a 9x9 window's rows are split)
    (lambda: _model(4, GroupConv2D(4, 65), Act("bounded_relu")),
     "texel fetches per fragment = 4225 exceeds the ES 2.0 limit of 64"),
    (lambda: _model(4, GroupConv2D(4, 3), keras.layers.Flatten()),
     "\\(Flatten\\): not taken by the Keras front end; taken: .*MaxPooling2D"),
])
def test_limits_checker_refuses(build, message):
    with pytest.raises(ValueError, match=message) as err:
        es2.compile(build())
    assert "layer '" in str(err.value)


def test_limits_table_is_one_named_table():
    assert limits.ES2.texture_units == 8 and limits.ES2.fetches_per_fragment == 64
    assert limits.ES2.outputs_per_program == 4 and limits.ES2.channels_per_program == 32


def test_save_and_load_round_trip(tmp_path):
    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2())
    net.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest["passes"]) == 32
    assert all((tmp_path / p["shader"]).exists() for p in manifest["passes"])
    assert manifest["tensors"]["L1"] == {"channels": 48, "packs": 12}
    assert {"tensor": "L1", "index": 11, "width": 256, "height": 256, "format": "RGBA8"} in \
        manifest["textures_for_input"]["textures"]
    again = es2.load(tmp_path)
    image = _image(10, 12, 3, seed=6)
    np.testing.assert_array_equal(again.run(image), net.run(image))
    np.testing.assert_array_equal(again.emulate(image), net.emulate(image))
    # a folder keeps its precision: a target of another, load_net says so (it ignored it)
    assert es2.load_net(tmp_path, es2.Target.of(precision="highp"))[0].precision == "highp"
    with pytest.raises(ValueError, match="written for highp, not mediump; compile the model"):
        es2.load_net(tmp_path, es2.Target.of(precision="mediump"))


def test_missing_gl_gives_a_clear_error(monkeypatch):
    # Without a GL vendor library, EGL cannot make a context: as on a machine without Mesa.
    monkeypatch.setenv("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent.json")
    monkeypatch.setattr(gl, "_WORKERS", {})
    with pytest.raises(gl.GLUnavailable, match="apt-get install libegl1"):
        gl.worker()


def test_interrupts_neither_kill_the_gl_worker_nor_leave_it_a_late_reply(monkeypatch):
    # Ctrl-C and a Jupyter kernel's interrupt or shutdown signal the whole process group.
    worker = gl._Worker(gl.FRAGMENT)
    try:
        os.kill(worker.proc.pid, signal.SIGINT)
        assert worker.call("info") == worker.info

        def interrupted(_):
            raise KeyboardInterrupt
        monkeypatch.setattr(gl.pickle, "load", interrupted)  # the parent, waiting for a reply
        with pytest.raises(KeyboardInterrupt):
            worker.call("info")
        monkeypatch.undo()
        with pytest.raises(gl.GLError, match="has exited"):
            worker.call("info")
    finally:
        worker.close()


def test_shuffle_is_a_binding_order_and_changes_the_result():
    from workbench.nets.layers import Shuffle
    keras.utils.set_random_seed(7)
    model = _model(32, GroupConv2D(32, 1), Act("sigmoid_like"), Shuffle(2),
                   GroupConv2D(32, 1, groups=4), Act("sigmoid_like"))
    # two stored layers: the first one's rounding (half a level) also passes through the second
    net = _compare(model, _image(6, 5, 32, seed=8), tf_tolerance=2 / 255)
    second = net.graph.ops[1]
    assert second.input_order == (0, 2, 4, 6, 1, 3, 5, 7) and len(net.graph.ops) == 2
    assert [b.pack for b in net.passes[-1].inputs] == [5, 7]   # group 3 reads logical packs 6, 7
    # The same net with the binding order dropped computes something else.
    graph = replace(net.graph, ops=[net.graph.ops[0], replace(second, input_order=None)])
    wrong = es2.Net(graph, es2.generate(graph))
    assert np.abs(wrong.run(_image(6, 5, 32, seed=8)) - net.run(_image(6, 5, 32, seed=8))).max() > 0.05


def _classifier(cin, cout, hw, seed=1, weight_scale=None):
    keras.utils.set_random_seed(seed)
    x = inputs = keras.Input((hw, hw, 4))
    x = Act("sigmoid_like")(GroupConv2D(cin, 3)(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    dense = keras.layers.Dense(cout)
    model = keras.Model(inputs, dense(x))
    if weight_scale:
        dense.set_weights([w * weight_scale for w in dense.get_weights()])
    return model


@pytest.mark.parametrize("number", ["fixed16", "float"])
@pytest.mark.parametrize("cin, cout, hw", [(8, 10, 3), (48, 7, 5), (192, 120, 3), (12, 5, 9)])
def test_pooled_dense(number, cin, cout, hw):
    """GAP + Dense as a blocked GEMV.  The emulator reproduces the GPU: exactly in fixed16
    (every stage stored in steps of 1/256), to float32 rounding in float.  Against TF the
    conv's 8-bit storage (half a level per value, averaged and weighted) gives ~0.001 in
    float; fixed16 adds the rounding of the weights and of each stage (0.02 = 5 steps).
    9x9 = 81 pixels do not fit one program's 64 fetches: chunks of 60 pixels."""
    model = _classifier(cin, cout, hw)
    net = es2.compile(model, dense=number)
    image = _image(hw, hw, 4, seed=9)
    gpu, emu, tf_out = net.run(image), net.emulate(image), model(image[None]).numpy()[0]
    assert gpu.shape == (cout,)
    assert np.abs(gpu - emu).max() <= (1e-6 if number == "float" else 1 / 256)
    assert np.abs(emu - tf_out).max() <= (0.005 if number == "float" else 0.02)
    op = net.graph.ops[-1]
    assert len(op.reductions(net.graph.shapes((hw, hw)))) >= 2 and op.pool
    assert op.chunk == (60 if hw * hw + 4 > 64 else 0)
    glslang_ok = not os.environ.get("WORKBENCH_SKIP_GLSLANG")
    if glslang_ok:
        glslang.validate_many({p.name: p.source for p in net.passes})


@pytest.mark.parametrize("block, chunk", [(1, 0), (4, 0), (4, 5), (8, 16)])
def test_the_dense_layers_piece_count_is_its_pieces_without_listing_them(block, chunk):
    """The page sizes a dense layer's textures at large sample sizes: counting its pieces
    without listing every pixel (export-web of a pooled classifier took 12 s for it)."""
    from workbench.es2.ops.dense import Gemv

    for cin, pool, (h, w) in [(3, True, (7, 3)), (13, True, (8, 8)), (64, False, (1, 1)),
                              (48, True, (1, 5))]:
        op = Gemv("d", "x", np.zeros((cin, 10), np.float32), np.zeros(10, np.float32),
                  pool=pool, block=block, chunk=chunk)
        shapes = {"x": (h, w, cin)}
        assert op.piece_count(shapes) == len(op.pieces(shapes))


def test_compile_leaves_the_ir_it_lowered_unchanged(monkeypatch):
    """es2.compile chooses the dense layer's block of input packs for its limits on a
    prepared copy (es2's Gemv), and each conv's form (es2's ConvForm); the lowered graph's
    ops have no ES 2.0 geometry."""
    lowered, lower = [], ir.from_model

    def keep(model, **kwargs):
        lowered.append(lower(model, **kwargs))
        return lowered[-1]
    monkeypatch.setattr(ir, "from_model", keep)
    model = _classifier(48, 7, 5)
    net = es2.compile(model)
    before, after = lowered[0].ops[-1], net.graph.ops[-1]
    assert type(before) is ir.Dense and not hasattr(before, "block")
    assert after.block == 2 and after.chunk == 0  # 64 // (4 + 25) fetches
    assert before is not after and type(lowered[0].ops[0]) is ir.Conv
    assert type(net.graph.ops[0]).__name__ == "ConvForm"


def test_fixed_point_overflow_is_reported_not_garbage():
    from workbench.es2.fixed16 import FixedPointOverflow
    model = _classifier(16, 4, 3, weight_scale=600.0)
    net = es2.compile(model)
    with pytest.raises(FixedPointOverflow, match=r"layer 'dense.*': .* reaches -?\d+\.\d+, outside .* by"):
        net.run(_image(3, 3, 4, seed=10))
    with pytest.raises(FixedPointOverflow, match="by"):
        net.emulate(_image(3, 3, 4, seed=10))
    # the float path has no such range
    assert np.isfinite(es2.compile(model, dense="float").run(_image(3, 3, 4, seed=10))).all()


def test_dogs120_cost_reproduces_the_reference():
    """Per 385x385 image the reference reports ~398.4 M multiply-adds, ~27.9 M RGBA texel
    fetches and < 6 MB of texture memory (convention: workbench/ir/cost.py)."""
    from workbench.nets.models import dogs_classifier
    lowered = ir.from_keras(dogs_classifier("dogs120"))
    graph = es2.net.prepared(lowered, limits.ES2)  # as compile plans it for ES 2.0
    limits.check(graph)
    total = cost.total(plan.cost(graph, (385, 385)).values())
    assert abs(total.multiply_adds / (references.DOGS120_MULTIPLY_ADDS_M * 1e6) - 1) < 0.01
    assert abs(total.texel_fetches / (references.DOGS120_TEXEL_FETCHES_M * 1e6) - 1) < 0.01
    assert plan.peak_texture_bytes(graph, (385, 385)) < references.DOGS120_TEXTURE_MB * 1e6
    shapes = graph.shapes((385, 385))
    assert [shapes[n][:2] for n in ("stem", "down1", "down2", "down3", "down4", "down5", "final")] == \
        [(191, 191), (95, 95), (47, 47), (23, 23), (11, 11), (5, 5), (3, 3)]
    # shuffles became binding orders, BatchNorms were folded: only convs and the dense remain
    assert {type(op).__name__ for op in lowered.ops} == {"Conv", "Dense"}
    assert any(op.input_order for op in lowered.ops if hasattr(op, "input_order"))


def test_classifier_save_and_load_round_trip(tmp_path):
    net = es2.compile(_classifier(48, 7, 5))
    net.save(tmp_path)
    again = es2.load(tmp_path)
    image = _image(5, 5, 4, seed=11)
    np.testing.assert_array_equal(again.run(image), net.run(image))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["input_size"] == [5, 5]
    weights = np.load(tmp_path / next(iter(manifest["constant_textures"].values())))
    assert weights.shape == (49, 4, 4) and weights.dtype == np.uint8


def _set(layer, index, where, value):
    weights = layer.get_weights()
    weights[index][where] = value
    layer.set_weights(weights)


@pytest.mark.parametrize("where, message", [
    ("conv kernel", r"layer 'c': kernel has 1 NaN or infinite values"),
    ("conv bias", r"layer 'c': bias has 2 NaN or infinite values"),
    ("batchnorm", r"layer 'bn': moving_variance has 1 NaN or infinite values"),
    ("batchnorm zero", r"layer 'bn': the folded kernel has \d+ NaN or infinite values"),
    ("dense", r"layer 'logits': kernel has 1 NaN or infinite values"),
])
def test_nan_or_inf_weights_are_refused_naming_the_layer(where, message):
    """Before: ``nan`` / ``inf`` literals in the GLSL, a cryptic driver error at first run."""
    x = inputs = keras.Input((4, 4, 4))
    conv, bn = GroupConv2D(8, 3, name="c"), keras.layers.BatchNormalization(epsilon=0.0, name="bn")
    x = Act("sigmoid")(bn(conv(x)))
    dense = keras.layers.Dense(3, name="logits")
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(x)))
    {"conv kernel": lambda: _set(conv, 0, (0, 0, 0, 0), np.nan),
     "conv bias": lambda: _set(conv, 1, slice(0, 2), np.inf),
     "batchnorm": lambda: _set(bn, 3, 0, np.nan),
     "batchnorm zero": lambda: _set(bn, 3, 0, 0.0),
     "dense": lambda: _set(dense, 0, (0, 0), -np.inf)}[where]()
    with pytest.raises(ir.LoweringError, match=message) as err:
        es2.compile(model)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("conv", [GroupConv2D(4, 3, strides=2), GroupConv2D(4, 3, padding="valid")])
def test_sr_demux_after_a_size_change_is_refused(conv):
    """Before: compiled, and the GPU returned a same-size image (the demux assumes its input
    has the input image's size)."""
    model = _model(1, conv, Act("bounded_relu"), DepthToSpace(2, name="d2s"))
    with pytest.raises(ir.LoweringError, match=r"layer 'd2s': .* depth-to-space must read a "
                       r"tensor of the input image's size, but '.*' is (32x32|62x62) for a 64x64"):
        es2.compile(model)
    with pytest.raises(ir.LoweringError, match="layer 'd2s'"):
        ir.from_keras(model)  # the ES 3.1 back end lowers through the same check
    es2.compile(_model(1, GroupConv2D(4, 3), Act("bounded_relu"), DepthToSpace(2)))  # fits


def test_image_ranges_are_checked_at_the_api_boundary():
    """uint8 (as np.asarray of a PIL image) is converted; floats outside [0, 1] and NaN are
    refused in one line by the GPU run and the emulator alike (they used to clip to a
    near-white image without a word)."""
    model = _model(3, GroupConv2D(4, 3, padding="same"), Act("bounded_relu"))
    net = es2.compile(model)
    image = _image(12, 10, 3)
    levels = np.round(image * 255).astype(np.uint8)
    for run in (net.run, net.emulate):
        np.testing.assert_array_equal(run(levels), run(image))
        for bad, says in ((image * 255, r"values span \[0, 255\].*divide by 255"),
                          (image * 2 - 1, r"values span \[-1, 1\].*\(x \+ 1\) / 2"),
                          (np.where(image > 0.5, np.nan, image), "NaN or infinite"),
                          (levels.astype(np.uint16), "dtype uint16"),
                          ([[0.5, 0.5], [0.5]], r"^image: not an array of pixels")):
            with pytest.raises(ValueError, match=says):
                run(bad)
