"""OpenGL ES 3.1 back end: ``#version 310 es`` compute shaders from the same IR.

``net = workbench.glsl.compile(model, target="es31")`` (or :func:`compile`) lowers a Keras
model to the IR (:mod:`workbench.ir`: BatchNorm folded, shuffles as binding orders) and
generates one compute program per op; ``net.run(image)`` runs them on the GPU (moderngl,
headless EGL, in the child process of :mod:`workbench.gl_compute`), ``net.cost(hw)`` counts
what they do, ``net.save(dir)`` writes the shaders and a JSON manifest.

Storage: every tensor is one 2D array image, RGBA32F (``storage="rgba32f"``) or RGBA16F,
layer ``p`` holding channels ``4p .. 4p+3`` (the ES 2.0 back end's packs, as layers of one
image instead of separate textures).  Weights live in one shader storage buffer per op:
``vec4 bias[out packs]`` followed by ``mat4 w[]`` (column ``i`` of a ``mat4`` = the weights
of input component ``i``, as in the ES 2.0 shaders).  Nothing crosses to the CPU between ops.

Convolution (``conv_kernel``): local size 8x8 (``local_size``); each invocation computes one
output pixel for ``B`` output packs of one group (``max_outputs`` caps ``B``), so every input
value it reads serves ``4B`` output channels; a work group loads the input tile its 8x8
outputs need (``(8s + k - s)^2`` texels per input pack) into shared memory once, and every
invocation reads its ``k x k`` window from there (``tile=False``: straight from the image).
Depth-to-space runs per input pixel (the SR demux: the ``block^2`` sub-pixels of one
low-resolution pixel and their bilinear chroma from its 3x3 neighbourhood).  Global average
pooling + Dense: a reduction per input pack in a work group's shared memory, then one work
group per output pack, in float (the IR's 16-bit fixed point is an ES 2.0 storage matter).

Cost convention (:meth:`Net.cost`): ``texel_fetches`` counts ``imageLoad`` calls executed,
one RGBA texel each, the same unit as the ES 2.0 back end's ``texture2D`` fetches, so the two
compare; reads of shared memory and of the weight buffers are not counted (the ES 2.0 convs
keep their weights in shader constants, which are not counted either).  Loads outside the
input (zero padding) are skipped, not made.  ``texture_bytes`` is the op's output image.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from workbench import activations, ir
from workbench.cost import Cost
from workbench.files import atomic_path, write_json

STORAGES = {"rgba32f": "f4", "rgba16f": "f2"}
LOAD_COUNTER_BINDING = 1


@dataclass(frozen=True)
class Options:
    storage: str = "rgba32f"
    local_size: tuple[int, int] = (8, 8)
    max_outputs: int = 8      # output packs one invocation computes (registers: 4 floats each)
    tile: bool = True         # stage input tiles in shared memory (convs with k > 1)
    count_loads: bool = False  # instrument every imageLoad with an atomic counter (tests)

    def __post_init__(self):
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {sorted(STORAGES)}, not {self.storage!r}")
        lx, ly = self.local_size
        if lx * ly > 128 or lx < 1 or ly < 1:
            raise ValueError(f"local size {self.local_size}: ES 3.1 guarantees 128 invocations")


@dataclass
class Kernel:
    """One compute program: its source and what it binds.

    ``images``: ``(unit, tensor, access)``; ``weights``: the op's storage-buffer key (binding
    0) or None; ``grid``: what the work groups cover -- ``"out"`` the output pixels (z: jobs),
    ``"in"`` the input pixels, ``"packs"`` one group per job (z)."""

    name: str
    op: str
    source: str
    images: list[tuple[int, str, str]]
    weights: str | None
    uniforms: list[str]
    grid: str
    jobs: int


def _f(v) -> str:
    s = f"{float(np.float32(v)):.9g}"
    return s if any(ch in s for ch in ".en") else s + ".0"


def _header(opts: Options, local=None):
    lx, ly = local or opts.local_size
    head = ("#version 310 es\nprecision highp float;\nprecision highp int;\n"
            "precision highp image2DArray;\n"
            f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = 1) in;\n")
    if opts.count_loads:
        head += (f"layout(std430, binding = {LOAD_COUNTER_BINDING}) buffer Loads "
                 "{ uint loads; };\n")
    return head


def _image(opts, unit, name, access):
    return f"layout({opts.storage}, binding = {unit}) uniform highp {access} image2DArray {name};\n"


def _load_fn(opts, fn, image, luma=False):
    """``vec4 fn(ivec2 p, int layer)``: one counted imageLoad."""
    count = "    atomicAdd(loads, 1u);\n" if opts.count_loads else ""
    value = "imageLoad({}, ivec3(p, layer))".format(image)
    if luma:
        value = f"vec4(dot({value}.rgb, vec3({', '.join(_f(v) for v in ir.LUMA)})), 0.0, 0.0, 0.0)"
    return f"vec4 {fn}(ivec2 p, int layer) {{\n{count}    return {value};\n}}\n"


def _int_array(name, values):
    return f"const int {name}[{len(values)}] = int[]({', '.join(str(int(v)) for v in values)});\n"


# --- convolution -----------------------------------------------------------------------------

def _largest_divisor(n, cap):
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


@dataclass(frozen=True)
class ConvPlan:
    """How a conv is split: ``block`` output packs per invocation, ``jobs`` (work groups
    along z), ``nin`` input packs per job, ``stage`` input packs per shared-memory tile."""

    k: int
    stride: int
    block: int
    jobs: int
    nin: int
    tiled: bool
    tile: tuple[int, int]   # (width, height) of a tile, texels
    stage: int


def conv_plan(op: ir.Conv, opts: Options) -> ConvPlan:
    out_packs = op.out_packs()
    if op.groups > 1 and not op.luma_input:
        cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
        if cin_g % ir.PACK or cout_g % ir.PACK:
            raise ir.LoweringError(f"layer {op.name!r}: a grouped conv needs groups of whole "
                                   f"RGBA packs ({cin_g} -> {cout_g} channels per group)")
        per_group = cout_g // ir.PACK
    else:
        per_group = out_packs
    block = _largest_divisor(per_group, opts.max_outputs)
    k, s = op.size, op.stride
    lx, ly = opts.local_size
    tw, th = lx * s + k - s, ly * s + k - s
    tiled = opts.tile and k > 1
    stage = 0
    nin = len(op.input_packs(0))
    if tiled:
        stage = min(nin, max(1, 16384 // (16 * tw * th)))
        if 16 * tw * th > 16384:
            raise ir.LoweringError(f"layer {op.name!r}: a {tw}x{th} input tile exceeds the "
                                   "16 KiB of shared memory ES 3.1 guarantees; use a smaller "
                                   "local size or tile=False")
    return ConvPlan(k, s, block, out_packs // block, nin, tiled, (tw, th), stage)


def conv_weights(op: ir.Conv, plan: ConvPlan) -> np.ndarray:
    """The storage buffer of a conv as float32: ``vec4 bias[out packs]``, then
    ``mat4 w[(pack * nin + i) * k * k + tap]`` with ``m[i_component][o_component]``."""
    k, nin, out_packs = op.size, plan.nin, op.out_packs()
    cin_g = op.kernel.shape[2]
    w = np.zeros((out_packs, nin, k * k, 4, 4), np.float32)
    bias = np.zeros((out_packs, 4), np.float32)
    for p in range(out_packs):
        outs = list(range(p * 4, min(p * 4 + 4, op.cout)))
        bias[p, :len(outs)] = op.bias[outs]
        for i in range(nin):
            for a, c in enumerate(range(i * 4, min(i * 4 + 4, cin_g))):
                w[p, i, :, a, :len(outs)] = op.kernel[:, :, c, outs].reshape(k * k, len(outs))
    return np.concatenate([bias.ravel(), w.ravel()])


def conv_kernel(op: ir.Conv, opts: Options) -> Kernel:
    plan = conv_plan(op, opts)
    lx, ly = opts.local_size
    k, s, b, nin = plan.k, plan.stride, plan.block, plan.nin
    layers = [p for job in range(plan.jobs) for p in op.input_packs(job * b)]
    images = [(0, op.input, "read"), (1, op.name, "write")]
    src = _header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
    if op.residual:
        images.append((2, op.residual, "read"))
        src += _image(opts, 2, "u_res", "readonly")
    src += ("layout(std430, binding = 0) readonly buffer Weights "
            f"{{ vec4 bias[{op.out_packs()}]; mat4 w[]; }};\n"
            "uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\nuniform ivec2 u_pad;\n"
            f"const int K = {k};\nconst int S = {s};\nconst int NIN = {nin};\n"
            f"const int B = {b};\nconst int KK = K * K;\n" + _int_array("LAYERS", layers)
            + _load_fn(opts, "load_in", "u_in", op.luma_input))
    if op.residual:
        src += _load_fn(opts, "load_res", "u_res")
    src += ("bool inside(ivec2 p) {\n"
            "    return all(greaterThanEqual(p, ivec2(0))) && all(lessThan(p, u_in_size));\n}\n")
    body = ["    ivec2 o = ivec2(gl_GlobalInvocationID.xy);",
            "    int job = int(gl_WorkGroupID.z);",
            "    bool live = all(lessThan(o, u_out_size));",
            "    vec4 acc[B];",
            "    for (int j = 0; j < B; j++) acc[j] = bias[job * B + j];"]
    if plan.tiled:
        tw, th = plan.tile
        src += (f"const int TW = {tw};\nconst int TH = {th};\nconst int P = {plan.stage};\n"
                "shared vec4 tile[P * TW * TH];\n")
        body += [
            f"    ivec2 origin = ivec2(gl_WorkGroupID.xy) * ivec2({lx * s}, {ly * s}) - u_pad;",
            "    ivec2 local = ivec2(gl_LocalInvocationID.xy) * S;",
            "    for (int s0 = 0; s0 < NIN; s0 += P) {",
            f"        for (int q = int(gl_LocalInvocationIndex); q < P * TW * TH; q += {lx * ly}) {{",
            "            int pi = q / (TW * TH);",
            "            int r = q - pi * (TW * TH);",
            "            ivec2 p = origin + ivec2(r % TW, r / TW);",
            "            vec4 v = vec4(0.0);",
            "            if (s0 + pi < NIN && inside(p)) v = load_in(p, LAYERS[job * NIN + s0 + pi]);",
            "            tile[q] = v;",
            "        }",
            "        barrier();",
            "        if (live) {",
            "            for (int pi = 0; pi < P; pi++) {",
            "                if (s0 + pi >= NIN) break;",
            "                for (int dy = 0; dy < K; dy++) {",
            "                    for (int dx = 0; dx < K; dx++) {",
            "                        vec4 x = tile[pi * TW * TH + (local.y + dy) * TW + local.x + dx];",
            "                        int wi = (job * B * NIN + s0 + pi) * KK + dy * K + dx;",
            "                        for (int j = 0; j < B; j++) acc[j] += w[wi + j * NIN * KK] * x;",
            "                    }",
            "                }",
            "            }",
            "        }",
            "        barrier();",
            "    }"]
    else:
        body += [
            "    if (live) {",
            "        ivec2 base = o * S - u_pad;",
            "        for (int i = 0; i < NIN; i++) {",
            "            int layer = LAYERS[job * NIN + i];",
            "            for (int dy = 0; dy < K; dy++) {",
            "                for (int dx = 0; dx < K; dx++) {",
            "                    ivec2 p = base + ivec2(dx, dy);",
            "                    if (!inside(p)) continue;",
            "                    vec4 x = load_in(p, layer);",
            "                    int wi = (job * B * NIN + i) * KK + dy * K + dx;",
            "                    for (int j = 0; j < B; j++) acc[j] += w[wi + j * NIN * KK] * x;",
            "                }",
            "            }",
            "        }",
            "    }"]
    act = activations.get(op.activation).glsl.format(x="v")
    body += ["    if (!live) return;",
             "    for (int j = 0; j < B; j++) {",
             "        vec4 v = acc[j];"]
    if op.residual:
        body.append("        v += load_res(o, job * B + j);")
    body += [f"        imageStore(u_out, ivec3(o, job * B + j), {act});", "    }"]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    uniforms = ["u_in_size", "u_out_size", "u_pad"]
    return Kernel(op.name, op.name, src, images, f"{op.name}/weights", uniforms, "out", plan.jobs)


def _tile_span(n_groups, group, stride, k, pad, size):
    """Per axis: the input texels inside the image that the tiles of ``n_groups`` work groups
    cover, summed over the groups (each loaded once per work group)."""
    width = group * stride + k - stride
    starts = (g * group * stride - pad for g in range(n_groups))
    return sum(max(0, min(start + width, size) - max(start, 0)) for start in starts)


def conv_loads(op: ir.Conv, shapes, opts: Options) -> int:
    """``imageLoad`` calls of :func:`conv_kernel` for these shapes (exact)."""
    plan = conv_plan(op, opts)
    hin, win, _ = shapes[op.input]
    hout, wout, _ = shapes[op.name]
    top, left = op.pads((hin, win))
    lx, ly = opts.local_size
    if plan.tiled:
        gx, gy = -(-wout // lx), -(-hout // ly)
        sx = _tile_span(gx, lx, plan.stride, plan.k, left, win)
        sy = _tile_span(gy, ly, plan.stride, plan.k, top, hin)
        loads = plan.jobs * plan.nin * sx * sy
    else:
        def inside(n_out, pad, size):
            return sum(sum(1 for d in range(plan.k) if 0 <= o * plan.stride - pad + d < size)
                       for o in range(n_out))
        loads = plan.jobs * plan.nin * inside(wout, left, win) * inside(hout, top, hin)
    if op.residual:
        loads += hout * wout * op.out_packs()
    return loads


# --- depth to space, pooling, dense ------------------------------------------------------------

def depth_to_space_kernel(op: ir.DepthToSpace, shapes, opts: Options) -> Kernel:
    """One invocation per input pixel writes its ``block x block`` output pixels."""
    blk = op.block
    n_out = op.out_packs(shapes)
    needed = sorted({c // 4 for p in range(n_out) for chans in op.source_channels(shapes, p)
                     for c in chans})
    images = [(0, op.input, "read"), (1, op.name, "write")]
    src = _header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
    src += "uniform ivec2 u_in_size;\n" + _load_fn(opts, "load_in", "u_in")
    if op.chroma_from:
        images.append((2, op.chroma_from, "read"))
        src += _image(opts, 2, "u_image", "readonly") + _load_fn(opts, "load_image", "u_image")
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_in_size))) return;"]
    body += [f"    vec4 t{p} = load_in(q, {p});" for p in needed]
    if op.chroma_from:
        luma = f"vec3({', '.join(_f(v) for v in ir.LUMA)})"
        for a in range(3):
            for c in range(3):
                body.append(f"    vec3 n{a}{c} = load_image(clamp(q + ivec2({c - 1}, {a - 1}), "
                            f"ivec2(0), u_in_size - 1), 0).rgb;")
    for dy in range(blk):
        for dx in range(blk):
            s = dy * blk + dx
            for p in range(n_out):
                chans = op.source_channels(shapes, p)[s]
                parts = [f"t{c // 4}.{'xyzw'[c % 4]}" for c in chans] + ["0.0"] * (4 - len(chans))
                where = f"ivec3(q * {blk} + ivec2({dx}, {dy}), {p})"
                if not op.chroma_from:
                    body.append(f"    imageStore(u_out, {where}, vec4({', '.join(parts)}));")
                    continue
                # bilinear chroma at the sub-pixel, half-pixel centres, clamped edges
                oy, ox = (np.floor((d + 0.5) / blk - 0.5) for d in (dy, dx))
                fy, fx = ((d + 0.5) / blk - 0.5 - o for d, o in ((dy, oy), (dx, ox)))
                a, c = int(oy) + 1, int(ox) + 1
                body += [f"    {{ vec3 rgb = mix(mix(n{a}{c}, n{a}{c + 1}, {_f(fx)}), "
                         f"mix(n{a + 1}{c}, n{a + 1}{c + 1}, {_f(fx)}), {_f(fy)});",
                         f"      imageStore(u_out, {where}, vec4(clamp(rgb + ({parts[0]} - "
                         f"dot(rgb, {luma})), 0.0, 1.0), 1.0)); }}"]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    return Kernel(op.name, op.name, src, images, None, ["u_in_size"], "in", 1)


def depth_to_space_loads(op: ir.DepthToSpace, shapes, opts: Options) -> int:
    h, w, _ = shapes[op.input]
    needed = {c // 4 for p in range(op.out_packs(shapes)) for chans in op.source_channels(shapes, p)
              for c in chans}
    return h * w * (len(needed) + (9 if op.chroma_from else 0))


def _reduce_tree(n):
    top = 1 << (n - 1).bit_length()
    return [f"    for (int k = {top // 2}; k > 0; k /= 2) {{",
            f"        if (idx < k && idx + k < {n}) part[idx] += part[idx + k];",
            "        barrier();", "    }"]


def pool_kernel(op: ir.Dense, opts: Options) -> Kernel:
    """Global average of each input pack: one work group per pack, a shared-memory tree."""
    lx, ly = opts.local_size
    n = lx * ly
    src = (_header(opts) + _image(opts, 0, "u_in", "readonly")
           + _image(Options(storage="rgba32f"), 1, "u_out", "writeonly")
           + "uniform ivec2 u_in_size;\n" + _load_fn(opts, "load_in", "u_in")
           + f"shared vec4 part[{n}];\n")
    body = ["    int idx = int(gl_LocalInvocationIndex);",
            "    int layer = int(gl_WorkGroupID.z);",
            "    int count = u_in_size.x * u_in_size.y;",
            "    vec4 s = vec4(0.0);",
            f"    for (int i = idx; i < count; i += {n}) s += load_in(ivec2(i % u_in_size.x, "
            "i / u_in_size.x), layer);",
            "    part[idx] = s;", "    barrier();"] + _reduce_tree(n) + [
            "    if (idx == 0) imageStore(u_out, ivec3(0, 0, layer), part[0] / float(count));"]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    return Kernel(f"{op.name}.pool", op.name, src,
                  [(0, op.input, "read"), (1, f"{op.name}/pooled", "write")], None,
                  ["u_in_size"], "packs", ir.packs(op.cin))


def dense_weights(op: ir.Dense) -> np.ndarray:
    """``vec4 bias[out packs]`` then ``mat4 w[out_pack * in_packs + j]``, float32."""
    nin, nout = ir.packs(op.cin), ir.packs(op.cout)
    weight = np.zeros((nin * 4, nout * 4), np.float32)
    weight[:op.cin, :op.cout] = op.weight
    bias = np.zeros(nout * 4, np.float32)
    bias[:op.cout] = op.bias
    w = weight.reshape(nin, 4, nout, 4).transpose(2, 0, 1, 3)  # [o_pack, j, i_comp, o_comp]
    return np.concatenate([bias, w.ravel()]).astype(np.float32)


def dense_kernel(op: ir.Dense, opts: Options) -> Kernel:
    """One work group per output pack: its invocations share the input packs, then a tree."""
    lx, ly = opts.local_size
    n = lx * ly
    nin, nout = ir.packs(op.cin), ir.packs(op.cout)
    f32 = Options(storage="rgba32f", local_size=opts.local_size, count_loads=opts.count_loads)
    src = (_header(opts) + _image(f32, 0, "u_in", "readonly") + _image(f32, 1, "u_out", "writeonly")
           + "layout(std430, binding = 0) readonly buffer Weights "
           f"{{ vec4 bias[{nout}]; mat4 w[]; }};\n" + _load_fn(opts, "load_in", "u_in")
           + f"shared vec4 part[{n}];\n")
    body = ["    int idx = int(gl_LocalInvocationIndex);",
            "    int o = int(gl_WorkGroupID.z);",
            "    vec4 s = vec4(0.0);",
            f"    for (int j = idx; j < {nin}; j += {n}) s += w[o * {nin} + j] * load_in(ivec2(0), j);",
            "    part[idx] = s;", "    barrier();"] + _reduce_tree(n) + [
            "    if (idx == 0) imageStore(u_out, ivec3(0, 0, o), part[0] + bias[o]);"]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    return Kernel(f"{op.name}.dense", op.name, src,
                  [(0, f"{op.name}/pooled", "read"), (1, op.name, "write")], f"{op.name}/weights",
                  [], "packs", nout)


# --- the net ------------------------------------------------------------------------------------

def generate(graph: ir.Graph, opts: Options) -> list[Kernel]:
    shapes = graph.shapes(graph.input_size or (64, 64))
    kernels = []
    for op in graph.ops:
        if isinstance(op, ir.Conv):
            kernels.append(conv_kernel(op, opts))
        elif isinstance(op, ir.DepthToSpace):
            kernels.append(depth_to_space_kernel(op, shapes, opts))
        elif isinstance(op, ir.Dense):
            if not op.pool:
                raise ir.LoweringError(f"layer {op.name!r}: the ES 3.1 back end takes a Dense "
                                       "layer after a global average pooling only")
            kernels += [pool_kernel(op, opts), dense_kernel(op, opts)]
        else:
            raise ir.LoweringError(f"layer {op.name!r}: no ES 3.1 kernel for {type(op).__name__}")
    return kernels


def op_cost(op, shapes, opts: Options) -> Cost:
    """Cost of one op on this back end (convention in the module docstring)."""
    bytes_per_texel = 16 if opts.storage == "rgba32f" else 8
    if isinstance(op, ir.Conv):
        h, w, _ = shapes[op.name]
        return Cost(multiply_adds=h * w * op.kernel.size, texel_fetches=conv_loads(op, shapes, opts),
                    texture_bytes=h * w * op.out_packs() * bytes_per_texel, programs=1)
    if isinstance(op, ir.DepthToSpace):
        h, w, _ = shapes[op.name]
        return Cost(texel_fetches=depth_to_space_loads(op, shapes, opts),
                    texture_bytes=h * w * op.out_packs(shapes) * bytes_per_texel, programs=1)
    if isinstance(op, ir.Dense):
        h, w, _ = shapes[op.input]
        nin, nout = ir.packs(op.cin), ir.packs(op.cout)
        return Cost(multiply_adds=op.cin * op.cout + h * w * op.cin,
                    texel_fetches=h * w * nin + nout * nin,
                    texture_bytes=16 * (nin + nout), programs=2)
    raise TypeError(type(op).__name__)


def image_specs(graph: ir.Graph, hw, opts: Options) -> dict[str, tuple[int, int, int, str]]:
    """Every image for input size ``hw``: ``tensor -> (width, height, layers, dtype)``."""
    shapes = graph.shapes(hw)
    dtype = STORAGES[opts.storage]
    specs = {}
    for op in [graph.input] + graph.ops:
        h, w, c = shapes[op.name]
        if isinstance(op, ir.Dense):
            specs[f"{op.name}/pooled"] = (1, 1, ir.packs(op.cin), "f4")
            specs[op.name] = (1, 1, ir.packs(op.cout), "f4")
        elif isinstance(op, ir.DepthToSpace) and op.chroma_from:
            specs[op.name] = (w, h, 1, dtype)
        else:
            specs[op.name] = (w, h, ir.packs(c), dtype)
    return specs


_NEXT_ID = [0]


class Net:
    """A net as ES 3.1 compute programs.  Images are HxWxC float in [0, 1] (HxWx3 RGB for
    luma nets); :meth:`run` returns float32, unrounded (an image, or the logits)."""

    def __init__(self, graph: ir.Graph, kernels: list[Kernel], options: Options):
        self.graph, self.kernels, self.options = graph, kernels, options
        _NEXT_ID[0] += 1
        self.owner = f"es31-{_NEXT_ID[0]}"
        self._worker, self._hw, self.timings, self.loads = None, None, {}, {}
        self.compile_seconds = None

    @property
    def precision(self):
        return self.options.storage

    def _key(self, name):
        return (self.owner, name)

    def _ensure(self, hw):
        from workbench import gl_compute

        if self._worker is None or self._worker.proc.poll() is not None:
            self._worker = gl_compute.worker()
            self.compile_seconds, self._ids = self._worker.call(
                "compile", sources=[k.source for k in self.kernels])
            self._hw = None
        if self._hw == tuple(hw):
            return
        if self.graph.input_size and tuple(hw) != tuple(self.graph.input_size):
            raise ValueError(f"image of {hw[1]}x{hw[0]} pixels: net {self.graph.name!r} takes "
                             f"{self.graph.input_size[1]}x{self.graph.input_size[0]}")
        specs = image_specs(self.graph, hw, self.options)
        buffers = {}
        for op in self.graph.ops:
            if isinstance(op, ir.Conv):
                buffers[self._key(f"{op.name}/weights")] = conv_weights(
                    op, conv_plan(op, self.options)).tobytes()
            elif isinstance(op, ir.Dense):
                buffers[self._key(f"{op.name}/weights")] = dense_weights(op).tobytes()
        if self.options.count_loads:
            buffers.update({self._key(f"{k.name}/loads"): 4 for k in self.kernels})
        self._worker.call("allocate", images={self._key(k): v for k, v in specs.items()},
                          buffers=buffers, owner=self.owner)
        self.shapes, self._specs, self._hw = self.graph.shapes(hw), specs, tuple(hw)
        self._steps = [self._step(k, i) for k, i in zip(self.kernels, self._ids)]

    def _step(self, kernel: Kernel, program):
        lx, ly = self.options.local_size
        op = self.graph.op(kernel.op)

        def size(name):
            h, w, _ = self.shapes[name]
            return (w, h)

        values = {}
        if isinstance(op, ir.Conv):
            top, left = op.pads(self.shapes[op.input][:2])
            values = {"u_in_size": size(op.input), "u_out_size": size(op.name), "u_pad": (left, top)}
        elif isinstance(op, (ir.DepthToSpace, ir.Dense)):
            values = {"u_in_size": size(op.input)}
        if kernel.grid == "out":
            w, h = size(op.name)
            groups = (-(-w // lx), -(-h // ly), kernel.jobs)
        elif kernel.grid == "in":
            w, h = size(op.input)
            groups = (-(-w // lx), -(-h // ly), 1)
        else:
            groups = (1, 1, kernel.jobs)
        buffers = [(0, self._key(kernel.weights))] if kernel.weights else []
        if self.options.count_loads:
            buffers.append((LOAD_COUNTER_BINDING, self._key(f"{kernel.name}/loads")))
        return {"program": program, "groups": groups, "buffers": buffers,
                "images": [(u, self._key(t), a) for u, t, a in kernel.images],
                "uniforms": {n: values[n] for n in kernel.uniforms}}

    def run(self, image, keep=False):
        """Run on the GPU.  Returns the output (HxWxC image or logits vector), or with
        ``keep`` every tensor as stored, ``{tensor: HxWx(4*layers) float32}``."""
        image = self.graph.input_image(image)
        c = image.shape[2]
        self._ensure(image.shape[:2])
        packs = ir.packs(c)
        data = np.zeros((*image.shape[:2], 4 * packs), np.float32)
        data[..., :c] = image
        if self.graph.input.rgb:
            data[..., 3] = 1.0
        data = data.reshape(*image.shape[:2], packs, 4).transpose(2, 0, 1, 3)
        names = list(self._specs) if keep else [self.graph.output]
        buffers = {}
        if self.options.count_loads:
            buffers = {self._key(f"{k.name}/loads"): np.zeros(1, np.uint32) for k in self.kernels}
        self._worker.call("write", images={self._key(self.graph.input.name): data}, buffers=buffers)
        timings, arrays, counters = self._worker.call(
            "run", steps=self._steps, reads=[self._key(n) for n in names],
            buffer_reads=list(buffers))
        self.timings = {k.name: t for k, t in zip(self.kernels, timings)}
        if self.options.count_loads:
            self.loads = {k.name: int(np.frombuffer(counters[self._key(f"{k.name}/loads")],
                                                    np.uint32)[0]) for k in self.kernels}
        tensors = {name: arrays[self._key(name)].transpose(1, 2, 0, 3).reshape(
            *arrays[self._key(name)].shape[1:3], -1) for name in names}
        if keep:
            return tensors
        return output_values(self.graph, tensors[self.graph.output])

    def cost(self, hw) -> dict[str, Cost]:
        """Cost of every op for an input of ``hw = (height, width)``; ``texel_fetches`` are
        image loads (module docstring)."""
        shapes = self.graph.shapes(hw)
        return {op.name: op_cost(op, shapes, self.options) for op in self.graph.ops}

    def save(self, directory):
        """Write ``<kernel>.comp`` files, ``weights.npz`` (the storage buffers as uploaded,
        float32) and ``manifest.json``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for k in self.kernels:
            with atomic_path(directory / f"{k.name}.comp") as tmp:
                tmp.write_text(k.source)
        buffers = {}
        for op in self.graph.ops:
            if isinstance(op, ir.Conv):
                buffers[f"{op.name}/weights"] = conv_weights(op, conv_plan(op, self.options))
            elif isinstance(op, ir.Dense):
                buffers[f"{op.name}/weights"] = dense_weights(op)
        with atomic_path(directory / "weights.npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **buffers)
        hw = self.graph.input_size or (256, 256)
        lx, ly = self.options.local_size
        write_json(directory / "manifest.json", {
            "format": "workbench-es31/1",
            "name": self.graph.name,
            "options": asdict(self.options),
            "conventions": (
                "One 2D array image per tensor, layer p = channels 4p..4p+3 "
                f"({self.options.storage}); images bound layered at the units listed. Storage "
                "buffer binding 0 = the kernel's weights (weights.npz, float32): vec4 bias[out "
                "packs] then mat4 w[] (column i = input component i). Uniforms: u_in_size, "
                "u_out_size = (width, height); u_pad = zero padding before the first column "
                f"and row. Dispatch: grid 'out' = ceil(out w / {lx}) x ceil(out h / {ly}) x "
                f"jobs, 'in' = the same over the input, 'packs' = 1 x 1 x jobs."),
            "input": asdict(self.graph.input),
            "input_size": self.graph.input_size,
            "output": self.graph.output,
            "images_for_input": {"height": hw[0], "width": hw[1], "images": {
                name: {"width": w, "height": h, "layers": n,
                       "format": "RGBA32F" if d == "f4" else "RGBA16F"}
                for name, (w, h, n, d) in image_specs(self.graph, hw, self.options).items()}},
            "kernels": [{"name": k.name, "op": k.op, "shader": f"{k.name}.comp",
                         "images": [{"unit": u, "tensor": t, "access": a} for u, t, a in k.images],
                         "weights": k.weights, "uniforms": k.uniforms, "grid": k.grid,
                         "jobs": k.jobs} for k in self.kernels],
        })


def output_values(graph: ir.Graph, stored):
    op = graph.op(graph.output)
    if isinstance(op, ir.Dense):
        return stored.reshape(-1)[:op.cout].astype(np.float32)
    channels = 3 if isinstance(op, ir.DepthToSpace) and op.chroma_from else graph.channels(op.name)
    return stored[..., :channels].astype(np.float32)


def compile(model, storage="rgba32f", local_size=(8, 8), max_outputs=8, tile=True,
            luma_input=None, count_loads=False) -> Net:
    """Keras model -> IR -> ES 3.1 compute kernels.  See the module docstring."""
    graph = ir.from_keras(model, luma_input=luma_input, dense="float")
    return from_graph(graph, Options(storage, tuple(local_size), max_outputs, tile, count_loads))


def from_graph(graph: ir.Graph, options: Options = Options()) -> Net:
    return Net(graph, generate(graph, options), options)


def bench(count=3, seed=0, size=385, repeat=3, root=None):
    """dogs120 at 385x385 (random weights, BatchNorm calibrated on photos as
    :func:`workbench.deploy.dogs120_check`): ES 2.0 texel fetches vs ES 3.1 image loads,
    ES 2.0 vs ES 3.1 time on this machine (median of ``max(repeat, count)`` runs after a
    first, untimed one; whole ``net.run``: upload, passes, read-back), and both against TF's
    logits on ``count`` photos."""
    import keras

    from workbench import classify, cost, deploy, glsl
    from workbench.models import dogs_classifier

    keras.utils.set_random_seed(seed)
    model = dogs_classifier("dogs120")
    pictures = deploy.photos(size, count + 4, root)
    classify.calibrate_batchnorm(model, pictures[:4])
    pictures = pictures[4:]
    tf_logits = np.asarray(model.predict(pictures, verbose=0), np.float64)
    es2, es3 = glsl.compile(model), compile(model)
    result = {}
    for label, net in (("es2", es2), ("es31", es3)):
        start = time.perf_counter()
        net.run(pictures[0])  # compile + the driver's first translation
        first = time.perf_counter() - start
        seconds, logits = [], []
        for i in range(max(repeat, len(pictures))):  # every photo once, at least `repeat` runs
            start = time.perf_counter()
            out = net.run(pictures[i % len(pictures)])
            seconds.append(time.perf_counter() - start)
            logits += [out] if i < len(pictures) else []
        logits = np.array(logits, np.float64)
        total = cost.total(net.cost((size, size)).values())
        result[label] = {"fetches": total.texel_fetches, "multiply_adds": total.multiply_adds,
                         "programs": len(getattr(net, "passes", None) or net.kernels),
                         "first_run_s": first, "seconds": float(np.median(seconds)),
                         "pass_seconds": float(sum(net.timings.values())),
                         "max_logit_diff_tf": float(np.abs(logits - tf_logits).max()),
                         "top1_equals_tf": float(np.mean(logits.argmax(1) == tf_logits.argmax(1)))}
    result["loads_over_fetches"] = result["es31"]["fetches"] / result["es2"]["fetches"]
    result["time_ratio"] = result["es31"]["seconds"] / result["es2"]["seconds"]
    result["images"] = len(pictures)
    return result


def print_bench(r):
    size = 385
    e2, e3 = r["es2"], r["es31"]
    print(f"dogs120 at {size}x{size}, random weights, BatchNorm calibrated; {r['images']} photos")
    print(f"  {'':28s} {'ES 2.0':>14s} {'ES 3.1':>14s}")
    print(f"  {'programs':28s} {e2['programs']:>14,d} {e3['programs']:>14,d}")
    print(f"  {'multiply-adds':28s} {e2['multiply_adds']:>14,d} {e3['multiply_adds']:>14,d}")
    print(f"  {'texel fetches / image loads':28s} {e2['fetches']:>14,d} {e3['fetches']:>14,d}"
          f"   ratio {r['loads_over_fetches']:.3f} (goal <= 0.5)")
    print(f"  {'time per image (ms)':28s} {1000 * e2['seconds']:>14.1f} {1000 * e3['seconds']:>14.1f}"
          f"   ratio {r['time_ratio']:.3f}")
    print(f"  {'  passes alone (ms)':28s} {1000 * e2['pass_seconds']:>14.1f} {1000 * e3['pass_seconds']:>14.1f}")
    print(f"  {'first run (ms)':28s} {1000 * e2['first_run_s']:>14.1f} {1000 * e3['first_run_s']:>14.1f}")
    print(f"  {'max |logit - TF|':28s} {e2['max_logit_diff_tf']:>14.4f} {e3['max_logit_diff_tf']:>14.6f}")
    print(f"  {'top-1 = TF top-1':28s} {e2['top1_equals_tf']:>14.2%} {e3['top1_equals_tf']:>14.2%}")


def add_bench(bench_parser):
    """Add ``es31`` to the choices of ``python -m workbench bench`` (the ``sr`` bench stays)."""
    what = next(a for a in bench_parser._actions if a.dest == "what")
    what.choices = list(what.choices) + ["es31"]
    sr = bench_parser.get_default("func")

    def run(args):
        if args.what != "es31":
            return sr(args)
        print_bench(bench(repeat=args.repeat))
        return 0

    bench_parser.set_defaults(func=run)
