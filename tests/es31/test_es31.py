"""The OpenGL ES 3.1 compute back end (workbench.es31) against TensorFlow, and its cost.

Tolerances, and why:
* SR net, RGBA32F: nothing is rounded to 8 bits, so the GPU is TF up to float32 rounding
  (different summation order): the issue's 1e-4 max abs error; measured ~1e-6.
* Classifier logits, RGBA32F: float32 all the way; logits reach |x| ~ 1-5 after ~10 convs of
  up to 288 multiply-adds each, float32 rounding (~6e-8 relative per operation) accumulates to
  ~1e-6; 1e-4 leaves room for a different summation order on another GPU.  RGBA16F storage
  rounds every stored value to 11 significant bits (relative 2^-11 ~ 5e-4 per layer), hence
  0.05 on the logits there.
* Image loads: the analytic count of net.cost equals what an atomic counter in every load
  counts on the GPU, exactly.
"""
import hashlib
import json
import shutil
import subprocess

import keras
import numpy as np
import pytest

from workbench import es2, es31, ir
from workbench.data import images
from workbench.es2 import plan
from workbench.ir import cost
from workbench.nets import classify
from workbench.nets.layers import Act, GroupConv2D
from workbench.nets.models import dogs_classifier, sr_x2


def _image(h, w, c, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c)).astype(np.float32) / 255


def _sr_reference(model, rgb):
    """TF in float: the net on full-range luma, chroma bilinear, back to RGB, clipped to
    [0, 1], not rounded."""
    ycc = images.rgb_to_ycbcr(rgb, range="full")
    luma = np.asarray(model(ycc[None, :, :, :1], training=False))[0]
    chroma = images.upscale_bilinear(ycc[:, :, 1:], 2)
    return np.clip(images.ycbcr_to_rgb(np.concatenate([luma, chroma], -1), range="full"), 0, 1)


def _loads_by_op(net):
    out = {}
    for name, n in net.loads.items():
        op = name.split(".")[0]
        out[op] = out.get(op, 0) + n
    return out


@pytest.fixture(scope="module")
def sr_model():
    keras.utils.set_random_seed(3)
    return sr_x2()


def test_sr_net_matches_tf_in_float_and_counts_its_loads(sr_model):
    image = _image(21, 17, 3, seed=4)  # not a multiple of the 8x8 work groups
    net = es31.compile(sr_model, count_loads=True)
    out = net.run(image)
    assert out.shape == (42, 34, 3)
    assert np.abs(out - _sr_reference(sr_model, image)).max() <= 1e-4
    costs = net.cost(image.shape[:2])
    assert {k: c.texel_fetches for k, c in costs.items()} == _loads_by_op(net)
    # no op reads more than its ES 2.0 shaders (L5, one output pack of a 1x1 conv: as many)
    shaders = plan.cost(_es2_graph(sr_model), image.shape[:2])
    for name, c in costs.items():
        assert c.texel_fetches <= shaders[name].texel_fetches, name
        assert c.multiply_adds == shaders[name].multiply_adds, name


def _es2_graph(model):
    """The model's graph as es2.compile plans it for ES 2.0 (each conv an es2 ConvForm)."""
    return es2.net.prepared(ir.from_keras(model), es2.limits.ES2)


def test_a_graph_whose_convs_carry_an_es2_form_compiles_as_convs(sr_model):
    """An es2 net's graph after tune (ConvForm: a Conv with the ES 2.0 programs' summation
    order) compiles to the same kernels: the ES 3.1 rules are found along the type's MRO,
    as the es2 records are."""
    from workbench.es2 import drivers

    graph = ir.from_keras(sr_model)
    formed = drivers.ordered(_es2_graph(sr_model), {
        op.name: {"order": "columns"} for op in graph.ops if op.name.startswith("L")})
    assert type(formed.op("L2")).__name__ == "ConvForm"
    assert ([k.source for k in es31.from_graph(formed).kernels]
            == [k.source for k in es31.from_graph(graph).kernels])


@pytest.mark.parametrize("anchor,law", [("nearest", "linear"), ("bilinear", "linear"),
                                        ("nearest", "sqrt")])
def test_sr_net_with_an_anchor_matches_tf_in_float(anchor, law):
    # (float storage: an 8-bit storage law of the sub-pixels changes nothing here)
    from workbench.nets.sr_recipes import sr_x2_recipe

    keras.utils.set_random_seed(4)
    model = sr_x2_recipe(init="identity", anchor=anchor, anchor_scale=0.75, anchor_storage=law)
    kernel, bias = model.get_layer("L5").get_weights()
    model.get_layer("L5").set_weights([np.random.default_rng(1).normal(0, 0.2, kernel.shape),
                                       bias])
    image = _image(21, 17, 3, seed=5)
    out = es31.compile(model, es31.Target(storage="rgba32f")).run(image)
    assert np.abs(out - _sr_reference(model, image)).max() <= 1e-4


def test_sr_cost_at_256_is_less_than_half_of_es2(sr_model):
    net = es31.compile(sr_model)
    loads = cost.total(net.cost((256, 256)).values()).texel_fetches
    fetches = cost.total(plan.cost(_es2_graph(sr_model), (256, 256)).values()).texel_fetches
    assert loads <= 0.5 * fetches
    assert len(net.kernels) == 6  # one program per op instead of 32


def test_rgba16f_storage(sr_model):
    image = _image(16, 16, 3, seed=5)
    net = es31.compile(sr_model, es31.Target(storage="rgba16f"))
    assert "rgba16f" in net.kernels[1].source
    err = np.abs(net.run(image) - _sr_reference(sr_model, image)).max()
    assert 1e-5 < err <= 4e-3   # half-float storage: rounded, but to ~11 bits


@pytest.mark.parametrize("kernel, stride, padding, groups, residual", [
    (3, 1, "same", 1, False), (3, 2, "valid", 2, False), (5, 2, "same", 1, False),
    (1, 1, "same", 2, True), (3, 1, "same", 4, True), (3, 2, "same", 1, False)])
@pytest.mark.parametrize("tile", [True, False])
def test_conv_against_tf(kernel, stride, padding, groups, residual, tile):
    keras.utils.set_random_seed(kernel * 10 + stride + groups)
    x = inputs = keras.Input((None, None, 16))
    y = GroupConv2D(16, kernel, groups=groups, strides=stride, padding=padding)(x)
    if residual:
        y = keras.layers.Add()([y, x])
    model = keras.Model(inputs, Act("sigmoid")(y))
    image = _image(19, 13, 16, seed=6)
    net = es31.compile(model, es31.Target(max_outputs=2), tile=tile, count_loads=True)
    out = net.run(image)
    ref = model(image[None]).numpy()[0]
    assert out.shape == ref.shape and np.abs(out - ref).max() <= 1e-5
    assert net.cost(image.shape[:2])[net.graph.ops[0].name].texel_fetches == net.loads[net.kernels[0].name]


@pytest.mark.parametrize("kind", ["max", "average"])
@pytest.mark.parametrize("size, stride, padding", [(2, 2, "valid"), (3, 1, "same"),
                                                   (3, 2, "same")])
def test_pooling_against_tf(kind, size, stride, padding):
    """Float storage: equal to TF up to float32 rounding; the loads counted on the GPU equal
    the cost's (padded taps are not loaded)."""
    layer = (keras.layers.MaxPooling2D if kind == "max" else keras.layers.AveragePooling2D)(
        size, stride, padding=padding)
    inputs = keras.Input((None, None, 6))
    model = keras.Model(inputs, layer(inputs))
    net = es31.compile(model, count_loads=True)
    image = _image(13, 10, 6, seed=size + stride)
    np.testing.assert_allclose(net.run(image)[..., :6], model(image[None]).numpy()[0], atol=1e-6)
    op = net.graph.ops[0].name
    assert net.cost(image.shape[:2])[op].texel_fetches == net.loads[op]


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_upsampling_against_tf(interpolation):
    inputs = keras.Input((None, None, 6))
    model = keras.Model(inputs, keras.layers.UpSampling2D(2, interpolation=interpolation)(inputs))
    net = es31.compile(model, count_loads=True)
    image = _image(9, 7, 6, seed=7)
    np.testing.assert_allclose(net.run(image)[..., :6], model(image[None]).numpy()[0], atol=1e-6)
    op = net.graph.ops[0].name
    assert net.cost(image.shape[:2])[op].texel_fetches == net.loads[op]


@pytest.mark.parametrize("tile", [True, False])
def test_depthwise_and_any_groups_against_tf(tile):
    """Groups that fill part of a pack: a job per output pack, its input packs padded to the
    most any pack reads (zero weights); equal to TF, loads counted exactly."""
    keras.utils.set_random_seed(4)
    x = inputs = keras.Input((None, None, 6))
    x = Act("sigmoid_like")(keras.layers.DepthwiseConv2D(3, strides=2, padding="same",
                                                         depth_multiplier=2)(x))
    model = keras.Model(inputs, Act("sigmoid_like")(keras.layers.Conv2D(9, 3, groups=3)(x)))
    net = es31.compile(model, tile=tile, count_loads=True)
    image = _image(11, 9, 6, seed=8)
    np.testing.assert_allclose(net.run(image)[..., :9], model(image[None]).numpy()[0], atol=1e-5)
    costs = net.cost(image.shape[:2])
    assert {k: c.texel_fetches for k, c in costs.items()} == _loads_by_op(net)


def test_add_concat_and_softmax_against_tf():
    """A two-input Add with its activation, a Concatenate of packs and part-packs, pooling,
    and a softmax after the logits (on the CPU): float storage, equal to TF to 1e-5."""
    keras.utils.set_random_seed(9)
    x = inputs = keras.Input((12, 12, 6))
    a = Act("sigmoid_like")(GroupConv2D(8, 3)(x))
    b = Act("sigmoid_like")(GroupConv2D(8, 1)(a))
    c = keras.layers.Concatenate()([Act("bounded_relu")(keras.layers.Add()([a, b])), a, x])
    y = keras.layers.GlobalAveragePooling2D()(keras.layers.MaxPooling2D(2)(c))
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(y))
    net = es31.compile(model, count_loads=True)
    image = _image(12, 12, 6, seed=5)
    np.testing.assert_allclose(net.run(image), model(image[None]).numpy()[0], atol=1e-5)
    costs, counted = net.cost(image.shape[:2]), _loads_by_op(net)
    for op in net.graph.ops[2:5]:  # the Add, the Concat, the pooling
        assert costs[op.name].texel_fetches == counted[op.name], op.name


@pytest.fixture(scope="module")
def tiny():
    keras.utils.set_random_seed(1)
    model = dogs_classifier("tiny")
    pictures = np.random.default_rng(2).random((8, 16, 16, 3)).astype(np.float32)
    classify.calibrate_batchnorm(model, pictures[:4])
    return model, pictures[4:]


def test_classifier_tiny_matches_tf(tiny):
    model, pictures = tiny
    net = es31.compile(model, count_loads=True)
    ref = model.predict(pictures, verbose=0)
    out = np.array([net.run(p) for p in pictures])
    assert out.shape == (4, 4)
    assert np.abs(out - ref).max() <= 1e-4
    assert np.array_equal(out.argmax(1), ref.argmax(1))
    assert {k: c.texel_fetches for k, c in net.cost((16, 16)).items()} == _loads_by_op(net)
    half = np.array([es31.compile(model, es31.Target(storage="rgba16f")).run(p) for p in pictures])
    assert np.abs(half - ref).max() <= 0.05


def test_dogs120_loads_at_most_half_of_es2_fetches():
    graph = ir.from_keras(dogs_classifier("dogs120"))
    loads = cost.total(es31.from_graph(graph).cost((385, 385)).values()).texel_fetches
    es2_graph = es2.net.prepared(graph, es2.limits.ES2, {"dense": "float"})  # as compile
    fetches = cost.total(plan.cost(es2_graph, (385, 385)).values()).texel_fetches
    assert loads <= 0.5 * fetches
    assert 3e6 < loads < 6e6 and abs(fetches / 27.9e6 - 1) < 0.01


def test_save_writes_shaders_and_manifest(tmp_path, sr_model):
    net = es31.compile(sr_model)
    net.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == "workbench-es31/2"
    assert [k["name"] for k in manifest["kernels"]] == ["L1", "L2", "L3", "L4", "L5", "subpixels"]
    assert all((tmp_path / k["shader"]).read_text().startswith("#version 310 es")
               for k in manifest["kernels"])
    assert manifest["images_for_input"]["images"]["L1"] == {
        "width": 256, "height": 256, "layers": 12, "format": "RGBA32F"}
    weights = np.load(tmp_path / "weights.npz")
    assert weights["L1/weights"].size == 12 * 4 + 12 * 25 * 16
    # every other file with its sha256, as an ES 2.0 folder's manifest (issue 42: integrity)
    written = {p.name for p in tmp_path.iterdir()} - {"manifest.json", ".workbench-folder"}
    assert set(manifest["files"]) == written
    assert all(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
               for name, digest in manifest["files"].items())


def test_shaders_pass_glslang(sr_model, tiny, tmp_path):
    if shutil.which("glslangValidator") is None:
        pytest.skip("glslangValidator not installed")
    nets = [es31.compile(sr_model), es31.compile(tiny[0], es31.Target(storage="rgba16f"))]
    for i, net in enumerate(nets):
        for k in net.kernels:
            path = tmp_path / f"{i}_{k.name}.comp"
            path.write_text(k.source)
            run = subprocess.run(["glslangValidator", str(path)], capture_output=True, text=True)
            assert run.returncode == 0, run.stdout


def test_bad_targets_are_refused():
    with pytest.raises(ValueError, match="storage must be one of"):
        es31.Target(storage="rgba8")
    with pytest.raises(ValueError, match="guarantees 128 invocations"):
        es31.Options(local_size=(16, 16))
    with pytest.raises(TypeError, match="^target: an es31.Target, not str$"):
        es31.compile(None, "rgba16f")


def test_a_saved_net_loads_and_runs_as_saved(tmp_path, tiny):
    """es31.load compiles the folder's graph and options again (rgba16f, tile=False kept):
    the same kernels, the same output."""
    model, pictures = tiny
    net = es31.compile(model, es31.Target(storage="rgba16f", max_outputs=2), tile=False)
    net.save(tmp_path / "net")
    back = es31.load(tmp_path / "net")
    assert back.options == net.options and back.target == net.target
    assert [k.source for k in back.kernels] == [k.source for k in net.kernels]
    assert np.array_equal(back.run(pictures[0]), net.run(pictures[0]))


@pytest.mark.parametrize("edit, refused", [
    ("shader", r"stem\.comp: not the file .* lists \(sha256 differs\)"),
    ("manifest", r"manifest\.json: not what the folder's graph and options compile to"),
    ("format", r"not a saved ES 3\.1 net of this workbench \(format 'workbench-es31/1'"),
])
def test_an_edited_folder_is_refused_in_one_line(tmp_path, tiny, edit, refused):
    es31.compile(tiny[0]).save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    if edit == "shader":
        (tmp_path / "stem.comp").write_text((tmp_path / "stem.comp").read_text() + "\n")
    elif edit == "manifest":
        manifest["kernels"][0]["jobs"] += 1
    else:
        manifest["format"] = "workbench-es31/1"
    if edit != "shader":
        (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=refused) as error:
        es31.load(tmp_path)
    assert "\n" not in str(error.value)
