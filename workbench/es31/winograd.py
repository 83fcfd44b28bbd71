"""Winograd F(2x2, 3x3) as ES 3.1 compute shaders, for the convolution-algorithm study
(:mod:`workbench.es31.conv`, which plans and runs them; ``layer``: its :class:`~workbench.es31.
conv.Layer`, 3x3, stride 1).

An input-transform pass writes ``B^T d B`` of every 4x4 input tile, per input pack, to a
buffer; a product pass does the 16 element-wise products summed over input channels (a batched
GEMM, ``mat4`` x ``vec4``) and the output transform ``A^T m A``, writing 2x2 output pixels.
The filter transform ``U = G g G^T`` is done once on the CPU (:func:`weights`), like any weight
preparation.
"""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es31.kernels import INSIDE, header
from workbench.glsl_text import glsl_float

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def _combine(coeffs, names):
    """A GLSL sum of ``names`` weighted by ``coeffs`` (0, +-1, or other)."""
    terms = []
    for c, n in zip(coeffs, names):
        if c == 0:
            continue
        sign = "-" if c < 0 else "+"
        mag = "" if abs(c) == 1 else f"{glsl_float(abs(c))} * "
        terms.append(f"{sign} {mag}{n}")
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else "-" + text[2:] if text else "vec4(0.0)"


def _sandwich(left, names, right, out):
    """GLSL lines: ``out = left * X * right`` for a matrix ``X`` of vec4 names."""
    rows, inner = left.shape[0], left.shape[1]
    cols = right.shape[1]
    lines = []
    tmp = [[f"{out}_t{i}{j}" for j in range(len(names[0]))] for i in range(rows)]
    for i in range(rows):
        for j in range(len(names[0])):
            lines.append(f"    vec4 {tmp[i][j]} = {_combine(left[i], [names[x][j] for x in range(inner)])};")
    for i in range(rows):
        for j in range(cols):
            lines.append(f"    vec4 {out}{i}{j} = {_combine(right[:, j], tmp[i])};")
    return lines


def input_source(layer) -> str:
    d = [[f"d{i}{j}" for j in range(4)] for i in range(4)]
    body = ["    ivec2 t = ivec2(gl_GlobalInvocationID.xy) + ivec2(0, u_trow0);",
            "    int p = int(gl_WorkGroupID.z);",
            "    if (t.x >= u_tiles.x || t.y >= min(u_trow0 + u_trows, u_tiles.y)) return;",
            "    ivec2 b = t * 2 - u_pad;"]
    for i in range(4):
        for j in range(4):
            body.append(f"    ivec2 q{i}{j} = b + ivec2({j}, {i});")
            body.append(f"    vec4 d{i}{j} = inside(q{i}{j}) ? imageLoad(u_in, ivec3(q{i}{j}, p)) : vec4(0.0);")
    body += _sandwich(BT, d, BT.T, "v")
    body += ["    int tile = (t.y - u_trow0) * u_tiles.x + t.x;",
             "    int count = u_trows * u_tiles.x;"]
    for i in range(4):
        for j in range(4):
            body.append(f"    v[({i * 4 + j} * count + tile) * P + p] = v{i}{j};")
    return (header() + "layout(rgba32f, binding = 0) uniform highp readonly image2DArray u_in;\n"
            "layout(std430, binding = 0) writeonly buffer V { vec4 v[]; };\n"
            "uniform ivec2 u_in_size;\nuniform ivec2 u_pad;\nuniform ivec2 u_tiles;\n"
            "uniform int u_trow0;\nuniform int u_trows;\n"
            f"const int P = {ir.packs(layer.cin)};\n" + INSIDE
            + "void main() {\n" + "\n".join(body) + "\n}\n")


def product_source(layer) -> str:
    nop = ir.packs(layer.cout)
    ning = ir.packs(layer.kernel.shape[2])
    nopg = ir.packs(layer.cout // layer.groups)
    m = [[f"m[{i * 4 + j}]" for j in range(4)] for i in range(4)]
    body = ["    ivec2 t = ivec2(gl_GlobalInvocationID.xy) + ivec2(0, u_trow0);",
            "    int o = int(gl_WorkGroupID.z);",
            "    if (t.x >= u_tiles.x || t.y >= min(u_trow0 + u_trows, u_tiles.y)) return;",
            "    int g = o / NOPG;",
            "    int tile = (t.y - u_trow0) * u_tiles.x + t.x;",
            "    int count = u_trows * u_tiles.x;",
            "    vec4 m[16];",
            "    for (int x = 0; x < 16; x++) m[x] = vec4(0.0);",
            "    for (int j = 0; j < NING; j++) {",
            "        for (int x = 0; x < 16; x++) {",
            "            m[x] += u[(x * NOP + o) * NING + j] * v[(x * count + tile) * P + g * NING + j];",
            "        }",
            "    }"]
    body += _sandwich(AT, m, AT.T, "y")
    for i in range(2):
        for j in range(2):
            body += [f"    ivec2 p{i}{j} = t * 2 + ivec2({j}, {i});",
                     f"    if (all(lessThan(p{i}{j}, u_out_size))) "
                     f"imageStore(u_out, ivec3(p{i}{j}, o), y{i}{j} + bias[o]);"]
    return (header() + "layout(rgba32f, binding = 1) uniform highp writeonly image2DArray u_out;\n"
            "layout(std430, binding = 0) readonly buffer V { vec4 v[]; };\n"
            f"layout(std430, binding = 1) readonly buffer U {{ vec4 bias[{nop}]; mat4 u[]; }};\n"
            "uniform ivec2 u_out_size;\nuniform ivec2 u_tiles;\nuniform int u_trow0;\n"
            "uniform int u_trows;\n"
            f"const int NOP = {nop};\nconst int NING = {ning};\nconst int NOPG = {nopg};\n"
            f"const int P = {ir.packs(layer.cin)};\n"
            "void main() {\n" + "\n".join(body) + "\n}\n")


def weights(layer) -> np.ndarray:
    """``vec4 bias[out packs]`` then ``mat4 u[(xi * NOP + o) * NING + j]``: the transformed
    filter ``U = G g G^T`` (16 values ``xi`` per input/output channel pair)."""
    g = layer.kernel.astype(np.float64)
    u = np.einsum("ai,ijcd,bj->abcd", G, g, G).reshape(16, *g.shape[2:])
    nop, ning = ir.packs(layer.cout), ir.packs(layer.kernel.shape[2])
    cg = layer.kernel.shape[2]
    mats = np.zeros((16, nop, ning, 4, 4), np.float32)
    for o in range(nop):
        outs = list(range(4 * o, min(4 * o + 4, layer.cout)))
        for j in range(ning):
            for a, c in enumerate(range(4 * j, min(4 * j + 4, cg))):
                mats[:, o, j, a, :len(outs)] = u[:, c, outs]
    bias = np.zeros(nop * 4, np.float32)
    bias[:layer.cout] = layer.bias
    return np.concatenate([bias, mats.ravel()])
