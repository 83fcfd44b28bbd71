"""Image quality metrics on the published SR convention (as BasicSR's ``calculate_psnr``).

Images are HxW or HxWx3 RGB, either uint8 or float in [0, 1]; both metrics work on the
0..255 scale with peak 255.  ``crop_border`` pixels are dropped on every side first
(the SR convention is ``crop_border = scale``).  ``y_channel`` selects what is compared:

* ``None`` -- all channels as given;
* ``"studio"`` -- Y of BT.601 studio-range YCbCr, ``16 + 65.481R + 128.553G + 24.966B``
  (what published SR tables use);
* ``"full"`` -- full-range luma ``255 * (0.299R + 0.587G + 0.114B)`` (the reference
  articles' own figures).

Y is computed in floating point and not rounded, as BasicSR does.
"""
from __future__ import annotations

import numpy as np

Y_WEIGHTS = {
    "studio": (np.array([65.481, 128.553, 24.966]) / 255.0, 16.0 / 255.0),
    "full": (np.array([0.299, 0.587, 0.114]), 0.0),
}


def _prepare(img, crop_border, y_channel, name):
    img = np.asarray(img)
    scale = 255.0 if img.dtype == np.uint8 else 1.0
    img = img.astype(np.float64) / scale
    if y_channel is not None:
        if y_channel not in Y_WEIGHTS:
            raise ValueError(f"y_channel must be None, 'studio' or 'full', not {y_channel!r}")
        if img.ndim != 3 or img.shape[-1] != 3:
            raise ValueError(f"{name}: y_channel={y_channel!r} needs an HxWx3 RGB image, "
                             f"got shape {img.shape}")
        weights, offset = Y_WEIGHTS[y_channel]
        img = img @ weights + offset
    if crop_border:
        if min(img.shape[:2]) <= 2 * crop_border:
            raise ValueError(f"{name}: image {img.shape[:2]} is too small for "
                             f"crop_border={crop_border}")
        img = img[crop_border:-crop_border, crop_border:-crop_border]
    return img * 255.0


def _pair(ref, out, crop_border, y_channel):
    if np.shape(ref) != np.shape(out):
        raise ValueError(f"ref and out differ in shape: {np.shape(ref)} vs {np.shape(out)}")
    return (_prepare(ref, crop_border, y_channel, "ref"),
            _prepare(out, crop_border, y_channel, "out"))


def psnr(ref, out, crop_border=0, y_channel=None):
    """Peak signal-to-noise ratio in dB, peak 255 (``inf`` for identical images)."""
    a, b = _pair(ref, out, crop_border, y_channel)
    mse = np.mean((a - b) ** 2)
    return float("inf") if mse == 0 else float(10.0 * np.log10(255.0 ** 2 / mse))


def _gaussian_window(size=11, sigma=1.5):
    t = np.arange(size) - (size - 1) / 2
    g = np.exp(-(t ** 2) / (2 * sigma ** 2))
    return g / g.sum()


def _ssim_plane(a, b, window):
    """Mean SSIM of two 2-D planes (0..255); statistics over the 'valid' window positions."""
    from scipy.ndimage import correlate1d  # (here: PSNR alone, as upscale's, needs no scipy)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    pad = len(window) // 2

    def blur(x):
        x = correlate1d(correlate1d(x, window, axis=0), window, axis=1)
        return x[pad:-pad, pad:-pad]

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a ** 2
    var_b = blur(b * b) - mu_b ** 2
    cov = blur(a * b) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / (
        (mu_a ** 2 + mu_b ** 2 + c1) * (var_a + var_b + c2))
    return ssim_map.mean()


def ssim(ref, out, crop_border=0, y_channel=None):
    """SSIM of Wang et al. (2004): 11x11 Gaussian window, sigma 1.5, K1 0.01, K2 0.03,
    averaged over the positions where the window fits, and over channels for RGB."""
    a, b = _pair(ref, out, crop_border, y_channel)
    window = _gaussian_window()
    if min(a.shape[:2]) < len(window):
        raise ValueError(f"SSIM needs images of at least {len(window)}x{len(window)} pixels "
                         f"after cropping, got {a.shape[:2]}")
    if a.ndim == 2:
        return float(_ssim_plane(a, b, window))
    return float(np.mean([_ssim_plane(a[..., c], b[..., c], window) for c in range(a.shape[-1])]))
