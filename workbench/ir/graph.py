"""The intermediate representation: a :class:`Graph`, its :class:`Input` and a list of ops
(:mod:`workbench.ir.ops`) with numpy weights, lowered from Keras or ONNX.

Every back end (ES 2.0 shaders, the numpy emulator, ES 3.1) reads this and nothing else.

Storage convention: a tensor of C channels is kept as ``ceil(C / 4)`` RGBA textures
("packs"); channel ``c`` is component ``c % 4`` of pack ``c // 4``.  Spatial layout is
row-major like numpy: row ``r`` of a tensor is texture row ``r`` (GL's ``gl_FragCoord.y``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.nets import storage

PACK = 4
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def packs(channels: int) -> int:
    return -(-channels // PACK)


def input_hw(hw, what="the input size") -> tuple[int, int]:
    """``hw`` as ``(height, width)`` of positive ints; anything else a ValueError in one line
    naming ``what`` (a negative or zero size gave negative counts and empty nets)."""
    try:
        height, width = (int(v) for v in hw)
        if (height, width) != tuple(hw):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{what}: (height, width) as two whole numbers, not {hw!r}") from None
    if height < 1 or width < 1:
        raise ValueError(f"{what}: {height}x{width} is not a picture (both sides >= 1)")
    return height, width


def conv_out_hw(hw, size, stride, padding):
    """Output (height, width) of a convolution, as ``tf.nn.conv2d`` computes it.
    ``padding``: ``"same"`` (TensorFlow's), ``"valid"``, or explicit zero padding
    ``(top, left, bottom, right)`` (as ONNX and PyTorch put it)."""
    if padding == "same":
        return tuple(-(-n // stride) for n in hw)
    top, left, bottom, right = explicit_pads(padding)
    return tuple((n + before + after - size) // stride + 1
                 for n, before, after in zip(hw, (top, left), (bottom, right)))


def explicit_pads(padding) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` of ``"valid"`` (zeros) or of an explicit padding."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if isinstance(padding, str):
        raise ValueError(f"padding {padding!r}: 'same' depends on the input size")
    return tuple(int(p) for p in padding)


def conv_pads(hw, size, stride, padding):
    """Zero padding (top, left) before the first row and column, as TensorFlow's 'SAME' puts
    it; (0, 0) for 'valid'; the first two of an explicit padding."""
    if padding != "same":
        return explicit_pads(padding)[:2]
    return tuple(max((o - 1) * stride + size - n, 0) // 2
                 for o, n in zip(conv_out_hw(hw, size, stride, padding), hw))


def uniform_values(uniforms: dict, shapes) -> dict[str, tuple]:
    """Values of a program's 2-vector uniforms for the tensor shapes of one input size.

    ``uniforms``: name -> spec; ``("size", tensor)`` is that tensor's (width, height),
    ``("texel", tensor)`` one texel of it in texture coordinates, (1 / width, 1 / height);
    ``("window", output, kernel, stride)`` one texel of the texture that a convolution's
    windows over its input span (each axis ``(n - 1) * stride + kernel`` for ``n`` pixels of
    its ``output``: its input with the padding the windows reach);
    ``("pad", input, kernel, stride, padding)`` the (left, top) zero padding of a convolution
    reading ``input``, ``("pad", input, kernel, stride, padding, bx, by)`` that plus ``(bx,
    by) * stride`` (its output drawn ``bx`` columns and ``by`` rows into its texture);
    ``("value", x, y)`` a constant.  Both back ends' generators state their
    uniforms this way, so that the runners never look at ops.
    """
    def value(kind, *args):
        if kind == "value":
            return args
        tensor, *conv = args
        h, w = shapes[tensor][:2]
        if kind == "size":
            return (w, h)
        if kind == "texel":  # (an empty tensor's: infinite, as the page's 1 / 0 gives it)
            return tuple(1 / n if n else float("inf") for n in (w, h))
        if kind == "window":
            kernel, stride = conv
            return (1 / ((w - 1) * stride + kernel), 1 / ((h - 1) * stride + kernel))
        kernel, stride, padding, *shift = conv
        top, left = conv_pads((h, w), kernel, stride, padding)
        bx, by = shift or (0, 0)
        return (left + bx * stride, top + by * stride)
    return {name: value(*spec) for name, spec in uniforms.items()}


@dataclass
class Input:
    name: str
    channels: int
    rgb: bool = False

    def out_shape(self, shapes, hw):
        return (*hw, self.channels)


@dataclass
class Graph:
    input: Input
    ops: list
    output: str
    name: str = "net"
    input_size: tuple | None = None   # (height, width) when the net needs a fixed size
    origin: dict | None = None  # tensor -> the source model's tensor it stands for (ONNX)
    scaled: frozenset = frozenset()  # tensors stored with a scale, (y - offset) / scale
    #   (ir.lowering.Scales: a calibrated ReLU or linear tensor, a Clip(0, m)'s y / m)

    def __post_init__(self):
        """A companded tensor (a Conv's ``storage``) is read by one op that decodes it: the
        SR demux with the same ``anchor_storage``."""
        readers, by_name = self.readers(), {op.name: op for op in self.ops}
        for op in self.ops:
            law = op.storage
            storage.check(law, f"layer {op.name!r}: storage")
            if law != "linear" and ([r.anchor_storage for r in readers.get(op.name, [])]
                                    != [law] or readers[op.name][0].input != op.name):
                raise ValueError(f"layer {op.name!r}: storage {law!r} needs one reader, "
                                 f"an SR demux with anchor_storage {law!r}")
            decodes, source = op.anchor_storage, by_name.get(op.input)
            if decodes != "linear" and (source.storage if source else "linear") != decodes:
                raise ValueError(f"layer {op.name!r}: anchor_storage {decodes!r} needs its "
                                 f"input stored so (a Conv with storage {decodes!r})")

    def op(self, name):
        return next(op for op in self.ops if op.name == name)

    def readers(self) -> dict[str, list]:
        """``{tensor: the ops that read it (as input, residual, ...), in order}``."""
        found = {}
        for op in self.ops:
            for tensor in op.reads:
                found.setdefault(tensor, []).append(op)
        return found

    def shapes(self, hw) -> dict[str, tuple[int, int, int]]:
        """(height, width, channels) of every tensor for an input of ``hw = (h, w)``."""
        shapes = {self.input.name: self.input.out_shape({}, input_hw(hw))}
        for op in self.ops:
            shapes[op.name] = op.out_shape(shapes, None)
        return shapes

    def input_image(self, image) -> np.ndarray:
        """``image`` (HxW or HxWxC: floats in [0, 1], or uint8 0..255 as ``np.asarray`` of a
        PIL image gives, converted) as float32 HxWxC, checked against the net's input
        channels and, for a fixed-size net, its input size.  Values outside [0, 1], NaN and
        other integer types are refused in one line (they would clip to a near-white or
        black image without a word)."""
        try:
            raw = np.asarray(image)
        except ValueError as error:  # a ragged nested list
            raise ValueError(f"image: not an array of pixels (HxW or HxWxC): {error}") from None
        if raw.dtype == np.uint8:
            image = raw.astype(np.float32) / np.float32(255)
        elif raw.dtype.kind in "fb":
            image = raw.astype(np.float32)
        else:
            raise ValueError(f"image of dtype {raw.dtype}: give floats in [0, 1] or uint8 "
                             "(0..255)")
        if image.size and not np.isfinite(image).all():
            raise ValueError(f"image has {int((~np.isfinite(image)).sum())} NaN or infinite "
                             "values: the net takes floats in [0, 1]")
        if image.size and (image.min() < 0 or image.max() > 1):
            raise ValueError(f"image values span [{image.min():g}, {image.max():g}]: the net "
                             "takes floats in [0, 1] (uint8 0..255 is converted; from 0..255 "
                             "floats divide by 255, from [-1, 1] take (x + 1) / 2)")
        if image.ndim == 2:
            image = image[..., None]
        c = self.input.channels
        if image.ndim != 3 or image.shape[2] != c:
            raise ValueError(f"image of shape {image.shape}: the net's input has {c} channels")
        hw = image.shape[:2]
        if self.input_size and tuple(hw) != tuple(self.input_size):
            raise ValueError(f"image of {hw[1]}x{hw[0]} pixels: net {self.name!r} takes "
                             f"{self.input_size[1]}x{self.input_size[0]}")
        return image

    @property
    def rgb_output(self) -> bool:
        """Whether the output is an RGB picture: the SR demux, which puts the net's luma
        sub-pixels and the input's chroma back together (its ``chroma_from``)."""
        return self.op(self.output).rgb_output

    def channels(self, name) -> int:
        """Channels of tensor ``name`` (they do not depend on the input size)."""
        return self.shapes(self.input_size or (1024, 1024))[name][2]
