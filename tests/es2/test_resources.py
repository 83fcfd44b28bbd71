"""One memory estimate, from shapes alone, before anything is decoded, calibrated or listed,
against the least of MemAvailable and the process's own limits (issue 58):
:func:`workbench.data.memory.available_bytes` and :func:`~workbench.data.memory.require_bytes`.
"""
import re
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from PIL import Image, ImageFile

from workbench.data import memory

GB = 10 ** 9


def _limited(argv, address_space, timeout=120):
    """``python argv`` under ``ulimit -v address_space``: (return code, stderr, seconds)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], preexec_fn=limit, capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stderr, time.perf_counter() - start


def _budget(monkeypatch, nbytes, limit="ulimit -v"):
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.Bytes(nbytes, limit))


def test_the_budget_is_the_process_limit_under_ulimit_v():
    """MemAvailable was the budget whatever the process's own limit."""
    code, err, _ = _limited(["-c", "from workbench.data import memory; b = "
                             "memory.available_bytes(); assert b.limit == 'ulimit -v', b.limit; "
                             "assert 0 < b < 3e9, b"], 3 * GB)
    assert code == 0, err


@pytest.fixture(scope="module")
def shader_folder(tmp_path_factory):
    from workbench import es2
    from workbench.nets.models import sr_x2
    folder = tmp_path_factory.mktemp("sr") / "net"
    es2.compile(sr_x2()).save(folder)
    return folder


def _one_error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "MemoryError" not in err, err
    return lines[-1]


def test_upscale_under_ulimit_v_is_refused_in_one_line_before_it_runs(shader_folder, tmp_path):
    """A 6000x6000 upscale passed the check (MemAvailable) and failed after 113 s."""
    source = tmp_path / "big.png"
    Image.new("RGB", (6000, 6000), (90, 120, 200)).save(source)
    code, err, seconds = _limited(["-m", "workbench", "upscale", str(source),
                                   str(tmp_path / "out.png"), "--model", str(shader_folder)],
                                  3 * GB)
    line = _one_error_line(err)
    assert code != 0 and seconds < 60
    assert line.startswith("error: ") and "GB available under ulimit -v" in line, line
    assert not (tmp_path / "out.png").exists()


def test_bench_sr_under_ulimit_v_is_refused_in_one_line():
    code, err, seconds = _limited(["-m", "workbench", "bench", "sr", "--size", "3500"], 6 * GB)
    line = _one_error_line(err)
    assert code == 2 and seconds < 60
    assert line.startswith("error: a 3500x3500 input to 'sr_x2' needs about ") and \
        line.endswith("GB available under ulimit -v; give a smaller --size"), line


def test_a_large_image_is_refused_from_its_header_before_it_is_decoded(tmp_path, monkeypatch):
    """A 13000x13000 PNG was decoded (6.6 GB) before any check."""
    from workbench.data.images import load_image
    path = tmp_path / "huge.png"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        Image.new("1", (13000, 13000)).save(path)  # (a few kB: its header says 13000x13000)
    _budget(monkeypatch, 2 * GB)
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda im: pytest.fail("decoded"))
    with pytest.raises(memory.OutOfMemory, match=rf"^{path}: a 13000x13000 image needs about "
                       r"\d+\.\d GB \(decoding [\d.]+\); 2\.0 GB available under ulimit -v; "
                       "give a smaller image$"):
        load_image(path)


def test_pillows_decompression_bomb_guard_is_one_line_naming_the_file(tmp_path, monkeypatch):
    from workbench.data.images import ImageError, load_image
    path = tmp_path / "bomb.png"
    Image.new("RGB", (64, 64)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # (over twice that: an error)
    with pytest.raises(ImageError, match=rf"^{path}: refused by Pillow's decompression-bomb "
                       r"guard \(Image size \(4096 pixels\) exceeds limit"):
        load_image(path)


def _onnx(tmp_path, name, gemm):
    """A dynamic-size ONNX net: conv + ReLU + conv (calibrated), or conv + Clip(0, 1) +
    pooling + Gemm (no calibration)."""
    import onnx

    from tests.ir.onnx_graphs import Builder
    b = Builder(13)
    if gemm:
        x = b.clip01(b.conv("input", 3, 8, 3))
        x = b.linear(b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1), 8, 5)
    else:
        x = b.clip01(b.conv(b.node("Relu", [b.conv("input", 3, 8, 3)]), 8, 3, 3))
    path = tmp_path / f"{name}.onnx"
    onnx.save(b.model(3, None, x, name, rank=2 if gemm else 4), path)
    return path


def test_a_gemm_net_at_30000x30000_is_refused_before_its_pixels_are_listed(tmp_path,
                                                                           monkeypatch):
    """Its dense layer's programs listed every input pixel (6.9 GB, then MemoryError) before
    any estimate: compile without the check had none."""
    from workbench import es2
    from workbench.es2.ops.dense import Gemv
    from workbench.nets.model_files import load_model
    model = load_model(_onnx(tmp_path, "gemm", gemm=True), (30000, 30000))
    _budget(monkeypatch, 16 * GB, "MemAvailable")
    monkeypatch.setattr(Gemv, "pieces", lambda *a: pytest.fail("pixels listed"))
    with pytest.raises(memory.OutOfMemory, match=r"^a 30000x30000 input to 'gemm' needs about "
                       r"\d+\.\d GB \(programs [\d.]+\); 16\.0 GB available; give a smaller "
                       "--input-size$"):
        es2.compile(model, check=False)


def test_calibration_images_are_counted_before_they_are_made(tmp_path, monkeypatch):
    """A ReLU net was calibrated on 13.4 GB of sample images before any estimate: compile's
    estimate now counts its images (6 samples) and the check's tensors of each."""
    from workbench import es2, ir
    from workbench.es2 import plan, samples
    from workbench.es2.limits import ES2
    from workbench.es2.net import prepared
    from workbench.nets.model_files import load_model
    model = load_model(_onnx(tmp_path, "relu", gemm=False), (2000, 2000))
    graph = prepared(ir.from_model(model), ES2)
    run = sum(plan.memory_bytes(graph, (2000, 2000), plan.COMPILE_CHECKED).values())
    _budget(monkeypatch, 2 * run, "MemAvailable")  # (a run fits; six images do not)
    monkeypatch.setattr(samples, "test_images", lambda *a, **k: pytest.fail("images made"))
    with pytest.raises(memory.OutOfMemory, match=r"^a 2000x2000 input to 'relu' needs about "
                       r"[\d.]+ GB \(GL textures [\d.]+, emulator [\d.]+, reference [\d.]+\)"):
        es2.compile(model)


def test_a_calibration_source_is_counted_before_its_images_are_read(tmp_path, monkeypatch):
    from workbench.data import calibration
    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp_path / f"{i}.png")
    _budget(monkeypatch, 10 ** 6)
    monkeypatch.setattr(calibration, "load_image", lambda p: pytest.fail("read"))
    with pytest.raises(memory.OutOfMemory, match=r"^calibration '.*:3': 3 images of 400x300 "
                       r"needs about 0\.0 GB \(calibration images 0\.0\); 0\.0 GB available "
                       r"under ulimit -v; give fewer \(a count, e.g. cifar10:100\)$"):
        calibration.images(f"{tmp_path}:3", (300, 400))


def test_a_run_that_fits_only_in_tiles_is_refused_with_the_tiles_offered(monkeypatch):
    """net.run on an image whose textures do not fit: refused before any is allocated,
    offering the tiles that would fit (their count and size, as run_tiled makes them); the
    count against tiling.tiles on each axis."""
    from workbench import es2
    from workbench.es2 import plan, tiling
    from workbench.nets.models import sr_x2

    net = es2.compile(sr_x2(), check=False)
    hw = (1500, 1200)
    need = sum(plan.memory_bytes(net.graph, hw, ("GL textures",)).values())
    _budget(monkeypatch, need // 3)
    with pytest.raises(plan.OutOfMemory) as refused:
        net.run(np.zeros((*hw, 3), np.float32))
    offered = re.search(r"; in tiles it would fit: (\d+) tiles of (\d+)x\2 "
                        r"\(es2.tiling.run_tiled", str(refused.value))
    count, side = int(offered[1]), int(offered[2])
    margin = tiling.receptive_field(net.graph)
    assert side < max(hw) and sum(plan.memory_bytes(net.graph, (side, side),
                                                    ("GL textures",)).values()) <= need // 6
    assert count == len(tiling.tiles(hw[0], side, margin)) * len(tiling.tiles(hw[1], side,
                                                                             margin)) > 1
