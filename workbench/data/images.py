"""Image I/O, colour conversion and resizing.

Conventions, unless a docstring says otherwise:
- images are numpy arrays in HWC layout (HxW for one channel), RGB channel order;
- pixel values are float32 on the [0, 1] scale (uint8 only at the file boundary, see to_uint8);
- colour conversions are ITU-R BT.601, "studio" (Y in [16, 235]/255, as MATLAB's rgb2ycbcr and SR
  papers) or "full" (JPEG/JFIF, Y = 0.299R + 0.587G + 0.114B) range.
"""

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from workbench.data.memory import OutOfMemory, require_bytes
from workbench.files import atomic_path, check_writable


class ImageError(ValueError):
    """A bad image or image parameter; the message names the file or parameter and the problem."""


# --------------------------------------------------------------------------- I/O


CHECKED_DECODE = 64 << 20  # decodes above this many bytes are checked against the memory budget


def load_image(path):
    """Read an image file as float32 HxWx3 RGB in [0, 1].

    Greyscale is replicated to 3 channels, palettes are expanded, transparency is composited on
    white (with a warning), 16-bit images are divided by 65535 and 32-bit integer ones by
    2**32 - 1 (with a warning); 32-bit float images are read as they are, and must lie in [0, 1].
    The EXIF orientation (a camera's "rotate 90") is applied, as image viewers do.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {_not_a_file(path)}")
    try:
        with Image.open(path) as im:  # (the header: its size, before anything is decoded)
            need = decoded_bytes(im)
            if need > CHECKED_DECODE:  # (the budget's /proc reads cost 5x a small decode)
                require_bytes({"decoding": need}, f"{path}: a {im.width}x{im.height} image",
                              "give a smaller image")
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                warnings.warn(f"{path}: {frames} frames (an animation?); the first is read",
                              stacklevel=2)
            if im.format == "PNG" and im.mode in ("RGB", "RGBA", "LA") and ";16" in im.tile[0][3]:
                # Pillow keeps only the high byte of 16-bit colour or grey+alpha PNG samples.
                pixels, bits = _orient(_read_png16(path), im.getexif().get(ORIENTATION)), 16
            else:
                im.load()  # decode now, so that a truncated file raises here
                pixels, bits = _pil_pixels(ImageOps.exif_transpose(im), path, im.format)
    except (ImageError, FileNotFoundError, OutOfMemory):
        raise
    except Image.DecompressionBombError as e:
        raise ImageError(f"{path}: refused by Pillow's decompression-bomb guard ({e})") from e
    except Exception as e:  # Pillow and pypng raise OSError, SyntaxError, ValueError, their own...
        raise ImageError(f"{path}: not a readable image ({type(e).__name__}: {e})") from e
    if bits in (16, 32):
        warnings.warn(f"{path}: {bits}-bit image converted to float (divided by {2**bits - 1})",
                      stacklevel=2)
    if bits == "float":
        img = pixels.astype(np.float32)
    else:
        img = (pixels.astype(np.float64) / (2**bits - 1)).astype(np.float32)
    if img.shape[2] in (2, 4):  # grey+alpha or RGB+alpha
        img, alpha = img[..., :-1], img[..., -1:]
        if np.any(alpha < 1):
            warnings.warn(f"{path}: transparent pixels composited on white", stacklevel=2)
            img = img * alpha + (1 - alpha)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return np.ascontiguousarray(img, dtype=np.float32)


def decoded_bytes(im) -> int:
    """Memory :func:`load_image` takes to decode the opened (not yet decoded) Pillow image
    ``im``: per pixel 4 bytes a band as decoded (10 for a 16-bit PNG, read by pypng) and 14 a
    channel kept (3, or 4 with alpha: the uint8, float64 and float32 copies), measured at 46
    bytes a pixel for RGB, 56 RGBA, 40 grey."""
    bands = len(im.getbands())
    kept = 4 if "A" in im.mode or "transparency" in im.info else 3
    per_band = 10 if im.format == "PNG" and ";16" in (im.tile[0][3] if im.tile else "") else 4
    return im.width * im.height * (per_band * bands + 14 * kept)


def _not_a_file(path: Path) -> str:
    """What ``path``, which is not a regular file, is, in words."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as e:
        if path.is_symlink():
            return f"a symbolic link that leads nowhere ({e.strerror.lower()})"
        return "no such image file"
    if stat.S_ISDIR(mode):
        return "is a folder, not an image file"
    if stat.S_ISFIFO(mode):
        return "is a pipe (FIFO), not an image file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not an image file"
    return "not a regular file"


ORIENTATION = 0x0112  # the EXIF orientation tag
# numpy equivalents of the transposes ImageOps.exif_transpose applies, by EXIF orientation
_ORIENT = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.swapaxes(0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: a[::-1, ::-1].swapaxes(0, 1),
    8: lambda a: np.rot90(a, 1),
}


def _orient(pixels, orientation):
    """HxWxC pixels turned as EXIF orientation 1..8 says (None or 1: as they are)."""
    return np.ascontiguousarray(_ORIENT[orientation](pixels)) if orientation in _ORIENT else pixels


def _pil_pixels(im, path, fmt=None):
    """(HxWxC array with C in 1..4, bits per sample or "float") of a loaded Pillow image."""
    if im.mode.startswith("I;16"):  # 16-bit greyscale (PNG, TIFF)
        return np.clip(np.asarray(im), 0, 65535).astype(np.uint16)[..., None], 16
    if im.mode == "I":  # 32-bit signed integer samples (TIFF), or 16-bit PNG in old Pillow
        pixels = np.asarray(im, dtype=np.int64)[..., None]
        bits = 16 if fmt == "PNG" else 32
        if pixels.size and (pixels.min() < 0 or pixels.max() > 2**bits - 1):
            raise ImageError(
                f"{path}: {bits}-bit integer samples range over [{pixels.min()}, {pixels.max()}],"
                f" outside 0..{2**bits - 1}; convert the image to 8 or 16 bits")
        return pixels, bits
    if im.mode == "F":  # 32-bit float samples (TIFF): taken as they are, on the [0, 1] scale
        pixels = np.asarray(im, dtype=np.float32)[..., None]
        lo, hi = (float(pixels.min()), float(pixels.max())) if pixels.size else (0.0, 0.0)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo >= 0 and hi <= 1):
            raise ImageError(
                f"{path}: floating-point samples range over [{lo:g}, {hi:g}], want [0, 1];"
                " scale the image to [0, 1] (or save it as 8 or 16 bits)")
        return pixels, "float"
    transparent = "A" in im.mode or "transparency" in im.info
    im = im.convert("RGBA" if transparent else "RGB")
    return np.asarray(im), 8


def _read_png16(path):
    """HxWxC uint16 samples of a 16-bit PNG, through pypng (tRNS becomes an alpha channel)."""
    import png  # pypng; only needed for 16-bit colour PNG

    with open(path, "rb") as f:
        width, height, rows, info = png.Reader(file=f).asDirect()
        pixels = np.vstack(list(rows)).astype(np.uint16)
    return pixels.reshape(height, width, info["planes"])


SAVE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}


def save_image(path, img, quality=95, inputs=()):
    """Write HxW or HxWx3 float [0, 1] (rounded to 8 bits) or uint8 to an image file, atomically.

    The format follows the extension (see SAVE_FORMATS): PNG, or JPEG at `quality` (1..100; 95
    keeps fine detail). `inputs`: files the image was made from; writing over one of them raises
    (see check_output_path). Parent folders are created; the file appears complete or not at all.
    """
    path = Path(path)
    fmt, options = check_save_path(path, quality, inputs)
    img = np.asarray(img)
    if not (img.ndim == 2 or (img.ndim == 3 and img.shape[2] == 3)):
        raise ImageError(f"{path}: cannot save an image of shape {img.shape}, want HxW or HxWx3")
    if img.dtype.kind == "f" and not np.isfinite(img).all():
        raise ImageError(f"{path}: the image has {np.size(img) - np.isfinite(img).sum()} NaN or "
                         "infinite values; not written (they would be saved as black)")
    with atomic_path(path) as tmp:
        Image.fromarray(to_uint8(img)).save(tmp, format=fmt, **options)


def check_save_path(path, quality=95, inputs=()):
    """What save_image checks before writing (extension, quality, not one of `inputs`), so that
    a caller can check before computing the image; returns (Pillow format, save options)."""
    path = Path(path)
    fmt = SAVE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ImageError(f"{path}: cannot save as {path.suffix or 'a file without extension'!r};"
                         f" supported extensions: {', '.join(SAVE_FORMATS)}")
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or not (
            1 <= quality <= 100):
        raise ImageError(f"{path}: quality={quality!r}, want an integer in 1..100")
    check_output_path(path, inputs)
    return fmt, ({"quality": int(quality)} if fmt == "JPEG" else {})


def check_output_path(out, inputs):
    """Raise ImageError if writing `out` would overwrite one of `inputs` (the same path, or the
    same file through a link: os.path.samefile); returns out as a Path."""
    out = check_writable(out)
    for src in [inputs] if isinstance(inputs, (str, os.PathLike)) else inputs:
        src = Path(src)
        same = (os.path.samefile(out, src) if out.exists() and src.exists()
                else os.path.abspath(out) == os.path.abspath(src))
        if same:
            raise ImageError(f"{out}: is the input {src}; writing it would overwrite the input,"
                             " choose another output path")
    return out


def to_uint8(img):
    """Float [0, 1] -> uint8: clip, scale by 255, round to nearest (half to even). uint8 passes.
    A large image is converted a few rows at a time (no float copy of it)."""
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img
    if img.ndim == 0:
        return np.round(np.clip(img, 0, 1) * 255).astype(np.uint8)
    out = np.empty(img.shape, np.uint8)  # (rows a few million values at a time: no float copy)
    rows = max(1, 2 ** 22 // max(img[0].size, 1))
    for i in range(0, len(img), rows):
        out[i:i + rows] = np.round(np.clip(img[i:i + rows], 0, 1) * 255)
    return out


def to_float(img):
    """uint8 -> float32 / 255; floats pass through as float32."""
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img.astype(np.float32) / np.float32(255)
    if not np.issubdtype(img.dtype, np.floating):
        raise ImageError(f"img: dtype {img.dtype} is neither uint8 nor float")
    return img.astype(np.float32)


def round_8bit(img):
    """Round float [0, 1] to the nearest of the 256 8-bit levels (float32), as a PNG round trip."""
    return to_float(to_uint8(img))


def modcrop(img, scale):
    """Crop bottom/right so that H and W are multiples of scale."""
    h, w = img.shape[:2]
    if h < scale or w < scale:
        raise ImageError(f"modcrop: image {h}x{w} is smaller than scale={scale}")
    return img[: h - h % scale, : w - w % scale]


# --------------------------------------------------------------------------- colour (BT.601)

# rows: Y, Cb, Cr as functions of R, G, B in [0, 1]; plus offsets; results on the [0, 1] scale.
_YCBCR = {
    "studio": (
        np.array([[65.481, 128.553, 24.966], [-37.797, -74.203, 112.0], [112.0, -93.786, -18.214]])
        / 255,
        np.array([16.0, 128.0, 128.0]) / 255,
    ),
    "full": (
        np.array([[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]]),
        np.array([0.0, 0.5, 0.5]),
    ),
}


def _ycbcr_matrix(range):
    if range not in _YCBCR:
        raise ImageError(f"range={range!r}: unknown YCbCr range, want one of {tuple(_YCBCR)}")
    return _YCBCR[range]


def _check_rgb(img, name="img"):
    img = to_float(img)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ImageError(f"{name}: want an HxWx3 image, got shape {img.shape}")
    return img


def rgb_to_ycbcr(img, range="studio"):
    """HxWx3 RGB [0, 1] -> HxWx3 YCbCr on the [0, 1] scale (BT.601, studio or full range)."""
    m, offset = _ycbcr_matrix(range)
    return (_check_rgb(img) @ m.T + offset).astype(np.float32)


def ycbcr_to_rgb(img, range="studio"):
    """Inverse of rgb_to_ycbcr (exact matrix inverse); the result is not clipped."""
    m, offset = _ycbcr_matrix(range)
    return ((_check_rgb(img) - offset) @ np.linalg.inv(m).T).astype(np.float32)


def rgb_to_y(img, range="studio"):
    """HxWx3 RGB [0, 1] -> HxW luma Y on the [0, 1] scale (studio: 16/255..235/255)."""
    m, offset = _ycbcr_matrix(range)
    return (_check_rgb(img) @ m[0] + offset[0]).astype(np.float32)


# --------------------------------------------------------------------------- resizing


def _cubic(x):
    """Keys' cubic convolution kernel with a = -0.5 (MATLAB's and Pillow's bicubic)."""
    x = np.abs(x)
    return np.where(
        x <= 1,
        1.5 * x**3 - 2.5 * x**2 + 1,
        np.where(x < 2, -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2, 0.0),
    )


def _imresize_matrix(n_in, n_out, scale, antialias):
    """(n_out, n_in) matrix of MATLAB imresize's bicubic weights along one axis.

    Follows MATLAB's contributions(): 1-based output centres mapped to input coordinates, a
    kernel widened by 1/scale when shrinking with antialiasing, weights normalised to sum 1,
    indices outside the image mirrored symmetrically (x[-1] = x[0]).
    """
    shrink = scale < 1 and antialias
    width = 4.0 / scale if shrink else 4.0
    u = np.arange(1, n_out + 1) / scale + 0.5 * (1 - 1 / scale)  # 1-based input coordinate
    left = np.floor(u - width / 2)
    idx = left[:, None] + np.arange(int(np.ceil(width)) + 2)  # 1-based taps
    dist = u[:, None] - idx
    w = scale * _cubic(dist * scale) if shrink else _cubic(dist)
    w /= w.sum(axis=1, keepdims=True)
    taps = (idx.astype(int) - 1) % (2 * n_in)  # MATLAB: aux = [1:n, n:-1:1]
    taps = np.where(taps < n_in, taps, 2 * n_in - 1 - taps)
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), taps.ravel()), w.ravel())
    return m


def imresize(img, scale=None, output_shape=None, antialias=True):
    """MATLAB's imresize(img, scale or [h w], 'bicubic'), in numpy; HxW or HxWxC -> float32.

    Give exactly one of scale (output size ceil(scale * size), as MATLAB) or output_shape (h, w).
    Antialiased when shrinking (the SR benchmark convention for making low-resolution images).
    The result is not clipped (bicubic overshoots); uint8 input is converted with to_float first.
    """
    img = to_float(img)
    if img.ndim not in (2, 3):
        raise ImageError(f"img: want HxW or HxWxC, got shape {img.shape}")
    if (scale is None) == (output_shape is None):
        raise ImageError("imresize: give exactly one of scale and output_shape")
    size_in = img.shape[:2]
    if scale is not None:
        if scale <= 0:
            raise ImageError(f"imresize: scale={scale} must be positive")
        scales = (scale, scale)
        size_out = tuple(int(np.ceil(scale * n)) for n in size_in)
    else:
        size_out = tuple(int(n) for n in output_shape)
        if len(size_out) != 2 or min(size_out) < 1:
            raise ImageError(f"imresize: output_shape={output_shape} must be two positive sizes")
        scales = tuple(o / i for o, i in zip(size_out, size_in))
    out = img.astype(np.float64)
    for axis in sorted((0, 1), key=lambda a: scales[a]):  # smaller scale first, as MATLAB
        m = _imresize_matrix(size_in[axis], size_out[axis], scales[axis], antialias)
        out = np.moveaxis(np.tensordot(m, out, axes=(1, axis)), 0, axis)
    return out.astype(np.float32)


def _tf_resize(img, size, method):
    """tf.image.resize without antialiasing (half-pixel centres) of HxW or HxWxC -> float32."""
    import tensorflow as tf  # imported here so that I/O and colour work without loading TF

    x = to_float(img)
    out = tf.image.resize(x[..., None] if x.ndim == 2 else x, size, method=method, antialias=False)
    out = out.numpy()
    return out[..., 0] if x.ndim == 2 else out


KERNELS = ("bicubic_aa", "bilinear", "bicubic", "lanczos")
_TF_METHODS = {"bilinear": "bilinear", "bicubic": "bicubic", "lanczos": "lanczos3"}


def _footprint(kernel, scale):
    """Input pixels each output pixel reads, along one axis; smaller images are all boundary."""
    return {"bicubic_aa": 4 * scale, "bilinear": 2, "bicubic": 4, "lanczos": 6}[kernel]


def degrade(img, scale, kernel, quantize=True):
    """Low-resolution image (H/scale, W/scale) of an already modcropped HR image.

    kernel:
    - "bicubic_aa": MATLAB imresize(img, 1/scale), antialiased (the SR benchmark convention);
    - "bilinear", "bicubic", "lanczos": tf.image.resize bilinear / bicubic / lanczos3 without
      antialiasing, like OpenCV's INTER_LINEAR / INTER_CUBIC / INTER_LANCZOS4 (they sample the
      input without widening the kernel). TF's bicubic uses a = -0.5 where OpenCV uses -0.75.
    quantize=True rounds to 8-bit levels (float32 multiples of 1/255), as a saved LR PNG would be.
    """
    if kernel not in KERNELS:
        raise ImageError(f"kernel={kernel!r}: unknown degradation kernel, want one of {KERNELS}")
    h, w = img.shape[:2]
    if h % scale or w % scale:
        raise ImageError(
            f"degrade(kernel={kernel!r}, scale={scale}): image {h}x{w} is not a multiple of the"
            " scale; modcrop it first"
        )
    need = _footprint(kernel, scale)
    if min(h, w) < need:
        raise ImageError(
            f"degrade(kernel={kernel!r}, scale={scale}): image {h}x{w} is smaller than the"
            f" {need} pixels the kernel reads"
        )
    size = (h // scale, w // scale)
    if kernel == "bicubic_aa":
        lr = imresize(img, 1 / scale)
    else:
        lr = _tf_resize(img, size, _TF_METHODS[kernel])
    return round_8bit(lr) if quantize else lr


def upscale_bicubic(img, scale):
    """The bicubic baseline: MATLAB imresize(img, scale), clipped to [0, 1], rounded to 8 bits."""
    return round_8bit(imresize(img, scale))


def upscale_bilinear(img, scale):
    """Bilinear upscaling with half-pixel centres, as a GL_LINEAR texture sampler; float32."""
    h, w = img.shape[:2]
    return _tf_resize(img, (h * scale, w * scale), "bilinear")
