"""The zoo's two nets (a MobileNetV2-style and a ResNet-style net): their shapes and layer
kinds, and their ONNX in PyTorch's export patterns (tools/torch_style_onnx.py) equal to Keras
under ONNX Runtime."""
import keras
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tools.torch_style_onnx import to_onnx_torch_style
from workbench.nets import zoo
from workbench.nets.classify import calibrate_batchnorm

BUILDERS = {"mobilenet_v2": zoo.mobilenet_v2_style, "resnet": zoo.resnet_style}


def calibrated(builder, padding="torch", seed=0):
    """A net with random weights, its BatchNorm given random scales and offsets (so that
    folding them is exercised) and then statistics calibrated on random images."""
    model = builder(padding=padding, seed=seed)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape))
            layer.beta.assign(rng.uniform(-0.3, 0.3, layer.beta.shape))
    return calibrate_batchnorm(model, rng.random((32, 32, 32, 3), dtype=np.float32))


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def net(request):
    return request.param, calibrated(BUILDERS[request.param])


def kinds(model):
    return [type(layer).__name__ for layer in model.layers]


def run_onnx(proto, images):
    """ONNX Runtime on NHWC images, one at a time (the graph's batch is 1)."""
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"input": x[None].transpose(0, 3, 1, 2)})[0]
                           for x in images])


def test_mobilenet_v2_has_inverted_residuals_with_linear_bottlenecks():
    model = zoo.mobilenet_v2_style()
    assert model.input.shape == (None, 32, 32, 3) and model.output.shape == (None, 10)
    k = kinds(model)
    assert k.count("DepthwiseConv2D") == 7 and k.count("Add") == 2 and k[-1] == "Softmax"
    relus = [layer for layer in model.layers if isinstance(layer, keras.layers.ReLU)]
    assert relus and all(r.max_value == 6 for r in relus)
    for add in (layer for layer in model.layers if isinstance(layer, keras.layers.Add)):
        # linear: the projection's BN and the block input in, no activation after it
        sources = [t._keras_history.operation for t in add._inbound_nodes[0].input_tensors]
        assert isinstance(sources[0], keras.layers.BatchNormalization)
        assert sources[0].name.endswith("_project_bn")
        readers = [layer for layer in model.layers
                   if any(t._keras_history.operation is add
                          for t in (layer._inbound_nodes[0].input_tensors
                                    if layer._inbound_nodes else []))]
        assert not any(isinstance(r, (keras.layers.ReLU, keras.layers.Activation))
                       for r in readers)
    channels = [model.get_layer(f"b{i}_project").filters for i in range(1, 8)]
    assert channels == [8, 8, 8, 16, 16, 24, 32]
    assert model.get_layer("stem").filters == 16 and model.get_layer("b2_expand").filters == 48
    assert model.get_layer("b7_project").output.shape[1:3] == (4, 4)
    assert 25_000 < model.count_params() < 40_000 and zoo.multiply_adds(model) == 2_422_784


def test_resnet_has_basic_blocks_over_64_channels():
    model = zoo.resnet_style()
    assert model.input.shape == (None, 32, 32, 3) and model.output.shape == (None, 10)
    wide = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)
            and layer.kernel_size == (3, 3) and layer.input.shape[-1] == 64 == layer.filters]
    assert [layer.name for layer in wide] == ["s2b1_conv2"]
    assert model.get_layer("s2b1_down").kernel_size == (1, 1)
    assert model.get_layer("s2b1_down").strides == (2, 2)
    assert kinds(model).count("Add") == 2
    assert all(layer.max_value is None for layer in model.layers
               if isinstance(layer, keras.layers.ReLU))
    assert isinstance(model.get_layer("s1b1_relu"), keras.layers.ReLU)   # after the Add
    assert model.get_layer("s2b1_add").output.shape[1:] == (16, 16, 64)
    assert zoo.multiply_adds(model) == 34_439_808


def test_keras_padding_is_same_everywhere_and_torch_padding_pads_explicitly():
    torch_like, keras_like = zoo.resnet_style(), zoo.resnet_style(padding="keras")
    assert "ZeroPadding2D" in kinds(torch_like) and "ZeroPadding2D" not in kinds(keras_like)
    assert torch_like.get_layer("s2b1_conv1").padding == "valid"
    assert torch_like.count_params() == keras_like.count_params()
    with pytest.raises(ValueError, match="padding='tf'"):
        zoo.mobilenet_v2_style(padding="tf")


@pytest.mark.parametrize("padding", ["torch", "keras"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_onnx_runtime_equals_keras(name, padding):
    model = calibrated(BUILDERS[name], padding)
    images = np.random.default_rng(1).random((6, 32, 32, 3), dtype=np.float32)
    np.testing.assert_allclose(run_onnx(to_onnx_torch_style(model), images),
                               model(images, training=False).numpy(), rtol=0, atol=1e-4)
    # the logits too (the probabilities of random weights are close to uniform)
    logits = keras.Model(model.input, model.get_layer("logits").output)
    expected = logits(images, training=False).numpy()
    assert expected.std() > 0.3
    np.testing.assert_allclose(run_onnx(to_onnx_torch_style(logits), images), expected,
                               rtol=0, atol=1e-4)


def test_the_graph_is_in_torchs_patterns(net, tmp_path):
    name, model = net
    path = tmp_path / f"{name}.onnx"
    proto = to_onnx_torch_style(model, path)
    assert onnx.load(path) == proto
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == 17
    graph = proto.graph
    (given,), (out,) = graph.input, graph.output
    assert given.name == "input" and out.name == "output"
    assert [d.dim_value for d in given.type.tensor_type.shape.dim] == [1, 3, 32, 32]
    assert given.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    ops = [n.op_type for n in graph.node]
    assert "BatchNormalization" not in ops                          # folded into the convs
    assert ops[-4:] == ["GlobalAveragePool", "Flatten", "Gemm", "Softmax"]
    attrs = {n.name: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
             for n in graph.node}
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    gemm, softmax = graph.node[-2], graph.node[-1]
    features = model.get_layer("logits").kernel.shape[0]
    assert attrs[gemm.name]["transB"] == 1 and inits[gemm.input[1]].shape == (10, features)
    assert attrs[softmax.name]["axis"] == 1
    convs = [n for n in graph.node if n.op_type == "Conv"]
    assert all(len(c.input) == 3 for c in convs)                    # a bias each (folded BN)
    for conv in convs:                                              # OIHW, torch's symmetric pads
        a, w = attrs[conv.name], inits[conv.input[1]]
        assert w.ndim == 4 and list(w.shape[2:]) == a["kernel_shape"]
        assert a["pads"] == [a["kernel_shape"][0] // 2] * 4
    if name == "mobilenet_v2":
        depthwise = [c for c in convs if attrs[c.name]["group"] > 1]
        assert len(depthwise) == 7
        for c in depthwise:
            assert inits[c.input[1]].shape[:2] == (attrs[c.name]["group"], 1)   # group = C
        clips = [n for n in graph.node if n.op_type == "Clip"]
        assert len(clips) == 1 + 6 + 7 + 1 and "Relu" not in ops
        assert all(len(c.input) == 3 and inits[c.input[1]] == 0 and inits[c.input[2]] == 6
                   for c in clips)
        # the residual adds are linear: read by a conv or another block, never by a Clip
        adds = [n.output[0] for n in graph.node if n.op_type == "Add"]
        assert len(adds) == 2
        assert not any(n.op_type == "Clip" and n.input[0] in adds for n in graph.node)
    else:
        assert ops.count("Relu") == 5 and "Clip" not in ops and ops.count("Add") == 2
        # each Add is followed by a Relu; 3x3 convs over 64 channels
        for add in (n for n in graph.node if n.op_type == "Add"):
            assert any(n.op_type == "Relu" and n.input[0] == add.output[0] for n in graph.node)
        assert any(inits[c.input[1]].shape == (64, 64, 3, 3) for c in convs)
        assert all(attrs[c.name]["group"] == 1 for c in convs)


def test_batchnorm_elsewhere_is_a_node_and_other_layers_are_refused():
    x = inputs = keras.Input((8, 8, 3))
    y = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c")(x)
    y = keras.layers.BatchNormalization(name="bn")(y)                # after the activation
    out = keras.layers.Dense(2, name="d")(keras.layers.GlobalAveragePooling2D()(y))
    model = keras.Model(inputs, out)
    proto = to_onnx_torch_style(model)
    assert [n.op_type for n in proto.graph.node] == [
        "Conv", "Relu", "BatchNormalization", "GlobalAveragePool", "Flatten", "Gemm"]
    images = np.random.default_rng(0).random((2, 8, 8, 3), dtype=np.float32)
    np.testing.assert_allclose(run_onnx(proto, images), model(images).numpy(), atol=1e-5)

    pooled = keras.layers.MaxPooling2D(name="pooling")(inputs)
    with pytest.raises(ValueError, match=r"^layer 'pooling' \(MaxPooling2D\) is not taken") as e:
        to_onnx_torch_style(keras.Model(inputs, pooled))
    assert "\n" not in str(e.value)
    leaky = keras.layers.ReLU(negative_slope=0.1, name="leaky")(inputs)
    with pytest.raises(ValueError, match="layer 'leaky'.*negative_slope"):
        to_onnx_torch_style(keras.Model(inputs, leaky))
    padded = keras.layers.ReLU(name="after_pad")(keras.layers.ZeroPadding2D(1)(inputs))
    with pytest.raises(ValueError, match="layer 'after_pad'.*reads a ZeroPadding2D"):
        to_onnx_torch_style(keras.Model(inputs, padded))
    tanh = keras.layers.Conv2D(4, 3, activation="tanh", name="tanh_conv")(inputs)
    with pytest.raises(ValueError, match="layer 'tanh_conv': activation 'tanh'"):
        to_onnx_torch_style(keras.Model(inputs, tanh))


def test_without_cifar10_one_line_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    (tmp_path / "README.md").write_text("empty")
    for call in (lambda: zoo.cifar10_test(), lambda: zoo.train_briefly(None, steps=1)):
        with pytest.raises(FileNotFoundError, match="cls/cifar10.*fetch-data") as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.slow
def test_trained_briefly_it_is_above_chance_and_onnx_still_equals_keras():
    """40 steps on 100 training images a class (about 15 s on 2 cores): well above chance
    (10 %) on the 500 test images, and the trained net's ONNX equal to Keras on them."""
    try:
        images, _ = zoo.cifar10_test()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    model, result = zoo.train_briefly(zoo.resnet_style(), steps=40, limit=100)
    assert result["top1"] > 0.25, result
    np.testing.assert_allclose(run_onnx(to_onnx_torch_style(model), images[:50]),
                               model(images[:50], training=False).numpy(), rtol=0, atol=1e-4)
