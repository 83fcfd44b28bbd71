"""ES 2.0 pass generators: one ``#version 100`` fragment shader per 4 output channels, or,
with draw buffers (``GL_EXT_draw_buffers``), a convolution's shader writing up to N packs of 4
that read the same inputs (``gl_FragData[i]``; each input texel fetched once for all of them,
each pack's arithmetic as in its one-target shader, so the bytes are the same).

Each program is a :class:`Pass`: its source, its bindings and how its uniforms get their
values.  Each op's generator is its record's ``passes`` (:mod:`workbench.es2.ops`); this
module holds what they share (the header, the declarations) and runs them in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench import ir
from workbench.es2.limits import VERTEX_UNIFORM, Target
from workbench.es2.record import record
from workbench.glsl_text import glsl_float

PRECISIONS = ("highp", "mediump")
# The one vertex shader: a quad over the viewport, and ``v_uv``, a window program's first tap
# in texture coordinates (:func:`coordinates`), interpolated from the quad's corners (the
# area's corners: (p - 0.5) * stride + 0.5 - pad texels at its pixel p, the corner at p = 0,
# whose centre p + 0.5 then gets p * stride + 0.5 - pad, as gl_FragCoord gave it); its
# uniforms are the pass's ``u_v_*`` (:func:`window_varying`; 0, unused, for the programs
# that read no window)
VERTEX_SHADER = """#version 100
attribute vec2 a_pos;
uniform vec2 u_v_area_texel;
uniform vec2 u_v_stride;
uniform vec2 u_v_pad;
uniform vec2 u_v_texel;
varying vec2 v_uv;
varying vec2 v_out;
void main() {
    vec2 corner = (a_pos * 0.5 + 0.5) / u_v_area_texel;
    v_uv = ((corner - 0.5) * u_v_stride + 0.5 - u_v_pad) * u_v_texel;
    v_out = a_pos * 0.5 + 0.5;
    gl_Position = vec4(a_pos, 0.0, 1.0);
}
"""
OUT_TEXEL = "v_out"  # a fragment's own texel centre in a texture of the drawn area's size (the
# output's own pixels: a residual's, its partial sums'), interpolated over the quad: what
# ``gl_FragCoord.xy / u_out_size`` gave, without the division (nearest: the same texel)


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
    get their values (:func:`uniform_values`); ``arrays``: ``vec4`` uniform arrays and their
    values."""
    name: str
    op: str
    source: str
    inputs: list[Binding]
    outputs: list[tuple[str, int]]
    uniforms: dict[str, tuple] = field(default_factory=dict)
    viewport: tuple[int, int, int, int] | None = None  # (x, y, width, height); None: all
    channels: tuple[int, ...] | None = None  # components of its one output it writes (the
    #   runtime's colour mask; the others are another program's); None: all four
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # vec4 uniform arrays set at
    #   each draw, float32 (rows, 4): the weights of a program shared by layers of one shape
    border: tuple[int, int] | None = None  # (left, top) of its output in textures that hold
    #   a zero border around it: the runtime clears them to 0, then draws the output's own
    #   pixels only (:func:`draw_area`)


def draw_area(p: Pass, shapes) -> tuple[int, int, int, int] | None:
    """``(x, y, width, height)`` of its output textures that pass ``p`` draws, for the tensor
    shapes of one input size (x from the left, y from the first row): where they hold a zero
    border (``p.border``), the output's own pixels (its tensor's; a layer's own texture, a
    bordered copy, its input's), the border cleared to 0 before the draw (every runtime:
    moderngl, the bundle's run.py, the page); else its ``viewport`` (None: all of them)."""
    if p.border is None:
        return p.viewport
    own = p.outputs[0][0] if p.outputs[0][0] in shapes else p.inputs[0].tensor
    h, w = shapes[own][:2]
    return (*p.border, w, h)


def fragments(graph: ir.Graph, passes, hw) -> list[int]:
    """The fragments each of ``passes`` (of ``graph``, its forms recorded) draws for an input
    of ``hw = (height, width)``: the area it draws (:func:`draw_area`) or its output
    texture."""
    from workbench.es2 import plan

    textures, shapes = plan.textures(graph, hw), graph.shapes(hw)
    areas = [draw_area(p, shapes) for p in passes]
    return [area[2] * area[3] if area else np.prod(textures[p.outputs[0]][:2], dtype=int)
            for p, area in zip(passes, areas)]


# --- GLSL text ------------------------------------------------------------------------------

DRAW_BUFFERS_EXTENSION = "#extension GL_EXT_draw_buffers : require\n"


def header(precision, draw_buffers=False):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    head = "#version 100\n" + (DRAW_BUFFERS_EXTENSION if draw_buffers else "")
    if precision == "mediump":
        return head + "precision mediump float;\n"
    return (head + "#ifdef GL_FRAGMENT_PRECISION_HIGH\nprecision highp float;\n"
            "precision highp sampler2D;\n#else\nprecision mediump float;\n#endif\n")


def uniform_declarations(samplers, vectors, out_texel=False):
    """``uniform sampler2D`` for each of ``samplers``, ``uniform vec2`` for each of ``vectors``
    but the vertex shader's (``u_v_*``), the varying ``v_uv`` where those are there, and
    :data:`OUT_TEXEL` where ``out_texel``."""
    fragment = [v for v in vectors if not v.startswith(VERTEX_UNIFORM)]
    return ("".join(f"uniform sampler2D {s};\n" for s in samplers)
            + "".join(f"uniform vec2 {v};\n" for v in fragment)
            + ("varying vec2 v_uv;\n" if len(fragment) < len(vectors) else "")
            + (f"varying vec2 {OUT_TEXEL};\n" if out_texel else ""))


def same_pack_pass(op, pack: int, precision, body: list[str], vectors: dict,
                   out_texel=False) -> Pass:
    """The program of an op that turns pack ``pack`` of its input (sampler ``u_in0``) into
    the same pack of its output, from the lines of its ``main`` and its ``vec2`` uniforms
    (``out_texel``: it reads :data:`OUT_TEXEL`)."""
    source = (header(precision) + uniform_declarations(["u_in0"], vectors, out_texel)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, [Binding("u_in0", op.input, pack)],
                [(op.name, pack)], vectors)


def masked(size, padding) -> bool:
    """Whether a ``size`` x ``size`` window with this padding has taps in the zero padding,
    which :func:`coordinates` then masks."""
    if padding == "same":
        return size > 1
    return any(ir.explicit_pads(padding))


def inside_mask(axis, d) -> str:
    """1.0 where column (``x``) or row (``y``) ``d`` of the window lies inside the texture,
    0.0 in the zero padding (a texel centre outside lies half a texel beyond 0 or 1)."""
    return f"step(0.0, {axis}{d}) * step({axis}{d}, 1.0)"


def coordinates(size, masked, inline_masks=False, rows=None, precision="highp",
                chained="") -> list[str]:
    """GLSL lines that give a convolution's taps their texture coordinates: ``x{dx}`` for
    each column and ``y{dy}`` for each row of the ``size`` x ``size`` window (texel centres
    times ``u_in_texel``; the window's first tap at ``v_uv``, which the vertex shader
    interpolates: :func:`window_varying` gives its uniforms), and, ``masked``, ``mx{dx}`` /
    ``my{dy}``: 1.0 where that column or row lies inside the texture, 0.0 in the zero
    padding (a tap's mask is ``mx * my``).
    Computed once a fragment, so a tap costs its fetch alone (and one multiply if masked);
    ``inline_masks``: no ``mx``/``my``, each tap computes its mask (more arithmetic, fewer
    live registers: VideoCore IV then runs a 5x5 window with 2 threads instead of 1);
    ``rows``: only these rows' (a stage of a split conv that holds some of its rows).
    In ``highp`` a coordinate two texels on from another is that one plus ``inv2``, two
    texels (an add where ``d * inv`` cost a multiply too: VideoCore IV's 5x5 program 11
    instructions fewer); its rounding stays far below half a texel, where nearest sampling
    would pick another (in ``mediump`` each comes from ``uv`` in one rounding, as before);
    ``chained`` (highp), the axes (``"xy"``, ``"x"``) whose coordinates are each one texel on
    from the one before, ``+ inv`` (another form of the same texels, for VideoCore IV's
    scheduler: :func:`workbench.es2.drivers.tune`)."""
    lines = ["    vec2 inv = u_in_texel;", "    vec2 uv = v_uv;"]
    pairs = precision == "highp" and size > 2
    if pairs and chained != "xy":
        lines.append("    vec2 inv2 = inv + inv;")
    for axis in "xy":
        ds = list(range(size) if axis == "x" or rows is None else rows)
        step = 1 if axis in chained else 2
        for d in ds:
            if pairs and d - step in ds:
                value = f"{axis}{d - step} + inv{'' if step == 1 else '2'}.{axis}"
            else:
                value = f"uv.{axis}" + (f" + {glsl_float(d)} * inv.{axis}" if d else "")
            lines.append(f"    float {axis}{d} = {value};")
            if masked and not inline_masks:
                lines.append(f"    float m{axis}{d} = {inside_mask(axis, d)};")
    return lines


def window_varying(area, stride, texel, pad=None) -> dict:
    """The ``vec2`` uniforms of a window program (:func:`coordinates`): ``u_in_texel``, one
    texel of its input (the runner divides, so that no program spends a division on it: 3 %
    of VideoCore IV's cycles on the x2 net), and the vertex shader's (:data:`VERTEX_SHADER`)
    that put its first tap in ``v_uv``: at the fragment of pixel p of the area it draws,
    ``(p * stride + 0.5 - pad) * texel``, the texel centre that ``(gl_FragCoord.xy - 0.5) *
    stride + 0.5 - pad`` gave where the area starts at the texture's corner (the same texel,
    nearest sampling: the same bytes; an output drawn inside a border moves its area, not its
    window).  ``area``: one texel of that area (a uniform spec: its output's ``("texel",
    tensor)``); ``texel``, ``pad``: the specs of one texel of its input and of the (left,
    top) padding before it (None: none, an input whose padding is in its texture).  The
    vertex shader reads the texel as its own ``u_v_texel``: a uniform of both stages must
    have one precision, and a fragment shader's may be mediump.
    Interpolated over the quad, ``v_uv`` costs the fragment nothing: Adreno 320 190 -> 174
    instructions a 1x1 program over 8 packs, Vivante GC2000 208 -> 192, Mali-400 54 -> 47."""
    s = float(stride)
    return {"u_in_texel": texel,
            f"{VERTEX_UNIFORM}area_texel": area, f"{VERTEX_UNIFORM}stride": ("value", s, s),
            f"{VERTEX_UNIFORM}pad": pad or ("value", 0.0, 0.0), f"{VERTEX_UNIFORM}texel": texel}


def block_position(block: int) -> list[str]:
    """GLSL lines that give, for the output pixel of an upsampling by ``block``, its
    sub-pixel ``sub`` in the input pixel it lies in (0 .. block - 1 on each axis, x from the
    left, y from the bottom as gl_FragCoord counts); by 2 ``ph``, ``fract(fc / 2)``, instead:
    0.25 where the sub-pixel is 0, 0.75 where 1 (fewer instructions than a floor: VideoCore
    IV's demux 10 fewer; :func:`sub_index`).  That input pixel itself is the one :data:`OUT_TEXEL` samples (nearest: its
    centre lies half an output pixel or more inside it).  gl_FragCoord is mediump in
    GLSL ES 1.00 (Mesa evaluated "gl_FragCoord.xy - 0.5" in fp16, which misplaced every odd
    output pixel from x or y = 1024 on): copied to a highp ``fc``."""
    if block == 2:
        return ["    vec2 fc = gl_FragCoord.xy;",
                "    vec2 ph = fract(fc * 0.5);"]
    b = glsl_float(block)
    return ["    vec2 fc = gl_FragCoord.xy;",
            f"    vec2 sub = fc - 0.5 - floor(fc / {b}) * {b};"]


def sub_index(block: int) -> str:
    """A vec2 of GLSL, after :func:`block_position`, below ``k + 0.5`` on an axis exactly
    where the sub-pixel is ``k`` or less: ``sub``, by 2 ``ph``."""
    return "ph" if block == 2 else "sub"


@dataclass(frozen=True)
class Bilinear:
    """How a program upsamples bilinearly by ``block`` (half-pixel centres; the edges clamp
    by the textures' CLAMP_TO_EDGE: nearest sampling at texel centres gives the clamped
    texels), after :func:`block_position`: ``lines`` (GLSL), ``taps`` (the coordinates of
    the 4 input texels it reads, nearest sampling), ``mix`` (the GLSL of their bilinear value
    from the names of the 4 fetched values, :meth:`mixed`) and ``nearest`` (the tap that is
    the input pixel the output pixel lies in, or None)."""
    lines: tuple
    taps: tuple
    mix: str
    nearest: int | None

    def mixed(self, names) -> str:
        return self.mix.format(*names)


def bilinear_taps(block: int) -> Bilinear:
    """By 2 the taps are the input pixel the output pixel lies in and its neighbours toward
    the output pixel, a texel ``d`` away on each axis (``(2 ph - 1) * u_in_texel``), weighted
    9, 3, 3 and 1 sixteenths: ``(c0 * 9 + c3 + (c1 + c2) * 3) / 16`` (in the order llvmpipe
    sums it: Mesa's compiler moves ``c3`` there when it is last), no weights to compute
    and the nearest one a tap (VideoCore IV's SR demux 107 -> 94 instructions, a fetch
    fewer: its anchor is that tap); :func:`workbench.es2.emulate.bilinear` sums in that order.
    Another block: the 4 texels around the output pixel's centre (``lo`` and ``hi`` on each
    axis, ``f`` the weight of ``hi``), mixed (``mix(mix(c0, c1, f.x), mix(c2, c3, f.x),
    f.y)``).  What a bilinear Upsample and the SR demux's chroma share."""
    if block == 2:
        return Bilinear(("    vec2 d = (ph * 2.0 - 1.0) * u_in_texel;",),
                        (OUT_TEXEL, f"{OUT_TEXEL} + vec2(d.x, 0.0)",
                         f"{OUT_TEXEL} + vec2(0.0, d.y)", f"{OUT_TEXEL} + d"),
                        "(({0} * 9.0 + {3} + ({1} + {2}) * 3.0) * 0.0625)", 0)
    return Bilinear((f"    vec2 u = fc / {glsl_float(block)} - 0.5;",
                     "    vec2 i0 = floor(u);",
                     "    vec2 f = u - i0;",
                     "    vec2 lo = (i0 + 0.5) * u_in_texel;",
                     "    vec2 hi = lo + u_in_texel;"),
                    ("lo", "vec2(hi.x, lo.y)", "vec2(lo.x, hi.y)", "hi"),
                    "mix(mix({0}, {1}, f.x), mix({2}, {3}, f.x), f.y)", None)


def fetch_lines(fetches, chained=False) -> list[str]:
    """GLSL lines that fetch ``fetches``, ``[(declaration, sampler, coordinates, swizzle)]``
    (``("vec3 c", "u_image", "lo", ".rgb")``), in that order; ``chained``: each fetch of a
    sampler after its previous fetch's result (its x coordinate plus ``min(<that texel>.x,
    0.0)``, exactly 0: a texel is not negative): the same texels.  VideoCore IV's scheduler
    otherwise requests a fetch between the previous one's thread switch and its result,
    where its estimate waits 100 cycles (the SR demux: 2 such waits, 200 of its 291
    estimated cycles; chained 90 instructions, 94 cycles; chained on its sub-pixel's texel
    too, 94 and 98)."""
    lines, previous = [], {}
    for declaration, sampler, where, swizzle in fetches:
        if chained and sampler in previous:
            where = f"{where} + vec2(min({previous[sampler]}.x, 0.0), 0.0)"
        lines.append(f"    {declaration} = texture2D({sampler}, {where}){swizzle};")
        previous[sampler] = declaration.split()[-1]
    return lines


def window_uniforms(op, bordered=False) -> dict:
    """:func:`window_varying`'s uniforms for ``op``'s window over its input, drawing its
    output: its input's texel and padding, or, ``bordered``, a texel of its input's bordered
    texture, whose padding is in it."""
    if bordered:
        return window_varying(("texel", op.name), op.stride,
                              ("window", op.name, op.size, op.stride))
    return window_varying(("texel", op.name), op.stride, ("texel", op.input),
                          ("pad", op.input, op.size, op.stride, op.padding))


def constant_textures(graph: ir.Graph) -> dict[str, np.ndarray]:
    """Textures uploaded once per allocation, by tensor name (a dense layer's weights)."""
    out = {}
    for op in graph.ops:
        if record(op).constants:
            out.update(record(op).constants(op))
    return out


def generate(graph: ir.Graph, target: Target = Target(), layer_options=None) -> list[Pass]:
    """All passes of ``graph`` for ``target`` (its precision; a program writing up to its
    ``draw_buffers`` render targets within its limits' texture units and fetches per
    fragment), in execution order; ``layer_options``: ``{conv layer: {"channels": 2,
    "inline_masks": True}}``, what a driver asked for beyond the limits
    (:func:`workbench.es2.drivers.fit`)."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    passes = []
    for op in graph.ops:
        extra = (layer_options or {}).get(op.name, {})
        passes += record(op).passes(op, shapes, target, **extra)
    return passes


def programs(graph: ir.Graph, passes) -> dict[str, list[list[int]]]:
    """The output packs of each program, ``{op name: [[pack, ...], ...]}``, as
    :func:`workbench.es2.plan.cost` takes them."""
    out = {}
    for p in passes:
        if p.outputs[0][0] == p.op:  # (not a layer's own textures: a border, partial sums)
            out.setdefault(p.op, []).append([pack for _, pack in p.outputs])
    return out


def uniform_values(p: Pass, shapes) -> dict[str, tuple[float, float]]:
    """The values of a pass's ``vec2`` uniforms (see :func:`workbench.ir.uniform_values`)."""
    return {name: tuple(map(float, v)) for name, v in ir.uniform_values(p.uniforms, shapes).items()}
