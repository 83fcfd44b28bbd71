"""The reference checkpoints in models/: each loads and reproduces what its card states: an SR
net deploys within the budget of the reference net with the card's PSNR (Set5, Y601, crop 2,
bicubic_aa; within 0.05 dB); the classifier has the card's top-1 on the CIFAR-10 test images
(within 0.2 points: TF's CPU kernels are not bit-deterministic) and the GPU agrees with TF; the
ONNX classifier has its card's top-1 through ONNX Runtime and the GPU agrees with it."""
import json
from pathlib import Path

import pytest

from workbench import es2
from workbench.data import datasets
from workbench.es2 import plan
from workbench.ir import cost
from workbench.nets import superres
from workbench.nets.models import load_model, reference_cifar10, reference_sr, sr_x2
from workbench.studies import sr_ablation

MODELS = Path(__file__).resolve().parents[2] / "models"
CARDS = sorted(MODELS.glob("*.json"))
SR_CARDS = [c for c in CARDS if "psnr_y_studio_crop2_bicubic_aa" in json.loads(c.read_text())]
CLASSIFIER_CARDS = [c for c in CARDS if "top1_tf" in json.loads(c.read_text()).get("test", {})]
ONNX_CARDS = [c for c in CARDS if "top1_onnxruntime" in json.loads(c.read_text()).get("test", {})]
# the zoo's nets (tools/zoo_card.py; checked by tests/integration/test_real_nets.py)
ZOO_CARDS = [c for c in CARDS if "keras" in json.loads(c.read_text()).get("test", {})]


def _set5():
    sr_set = datasets.sr_images("Set5")
    if sr_set.name != "Set5":
        pytest.skip("Set5 is not in the data path (set WORKBENCH_DATA or run fetch-data)")
    return sr_set


def test_the_reference_checkpoints_are_there():
    assert reference_sr().with_suffix(".json") in SR_CARDS
    assert reference_cifar10().with_suffix(".json") in CLASSIFIER_CARDS
    assert set(SR_CARDS) | set(CLASSIFIER_CARDS) | set(ONNX_CARDS) | set(ZOO_CARDS) == set(CARDS)


@pytest.mark.parametrize("card_path", CLASSIFIER_CARDS, ids=[c.stem for c in CLASSIFIER_CARDS])
def test_classifier_checkpoint_matches_its_card(card_path):
    """TF's top-1 on the 10,000 test images is the card's; the GPU agrees with TF on every
    hundredth (the card: on 99.58 % of all)."""
    import numpy as np

    from workbench.studies import deploy

    card = json.loads(card_path.read_text())
    model = load_model(MODELS / card["model"])
    assert model.count_params() == card["parameters"]
    try:
        root = datasets.classification_root("cifar10")
    except (FileNotFoundError, ValueError) as err:
        pytest.skip(f"CIFAR-10 is not in the data path ({err})")
    images, labels, _ = datasets.classification_arrays(root, "test", model.input_shape[1])
    assert len(images) == card["test"]["images"]
    top1 = np.mean(np.argmax(model.predict(images, batch_size=500, verbose=0), -1) == labels)
    assert top1 == pytest.approx(card["test"]["top1_tf"], abs=0.002)
    result = deploy.compare_classifier(model, es2.compile(model), list(images[::100]),
                                       labels[::100], emulate=False, progress=False)
    assert result["gpu_top1_equals_tf"] >= 0.99


@pytest.mark.parametrize("card_path", ONNX_CARDS, ids=[c.stem for c in ONNX_CARDS])
def test_onnx_classifier_matches_its_card(card_path):
    """ONNX Runtime's top-1 on the 10,000 test images is the card's; the GPU, compiled from
    the .onnx file, agrees with it on a fiftieth of them."""
    import numpy as np

    from workbench.studies import deploy

    card = json.loads(card_path.read_text())
    model = load_model(MODELS / card["model"])
    try:
        root = datasets.classification_root("cifar10")
    except (FileNotFoundError, ValueError) as err:
        pytest.skip(f"CIFAR-10 is not in the data path ({err})")
    net = es2.compile(model)
    images, labels, _ = datasets.classification_arrays(root, "test", net.graph.input_size[0])
    assert len(images) == card["test"]["images"]
    top1 = np.mean(np.argmax(model.predict(images, batch_size=500), -1) == labels)
    assert top1 == pytest.approx(card["test"]["top1_onnxruntime"], abs=0.001)
    result = deploy.compare_classifier(model, net, list(images[::50]), labels[::50],
                                       emulate=False, progress=False)
    assert result["gpu_top1_equals_tf"] >= 0.99


@pytest.mark.parametrize("card_path", SR_CARDS, ids=[c.stem for c in SR_CARDS])
def test_checkpoint_matches_its_card(card_path):
    card = json.loads(card_path.read_text())
    model = load_model(MODELS / card["model"])
    assert model.count_params() == card["deployed_parameters"]
    if card_path == reference_sr().with_suffix(".json"):  # the reference: the article's size
        assert model.count_params() <= sr_x2().count_params() == 7340
        fetches = [cost.total(plan.cost(es2.compile(m).graph, (64, 64)).values()).texel_fetches
                   for m in (model, sr_x2())]
        assert fetches[0] <= fetches[1]
    psnr = card["psnr_y_studio_crop2_bicubic_aa"]
    sr_set = _set5()
    tf_8bit = superres.psnr_table(model, [sr_set], quantize=True)["Set5"]
    assert tf_8bit == pytest.approx(psnr["8-bit activations (as deployed)"]["Set5"], abs=0.05)
    if "GPU (ES 2.0, llvmpipe)" in psnr:
        gpu = sr_ablation.gpu_psnr(model, [sr_set])["Set5"]["psnr"]
        assert gpu == pytest.approx(psnr["GPU (ES 2.0, llvmpipe)"]["Set5"], abs=0.05)
