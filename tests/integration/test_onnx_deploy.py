"""ONNX nets in PyTorch's export patterns deploy as Keras nets do: on the GPU (llvmpipe) the
bytes equal the emulator's and the output matches ONNX Runtime's (>= 45 dB, or the same top-1);
ES 3.1 to float rounding; the page, with PyTorch's explicit padding; the commands take .onnx
files, refuse an unsupported node in one line (exit 2), and name a layer whose values leave
the [0, 1] the 8-bit storage keeps (issue 31)."""
import os

import numpy as np
import onnx
import pytest

from tests.ir import onnx_graphs
from tests.ir.onnx_graphs import NEWEST
from workbench import es2, es31, ir, web
from workbench.__main__ import main
from workbench.es2 import bundle, calibrate, emulate, glslang, mediump
from workbench.ir.to_onnx import to_onnx
from workbench.nets.models import load_model, reference_sr
from workbench.nets.onnx_model import OnnxModel

pytestmark = pytest.mark.gl

RNG = np.random.default_rng(5)
IMAGES = [np.round(RNG.random((16, 16, 3)) * 255).astype(np.float32) / 255 for _ in range(40)]


@pytest.fixture(scope="module")
def nets():
    return {name: OnnxModel(build(NEWEST), name) for name, build in
            [("sr_net", onnx_graphs.sr_net), ("unet", onnx_graphs.unet),
             ("classifier", onnx_graphs.classifier)]}


@pytest.mark.parametrize("name", ["sr_net", "unet", "classifier"])
def test_gpu_bytes_equal_the_emulator_and_match_onnxruntime(nets, name):
    """Every byte of every tensor; where a layer ends in Sigmoid, whose exp the GPU rounds
    its own way, each op from the GPU's own inputs (>= 99.9 % of its bytes)."""
    model = nets[name]
    net = es2.compile(model)
    transcendental = any(getattr(op, "activation", "") == "sigmoid" for op in net.graph.ops)
    for image in IMAGES[:3]:
        kept = net.run(image, keep=True)
        if transcendental:
            for tensor, predicted in emulate.stepwise(net.graph, kept).items():
                assert np.mean(kept[tensor] == predicted) >= 0.999, tensor
            continue
        for tensor, stored in net.emulate(image, keep=True).items():
            np.testing.assert_array_equal(kept[tensor], stored, err_msg=tensor)
    if name == "classifier":
        reference = model.predict(np.stack(IMAGES)).argmax(1)
        assert np.mean([net.run(x).argmax() for x in IMAGES] == reference) >= 0.995
    else:
        worst = min(mediump.psnr(bundle.tf_output(model, net.graph, x), net.run(x))
                    for x in IMAGES[:3])
        assert worst >= 45, f"GPU vs ONNX Runtime {worst:.1f} dB"
    if not os.environ.get("WORKBENCH_SKIP_GLSLANG"):
        glslang.validate_many({p.name: p.source for p in net.passes})


def test_es31_matches_onnxruntime(nets):
    model = nets["unet"]
    net = es31.compile(model)
    reference = model.predict(np.stack(IMAGES[:3]))
    np.testing.assert_allclose(np.stack([net.run(x) for x in IMAGES[:3]]), reference,
                               atol=1e-4)


def test_explicit_padding_on_the_page(nets, tmp_path):
    """The unet's stride-2 conv and pooling take PyTorch's symmetric padding, which the page
    reads as constant uniforms."""
    from tests.conftest import skip_module_without_chromium
    skip_module_without_chromium()
    net = es2.compile(nets["unet"])
    web.export(net, tmp_path)
    with web.session(tmp_path) as page:
        result = page.run(IMAGES[0])
    expected = net.emulate(IMAGES[0], keep=True)[net.graph.output][..., :3]
    got = np.asarray(result["output"])[..., :3]
    assert np.mean(got == expected) >= 0.999


@pytest.fixture(scope="module")
def sr_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "sr_x2.onnx"
    onnx.save(to_onnx(ir.from_keras(load_model(reference_sr())), NEWEST), path)
    return path


def test_commands_take_an_onnx_model(sr_onnx, tmp_path, capsys):
    from PIL import Image
    Image.fromarray((IMAGES[0] * 255).astype(np.uint8)).save(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
                 "--model", str(sr_onnx)]) == 0
    assert Image.open(tmp_path / "out.png").size == (32, 32)
    assert main(["export-web", "--model", str(sr_onnx), "--out", str(tmp_path / "page"),
                 "--check"]) == 0
    assert (tmp_path / "page" / "check.json").is_file()
    capsys.readouterr()


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_an_unsupported_node_is_one_line_and_exit_2(tmp_path, capsys):
    b = onnx_graphs.Builder(17)
    out = b.node("Elu", [b.conv("input", 3, 4, 3)], layer="act1", alpha=0.1)
    onnx.save(b.model(3, None, out, "elu"), tmp_path / "elu.onnx")
    assert main(["export-web", "--model", str(tmp_path / "elu.onnx"), "--out",
                 str(tmp_path / "page")]) == 2
    err = _one_line(capsys)
    assert "node '/act1/Elu_1' (Elu): not taken by the ONNX front end; taken:" in err
    assert not (tmp_path / "page").exists()


def test_a_relu_net_past_1_is_calibrated_not_clipped(tmp_path, capsys):
    """A ReLU net (PyTorch's usual) whose values reach far above 1: each ReLU's output is
    stored with a scale calibrated on the sample images (es2.calibrate), so nothing is
    clipped: the stored values of the first layer, times its scale, within 8-bit rounding of
    ONNX Runtime's, top-1 = ONNX Runtime's; the bundle command deploys it (exit 0)."""
    model = OnnxModel(onnx_graphs.classifier(17, act="relu", seed=2, gain=4.0))
    relu = next(n.output[0] for n in model.proto.graph.node if n.op_type == "Relu")
    values = model.tensors(np.stack(IMAGES[:4]), [relu])[relu]
    assert values.max() > 2  # far past what an 8-bit texture keeps as it is
    net = es2.compile(model, calibration=IMAGES[:4])
    op = net.graph.ops[0]
    # the calibration's span, per channel (offset 0), widened by its headroom
    scale = values.max(axis=(0, 1, 2)) * (1 + calibrate.HEADROOM)
    stored = np.stack([net.emulate(x, keep=True)[op.name][..., :8] for x in IMAGES[:4]])
    np.testing.assert_allclose(stored / 255.0 * scale, values, atol=0.51 / 255 * scale.max())
    probabilities = np.stack([net.run(x) for x in IMAGES[:4]])
    np.testing.assert_array_equal(probabilities.argmax(1), model.predict(IMAGES[:4]).argmax(1))
    onnx.save(model.proto, tmp_path / "relu.onnx")
    assert main(["bundle", "--model", str(tmp_path / "relu.onnx"), "--out",
                 str(tmp_path / "b")]) == 0


def test_a_torch_net_exported_by_torch(tmp_path):
    """Where torch is installed: torch.onnx.export's own graph of a torch.nn SR net (conv,
    Hardtanh, grouped conv, PixelShuffle) deploys: GPU bytes = emulator, >= 45 dB against
    ONNX Runtime."""
    pytest.importorskip("torch")
    from workbench.studies import onnx_deploy
    assert onnx_deploy.torch_sr(tmp_path / "torch_sr.onnx") is None
    net, model = es2.load_net(tmp_path / "torch_sr.onnx")
    assert [type(op).__name__ for op in ir.from_model(model).ops] == ["Conv"] * 3 + \
        ["DepthToSpace"]
    image = IMAGES[0]
    np.testing.assert_array_equal(net.run(image, keep=True)[net.graph.output],
                                  net.emulate(image, keep=True)[net.graph.output])
    assert mediump.psnr(bundle.tf_output(model, net.graph, image), net.run(image)) >= 45
