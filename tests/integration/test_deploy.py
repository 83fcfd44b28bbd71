"""`python -m workbench upscale` on any image: RGB, greyscale, odd sizes, too large."""

import numpy as np
import pytest
from PIL import Image

from workbench import es2
from workbench.__main__ import main
from workbench.data import images, metrics
from workbench.nets import superres
from workbench.nets.models import sr_x2


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "sr.keras"
    sr_x2().save(path)
    return path


@pytest.mark.parametrize("mode, size", [("RGB", (31, 17)), ("L", (20, 24)), ("RGBA", (9, 13))])
def test_upscale_command(tmp_path, model_path, mode, size):
    rng = np.random.default_rng(0)
    channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    Image.fromarray(pixels.squeeze(), mode).save(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
                 "--model", str(model_path)]) == 0
    out = images.load_image(tmp_path / "out.png")
    assert out.shape == (2 * size[1], 2 * size[0], 3)
    import keras
    reference = superres.upscale(keras.models.load_model(model_path),
                                 images.load_image(tmp_path / "in.png"))
    assert metrics.psnr(reference, out) >= 45  # as the deployment target: GPU vs TF


def test_upscale_from_saved_shaders(tmp_path, model_path):
    import keras
    es2.compile(keras.models.load_model(model_path)).save(tmp_path / "shaders")
    Image.fromarray(np.full((8, 8, 3), 128, np.uint8)).save(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
                 "--model", str(tmp_path / "shaders")]) == 0
    assert images.load_image(tmp_path / "out.png").shape == (16, 16, 3)


def test_upscale_with_draw_buffers_writes_the_same_bytes(tmp_path, model_path):
    # 4 render targets per program: fewer passes, the same arithmetic, the same output bytes
    pixels = np.random.default_rng(2).integers(0, 256, (12, 10, 3), np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    for n in (1, 4):
        assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / f"out{n}.png"),
                     "--model", str(model_path), "--draw-buffers", str(n)]) == 0
    one, four = (np.asarray(Image.open(tmp_path / f"out{n}.png")) for n in (1, 4))
    assert one.shape == (24, 20, 3) and np.array_equal(one, four)
    # the option reaches the compiler: a videocore4 has no GL_EXT_draw_buffers
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"), "--model",
                 str(model_path), "--device", "videocore4", "--draw-buffers", "4"]) == 2


def test_image_larger_than_the_texture_limit_runs_in_tiles(tmp_path, model_path, capsys,
                                                          monkeypatch):
    # Before: refused ("over this GPU's GL_MAX_TEXTURE_SIZE").  A GPU whose limit is 64 (the
    # worker's reported limit lowered: the runner refuses larger textures too) runs 32x32
    # tiles, below the device's 2048; the bytes are the untiled run's (on llvmpipe the
    # emulator's, exact for a random-weight net).
    from workbench import gl
    pixels = np.random.default_rng(1).integers(0, 256, (36, 40, 3), np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    with monkeypatch.context() as m:
        m.setitem(gl.worker().info, "GL_MAX_TEXTURE_SIZE", 64)
        assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
                     "--model", str(model_path), "--device", "videocore4"]) == 0
    assert ", 4 tiles" in capsys.readouterr().out
    if "llvmpipe" in gl.info()["GL_RENDERER"]:
        net, _ = es2.load_net(model_path)
        untiled = images.to_uint8(net.emulate(pixels / np.float32(255)))
        assert np.array_equal(np.asarray(Image.open(tmp_path / "out.png")), untiled)


def test_missing_model_is_named(tmp_path, capsys):
    _photo(tmp_path / "in.png")  # (a missing input is named first, before the net loads)
    argv = ["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
            "--model", str(tmp_path / "nope.keras")]
    assert main(argv) == 2
    assert "nope.keras" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="nope.keras"):  # --debug: the traceback
        main(["--debug", *argv])


def _photo(path, size=(8, 6)):
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (*size, 3), np.uint8)).save(path)
    return path.read_bytes()


@pytest.mark.parametrize("output", ["same", "dot", "link"])
def test_upscale_refuses_to_overwrite_its_input(tmp_path, model_path, capsys, monkeypatch, output):
    photo = tmp_path / "photo.png"
    before = _photo(photo)
    if output == "link":
        (tmp_path / "link.png").symlink_to(photo)
    monkeypatch.chdir(tmp_path)
    target = {"same": str(photo), "dot": "./photo.png", "link": "link.png"}[output]
    assert main(["upscale", str(photo), target, "--model", str(model_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "overwrite the input" in err
    assert photo.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["photo.png"] + (["link.png"] if output == "link" else []))


def test_upscale_output_format_follows_the_extension(tmp_path, model_path, capsys):
    _photo(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.bmp"),
                 "--model", str(model_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out.bmp: cannot save as '.bmp'" in err
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.jpg"),
                 "--model", str(model_path), "--quality", "0"]) == 2
    assert "quality=0" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.png"]
    for quality in (10, 95):
        assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / f"q{quality}.jpg"),
                     "--model", str(model_path), "--quality", str(quality)]) == 0
        with Image.open(tmp_path / f"q{quality}.jpg") as im:
            assert im.format == "JPEG" and im.size == (12, 16)
    assert (tmp_path / "q10.jpg").stat().st_size < (tmp_path / "q95.jpg").stat().st_size


def test_corrupt_model_is_reported_as_corrupt(tmp_path, model_path, capsys):
    (tmp_path / "bad.keras").write_bytes(model_path.read_bytes()[:1000])
    _photo(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
                 "--model", str(tmp_path / "bad.keras")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'bad.keras'}: corrupt or truncated .keras model (not a zip archive)\n"
    assert not (tmp_path / "out.png").exists()


def test_upscale_takes_many_images_and_their_ground_truths(tmp_path, capsys):
    """``upscale a.png folder/ 'glob*' out/ --reference hr/``: one start-up, an output each
    (<name>.png), each PSNR (Y601, studio range) the same as data.metrics gives for the file
    written; the first run said apart from the steady state."""
    from workbench.data import metrics
    from workbench.nets.models import reference_sr

    hr_dir, lr_dir = tmp_path / "hr", tmp_path / "lr"
    hr_dir.mkdir(), lr_dir.mkdir()
    rng = np.random.default_rng(3)
    for name in ("a", "b", "c"):
        hr = images.round_8bit(images.imresize(rng.random((12, 14, 3)), output_shape=(48, 56)))
        images.save_image(hr_dir / f"{name}.png", hr)
        images.save_image(lr_dir / f"{name}.png", images.degrade(hr, 2, "bicubic_aa"))
    assert main(["upscale", str(lr_dir / "a.png"), str(lr_dir / "[bc].png"), str(tmp_path / "up"),
                 "--reference", str(hr_dir), "--model", str(reference_sr())]) == 0
    out = capsys.readouterr().out
    assert "first run" in out and out.count("steady state") == 3  # two images, the summary
    for name in ("a", "b", "c"):
        written = images.load_image(tmp_path / "up" / f"{name}.png")
        db = metrics.psnr(images.load_image(hr_dir / f"{name}.png"), written, 2, "studio")
        assert f"{db:.2f} dB" in out
