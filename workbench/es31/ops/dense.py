"""The ES 3.1 rules of :class:`workbench.ir.Dense` after a global average pooling: two
kernels (the pooling, a shared-memory reduction per input pack; then one work group per
output pack), in float; its weight buffer, cost, images and the logits it outputs."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es31.kernels import Kernel, Options, header, image, load_fn, main
from workbench.es31.record import OpRules, register
from workbench.ir.cost import Cost


def _reduce_tree(n):
    top = 1 << (n - 1).bit_length()
    return [f"    for (int k = {top // 2}; k > 0; k /= 2) {{",
            f"        if (idx < k && idx + k < {n}) part[idx] += part[idx + k];",
            "        barrier();", "    }"]


def pool_kernel(op: ir.Dense, opts: Options) -> Kernel:
    """Global average of each input pack: one work group per pack, a shared-memory tree."""
    lx, ly = opts.local_size
    n = lx * ly
    src = (header(opts) + image(opts, 0, "u_in", "readonly")
           + image(Options(storage="rgba32f"), 1, "u_out", "writeonly")
           + "uniform ivec2 u_in_size;\n" + load_fn(opts, "load_in", "u_in")
           + f"shared vec4 part[{n}];\n")
    body = ["    int idx = int(gl_LocalInvocationIndex);",
            "    int layer = int(gl_WorkGroupID.z);",
            "    int count = u_in_size.x * u_in_size.y;",
            "    vec4 s = vec4(0.0);",
            f"    for (int i = idx; i < count; i += {n}) s += load_in(ivec2(i % u_in_size.x, "
            "i / u_in_size.x), layer);",
            "    part[idx] = s;", "    barrier();"] + _reduce_tree(n) + [
            "    if (idx == 0) imageStore(u_out, ivec3(0, 0, layer), part[0] / float(count));"]
    src += main(body)
    return Kernel(f"{op.name}.pool", op.name, src,
                  [(0, op.input, "read"), (1, f"{op.name}/pooled", "write")], None,
                  {"u_in_size": ("size", op.input)}, ("jobs",), ir.packs(op.cin))


def weights(op: ir.Dense, opts: Options) -> np.ndarray:
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
    src = (header(opts) + image(f32, 0, "u_in", "readonly") + image(f32, 1, "u_out", "writeonly")
           + "layout(std430, binding = 0) readonly buffer Weights "
           f"{{ vec4 bias[{nout}]; mat4 w[]; }};\n" + load_fn(opts, "load_in", "u_in")
           + f"shared vec4 part[{n}];\n")
    body = ["    int idx = int(gl_LocalInvocationIndex);",
            "    int o = int(gl_WorkGroupID.z);",
            "    vec4 s = vec4(0.0);",
            f"    for (int j = idx; j < {nin}; j += {n}) s += w[o * {nin} + j] * load_in(ivec2(0), j);",
            "    part[idx] = s;", "    barrier();"] + _reduce_tree(n) + [
            "    if (idx == 0) imageStore(u_out, ivec3(0, 0, o), part[0] + bias[o]);"]
    src += main(body)
    return Kernel(f"{op.name}.dense", op.name, src,
                  [(0, f"{op.name}/pooled", "read"), (1, op.name, "write")], f"{op.name}/weights",
                  {}, ("jobs",), nout)


def cost(op: ir.Dense, shapes, opts: Options) -> Cost:
    h, w, _ = shapes[op.input]
    nin, nout = ir.packs(op.cin), ir.packs(op.cout)
    return Cost(multiply_adds=op.cin * op.cout + h * w * op.cin,
                texel_fetches=h * w * nin + nout * nin, texture_bytes=16 * (nin + nout), programs=2)


def kernels(op: ir.Dense, shapes, opts: Options) -> list[Kernel]:
    if not op.pool:
        raise ir.LoweringError(f"layer {op.name!r}: the ES 3.1 back end takes a Dense "
                               "layer after a global average pooling only")
    return [pool_kernel(op, opts), dense_kernel(op, opts)]


def images(op: ir.Dense, shapes, dtype) -> dict:
    return {f"{op.name}/pooled": (1, 1, ir.packs(op.cin), "f4"),
            op.name: (1, 1, ir.packs(op.cout), "f4")}


def output(op: ir.Dense, stored):
    """The stored logits as float32; their softmax where the net ends with one (CPU)."""
    values = stored.reshape(-1)[:op.cout].astype(np.float32)
    return ir.softmax(values) if op.softmax else values


RULES = register(ir.Dense, OpRules(kernels, cost, weights, images, output))
