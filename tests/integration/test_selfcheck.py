"""The exported page's self-check (``export-web --check``) in headless Chromium (SwiftShader),
and the cross-device table (``python -m workbench devices``) of its report and llvmpipe's.

Every figure of the page's device report is recomputed here from the bytes the page returned
and the files it was exported with (TF's float outputs, the emulator's bytes): PSNR within
0.01 dB (the page sums in float64 as numpy does), shares of equal bytes and the classifier's
top-1 exactly, logits to float32 precision.  The pairwise PSNR of the devices table is a numpy
PSNR of the two reports' outputs.
"""
import base64
import hashlib
import json

import keras
import numpy as np
import pytest
from tests.conftest import skip_module_without_chromium

skip_module_without_chromium()

from workbench import es2, references, web  # noqa: E402
from workbench.__main__ import main  # noqa: E402
from workbench.es2 import bundle  # noqa: E402
from workbench.es2.net import output_values  # noqa: E402
from workbench.nets import classify  # noqa: E402
from workbench.nets.models import dogs_classifier, sr_x2  # noqa: E402
from workbench.run import report as run_report  # noqa: E402
from workbench.studies import devices  # noqa: E402
from workbench.web import check  # noqa: E402

pytestmark = pytest.mark.gl

LIMITS = ("MAX_TEXTURE_SIZE", "MAX_TEXTURE_IMAGE_UNITS", "MAX_VARYING_VECTORS",
          "MAX_FRAGMENT_UNIFORM_VECTORS", "MAX_RENDERBUFFER_SIZE")


def _page_report(directory, button=False):
    """The device report of the page in ``directory``: from ``?check=1``, or its button."""
    with web.session(directory, **({} if button else {"check": 1})) as page:
        if button:
            assert page.state == "ready" and page.page.is_visible("#check-run")
            page.page.click("#check-run")
        report = page.device_report()
        table = page.page.inner_text("#check-table")
        link = page.page.get_attribute("#check-download", "href")
        downloaded = json.loads(page.page.evaluate(
            "url => fetch(url).then(r => r.text())", link))
    assert downloaded == report and "bytes = emulator" in table
    return report


@pytest.fixture(scope="module")
def sr_page(tmp_path_factory):
    """(model, net, page folder, the page's device report): a random-weight sr_x2 exported
    with ``export-web --check`` from a .keras file."""
    keras.utils.set_random_seed(0)
    model = sr_x2()
    path = tmp_path_factory.mktemp("sr_model") / "sr.keras"
    model.save(path)
    directory = tmp_path_factory.mktemp("sr_check")
    assert main(["export-web", "--check", "--model", str(path), "--out", str(directory)]) == 0
    return model, es2.load(directory), directory, _page_report(directory)


@pytest.fixture(scope="module")
def classifier_page(tmp_path_factory):
    """The tiny classifier preset at 32x32, 10 classes, random weights, BatchNorm calibrated."""
    keras.utils.set_random_seed(0)
    model = dogs_classifier("tiny", input_size=32, classes=10)
    classify.calibrate_batchnorm(model, np.random.default_rng(0).random((8, 32, 32, 3), np.float32))
    net = es2.compile(model)
    directory = tmp_path_factory.mktemp("classifier_check")
    web.export(net, directory, check_model=model)
    return model, net, directory, _page_report(directory, button=True)


def _stored(entry):
    return np.frombuffer(base64.b64decode(entry["output"]), np.uint8).reshape(
        entry["height"], entry["width"], 4)


def _check_device(report, directory):
    assert report["format"] == check.REPORT_FORMAT and report["source"] == "webgl"
    device = report["device"]
    assert device["renderer"] and device["unmasked_renderer"] and device["version"]
    assert all(isinstance(device["limits"][k], int) and device["limits"][k] > 0 for k in LIMITS)
    assert device["precision"]["highp"]["precision"] >= 16  # SwiftShader: float32, 23 bits
    assert report["compile_ms"] > 0 and report["first_draw_ms"] > 0
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [name for name, _ in report["passes"]] == [p["name"] for p in manifest["passes"]]
    assert sum(ms for _, ms in report["passes"]) > 0
    files = json.loads((directory / "check.json").read_text())
    assert report["model_sha256"] == files["model_sha256"] == hashlib.sha256(
        (directory / "manifest.json").read_bytes()).hexdigest()
    return files


def test_sr_page_report_matches_python(sr_page):
    model, net, directory, report = sr_page
    files = _check_device(report, directory)
    assert [e["name"] for e in report["inputs"]] == [i["name"] for i in files["inputs"]]
    for entry, item in zip(report["inputs"], files["inputs"]):
        out = _stored(entry)
        image = np.fromfile(directory / item["input"], np.uint8).reshape(
            item["height"], item["width"], 4)[..., :3]
        assert out.shape == (2 * image.shape[0], 2 * image.shape[1], 4)
        tf = np.fromfile(directory / item["tf"], "<f4").reshape(*out.shape[:2], 3)
        # the embedded TF output is the Keras model's, and the expected bytes the emulator's
        np.testing.assert_allclose(tf, bundle.tf_output(model, net.graph, image / np.float32(255)),
                                   atol=1e-6)
        expected = np.fromfile(directory / item["expected"], np.uint8).reshape(out.shape)
        assert np.array_equal(expected, net.emulate(image / np.float32(255), keep=True)[
            net.graph.output])
        mse = np.mean((out[..., :3] / 255.0 - tf.astype(np.float64)) ** 2)
        psnr = 10 * np.log10(1 / mse)
        print(f"\n{entry['name']}: page PSNR vs TF {entry['psnr_vs_tf']:.3f} dB (numpy "
              f"{psnr:.3f}), bytes = emulator {entry['bytes_equal_emulator']:.4%}")
        assert abs(entry["psnr_vs_tf"] - psnr) < 0.01 and psnr > 40
        assert entry["bytes_equal_emulator"] == np.mean(out == expected)
    print(f"compile {report['compile_ms']:.0f} ms, first draw {report['first_draw_ms']:.1f} ms, "
          f"passes {sum(ms for _, ms in report['passes']):.1f} ms; JSON "
          f"{len(json.dumps(report))} bytes")


def test_classifier_page_report_matches_python(classifier_page):
    model, net, directory, report = classifier_page
    files = _check_device(report, directory)
    assert files["kind"] == "logits"
    for entry, item in zip(report["inputs"], files["inputs"]):
        out = _stored(entry)
        logits = output_values(net.graph, out)  # the page's bytes, decoded by the workbench
        tf = np.fromfile(directory / item["tf"], "<f4")
        image = np.fromfile(directory / item["input"], np.uint8).reshape(32, 32, 4)[..., :3]
        np.testing.assert_allclose(tf, model(image[None] / np.float32(255))[0], atol=1e-5)
        np.testing.assert_allclose(entry["logits"], logits, atol=1e-6)
        assert abs(entry["max_abs_logit_diff_vs_tf"] - np.abs(logits - tf).max()) < 1e-6
        assert entry["top1_equal_tf"] == (np.argmax(logits) == np.argmax(tf))
        expected = np.fromfile(directory / item["expected"], np.uint8).reshape(out.shape)
        assert entry["bytes_equal_emulator"] == np.mean(out == expected)
        print(f"\n{entry['name']}: top-1 = TF {entry['top1_equal_tf']}, max |logit - TF| "
              f"{entry['max_abs_logit_diff_vs_tf']:.4f}, bytes = emulator "
              f"{entry['bytes_equal_emulator']:.0%}")
        assert entry["max_abs_logit_diff_vs_tf"] < 0.1
    assert len({tuple(e["logits"]) for e in report["inputs"]}) == 2  # two different images


def test_check_needs_a_keras_model(sr_page, tmp_path, capsys):
    _, _, directory, _ = sr_page
    assert main(["export-web", "--check", "--model", str(directory), "--out", str(tmp_path)]) == 2
    assert "--check needs a .keras or .onnx model" in capsys.readouterr().err


def _psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b) ** 2)
    return np.inf if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def test_devices_table_of_swiftshader_and_llvmpipe(sr_page, tmp_path):
    _, _, directory, report = sr_page
    page_json = tmp_path / "swiftshader.json"
    page_json.write_text(json.dumps(report))
    out = tmp_path / "figures"
    assert main(["devices", str(page_json), "--moderngl", str(directory), "--out", str(out)]) == 0
    llvmpipe = json.loads((out / "device-moderngl.json").read_text())
    assert llvmpipe["source"] == "moderngl" and "llvmpipe" in llvmpipe["device"]["renderer"]
    assert llvmpipe["device"]["precision"]["highp"]["precision"] == 23
    result = json.loads((out / "devices.json").read_text())
    assert len(result["rows"]) == 2
    worst = min(_psnr(_stored(a)[..., :3], _stored(b)[..., :3])
                for a, b in zip(report["inputs"], llvmpipe["inputs"]))
    equal = np.mean([np.mean(_stored(a) == _stored(b))
                     for a, b in zip(report["inputs"], llvmpipe["inputs"])])
    print(f"\nSwiftShader vs llvmpipe: pairwise PSNR {worst:.2f} dB, {equal:.4%} bytes equal; "
          f"llvmpipe compile {llvmpipe['compile_ms']:.0f} ms, SwiftShader {report['compile_ms']:.0f} ms")
    pairwise = result["pairwise"][0][1]
    assert (pairwise is None) if worst == np.inf else abs(pairwise - worst) < 1e-9
    assert result["pairwise"][1][0] == pairwise
    for entry in llvmpipe["inputs"]:  # llvmpipe runs the emulator's float order
        assert entry["bytes_equal_emulator"] == 1.0
    table = (out / "devices.md").read_text()
    assert "SwiftShader" in table and "llvmpipe" in table
    assert f"within {references.SR_DEVICES_PSNR_DB} dB" in table
    assert (out / "devices.png").stat().st_size and (out / "devices.svg").stat().st_size
    assert "## Devices" in run_report.build(out)


def test_pairwise_psnr_is_numpy_psnr(sr_page):
    """A device that differs: the llvmpipe-like report with a few output bytes moved."""
    _, _, _, report = sr_page
    other = json.loads(json.dumps(report))
    rng = np.random.default_rng(0)
    for entry in other["inputs"]:
        out = _stored(entry).copy()
        flat = out.reshape(-1)
        flat[rng.choice(flat.size, 40, replace=False)] ^= 1
        entry["output"] = base64.b64encode(out.tobytes()).decode()
    worst = min(_psnr(_stored(a)[..., :3], _stored(b)[..., :3])
                for a, b in zip(report["inputs"], other["inputs"]))
    table = devices.pairwise([report, other])
    assert table[0][0] is None and abs(table[0][1] - worst) < 1e-9 and 40 < worst < 80


def test_report_has_no_devices_section_without_results(tmp_path):
    assert "Devices" not in run_report.build(tmp_path)


@pytest.mark.parametrize("content, message", [
    ("not json {", "not a JSON file"),
    (json.dumps({"format": "workbench-webgl/1"}), "format 'workbench-webgl/1', not a device report"),
    ("other model", "compare reports of one exported page"),
])
def test_devices_bad_input(sr_page, tmp_path, capsys, content, message):
    _, _, _, report = sr_page
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**report, "model_sha256": "0" * 64}) if content == "other model"
                   else content)
    assert main(["devices", str(good), str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_shipped_onnx_classifier_becomes_a_page_that_passes_its_check(tmp_path):
    """`export-web --model models/cifar10_plain.onnx --check` failed: its pooled dense layer
    reads the pixels in chunks, so its partial sums' rows follow from no tensor's size by the
    page's rule; a net of a fixed input size now gets fixed sizes.  In Chromium: the page's
    top-1 = ONNX Runtime's on the check's images, and its bytes = the emulator's."""
    from workbench.files import project_root

    onnx_path = project_root() / "models" / "cifar10_plain.onnx"
    assert main(["export-web", "--check", "--model", str(onnx_path), "--out",
                 str(tmp_path / "page")]) == 0
    report = _page_report(tmp_path / "page")
    assert report["inputs"] and all(e["top1_equal_tf"] for e in report["inputs"])
    assert min(e["bytes_equal_emulator"] for e in report["inputs"]) >= 0.9999
