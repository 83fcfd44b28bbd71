"""A convolution's cost, textures, origin and tiling."""
from __future__ import annotations

from workbench import ir
from workbench.es2.ops.conv import split
from workbench.es2.ops.conv.form import ConvForm
from workbench.es2.ops.conv.padding import border_textures, bordered, window_border
from workbench.es2.ops.conv.passes import fetches
from workbench.es2.plan import pack_textures
from workbench.ir.cost import Cost


def cost(op: ConvForm, shapes, programs=None) -> Cost:
    """``programs``: output packs per program (:func:`programs`); default one each.  (An
    output drawn with a border: its textures hold the border, its programs draw the output's
    own pixels.)"""
    w, h, _ = _output_texture(op, shapes)
    pixels, outputs = h * w, shapes[op.name][0] * shapes[op.name][1]
    if split.count(op) > 1:  # every stage's programs, one pack each
        stages = [(s, writers(op, pack) if s.last else 1) for pack in range(op.out_packs())
                  for s in split.stage_list(op, pack)]
        per_pixel = sum(s.fetches(op) * n for s, n in stages)
        return Cost(multiply_adds=outputs * op.kernel.size, texel_fetches=pixels * per_pixel,
                    texture_bytes=pixels * 4 * len(textures(op, shapes)),
                    programs=sum(n for _, n in stages))
    programs = programs or [[p] for p in range(op.out_packs())]
    copies = [writers(op, packs[0]) for packs in programs]
    border = border_textures(op, shapes) if bordered(op) else {}  # a fetch a pixel drawn
    copied = shapes[op.input][0] * shapes[op.input][1] if window_border(op) else None
    return Cost(multiply_adds=outputs * op.kernel.size,
                texel_fetches=outputs * sum(n * fetches(op, packs)
                                            for n, packs in zip(copies, programs))
                + sum(copied or bw * bh for bw, bh, _ in border.values()),
                texture_bytes=pixels * 4 * op.out_packs() * op.textures_a_pack(),
                programs=sum(copies) + len(border))


def writers(op: ConvForm, pack) -> int:
    """Programs that write output pack ``pack`` (of a 2-channel program of a 16-bit output,
    one a half it has channels in; else one)."""
    return len(split.halves(op, pack)) if op.out_bits == 16 else 1


def textures(op: ConvForm, shapes) -> dict:
    """Its output packs (two RGBA8 textures each where it is 16-bit), and a split op's partial
    sums: two RGBA8 textures an output pack and partial stage, of the output's size; a
    bordered op's copy of its input (:func:`~workbench.es2.ops.conv.padding.border_textures`)."""
    out = {key: _output_texture(op, shapes)
           for key in pack_textures(op.name, shapes, op.textures_a_pack())}
    if bordered(op):
        out.update(border_textures(op, shapes))
    h, w, _ = shapes[op.name]
    for k in range(split.count(op) - 1):
        out.update({(split.partial_tensor(op, k), i): (w, h, "f1")
                    for i in range(2 * op.out_packs())})
    return out


def _output_texture(op, shapes) -> tuple[int, int, str]:
    """``(width, height, "f1")`` of each output texture: the output's size, plus its
    ``border_out`` where it has one."""
    h, w, _ = shapes[op.name]
    left, top, right, bottom = op.border_out or (0, 0, 0, 0)
    return w + left + right, h + top + bottom, "f1"


def origin(op: ConvForm):
    """Where the output lies in its textures: ``(left, top)`` of its ``border_out``, or None."""
    drawn = op.border_out
    return tuple(drawn[:2]) if drawn else None


def tile(op: ir.Conv, step, reach):
    """A stride-1 'same' (or 1x1) convolution keeps the grid and reaches ``size // 2`` more
    of its input's pixels (and as far as its residual)."""
    if op.stride != 1 or (op.padding != "same" and op.size != 1):
        return None
    return step[op.input], max([reach[op.input] + (op.size // 2) * step[op.input]]
                               + ([reach[op.residual]] if op.residual else []))
