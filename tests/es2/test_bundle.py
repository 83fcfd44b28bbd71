"""The replayable bundle (workbench.es2.bundle): its run.py, run where the workbench cannot be
imported (numpy and PyOpenGL only), through EGL and OpenGL ES 2.0 on llvmpipe, against the
workbench's own moderngl run of the same net, the emulator and TensorFlow.

run.py and the moderngl worker both run the ``highp`` shaders on llvmpipe with the same
textures, uniforms and viewports, so their bytes must be identical (and the emulator's).
"""
import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import OpenGL
import pytest

from tests.conftest import with_zero_border
from workbench import es2
from workbench.__main__ import main
from workbench.data import metrics
from workbench.es2 import bundle, saved
from workbench.nets import classify
from workbench.nets.models import dogs_classifier, load_model, reference_sr, sr_x2

pytestmark = pytest.mark.gl


def run_bundle(directory, *args):
    """``python -S run.py`` with only numpy's and PyOpenGL's folders on the path: without the
    site module the venv's editable install of the workbench is not on it either."""
    paths = {str(Path(m.__file__).resolve().parents[1]) for m in (np, OpenGL)}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(paths)}
    probe = subprocess.run([sys.executable, "-S", "-c", "import workbench"], check=False,
                           cwd=directory, env=env, capture_output=True, text=True)
    assert "No module named 'workbench'" in probe.stderr
    return subprocess.run([sys.executable, "-S", "run.py", *args], check=False, cwd=directory,
                          env=env, capture_output=True, text=True, timeout=600)


def bundled(model, directory, *args, **options):
    """Bundle ``model`` (compiled with ``options``), run run.py; returns (net, report, the
    bundle's checks)."""
    border = options.pop("zero_border", False)  # (options: the call's own dict)
    net = es2.compile(model, **options)
    if border:
        net, _ = with_zero_border(net)
    bundle.bundle(net, model, directory)
    result = run_bundle(directory, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((directory / "report.json").read_text())
    spec = json.loads((directory / "bundle.json").read_text())
    checks = [{k: np.load(directory / c[k]) if k != "name" else c[k] for k in c}
              for c in spec["inputs"]]
    assert [e["name"] for e in report["inputs"]] == [c["name"] for c in checks]
    assert report["format"] == "workbench-device-report/1" and report["source"] == "bundle"
    assert report["device"]["renderer"].startswith("llvmpipe")
    assert report["device"]["precision"]["highp"]["precision"] == 23
    assert [name for name, _ in report["passes"]] == [p.name for p in net.passes]
    assert report["compile_ms"] > 0 and report["first_draw_ms"] > 0
    return net, report, checks


def outputs(entry, expected):
    return np.frombuffer(base64.b64decode(entry["output"]), np.uint8).reshape(expected.shape)


@pytest.mark.parametrize("options", [{}, {"target": "videocore4", "shared": True},
                                     {"zero_border": True}])
def test_sr_bundle_replays_the_moderngl_bytes(tmp_path, options):
    """Also with the weights as uniform arrays (shared=True): run.py compiles each distinct
    program once and sets each pass's arrays; and with the layers read through a zero
    border: run.py sizes the copies' textures from bundle.json."""
    keras.utils.set_random_seed(3)
    model = sr_x2(widths=(8, 8), kernels=(3, 3), groups=(1, 2))
    net, report, checks = bundled(model, tmp_path / "sr", **options)
    assert all(p.arrays for p in net.passes if p.op != "subpixels") == ("shared" in options)
    assert any(".border" in p.name for p in net.passes) == ("zero_border" in options)
    assert report["egl"]["platform"] == "surfaceless" and report["output_channels"] == 3
    for entry, check in zip(report["inputs"], checks):
        out = outputs(entry, check["expected"])
        image = check["input"][..., :3] / np.float32(255)
        np.testing.assert_array_equal(out, net.run(image, keep=True)[net.graph.output])
        assert entry["bytes_equal_emulator"] == float(np.mean(out == check["expected"])) == 1.0
        assert (entry["width"], entry["height"]) == (out.shape[1], out.shape[0])
        psnr = metrics.psnr(check["tf"], out[..., :3] / np.float32(255))
        assert abs(entry["psnr_vs_tf"] - psnr) < 0.01 and psnr > 40
        np.testing.assert_allclose(check["tf"], bundle.tf_output(model, net.graph, image))


def test_classifier_bundle_decodes_the_logits(tmp_path):
    """The output is the dense layer's 16-bit fixed-point texture (8 bytes here).  The
    emulator can miss one byte in 10^4 of a deep net (a value at a half level), which then
    spreads to a logit one step (1/256) off: so no threshold here, the shares are checked."""
    keras.utils.set_random_seed(1)
    model = dogs_classifier("tiny")
    classify.calibrate_batchnorm(model, np.random.default_rng(2).random((4, 16, 16, 3)))
    net, report, checks = bundled(model, tmp_path / "tiny", "--threshold", "0")
    assert report["output_channels"] == 4
    for entry, check in zip(report["inputs"], checks):
        out = outputs(entry, check["expected"])
        image = check["input"][..., :3] / np.float32(255)
        np.testing.assert_array_equal(out, net.run(image, keep=True)[net.graph.output])
        assert entry["bytes_equal_emulator"] == float(np.mean(out == check["expected"]))
        emulated = es2.net.output_values(net.graph, check["expected"])
        assert np.abs(emulated - es2.net.output_values(net.graph, out)).max() <= 1 / 256
        logits = es2.net.output_values(net.graph, out)
        np.testing.assert_array_equal(entry["logits"], logits)
        diff = np.abs(logits - check["tf"]).max()
        assert entry["max_abs_logit_diff_vs_tf"] == pytest.approx(diff)
        assert entry["top1_equal_tf"] == (np.argmax(logits) == np.argmax(check["tf"]))
        np.testing.assert_allclose(check["tf"], model(image[None]).numpy()[0], atol=1e-5)


def test_run_py_fails_below_the_threshold(tmp_path):
    """Exit status 1 when the bytes differ from the emulator's: one expected byte changed."""
    keras.utils.set_random_seed(4)
    model = sr_x2(widths=(4,), kernels=(3,), groups=(1,))
    directory = bundle.bundle(es2.compile(model), model, tmp_path / "b")
    first = json.loads((directory / "bundle.json").read_text())["inputs"][0]["expected"]
    expected = np.load(directory / first)
    expected[0, 0, 0] ^= 1
    np.save(directory / first, expected)
    spec = json.loads((directory / "bundle.json").read_text())
    spec["files"][first] = hashlib.sha256((directory / first).read_bytes()).hexdigest()
    (directory / "bundle.json").write_text(json.dumps(saved.sealed(spec, bundle.SEAL)))
    result = run_bundle(directory, "--threshold", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BELOW" in result.stdout
    assert run_bundle(directory, "--threshold", "0.99").returncode == 0


def test_run_py_reads_only_the_files_its_manifests_list_with_their_hashes(tmp_path):
    """run.py read the manifest's vertex_shader, pass shaders and arrays by the paths it
    named, unconfined and unchecked: each is now refused in one line naming it, exit 2 (the
    edited files sealed again: the checks behind their own sha256)."""
    keras.utils.set_random_seed(4)
    model = sr_x2(widths=(4, 4), kernels=(3, 3), groups=(1, 1))
    directory = bundle.bundle(es2.compile(model), model, tmp_path / "b")
    manifest, spec = (json.loads((directory / f).read_text())
                      for f in ("manifest.json", "bundle.json"))

    def refused(file, change):
        data = json.loads(json.dumps(manifest if file == "manifest.json" else spec))
        change(data)
        seal = saved.SEAL if file == "manifest.json" else bundle.SEAL
        (directory / file).write_text(json.dumps(saved.sealed(data, seal)))
        result = run_bundle(directory)
        (directory / file).write_text(json.dumps(manifest if file == "manifest.json" else spec))
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        return result.stderr.strip()

    assert refused("manifest.json", lambda m: m.update(vertex_shader="../../../etc/hostname")) \
        == f"error: {directory / 'manifest.json'}: names a file outside the bundle " \
           "(../../../etc/hostname)"
    assert refused("manifest.json", lambda m: [p.pop("sha256") for p in m["passes"]] and m[
        "passes"][0].update(shader=m["passes"][1]["shader"])).endswith(
        f"lists no sha256 of {manifest['passes'][1]['shader']}; write the bundle again")
    assert "lists no sha256 of vertex.glsl" in refused("manifest.json", lambda m: m.pop("files"))
    assert f"lists no sha256 of {spec['inputs'][0]['input']}" in refused(
        "bundle.json", lambda b: b.pop("files"))
    first = spec["inputs"][0]["tf"]
    np.save(directory / first, np.array([object()], dtype=object), allow_pickle=True)
    assert f"{directory / first}: not the file bundle.json lists (sha256 differs)" in refused(
        "bundle.json", lambda b: None)
    assert f"{directory / first}: not an array of numbers" in refused("bundle.json", lambda b: b[
        "files"].update({first: hashlib.sha256((directory / first).read_bytes()).hexdigest()}))


def test_mediump_bundle_passes_its_own_check(tmp_path):
    """A mediump net's expected bytes are the float16 prediction, judged within the band that
    separates it from the float32 one (a GPU's mediump may be either): llvmpipe computes
    mediump in neither exactly (it matched only 67.5 % of the highp emulator's bytes), and
    the bundle passes on the machine that made it."""
    model = load_model(reference_sr())
    net = es2.compile(model, es2.Target.of(precision="mediump"))
    directory = bundle.bundle(net, model, tmp_path / "m", inputs=bundle.test_images(net.graph, 1))
    spec = json.loads((directory / "bundle.json").read_text())
    assert spec["precision"] == "mediump" and 1 <= spec["levels"] <= 8
    entry = spec["inputs"][0]
    image = np.load(directory / entry["input"])[..., :3] / np.float32(255)
    np.testing.assert_array_equal(np.load(directory / entry["expected"]),
                                  net.emulate(image, keep=True, arithmetic="float16")["subpixels"])
    result = run_bundle(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"within {spec['levels']} levels" in result.stdout
    report = json.loads((directory / "report.json").read_text())["inputs"][0]
    assert report["bytes_within_levels"] >= bundle.THRESHOLD > report["bytes_equal_emulator"]


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["bundle", "--model", str(tmp_path / "missing.keras"),
                 "--out", str(tmp_path / "b")]) == 2
    assert "missing.keras not found" in capsys.readouterr().err
    keras.utils.set_random_seed(5)
    model = sr_x2(widths=(4,), kernels=(3,), groups=(1,))
    model.save(tmp_path / "m.keras")
    es2.compile(model).save(tmp_path / "saved")
    assert main(["bundle", "--model", str(tmp_path / "saved"), "--out", str(tmp_path / "b")]) == 2
    assert "a saved shader folder has no model" in capsys.readouterr().err
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    assert main(["bundle", "--model", str(tmp_path / "m.keras"), "--out", str(users)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "not written by the workbench" in err
    assert "use --force" in err and "force=True" not in err  # the command line's words
    assert [p.name for p in users.iterdir()] == ["notes.txt"]
    assert main(["bundle", "--model", str(tmp_path / "m.keras"), "--out", str(users),
                 "--force"]) == 0
    assert (users / "run.py").is_file() and not (users / "notes.txt").exists()


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    """A small SR net's bundle, its manifest.json and bundle.json as written."""
    keras.utils.set_random_seed(4)
    model = sr_x2(widths=(4, 4), kernels=(3, 3), groups=(1, 1))
    directory = bundle.bundle(es2.compile(model), model, tmp_path_factory.mktemp("b") / "b")
    return directory, {f: (directory / f).read_bytes() for f in ("manifest.json", "bundle.json")}


def refusal(directory, written, file, content, *args) -> str:
    """run.py's one line (exit status 2) with ``file`` holding ``content`` (None: absent);
    the bundle as written after."""
    (directory / file).unlink()
    if content is not None:
        (directory / file).write_bytes(content.encode() if isinstance(content, str) else content)
    try:
        result = run_bundle(directory, *args)
    finally:
        (directory / file).write_bytes(written[file])
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    return result.stderr.strip()


EDITS = {  # issue 58: each ran the wrong net, exit 0
    "manifest.json": {"a stride": lambda m: m["ops"][0].update(stride=2),
                      "the passes reversed": lambda m: m["passes"].reverse(),
                      "an activation": lambda m: m["ops"][0].update(activation="relu"),
                      "a key removed": lambda m: m.pop("constant_textures")},
    "bundle.json": {"a uniform": lambda b: b["plan"]["uniforms"]["L1.0"].update(
                        u_v_stride=[2.0, 2.0]),
                    "the threshold": lambda b: b.update(threshold=0),
                    "a key removed": lambda b: b.pop("plan")},
}


@pytest.mark.parametrize("file, edit", [(f, e) for f in EDITS for e in EDITS[f]])
def test_run_py_refuses_an_edited_manifest_or_bundle_json(small_bundle, file, edit):
    """Each holds its own sha256 (manifest_sha256, bundle_sha256), which run.py checks."""
    directory, written = small_bundle
    data = json.loads(written[file])
    EDITS[file][edit](data)
    key = "manifest_sha256" if file == "manifest.json" else "bundle_sha256"
    assert refusal(directory, written, file, json.dumps(data, indent=1)) == (
        f"error: {directory / file}: edited after it was written, or by an older workbench "
        f"({key} differs or is missing); write the bundle again")


@pytest.mark.parametrize("file", ["manifest.json", "bundle.json"])
def test_run_py_refuses_a_missing_truncated_or_deep_json_in_one_line(small_bundle, file):
    directory, written = small_bundle
    path = directory / file
    assert refusal(directory, written, file, None).startswith(
        f"error: {path}: cannot be read (No such file or directory)")
    assert refusal(directory, written, file, written[file][:100]).startswith(
        f"error: {path}: not valid JSON")
    assert refusal(directory, written, file, b"\xff\xfe").startswith(
        f"error: {path}: not valid JSON")
    assert refusal(directory, written, file, "[" * 100_000 + "]" * 100_000) == (
        f"error: {path}: nested too deep to be JSON the workbench wrote")
    assert refusal(directory, written, file, '{"a": ' * 100_000 + "1" + "}" * 100_000) == (
        f"error: {path}: nested too deep to be JSON the workbench wrote")
    kind = "workbench-es2/1" if file == "manifest.json" else "workbench-bundle/1"
    assert refusal(directory, written, file, "[]") == (
        f"error: {path}: not a {kind} file; write the bundle again")


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "1.5", ""])
def test_run_py_refuses_a_threshold_not_a_share(small_bundle, value):
    directory, _ = small_bundle
    result = run_bundle(directory, "--threshold", value)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr == (f"error: argument --threshold: {value!r} is not a share of bytes "
                             "in [0, 1]\n")


@pytest.mark.slow
def test_the_shipped_mobilenet_v2_bundle_passes_its_own_run_py(tmp_path):
    """Its 16-bit tensors' codes differ from the emulator's by a step where llvmpipe's float32
    sums differ in the last bit; that spread to logits 3 codes off (70 % of the bytes equal,
    exit 1, top-1 = TF's).  The bundle's band (levels) is now the spread of its output when
    those codes move by a step: run.py passes, and a logit off by more fails."""
    from workbench.files import project_root

    directory = tmp_path / "mnv2"
    model = project_root() / "models" / "cifar10_mobilenet_v2.onnx"
    assert main(["bundle", "--model", str(model), "--out", str(directory)]) == 0
    spec = json.loads((directory / "bundle.json").read_text())
    assert spec["output"]["kind"] == "logits" and 2 <= spec["levels"] <= 16
    result = run_bundle(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"(within {spec['levels']} codes)" in result.stdout
    report = json.loads((directory / "report.json").read_text())
    assert all(e["top1_equal_tf"] and e["bytes_within_levels"] == 1 for e in report["inputs"])
    first = spec["inputs"][0]["expected"]
    expected = np.load(directory / first)
    expected[0, 0, 0] ^= 1  # the first logit's high byte: 256 codes off
    np.save(directory / first, expected)
    spec["files"][first] = hashlib.sha256((directory / first).read_bytes()).hexdigest()
    (directory / "bundle.json").write_text(json.dumps(saved.sealed(spec, bundle.SEAL)))
    result = run_bundle(directory)
    assert result.returncode == 1 and "BELOW" in result.stdout, result.stdout + result.stderr
