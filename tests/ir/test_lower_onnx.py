"""The ONNX front end: graphs in PyTorch's export patterns (each supported node, opsets 11,
13, 17 and the newest) lower to the IR and compute what ONNX Runtime computes (the emulator,
which the GPU matches byte for byte: tests/integration/test_onnx_deploy.py); Keras nets
written as ONNX come back as the same shaders; what is not supported is named."""
import keras
import numpy as np
import pytest

from tests.ir import onnx_graphs
from tests.ir.onnx_graphs import OPSETS
from workbench import es2, ir
from workbench.es2 import bundle, mediump
from workbench.ir.lower import LoweringError
from workbench.ir.to_onnx import to_onnx
from workbench.nets.models import load_model, plain_classifier, reference_sr
from workbench.nets.onnx_model import OnnxModel
from workbench.nets.sr_recipes import sr_x2_recipe

RNG = np.random.default_rng(7)
IMAGES = [np.round(RNG.random((16, 16, 3)) * 255).astype(np.float32) / 255 for _ in range(3)]


def emulator_vs_onnxruntime(model, images=IMAGES):
    """PSNR (dB) of the emulator's output against ONNX Runtime's, worst image."""
    net = es2.compile(model)
    return min(mediump.psnr(bundle.tf_output(model, net.graph, x), net.emulate(x))
               for x in images)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("shuffle", ["node", "reshape"])
def test_sr_net_matches_onnxruntime(opset, shuffle):
    model = OnnxModel(onnx_graphs.sr_net(opset, shuffle, size=(16, 16) if shuffle != "node"
                                         else None))
    graph = ir.from_onnx(model)
    assert [type(op).__name__ for op in graph.ops] == ["Conv"] * 4 + ["DepthToSpace"]
    assert graph.ops[0].luma_input and graph.ops[1].groups == 16
    assert graph.ops[2].residual == graph.ops[0].name and graph.rgb_output
    assert emulator_vs_onnxruntime(model) >= 45


@pytest.mark.parametrize("opset", OPSETS)
def test_unet_matches_onnxruntime(opset):
    model = OnnxModel(onnx_graphs.unet(opset))
    graph = ir.from_onnx(model)
    kinds = [type(op).__name__ for op in graph.ops]
    assert kinds == ["Conv", "Pool", "Upsample", "Concat", "Conv", "Pool", "Upsample", "Add",
                     "Conv"]
    assert graph.ops[0].padding == (1, 1, 1, 1) and graph.ops[1].padding == (1, 1, 1, 1)
    assert emulator_vs_onnxruntime(model) >= 45


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("variant", [{}, {"head": "matmul", "flatten": "view"},
                                     {"pooling": "mean", "head": "matmul"}])
def test_classifier_top1_matches_onnxruntime(opset, variant):
    model = OnnxModel(onnx_graphs.classifier(opset, **variant))
    net = es2.compile(model)
    dense = net.graph.ops[-1]
    assert isinstance(dense, ir.Dense) and dense.pool and dense.softmax
    assert net.graph.ops[2].padding == "same"  # 3x3 stride 1 padding 1: TensorFlow's SAME
    images = [np.round(RNG.random((16, 16, 3)) * 255).astype(np.float32) / 255
              for _ in range(40)]
    reference = model.predict(np.stack(images)).argmax(1)
    ours = np.array([net.emulate(x).argmax() for x in images])
    assert np.mean(ours == reference) >= 0.995


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("pixel_shuffle", ["crd", "dcr", "reshape"])
def test_keras_net_written_as_onnx_gives_the_same_shaders(opset, pixel_shuffle):
    keras_model = load_model(reference_sr())
    size = (20, 24) if pixel_shuffle == "reshape" else None
    model = OnnxModel(to_onnx(ir.from_keras(keras_model), opset, pixel_shuffle, size))
    x = IMAGES[0][:20, :16] if size is None else np.resize(IMAGES[0], (20, 24, 3))
    luma = bundle.tf_output(keras_model, ir.from_keras(keras_model), x)
    np.testing.assert_allclose(bundle.tf_output(model, ir.from_onnx(model), x), luma,
                               atol=1e-5)
    ours, theirs = es2.compile(keras_model), es2.compile(model)
    assert [p.source for p in ours.passes] == [p.source for p in theirs.passes]


@pytest.mark.parametrize("anchor,law", [("nearest", "linear"), ("bilinear", "linear"),
                                        ("nearest", "sqrt")])
@pytest.mark.parametrize("pixel_shuffle", ["crd", "dcr", "reshape"])
def test_anchor_residual_written_as_onnx_gives_the_same_shaders(anchor, law, pixel_shuffle):
    # written as PyTorch writes clamp(F.interpolate(x) + s * (pixel_shuffle(q) - 0.5), 0, 1);
    # a storage law other than linear travels as the model's metadata, and the conv before
    # the depth-to-space (its pattern's, CRD or DCR) stores its sub-pixels by it
    keras.utils.set_random_seed(2)
    keras_model = sr_x2_recipe(init="identity", anchor=anchor, anchor_scale=0.75,
                               anchor_storage=law)
    kernel, bias = keras_model.get_layer("L5").get_weights()
    keras_model.get_layer("L5").set_weights([RNG.normal(0, 0.2, kernel.shape), bias])
    size = (20, 24) if pixel_shuffle == "reshape" else None
    model = OnnxModel(to_onnx(ir.from_keras(keras_model), 17, pixel_shuffle, size))
    assert {"Resize", "Sub", "Mul", "Clip"} <= {n.op_type for n in model.proto.graph.node}
    x = np.resize(IMAGES[0], (20, 24, 3))
    luma = bundle.tf_output(keras_model, ir.from_keras(keras_model), x)
    np.testing.assert_allclose(bundle.tf_output(model, ir.from_onnx(model), x), luma, atol=1e-5)
    demux = ir.from_onnx(model).ops[-1]
    assert (demux.anchor, demux.anchor_scale, demux.anchor_storage) == (anchor, 0.75, law)
    assert {p.key: p.value for p in model.proto.metadata_props}.get(
        "workbench.anchor_storage", "linear") == law
    ours, theirs = es2.compile(keras_model), es2.compile(model)
    assert [p.source for p in ours.passes] == [p.source for p in theirs.passes]


def test_a_sub_outside_an_anchor_residual_is_refused():
    from onnx import numpy_helper

    keras.utils.set_random_seed(2)
    proto = to_onnx(ir.from_keras(sr_x2_recipe(init="identity", anchor="nearest")))
    sub = next(n for n in proto.graph.node if n.op_type == "Sub")
    half = next(t for t in proto.graph.initializer if t.name == sub.input[1])
    half.CopyFrom(numpy_helper.from_array(np.float32(0.25), half.name))
    with pytest.raises(LoweringError, match=r"\(Sub\): Sub is supported only in a luma net's "
                                            "anchor residual"):
        ir.from_onnx(proto)


def test_a_companded_anchor_needs_its_sub_pixels_from_the_conv_before_the_demux():
    from onnx import helper

    keras.utils.set_random_seed(2)
    keras_model = sr_x2_recipe(init="identity", anchor="nearest", anchor_storage="sqrt")
    proto = to_onnx(ir.from_keras(keras_model), 17, "dcr")
    d2s = next(n for n in proto.graph.node if n.op_type == "DepthToSpace")
    twice = helper.make_node("Add", [d2s.input[0], d2s.input[0]], ["twice"], name="twice")
    proto.graph.node.insert(list(proto.graph.node).index(d2s), twice)
    d2s.input[0] = "twice"
    with pytest.raises(LoweringError, match=r"\(Clip\): storage 'sqrt' needs its sub-pixels from "
                                            "a convolution just before the depth-to-space"):
        ir.from_onnx(proto)


def test_keras_classifier_written_as_onnx_gives_the_same_bytes():
    import keras
    keras.utils.set_random_seed(3)
    keras_model = plain_classifier(16, 5, widths=(8, 12))
    model = OnnxModel(to_onnx(ir.from_keras(keras_model), 17))
    ours, theirs = es2.compile(keras_model), es2.compile(model)
    assert [p.source for p in ours.passes] == [p.source for p in theirs.passes]
    np.testing.assert_allclose(model.predict(np.stack(IMAGES)),
                               keras_model.predict(np.stack(IMAGES), verbose=0), atol=1e-4)


def refusal(model, **kwargs) -> str:
    with pytest.raises(ir.LoweringError) as err:
        ir.from_onnx(model, **kwargs)
    return str(err.value)


def test_an_unsupported_node_is_named_with_the_supported_list():
    b = onnx_graphs.Builder(17)
    out = b.node("Elu", [b.conv("input", 3, 4, 3)], layer="act1", alpha=0.1)
    message = refusal(b.model(3, None, out, "elu"))
    assert "/act1/Elu" in message and "(Elu)" in message
    assert "not taken by the ONNX front end; taken:" in message  # the op tables' one error
    assert "Conv" in message and "Resize" in message


def test_refusals_name_node_and_reason():
    old = onnx_graphs.classifier(11)
    old.opset_import[0].version = 6  # 7 to 10: converted (tests/ir/test_onnx_exports.py)
    assert "opset 6; supported: 7 to" in refusal(old)
    b = onnx_graphs.Builder(17)
    out = b.node("AveragePool", ["input"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                 count_include_pad=1)
    assert "count_include_pad=1" in refusal(b.model(3, None, out, "avg"))
    dynamic = onnx_graphs.classifier(17)
    dim = dynamic.graph.input[0].type.tensor_type.shape.dim
    dim[2].dim_param, dim[3].dim_param = "height", "width"
    assert "fixed input size" in refusal(dynamic)
    assert ir.from_onnx(dynamic, input_size=(16, 16)).input_size == (16, 16)
    b = onnx_graphs.Builder(17)  # the conv's output read raw and activated: one IR tensor
    y = b.conv("input", 3, 4, 3)
    out = b.node("Add", [b.node("Relu", [y], layer="act"), y])
    message = refusal(b.model(3, None, out, "twice"))
    assert "/act/Relu" in message and "also used elsewhere" in message



def test_a_model_with_a_fixed_batch_of_one_runs_image_by_image():
    # torch.onnx.export writes batch 1: ONNX Runtime refuses a batch of 3 in one run
    proto = onnx_graphs.sr_net(17, "node")
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    model = OnnxModel(proto)
    x = np.stack([(img @ ir.LUMA)[..., None] for img in IMAGES]).astype(np.float32)
    one_by_one = np.concatenate([model(x[i:i + 1]) for i in range(len(x))])
    np.testing.assert_array_equal(model(x), one_by_one)
    name = proto.graph.node[0].output[0]
    np.testing.assert_array_equal(model.tensors(x, [name])[name][2],
                                  model.tensors(x[2:], [name])[name][0])


def test_an_unknown_anchor_storage_in_the_metadata_is_named():
    keras_model = sr_x2_recipe(init="identity", anchor="nearest", anchor_scale=0.75)
    proto = to_onnx(ir.from_keras(keras_model), 17)
    import onnx

    onnx.helper.set_model_props(proto, {"workbench.anchor_storage": "log"})
    with pytest.raises(ValueError, match="metadata workbench.anchor_storage must be one of "
                                         "linear, sqrt, not 'log'"):
        ir.from_onnx(proto)


def test_the_sigmoid_like_activation_and_a_pack_shuffle_are_written_as_pytorch_would():
    """The tiny preset of the dogs units (shuffles between units, the sigmoid-like activation)
    through to_onnx: ONNX Runtime = TensorFlow; the activation as Mul / Clip / Add, the
    shuffle as one Gather per shuffled conv."""
    from workbench.nets.models import dogs_classifier

    model = dogs_classifier("tiny")
    proto = to_onnx(ir.from_keras(model))
    kinds = [n.op_type for n in proto.graph.node]
    shuffled = sum(isinstance(op, ir.Conv) and op.input_order is not None
                   for op in ir.from_keras(model).ops)
    assert shuffled and kinds.count("Gather") == shuffled and "Sigmoid" not in kinds
    x = np.random.default_rng(0).random((2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(OnnxModel(proto)(x), model.predict(x, verbose=0), atol=1e-5)


@pytest.mark.parametrize("size", [(0, 0), (-1, 5)])
def test_an_input_size_that_is_not_a_picture_is_refused(size):
    proto = to_onnx(ir.from_keras(load_model(reference_sr())))  # dynamic height and width
    with pytest.raises(ValueError, match=r"input_size: .* is not a picture"):
        ir.from_onnx(proto, input_size=size)


def test_an_onnx_file_is_one_whatever_the_case_of_its_suffix(tmp_path):
    proto = to_onnx(ir.from_keras(plain_classifier()))
    path = tmp_path / "OK.ONNX"
    path.write_bytes(proto.SerializeToString())
    assert isinstance(load_model(path), OnnxModel)


def test_the_front_ends_name_what_they_take(tmp_path):
    """`es2.compile("x.keras")` and `ir.from_onnx(None)` ended in AttributeError deep inside:
    a path is now read as load_model reads it, anything else named in one line."""
    path = tmp_path / "net.keras"
    plain_classifier().save(path)
    assert len(es2.compile(str(path)).passes) == len(es2.compile(plain_classifier()).passes)
    with pytest.raises(TypeError, match="model: an ONNX ModelProto, an OnnxModel or an .onnx "
                                        "file's path, not NoneType"):
        ir.from_onnx(None)
    with pytest.raises(TypeError, match="model: a Keras model, an ONNX model or a model file's "
                                        "path, not list"):
        es2.compile([[1, 2]])
