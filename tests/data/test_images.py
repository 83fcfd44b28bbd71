import os
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from workbench.data.images import (
    KERNELS,
    SAVE_FORMATS,
    ImageError,
    check_output_path,
    degrade,
    imresize,
    load_image,
    modcrop,
    rgb_to_y,
    rgb_to_ycbcr,
    round_8bit,
    save_image,
    to_float,
    to_uint8,
    upscale_bicubic,
    upscale_bilinear,
    ycbcr_to_rgb,
)

SHARED_SR = Path(__file__).resolve().parents[3] / "shared" / "data" / "sr"
RNG = np.random.default_rng(0)


def smooth_image(h, w, c=3):
    """A smooth test picture (sums of low-frequency sines), float32 in [0, 1]."""
    y, x = np.mgrid[0:h, 0:w] / np.float32(max(h, w))
    chans = [0.5 + 0.4 * np.sin(5 * x + 3 * y + k) * np.cos(4 * y - 2 * x + k) for k in range(c)]
    return np.stack(chans, axis=-1).astype(np.float32)


def write_png16(path, samples, colour_type, exif=b""):
    """A minimal 16-bit PNG writer (Pillow cannot write 48-bit RGB): colour_type 0 grey, 2 RGB;
    exif: the raw EXIF (TIFF) bytes of an eXIf chunk."""
    h, w = samples.shape[:2]
    raw = b"".join(b"\0" + samples[i].astype(">u2").tobytes() for i in range(h))

    def chunk(kind, data):
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0)
    Path(path).write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + (chunk(b"eXIf", exif) if exif else b"")
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


# --------------------------------------------------------------------------- load / save


def test_load_rgb_png_exact(tmp_path):
    pixels = RNG.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    img = load_image(tmp_path / "a.png")
    assert img.dtype == np.float32 and img.shape == (7, 9, 3)
    np.testing.assert_array_equal(img, pixels / np.float32(255))


def test_load_greyscale_replicated(tmp_path):
    pixels = RNG.integers(0, 256, (5, 6), dtype=np.uint8)
    Image.fromarray(pixels, "L").save(tmp_path / "g.png")
    img = load_image(tmp_path / "g.png")
    assert img.shape == (5, 6, 3)
    for c in range(3):
        np.testing.assert_array_equal(img[..., c], pixels / np.float32(255))


def test_load_rgba_composited_on_white_with_warning(tmp_path):
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., 0] = 255  # red
    rgba[..., 3] = [[255, 0], [51, 255]]  # opaque, transparent, 20 %, opaque
    Image.fromarray(rgba, "RGBA").save(tmp_path / "t.png")
    with pytest.warns(UserWarning, match=r"t\.png.*white"):
        img = load_image(tmp_path / "t.png")
    np.testing.assert_allclose(img[0, 0], [1, 0, 0])
    np.testing.assert_allclose(img[0, 1], [1, 1, 1])
    np.testing.assert_allclose(img[1, 0], [1, 0.8, 0.8], atol=1e-6)


def test_load_palette_and_palette_transparency(tmp_path):
    pal = Image.new("P", (3, 1))
    pal.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    pal.putdata([0, 1, 0])
    pal.save(tmp_path / "p.png")
    img = load_image(tmp_path / "p.png")
    np.testing.assert_array_equal(img[0], [[1, 0, 0], [0, 0, 1], [1, 0, 0]])
    pal.save(tmp_path / "pt.png", transparency=1)
    with pytest.warns(UserWarning, match=r"pt\.png"):
        img = load_image(tmp_path / "pt.png")
    np.testing.assert_array_equal(img[0], [[1, 0, 0], [1, 1, 1], [1, 0, 0]])


def test_load_opaque_rgba_does_not_warn(tmp_path):
    Image.new("RGBA", (2, 2), (10, 20, 30, 255)).save(tmp_path / "o.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        img = load_image(tmp_path / "o.png")
    np.testing.assert_allclose(img[0, 0], np.array([10, 20, 30]) / 255)


def test_load_16bit_grey(tmp_path):
    samples = np.array([[0, 1, 257], [32768, 65534, 65535]], np.uint16)
    Image.fromarray(samples).save(tmp_path / "g16.png")  # Pillow writes I;16 as 16-bit PNG
    with pytest.warns(UserWarning, match=r"g16\.png.*16-bit image converted to float"):
        img = load_image(tmp_path / "g16.png")
    assert img.shape == (2, 3, 3)
    np.testing.assert_allclose(img[..., 1], samples / 65535, rtol=1e-6)


def test_load_16bit_rgb_keeps_all_16_bits(tmp_path):
    samples = RNG.integers(0, 65536, (4, 5, 3)).astype(np.uint16)
    write_png16(tmp_path / "rgb48.png", samples, colour_type=2)
    with pytest.warns(UserWarning, match=r"rgb48\.png.*16-bit"):
        img = load_image(tmp_path / "rgb48.png")
    np.testing.assert_allclose(img, samples / 65535, rtol=1e-6)  # not just the high byte


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.png"):
        load_image(tmp_path / "nothere.png")


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"this is not an image", id="text"),
        pytest.param(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, id="corrupt-png"),
    ],
)
def test_load_not_an_image(tmp_path, content):
    (tmp_path / "bad.png").write_bytes(content)
    with pytest.raises(ImageError, match="bad.png"):
        load_image(tmp_path / "bad.png")


def test_load_truncated_png(tmp_path):
    Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="cut.png"):
        load_image(tmp_path / "cut.png")


def test_save_round_trip_and_rounding(tmp_path):
    img = np.array([[[0.0, 0.5, 1.0], [0.1 / 255, 0.6 / 255, 2.0]]], np.float32)
    save_image(tmp_path / "sub" / "dir" / "x.png", img)  # parents created
    with Image.open(tmp_path / "sub" / "dir" / "x.png") as im:
        back = np.asarray(im)
    np.testing.assert_array_equal(back, [[[0, 128, 255], [0, 1, 255]]])
    assert [p.name for p in (tmp_path / "sub" / "dir").iterdir()] == ["x.png"]  # no temp left


def test_save_grey_and_uint8(tmp_path):
    grey = RNG.integers(0, 256, (4, 3), dtype=np.uint8)
    save_image(tmp_path / "g.png", grey)
    with Image.open(tmp_path / "g.png") as im:
        assert im.mode == "L"
    np.testing.assert_array_equal(load_image(tmp_path / "g.png")[..., 2], grey / np.float32(255))


def test_save_nan_names_file_and_leaves_nothing(tmp_path):
    """NaN was written as 0 (black) without a word."""
    img = np.full((2, 2, 3), 0.5, np.float32)
    img[0, 0, 1] = np.nan
    with pytest.raises(ImageError, match=r"nan.png: the image has 1 NaN or infinite values"):
        save_image(tmp_path / "nan.png", img)
    assert list(tmp_path.iterdir()) == []


def test_save_bad_shape_names_file_and_leaves_nothing(tmp_path):
    with pytest.raises(ImageError, match="four.png"):
        save_image(tmp_path / "four.png", np.zeros((2, 2, 4)))
    assert list(tmp_path.iterdir()) == []


# EXIF orientation: how the stored pixels must be turned for display (EXIF 2.3, tag 0x0112).
DISPLAY = {
    1: lambda a: a,
    2: np.fliplr,  # mirrored left-right
    3: lambda a: np.rot90(a, 2),  # upside down
    4: np.flipud,  # mirrored top-bottom
    5: lambda a: np.rot90(np.fliplr(a), 1),  # mirrored, then turned 90 degrees anticlockwise
    6: lambda a: np.rot90(a, -1),  # turned 90 degrees clockwise (a phone held upright)
    7: lambda a: np.rot90(np.fliplr(a), -1),  # mirrored, then turned 90 degrees clockwise
    8: lambda a: np.rot90(a, 1),  # turned 90 degrees anticlockwise
}


def exif_bytes(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


@pytest.mark.parametrize("orientation", sorted(DISPLAY))
def test_load_applies_exif_orientation(tmp_path, orientation):
    pixels = RNG.integers(0, 256, (3, 5, 3), dtype=np.uint8)  # not square: the shape turns too
    Image.fromarray(pixels).save(tmp_path / "o.png", exif=exif_bytes(orientation))
    np.testing.assert_array_equal(to_uint8(load_image(tmp_path / "o.png")),
                                  DISPLAY[orientation](pixels))


@pytest.mark.parametrize("orientation", [3, 6, 7])
def test_load_applies_exif_orientation_to_16bit_rgb_png(tmp_path, orientation):
    samples = RNG.integers(0, 65536, (3, 5, 3)).astype(np.uint16)
    write_png16(tmp_path / "o48.png", samples, 2, exif=exif_bytes(orientation)[6:])  # no "Exif\0\0"
    with pytest.warns(UserWarning, match="16-bit"):
        img = load_image(tmp_path / "o48.png")
    np.testing.assert_allclose(img, DISPLAY[orientation](samples) / 65535, rtol=1e-6)


def test_load_exif_orientation_of_a_jpeg(tmp_path):
    pixels = np.zeros((16, 32, 3), np.uint8)
    pixels[:, :16] = 255  # left half white
    Image.fromarray(pixels).save(tmp_path / "phone.jpg", exif=exif_bytes(6), quality=95)
    img = load_image(tmp_path / "phone.jpg")
    assert img.shape == (32, 16, 3)  # turned clockwise: the white half is now on top
    assert img[:14].min() > 0.9 and img[18:].max() < 0.1


def test_load_32bit_integer_tiff_keeps_its_range(tmp_path):
    samples = np.array([[0, 1, 65535], [65536, 100000, 2**31 - 1]], np.int32)
    Image.fromarray(samples).save(tmp_path / "i32.tif")
    with pytest.warns(UserWarning, match=r"i32\.tif: 32-bit image converted to float") as w:
        img = load_image(tmp_path / "i32.tif")
    assert not any("16-bit" in str(x.message) for x in w)
    np.testing.assert_allclose(img[..., 0], samples / (2**32 - 1), rtol=1e-6)
    assert len(np.unique(img[1, :, 0])) == 3  # 65536, 100000 and 2**31 - 1 are not all one value


def test_load_32bit_integer_tiff_with_negative_samples_is_refused(tmp_path):
    Image.fromarray(np.array([[-5, 7]], np.int32)).save(tmp_path / "neg.tif")
    with pytest.raises(ImageError, match=r"neg\.tif: 32-bit integer samples range over \[-5, 7\]"):
        load_image(tmp_path / "neg.tif")


def test_load_float_tiff_as_is(tmp_path):
    samples = np.array([[0.0, 0.25, 1 / 3], [0.5, 0.123456, 1.0]], np.float32)
    Image.fromarray(samples).save(tmp_path / "f32.tif")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "16-bit" or other warning
        img = load_image(tmp_path / "f32.tif")
    assert img.shape == (2, 3, 3)
    np.testing.assert_array_equal(img[..., 2], samples)


def test_load_float_tiff_out_of_range_names_file_and_range(tmp_path):
    Image.fromarray(np.array([[-0.5, 2.5]], np.float32)).save(tmp_path / "hdr.tif")
    with pytest.raises(ImageError, match=r"hdr\.tif: floating-point samples range over \[-0.5, 2.5\]"):
        load_image(tmp_path / "hdr.tif")


def test_save_format_follows_extension(tmp_path):
    img = smooth_image(32, 48)
    for name, fmt in [("a.png", "PNG"), ("b.jpg", "JPEG"), ("c.JPEG", "JPEG")]:
        save_image(tmp_path / name, img)
        with Image.open(tmp_path / name) as im:
            assert im.format == fmt, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.jpg", "c.JPEG"]


def test_save_jpeg_quality(tmp_path):
    img = smooth_image(64, 64)
    save_image(tmp_path / "low.jpg", img, quality=10)
    save_image(tmp_path / "high.jpg", img, quality=95)
    err = {q: np.abs(load_image(tmp_path / f"{q}.jpg") - round_8bit(img)).mean()
           for q in ("low", "high")}
    assert err["high"] < err["low"] / 2, err
    assert (tmp_path / "high.jpg").stat().st_size > (tmp_path / "low.jpg").stat().st_size
    for bad in (0, 101, "high", 9.5, True):
        with pytest.raises(ImageError, match=rf"q\.jpg: quality={bad!r}"):
            save_image(tmp_path / "q.jpg", img, quality=bad)
    assert not (tmp_path / "q.jpg").exists()


@pytest.mark.parametrize("name", ["x.bmp", "x.tif", "x.txt", "noext"])
def test_save_unknown_extension_names_file_and_supported(tmp_path, name):
    with pytest.raises(ImageError) as e:
        save_image(tmp_path / name, np.zeros((2, 2, 3)))
    assert str(tmp_path / name) in str(e.value)
    assert all(ext in str(e.value) for ext in SAVE_FORMATS)
    assert list(tmp_path.iterdir()) == []


def test_check_output_path_refuses_an_input(tmp_path):
    src = tmp_path / "in.png"
    Image.new("RGB", (4, 4), (1, 2, 3)).save(src)
    os.symlink(src, tmp_path / "link.png")
    os.link(src, tmp_path / "hard.png")
    for out in [src, tmp_path / "link.png", tmp_path / "hard.png", tmp_path / "sub" / ".." / "in.png"]:
        with pytest.raises(ImageError, match=rf"{out}: is the input {src}; .*another output"):
            check_output_path(out, [tmp_path / "other.png", src])
    assert check_output_path(tmp_path / "out.png", [src]) == tmp_path / "out.png"
    assert check_output_path(tmp_path / "out.png", str(src)) == tmp_path / "out.png"
    (tmp_path / "sub").mkdir()
    before = src.read_bytes()
    with pytest.raises(ImageError, match="is the input"):
        save_image(tmp_path / "link.png", np.zeros((4, 4, 3)), inputs=[src])
    assert src.read_bytes() == before
    save_image(tmp_path / "out.png", np.zeros((4, 4, 3)), inputs=[src])


def test_to_uint8_and_to_float():
    np.testing.assert_array_equal(to_uint8(np.array([-1, 0, 0.5 / 255, 1.5 / 255, 0.999, 7])),
                                  [0, 0, 0, 2, 255, 255])
    u = np.arange(256, dtype=np.uint8)
    f = to_float(u)
    assert f.dtype == np.float32 and f[255] == 1
    np.testing.assert_array_equal(to_uint8(f), u)
    assert to_float(np.float64(0.25) * np.ones(2)).dtype == np.float32


def test_modcrop():
    assert modcrop(np.zeros((37, 53, 3)), 3).shape == (36, 51, 3)
    assert modcrop(np.zeros((8, 8)), 4).shape == (8, 8)
    with pytest.raises(ImageError, match="scale=4"):
        modcrop(np.zeros((3, 9)), 4)


# --------------------------------------------------------------------------- colour


@pytest.mark.parametrize("rng_name", ["studio", "full"])
def test_ycbcr_round_trip(rng_name):
    img = RNG.random((16, 16, 3)).astype(np.float32)
    back = ycbcr_to_rgb(rgb_to_ycbcr(img, range=rng_name), range=rng_name)
    np.testing.assert_allclose(back, img, atol=1e-6)


def test_studio_range_white_black_and_full_range_y():
    rgb = np.array([[[1, 1, 1], [0, 0, 0], [1, 0, 0]]], np.float32)
    np.testing.assert_allclose(rgb_to_y(rgb)[0, :2], [235 / 255, 16 / 255], atol=1e-6)
    np.testing.assert_allclose(rgb_to_ycbcr(rgb)[0, 1, 1:], [128 / 255] * 2, atol=1e-6)
    np.testing.assert_allclose(rgb_to_y(rgb, range="full")[0], [1, 0, 0.299], atol=1e-6)
    np.testing.assert_allclose(rgb_to_ycbcr(rgb, range="full")[0, 2], [0.299, 0.5 - 0.168736, 1.0],
                               atol=1e-6)


def test_studio_range_matches_skimage():
    from skimage.color import rgb2ycbcr

    img = RNG.random((8, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(rgb_to_ycbcr(img) * 255, rgb2ycbcr(img), atol=1e-3)


def test_colour_bad_inputs():
    with pytest.raises(ImageError, match="range='bt709'"):
        rgb_to_y(np.zeros((2, 2, 3)), range="bt709")
    with pytest.raises(ImageError, match="img"):
        rgb_to_ycbcr(np.zeros((2, 2)))


# --------------------------------------------------------------------------- imresize

# MATLAB's bicubic (a = -0.5) at distances 0.25, 0.75, 1.25, 1.75: exact dyadic values.
C025, C075, C125, C175 = 0.8671875, 0.2265625, -0.0703125, -0.0234375


def test_imresize_x2_down_matches_matlab_weights_with_symmetric_border():
    x = RNG.random(16)
    img = np.repeat(x[:, None], 6, axis=1)  # varies along H only
    # x1/2 antialiased: kernel stretched to 8 taps, output i centred between inputs 2i and 2i+1.
    w = np.array([C175, C125, C075, C025, C025, C075, C125, C175]) / 2
    padded = np.pad(x, 3, mode="symmetric")  # MATLAB mirrors as x[-1] = x[0]
    expected = np.array([padded[2 * i : 2 * i + 8] @ w for i in range(8)])
    np.testing.assert_allclose(imresize(img, 0.5)[:, 0], expected, atol=1e-6)


def test_imresize_x2_up_matches_matlab_weights():
    x = RNG.random(10)
    padded = np.pad(x, 2, mode="symmetric")
    even = [padded[i : i + 4] @ [C175, C075, C025, C125] for i in range(10)]  # centre i - 1/4
    odd = [padded[i + 1 : i + 5] @ [C125, C025, C075, C175] for i in range(10)]  # centre i + 1/4
    expected = np.stack([even, odd], axis=1).ravel()
    np.testing.assert_allclose(imresize(x[None, :], 2)[0], expected, atol=1e-6)


@pytest.mark.parametrize("out_shape", [(20, 26), (10, 13), (15, 19), (80, 104), (120, 91)])
def test_imresize_matches_pillow_bicubic_inside(out_shape):
    """Pillow's BICUBIC is the same a=-0.5 antialiased kernel; it renormalises at borders where
    MATLAB mirrors, so only pixels whose kernel stays inside the image agree."""
    img = RNG.random((40, 52)).astype(np.float32)
    ours = imresize(img, output_shape=out_shape)
    ref = np.asarray(Image.fromarray(img, "F").resize(out_shape[::-1], Image.BICUBIC))
    b = int(np.ceil(2 * max(out_shape[0] / 40, out_shape[1] / 52, 1))) + 1  # output pixels
    np.testing.assert_allclose(ours[b:-b, b:-b], ref[b:-b, b:-b], atol=1e-5)


def test_imresize_constant_channels_and_shapes():
    img = np.full((9, 11, 2), 0.3, np.float32)
    np.testing.assert_allclose(imresize(img, 1 / 3), 0.3, atol=1e-6)
    assert imresize(img, 1 / 3).shape == (3, 4, 2)  # ceil(scale * size), as MATLAB
    rgb = smooth_image(12, 10)
    both = imresize(rgb, 2)
    for c in range(3):
        np.testing.assert_array_equal(both[..., c], imresize(rgb[..., c], 2))
    with pytest.raises(ImageError, match="exactly one"):
        imresize(rgb)


def test_bicubic_aa_round_trip():
    img = smooth_image(96, 120)
    back = upscale_bicubic(degrade(img, 2, "bicubic_aa"), 2)
    assert back.shape == img.shape and back.min() >= 0 and back.max() <= 1
    np.testing.assert_allclose(back, img, atol=0.02)
    np.testing.assert_array_equal(np.round(back * 255), back * 255)  # 8-bit levels


# Published bicubic x2 PSNR (Y of studio-range YCbCr, border 2) of Set5 (e.g. SRCNN, VDSR tables):
SET5_BICUBIC_X2 = {"baby": 37.07, "bird": 36.81, "butterfly": 27.43, "head": 34.86, "woman": 32.14}


@pytest.mark.skipif(not (SHARED_SR / "Set5").is_dir(), reason="shared SR data not present")
def test_set5_bicubic_psnr_matches_published_tables():
    for name, published in SET5_BICUBIC_X2.items():
        hr = modcrop(load_image(SHARED_SR / "Set5" / f"{name}.png"), 2)
        sr = upscale_bicubic(degrade(hr, 2, "bicubic_aa"), 2)
        diff = (rgb_to_y(hr) - rgb_to_y(sr))[2:-2, 2:-2] * 255
        psnr = 10 * np.log10(255**2 / np.mean(diff.astype(np.float64) ** 2))
        assert psnr == pytest.approx(published, abs=0.05), name


# --------------------------------------------------------------------------- degrade / upscale


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("scale", [2, 3, 4])
def test_degrade_shapes_after_modcrop(kernel, scale):
    hr = modcrop(smooth_image(37, 53), scale)
    lr = degrade(hr, scale, kernel)
    assert lr.shape == (37 // scale, 53 // scale, 3) and lr.dtype == np.float32
    np.testing.assert_array_equal(np.round(lr * 255), lr * 255)  # quantized to 8-bit levels
    grey = degrade(hr[..., 0], scale, kernel, quantize=False)
    np.testing.assert_allclose(grey, lr[..., 0], atol=0.5 / 255 + 1e-6)


def test_degrade_nonantialiased_kernels_at_x2():
    """At x2 with half-pixel centres every LR pixel sits between 2x2 HR pixels."""
    hr = RNG.random((16, 20)).astype(np.float32)
    box = hr.reshape(8, 2, 10, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(degrade(hr, 2, "bilinear", quantize=False), box, atol=1e-6)
    # Keys' cubic with a = -0.5 at distances 0.5 and 1.5 (a = -0.75, OpenCV, would give 0.59375).
    w = np.array([-0.0625, 0.5625, 0.5625, -0.0625])
    rows = np.einsum("k,ikj->ij", w, np.stack([hr[k + 1 : k + 12 : 2] for k in range(4)], axis=1))
    cols = np.stack([rows[:, k + 1 : k + 16 : 2] for k in range(4)], axis=-1)
    expected = np.einsum("k,ijk->ij", w, cols)
    np.testing.assert_allclose(
        degrade(hr, 2, "bicubic", quantize=False)[1:-1, 1:-1], expected, atol=1e-5
    )


def test_degrade_bad_inputs():
    with pytest.raises(ImageError, match="bicubic_aa.*bilinear.*bicubic.*lanczos"):
        degrade(np.zeros((8, 8, 3)), 2, "nearest")
    with pytest.raises(ImageError, match=r"kernel='bicubic', scale=3.*modcrop"):
        degrade(np.zeros((10, 9, 3)), 3, "bicubic")
    with pytest.raises(ImageError, match=r"kernel='lanczos', scale=2.*smaller"):
        degrade(np.zeros((4, 4, 3)), 2, "lanczos")
    with pytest.raises(ImageError, match=r"kernel='bicubic_aa', scale=4.*smaller"):
        degrade(np.zeros((12, 12, 3)), 4, "bicubic_aa")


def test_upscale_bilinear_is_gl_linear():
    lr = RNG.random((6, 7, 3)).astype(np.float32)
    up = upscale_bilinear(lr, 2)
    assert up.shape == (12, 14, 3) and up.dtype == np.float32
    # Output pixel 2i+1 samples at LR coordinate i + 1/4: 3/4 of pixel i, 1/4 of pixel i+1.
    rows = 0.75 * lr[:-1] + 0.25 * lr[1:]
    expected = 0.75 * rows[:, :-1] + 0.25 * rows[:, 1:]
    np.testing.assert_allclose(up[1:-1:2, 1:-1:2], expected, atol=1e-6)


def test_inputs_are_named_for_what_they_are(tmp_path):
    """A folder, a FIFO, a link loop and a device all said "no such image file"; an animated
    GIF was read from its first frame without a word."""
    import os

    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for path, says in ((tmp_path / "dir", "is a folder"), (tmp_path / "fifo", "is a pipe"),
                       (tmp_path / "loop", "a symbolic link that leads nowhere"),
                       ("/dev/zero", "is a device"), (tmp_path / "none.png", "no such image")):
        with pytest.raises(FileNotFoundError, match=f"{path}: {says}"):
            load_image(path)
    frames = [Image.new("RGB", (4, 4), c) for c in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    with pytest.warns(UserWarning, match=r"a.gif: 2 frames \(an animation\?\); the first is read"):
        first = load_image(tmp_path / "a.gif")
    assert first[0, 0, 0] > first[0, 0, 2]
