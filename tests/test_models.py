"""The reference checkpoints in models/: each loads, deploys within the budget of the reference
net, and reproduces the PSNR its card states (Set5, Y601, crop 2, bicubic_aa; within 0.05 dB)."""
import json
from pathlib import Path

import pytest

from workbench import es2
from workbench.data import datasets
from workbench.es2 import plan
from workbench.ir import cost
from workbench.nets import superres
from workbench.nets.models import load_model, reference_sr, sr_x2
from workbench.studies import sr_ablation

MODELS = Path(__file__).resolve().parents[1] / "models"
CARDS = sorted(MODELS.glob("*.json"))


def _set5():
    sr_set = datasets.sr_images("Set5")
    if sr_set.name != "Set5":
        pytest.skip("Set5 is not in the data path (set WORKBENCH_DATA or run fetch-data)")
    return sr_set


def test_the_reference_checkpoint_is_there():
    assert reference_sr().with_suffix(".json") in CARDS


@pytest.mark.parametrize("card_path", CARDS, ids=[c.stem for c in CARDS])
def test_checkpoint_matches_its_card(card_path):
    card = json.loads(card_path.read_text())
    model = load_model(MODELS / card["model"])
    assert model.count_params() <= sr_x2().count_params() == 7340
    fetches = [cost.total(plan.cost(es2.compile(m).graph, (64, 64)).values()).texel_fetches
               for m in (model, sr_x2())]
    assert fetches[0] <= 1.1 * fetches[1]
    psnr = card["psnr_y_studio_crop2_bicubic_aa"]
    sr_set = _set5()
    tf_8bit = superres.psnr_table(model, [sr_set], quantize=True)["Set5"]
    assert tf_8bit == pytest.approx(psnr["8-bit activations (as deployed)"]["Set5"], abs=0.05)
    if "GPU (ES 2.0, llvmpipe)" in psnr:
        gpu = sr_ablation.gpu_psnr(model, [sr_set])["Set5"]["psnr"]
        assert gpu == pytest.approx(psnr["GPU (ES 2.0, llvmpipe)"]["Set5"], abs=0.05)
