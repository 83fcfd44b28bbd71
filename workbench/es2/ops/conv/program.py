"""The GLSL of one convolution program (:func:`program`): its reads, sums, residual and
activation, and what it writes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.ops.conv import split
from workbench.es2.ops.conv.orders import (LAST, ORDERS, Masks, Products, chain, grouped,
                                           order_of, places_residual)
from workbench.es2.ops.conv.padding import bordered, border_tensor, padding_terms, unit_mask
from workbench.es2.ops.conv.weights import Weights, present_components
from workbench.es2.shaders import (
    OUT_TEXEL,
    Binding,
    Pass,
    coordinates,
    header,
    masked,
    uniform_declarations,
    window_uniforms,
)
from workbench.nets import activations, storage


@dataclass(frozen=True)
class Mode:
    """How a convolution's programs are written, their arithmetic the same (the same bytes):
    the shaders' ``precision``, ``inline_masks``, ``weights``, ``unit_masks`` and
    ``coordinates`` (see :func:`program`)."""
    precision: str = "highp"
    inline_masks: bool = False
    weights: str = "literals"
    unit_masks: bool | str = False
    coordinates: str = "pairs"


MODE = ("inline_masks", "weights", "unit_masks", "coordinates")  # the layer options a Mode
# records
# how a window's coordinates are spelled (Mode.coordinates): the axes chained, each coordinate
# a texel on from the one before (shaders.coordinates), by name
COORDINATES = {"pairs": "", "chained": "xy", "x chained": "x"}


def program(op, packs, mode=Mode(), channels=None, stage=None, half=None) -> Pass:
    """Output packs ``packs`` of a convolution (+ residual) + activation: channels
    ``4*pack .. 4*pack+3`` of each; several packs (which read the same input packs) make one
    program with draw buffers, ``gl_FragData[i]`` for ``packs[i]``.  ``channels``: with one
    pack, only these components of it (0-3), the others' weights left out of the program (a
    compiler that keeps literals in a small constant file takes it then); the runtime masks
    the rest, so a component's arithmetic, and its bytes, are those of the whole program.
    A program of a 16-bit output writes one half of a pack (channels 0-1 or 2-3), each value
    in two components of that half's texture: a whole pack's program draws each ``half``
    (the same source, the half in its uniform ``u_half``: one program to compile for both),
    a program of ``channels`` the half they lie in.
    ``inline_masks``: see :func:`workbench.es2.shaders.coordinates` (the same 0/1 masks:
    the same bytes).  ``unit_masks``: where no tap may lie in the padding (its input read
    through a zero border, or no padding) and the order groups its taps, each column's
    products times its :func:`~workbench.es2.ops.conv.padding.unit_mask`, exactly 1 (True;
    ``"ends"``, ``"last"``: those columns', :data:`~.padding.UNIT_COLUMNS`), and a residual
    read at the vertex shader's :data:`~workbench.es2.shaders.OUT_TEXEL` times its own (the
    same bytes).  ``coordinates``: the window's coordinates two texels apart from each other
    (``"pairs"``) or one (``"chained"``; ``"x chained"``: the columns' alone;
    :data:`COORDINATES`, :func:`~workbench.es2.shaders.coordinates`).  ``op``: a :class:`~.form.ConvForm`, its ``order``: how the products
    are added (:data:`ORDERS`; a program that writes part of a pack adds them in a chain);
    ``weights``: as literals or uniforms
    (:data:`~workbench.es2.ops.conv.weights.WEIGHTS`; uniforms for a program that writes one
    whole pack).
    Its ``residual_after``: the residual added after that many of the order's terms
    (:func:`place_residual`; vc4 then fetches it with the taps instead of waiting for it at
    the end).  Where ``op`` is :func:`~workbench.es2.ops.conv.padding.bordered`, it reads its
    input through the border, without masks; with ``border_out``, it draws its output's
    texture with that border, zeros there.  ``stage``: the program is that
    :class:`~workbench.es2.ops.conv.split.Stage` of a split op, for one pack: its run of input packs
    and rows of taps, starting from the partial sums before it; a partial stage writes its
    half's sums."""
    packs = [packs] if isinstance(packs, int) else list(packs)
    many = len(packs) > 1
    partial = stage is not None and not stage.last
    order, weights = order_of(op), mode.weights
    if partial:
        channels, order, weights = stage.components, "chain", "literals"
    wide = op.out_bits == 16 and not partial
    _check(packs, channels, half, wide, order, weights)
    constants = Weights(weights)
    every = op.input_packs(packs[0])
    positions = [j for j in stage.positions if j < len(every)] if stage else range(len(every))
    rows = stage.rows if stage else None
    in_packs = [every[j] for j in positions]
    border = bordered(op)
    padding = padding_terms(op, [op.logical_packs(packs[0])[j] for j in positions]
                             if not op.luma_input else [0])
    fetches, samplers, bindings = reads(op, "input", in_packs,
                                        [f"u_in{i}" for i in range(len(in_packs))], border)
    outs = [list(range(p * ir.PACK, min(p * ir.PACK + ir.PACK, op.cout))) for p in packs]
    kept = [k for k in range(ir.PACK) if channels is None or k in channels]
    # [dy, dx, input pack, in component, out]
    weights = [op.tap_weights(p)[:, :, list(positions)] for p in packs]
    sums = [f"sum{k}" if many else "sum" for k in range(len(packs))]
    vectors = window_uniforms(op, border)
    drawn = op.border_out  # its output drawn inside a zero border
    parts = stage.reads(op, packs[0]) if stage else []
    samplers += [f"u_part{h}" for h in range(len(parts))]
    bindings += [Binding(f"u_part{h}", *part) for h, part in enumerate(parts)]
    texel = output_texel(op, rows, border)
    residuals = [f"u_res{k}" if many else "u_res" for k in range(len(packs))] \
        if op.residual and not partial else []
    residual_fetches, residual_samplers, residual_bindings = reads(op, "residual", packs,
                                                                   residuals)
    samplers += residual_samplers
    bindings += residual_bindings
    if wide and half is not None:
        vectors["u_half"] = ("value", float(half), 0.0)
    padded = masked(op.size, op.padding) and not border
    units = mode.unit_masks if not padded and order != "chain" else False
    body = coordinates(op.size, padded, mode.inline_masks, rows, mode.precision,
                       COORDINATES[mode.coordinates])
    fetched = [fetch(texel) + (f" * {unit_mask(texel + '.x')}" if units and texel == OUT_TEXEL
                               else "") for fetch in residual_fetches]
    if op.residual_scale is not None:  # its stored scale over the sum's
        fetched = [f"({f}) * {constants.vec4(_kept(op.residual_scale[o], kept))}"
                   for f, o in zip(fetched, outs)]
    starts = [constants.bias(_kept(op.bias[o], kept)) for o in outs]
    if stage:
        starts = [split.start_glsl(op, stage, start, texel) for start in starts]
    body += [f"    vec4 {s} = {start};" for s, start in zip(sums, starts)]
    products = Products(sums, outs, weights, fetches,
                        [present_components(op, p) for p in in_packs], constants, padding)
    masks = Masks(padded, mode.inline_masks, units)
    terms = grouped(op, order, products, masks) if order != "chain" else \
        chain(op, products, masks, channels, rows)
    after = LAST if partial else op.residual_after  # (a partial stage adds none)
    body += place_residual(terms, dict(zip(sums, fetched)), after, order)
    body += stores(op, packs, sums, stage if partial else None, channels if wide else False)
    sixteen = parts or partial or wide or any(
        op.bits(t) == 16 for t in ("input", "residual"))
    source = (header(mode.precision, many) + (fixed16.GLSL if sixteen else "")
              + uniform_declarations(samplers, vectors,
                                     out_texel=texel == OUT_TEXEL and bool(parts or residuals))
              + constants.declaration() + "void main() {\n" + "\n".join(body) + "\n}\n")
    name, outputs, mask = written(op, packs, stage if partial else None,
                                  channels, half if wide else False)
    return Pass(name, op.name, source, bindings, outputs, vectors,
                border=tuple(drawn[:2]) if drawn else None,
                channels=tuple(mask) if mask is not None else None, arrays=constants.arrays())


def _check(packs, channels, half, wide, order, weights):
    """Refuse what a program cannot be: see :func:`program`."""
    many = len(packs) > 1
    if channels is not None and many:
        raise ValueError("a program that writes part of a pack writes one pack")
    if wide and (many or (half is None) == (channels is None)
                 or len({k // 2 for k in channels or ()}) > 1):
        raise ValueError("a program of a 16-bit output writes one half of one pack: a whole "
                         "pack's program with its half, or one or two channels of that half")
    if order not in ORDERS or (order != "chain" and channels is not None):
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)} (a chain for a "
                         "program that writes part of a pack)")
    if weights != "literals" and (many or channels is not None):
        raise ValueError(f"weights {weights!r}: for a program that writes one whole pack")


def stores(op, packs, sums, partial=None, wide=False) -> list[str]:
    """The lines that write each of ``sums`` (one of ``packs`` each): a ``partial`` stage's
    half's sums in fixed point, else its activation, companded (its ``storage``) and, where
    ``wide`` (a 16-bit output: the program's channels, or None for a whole pack's), its
    half's two values in 16 bits.  An 8-bit value goes to its target without the
    activation's outer clamp to [0, 1] (:func:`workbench.nets.activations.glsl`'s ``stored``:
    the target clamps; a storage law commutes with that clamp)."""
    lines = []
    for k, s in enumerate(sums):
        if partial:
            lines.append(f"    gl_FragColor = {split.store_glsl(op, partial, s)};")
            continue
        target = f"gl_FragData[{k}]" if len(sums) > 1 else "gl_FragColor"
        out = activations.glsl(op, s, packs[k], stored=wide is False)
        if op.storage != "linear":  # the activation, then its companded value
            if out != s:
                lines.append(f"    {s} = {out};")
            out = storage.ENCODE_GLSL[op.storage].format(x=s)
        if wide is not False:  # the activation, then its half's two values in 16 bits
            lines.append(f"    {s} = {out};")
            out = fixed16.store_glsl(s, split.HALVES[wide[0] // 2] if wide else None)
        lines.append(f"    {target} = {out};")
    return lines


def written(op, packs, partial=None, channels=None, half=False):
    """``(name, outputs, channels)`` of a program of ``packs``: its pass's name, the textures it
    writes and the components it writes there (None: all); a ``partial`` stage's: its half's
    texture; ``half`` (not False: a 16-bit output) the half it writes, or None for the half
    its ``channels`` lie in."""
    many = len(packs) > 1
    name = f"{op.name}.{packs[0]}" + (f"-{packs[-1]}" if many else "")
    outputs = [(op.name, p) for p in packs]
    mask = channels  # the components it writes (None: all)
    if partial:  # the whole texel of its half's texture
        name += f".s{partial.index}h{partial.half}"
        outputs = [(split.partial_tensor(op, partial.index), 2 * packs[0] + partial.half)]
        channels = mask = None
    elif half is not False and half is not None:  # its half's texture
        outputs, name = [(op.name, 2 * packs[0] + half)], name + f".h{half}"
    elif half is not False:  # its channels' half's texture: whole, or the two components of one
        outputs = [(op.name, 2 * packs[0] + channels[0] // 2)]
        mask = None if len(channels) == 2 else (0, 1) if channels[0] % 2 == 0 else (2, 3)
    if channels is not None:
        name += ".c" + "".join(map(str, channels))
    return name, outputs, mask


def reads(op: ir.Conv, tensor, packs, samplers, border=False):
    """``(fetches, samplers, bindings)`` of a program reading ``packs`` of ``op``'s
    ``tensor`` (``"input"`` or ``"residual"``) through the ``samplers`` named, one a pack:
    each pack's fetch at GLSL coordinates (a function of them); a 16-bit tensor's pack
    through two samplers (the name and the name + ``b``: its textures ``2p``, ``2p + 1``),
    decoded (:func:`workbench.es2.fixed16.fetch_glsl`); ``border``: the input's bordered
    copy (the same texture indices)."""
    name = op.input if tensor == "input" else op.residual
    if border and tensor == "input" and not op.input_bordered:
        name = border_tensor(op)
    fetches, names, bindings = [], [], []
    for sampler, pack in zip(samplers, packs):
        if op.bits(tensor) == 16:
            pair = (sampler, sampler + "b")
            names += pair
            bindings += [Binding(pair[0], name, 2 * pack), Binding(pair[1], name, 2 * pack + 1)]
            fetches.append(lambda where, pair=pair: fixed16.fetch_glsl(*pair, where))
        else:
            names.append(sampler)
            bindings.append(Binding(sampler, name, pack))
            fetches.append(lambda where, sampler=sampler: f"texture2D({sampler}, {where})")
    return fetches, names, bindings


def place_residual(terms, residuals, after, order) -> list[str]:
    """The lines ``terms`` (what adds the products to each sum) with ``sum += residual``
    (``residuals``: ``{sum: its fetch}``, empty for none) after the ``after``-th line that adds
    to that sum (0: before them, :data:`LAST` or beyond them: after them all; where it may,
    :func:`~workbench.es2.ops.conv.orders.places_residual`)."""
    if not places_residual(order, after):
        raise ValueError(f"a chain adds its residual first or last, not after {after} terms")
    counts = dict.fromkeys(residuals, 0)
    lines = [f"    {s} += {fetch};" for s, fetch in residuals.items()] if after == 0 else []
    for line in terms:
        lines.append(line)
        s = next((s for s in residuals if line.startswith((f"    {s} +=", f"    {s}."))), None)
        if s is not None:
            counts[s] += 1
            if counts[s] == after:
                lines.append(f"    {s} += {residuals[s]};")
    return lines + [f"    {s} += {residuals[s]};" for s in residuals
                    if after == LAST or counts[s] < after]


def output_texel(op: ir.Conv, rows=None, border=False) -> str:
    """GLSL for the texture coordinates of this fragment's own texel in a texture of the op's
    output size (its residual, a split's partial sums): the centre tap's ``vec2(x<c>, y<c>)``
    where the output pixel is that input pixel (stride 1, an odd window padded by half of it
    each side, the centre row among ``rows``), else :data:`~workbench.es2.shaders.OUT_TEXEL`,
    which the vertex shader interpolates (both the same texel centre as ``gl_FragCoord.xy /
    u_out_size``, nearest: the same bytes, without its division).  VideoCore IV's compiler
    then fetches it with the taps: a 3x3 grouped layer with a residual, 821 -> 501 estimated
    cycles.  (``border``: the taps' coordinates are the bordered texture's: the varying.)"""
    c = op.size // 2
    pads = (c, c) if op.padding == "same" else ir.explicit_pads(op.padding)
    if (op.stride == 1 and op.size % 2 and set(pads) == {c} and (rows is None or c in rows)
            and not border):
        return f"vec2(x{c}, y{c})"
    return OUT_TEXEL


def _kept(values, kept):
    """``values`` (one per output component) with the components not in ``kept`` zeroed."""
    values = np.array(values, np.float32)
    values[[k for k in range(len(values)) if k not in kept]] = 0.0
    return values
