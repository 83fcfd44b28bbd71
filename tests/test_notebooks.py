"""Every notebook runs headless through papermill, with the `ci` profile, via the same
command as `make reproduce`; their results are real numbers, checked here."""
import json

import pytest

from workbench import pipeline


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci_run")
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_FIGURES", str(root / "figures"))
    status = pipeline.run("ci", runs_dir=root / "runs", artifacts_dir=root / "artifacts")
    yield root, status
    mp.undo()


@pytest.mark.slow
def test_every_notebook_ran(ci_run):
    root, status = ci_run
    assert status == {name: "ok" for name in pipeline.DEPENDENCIES}
    for name in status:
        assert (root / "runs" / f"{name}.ipynb").exists()


@pytest.mark.slow
def test_sr_notebooks_outputs(ci_run):
    root, _ = ci_run
    assert (root / "artifacts" / "sr" / "finetune" / "model.keras").exists()
    for name in ("sr_train_loss", "sr_eval_crops"):
        assert (root / "figures" / f"{name}.png").exists()
        assert (root / "figures" / f"{name}.svg").exists()
    results = json.loads((root / "figures" / "sr_eval.json").read_text())
    methods = {r["method"] for r in results["summary"]}
    assert methods == {"bicubic", "net", "net multi-kernel"}
    kernels = {r["kernel"] for r in results["summary"]}
    assert kernels == {"bicubic_aa", "bilinear", "bicubic", "lanczos"}
    for r in results["summary"]:
        assert 10 < r["psnr_y_studio"] < 60 and 0 < r["ssim_y_studio"] <= 1


@pytest.mark.slow
def test_glsl_deploy_outputs(ci_run):
    root, _ = ci_run
    results = json.loads((root / "figures" / "glsl_deploy.json").read_text())
    for r in results["records"]:
        assert r["psnr_gpu_vs_tf"] >= 45
        assert r["bytes_equal_per_op_worst"] >= 0.9999
        assert r["bytes_equal_gpu_emulator"] >= 0.998
    assert len(results["pass_seconds"]) == 32
    assert (root / "figures" / "glsl_deploy_differences.png").exists()
    assert (root / "figures" / "sr_x2_shaders" / "manifest.json").exists()
