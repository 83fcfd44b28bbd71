"""Convolution algorithms as OpenGL ES 3.1 compute shaders: direct, im2col + GEMM, Winograd.

* ``direct``: one invocation per output pixel computes all output packs of its group (up to
  8) straight from the input image (:func:`workbench.es31.ops.conv.kernel`, ``tile=False``);
* ``direct_tiled``: the same with the work group's input tile staged in shared memory (what
  the ES 3.1 back end runs);
* ``im2col_gemm``: an im2col pass writes the patch matrix (output pixels x ``k*k*cin/groups``)
  to a storage buffer, a tiled GEMM (32-deep shared-memory tiles of A and B, each invocation
  4 rows x 4 output channels) multiplies it by the weights and writes the output image;
* ``winograd``: F(2x2, 3x3) (its kernels and filter transform: :mod:`workbench.es31.winograd`)
  -- an input-transform pass to a buffer, then the products summed over input channels and
  the output transform, writing 2x2 output pixels.  **Stride 1, 3x3 kernels only** (``same``
  or ``valid``).

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
from workbench.es31 import winograd
from workbench.es31.kernels import INSIDE, Options, header
from workbench.es31.ops import conv as direct

ALGORITHMS = ("direct", "direct_tiled", "im2col_gemm", "winograd")
BAND_BYTES = 64 << 20
OWNER = "conv_algorithms"


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
    return (header() + "layout(rgba32f, binding = 0) uniform highp readonly image2DArray u_in;\n"
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
    return (header(local=(lx, ly))
            + "layout(rgba32f, binding = 1) uniform highp writeonly image2DArray u_out;\n"
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
               key("u"): winograd.weights(layer).tobytes()}
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
    return ([winograd.input_source(layer), winograd.product_source(layer)], images, buffers,
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


