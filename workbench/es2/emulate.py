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

``precision="mediump"`` predicts instead a GPU whose ``mediump`` is a true 16-bit float
(Mali-400, many Adreno and PowerVR parts; a ``highp`` shader falls back to it where
``GL_FRAGMENT_PRECISION_HIGH`` is undefined).  The same code runs with numpy float16 in place
of float32, so every step the shader writes rounds to float16, round to nearest even:
a fetch returns ``level * 1/255`` rounded to float16; weights, biases and every constant are
float16 (numpy's scalar rules round a Python constant to the array's float16); each multiply
and each add of the accumulation rounds (no wider accumulator); the activation computes in
float16; the RGBA8 store converts the float16 value exactly (clamp, ``255 * x`` rounded).  The
dense layer runs its GLSL op by op: the fixed16 ``enc``/``dec`` in float16 cannot hold the
16-bit integer ``hi * 256 + lo`` (11 significant bits), so its values keep steps of only
1/16 to 1/8 (see :func:`dense`).  Not modelled: wider (float32) accumulators or fused
multiply-adds, which some GPUs use (a real GPU is then closer to ``highp``); subnormals
flushed to zero (below 6.1e-5, far under a level); texture coordinates are taken as exact
(on a GPU that computes them in float16 too, textures wider than about 1024 texels may
fetch a neighbouring texel); ``exp`` and division as correctly rounded float16.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.nets import activations

F32 = np.float32
LEVEL = F32(1 / 255)
DTYPES = {"highp": np.float32, "mediump": np.float16}   # precision -> the shaders' arithmetic


def dtype(precision):
    """The numpy float type the emulator computes in for ``precision``."""
    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {tuple(DTYPES)}, not {precision!r}")
    return DTYPES[precision]


def load(levels, precision="highp"):
    """8-bit levels -> float, as a texture fetch converts RGBA8: ``level * float32(1/255)``
    (rounded to float16 for ``mediump``)."""
    return (np.asarray(levels, F32) * LEVEL).astype(dtype(precision))


def store(x):
    """float32 (or float16) -> uint8 levels, as an RGBA8 render target stores them: clamp to
    [0, 1], then ``255 * x`` rounded to the nearest integer, ties to even (NaN, which only a
    float16 overflow makes, as 0)."""
    x = np.nan_to_num(np.asarray(x, F32), nan=0.0)
    return np.rint(np.clip(x, F32(0), F32(1)) * F32(255)).astype(np.uint8)


def quantize(x, precision="highp"):
    """The value the next op reads back after an RGBA8 store of ``x``."""
    return load(store(x), precision)


def luma(rgb):
    """``dot(rgb, LUMA)`` in ``rgb``'s float type, summed as llvmpipe sums a dot: last
    component first."""
    L = ir.LUMA.astype(rgb.dtype)
    return (rgb[..., 2] * L[2] + rgb[..., 1] * L[1]) + rgb[..., 0] * L[0]


def conv(op: ir.Conv, x, residual=None):
    """Convolution + bias (+ residual) + activation of HxWxC ``x`` (float32, or float16 for
    mediump: the arithmetic follows ``x``'s type), before storage.

    Summed as the shader sums: the bias, then per tap (row by row) and per input pack of 4
    channels the ``mat4 * vec4`` product (its 4 terms in channel order) added to the sum.
    """
    F = np.float16 if np.asarray(x).dtype == np.float16 else F32
    x = np.asarray(x, F)
    if op.luma_input:
        x = luma(x[..., :3])[..., None]
    if op.input_order is not None:  # physical pack order -> logical channel order
        x = np.concatenate([x[..., 4 * p:4 * p + 4] for p in op.input_order], axis=-1)
    x = x[..., :op.cin]
    h, w = x.shape[:2]
    (oh, ow), (pt, pl), k, s = op.out_hw((h, w)), op.pads((h, w)), op.size, op.stride
    padded = np.zeros((max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k),
                       x.shape[2]), F)
    padded[pt:pt + h, pl:pl + w] = x
    cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
    kernel, bias = op.kernel.astype(F), op.bias.astype(F)
    out = np.empty((oh, ow, op.cout), F)
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
    return np.asarray(activations.get(op.activation).np_fn(out), F)


def bilinear(image, block):
    """The SR demux's bilinear upsampling (half-pixel centres, clamped edges) in ``image``'s
    float type, as its shader computes it from 4 nearest fetches."""
    def axis(n):
        u = (np.arange(n * block, dtype=F32) + F32(0.5)) / F32(block) - F32(0.5)
        below = np.floor(u)
        return (np.clip(below, 0, n - 1).astype(int), np.clip(below + 1, 0, n - 1).astype(int),
                (u - below).astype(image.dtype))

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
    rgb = bilinear(image[..., :3], b)
    return rgb + (y[..., :1] - luma(rgb)[..., None])


def dense(op: ir.Dense, x, precision="highp"):
    """The blocked GEMV of :class:`workbench.ir.Dense`, stage by stage, with the storage of
    every stage; returns the logits as the CPU reads them back.  A stage out of the fixed16
    range raises :class:`workbench.es2.fixed16.FixedPointOverflow`.

    ``highp`` models the values: sums in float64, stored in steps of 1/256 (fixed16) or as
    float32 (float).  ``mediump`` runs the shaders' arithmetic op by op in float16: the input
    taps summed in order, ``acc += w * s`` per input channel, ``acc / pixels``, and the GLSL
    ``enc``/``dec`` of :mod:`fixed16` (for the weights texture, every partial sum and the
    logits).  There ``dec``'s ``hi * 256 + lo`` (up to 65535) keeps 11 significant bits, so a
    value decodes in steps of 1/16 in [-64, 0) and 1/8 in [0, 128) instead of 1/256: small
    weights (``|w| * 2**weight_shift < 1/32``) become 0 and partial sums lose their low
    byte; ``enc`` rounds ``u`` the same way and at the top of the range makes ``inf``.
    """
    from workbench.es2 import fixed16
    from workbench.es2.shaders import dense_weight_texture

    cin, pixels = op.cin, 1
    if precision == "highp":
        x = x[..., :cin].mean(axis=(0, 1)) if op.pool else x[0, 0, :cin]
        if op.number == "float":
            weight, bias = op.weight.astype(np.float64), op.bias.astype(np.float64)

            def put(v, stage, last=False):
                return v.astype(np.float32).astype(np.float64)
        else:
            scale = 2.0 ** op.weight_shift
            weight, bias = fixed16.quantize(op.weight * scale) / scale, fixed16.quantize(op.bias)

            def put(v, stage, last=False):
                fixed16.check(v, op.name, stage)
                return fixed16.quantize(v)
    else:
        F = dtype(precision)
        taps = x[..., :cin].reshape(-1, cin) if op.pool else x[:1, 0, :cin]
        x, pixels = taps[0], len(taps)
        for tap in taps[1:]:
            x = x + tap
        texture = dense_weight_texture(op)  # (cin + 1, pairs, 4): the weight rows, the bias
        fetched = load(texture, precision) if op.number == "fixed16" else texture.astype(F)
        fetched = fetched.reshape(cin + 1, -1, 2, 2)
        if op.number == "float":
            values = fetched[:, :, 0].reshape(cin + 1, -1)[:, :op.cout]  # components x, y
            weight, bias = values[:cin], values[cin]

            def put(v, stage, last=False):  # an RGBA32F texture holds the float16 value
                return v
        else:
            values = fixed16.glsl_dec(fetched).reshape(cin + 1, -1)[:, :op.cout]
            weight, bias = values[:cin] / F(2 ** op.weight_shift), values[cin]

            def put(v, stage, last=False):
                fixed16.check(v, op.name, stage)
                stored = store(fixed16.glsl_enc(v))
                return fixed16.decode(stored) if last else fixed16.glsl_dec(load(stored, precision))
    rows = [put(sum(weight[c] * x[c] for p in block for c in range(4 * p, min(4 * p + 4, cin)))
                / pixels, f"the partial sum of input block {b}")
            for b, block in enumerate(op.blocks())]
    passes = len(op.reductions()) - 1
    for k in range(passes):
        last = k == passes - 1
        rows = [put(sum(rows[i:i + op.reduce]) + (bias if last else 0),
                    "the output (with bias)" if last else f"reduction {k}", last)
                for i in range(0, len(rows), op.reduce)]
    return rows[0]


def _apply_conv(op: ir.Conv, tensors, precision):
    res = tensors[op.residual] if op.residual else None
    return quantize(conv(op, tensors[op.input], res), precision)


def _apply_depth_to_space(op: ir.DepthToSpace, tensors, precision):
    chroma = tensors[op.chroma_from] if op.chroma_from else None
    return quantize(depth_to_space(op, tensors[op.input], chroma), precision)


# One entry per IR op: ``op type -> stored output(op, tensors, precision)``.
APPLY = {ir.Conv: _apply_conv, ir.DepthToSpace: _apply_depth_to_space,
         ir.Dense: lambda op, tensors, precision: dense(op, tensors[op.input], precision)}


def apply(op, tensors, precision="highp"):
    """The stored (quantized) output of ``op`` given the tensors it reads (as fetched:
    float32, or float16 for ``mediump``)."""
    if type(op) not in APPLY:
        raise TypeError(f"op {op.name!r}: the emulator has no {type(op).__name__}")
    return APPLY[type(op)](op, tensors, precision)


def tensors(graph: ir.Graph, image, precision="highp"):
    """Every tensor of a run on an HxWxC image in [0, 1], ``{name: value}``, as the next op
    fetches it (8-bit levels as float32, or float16 for ``mediump``; a dense layer's
    logits)."""
    image = graph.input_image(image)  # the GPU runner's checks and uint8 conversion
    values = {graph.input.name: quantize(image, precision)}
    for op in graph.ops:
        values[op.name] = apply(op, values, precision)
    return values


def run(graph: ir.Graph, image, keep=False, precision="highp"):
    """Run ``graph`` on an HxWxC image in [0, 1]; the output as float32 (8-bit levels), or
    with ``keep`` every tensor as uint8 HxWx(4*packs), the layout the GPU runner returns.
    ``precision``: ``"highp"`` (float32, llvmpipe's bytes) or ``"mediump"`` (the prediction
    for a GPU whose mediump is float16; see the module's docstring)."""
    values = tensors(graph, image, precision)
    if not keep:
        return np.asarray(values[graph.output], np.float32)
    return {name: _stored(graph, name, t) for name, t in values.items()}


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


def stepwise(graph: ir.Graph, stored: dict, precision="highp"):
    """Each op emulated from the bytes another run (the GPU's) stored for its inputs.

    ``stored``: uint8 HxWx(4*packs) per tensor, as ``net.run(image, keep=True)`` returns.
    Returns ``{op name: uint8 packs}``, to compare op by op: unlike :func:`run`, a
    difference in one layer does not spread to the next.
    """
    shapes = graph.shapes(stored[graph.input.name].shape[:2])
    values = {name: load(data[..., :shapes[name][2]], precision) for name, data in stored.items()
              if name in shapes and not _is_dense(graph, name)}
    return {op.name: _stored(graph, op.name, apply(op, values, precision)) for op in graph.ops}


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
