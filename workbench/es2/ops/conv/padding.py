"""A convolution's taps in the padding: 0/1 masks (exact: a masked tap adds 0) and, where the
padding holds a value other than 0 (a tensor stored with an offset: the op's ``pad_value``),
what each input pack's masked tap adds instead.  The masks of a column and a row are
``mx<dx>`` and ``my<dy>`` (:func:`workbench.es2.shaders.coordinates`), or inline.

Or no masks at all: a **zero border** (:func:`bordered`), the input copied once into
textures with the padding around it as zeros (:func:`border_passes`, one program a texture),
which the convolution's programs then read as they are (each tap a fetch and its products;
the same bytes: a tap in the border reads 0, as a masked tap adds 0).  Where a convolution
alone reads its input and a convolution makes it, the producer draws its output with that
border already (:func:`producer_borders`: its textures are the larger ones, cleared to 0, and
its programs draw the output's own pixels in them: ``Pass.border``), and no copy is made.
A luma input's own copy may hold the luma, computed once a pixel, as two bytes
(``luma_copy``, :func:`copies_luma`; its programs then read it at each tap instead of the RGB
texel and its dot product).
A program none of whose taps lies in the padding may still multiply each column by a mask
that is exactly 1 (:func:`unit_mask`), for VideoCore IV's scheduler."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.ops.conv import split
from workbench.es2.shaders import (Binding, Pass, coordinates, header, inside_mask, masked,
                                   uniform_declarations, window_varying)
from workbench.glsl_text import glsl_float, glsl_vec


def axis_mask(axis, d, inline_masks) -> str:
    """The mask of tap ``d`` along ``axis`` (``"x"`` or ``"y"``): 1 inside the input, else 0."""
    return f"({inside_mask(axis, d)})" if inline_masks else f"m{axis}{d}"


def unit_mask(x) -> str:
    """The mask of a fetch at x coordinate ``x`` (GLSL: a window column's ``x<dx>``, or a
    residual's) where it lies inside the texture (a zero border's window, or one without
    padding): ``max(x, 1.0)``, exactly 1.0 (a texel centre lies half a texel or more below 1),
    one instruction.  What it multiplies keeps its value (the same bytes) and the coordinate
    live until then: VideoCore IV's compiler, which picks the next instruction by registers
    freed, then issues each fetch after the previous fetch's result instead of between that
    fetch's thread switch and its result, where its scheduler waits out a texture latency
    (100 cycles) on every such fetch (``unit_masks``, :func:`workbench.es2.drivers.tune`)."""
    return f"max({x}, 1.0)"


UNIT_COLUMNS = {True: "every column", "ends": "the first and last columns",
                "last": "the last column"}  # where unit masks may go (``unit_masks``)


def unit_columns(size, which) -> range | tuple:
    """The window columns that take a unit mask: ``which`` one of :data:`UNIT_COLUMNS` (False:
    none)."""
    return {True: range(size), "ends": (0, size - 1), "last": (size - 1,)}.get(which, ())


def tap_mask(dx, dy, inline_masks) -> str:
    """The line that sets the mask ``m<dx>_<dy>`` of tap ``(dy, dx)``."""
    return (f"    float m{dx}_{dy} = {axis_mask('x', dx, inline_masks)} * "
            f"{axis_mask('y', dy, inline_masks)};")


def padding_terms(op, logical) -> list[str]:
    """What each input pack's masked tap adds where the padding holds ``pad_value`` (a
    tensor stored with an offset): ``+ pv * (1.0 - m)`` after its ``texel * m`` (exact: m is
    0 or 1); nothing where the padding holds 0."""
    if op.pad_value is None:
        return [""] * len(logical)
    values = np.pad(op.pad_value, (0, ir.PACK * max(logical, default=0) + ir.PACK))
    return [f" + {glsl_vec(values[ir.PACK * p:ir.PACK * p + ir.PACK])} * (1.0 - m{{dx}}_{{dy}})"
            for p in logical]


def border_offered(op) -> bool:
    """Whether ``op`` may read its input through a zero border: a convolution with zeros in
    its padding (no ``pad_value``), not split over stages."""
    return masked(op.size, op.padding) and op.pad_value is None and split.count(op) == 1


def window_border(op) -> tuple[int, int, int, int] | None:
    """``(left, top, right, bottom)``: the zeros a stride-1 window reaches around its input
    (TensorFlow's 'same': ``size - 1`` on each axis, the smaller half first); None for
    another stride (its padding depends on the input's size)."""
    if op.stride != 1:
        return None
    if op.padding == "same":
        low = (op.size - 1) // 2
        return low, low, op.size - 1 - low, op.size - 1 - low
    top, left, bottom, right = ir.explicit_pads(op.padding)
    return left, top, right, bottom


def producer_borders(graph: ir.Graph, options) -> dict:
    """``options`` (``{layer: {option: value}}``) with who draws each zero border: for each
    layer that reads through one (``zero_border``, in ``options`` or its own) a stride-1
    window over a tensor that it alone reads, made by a stride-1 convolution (8-bit, unsplit,
    without a residual) other than the net's output, ``border_out`` for the producer (its
    output drawn with that border, zeros outside) and ``input_bordered`` for the reader (no
    copy); a layer that had either and no longer qualifies gets ``()`` / False.  Derived
    anew each time: a producer's border always matches its reader's reading.  (``graph``: as
    prepared, its convolutions :class:`~.form.ConvForm`.)"""
    makers = {op.name: op for op in graph.ops}
    readers, convs = graph.readers(), [op for op in makers.values() if isinstance(op, ir.Conv)]
    options = {name: dict(o) for name, o in (options or {}).items()}
    borders, bordered_inputs = {}, set()  # producer -> its border; the readers
    for op in convs:
        producer = makers.get(op.input)
        if (options.get(op.name, {}).get("zero_border", op.zero_border)
                and border_offered(op) and window_border(op)
                and isinstance(producer, ir.Conv) and producer.stride == 1
                and not producer.residual and split.count(producer) == 1
                and producer.out_bits == 8 and producer.name != graph.output
                and [r.name for r in readers[op.input]] == [op.name]):
            borders[producer.name] = window_border(op)
            bordered_inputs.add(op.name)
    for op in convs:
        mine = options.setdefault(op.name, {})
        if op.name in borders or op.border_out:
            mine["border_out"] = borders.get(op.name, ())
        if op.name in bordered_inputs or op.input_bordered:
            mine["input_bordered"] = op.name in bordered_inputs
        if not mine:
            del options[op.name]
    return options


def bordered(op) -> bool:
    """Whether ``op``'s programs read its input through a zero border (its ``zero_border``,
    :class:`~workbench.es2.ops.conv.ConvForm`, where :func:`border_offered`)."""
    return op.zero_border and border_offered(op)


# 1/255 in float32: a byte's step
BYTE = np.float32(1 / 255)


def luma_offered(op) -> bool:
    """Whether ``op`` may read its luma from its own copy (``luma_copy``): a luma input that
    may read through a zero border."""
    return op.luma_input and border_offered(op)


def copies_luma(op) -> bool:
    """Whether ``op``'s copy holds its luma (``luma_copy``, where it reads through a zero
    border its own copy draws): the luma times 255, its whole part in one byte, its fraction
    in the next (:func:`tap_luma`)."""
    return op.luma_copy and op.luma_input and bordered(op) and not op.input_bordered


def tap_luma(op, texel) -> str:
    """The GLSL of a luma input's luma at a tap whose ``texel`` (GLSL) its program fetched: the
    RGB texel's ``dot`` with :data:`workbench.ir.LUMA`, or, where its copy holds the luma
    (:func:`copies_luma`), the copy's two bytes ``r + g / 255`` (within half a step of a
    byte's step, 7.7e-6, of the dot the copy computed once a pixel;
    :func:`~.emulator.copied_luma`)."""
    if copies_luma(op):
        return f"dot({texel}.rg, vec2(1.0, {glsl_float(BYTE)}))"
    return f"dot({texel}.rgb, {glsl_vec(ir.LUMA, 3)})"


def border_tensor(op) -> str:
    """The name of the bordered copy's textures (a layer's own: ``<layer>/border``)."""
    return f"{op.name}/border"


def border_textures(op, shapes) -> dict:
    """The bordered copy's RGBA8 textures, one a texture of the input (none where its producer
    draws the border itself: ``input_bordered``): what the windows span,
    ``(n - 1) * stride + size`` on each axis for ``n`` output pixels (the input from the
    padding's (left, top) on, with the padding the windows reach)."""
    if op.input_bordered:
        return {}
    (oh, ow, _), c = shapes[op.name], shapes[op.input][2]
    size = ((ow - 1) * op.stride + op.size, (oh - 1) * op.stride + op.size, "f1")
    return {(border_tensor(op), i): size
            for i in range(ir.packs(c) * op.textures_a_pack("input"))}


def border_passes(op, shapes, precision) -> list[Pass]:
    """The programs that copy each texture of ``op``'s input into its bordered texture; none
    where its producer draws the border (``input_bordered``).  A stride-1 window's border is
    known (:func:`window_border`): the runtime clears it (``Pass.border``) and the copy draws
    the input's own pixels, a fetch each (VideoCore IV 31 -> 15 instructions, over the
    input's pixels alone); another stride's depends on the input's size: its copy draws
    every texel, a texel of the input where it lies inside, 0 in the border (its mask; the
    same bytes)."""
    border = window_border(op)
    if border:
        vectors = window_varying(("texel", op.input), 1, ("texel", op.input))
        del vectors["u_in_texel"]  # (v_uv is the texel: no other)
        body, texel, mask = [], "texture2D(u_in0, v_uv)", ""
    else:  # the bordered texture drawn a texel of the input a pixel, from where the padding ends
        vectors = window_varying(("window", op.name, op.size, op.stride), 1, ("texel", op.input),
                                 ("pad", op.input, op.size, op.stride, op.padding))
        body, texel, mask = coordinates(1, True), "texture2D(u_in0, vec2(x0, y0))", \
            " * (mx0 * my0)"
    if copies_luma(op):  # the luma times 255, its whole part and its fraction a byte each
        body += [f"    float l = dot({texel}.rgb, {glsl_vec(ir.LUMA, 3)}) * 255.0;",
                 "    float h = floor(l);"]
        texel = f"vec4(h * {glsl_float(BYTE)}, l - h, 0.0, 0.0)"
    body.append(f"    gl_FragColor = {texel}{mask};")
    source = (header(precision) + uniform_declarations(["u_in0"], vectors)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return [Pass(f"{op.name}.border{i}", op.name, source, [Binding("u_in0", op.input, i)],
                 [key], vectors, border=border[:2] if border else None)
            for i, key in enumerate(border_textures(op, shapes))]
