"""A MobileNet-style classifier built from the ops the reference converters take (depthwise
3x3 + pointwise, max and average pooling, a two-input add, a concatenation, x2 upsampling, a
softmax after the logits) deploys through every back end: ES 2.0 (bytes = emulator, the same
top-1 as TF, glslang-clean under the ES 2.0 limits), ES 3.1 (TF to float32 rounding) and the
WebGL page (the emulator's top-1, logits within a few fixed-point steps of llvmpipe's)."""
import os

import keras
import numpy as np
import pytest

from workbench import es2, es31, ir, web
from workbench.es2 import glslang
from workbench.nets.layers import Act

pytestmark = pytest.mark.gl

SIZE, CLASSES, IMAGES = 24, 5, 40


def mobilenet_style():
    """Stem conv; a depthwise-separable block with a residual add; max pooling; a branch that
    pools by 2 (average) and upsamples back (bilinear), concatenated to the block's output;
    pointwise; global average pooling, the logits and a softmax."""
    keras.utils.set_random_seed(11)
    act = "sigmoid_like"
    x = inputs = keras.Input((SIZE, SIZE, 3))
    stem = Act(act)(keras.layers.Conv2D(8, 3, strides=2, padding="same", name="stem")(x))
    dw = Act(act)(keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(stem))
    pw = Act(act)(keras.layers.Conv2D(8, 1, name="pw")(dw))
    block = Act("bounded_relu")(keras.layers.Add(name="skip")([stem, pw]))
    pooled = keras.layers.MaxPooling2D(2, name="pool")(block)                     # 6x6
    branch = keras.layers.AveragePooling2D(2, name="avg")(pooled)                  # 3x3
    branch = keras.layers.UpSampling2D(2, interpolation="bilinear", name="up")(branch)
    merged = keras.layers.Concatenate(name="cat")([pooled, branch])                # 16 channels
    head = Act(act)(keras.layers.Conv2D(12, 1, name="head")(merged))
    logits = keras.layers.Dense(CLASSES, name="logits")(keras.layers.GlobalAveragePooling2D()(head))
    return keras.Model(inputs, keras.layers.Softmax(name="probabilities")(logits))


@pytest.fixture(scope="module")
def net_and_images():
    model = mobilenet_style()
    images = np.random.default_rng(4).integers(0, 256, (IMAGES, SIZE, SIZE, 3)) / np.float32(255)
    return model, es2.compile(model), images.astype(np.float32)


def test_every_op_of_the_set_is_in_it(net_and_images):
    model, net, _ = net_and_images
    kinds = [type(op).__name__ for op in ir.from_keras(model).ops]
    assert kinds == ["Conv", "Conv", "Conv", "Add", "Pool", "Pool", "Upsample", "Concat",
                     "Conv", "Dense"]
    assert net.graph.ops[1].groups == 8 and net.graph.ops[-1].softmax


def test_es2_bytes_equal_the_emulator_and_top1_equals_tf(net_and_images):
    model, net, images = net_and_images
    tf_top1 = model(images, training=False).numpy().argmax(1)
    for image in images[:8]:
        kept, emulated = net.run(image, keep=True), net.emulate(image, keep=True)
        for name, stored in emulated.items():  # every tensor (the GPU keeps partial sums too)
            np.testing.assert_array_equal(kept[name], stored, err_msg=name)
    gpu_top1 = np.array([net.run(image).argmax() for image in images])
    same = np.mean(gpu_top1 == tf_top1)
    assert same >= 0.995, f"GPU top-1 = TF top-1 on {same:.1%} of {IMAGES} images"
    if not os.environ.get("WORKBENCH_SKIP_GLSLANG"):
        glslang.validate_many({p.name: p.source for p in net.passes})


def test_es31_equals_tf(net_and_images):
    model, _, images = net_and_images
    net = es31.compile(model)
    np.testing.assert_allclose(np.stack([net.run(image) for image in images[:8]]),
                               model(images[:8], training=False).numpy(), atol=1e-5)


def test_on_the_page(net_and_images, tmp_path):
    from tests.conftest import skip_module_without_chromium
    skip_module_without_chromium()

    _, net, images = net_and_images
    web.export(net, tmp_path, labels=[f"class {i}" for i in range(CLASSES)])
    with web.session(tmp_path) as page:
        results = [page.run(image) for image in images[:8]]
    for result, image in zip(results, images):
        probabilities = net.emulate(image)
        assert np.argmax(result["probabilities"]) == probabilities.argmax()
        np.testing.assert_allclose(result["probabilities"], probabilities, atol=0.02)
