"""Numpy execution of the IR with the GPU's 8-bit storage and float32 arithmetic: it predicts
the bytes.

Every tensor is stored as RGBA8: a texture fetch turns level ``n`` into ``n * float32(1/255)``
(:func:`load`), a render target clamps to [0, 1] and rounds ``255 * y`` to the nearest level,
ties to even (:func:`store`).  In between the arithmetic is float32 (``highp``) in the order
the generated shader states it and Mesa llvmpipe evaluates it: no fused multiply-add, a
``mat4 * vec4`` summed component by component in order, ``dot`` summed from the last component
to the first, ``mix(a, b, t)`` as ``a + t * (b - a)``.  With that, the emulator predicts
llvmpipe's bytes: every one for a random-weight SR net, all but about one in a million for a
trained one (values within 1e-5 of a half level, where llvmpipe still rounds differently).
A GPU that fuses or reorders differs only where a value sits that close to a half level.
It is the oracle of the tests.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.nets import activations

F32 = np.float32
LEVEL = F32(1 / 255)


def load(levels):
    """8-bit levels -> float32, as a texture fetch converts RGBA8: ``level * float32(1/255)``."""
    return np.asarray(levels, F32) * LEVEL


def store(x):
    """float32 -> uint8 levels, as an RGBA8 render target stores them: clamp to [0, 1], then
    ``255 * x`` rounded to the nearest integer, ties to even."""
    return np.rint(np.clip(np.asarray(x, F32), F32(0), F32(1)) * F32(255)).astype(np.uint8)


def quantize(x):
    """The value the next op reads back after an RGBA8 store of ``x`` (float32)."""
    return load(store(x))


def luma(rgb):
    """``dot(rgb, LUMA)`` in float32, summed as llvmpipe sums a dot: last component first."""
    L = ir.LUMA
    return (rgb[..., 2] * L[2] + rgb[..., 1] * L[1]) + rgb[..., 0] * L[0]


def conv(op: ir.Conv, x, residual=None):
    """Convolution + bias (+ residual) + activation of HxWxC float32 ``x``, before storage.

    Summed as the shader sums: the bias, then per tap (row by row) and per input pack of 4
    channels the ``mat4 * vec4`` product (its 4 terms in channel order) added to the sum.
    """
    x = np.asarray(x, F32)
    if op.luma_input:
        x = luma(x[..., :3])[..., None]
    if op.input_order is not None:  # physical pack order -> logical channel order
        x = np.concatenate([x[..., 4 * p:4 * p + 4] for p in op.input_order], axis=-1)
    x = x[..., :op.cin]
    h, w = x.shape[:2]
    (oh, ow), (pt, pl), k, s = op.out_hw((h, w)), op.pads((h, w)), op.size, op.stride
    padded = np.zeros((max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k),
                       x.shape[2]), F32)
    padded[pt:pt + h, pl:pl + w] = x
    cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
    kernel, bias = op.kernel.astype(F32), op.bias.astype(F32)
    out = np.empty((oh, ow, op.cout), F32)
    for g in range(op.groups):
        outs = slice(g * cout_g, (g + 1) * cout_g)
        acc = np.tile(bias[outs], (oh, ow, 1))
        for dy in range(k):
            for dx in range(k):
                window = padded[dy:dy + (oh - 1) * s + 1:s, dx:dx + (ow - 1) * s + 1:s]
                for first in range(0, cin_g, ir.PACK):  # one input pack: mat4 * vec4
                    terms = (window[..., g * cin_g + c, None] * kernel[dy, dx, c, outs]
                             for c in range(first, min(first + ir.PACK, cin_g)))
                    product = next(terms)
                    for term in terms:
                        product += term
                    acc += product
        out[..., outs] = acc
    if residual is not None:
        out += residual[..., :op.cout]
    return np.asarray(activations.get(op.activation).np_fn(out), F32)


def bilinear(image, block):
    """The SR demux's bilinear upsampling (half-pixel centres, clamped edges) in float32, as
    its shader computes it from 4 nearest fetches."""
    def axis(n):
        u = (np.arange(n * block, dtype=F32) + F32(0.5)) / F32(block) - F32(0.5)
        below = np.floor(u)
        return (np.clip(below, 0, n - 1).astype(int), np.clip(below + 1, 0, n - 1).astype(int),
                u - below)

    def mix(a, b, t):
        return a + t * (b - a)

    (y0, y1, fy), (x0, x1, fx) = axis(image.shape[0]), axis(image.shape[1])
    fx, fy = fx[None, :, None], fy[:, None, None]
    top = mix(image[y0][:, x0], image[y0][:, x1], fx)
    bottom = mix(image[y1][:, x0], image[y1][:, x1], fx)
    return mix(top, bottom, fy)


def depth_to_space(op: ir.DepthToSpace, x, image=None):
    """``tf.nn.depth_to_space``; with ``image`` (the SR demux) the luma recombined with the
    image's bilinearly upsampled chroma: ``rgb + (y - luma(rgb))``."""
    h, w, c = x.shape
    b = op.block
    y = x.reshape(h, w, b, b, c // (b * b)).transpose(0, 2, 1, 3, 4).reshape(h * b, w * b, -1)
    if image is None:
        return y
    rgb = bilinear(np.asarray(image[..., :3], F32), b)
    return rgb + (y[..., :1] - luma(rgb)[..., None])


def dense(op: ir.Dense, x):
    """The blocked GEMV of :class:`workbench.ir.Dense`, stage by stage, with the storage of
    every stage (fixed16: steps of 1/256, range checked; float: float32).  Returns logits."""
    from workbench.es2 import fixed16

    x = x[..., :op.cin].mean(axis=(0, 1)) if op.pool else x[0, 0, :op.cin]
    if op.number == "float":
        weight, bias = op.weight.astype(np.float64), op.bias.astype(np.float64)

        def store(v, stage):
            return v.astype(np.float32).astype(np.float64)
    else:
        scale = 2.0 ** op.weight_shift
        weight, bias = fixed16.quantize(op.weight * scale) / scale, fixed16.quantize(op.bias)

        def store(v, stage):
            fixed16.check(v, op.name, stage)
            return fixed16.quantize(v)
    rows = [store(sum(weight[c] * x[c] for p in block for c in range(4 * p, min(4 * p + 4, op.cin))),
                  f"the partial sum of input block {b}")
            for b, block in enumerate(op.blocks())]
    passes = len(op.reductions()) - 1
    for k in range(passes):
        last = k == passes - 1
        rows = [store(sum(rows[i:i + op.reduce]) + (bias if last else 0),
                      "the output (with bias)" if last else f"reduction {k}")
                for i in range(0, len(rows), op.reduce)]
    return rows[0]


def _apply_conv(op: ir.Conv, tensors):
    res = tensors[op.residual] if op.residual else None
    return quantize(conv(op, tensors[op.input], res))


def _apply_depth_to_space(op: ir.DepthToSpace, tensors):
    chroma = tensors[op.chroma_from] if op.chroma_from else None
    return quantize(depth_to_space(op, tensors[op.input], chroma))


# One entry per IR op: ``op type -> stored output(op, tensors)``.
APPLY = {ir.Conv: _apply_conv, ir.DepthToSpace: _apply_depth_to_space,
         ir.Dense: lambda op, tensors: dense(op, tensors[op.input])}


def apply(op, tensors):
    """The stored (quantized) output of ``op`` given the float tensors it reads."""
    if type(op) not in APPLY:
        raise TypeError(f"op {op.name!r}: the emulator has no {type(op).__name__}")
    return APPLY[type(op)](op, tensors)


def run(graph: ir.Graph, image, keep=False):
    """Run ``graph`` on an HxWxC image in [0, 1]; the output as float (8-bit levels), or with
    ``keep`` every tensor as uint8 HxWx(4*packs), the layout the GPU runner returns."""
    image = np.asarray(image, F32)
    if image.ndim == 2:
        image = image[..., None]
    tensors = {graph.input.name: quantize(image)}
    for op in graph.ops:
        tensors[op.name] = apply(op, tensors)
    if not keep:
        return tensors[graph.output].astype(np.float32)
    return {name: _stored(graph, name, t) for name, t in tensors.items()}


def _is_dense(graph, name):
    return name != graph.input.name and isinstance(graph.op(name), ir.Dense)


def _stored(graph, name, t):
    """A tensor as the GPU stores it (uint8 packs; a dense layer's logits as its texture)."""
    if _is_dense(graph, name):
        op = graph.op(name)
        from workbench.es2 import fixed16
        values = np.zeros(2 * op.pairs)
        values[:op.cout] = t
        if op.number == "float":
            out = np.zeros((1, op.pairs, 4), np.float32)
            out[0, :, :2] = values.reshape(-1, 2)
            return out
        return fixed16.encode(values).reshape(1, op.pairs, 4)
    return to_packs(t, opaque=name in _rgb_tensors(graph))


def stepwise(graph: ir.Graph, stored: dict):
    """Each op emulated from the bytes another run (the GPU's) stored for its inputs.

    ``stored``: uint8 HxWx(4*packs) per tensor, as ``net.run(image, keep=True)`` returns.
    Returns ``{op name: uint8 packs}``, to compare op by op: unlike :func:`run`, a
    difference in one layer does not spread to the next.
    """
    shapes = graph.shapes(stored[graph.input.name].shape[:2])
    tensors = {name: load(data[..., :shapes[name][2]]) for name, data in stored.items()
               if name in shapes and not _is_dense(graph, name)}
    return {op.name: _stored(graph, op.name, apply(op, tensors)) for op in graph.ops}


def _rgb_tensors(graph):
    """Tensors that hold RGB pictures (the GPU stores alpha 255 there)."""
    rgb = {op.name for op in graph.ops if getattr(op, "chroma_from", None)}
    if graph.input.rgb:
        rgb.add(graph.input.name)
    return rgb


def to_packs(x, opaque=False):
    """HxWxC float [0, 1] (8-bit levels) -> uint8 HxWx(4*packs), zero-filled (an RGB image
    gets alpha 255 when ``opaque``, as the GPU stores it)."""
    c = x.shape[2]
    out = np.zeros((*x.shape[:2], 4 * ir.packs(c)), np.uint8)
    if opaque:
        out[..., 3] = 255
    out[..., :c] = store(x)
    return out
