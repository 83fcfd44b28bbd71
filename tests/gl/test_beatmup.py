"""Beatmup run as a peer (workbench.gl.beatmup), where `make beatmup` built it.

References: bicubic (an upscale that is no copy of its input beats nothing by much: it must
come within a few dB of bicubic and above it on a natural photo), Beatmup's own model file
read by the importer (its top-1 on the same pixels), glslangValidator on a captured program,
the programs' count in its source tree (32 x2 shader files), and the
numbers vc4 gave for them when they were measured by hand (24,357 estimated cycles).
"""
import os
import shutil
import subprocess

import numpy as np
import pytest
from skimage import data

from workbench.data import images, metrics
from workbench.gl import beatmup, drivers
from workbench.nets import beatmup_model

built = pytest.mark.skipif(beatmup.available() is not None, reason=beatmup.available() or "")


def test_parse_dump_unescapes_the_sources_and_pairs_draws_with_viewports():
    """apitrace dump's text as it writes it (checked on apitrace 11: a tab kept, a carriage
    return dropped, quote and backslash escaped, a control byte in octal): the sources back
    as handed to GL, each draw with the program and viewport in force."""
    dump = "\n".join([
        '7 glShaderSource(shader = 1, count = 1, string = &"attribute vec2 p;\tvoid main()',
        '{ gl_Position = vec4(p, 0.0, 1.0); } // \\"q\\" \\\\ \\1", length = NULL)',
        '8 glShaderSource(shader = 2, count = 1, string = &"void main() {',
        '\tgl_FragColor = vec4(1.0); }", length = NULL)',
        "9 glAttachShader(program = 3, shader = 2)",
        "10 glAttachShader(program = 3, shader = 1)",
        "11 glLinkProgram(program = 3)",
        "12 glUseProgram(program = 3)",
        *[f"{13 + i} glViewport(x = 0, y = 0, width = {w}, height = {h})\n"
          f"{20 + i} glDrawArrays(mode = GL_TRIANGLE_STRIP, first = 0, count = 4)"
          for i, (w, h) in enumerate([(8, 4), (16, 8)] * 2)],
    ])
    captured = beatmup.parse_dump("X2", dump)
    vertex, fragment = captured.programs[0]
    assert vertex == ('attribute vec2 p;\tvoid main()\n{ gl_Position = vec4(p, 0.0, 1.0); } '
                      '// "q" \\ \x01')
    assert fragment == "void main() {\n\tgl_FragColor = vec4(1.0); }"
    assert captured.draws == [(0, 8, 4), (0, 16, 8)] and captured.linked == 1


def test_a_run_that_hangs_before_its_inference_is_stopped_and_one_that_fails_says_why(
        tmp_path, monkeypatch):
    """Stand-in apps (shell scripts named as its apps): Classify idle in its first pass (its
    real hang: a progress bar short of full, no CPU time) is stopped and retried, then one
    line; an app that exits non-zero gives its code and last lines."""
    monkeypatch.setenv("WORKBENCH_BEATMUP", str(tmp_path))
    monkeypatch.setattr(beatmup, "STALL_S", 1)
    monkeypatch.setattr(beatmup, "ATTEMPTS", 2)
    (tmp_path / "build").mkdir()
    apps = {"Classify": 'echo "First pass:"; echo x >> "$0.count"; exec sleep 60',
            "X2": 'echo "Compiling shaders..."; echo "Cannot open in.bmp" >&2; exit 3'}
    for app, body in apps.items():
        (tmp_path / "build" / app).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / "build" / app).chmod(0o755)
    with pytest.raises(beatmup.BeatmupError, match="Classify hung 2 times"):
        beatmup._run(["Classify", "listing.txt"], tmp_path)
    assert (tmp_path / "build" / "Classify.count").read_text() == "x\nx\n"
    with pytest.raises(beatmup.BeatmupError,
                       match=r"X2 failed \(exit 3\): Compiling shaders... \| Cannot open in.bmp"):
        beatmup._run(["X2", "in.bmp", "out.bmp", 1], tmp_path)


@built
def test_x2_upscales_a_photo_better_than_bicubic():
    hr = images.modcrop(data.astronaut()[100:228, 150:278].astype(np.float32) / 255, 2)
    lr = images.degrade(hr, 2, "bicubic_aa")
    result = beatmup.upscale([images.to_uint8(lr)], repeat=2)[0]
    assert result.image.shape == (128, 128, 3) and result.image.dtype == np.uint8
    assert len(result.times_ms) == 2 and all(t > 0 for t in result.times_ms)
    ours = metrics.psnr(hr, result.image.astype(np.float32) / 255, 2, "studio")
    bicubic = metrics.psnr(hr, images.upscale_bicubic(lr, 2), 2, "studio")
    assert bicubic + 0.3 < ours < bicubic + 5


@built
def test_classify_gives_the_probabilities_its_model_file_gives():
    """The app and the importer's TF model on the same pixels: the same top-1."""
    pictures = [data.chelsea(), data.coffee()]
    result = beatmup.classify(pictures)
    assert result.probs.shape == (2, 120) and result.accuracy is None
    np.testing.assert_allclose(result.probs.sum(1), 1, atol=1e-3)
    model = beatmup_model.load(beatmup.model_file())
    x = np.stack([beatmup_model.sample(p, model.beatmup_input) for p in pictures]) / 255
    tf_probs = model.predict(x.astype(np.float32), verbose=0)
    assert list(result.probs.argmax(1)) == list(tf_probs.argmax(1))
    assert np.abs(result.probs - tf_probs).max() < 0.1
    top = list(tf_probs.argmax(1))  # the app's own top-1 count, one chunk a picture
    labelled = beatmup.classify(pictures, chunk=1, labels=[top[0], (top[1] + 1) % 120])
    assert labelled.accuracy == 0.5 and np.array_equal(labelled.probs, result.probs)
    timed = beatmup.classify_timed(pictures[0])
    assert len(timed.times_ms) == 10 and timed.probs.argmax() == result.probs[0].argmax()


@pytest.fixture(scope="module")
def x2_capture():
    return beatmup.capture("X2", data.astronaut()[:64, :64])


@built
def test_capture_finds_the_x2_programs_and_draws(x2_capture, tmp_path):
    shaders = beatmup.build_dir() / "core" / "bitmap" / "resampler_cnn_x2" / "gles20"
    files = sorted(shaders.glob("*.glsl"))
    assert len(x2_capture.programs) == len(files) == 32  # 31 layer programs and the demux
    assert len(x2_capture.draws) == 32 and x2_capture.linked == 32
    assert {(w, h) for _, w, h in x2_capture.draws} == {(64, 64), (128, 128)}
    if shutil.which("glslangValidator") and not os.environ.get("WORKBENCH_SKIP_GLSLANG"):
        fragment = x2_capture.programs[0][1]
        (tmp_path / "p.frag").write_text(fragment)
        proc = subprocess.run(["glslangValidator", "-S", "frag", str(tmp_path / "p.frag")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


@built
@pytest.mark.skipif(drivers.available() is not None, reason=drivers.available() or "")
def test_its_x2_programs_through_vc4(x2_capture):
    reports = beatmup.compile_captured("vc4", x2_capture)
    assert all(r.ok for r in reports)
    assert sum(r.stats["estimated_cycles"] for r in reports) == 24_357
    assert {r.stats["threads"] for r in reports} == {2}
