"""Every notebook runs headless through papermill, with the `ci` profile, via the same
command as `make reproduce`; their results are real numbers, checked here."""
import base64
import json
import os

import numpy as np
import pytest

from workbench.data import datasets
from workbench.run import pipeline

NEED_CIFAR = ("classifier_train", "classifier_deploy", "activations")


def _have_cifar():
    try:
        datasets.classification_root("cifar10")
        return True
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """The ci profile, as `python -m workbench run --profile ci`.  Without CIFAR-10 in the
    data path (`make test` points WORKBENCH_DATA at ../shared/data) the notebooks that
    train classifiers are left out and their tests are skipped."""
    root = tmp_path_factory.mktemp("ci_run")
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_FIGURES", str(root / "figures"))  # the run writes to figures/ci/
    notebooks = list(pipeline.load_profile("ci"))
    only = notebooks if _have_cifar() else [n for n in notebooks if n not in NEED_CIFAR]
    status = pipeline.run("ci", only=only, places=pipeline.Places(
        runs_dir=root / "runs", artifacts_dir=root / "artifacts"))
    yield root, status, only
    mp.undo()


@pytest.mark.slow
def test_every_notebook_ran(ci_run):
    root, status, expected = ci_run
    assert status == {name: "ok" for name in expected}
    for name in status:
        assert (root / "runs" / f"{name}.ipynb").exists()


@pytest.mark.slow
def test_sr_notebooks_outputs(ci_run):
    root = ci_run[0]
    assert (root / "artifacts" / "sr" / "finetune" / "model.keras").exists()
    for name in ("sr_train_loss", "sr_eval_crops"):
        assert (root / "figures" / "ci" / f"{name}.png").exists()
        assert (root / "figures" / "ci" / f"{name}.svg").exists()
    results = json.loads((root / "figures" / "ci" / "sr_eval.json").read_text())
    methods = {r["method"] for r in results["summary"]}
    assert methods == {"bicubic", "net", "net multi-kernel", "net (GPU)", "net multi-kernel (GPU)"}
    kernels = {r["kernel"] for r in results["summary"]}
    assert kernels == {"bicubic_aa", "bilinear", "bicubic", "lanczos"}
    psnr = {}
    for r in results["summary"]:
        assert 10 < r["psnr_y_studio"] < 60 and 0 < r["ssim_y_studio"] <= 1
        psnr[(r["set"], r["kernel"], r["method"])] = r["psnr_y_studio"]
    for (s, k, m), value in psnr.items():  # the shaders' 8-bit output scores as TF's does
        if m.endswith(" (GPU)"):
            assert abs(value - psnr[(s, k, m[:-len(" (GPU)")])]) < 0.2, (s, k, m)


@pytest.mark.slow
def test_sr_recipes_outputs(ci_run):
    """The ablation trained each row with each seed and measured the GPU output."""
    results = json.loads((ci_run[0] / "figures" / "ci" / "sr_ablation.json").read_text())
    assert [(r["row"], r["seed"]) for r in results["records"]] == \
        [("base", 0), ("base", 1), ("+ identity init", 0), ("+ identity init", 1)]
    for r in results["summary"]:
        assert 10 < r["Set5 PSNR"] < 60 and r["Set5 spread"] is not None
        # the kernels' weights (docs/design.md's table) per low-resolution pixel, over 4 outputs
        assert r["MACs/pixel"] == (5 * 5 * 48 + 9 * 12 * 32 + 32 * 24 + 9 * 12 * 16 + 16 * 4) / 4
    assert "identity init" in results["verdict"]
    assert (ci_run[0] / "figures" / "ci" / "sr_ablation.png").exists()


@pytest.mark.slow
def test_glsl_deploy_outputs(ci_run):
    root = ci_run[0]
    results = json.loads((root / "figures" / "ci" / "glsl_deploy.json").read_text())
    for r in results["records"]:
        assert r["psnr_gpu_vs_tf"] >= 45
        assert r["bytes_equal_per_op_worst"] >= 0.9999
        assert r["bytes_equal_gpu_emulator"] >= 0.999  # the target (llvmpipe: all)
    assert len(results["pass_seconds"]) == 32
    assert (root / "figures" / "ci" / "glsl_deploy_differences.png").exists()
    mediump = results["mediump"]  # the float16 prediction on 2 crops, vs TF
    assert [r["op"] for r in mediump["rows"]] == ["L1", "L2", "L3", "L4", "L5", "subpixels"]
    summary = mediump["summary"]
    assert 40 < summary["PSNR mediump vs TF"] <= summary["PSNR highp vs TF"] + 0.5
    assert (root / "figures" / "ci" / "glsl_deploy_mediump.png").exists()
    assert (root / "figures" / "ci" / "sr_x2_shaders" / "manifest.json").exists()
    # the self-check on llvmpipe and SwiftShader: two rows, their outputs compared byte by byte
    table = json.loads((root / "figures" / "ci" / "devices.json").read_text())
    sources = [json.loads((root / "figures" / "ci" / f"device-{s}.json").read_text())
               for s in ("moderngl", "webgl")]
    assert len(table["rows"]) == 2 and len(table["pairwise"]) == 2
    psnrs = []
    for a, b in zip(*(r["inputs"] for r in sources)):
        x, y = (np.frombuffer(base64.b64decode(e["output"]), np.uint8).reshape(
            e["height"], e["width"], 4)[..., :3].astype(float) for e in (a, b))
        mse = np.mean((x - y) ** 2)
        psnrs.append(10 * np.log10(255 ** 2 / mse) if mse else np.inf)
    pair = table["pairwise"][0][1]
    assert pair is None if min(psnrs) == np.inf else abs(pair - min(psnrs)) < 1e-6
    assert (root / "figures" / "ci" / "devices.md").exists()


@pytest.mark.slow
def test_classifier_notebooks_outputs(ci_run):
    if not _have_cifar():
        pytest.skip("no CIFAR-10 in the data path (set WORKBENCH_DATA)")
    root = ci_run[0]
    assert (root / "figures" / "ci" / "classifier_train_curves.png").exists()
    train = json.loads((root / "artifacts" / "classifier" / "results.json").read_text())
    assert 0 <= train["top1"]["last"] <= 1
    deploy = json.loads((root / "figures" / "ci" / "classifier_deploy.json").read_text())
    result = deploy["result"]
    assert result["images"] == 50  # 5 per class
    # a barely trained net, but the GPU must still agree with TF
    assert result["gpu_top1_equals_tf"] >= 0.9
    assert result["logit_correlation_gpu_tf"] >= 0.99
    assert result["emulator"]["max_logit_diff_gpu_emulator"] <= 0.05
    mediump = deploy["mediump"]["summary"]  # fixed16 logits in float16: steps of 1/16 - 1/8
    assert mediump["images"] == 2 and 0.01 < mediump["max logit diff mediump vs TF"] < 1


@pytest.mark.slow
def test_my_net_outputs(ci_run):
    """my_net.ipynb: a net of one's own trained, checked, evaluated, compiled, published, all
    in its own folder (nothing of its in the profile's figures)."""
    root = ci_run[0]
    mine = root / "artifacts" / "my_net"
    summary = json.loads((mine / "my_net.json").read_text())
    assert summary["kind"] == "sr" and summary["programs"] > 5
    assert summary["reference_check"].startswith("reference check: ")
    psnr = {(r["set"], r["method"]): r["psnr_y_studio"] for r in summary["evaluation"]}
    assert set(psnr) == {("Set5", m) for m in ("bicubic", "your net (GPU)", "reference (GPU)")}
    assert psnr[("Set5", "reference (GPU)")] > psnr[("Set5", "bicubic")]  # the shipped net
    assert 15 < psnr[("Set5", "your net (GPU)")] < 60  # 4 steps from nearest upsampling
    assert (mine / "train" / "model.keras").exists() and (mine / "my_net_crops.png").exists()
    assert (mine / "page" / "index.html").exists() and (mine / "bundle" / "run.py").exists()
    assert not list((root / "figures" / "ci").glob("my_net*"))


@pytest.mark.slow
def test_report(ci_run):
    root = ci_run[0]
    text = (root / "figures" / "ci" / "report.md").read_text()
    assert text.startswith("# Workbench report\n\nProfile **ci**, on ")
    for section in ("x2 super-resolution", "Deployment fidelity", "Cost per op", "Timings",
                    "Channel shuffle"):
        assert f"## {section}" in text
    assert "| Set5 | bicubic_aa | bicubic |" in text
    assert "Predicted on a GPU whose mediump is float16" in text
    if _have_cifar():
        assert "| bounded_relu | 2 |" in text and "| sigmoid_like | 2 |" in text
    assert "| 1 shuffle(s) | 0, 8, 16, 24, 1, 9," in text and "| 128 | 8 | 2 |" in text
    assert (root / "figures" / "ci" / "report.html").read_text().startswith("<!doctype html>")


def test_report_names_missing_results(tmp_path):
    from workbench.run import report
    text = report.build(tmp_path)
    assert text.startswith("# Workbench report\n\nNo profile (notebooks run by hand), on ")
    assert f"{os.cpu_count()} cores" in text.splitlines()[2]
    assert "_Not in this run: `notebooks/sr_eval.ipynb` writes it._" in text
    assert "_Not in this run: `notebooks/activations.ipynb` writes it._" in text


def test_report_is_published_between_the_markers_only(tmp_path, capsys, monkeypatch):
    """``report --publish`` puts the profile's report into docs/results.md between its two
    marker lines, a heading level down, without the figure list; what is around is kept;
    a file without the markers is refused in one line and left as it was."""
    from workbench.run import report
    from workbench.run.cli import main

    figures = tmp_path / "figures" / "quick"
    figures.mkdir(parents=True)
    (figures / "x.png").write_bytes(b"")
    results = tmp_path / "results.md"
    results.write_text(f"# Results\n\nmine above\n{report.BEGIN}\nold\n{report.END}\n"
                       "mine below\n")
    monkeypatch.setenv("WORKBENCH_FIGURES", str(tmp_path / "figures"))
    assert main(["report", "--publish", str(results), "--source", "commit abc", "--force"]) == 0
    plain = tmp_path / "plain.md"
    plain.write_text("no markers")
    assert main(["report", "--publish", str(plain)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {plain}: needs one") and err.count("\n") == 1
    assert plain.read_text() == "no markers"
    text = results.read_text()
    head, body = text.split(report.BEGIN)
    assert head == "# Results\n\nmine above\n" and body.endswith(f"{report.END}\nmine below\n")
    assert body.startswith("\n<!-- the report, sha256 ")
    assert body.split("\n", 2)[2].startswith("_commit abc_\n\nProfile **quick**, on ")
    assert "\n### x2 super-resolution" in body and "\n## " not in body and "old" not in body
    assert "x.png" in (figures / "report.md").read_text() and "x.png" not in body


@pytest.mark.slow
def test_activations_notebook_outputs(ci_run):
    if not _have_cifar():
        pytest.skip("no CIFAR-10 in the data path (set WORKBENCH_DATA)")
    root = ci_run[0]
    results = json.loads((root / "figures" / "ci" / "activations.json").read_text())
    assert [(r["activation"], r["seed"]) for r in results["runs"]] == [
        ("bounded_relu", 0), ("bounded_relu", 1), ("sigmoid_like", 0), ("sigmoid_like", 1)]
    for r in results["runs"]:
        assert 0 <= r["top1_8bit"] <= 1 and len(r["history"]["val_accuracy"]) == 1
    assert [row["seeds"] for row in results["summary"]] == [2, 2]
    assert "verdict" in results
    for name in ("activations", "activation_levels", "activation_study_curves"):
        assert (root / "figures" / "ci" / f"{name}.png").exists()


@pytest.mark.slow
def test_shuffle_notebook_outputs(ci_run):
    root = ci_run[0]
    results = json.loads((root / "figures" / "ci" / "shuffle.json").read_text())
    assert results["order_table"]["orders"][0][:6] == [0, 8, 16, 24, 1, 9]
    assert results["order_table"]["orders"][1][:4] == [0, 2, 4, 6]
    mixing = {(r["channels"], r["step"]): r["units_to_mix"] for r in results["mixing"]}
    assert mixing[128, 8] == 2 and mixing[128, 1] is None
    for name in ("shuffle_order", "shuffle_mixing"):
        assert (root / "figures" / "ci" / f"{name}.png").exists()
        assert (root / "figures" / "ci" / f"{name}.svg").exists()


@pytest.mark.slow
def test_conv_algorithms_notebook_outputs(ci_run):
    root = ci_run[0]
    results = json.loads((root / "figures" / "ci" / "conv_algorithms.json").read_text())
    sizes = {(r["width"], r["height"]) for r in results["records"]}
    assert sizes == {(32, 32), (64, 64)}
    assert {"direct", "im2col_gemm", "winograd"} <= {r["algorithm"] for r in results["records"]}
    assert all(r["ms"] > 0 for r in results["records"])
    assert (root / "figures" / "ci" / "conv_algorithms.png").exists()
    text = (root / "figures" / "ci" / "report.md").read_text()
    assert "## Convolution algorithms (ES 3.1 compute)" in text and "| 64x64 |" in text
