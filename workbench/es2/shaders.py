"""ES 2.0 pass generators: one ``#version 100`` fragment shader per 4 output channels, or,
with draw buffers (``GL_EXT_draw_buffers``), a convolution's shader writing up to N packs of 4
that read the same inputs (``gl_FragData[i]``; each input texel fetched once for all of them,
each pack's arithmetic as in its one-target shader, so the bytes are the same).

Each program is a small generator returning a :class:`Pass`: its source, its bindings and
how its uniforms get their values; :data:`PASSES` maps each IR op type to its generator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench import ir
from workbench.es2 import fixed16, plan
from workbench.es2.limits import ES2, LimitError
from workbench.glsl_text import glsl_float, glsl_vec
from workbench.nets import activations

PRECISIONS = ("highp", "mediump")
VERTEX_SHADER = """#version 100
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
"""


@dataclass
class Binding:
    uniform: str
    tensor: str
    pack: int
    filter: str = "nearest"


@dataclass
class Pass:
    """One program: draws ``outputs`` (texture keys; ``gl_FragData[i]`` is ``outputs[i]``, one
    output: ``gl_FragColor``) from ``inputs``.  ``uniforms``: the ``vec2`` uniforms and how to
    get their values (:func:`uniform_values`)."""
    name: str
    op: str
    source: str
    inputs: list[Binding]
    outputs: list[tuple[str, int]]
    uniforms: dict[str, tuple] = field(default_factory=dict)
    viewport: tuple[int, int, int, int] | None = None  # (x, y, width, height); None: all
    channels: tuple[int, ...] | None = None  # components of its one output it writes (the
    #   runtime's colour mask; the others are another program's); None: all four


# --- GLSL text ------------------------------------------------------------------------------

DRAW_BUFFERS_EXTENSION = "#extension GL_EXT_draw_buffers : require\n"


def _header(precision, draw_buffers=False):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    head = "#version 100\n" + (DRAW_BUFFERS_EXTENSION if draw_buffers else "")
    if precision == "mediump":
        return head + "precision mediump float;\n"
    return (head + "#ifdef GL_FRAGMENT_PRECISION_HIGH\nprecision highp float;\n"
            "precision highp sampler2D;\n#else\nprecision mediump float;\n#endif\n")


def _uniforms(samplers, vectors):
    return "".join(f"uniform sampler2D {s};\n" for s in samplers) + \
        "".join(f"uniform vec2 {v};\n" for v in vectors)


def _mask(axis, d) -> str:
    """1.0 where column (``x``) or row (``y``) ``d`` of the window lies inside the texture,
    0.0 in the zero padding (a texel centre outside lies half a texel beyond 0 or 1)."""
    return f"step(0.0, {axis}{d}) * step({axis}{d}, 1.0)"


def coordinates(size, stride, masked, inline_masks=False) -> list[str]:
    """GLSL lines that give a convolution's taps their texture coordinates: ``x{dx}`` for
    each column and ``y{dy}`` for each row of the ``size`` x ``size`` window (texel centres
    divided by ``u_in_size``; the window's first tap at ``(gl_FragCoord.xy - 0.5) * stride +
    0.5 - u_pad`` texels), and, ``masked``, ``mx{dx}`` / ``my{dy}``: 1.0 where that column or
    row lies inside the texture, 0.0 in the zero padding (a tap's mask is ``mx * my``).
    Computed once a fragment, so a tap costs its fetch alone (and one multiply if masked);
    ``inline_masks``: no ``mx``/``my``, each tap computes its mask (more arithmetic, fewer
    live registers: VideoCore IV then runs a 5x5 window with 2 threads instead of 1)."""
    lines = ["    vec2 inv = 1.0 / u_in_size;",
             f"    vec2 uv = ((gl_FragCoord.xy - 0.5) * {stride} + 0.5 - u_pad) * inv;"]
    for axis in "xy":
        for d in range(size):
            step = f" + {glsl_float(d)} * inv.{axis}" if d else ""
            lines.append(f"    float {axis}{d} = uv.{axis}{step};")
            if masked and not inline_masks:
                lines.append(f"    float m{axis}{d} = {_mask(axis, d)};")
    return lines


def conv_pass(op: ir.Conv, packs, precision="highp", channels=None, inline_masks=False) -> Pass:
    """Output packs ``packs`` of a convolution (+ residual) + activation: channels
    ``4*pack .. 4*pack+3`` of each; several packs (which read the same input packs) make one
    program with draw buffers, ``gl_FragData[i]`` for ``packs[i]``.  ``channels``: with one
    pack, only these components of it (0-3), the others' weights left out of the program (a
    compiler that keeps literals in a small constant file takes it then); the runtime masks
    the rest, so a component's arithmetic, and its bytes, are those of the whole program.
    ``inline_masks``: see :func:`coordinates` (the same 0/1 masks: the same bytes)."""
    packs = [packs] if isinstance(packs, int) else list(packs)
    many = len(packs) > 1
    if channels is not None and many:
        raise ValueError("a program that writes part of a pack writes one pack")
    in_packs = op.input_packs(packs[0])
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    outs = [list(range(p * ir.PACK, min(p * ir.PACK + ir.PACK, op.cout))) for p in packs]
    kept = [k for k in range(ir.PACK) if channels is None or k in channels]
    _, count = op.group_channels(packs[0])  # the group's channels are 0..count-1 of the kernel
    sums = [f"sum{k}" if many else "sum" for k in range(len(packs))]
    vectors = {"u_in_size": ("size", op.input),
               "u_pad": ("pad", op.input, op.size, op.stride, op.padding)}
    if op.residual:
        residuals = [f"u_res{k}" if many else "u_res" for k in range(len(packs))]
        samplers += residuals
        bindings += [Binding(r, op.residual, p) for r, p in zip(residuals, packs)]
        vectors["u_out_size"] = ("size", op.name)
    masked = op.padding == "same" and op.size > 1
    body = coordinates(op.size, glsl_float(op.stride), masked, inline_masks)
    body += [f"    vec4 {s} = {glsl_vec(_kept(op.bias[o], kept))};" for s, o in zip(sums, outs)]
    part = "".join("xyzw"[k] for k in kept)
    if many or (channels is not None and not op.luma_input):  # a texel fetched once
        body.append("    float y;" if op.luma_input else "    vec4 t;")
    for dy in range(op.size):
        for dx in range(op.size):
            where, mask = f"vec2(x{dx}, y{dy})", (f" * m{dx}_{dy}" if masked else "")
            if masked:
                mx, my = ((f"({_mask('x', dx)})", f"({_mask('y', dy)})") if inline_masks
                          else (f"mx{dx}", f"my{dy}"))
                body.append(f"    float m{dx}_{dy} = {mx} * {my};")
            if op.luma_input:
                y = f"(dot(texture2D(u_in0, {where}).rgb, {glsl_vec(ir.LUMA, 3)}){mask})"
                if many:
                    body.append(f"    y = {y};")
                    y = "y"
                if channels is not None:
                    body.append(f"    sum.{part} += {_vec(op.kernel[dy, dx, 0, outs[0]], kept)}"
                                f" * {y};")
                    continue
                body += [f"    {s} += {glsl_vec(op.kernel[dy, dx, 0, o])} * {y};"
                         for s, o in zip(sums, outs)]
                continue
            for j, sampler in enumerate(samplers[:len(in_packs)]):
                chans = range(j * ir.PACK, min((j + 1) * ir.PACK, count))
                products = []
                for s, o in zip(sums, outs):
                    m = np.zeros((4, 4), np.float32)  # m[i, o]: input component i -> output o
                    for i, c in enumerate(chans):
                        m[i, :len(o)] = op.kernel[dy, dx, c, o]
                    if np.any(m):
                        products.append((s, m))
                texel = f"(texture2D({sampler}, {where}){mask})"
                if channels is not None:  # the kept rows of mat4 * t, summed in its order
                    if products:
                        m = products[0][1]
                        body.append(f"    t = {texel};")
                        terms = [f"{_vec(m[i], kept)} * t.{'xyzw'[i]}" for i in range(ir.PACK)
                                 if np.any(m[i, kept])]
                        body.append(f"    sum.{part} += {' + '.join(terms)};")
                    continue
                if len(products) > 1:
                    body.append(f"    t = {texel};")
                    texel = "t"
                # GLSL mat4(...) is column-major: column i holds input component i.
                body += [f"    {s} += mat4({', '.join(glsl_float(v) for v in m.ravel())}) * {texel};"
                         for s, m in products]
    for k, s in enumerate(sums):
        if op.residual:
            body.append(f"    {s} += texture2D({residuals[k]}, gl_FragCoord.xy / u_out_size);")
        target = f"gl_FragData[{k}]" if many else "gl_FragColor"
        body.append(f"    {target} = {activations.get(op.activation).glsl.format(x=s)};")
    source = (_header(precision, many) + _uniforms(samplers, vectors)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    name = f"{op.name}.{packs[0]}" + (f"-{packs[-1]}" if many else "")
    if channels is not None:
        name += ".c" + "".join(map(str, channels))
    return Pass(name, op.name, source, bindings, [(op.name, p) for p in packs], vectors,
                channels=tuple(channels) if channels is not None else None)


def _kept(values, kept):
    """``values`` (one per output component) with the components not in ``kept`` zeroed."""
    values = np.array(values, np.float32)
    values[[k for k in range(len(values)) if k not in kept]] = 0.0
    return values


def _vec(values, kept):
    """The ``kept`` components of ``values`` as a GLSL float, vec2 or vec3 literal."""
    values = np.pad(np.asarray(values, np.float32), (0, ir.PACK))[list(kept)]
    return glsl_float(values[0]) if len(values) == 1 else glsl_vec(values, len(values))


def depth_to_space_pass(op: ir.DepthToSpace, pack: int, shapes, precision="highp") -> Pass:
    """Depth-to-space; with ``chroma_from`` the SR demux: the sub-pixel luma plus the chroma
    of the input image sampled bilinearly (a luma change added equally to R, G and B leaves
    Cb and Cr unchanged, since their weights sum to 0 and Y's to 1)."""
    in_packs = op.source_packs(shapes, pack)
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    b = glsl_float(op.block)
    # gl_FragCoord is mediump in GLSL ES 1.00: Mesa evaluated "gl_FragCoord.xy - 0.5" in fp16,
    # which misplaced every odd output pixel from x or y = 1024 on; copied to highp first.
    body = ["    vec2 fc = gl_FragCoord.xy;",
            "    vec2 o = fc - 0.5;",
            f"    vec2 lr = floor((o + 0.5) / {b});",
            f"    vec2 sub = o - lr * {b};",
            f"    float s = sub.y * {b} + sub.x;",
            "    vec2 uv = (lr + 0.5) / u_in_size;"]
    body += [f"    vec4 t{p} = texture2D({s}, uv);" for s, p in zip(samplers, in_packs)]
    body.append("    vec4 v = vec4(0.0);")
    for s, chans in enumerate(op.source_channels(shapes, pack)):
        parts = [f"t{c // ir.PACK}.{'xyzw'[c % ir.PACK]}" for c in chans]
        body.append(f"    v += vec4({', '.join(parts + ['0.0'] * (4 - len(parts)))}) * "
                    f"(1.0 - step(0.5, abs(s - {glsl_float(s)})));")
    vectors = {"u_in_size": ("size", op.input)}
    if op.chroma_from:
        # Bilinear chroma with half-pixel centres and clamped edges, computed from 4 nearest
        # fetches in float: a GL_LINEAR sampler on RGBA8 filters with 8-bit weights on
        # llvmpipe, which would not match the emulator byte for byte.
        samplers.append("u_image")
        bindings.append(Binding("u_image", op.chroma_from, 0))
        vectors["u_out_size"] = ("size", op.name)
        body += ["    vec2 u = (o + 0.5) / " + b + " - 0.5;",
                 "    vec2 i0 = floor(u);",
                 "    vec2 f = u - i0;",
                 "    vec2 lo = (clamp(i0, vec2(0.0), u_in_size - 1.0) + 0.5) / u_in_size;",
                 "    vec2 hi = (clamp(i0 + 1.0, vec2(0.0), u_in_size - 1.0) + 0.5) / u_in_size;",
                 "    vec3 rgb = mix(mix(texture2D(u_image, lo).rgb, "
                 "texture2D(u_image, vec2(hi.x, lo.y)).rgb, f.x),",
                 "                   mix(texture2D(u_image, vec2(lo.x, hi.y)).rgb, "
                 "texture2D(u_image, hi).rgb, f.x), f.y);",
                 f"    gl_FragColor = vec4(rgb + (v.x - dot(rgb, {glsl_vec(ir.LUMA, 3)})), 1.0);"]
    else:
        body.append("    gl_FragColor = v;")
    source = (_header(precision) + _uniforms(samplers, vectors)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, bindings, [(op.name, pack)], vectors)


def _number_glsl(op: ir.Dense):
    """enc2/dec2 (two values per texel) and wdec (a weight pair) for the op's number format."""
    if op.number == "float":
        return ("vec4 enc2(vec2 v) { return vec4(v, 0.0, 0.0); }\n"
                "vec2 dec2(vec4 t) { return t.xy; }\nvec2 wdec(vec4 t) { return t.xy; }\n")
    return fixed16.GLSL + f"vec2 wdec(vec4 t) {{ return dec2(t) / {glsl_float(2 ** op.weight_shift)}; }}\n"


def dense_passes(op: ir.Dense, shapes, precision="highp", draw_buffers=1, limits=ES2) -> list[Pass]:
    """The blocked GEMV: one multiply program per block of input packs (each writes one row
    of partial sums), then reduction passes; the last adds the bias row."""
    h, w, _ = shapes[op.input]
    pixels = [(x, y) for y in range(h) for x in range(w)] if op.pool else [(0, 0)]
    rows_w = op.cin + 1
    head = _header(precision) + _number_glsl(op)
    passes = []
    for row, block in enumerate(op.blocks()):
        samplers = [f"u_in{k}" for k in range(len(block))] + ["u_w"]
        bindings = [Binding(s_, op.input, p) for s_, p in zip(samplers, block)]
        bindings.append(Binding("u_w", f"{op.name}/weights", 0))
        body = [f"    float x = gl_FragCoord.x / {glsl_float(op.pairs)};", "    vec2 acc = vec2(0.0);",
                "    vec4 s;"]
        for k, pack in enumerate(block):
            taps = " + ".join(f"texture2D(u_in{k}, vec2({glsl_float((px + 0.5) / w)}, {glsl_float((py + 0.5) / h)}))"
                              for px, py in pixels)
            body.append(f"    s = {taps};")
            for i in range(min(4, op.cin - 4 * pack)):
                c = 4 * pack + i
                body.append(f"    acc += wdec(texture2D(u_w, vec2(x, {glsl_float((c + 0.5) / rows_w)})))"
                            f" * s.{'xyzw'[i]};")
        body.append(f"    gl_FragColor = enc2(acc / {glsl_float(len(pixels))});")
        source = head + _uniforms(samplers, {}) + "void main() {\n" + "\n".join(body) + "\n}\n"
        passes.append(Pass(f"{op.name}.multiply{row}", op.name, source, bindings,
                           [(f"{op.name}/partial0", 0)], {}, (0, row, op.pairs, 1)))
    rows = op.reductions()
    for k, (prev, r) in enumerate(zip(rows, rows[1:])):
        last = r == 1 and k == len(rows) - 2
        source_key = f"{op.name}/partial{k}"
        target = (op.name, 0) if last else (f"{op.name}/partial{k + 1}", 0)
        samplers = ["u_p"] + (["u_w"] if last else [])
        bindings = [Binding("u_p", source_key, 0)]
        body = [f"    float x = gl_FragCoord.x / {glsl_float(op.pairs)};",
                f"    float first = (gl_FragCoord.y - 0.5) * {glsl_float(op.reduce)};",
                "    vec2 acc = vec2(0.0);"]
        for t in range(min(op.reduce, prev)):
            body.append(f"    acc += dec2(texture2D(u_p, vec2(x, (first + {glsl_float(t + 0.5)}) / {glsl_float(prev)})))"
                        f" * step(first + {glsl_float(t)}, {glsl_float(prev - 0.5)});")
        if last:
            bindings.append(Binding("u_w", f"{op.name}/weights", 0))
            bias = "dec2" if op.number == "fixed16" else "wdec"
            body.append(f"    acc += {bias}(texture2D(u_w, vec2(x, {glsl_float((op.cin + 0.5) / rows_w)})));")
        body.append("    gl_FragColor = enc2(acc);")
        source = head + _uniforms(samplers, {}) + "void main() {\n" + "\n".join(body) + "\n}\n"
        passes.append(Pass(f"{op.name}.reduce{k}", op.name, source, bindings, [target]))
    return passes


def dense_weight_texture(op: ir.Dense) -> np.ndarray:
    """The weights texture (``cin + 1`` rows of ``pairs`` texels): row c holds the weights of
    input c for outputs (2j, 2j+1), the last row the bias.  fixed16: weights scaled by
    ``2**weight_shift``, 2 bytes per value (uint8); float: float32 (RGBA32F)."""
    values = np.zeros((op.cin + 1, op.pairs * 2))
    values[:op.cin, :op.cout] = op.weight * 2.0 ** op.weight_shift
    values[op.cin, :op.cout] = op.bias
    if op.number == "float":  # weight_shift is 0
        out = np.zeros((op.cin + 1, op.pairs, 4), np.float32)
        out[..., :2] = values.reshape(op.cin + 1, op.pairs, 2)
        return out
    return fixed16.encode(values).reshape(op.cin + 1, op.pairs, 4)


def constant_textures(graph: ir.Graph) -> dict[str, np.ndarray]:
    """Textures uploaded once per allocation, by tensor name: each dense layer's weights."""
    return {f"{op.name}/weights": dense_weight_texture(op)
            for op in graph.ops if isinstance(op, ir.Dense)}


def conv_passes(op: ir.Conv, shapes, precision="highp", draw_buffers=1, limits=ES2,
                channels=None, inline_masks=False) -> list[Pass]:
    """``channels``: output channels a program writes (4, 2 or 1; default what ``limits``'
    constant budget allows, :func:`workbench.es2.plan.conv_channels`); under 4, each pack is
    drawn by several programs of that many components each, one target each.
    ``inline_masks``: see :func:`coordinates`."""
    channels = channels or plan.conv_channels(op, limits.constant_vectors)
    if channels < ir.PACK:
        return [conv_pass(op, pack, precision, tuple(range(k, k + channels)), inline_masks)
                for pack in range(op.out_packs()) for k in range(0, ir.PACK, channels)
                if k < op.cout - pack * ir.PACK]
    return [conv_pass(op, packs, precision, inline_masks=inline_masks)
            for packs in plan.conv_programs(op, draw_buffers, limits.texture_units,
                                            limits.fetches_per_fragment)]


def depth_to_space_passes(op: ir.DepthToSpace, shapes, precision="highp", draw_buffers=1,
                          limits=ES2) -> list[Pass]:
    return [depth_to_space_pass(op, p, shapes, precision) for p in range(op.out_packs(shapes))]


# One entry per IR op: ``op type -> passes(op, shapes, precision, draw_buffers, limits)``; a
# generator may ignore ``draw_buffers`` (only convolutions write several targets).
PASSES = {ir.Conv: conv_passes, ir.DepthToSpace: depth_to_space_passes, ir.Dense: dense_passes}


def generate(graph: ir.Graph, precision="highp", draw_buffers=1, limits=ES2,
             layer_options=None) -> list[Pass]:
    """All passes of ``graph``, in execution order; ``draw_buffers``: render targets one
    program may write, within ``limits``' texture units and fetches per fragment;
    ``layer_options``: ``{conv layer: {"channels": 2, "inline_masks": True}}``, what a
    driver asked for beyond the limits (:func:`workbench.es2.drivers.fit`)."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    passes = []
    for op in graph.ops:
        if type(op) not in PASSES:
            raise LimitError(f"layer {op.name!r}: no ES 2.0 shader for {type(op).__name__}")
        extra = (layer_options or {}).get(op.name, {})
        passes += PASSES[type(op)](op, shapes, precision, draw_buffers, limits, **extra)
    return passes


def programs(graph: ir.Graph, passes) -> dict[str, list[list[int]]]:
    """The output packs of each convolution program, ``{op name: [[pack, ...], ...]}``, as
    :func:`workbench.es2.plan.cost` takes them."""
    out = {}
    for p in passes:
        if isinstance(graph.op(p.op), ir.Conv):
            out.setdefault(p.op, []).append([pack for _, pack in p.outputs])
    return out


def uniform_values(p: Pass, shapes) -> dict[str, tuple[float, float]]:
    """The values of a pass's ``vec2`` uniforms (see :func:`workbench.ir.uniform_values`)."""
    return {name: tuple(map(float, v)) for name, v in ir.uniform_values(p.uniforms, shapes).items()}
