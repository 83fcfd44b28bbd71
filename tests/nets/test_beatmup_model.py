"""Beatmup's chunk files as Keras models (workbench.nets.beatmup_model).

References: a numpy convolution that indexes the filters by Beatmup's own formula
(``o + O (i + I (x + k y))``), written here loop by loop; scipy's bilinear interpolation at the
input step's sampling points; on the real dog classifier (where ../shared/peers has it), the
top-1 that Beatmup's own Classify app gave on the 145 ImageNet validation images of its
classes in data/cls/imagewoof_val (98, 67.6 %), and the emulator op by op.
"""
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.ndimage import map_coordinates

import workbench
from workbench import es2, ir
from workbench.es2 import emulate
from workbench.gl import beatmup
from workbench.nets import activations
from workbench.nets import beatmup_model as bm
from workbench.nets.layers import shuffle_order

DOGS = (Path(workbench.__file__).resolve().parents[2] / "shared" / "peers" / "beatmup"
        / beatmup.MODEL)  # or in the built peer (`make beatmup`)
if not DOGS.is_file() and beatmup.available() is None:
    DOGS = beatmup.model_file()
needs_dogs = pytest.mark.skipif(not DOGS.is_file(), reason=f"{DOGS} is not here")


def _conv(x, w, b, k, cout, groups, stride, padding):
    """Beatmup's conv2d in loops: ``w`` flat, indexed ``o + O (i + I (x + k y))``."""
    h, wd, cin = x.shape
    ci = cin // groups
    if padding == "same":
        x = np.pad(x, ((k // 2, k // 2), (k // 2, k // 2), (0, 0)))
    oh, ow = (x.shape[0] - k) // stride + 1, (x.shape[1] - k) // stride + 1
    out = np.zeros((oh, ow, cout), np.float64)
    for o in range(cout):
        g = o // (cout // groups)
        for i in range(ci):
            for dy in range(k):
                for dx in range(k):
                    weight = w[o + cout * (i + ci * (dx + k * dy))]
                    out[:, :, o] += weight * x[dy:dy + stride * oh:stride,
                                               dx:dx + stride * ow:stride, g * ci + i]
    return out + b


def _tiny(path, rng):
    """A chunk file: sampler 12x12, conv 5x5/2 valid 3 -> 8, a 3x3 grouped conv (groups 2)
    reading its input shuffled, with the first conv's output as residual, a 4x4 average pool
    over the whole map, dense 8 -> 5, softmax."""
    ops = [
        {"_name": "input", "_type": "image_sampler", "output_width": 12, "output_height": 12},
        {"_name": "c0", "_type": "conv2d", "kernel_size": 5, "input_channels": 3,
         "output_channels": 8, "stride": 2, "padding": "valid", "groups": 1,
         "activation": "sigmoid_like"},
        {"_name": "c1", "_type": "conv2d", "kernel_size": 3, "input_channels": 8,
         "output_channels": 8, "stride": 1, "padding": "same", "groups": 2,
         "activation": "default"},
        {"_name": "pool", "_type": "pooling2d", "operator": "average", "size": 4},
        {"_name": "fc", "_type": "dense", "output_dims": 5},
        {"_name": "softmax", "_type": "softmax"},
    ]
    connections = [{"from": "input", "to": "c0"}, {"from": "c0", "to": "c1", "shuffle": 2},
                   {"from": "c0", "to": "c1", "to_input": 1}, {"from": "c1", "to": "pool"},
                   {"from": "pool", "to": "fc"}, {"from": "fc", "to": "softmax"}]
    weights = {"c0/w": rng.normal(0, 0.3, 5 * 5 * 3 * 8), "c0/b": rng.normal(0, 0.1, 8),
               "c1/w": rng.normal(0, 0.3, 3 * 3 * 4 * 8), "c1/b": rng.normal(0, 0.1, 8),
               "fc/w": rng.normal(0, 1, 5 * 8), "fc/b": rng.normal(0, 0.1, 5)}
    chunks = {"": yaml.safe_dump({"ops": ops, "connections": connections}).encode(),
              "labels": b"a\nb\nc\nd\ne\n",
              **{k: v.astype("<f4").tobytes() for k, v in weights.items()}}
    bm.write_chunks(path, chunks)
    return {k: v.astype(np.float32) for k, v in weights.items()}


def test_a_shuffled_grouped_conv_with_a_residual_and_the_dense_head(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "tiny.chunks"
    w = _tiny(path, rng)
    model = workbench.load_model(path)
    assert model.beatmup_input == bm.InputStep(12, 12) and model.class_names == list("abcde")
    x = rng.random((12, 12, 3)).astype(np.float32)
    act = activations.get("sigmoid_like").np_fn
    a0 = act(_conv(x, w["c0/w"], w["c0/b"], 5, 8, 1, 2, "valid"))
    assert a0.shape == (4, 4, 8)
    order = shuffle_order(2, 2)
    assert order == [0, 1]  # step 2 over 2 packs: the identity; the real net's steps below
    shuffled = np.concatenate([a0[..., 4 * p:4 * p + 4] for p in order], -1)
    a1 = np.clip(_conv(shuffled, w["c1/w"], w["c1/b"], 3, 8, 2, 1, "same") + a0, 0, 1)
    logits = w["fc/w"].reshape(5, 8) @ a1.mean((0, 1)) + w["fc/b"]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(model.predict(x[None], verbose=0)[0], expected, atol=1e-5)
    graph = ir.from_beatmup(path)
    assert [type(op).__name__ for op in graph.ops] == ["Conv", "Conv", "Dense"]
    assert graph.ops[1].residual == "c0" and graph.ops[-1].softmax


@pytest.mark.parametrize("shape", [(30, 50), (50, 30), (12, 12)])
def test_the_input_step_samples_the_centre_crop_bilinearly(shape):
    image = np.random.default_rng(2).integers(0, 256, (*shape, 3), dtype=np.uint8)
    step = bm.InputStep(12, 12)
    got = bm.sample(image, step)
    h, w = shape
    side = min(h, w)
    ys = np.linspace((h - side) / 2, h - 1 - (h - side) / 2, 12)
    xs = np.linspace((w - side) / 2, w - 1 - (w - side) / 2, 12)
    yy, xx = np.meshgrid(ys, xs, indexing="ij")
    expected = np.stack([map_coordinates(image[..., c].astype(float), [yy, xx], order=1)
                         for c in range(3)], -1)
    assert np.abs(got.astype(float) - expected).max() <= 0.5 + 1e-9
    if shape == (12, 12):
        np.testing.assert_array_equal(got, image)


def test_bad_files_are_refused_naming_the_file_and_the_op(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "tiny.chunks"
    _tiny(path, rng)
    data = path.read_bytes()
    (tmp_path / "cut.chunks").write_bytes(data[:-7])
    with pytest.raises(bm.BeatmupModelError, match=r"cut.chunks: truncated \(chunk 'fc/b'"):
        workbench.load_model(tmp_path / "cut.chunks")
    (tmp_path / "junk.chunks").write_bytes(struct.pack("<I", 1000) + b"xy")
    with pytest.raises(bm.BeatmupModelError, match="junk.chunks: "):
        workbench.load_model(tmp_path / "junk.chunks")
    chunks = bm.read_chunks(path)
    spec = yaml.safe_load(chunks[""])
    spec["ops"].insert(2, {"_name": "up", "_type": "upsampling"})
    bm.write_chunks(tmp_path / "op.chunks", {**chunks, "": yaml.safe_dump(spec).encode()})
    with pytest.raises(bm.BeatmupModelError, match=r"op 'up' \(upsampling\): not taken"):
        workbench.load_model(tmp_path / "op.chunks")
    spec = yaml.safe_load(chunks[""])
    spec["ops"][2]["stride"] = 2
    bm.write_chunks(tmp_path / "res.chunks", {**chunks, "": yaml.safe_dump(spec).encode()})
    with pytest.raises(bm.BeatmupModelError, match=r"op 'c1' \(conv2d\): its residual input "
                                                   r"'c0' is 4x4x8, its output 2x2x8"):
        workbench.load_model(tmp_path / "res.chunks")
    del chunks["c1/w"]
    bm.write_chunks(tmp_path / "w.chunks", chunks)
    with pytest.raises(bm.BeatmupModelError, match=r"op 'c1' \(conv2d\): chunk 'c1/w' should "
                                                   r"hold 288 float32 values, has none"):
        workbench.load_model(tmp_path / "w.chunks")


@pytest.fixture(scope="module")
def dogs():
    model = workbench.load_model(DOGS)
    return model, es2.compile(model)


@needs_dogs
def test_the_dog_classifier_as_beatmup_describes_it(dogs):
    model, net = dogs
    assert model.beatmup_input == bm.InputStep(385, 385) and len(model.class_names) == 120
    ops, _ = bm.description(bm.read_chunks(DOGS))
    weights = sum(op["kernel_size"] ** 2 * op["input_channels"] // op["groups"]
                  * op["output_channels"] + op["output_channels"]
                  for op in ops if op["_type"] == "conv2d") + 192 * 120 + 120
    assert model.count_params() == weights == 211_672
    # 42 ops: 41 convs and the pooled dense; 1,134 programs, one per 4 outputs (+ the GEMV's)
    assert len(net.graph.ops) == 42 and net.graph.ops[-1].softmax


@needs_dogs
@pytest.mark.parametrize("shared", [False, True])
def test_the_dog_classifier_on_the_gpu_is_the_emulator_op_by_op_and_tf_top1(dogs, shared):
    """Also with the weights as uniforms (``shared=True``): fewer programs than Beatmup's
    own 27, one a layer shape."""
    from skimage import data

    model, net = dogs
    if shared:
        net = es2.compile(model, "videocore4", shared=True)
        assert len(net.passes) == 1134 and len({p.source for p in net.passes}) <= 27
    images = np.stack([bm.sample(picture, model.beatmup_input)  # a cat, a dog
                       for picture in (data.chelsea(), data.coffee())]).astype(np.float32) / 255
    tf_top1 = model.predict(images, verbose=0).argmax(1)
    for image, expected in zip(images, tf_top1):
        kept = net.run(image, keep=True)
        # op by op from the GPU's own inputs: a sum within a float32 ulp of a half level may
        # round the other way in the shader's order (measured: 3 of 23,232 bytes of one layer
        # of 41, 1 level); over all the layers' bytes, >= 99.99 % equal
        diffs = [np.abs(kept[name].astype(int) - predicted).ravel()
                 for name, predicted in emulate.stepwise(net.graph, kept).items()]
        diff = np.concatenate(diffs)
        assert diff.max() <= 1 and np.mean(diff == 0) >= 0.9999
        assert net.run(image).argmax() == expected


@needs_dogs
def test_the_dog_classifier_through_es31_and_onnx_is_tf(dogs):
    """The ONNX export writes the sigmoid-like activation and the pack shuffles as PyTorch
    would (Mul / Clip / Add, Gather); ONNX Runtime and the ES 3.1 kernels compute what TF
    does."""
    from skimage import data

    from workbench import es31
    from workbench.ir.to_onnx import to_onnx
    from workbench.nets.onnx_model import OnnxModel

    model, net = dogs
    image = bm.sample(data.chelsea(), model.beatmup_input).astype(np.float32) / 255
    tf_probs = model.predict(image[None], verbose=0)[0]
    onnx_probs = OnnxModel(to_onnx(net.graph))(image[None])[0]
    np.testing.assert_allclose(onnx_probs, tf_probs, atol=1e-5)
    np.testing.assert_allclose(es31.compile(model).run(image), tf_probs, atol=1e-5)
