"""Numpy execution of the IR with the exact 8-bit storage of the GPU: it predicts the bytes.

Every tensor is stored as RGBA8, so after each op the values are clamped to [0, 1] and
rounded to the nearest of 256 levels (what a GPU does when it writes a float to a UNORM8
render target).  Arithmetic is float64, so the emulator is the exact model the GPU's
float32 (highp) approximates; it is the oracle of the tests.
"""
from __future__ import annotations

import numpy as np

from workbench import activations, ir


def quantize(x):
    """Clamp to [0, 1] and round to 8-bit levels: the RGBA8 store, as float64."""
    return np.round(np.clip(x, 0.0, 1.0) * 255.0) / 255.0


def conv(op: ir.Conv, x, residual=None):
    """Convolution + bias (+ residual) + activation of HxWxC ``x``, before storage."""
    if op.luma_input:
        x = x[..., :3] @ ir.LUMA.astype(np.float64)[:, None]
    if op.input_order is not None:  # physical pack order -> logical channel order
        x = np.concatenate([x[..., 4 * p:4 * p + 4] for p in op.input_order], axis=-1)
    x = x[..., :op.cin]
    h, w = x.shape[:2]
    (oh, ow), (pt, pl), k, s = op.out_hw((h, w)), op.pads((h, w)), op.size, op.stride
    padded = np.zeros((max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k),
                       x.shape[2]))
    padded[pt:pt + h, pl:pl + w] = x
    cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
    out = np.tile(op.bias.astype(np.float64), (oh, ow, 1))
    kernel = op.kernel.astype(np.float64)
    for dy in range(k):
        for dx in range(k):
            window = padded[dy:dy + (oh - 1) * s + 1:s, dx:dx + (ow - 1) * s + 1:s]
            for g in range(op.groups):
                out[..., g * cout_g:(g + 1) * cout_g] += \
                    window[..., g * cin_g:(g + 1) * cin_g] @ kernel[dy, dx, :, g * cout_g:(g + 1) * cout_g]
    if residual is not None:
        out += residual[..., :op.cout]
    return activations.get(op.activation).np_fn(out).astype(np.float64)


def depth_to_space(op: ir.DepthToSpace, x, image=None):
    """``tf.nn.depth_to_space``; with ``image`` (the SR demux) the luma recombined with the
    image's bilinearly upsampled chroma: ``rgb + (y - luma(rgb))``."""
    h, w, c = x.shape
    b = op.block
    y = x.reshape(h, w, b, b, c // (b * b)).transpose(0, 2, 1, 3, 4).reshape(h * b, w * b, -1)
    if image is None:
        return y
    from workbench.images import upscale_bilinear

    rgb = upscale_bilinear(image[..., :3].astype(np.float32), b).astype(np.float64)
    return rgb + (y[..., :1] - rgb @ ir.LUMA.astype(np.float64)[:, None])


def dense(op: ir.Dense, x):
    """The blocked GEMV of :class:`workbench.ir.Dense`, stage by stage, with the storage of
    every stage (fixed16: steps of 1/256, range checked; float: float32).  Returns logits."""
    from workbench import fixed16

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


def apply(op, tensors):
    """The stored (quantized) output of ``op`` given the float tensors it reads."""
    if isinstance(op, ir.Conv):
        res = tensors[op.residual] if op.residual else None
        return quantize(conv(op, tensors[op.input], res))
    if isinstance(op, ir.DepthToSpace):
        chroma = tensors[op.chroma_from] if op.chroma_from else None
        return quantize(depth_to_space(op, tensors[op.input], chroma))
    if isinstance(op, ir.Dense):
        return dense(op, tensors[op.input])
    raise TypeError(f"op {op.name!r}: the emulator has no {type(op).__name__}")


def run(graph: ir.Graph, image, keep=False):
    """Run ``graph`` on an HxWxC image in [0, 1]; the output as float (8-bit levels), or with
    ``keep`` every tensor as uint8 HxWx(4*packs), the layout the GPU runner returns."""
    image = np.asarray(image, np.float64)
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
        from workbench import fixed16
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
    tensors = {name: data[..., :shapes[name][2]] / 255.0 for name, data in stored.items()
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
    out[..., :c] = np.round(x * 255)
    return out
