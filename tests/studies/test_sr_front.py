"""The SR quality-cost front (workbench.studies.sr_front): the checkpoints that ship, from
their cards, beside the published nets and the edge-SR study's nets."""
import json
import shutil

from workbench import references
from workbench.files import project_root
from workbench.studies import sr_front


def test_front_from_the_cards_and_the_csv(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    for suffix in (".json", ".keras"):
        shutil.copy(project_root() / "models" / f"sr_x2_reference{suffix}", models)
    (tmp_path / "data" / "sr").mkdir(parents=True)
    (tmp_path / "data" / "sr" / "esr_x2_models.csv").write_text(
        "params,psnr_Set5,psnr_Set14,psnr_BSDS100,psnr_Urban100,speed_RPI,model_id\n"
        "36,33.15,30.163,29.665,26.942,15.8276,eSR-MAX_s2_K3_C1\n")
    result = sr_front.save(tmp_path / "out", data_root=tmp_path / "data", models_dir=models)
    card = json.loads((models / "sr_x2_reference.json").read_text())
    [ours] = result["ours"]
    assert ours["parameters"] == card["deployed_parameters"] == references.SR_PARAMETERS
    assert ours["Set14"] == card["psnr_y_studio_crop2_bicubic_aa"]["GPU (ES 2.0, llvmpipe)"]["Set14"]
    assert (ours["MACs/pixel"], ours["fetches/pixel"]) == (1804, 174)  # the ablation's counts
    assert result["edge_sr"] == [{"net": "eSR-MAX_s2_K3_C1", "parameters": 36, "Set5": 33.15,
                                  "Set14": 30.163}]
    assert (tmp_path / "out" / "sr_front.png").stat().st_size > 10_000
    text = sr_front.report_section(tmp_path / "out")
    assert "| sr_x2_reference | 7340 |" in text and "| SESR-M3 |" in text
    assert sr_front.nearest_published(3200) == "FSRCNN-s"
    assert sr_front.nearest_published(12_500) == "FSRCNN"
