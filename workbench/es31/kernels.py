"""ES 3.1 compute kernels from the IR: one generator per op, and :data:`OPS`, the op table.

Conventions (storage, weights, local size, tiles, cost) in :mod:`workbench.es31`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from workbench import ir
from workbench.glsl_text import glsl_float
from workbench.ir.cost import Cost
from workbench.nets import activations

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
    0) or None; ``uniforms``: the ``ivec2`` uniforms and how to get their values
    (:func:`workbench.ir.uniform_values`); ``grid``: what the work groups cover --
    ``("pixels", tensor)`` that tensor's pixels (z: jobs), ``("jobs",)`` one group per job (z)."""

    name: str
    op: str
    source: str
    images: list[tuple[int, str, str]]
    weights: str | None
    uniforms: dict[str, tuple]
    grid: tuple
    jobs: int


def header(opts: Options, local=None):
    lx, ly = local or opts.local_size
    head = ("#version 310 es\nprecision highp float;\nprecision highp int;\n"
            "precision highp image2DArray;\n"
            f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = 1) in;\n")
    if opts.count_loads:
        head += (f"layout(std430, binding = {LOAD_COUNTER_BINDING}) buffer Loads "
                 "{ uint loads; };\n")
    return head


# ``inside(p)``: whether pixel ``p`` lies in the input image (``u_in_size``)
INSIDE = ("bool inside(ivec2 p) {\n    return all(greaterThanEqual(p, ivec2(0))) && "
          "all(lessThan(p, u_in_size));\n}\n")


def _image(opts, unit, name, access):
    return f"layout({opts.storage}, binding = {unit}) uniform highp {access} image2DArray {name};\n"


def _load_fn(opts, fn, image, luma=False):
    """``vec4 fn(ivec2 p, int layer)``: one counted imageLoad."""
    count = "    atomicAdd(loads, 1u);\n" if opts.count_loads else ""
    value = "imageLoad({}, ivec3(p, layer))".format(image)
    if luma:
        value = f"vec4(dot({value}.rgb, vec3({', '.join(glsl_float(v) for v in ir.LUMA)})), 0.0, 0.0, 0.0)"
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
    cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
    if op.groups > 1 and not op.luma_input:
        # a job's output packs read the same input packs: those of one group of whole packs,
        # else (groups that fill part of a pack, as a depthwise conv's) one output pack a job
        whole = not (cin_g % ir.PACK or cout_g % ir.PACK)
        per_group = cout_g // ir.PACK if whole else 1
    else:
        per_group = out_packs
    block = _largest_divisor(per_group, opts.max_outputs)
    k, s = op.size, op.stride
    lx, ly = opts.local_size
    tw, th = lx * s + k - s, ly * s + k - s
    tiled = opts.tile and k > 1
    stage = 0
    nin = max(len(op.input_packs(p)) for p in range(out_packs))
    if tiled:
        stage = min(nin, max(1, 16384 // (16 * tw * th)))
        if 16 * tw * th > 16384:
            raise ir.LoweringError(f"layer {op.name!r}: a {tw}x{th} input tile exceeds the "
                                   "16 KiB of shared memory ES 3.1 guarantees; use a smaller "
                                   "local size or tile=False")
    return ConvPlan(k, s, block, out_packs // block, nin, tiled, (tw, th), stage)


def conv_weights(op: ir.Conv, plan: ConvPlan) -> np.ndarray:
    """The storage buffer of a conv as float32: ``vec4 bias[out packs]``, then
    ``mat4 w[(pack * nin + i) * k * k + tap]`` with ``m[i_component][o_component]``
    (:meth:`workbench.ir.Conv.tap_weights`; 0 for the slots a pack that reads fewer input
    packs than ``nin`` leaves over)."""
    k, nin, out_packs = op.size, plan.nin, op.out_packs()
    w = np.zeros((out_packs, nin, k * k, 4, 4), np.float32)
    bias = np.zeros((out_packs, 4), np.float32)
    for p in range(out_packs):
        outs = list(range(p * 4, min(p * 4 + 4, op.cout)))
        bias[p, :len(outs)] = op.bias[outs]
        taps = op.tap_weights(p)  # (k, k, slots, 4, 4)
        w[p, :taps.shape[2]] = taps.reshape(k * k, taps.shape[2], 4, 4).transpose(1, 0, 2, 3)
    return np.concatenate([bias.ravel(), w.ravel()])


def _job_packs(op: ir.Conv, pack: int, nin: int) -> list[int]:
    """The input packs (layers) output pack ``pack``'s job loads: its own, then its first
    again up to ``nin`` (their weights are 0)."""
    mine = op.input_packs(pack)
    return mine + mine[:1] * (nin - len(mine))


def conv_kernel(op: ir.Conv, opts: Options) -> Kernel:
    op.zero_padded("the ES 3.1 back end")
    plan = conv_plan(op, opts)
    lx, ly = opts.local_size
    k, s, b, nin = plan.k, plan.stride, plan.block, plan.nin
    layers = [p for job in range(plan.jobs) for p in _job_packs(op, job * b, nin)]
    images = [(0, op.input, "read"), (1, op.name, "write")]
    src = header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
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
    src += INSIDE
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
    src += activations.glsl_arrays(op, op.out_packs())
    act = activations.glsl(op, "v", "job * B + j")
    body += ["    if (!live) return;",
             "    for (int j = 0; j < B; j++) {",
             "        vec4 v = acc[j];"]
    if op.residual:
        body.append("        v += load_res(o, job * B + j);")
    body += [f"        imageStore(u_out, ivec3(o, job * B + j), {act});", "    }"]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    uniforms = {"u_in_size": ("size", op.input), "u_out_size": ("size", op.name),
                "u_pad": ("pad", op.input, op.size, op.stride, op.padding)}
    return Kernel(op.name, op.name, src, images, f"{op.name}/weights", uniforms,
                  ("pixels", op.name), plan.jobs)


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
    src = header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
    src += "uniform ivec2 u_in_size;\n" + _load_fn(opts, "load_in", "u_in")
    if op.chroma_from:
        images.append((2, op.chroma_from, "read"))
        src += _image(opts, 2, "u_image", "readonly") + _load_fn(opts, "load_image", "u_image")
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_in_size))) return;"]
    body += [f"    vec4 t{p} = load_in(q, {p});" for p in needed]
    if op.chroma_from:
        luma = f"vec3({', '.join(glsl_float(v) for v in ir.LUMA)})"
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
                body.append(f"    {{ vec3 rgb = mix(mix(n{a}{c}, n{a}{c + 1}, {glsl_float(fx)}), "
                            f"mix(n{a + 1}{c}, n{a + 1}{c + 1}, {glsl_float(fx)}), "
                            f"{glsl_float(fy)});")
                y = parts[0]
                if op.anchor:  # the anchor's luma: this pixel's (nearest) or the bilinear one
                    near = "n11" if op.anchor == "nearest" else "rgb"
                    y = (f"clamp(dot({near}, {luma}) + {glsl_float(op.anchor_scale)} * "
                         f"({y} - 0.5), 0.0, 1.0)")
                body.append(f"      imageStore(u_out, {where}, vec4(clamp(rgb + ({y} - "
                            f"dot(rgb, {luma})), 0.0, 1.0), 1.0)); }}")
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    return Kernel(op.name, op.name, src, images, None, {"u_in_size": ("size", op.input)},
                  ("pixels", op.input), 1)


def depth_to_space_loads(op: ir.DepthToSpace, shapes, opts: Options) -> int:
    h, w, _ = shapes[op.input]
    needed = {c // 4 for p in range(op.out_packs(shapes)) for chans in op.source_channels(shapes, p)
              for c in chans}
    return h * w * (len(needed) + (9 if op.chroma_from else 0))


def window_pool_kernel(op: ir.Pool, shapes, opts: Options) -> Kernel:
    """Max or average pooling: one invocation per output pixel, every pack; a tap outside the
    input is skipped (left out of the max and of the average's count, as TF does)."""
    k, s, n = op.size, op.stride, op.out_packs(shapes)
    src = header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
    src += ("uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\nuniform ivec2 u_pad;\n"
            + _load_fn(opts, "load_in", "u_in"))
    start = "vec4(-3.0e38)" if op.kind == "max" else "vec4(0.0)"
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_out_size))) return;",
            f"    ivec2 first = q * {s} - u_pad;"]
    for p in range(n):
        body.append(f"    {{ vec4 acc = {start}; float count = 0.0;")
        for dy in range(k):
            for dx in range(k):
                step = (f"acc = max(acc, load_in(t, {p}));" if op.kind == "max"
                        else f"acc += load_in(t, {p}); count += 1.0;")
                body.append(f"      {{ ivec2 t = first + ivec2({dx}, {dy}); if (all(greaterThanEqual("
                            f"t, ivec2(0))) && all(lessThan(t, u_in_size))) {{ {step} }} }}")
        value = "acc" if op.kind == "max" else "acc / count"
        body.append(f"      imageStore(u_out, ivec3(q, {p}), {value}); }}")
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    uniforms = {"u_in_size": ("size", op.input), "u_out_size": ("size", op.name),
                "u_pad": ("pad", op.input, k, s, op.padding)}
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.name, "write")], None,
                  uniforms, ("pixels", op.name), 1)


def window_pool_cost(op: ir.Pool, shapes, opts: Options) -> Cost:
    """Loads: the taps inside the input, of every output pixel and pack."""
    h, w, c = shapes[op.input]
    oh, ow, _ = shapes[op.name]
    (top, left), k, s = ir.conv_pads((h, w), op.size, op.stride, op.padding), op.size, op.stride

    def inside(n_out, n_in, pad):  # taps inside the input, summed over one axis
        return sum(0 <= o * s - pad + d < n_in for o in range(n_out) for d in range(k))
    taps = inside(oh, h, top) * inside(ow, w, left)
    return Cost(multiply_adds=oh * ow * c * k * k if op.kind == "average" else 0,
                texel_fetches=taps * ir.packs(c),
                texture_bytes=oh * ow * ir.packs(c) * _texel_bytes(opts), programs=1)


def upsample_kernel(op: ir.Upsample, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel, every pack: the source pixel (nearest), or the 4
    nearest mixed with half-pixel centres and clamped edges (bilinear)."""
    n = op.out_packs(shapes)
    src = header(opts) + _image(opts, 0, "u_in", "readonly") + _image(opts, 1, "u_out", "writeonly")
    src += ("uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\n"
            + _load_fn(opts, "load_in", "u_in"))
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_out_size))) return;"]
    if op.interpolation == "nearest":
        body += [f"    imageStore(u_out, ivec3(q, {p}), load_in(q / {op.scale}, {p}));"
                 for p in range(n)]
    else:
        body += [f"    vec2 u = (vec2(q) + 0.5) / {glsl_float(op.scale)} - 0.5;",
                 "    vec2 i0 = floor(u);", "    vec2 f = u - i0;",
                 "    ivec2 lo = clamp(ivec2(i0), ivec2(0), u_in_size - 1);",
                 "    ivec2 hi = clamp(ivec2(i0) + 1, ivec2(0), u_in_size - 1);"]
        body += [f"    imageStore(u_out, ivec3(q, {p}), mix(mix(load_in(lo, {p}), "
                 f"load_in(ivec2(hi.x, lo.y), {p}), f.x), mix(load_in(ivec2(lo.x, hi.y), {p}), "
                 f"load_in(hi, {p}), f.x), f.y));" for p in range(n)]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    uniforms = {"u_in_size": ("size", op.input), "u_out_size": ("size", op.name)}
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.name, "write")], None,
                  uniforms, ("pixels", op.name), 1)


def upsample_cost(op: ir.Upsample, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    taps = 1 if op.interpolation == "nearest" else 4
    return Cost(multiply_adds=h * w * c * 3 if taps == 4 else 0,
                texel_fetches=h * w * ir.packs(c) * taps,
                texture_bytes=h * w * ir.packs(c) * _texel_bytes(opts), programs=1)


def add_kernel(op: ir.Add, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel: both inputs' packs added, then the activation."""
    n = op.out_packs(shapes)
    src = (header(opts) + _image(opts, 0, "u_a", "readonly") + _image(opts, 1, "u_b", "readonly")
           + _image(opts, 2, "u_out", "writeonly") + "uniform ivec2 u_out_size;\n"
           + _load_fn(opts, "load_a", "u_a") + _load_fn(opts, "load_b", "u_b"))
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_out_size))) return;"]
    body += [f"    {{ vec4 v = load_a(q, {p}) + load_b(q, {p}); imageStore(u_out, ivec3(q, {p}), "
             f"{activations.glsl(op, 'v', p)}); }}" for p in range(n)]
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    return Kernel(op.name, op.name, src, [(0, op.input, "read"), (1, op.other, "read"),
                                          (2, op.name, "write")], None,
                  {"u_out_size": ("size", op.name)}, ("pixels", op.name), 1)


def concat_kernel(op: ir.Concat, shapes, opts: Options) -> Kernel:
    """One invocation per output pixel: each input pack a channel comes from loaded once, the
    output packs assembled from their components."""
    inputs = list(op.inputs)
    src = "".join(_image(opts, u, f"u_in{u}", "readonly") for u in range(len(inputs)))
    src = (header(opts) + src + _image(opts, len(inputs), "u_out", "writeonly")
           + "uniform ivec2 u_out_size;\n"
           + "".join(_load_fn(opts, f"load_in{u}", f"u_in{u}") for u in range(len(inputs))))
    body = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
            "    if (any(greaterThanEqual(q, u_out_size))) return;"]
    sources = op.sources(shapes)
    loaded = list(dict.fromkeys((t, c // 4) for t, c in sources))
    body += [f"    vec4 t{i} = load_in{inputs.index(t)}(q, {k});" for i, (t, k) in enumerate(loaded)]
    for p in range(op.out_packs(shapes)):
        parts = [f"t{loaded.index((t, c // 4))}.{'xyzw'[c % 4]}" for t, c in sources[4 * p:4 * p + 4]]
        body.append(f"    imageStore(u_out, ivec3(q, {p}), vec4({', '.join(parts + ['0.0'] * (4 - len(parts)))}));")
    src += "void main() {\n" + "\n".join(body) + "\n}\n"
    images = [(u, t, "read") for u, t in enumerate(inputs)] + [(len(inputs), op.name, "write")]
    return Kernel(op.name, op.name, src, images, None, {"u_out_size": ("size", op.name)},
                  ("pixels", op.name), 1)


def add_cost(op: ir.Add, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    return Cost(multiply_adds=h * w * c, texel_fetches=2 * h * w * ir.packs(c),
                texture_bytes=h * w * ir.packs(c) * _texel_bytes(opts), programs=1)


def concat_cost(op: ir.Concat, shapes, opts: Options) -> Cost:
    h, w, c = shapes[op.name]
    loads = len({(t, ch // 4) for t, ch in op.sources(shapes)})
    return Cost(texel_fetches=h * w * loads,
                texture_bytes=h * w * ir.packs(c) * _texel_bytes(opts), programs=1)


def _reduce_tree(n):
    top = 1 << (n - 1).bit_length()
    return [f"    for (int k = {top // 2}; k > 0; k /= 2) {{",
            f"        if (idx < k && idx + k < {n}) part[idx] += part[idx + k];",
            "        barrier();", "    }"]


def pool_kernel(op: ir.Dense, opts: Options) -> Kernel:
    """Global average of each input pack: one work group per pack, a shared-memory tree."""
    lx, ly = opts.local_size
    n = lx * ly
    src = (header(opts) + _image(opts, 0, "u_in", "readonly")
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
                  {"u_in_size": ("size", op.input)}, ("jobs",), ir.packs(op.cin))


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
    src = (header(opts) + _image(f32, 0, "u_in", "readonly") + _image(f32, 1, "u_out", "writeonly")
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
                  {}, ("jobs",), nout)




def conv_cost(op: ir.Conv, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.name]
    return Cost(multiply_adds=h * w * op.kernel.size, texel_fetches=conv_loads(op, shapes, opts),
                texture_bytes=h * w * op.out_packs() * _texel_bytes(opts), programs=1)


def depth_to_space_cost(op: ir.DepthToSpace, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.name]
    return Cost(texel_fetches=depth_to_space_loads(op, shapes, opts),
                texture_bytes=h * w * op.out_packs(shapes) * _texel_bytes(opts), programs=1)


def dense_cost(op: ir.Dense, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.input]
    nin, nout = ir.packs(op.cin), ir.packs(op.cout)
    return Cost(multiply_adds=op.cin * op.cout + h * w * op.cin,
                texel_fetches=h * w * nin + nout * nin, texture_bytes=16 * (nin + nout), programs=2)


def _texel_bytes(opts: Options) -> int:
    return 16 if opts.storage == "rgba32f" else 8


def dense_kernels(op: ir.Dense, shapes, opts: Options) -> list[Kernel]:
    if not op.pool:
        raise ir.LoweringError(f"layer {op.name!r}: the ES 3.1 back end takes a Dense "
                               "layer after a global average pooling only")
    return [pool_kernel(op, opts), dense_kernel(op, opts)]


def _logits(op: ir.Dense, values):
    """The stored logits as float32; their softmax where the net ends with one (CPU)."""
    values = values.astype(np.float32)
    return ir.softmax(values) if op.softmax else values


def dense_images(op: ir.Dense, shapes, dtype) -> dict:
    return {f"{op.name}/pooled": (1, 1, ir.packs(op.cin), "f4"),
            op.name: (1, 1, ir.packs(op.cout), "f4")}


def depth_to_space_images(op: ir.DepthToSpace, shapes, dtype) -> dict:
    h, w, c = shapes[op.name]
    return {op.name: (w, h, 1 if op.chroma_from else ir.packs(c), dtype)}


def tensor_images(op, shapes, dtype) -> dict:
    """The default: one image with the op's packs as layers."""
    h, w, c = shapes[op.name]
    return {op.name: (w, h, ir.packs(c), dtype)}


@dataclass(frozen=True)
class OpRules:
    """What the ES 3.1 back end does with one IR op type: its ``kernels(op, shapes, opts)``,
    its ``cost(op, shapes, opts)``, its weight buffer ``weights(op, opts)`` (float32, as
    uploaded; None: no weights), its ``images(op, shapes, dtype)`` and, where the net's
    output is not an image, ``output(op, stored)``: the values from the stored image."""
    kernels: Callable
    cost: Callable
    weights: Callable | None = None
    images: Callable = tensor_images
    output: Callable | None = None


# One entry per IR op type.
OPS = {
    ir.Conv: OpRules(lambda op, shapes, opts: [conv_kernel(op, opts)], conv_cost,
                     lambda op, opts: conv_weights(op, conv_plan(op, opts))),
    ir.DepthToSpace: OpRules(lambda op, shapes, opts: [depth_to_space_kernel(op, shapes, opts)],
                             depth_to_space_cost, images=depth_to_space_images),
    ir.Dense: OpRules(dense_kernels, dense_cost, lambda op, opts: dense_weights(op), dense_images,
                      lambda op, stored: _logits(op, stored.reshape(-1)[:op.cout])),
    ir.Pool: OpRules(lambda op, shapes, opts: [window_pool_kernel(op, shapes, opts)],
                     window_pool_cost),
    ir.Upsample: OpRules(lambda op, shapes, opts: [upsample_kernel(op, shapes, opts)],
                         upsample_cost),
    ir.Add: OpRules(lambda op, shapes, opts: [add_kernel(op, shapes, opts)], add_cost),
    ir.Concat: OpRules(lambda op, shapes, opts: [concat_kernel(op, shapes, opts)], concat_cost),
}


def rules(op) -> OpRules:
    """The rules of ``op``'s type, or of the IR type it extends (an es2 ``ConvForm`` is a
    Conv: its order is the ES 2.0 programs' own), as the es2 records are found."""
    found = next((OPS[t] for t in type(op).__mro__ if t in OPS), None)
    if found is None:
        raise ir.LoweringError(f"layer {op.name!r}: no ES 3.1 kernel for {type(op).__name__}")
    return found
