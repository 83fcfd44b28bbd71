"""Metrics against scikit-image's implementations on the same arrays."""
import numpy as np
import pytest
from skimage.color import rgb2ycbcr
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from workbench.data.metrics import psnr, ssim


@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    noise = rng.normal(0, 6, ref.shape)
    out = np.clip(ref + noise, 0, 255).astype(np.uint8)
    return ref, out


def test_psnr_matches_skimage_rgb(pair):
    ref, out = pair
    want = peak_signal_noise_ratio(ref, out, data_range=255)
    assert psnr(ref, out) == pytest.approx(want, abs=1e-9)
    # float [0,1] input gives the same number as uint8
    assert psnr(ref / 255.0, out / 255.0) == pytest.approx(want, abs=1e-9)


def test_psnr_studio_y_matches_skimage_ycbcr_with_crop(pair):
    ref, out = pair
    y_ref = rgb2ycbcr(ref)[4:-4, 4:-4, 0]
    y_out = rgb2ycbcr(out)[4:-4, 4:-4, 0]
    want = peak_signal_noise_ratio(y_ref, y_out, data_range=255)
    assert psnr(ref, out, crop_border=4, y_channel="studio") == pytest.approx(want, abs=1e-9)


def test_full_range_y_is_studio_plus_constant(pair):
    # Studio Y = 16 + 219/255 * full Y, so the MSE scales by (219/255)^2 exactly.
    ref, out = pair
    diff = psnr(ref, out, 2, "studio") - psnr(ref, out, 2, "full")
    assert diff == pytest.approx(20 * np.log10(255 / 219), abs=1e-6)


def test_ssim_matches_skimage_grey_and_rgb(pair):
    ref, out = pair
    kw = dict(data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False)
    want_grey = structural_similarity(ref[..., 0].astype(float), out[..., 0].astype(float), **kw)
    assert ssim(ref[..., 0], out[..., 0]) == pytest.approx(want_grey, abs=1e-9)
    want_rgb = structural_similarity(ref.astype(float), out.astype(float), channel_axis=2, **kw)
    assert ssim(ref, out) == pytest.approx(want_rgb, abs=1e-9)


def test_ssim_y_with_crop_matches_skimage(pair):
    ref, out = pair
    y_ref = rgb2ycbcr(ref)[2:-2, 2:-2, 0]
    y_out = rgb2ycbcr(out)[2:-2, 2:-2, 0]
    want = structural_similarity(y_ref, y_out, data_range=255, gaussian_weights=True,
                                 sigma=1.5, use_sample_covariance=False)
    assert ssim(ref, out, crop_border=2, y_channel="studio") == pytest.approx(want, abs=1e-9)


def test_identical_images():
    img = np.full((16, 16, 3), 0.5)
    assert psnr(img, img) == float("inf")
    assert ssim(img, img) == pytest.approx(1.0)


@pytest.mark.parametrize("call, message", [
    (lambda: psnr(np.zeros((8, 8, 3)), np.zeros((8, 9, 3))), "differ in shape"),
    (lambda: psnr(np.zeros((8, 8)), np.zeros((8, 8)), y_channel="studio"), "HxWx3"),
    (lambda: psnr(np.zeros((8, 8, 3)), np.zeros((8, 8, 3)), y_channel="bt709"), "y_channel"),
    (lambda: psnr(np.zeros((4, 4, 3)), np.zeros((4, 4, 3)), crop_border=2), "crop_border=2"),
    (lambda: ssim(np.zeros((8, 8)), np.zeros((8, 8))), "at least 11x11"),
])
def test_bad_inputs_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
