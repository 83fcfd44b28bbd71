"""Convolution algorithms as OpenGL ES 3.1 compute shaders: direct, im2col + GEMM, Winograd.

* ``direct``: one invocation per output pixel computes all output packs of its group (up to
  8) straight from the input image (:func:`workbench.es31.ops.conv.kernel`, ``tile=False``);
* ``direct_tiled``: the same with the work group's input tile staged in shared memory (what
  the ES 3.1 back end runs);
* ``im2col_gemm``: an im2col pass writes the patch matrix (output pixels x ``k*k*cin/groups``)
  to a storage buffer, a tiled GEMM (32-deep shared-memory tiles of A and B, each invocation
  4 rows x 4 output channels) multiplies it by the weights and writes the output image;
* ``winograd``: F(2x2, 3x3) -- an input-transform pass (``B^T d B`` of every 4x4 input tile,
  per input pack, to a buffer), then a pass that does the 16 element-wise products summed
  over input channels (a batched GEMM, ``mat4`` x ``vec4``) and the output transform
  ``A^T m A``, writing 2x2 output pixels.  The filter transform ``G g G^T`` is done once on the
  CPU, like any weight preparation.  **Stride 1, 3x3 kernels only** (``same`` or ``valid``).

All take the input as an RGBA32F 2D array image (4 channels a layer) and write one; groups
work in all four when each group is whole RGBA packs (``groups=1``: any channel counts);
``direct`` and ``im2col_gemm`` take any stride and kernel size.  Intermediate buffers are
processed in bands of output rows so that none exceeds 64 MiB (ES 3.1 guarantees storage
blocks of 128 MiB).  Timings (:func:`time_conv`): the dispatches of one convolution, ended by
``glFinish``, without upload or read-back, the median of ``repeat`` runs (more for short
ones) after a warm-up run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import gl, ir
from workbench.es31.kernels import INSIDE, Options, header
from workbench.es31.ops import conv as direct
from workbench.glsl_text import glsl_float

ALGORITHMS = ("direct", "direct_tiled", "im2col_gemm", "winograd")
BAND_BYTES = 64 << 20
OWNER = "conv_algorithms"

WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
WINOGRAD_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


@dataclass
class Layer:
    """One convolution: ``kernel`` ``(k, k, cin/groups, cout)`` as ``tf.nn.conv2d``, ``bias``
    ``(cout,)``, no activation."""

    kernel: np.ndarray
    bias: np.ndarray
    stride: int = 1
    padding: str = "same"
    groups: int = 1

    @classmethod
    def random(cls, cin, cout, k=3, stride=1, padding="same", groups=1, seed=0):
        rng = np.random.default_rng(seed)
        fan_in = k * k * cin // groups
        kernel = rng.normal(0, 1 / np.sqrt(fan_in), (k, k, cin // groups, cout)).astype(np.float32)
        return cls(kernel, rng.normal(0, 0.1, cout).astype(np.float32), stride, padding, groups)

    def op(self) -> ir.Conv:
        return ir.Conv("y", "x", self.kernel, self.bias, self.stride, self.padding, self.groups)

    @property
    def cin(self):
        return self.op().cin

    @property
    def cout(self):
        return self.op().cout

    def check(self, algorithm):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
        if self.groups > 1 and (self.kernel.shape[2] % 4 or (self.cout // self.groups) % 4):
            raise ValueError("grouped convolutions need groups of whole RGBA packs "
                             f"({self.kernel.shape[2]} -> {self.cout // self.groups} per group)")
        if algorithm == "winograd" and (self.kernel.shape[0] != 3 or self.stride != 1):
            raise ValueError("winograd F(2x2, 3x3): 3x3 kernels with stride 1 only, not "
                             f"{self.kernel.shape[0]}x{self.kernel.shape[0]} stride {self.stride}")


_OPTS = Options(tile=False)


def _head(local=(8, 8)):
    return header(_OPTS, local)


def _band(rows, bytes_per_row):
    """Rows per band so that a band's buffer stays within BAND_BYTES."""
    return max(1, min(rows, BAND_BYTES // max(1, bytes_per_row)))


# --- im2col + GEMM ------------------------------------------------------------------------------

GEMM_TK = 32   # depth of a shared-memory tile (at most)
GEMM_ROWS = 4  # output rows (pixels) per invocation


def im2col_source(layer: Layer) -> str:
    k, s = layer.kernel.shape[0], layer.stride
    cg = layer.kernel.shape[2]
    nin = ir.packs(cg)
    kd = k * k * cg
    lines = [
        "    ivec2 o = ivec2(gl_GlobalInvocationID.xy) + ivec2(0, u_row0);",
        "    int g = int(gl_WorkGroupID.z);",
        "    if (o.x >= u_out_size.x || o.y >= min(u_row0 + u_rows, u_out_size.y)) return;",
        "    int base = (g * u_rows * u_out_size.x + (o.y - u_row0) * u_out_size.x + o.x) * KD;",
        "    ivec2 b = o * S - u_pad;",
        "    for (int dy = 0; dy < K; dy++) {",
        "        for (int dx = 0; dx < K; dx++) {",
        "            ivec2 p = b + ivec2(dx, dy);",
        "            bool ok = inside(p);",
        "            int at = base + (dy * K + dx) * CG;"]
    for i in range(nin):
        lines.append(f"            vec4 v{i} = ok ? imageLoad(u_in, ivec3(p, g * NIN + {i})) : vec4(0.0);")
        for c in range(min(4, cg - 4 * i)):
            lines.append(f"            a[at + {4 * i + c}] = v{i}.{'xyzw'[c]};")
    lines += ["        }", "    }"]
    return (_head() + "layout(rgba32f, binding = 0) uniform highp readonly image2DArray u_in;\n"
            "layout(std430, binding = 0) writeonly buffer A { float a[]; };\n"
            "uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\nuniform ivec2 u_pad;\n"
            "uniform int u_row0;\nuniform int u_rows;\n"
            f"const int K = {k};\nconst int S = {s};\nconst int CG = {cg};\nconst int NIN = {nin};\n"
            f"const int KD = {kd};\n" + INSIDE + "void main() {\n" + "\n".join(lines) + "\n}\n")


def gemm_layout(layer: Layer):
    """(packs per group, invocations along x = output packs of a tile, along y, tile depth):
    64 invocations, the two tiles within the 16 KiB of shared memory ES 3.1 guarantees."""
    npg = ir.packs(layer.cout // layer.groups)
    lx = 1
    while lx * 2 <= min(npg, 8):
        lx *= 2
    ly = 64 // lx
    tk = min(GEMM_TK, 16384 // (ly * GEMM_ROWS * 4 + lx * 16))
    return npg, lx, ly, tk


def gemm_source(layer: Layer) -> str:
    k = layer.kernel.shape[0]
    kd = k * k * layer.kernel.shape[2]
    npg, lx, ly, tk = gemm_layout(layer)
    tm, r = ly * GEMM_ROWS, GEMM_ROWS
    body = """    int g = int(gl_WorkGroupID.z);
    int width = u_out_size.x;
    int m_count = min(u_rows, u_out_size.y - u_row0) * width;
    int m0 = int(gl_WorkGroupID.y) * TM;
    int n0 = int(gl_WorkGroupID.x) * LX;
    int lx = int(gl_LocalInvocationID.x);
    int ly = int(gl_LocalInvocationID.y);
    int li = int(gl_LocalInvocationIndex);
    int a0 = g * u_rows * width * KD;
    vec4 acc[R];
    for (int r = 0; r < R; r++) acc[r] = vec4(0.0);
    for (int k0 = 0; k0 < KD; k0 += TK) {
        for (int q = li; q < TM * TK; q += LX * LY) {
            int m = m0 + q / TK;
            int kk = k0 + q % TK;
            as_[q] = (m < m_count && kk < KD) ? a[a0 + m * KD + kk] : 0.0;
        }
        for (int q = li; q < TK * LX; q += LX * LY) {
            int kk = k0 + q / LX;
            int n = n0 + q % LX;
            bs[q] = (kk < KD && n < NPG) ? wb[(g * KD + kk) * NPG + n] : vec4(0.0);
        }
        barrier();
        for (int c = 0; c < TK; c++) {
            vec4 bv = bs[c * LX + lx];
            for (int r = 0; r < R; r++) acc[r] += as_[(ly * R + r) * TK + c] * bv;
        }
        barrier();
    }
    int n = n0 + lx;
    if (n >= NPG) return;
    for (int r = 0; r < R; r++) {
        int m = m0 + ly * R + r;
        if (m < m_count) {
            ivec2 pixel = ivec2(m % width, m / width + u_row0);
            imageStore(u_out, ivec3(pixel, g * NPG + n), acc[r] + bias[g * NPG + n]);
        }
    }"""
    return (_head((lx, ly)) + "layout(rgba32f, binding = 1) uniform highp writeonly image2DArray u_out;\n"
            "layout(std430, binding = 0) readonly buffer A { float a[]; };\n"
            f"layout(std430, binding = 1) readonly buffer W {{ vec4 bias[{npg * layer.groups}]; "
            "vec4 wb[]; };\n"
            "uniform ivec2 u_out_size;\nuniform int u_row0;\nuniform int u_rows;\n"
            f"const int KD = {kd};\nconst int NPG = {npg};\nconst int LX = {lx};\nconst int LY = {ly};\n"
            f"const int TM = {tm};\nconst int TK = {tk};\nconst int R = {r};\n"
            f"shared float as_[TM * TK];\nshared vec4 bs[TK * LX];\n"
            "void main() {\n" + body + "\n}\n")


def gemm_weights(layer: Layer) -> np.ndarray:
    """``vec4 bias[packs]`` then ``vec4 wb[(g * KD + k) * NPG + n]`` (im2col column order
    ``(dy * k + dx) * cin_g + c``)."""
    npg = ir.packs(layer.cout // layer.groups)
    k, cg = layer.kernel.shape[0], layer.kernel.shape[2]
    cout_g = layer.cout // layer.groups
    wb = np.zeros((layer.groups, k * k * cg, npg * 4), np.float32)
    bias = np.zeros((layer.groups, npg * 4), np.float32)
    for g in range(layer.groups):
        wb[g, :, :cout_g] = layer.kernel[..., g * cout_g:(g + 1) * cout_g].reshape(k * k * cg, cout_g)
        bias[g, :cout_g] = layer.bias[g * cout_g:(g + 1) * cout_g]
    return np.concatenate([bias.ravel(), wb.ravel()])


# --- Winograd F(2x2, 3x3) -----------------------------------------------------------------------

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


def winograd_input_source(layer: Layer) -> str:
    d = [[f"d{i}{j}" for j in range(4)] for i in range(4)]
    body = ["    ivec2 t = ivec2(gl_GlobalInvocationID.xy) + ivec2(0, u_trow0);",
            "    int p = int(gl_WorkGroupID.z);",
            "    if (t.x >= u_tiles.x || t.y >= min(u_trow0 + u_trows, u_tiles.y)) return;",
            "    ivec2 b = t * 2 - u_pad;"]
    for i in range(4):
        for j in range(4):
            body.append(f"    ivec2 q{i}{j} = b + ivec2({j}, {i});")
            body.append(f"    vec4 d{i}{j} = inside(q{i}{j}) ? imageLoad(u_in, ivec3(q{i}{j}, p)) : vec4(0.0);")
    body += _sandwich(WINOGRAD_BT, d, WINOGRAD_BT.T, "v")
    body += ["    int tile = (t.y - u_trow0) * u_tiles.x + t.x;",
             "    int count = u_trows * u_tiles.x;"]
    for i in range(4):
        for j in range(4):
            body.append(f"    v[({i * 4 + j} * count + tile) * P + p] = v{i}{j};")
    return (_head() + "layout(rgba32f, binding = 0) uniform highp readonly image2DArray u_in;\n"
            "layout(std430, binding = 0) writeonly buffer V { vec4 v[]; };\n"
            "uniform ivec2 u_in_size;\nuniform ivec2 u_pad;\nuniform ivec2 u_tiles;\n"
            "uniform int u_trow0;\nuniform int u_trows;\n"
            f"const int P = {ir.packs(layer.cin)};\n" + INSIDE
            + "void main() {\n" + "\n".join(body) + "\n}\n")


def winograd_product_source(layer: Layer) -> str:
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
    body += _sandwich(WINOGRAD_AT, m, WINOGRAD_AT.T, "y")
    for i in range(2):
        for j in range(2):
            body += [f"    ivec2 p{i}{j} = t * 2 + ivec2({j}, {i});",
                     f"    if (all(lessThan(p{i}{j}, u_out_size))) "
                     f"imageStore(u_out, ivec3(p{i}{j}, o), y{i}{j} + bias[o]);"]
    return (_head() + "layout(rgba32f, binding = 1) uniform highp writeonly image2DArray u_out;\n"
            "layout(std430, binding = 0) readonly buffer V { vec4 v[]; };\n"
            f"layout(std430, binding = 1) readonly buffer U {{ vec4 bias[{nop}]; mat4 u[]; }};\n"
            "uniform ivec2 u_out_size;\nuniform ivec2 u_tiles;\nuniform int u_trow0;\n"
            "uniform int u_trows;\n"
            f"const int NOP = {nop};\nconst int NING = {ning};\nconst int NOPG = {nopg};\n"
            f"const int P = {ir.packs(layer.cin)};\n"
            "void main() {\n" + "\n".join(body) + "\n}\n")


def winograd_weights(layer: Layer) -> np.ndarray:
    """``vec4 bias[out packs]`` then ``mat4 u[(xi * NOP + o) * NING + j]``: the transformed
    filter ``U = G g G^T`` (16 values ``xi`` per input/output channel pair)."""
    g = layer.kernel.astype(np.float64)
    u = np.einsum("ai,ijcd,bj->abcd", WINOGRAD_G, g, WINOGRAD_G).reshape(16, *g.shape[2:])
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


# --- planning and running -------------------------------------------------------------------------

def plan(algorithm, layer: Layer, hw):
    """What one convolution of an ``hw = (height, width)`` input takes: ``(sources, images,
    buffers, steps)`` for :mod:`workbench.gl.compute` (steps name programs by their index in
    ``sources``; resource keys are ``(OWNER, name)``)."""
    layer.check(algorithm)
    op = layer.op()
    hin, win = hw
    hout, wout = op.out_hw(hw)
    top, left = op.pads(hw)
    key = lambda name: (OWNER, name)  # noqa: E731
    images = {key("x"): (win, hin, ir.packs(layer.cin), "f4"),
              key("y"): (wout, hout, ir.packs(layer.cout), "f4")}
    common = {"u_in_size": (win, hin), "u_out_size": (wout, hout), "u_pad": (left, top)}
    if algorithm in ("direct", "direct_tiled"):
        opts = Options(tile=algorithm == "direct_tiled")
        kernel, weights = direct.kernel(op, opts), direct.weights(op, opts)
        steps = [{"program": 0, "groups": (-(-wout // 8), -(-hout // 8), kernel.jobs),
                  "images": [(0, key("x"), "read"), (1, key("y"), "write")],
                  "buffers": [(0, key("w"))], "uniforms": common}]
        return [kernel.source], images, {key("w"): weights.tobytes()}, steps
    if algorithm == "im2col_gemm":
        k = layer.kernel.shape[0]
        kd = k * k * layer.kernel.shape[2]
        rows = _band(hout, 4 * kd * wout * layer.groups)
        npg, lx, ly, _ = gemm_layout(layer)
        buffers = {key("a"): 4 * kd * wout * rows * layer.groups,
                   key("w"): gemm_weights(layer).tobytes()}
        steps = []
        for row0 in range(0, hout, rows):
            band = {"u_row0": row0, "u_rows": rows}
            m = min(rows, hout - row0) * wout
            steps.append({"program": 0, "groups": (-(-wout // 8), -(-min(rows, hout - row0) // 8),
                                                  layer.groups),
                          "images": [(0, key("x"), "read")], "buffers": [(0, key("a"))],
                          "uniforms": {**common, **band}})
            steps.append({"program": 1, "groups": (-(-npg // lx), -(-m // (ly * GEMM_ROWS)),
                                                  layer.groups),
                          "images": [(1, key("y"), "write")],
                          "buffers": [(0, key("a")), (1, key("w"))],
                          "uniforms": {"u_out_size": (wout, hout), **band}})
        return [im2col_source(layer), gemm_source(layer)], images, buffers, steps
    # winograd
    tiles = (-(-wout // 2), -(-hout // 2))
    packs_in = ir.packs(layer.cin)
    trows = _band(tiles[1], 16 * 16 * packs_in * tiles[0])
    buffers = {key("v"): 16 * 16 * packs_in * tiles[0] * trows,
               key("u"): winograd_weights(layer).tobytes()}
    steps = []
    for trow0 in range(0, tiles[1], trows):
        n = min(trows, tiles[1] - trow0)
        band = {"u_tiles": tiles, "u_trow0": trow0, "u_trows": trows}
        steps.append({"program": 0, "groups": (-(-tiles[0] // 8), -(-n // 8), packs_in),
                      "images": [(0, key("x"), "read")], "buffers": [(0, key("v"))],
                      "uniforms": {"u_in_size": (win, hin), "u_pad": (left, top), **band}})
        steps.append({"program": 1, "groups": (-(-tiles[0] // 8), -(-n // 8), ir.packs(layer.cout)),
                      "images": [(1, key("y"), "write")],
                      "buffers": [(0, key("v")), (1, key("u"))],
                      "uniforms": {"u_out_size": (wout, hout), **band}})
    return ([winograd_input_source(layer), winograd_product_source(layer)], images, buffers,
            steps)


def _prepare(algorithm, layer, hw, x=None):

    sources, images, buffers, steps = plan(algorithm, layer, hw)
    worker = gl.worker(gl.COMPUTE)
    _, ids = worker.call("compile", sources=sources)
    worker.call("allocate", images=images, buffers=buffers, owner=OWNER)
    if x is None:
        x = np.random.default_rng(0).random((*hw, layer.cin), dtype=np.float32)
    packs = ir.packs(layer.cin)
    data = np.zeros((*hw, 4 * packs), np.float32)
    data[..., :layer.cin] = x
    worker.call("write", images={(OWNER, "x"): data.reshape(*hw, packs, 4).transpose(2, 0, 1, 3)})
    for step in steps:
        step["program"] = ids[step["program"]]
    return worker, steps


def run(algorithm, layer: Layer, x) -> np.ndarray:
    """The convolution of ``x`` (HxWxCin float32) on the GPU: HoxWoxCout float32."""
    x = np.asarray(x, np.float32)
    worker, steps = _prepare(algorithm, layer, x.shape[:2], x)
    _, arrays, _ = worker.call("run", steps=steps, reads=[(OWNER, "y")], timed=False)
    y = arrays[(OWNER, "y")]
    worker.call("allocate", owner=OWNER)  # free the memory
    return y.transpose(1, 2, 0, 3).reshape(*y.shape[1:3], -1)[..., :layer.cout]


def time_conv(algorithm, layer: Layer, hw, repeat=3, min_seconds=0.2) -> dict:
    """Seconds of one convolution of an ``hw = (height, width)`` input (see the module
    docstring): ``{"seconds": median, "runs": [...], "dispatches": n}``.  Short convolutions
    run more than ``repeat`` times, until about ``min_seconds`` are measured (up to 50 runs),
    so that the median of sub-millisecond times is not one scheduler hiccup."""
    worker, steps = _prepare(algorithm, layer, hw)
    runs = worker.call("time", steps=steps, repeat=repeat)
    more = min(50, int(min_seconds / max(min(runs), 1e-6))) - len(runs)
    if more > 0:
        runs += worker.call("time", steps=steps, repeat=more, warmup=0)
    worker.call("allocate", owner=OWNER)
    return {"seconds": float(np.median(runs)), "runs": runs, "dispatches": len(steps)}


