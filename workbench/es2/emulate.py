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

A tensor stored at 16 bits (:mod:`.fixed16`: a tensor kept with a scale that only convolutions
read) keeps steps of 2**-15, 128 times finer than a level.  There the last bit by which
llvmpipe's float32 sums differ from the emulator's shows: llvmpipe folds a literal bias into
the first ``mat4 * vec4`` product's terms, ``(((b + a0) + a1) + a2) + a3`` where the emulator
adds ``b + (((a0 + a1) + a2) + a3)``, so about one value in 15 differs in its last bit, and
about one in 3,000 of a 16-bit tensor's codes is one step apart (the MobileNetV2-style net,
5 images: 312 of 869,760; an 8-bit tensor that reads one, a level in a rare value).
:func:`unpredicted` compares a GPU run op by op with that allowance.

``arithmetic="float16"`` predicts instead a GPU whose ``mediump`` is a true 16-bit float
(Mali-400, many Adreno and PowerVR parts; a ``highp`` shader falls back to it where
``GL_FRAGMENT_PRECISION_HIGH`` is undefined).  The same code runs with numpy float16 in place
of float32, so every step the shader writes rounds to float16, round to nearest even:
a fetch returns ``level * 1/255`` rounded to float16; weights, biases and every constant are
float16 (numpy's scalar rules round a Python constant to the array's float16); each multiply
and each add of the accumulation rounds (no wider accumulator); the activation computes in
float16; the RGBA8 store converts the float16 value exactly (clamp, ``255 * x`` rounded).  The
dense layer runs its GLSL op by op: the fixed16 ``enc``/``dec`` in float16 cannot hold the
16-bit integer ``hi * 256 + lo`` (11 significant bits), so its values keep steps of only
1/16 to 1/8 (see :func:`workbench.es2.ops.dense.emulate`).  Not modelled: wider (float32) accumulators or fused
multiply-adds, which some GPUs use (a real GPU is then closer to ``highp``); subnormals
flushed to zero (below 6.1e-5, far under a level); texture coordinates are taken as exact
(on a GPU that computes them in float16 too, textures wider than about 1024 texels may
fetch a neighbouring texel); ``exp`` and division as correctly rounded float16.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.record import record
from workbench.es2.texels import (  # noqa: F401  (the emulator's names for them)
    DTYPES,
    F32,
    FAST,
    LEVEL,
    REAL,
    dtype,
    load,
    store,
)


def quantize(x, arithmetic="float32"):
    """The value the next op reads back after an RGBA8 store of ``x`` (:data:`REAL`: ``x``
    itself, float32)."""
    if arithmetic == REAL:
        return np.asarray(x, F32)
    return load(store(x), arithmetic)


def luma(rgb):
    """``dot(rgb, LUMA)`` in ``rgb``'s float type, summed as llvmpipe sums a dot: last
    component first."""
    L = ir.LUMA.astype(rgb.dtype)
    return (rgb[..., 2] * L[2] + rgb[..., 1] * L[1]) + rgb[..., 0] * L[0]


def bilinear(image, block):
    """The SR demux's bilinear upsampling (half-pixel centres, clamped edges) in ``image``'s
    float type, as its shader computes it from 4 nearest fetches
    (:func:`workbench.es2.shaders.bilinear_taps`): by 2 the input pixel an output pixel lies in
    and its neighbours toward it, ``(a * 9 + d + (h + v) * 3) * 0.0625``; else mixed."""
    if block == 2:
        def near(n):  # each output pixel's input pixel, and its neighbour toward it
            own = np.arange(2 * n) // 2
            return own, np.clip(own + np.where(np.arange(2 * n) % 2, 1, -1), 0, n - 1)

        (y0, y1), (x0, x1) = near(image.shape[0]), near(image.shape[1])
        a, h, v, d = (image[ys][:, xs] for ys, xs in ((y0, x0), (y0, x1), (y1, x0), (y1, x1)))
        return (a * 9 + d + (h + v) * 3) * 0.0625

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


def apply(op, tensors, arithmetic="float32"):
    """The stored (quantized) output of ``op`` given the tensors it reads (as fetched:
    float32, or float16): its record's ``apply``."""
    return record(op).apply(op, tensors, arithmetic)


def tensors(graph: ir.Graph, image, arithmetic="float32", ops=None, after=None):
    """Every tensor of a run on an HxWxC image in [0, 1], ``{name: value}``, as the next op
    fetches it (8-bit levels as float32, or float16; a dense layer's
    logits); ``ops``: the first of ``graph.ops`` to run (default all); ``after(op, value)``:
    what the ops after ``op`` read instead of its ``value`` (default the value itself)."""
    image = graph.input_image(image)  # the GPU runner's checks and uint8 conversion
    values = {graph.input.name: quantize(image, arithmetic)}
    for op in graph.ops if ops is None else ops:
        values[op.name] = apply(op, values, arithmetic)
        if after is not None:
            values[op.name] = after(op, values[op.name])
    return values


def run(graph: ir.Graph, image, keep=False, arithmetic="float32"):
    """Run ``graph`` on an HxWxC image in [0, 1]; the output as float32 (8-bit levels), or
    with ``keep`` every tensor as uint8 HxWx(4*packs), the layout the GPU runner returns.
    ``arithmetic``: ``"float32"`` (llvmpipe's bytes, a highp GPU's) or ``"float16"`` (the
    prediction for a GPU whose mediump is float16; see the module's docstring)."""
    values = tensors(graph, image, arithmetic)
    if not keep:
        return output(graph, values)
    return {name: as_stored(graph, name, t) for name, t in values.items()}


def output(graph: ir.Graph, values) -> np.ndarray:
    """The net's output from the tensors of a run (:func:`tensors`), float32, as the GPU's run
    decodes its output texture (a dense layer's logits, a softmax too)."""
    op = graph.op(graph.output)
    if record(op).output:
        return record(op).output(op, record(op).stored(op, values[graph.output]))
    return np.asarray(values[graph.output], np.float32)


def _levels(graph, name) -> bool:
    """Whether tensor ``name`` holds 8-bit levels (not a dense layer's logits)."""
    return name == graph.input.name or record(graph.op(name)).stored is None


def as_stored(graph, name, t):
    """A tensor as the GPU stores it (uint8 packs; a dense layer's logits as its texture)."""
    if not _levels(graph, name):
        op = graph.op(name)
        return record(op).stored(op, t)
    if _bits(graph, name) == 16:
        return fixed16.tensor_bytes(t)
    return to_packs(t, opaque=name in _rgb_tensors(graph))


def _bits(graph, name) -> int:
    """The bits tensor ``name`` is stored in (:func:`workbench.es2.fixed16.tensor_bits`): 8
    for the input and for a tensor that is no op's output (a split's partial sums)."""
    op = next((op for op in graph.ops if op.name == name), None)
    return 8 if op is None else fixed16.tensor_bits(op)


def stepwise(graph: ir.Graph, stored: dict, arithmetic="float32"):
    """Each op emulated from the bytes another run (the GPU's) stored for its inputs.

    ``stored``: uint8 HxWx(4*packs) per tensor, as ``net.run(image, keep=True)`` returns.
    Returns ``{op name: uint8 packs}``, to compare op by op: unlike :func:`run`, a
    difference in one layer does not spread to the next.
    """
    shapes = graph.shapes(stored[graph.input.name].shape[:2])
    values = {name: fixed16.tensor_values(data, shapes[name][2], arithmetic)
              if _bits(graph, name) == 16 else load(data[..., :shapes[name][2]], arithmetic)
              for name, data in stored.items() if name in shapes and _levels(graph, name)}
    return {op.name: as_stored(graph, op.name, apply(op, values, arithmetic)) for op in graph.ops}


def steps_apart(graph: ir.Graph, stored: dict, other: dict) -> dict[str, np.ndarray]:
    """Per tensor both runs have (as ``keep=True`` returns them), how many storage steps
    apart each stored value is: 8-bit levels, or a 16-bit tensor's codes (its high and low
    byte together); a dense layer's texture byte by byte."""
    out = {}
    for name in stored.keys() & other.keys():
        a, b = np.asarray(stored[name], np.int64), np.asarray(other[name], np.int64)
        if _bits(graph, name) == 16:
            a, b = (x[..., 0::2] * 256 + x[..., 1::2] for x in (a, b))
        out[name] = np.abs(a - b)
    return out


def unpredicted(graph: ir.Graph, stored: dict, arithmetic="float32") -> dict[str, int]:
    """The tensors of a GPU run (``stored``: as ``net.run(image, keep=True)`` returns them)
    whose bytes each op, emulated from that run's own inputs (:func:`stepwise`), does not
    predict to within the emulator's promise: a 16-bit tensor's codes within one step, an
    8-bit tensor's levels within one and equal in all but 0.1 % of its values (llvmpipe's
    float32 sums differ from the emulator's in the last bit of a few values, which finer
    steps show: the module's docstring); ``{tensor: most steps apart}``, empty where all
    hold."""
    out = {}
    for name, steps in steps_apart(graph, stored, stepwise(graph, stored, arithmetic)).items():
        if name == graph.input.name or not steps.size:
            continue
        if steps.max() > 1 or (_bits(graph, name) == 8 and np.mean(steps > 0) > 1e-3):
            out[name] = int(steps.max())
    return out


def _rgb_tensors(graph):
    """Tensors that hold RGB pictures (the GPU stores alpha 255 there)."""
    rgb = {op.name for op in graph.ops if op.rgb_output}
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
