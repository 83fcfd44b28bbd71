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

pytestmark = pytest.mark.skipif(beatmup.available() is not None,
                                reason=beatmup.available() or "")


def test_x2_upscales_a_photo_better_than_bicubic():
    hr = images.modcrop(data.astronaut()[100:228, 150:278].astype(np.float32) / 255, 2)
    lr = images.degrade(hr, 2, "bicubic_aa")
    result = beatmup.upscale([images.to_uint8(lr)], repeat=2)[0]
    assert result.image.shape == (128, 128, 3) and result.image.dtype == np.uint8
    assert len(result.times_ms) == 2 and all(t > 0 for t in result.times_ms)
    ours = metrics.psnr(hr, result.image.astype(np.float32) / 255, 2, "studio")
    bicubic = metrics.psnr(hr, images.upscale_bicubic(lr, 2), 2, "studio")
    assert bicubic + 0.3 < ours < bicubic + 5


def test_classify_gives_the_probabilities_its_model_file_gives():
    """The app and the importer's TF model on the same pixels: the same top-1."""
    pictures = [data.chelsea(), data.coffee()]
    result = beatmup.classify(pictures)
    assert result.probs.shape == (2, 120)
    np.testing.assert_allclose(result.probs.sum(1), 1, atol=1e-3)
    model = beatmup_model.load(beatmup.model_file())
    x = np.stack([beatmup_model.sample(p, model.beatmup_input) for p in pictures]) / 255
    tf_probs = model.predict(x.astype(np.float32), verbose=0)
    assert list(result.probs.argmax(1)) == list(tf_probs.argmax(1))
    assert np.abs(result.probs - tf_probs).max() < 0.1
    timed = beatmup.classify_timed(pictures[0])
    assert len(timed.times_ms) == 10 and timed.probs.argmax() == result.probs[0].argmax()


@pytest.fixture(scope="module")
def x2_capture():
    return beatmup.capture("X2", data.astronaut()[:64, :64])


def test_capture_finds_the_x2_programs_and_draws(x2_capture, tmp_path):
    shaders = beatmup.build_dir() / "core" / "bitmap" / "resampler_cnn_x2" / "gles20"
    files = sorted(shaders.glob("*.glsl"))
    assert len(x2_capture.programs) == len(files) == 32  # 31 layer programs and the demux
    assert len(x2_capture.draws) == 32
    assert {(w, h) for _, w, h in x2_capture.draws} == {(64, 64), (128, 128)}
    if shutil.which("glslangValidator") and not os.environ.get("WORKBENCH_SKIP_GLSLANG"):
        fragment = x2_capture.programs[0][1]
        (tmp_path / "p.frag").write_text(fragment)
        proc = subprocess.run(["glslangValidator", "-S", "frag", str(tmp_path / "p.frag")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


@pytest.mark.skipif(drivers.available() is not None, reason=drivers.available() or "")
def test_its_x2_programs_through_vc4(x2_capture):
    reports = beatmup.compile_captured("vc4", x2_capture)
    assert all(r.ok for r in reports)
    assert sum(r.stats["estimated_cycles"] for r in reports) == 24_357
    assert {r.stats["threads"] for r in reports} == {2}
