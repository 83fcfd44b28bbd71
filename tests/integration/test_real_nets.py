"""Two real nets end to end (workbench.nets.zoo, trained briefly on CIFAR-10: models/
cifar10_mobilenet_v2 and cifar10_resnet, see their cards): a MobileNetV2-style net (inverted
residuals, linear bottlenecks and residual adds, ReLU6, width 0.35) and a ResNet-style net
(basic blocks of 3x3 convs over 32 and 64 channels, ReLU), each as Keras and as ONNX in
PyTorch's export patterns, deployed through ES 2.0 with no hand edit: wide convs split over
programs, ReLU6 folded, ReLUs and linear tensors stored with a scale calibrated on 20
training images (at 16 bits, the default, for the MobileNetV2-style net).  On llvmpipe: GPU
top-1 = TF's / ONNX Runtime's on >= 99 % of 500 test images, every tensor's bytes the
emulator's (within a step at 16 bits); the page in Chromium gives llvmpipe's top-1."""
import json

import numpy as np
import pytest

from workbench import es2, web
from workbench.es2 import emulate
from workbench.data import datasets
from workbench.files import project_root
from workbench.nets import zoo
from workbench.nets.models import load_model

pytestmark = pytest.mark.gl

NETS = ("mobilenet_v2", "resnet")
# GPU top-1 = reference on the 500 images: issue 43 asks >= 99 %
AGREEMENT = {"resnet": 0.99, "mobilenet_v2": 0.99}
# how their scaled tensors are stored (es2.compile's scaled_bits): the default 16 bits for the
# MobileNetV2-style net, whose 8-bit steps cost 1.4 points (98.6 %: docs/results.md); 8 for the
# ResNet-style net, 99.8 % at 8 bits (at 16 its programs take 141 s to translate on llvmpipe,
# not 63: beyond what the suite can spend on it)
SCALED_BITS = {"resnet": 8, "mobilenet_v2": 16}


def checkpoint(name, suffix):
    return project_root() / "models" / f"cifar10_{name}{suffix}"


@pytest.fixture(scope="module")
def cifar10():
    """(500 test images, their labels, 20 training images to calibrate on)."""
    try:
        images, labels = zoo.cifar10_test()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    root = datasets.classification_root("cifar10")
    calibration, _, _ = datasets.classification_arrays(root, "train", 32, limit=2)
    return images, labels, list(calibration)


@pytest.mark.parametrize("name", NETS)
def test_real_net_gpu_top1_equals_the_reference(name, cifar10):
    """Top-1 over the 500 on the GPU for the 8-bit net (0.06 s an image on llvmpipe), by the
    emulator for the 16-bit one (llvmpipe 0.45 s an image, the emulator 0.04), which predicts
    the GPU's bytes (each op from the GPU's own inputs within a storage step: checked on two
    images, as is the GPU's top-1); its card measured the GPU itself on all 500."""
    images, labels, calibration = cifar10
    model = load_model(checkpoint(name, ".keras"))
    net = es2.compile(model, calibration=calibration, scaled_bits=SCALED_BITS[name])
    card = json.loads(checkpoint(name, ".json").read_text())["test"]
    assert card.get("scaled_bits", 8) == SCALED_BITS[name]
    reference = model.predict(images, verbose=0)
    run = net.run if SCALED_BITS[name] == 8 else net.emulate
    outputs = np.stack([run(image) for image in images])
    agreement = np.mean(outputs.argmax(1) == reference.argmax(1))
    top1 = {"TF": np.mean(reference.argmax(1) == labels),
            "GPU": np.mean(outputs.argmax(1) == labels)}
    assert top1["TF"] == pytest.approx(card["keras"]["top1_reference"], abs=0.002)
    assert agreement >= card["keras"]["gpu_top1_equals_reference"] - 0.002
    assert top1["TF"] > 0.4  # trained: far above chance (10 %)
    assert agreement >= AGREEMENT[name], (agreement, top1)
    assert abs(top1["GPU"] - top1["TF"]) <= 0.015, top1
    for image, predicted in zip(images[:2], outputs[:2]):
        assert emulate.unpredicted(net.graph, net.run(image, keep=True)) == {}
        gpu = net.run(image)
        assert gpu.argmax() == predicted.argmax() and np.abs(gpu - predicted).max() < 0.01


@pytest.mark.parametrize("name", NETS)
def test_real_net_onnx_is_the_keras_net_on_the_gpu(name, cifar10):
    """The ONNX file (PyTorch's export patterns) deploys as the same net: ONNX Runtime's
    top-1 is Keras' on the 500 images, and the compiled net's every tensor the Keras net's
    (the emulator, whose bytes the GPU gives: above), so GPU top-1 = ONNX Runtime's wherever
    it is TF's (the card's numbers for the ONNX file, measured over the 500, agree)."""
    images, _, calibration = cifar10
    keras_model, onnx_model = (load_model(checkpoint(name, s)) for s in (".keras", ".onnx"))
    reference = keras_model.predict(images, verbose=0).argmax(1)
    assert np.mean(onnx_model.predict(images).argmax(1) == reference) >= 0.998
    nets = [es2.compile(m, calibration=calibration, scaled_bits=SCALED_BITS[name])
            for m in (keras_model, onnx_model)]
    for image in images[:3]:
        ours, theirs = (list(net.emulate(image, keep=True).values()) for net in nets)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
    card = json.loads(checkpoint(name, ".json").read_text())["test"]
    assert card["onnx"]["gpu_top1_equals_reference"] >= AGREEMENT[name]


def test_real_nets_need_what_issue_43_built():
    """The nets as the planner takes them: wide convs split, every tensor bounded."""
    mobilenet = es2.compile(load_model(checkpoint("mobilenet_v2", ".keras")))
    resnet = es2.compile(load_model(checkpoint("resnet", ".keras")))
    for net in (mobilenet, resnet):
        assert any(getattr(op, "split", 1) > 1 for op in net.graph.ops)
        assert all(op.activation == "bounded_relu" for op in net.graph.ops
                   if op.activation is not None)
    wide = [op for op in resnet.graph.ops
            if getattr(op, "kernel", np.zeros(0)).shape[:3] == (3, 3, 64)]
    assert wide and all(op.split >= 3 for op in wide)


def test_real_net_page_gives_llvmpipes_top1(cifar10, tmp_path):
    from tests.conftest import skip_module_without_chromium

    skip_module_without_chromium()
    images, _, calibration = cifar10
    net = es2.compile(load_model(checkpoint("resnet", ".keras")), calibration=calibration,
                      scaled_bits=SCALED_BITS["resnet"])
    web.export(net, tmp_path)
    with web.session(tmp_path) as page:
        probabilities = np.stack([page.run(image)["probabilities"] for image in images[:3]])
    gl = np.stack([net.run(image) for image in images[:3]])  # its softmax, on the CPU
    np.testing.assert_array_equal(probabilities.argmax(1), gl.argmax(1))
    assert np.abs(probabilities - gl).max() <= 0.01  # logits a few fixed-point steps apart
