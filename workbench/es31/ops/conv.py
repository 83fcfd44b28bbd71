"""The ES 3.1 rules of :class:`workbench.ir.Conv`: one compute program (local size 8x8, ``B``
output packs an invocation, the input tile in shared memory; :mod:`workbench.es31`,
"Convolution"), its plan, weight buffer, exact loads and cost."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import ir
from workbench.es31.kernels import (
    INSIDE,
    Kernel,
    Options,
    header_in_out,
    image,
    int_array,
    load_fn,
    main,
    texel_bytes,
)
from workbench.es31.record import OpRules, register
from workbench.ir.cost import Cost
from workbench.nets import activations


def _largest_divisor(n, cap):
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


@dataclass(frozen=True)
class Plan:
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

    @classmethod
    def of(cls, op: ir.Conv, opts: Options) -> Plan:
        out_packs = op.out_packs()
        cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
        if op.groups > 1 and not op.luma_input:
            # a job's output packs read the same input packs: those of one group of whole
            # packs, else (groups that fill part of a pack, as a depthwise conv's) one output
            # pack a job
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
        return cls(k, s, block, out_packs // block, nin, tiled, (tw, th), stage)


def weights(op: ir.Conv, opts: Options) -> np.ndarray:
    """The storage buffer of a conv as float32: ``vec4 bias[out packs]``, then
    ``mat4 w[(pack * nin + i) * k * k + tap]`` with ``m[i_component][o_component]``
    (:meth:`workbench.ir.Conv.tap_weights`; 0 for the slots a pack that reads fewer input
    packs than ``nin`` leaves over)."""
    k, nin, out_packs = op.size, Plan.of(op, opts).nin, op.out_packs()
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


def kernel(op: ir.Conv, opts: Options) -> Kernel:
    """The conv's one program (:class:`Plan`): each invocation one output pixel of ``B``
    output packs, from the shared tile (``tiled``) or straight from the image."""
    op.zero_padded("the ES 3.1 back end")
    op.residual_as_stored("the ES 3.1 back end")
    plan = Plan.of(op, opts)
    lx, ly = opts.local_size
    k, s, b, nin = plan.k, plan.stride, plan.block, plan.nin
    layers = [p for job in range(plan.jobs) for p in _job_packs(op, job * b, nin)]
    images = [(0, op.input, "read"), (1, op.name, "write")]
    src = header_in_out(opts)
    if op.residual:
        images.append((2, op.residual, "read"))
        src += image(opts, 2, "u_res", "readonly")
    src += ("layout(std430, binding = 0) readonly buffer Weights "
            f"{{ vec4 bias[{op.out_packs()}]; mat4 w[]; }};\n"
            "uniform ivec2 u_in_size;\nuniform ivec2 u_out_size;\nuniform ivec2 u_pad;\n"
            f"const int K = {k};\nconst int S = {s};\nconst int NIN = {nin};\n"
            f"const int B = {b};\nconst int KK = K * K;\n" + int_array("LAYERS", layers)
            + load_fn(opts, "load_in", "u_in", op.luma_input))
    if op.residual:
        src += load_fn(opts, "load_res", "u_res")
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
    src += main(body)
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


def loads(op: ir.Conv, shapes, opts: Options) -> int:
    """``imageLoad`` calls of :func:`kernel` for these shapes (exact)."""
    plan = Plan.of(op, opts)
    hin, win, _ = shapes[op.input]
    hout, wout, _ = shapes[op.name]
    top, left = op.pads((hin, win))
    lx, ly = opts.local_size
    if plan.tiled:
        gx, gy = -(-wout // lx), -(-hout // ly)
        sx = _tile_span(gx, lx, plan.stride, plan.k, left, win)
        sy = _tile_span(gy, ly, plan.stride, plan.k, top, hin)
        count = plan.jobs * plan.nin * sx * sy
    else:
        def inside(n_out, pad, size):
            return sum(sum(1 for d in range(plan.k) if 0 <= o * plan.stride - pad + d < size)
                       for o in range(n_out))
        count = plan.jobs * plan.nin * inside(wout, left, win) * inside(hout, top, hin)
    if op.residual:
        count += hout * wout * op.out_packs()
    return count


def cost(op: ir.Conv, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.name]
    return Cost(multiply_adds=h * w * op.kernel.size, texel_fetches=loads(op, shapes, opts),
                texture_bytes=h * w * op.out_packs() * texel_bytes(opts), programs=1)


def kernels(op: ir.Conv, shapes, opts: Options) -> list[Kernel]:
    return [kernel(op, opts)]


RULES = register(ir.Conv, OpRules(kernels, cost, weights))
