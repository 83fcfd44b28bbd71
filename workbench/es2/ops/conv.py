"""The ES 2.0 record of :class:`workbench.ir.Conv`: convolution + bias (+ residual) +
activation, one program per output pack of 4 channels (or, with draw buffers, per run of packs
that read the same inputs; or, for a compiler with a small constant file, per 2 or 1 output
channels under a colour mask), its emulator, limits, cost and tiling.

The shader sums as its emulator (:mod:`workbench.es2.ops.conv_emulator`) does, in one of the
summation orders (:mod:`workbench.es2.ops.orders`); a tap in the padding is masked
(:mod:`workbench.es2.ops.padding`); a program holds its weights as literals or uniforms
(:mod:`workbench.es2.ops.weights`); a program too wide for the target is split over its input
packs and, where one pack is too many, its kernel rows (:mod:`workbench.es2.ops.split`, which
also plans the split).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.emulate import FAST, REAL, quantize
from workbench.es2.limits import Target, check_storage, fits
from workbench.es2.ops import split
from workbench.es2.ops.conv_emulator import emulate, partial_bound
from workbench.es2.ops.orders import (LAST, ORDERS, chain, chained, grouped, order_of,
                                      places_residual)
from workbench.es2.ops.padding import (border_offered, border_passes, border_tensor,
                                       border_textures, bordered,
                                       padding_terms, unit_mask)
from workbench.es2.ops.weights import Weights, present_components, uniforms_fit
from workbench.es2.plan import pack_textures
from workbench.es2.record import OpRecord, register
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
from workbench.ir.cost import Cost
from workbench.nets import activations, storage


@dataclass
class ConvForm(ir.Conv):
    """A :class:`workbench.ir.Conv` whose programs add their products in ``order``
    (:data:`ORDERS`), its residual (if any) added after ``residual_after`` of the order's
    terms (:func:`place_residual`), as :func:`workbench.es2.drivers.tune` chose for a target's
    compiler; the emulator follows both.  ``split``: the runs its input packs are
    split over where one program would exceed the limits, ``row_split``: the bands each
    run's kernel rows are split over where one input pack a program is still too many (its
    stages: :mod:`workbench.es2.ops.split`; chosen by :func:`prepare`, or by
    :func:`workbench.es2.drivers.fit` where a driver refuses).  ``out_bits``, ``in_bits``,
    ``residual_bits``: 16 where its output, input or residual is a 16-bit tensor
    (:func:`wide_tensors`; :func:`workbench.es2.fixed16.tensor_bits`).  ``zero_border``: its
    input read through a zero border instead of masks
    (:func:`~workbench.es2.ops.padding.bordered`; a field, for its textures), its producer's
    own (``input_bordered``) or a copy; ``border_out``: ``(left, top, right, bottom)``, its
    output drawn with that border of zeros for its reader
    (:func:`~workbench.es2.ops.padding.producer_borders`).  ``partial_bound``: the largest
    magnitude its partial sums reach on calibration images, with headroom (:func:`measured`;
    :func:`~workbench.es2.ops.split.shift`).  (How a program holds its weights
    changes no arithmetic: a layer option of :func:`passes`, not a field.)"""
    order: str = "chain"
    residual_after: int = LAST
    split: int = 1
    row_split: int = 1
    out_bits: int = 8
    in_bits: int = 8
    residual_bits: int = 8
    zero_border: bool = False
    input_bordered: bool = False
    border_out: tuple | None = None
    partial_bound: float | None = None  # a bound of its partial sums measured on images


FORM = ("order", "residual_after", "row_split", "zero_border", "input_bordered",
        "border_out")  # the layer options a ConvForm records


def formed(op: ir.Conv, **form) -> ConvForm:
    """``op`` with the fields ``form`` (:data:`FORM`: ``order``, ``residual_after``,
    ``row_split``, ``zero_border``, ``input_bordered``, ``border_out``; :func:`prepare`:
    ``split``)."""
    fields = {k: v for k, v in vars(op).items() if k not in form}
    return ConvForm(**fields, **form)


PARTIAL_HEADROOM = 4  # the partial sums' measured bound times this (2 bits) for unseen images


def measured(graph: ir.Graph, images) -> ir.Graph:
    """``graph`` with each convolution of more than one input pack or kernel row formed with
    ``partial_bound``: :data:`PARTIAL_HEADROOM` times the bound of its partial sums
    (:func:`~workbench.es2.ops.conv_emulator.partial_bound`) on ``images`` (as stored:
    the emulator's FAST arithmetic), where it is below its weights' bound; a wide layer's
    split then keeps finer steps (a 9216 -> 128 Gemm as a conv: its weights' bound is far
    above what its sums reach)."""
    from workbench.es2 import emulate

    convs = [op for op in graph.ops if isinstance(op, ir.Conv) and (op.cin > ir.PACK
                                                                    or op.size > 1)]
    found = dict.fromkeys((op.name for op in convs), 0.0)
    head = graph.ops[:max((graph.ops.index(op) for op in convs), default=-1) + 1]
    for image in images:
        values = emulate.tensors(graph, image, emulate.FAST, head)
        for op in convs:
            found[op.name] = max(found[op.name], partial_bound(op, values[op.input]))
    bounds = {name: PARTIAL_HEADROOM * b for name, b in found.items()
              if PARTIAL_HEADROOM * b < split.weight_bound(graph.op(name))}
    return replace(graph, ops=[formed(op, partial_bound=bounds[op.name]) if op.name in bounds
                               else op for op in graph.ops])


def wide_tensors(graph: ir.Graph, limits=None) -> set[str]:
    """The tensors stored at 16 bits (:mod:`workbench.es2.fixed16`) where a compile asks it:
    each one held with a scale (``graph.scaled``: a calibrated ReLU's or linear tensor, a
    ReLU6's y / 6; 8-bit steps of its range are what cost a net of the ecosystem its agreement)
    that a convolution writes and only convolutions read, as input or residual (not the net's
    output); with ``limits``, not one whose 16 bits a reader's split would undo
    (:func:`split_undoes`)."""
    readers = graph.readers()
    wide = {op.name for op in graph.ops
            if isinstance(op, ir.Conv) and op.name in graph.scaled and op.storage == "linear"
            and op.name != graph.output and readers.get(op.name)
            and all(isinstance(r, ir.Conv) and not r.luma_input for r in readers[op.name])}
    if limits is None:
        return wide
    undone = {r.name for r in graph.ops if isinstance(r, ir.Conv) and _bits(r, wide)
              and split_undoes(r, wide, limits)}  # each reader asked once
    return {t for t in wide if not undone & {r.name for r in readers[t]}}


def split_undoes(reader: ir.Conv, wide, limits) -> bool:
    """Whether reading the tensors ``wide`` at 16 bits (twice the fetches and texture units)
    splits ``reader`` over more stages (:func:`workbench.es2.ops.split.stages_needed`) whose
    partial sums keep steps coarser than an 8-bit level (:func:`~.split.shift` < 0: its folded
    weights are large): each stage's rounding then costs more than the 16 bits keep (a ReLU
    classifier's 3x3 convs, shift -3: GPU top-1 = ONNX Runtime's 99.5 -> 97 %)."""
    if split.shift(reader) >= 0:
        return False
    stages = [int(np.prod(split.stages_needed(op, limits)))
              for op in (reader, formed(reader, **_bits(reader, wide)))]
    return stages[1] > stages[0]


def widened(graph: ir.Graph, wide) -> ir.Graph:
    """A copy of ``graph`` whose convolutions write, read and add the tensors ``wide`` (:func:
    `wide_tensors`) at 16 bits (:class:`ConvForm`'s ``out_bits``, ``in_bits``,
    ``residual_bits``)."""
    return replace(graph, ops=[formed(op, **_bits(op, wide))
                               if isinstance(op, ir.Conv) and _bits(op, wide) else op
                               for op in graph.ops])


def _bits(op: ir.Conv, wide) -> dict:
    """The :class:`ConvForm` fields of ``op`` that the 16-bit tensors ``wide`` set to 16."""
    found = {"out_bits": op.name in wide, "in_bits": op.input in wide,
             "residual_bits": op.residual in wide}
    return {field: 16 for field, is_wide in found.items() if is_wide}


def program(op: ir.Conv, packs, precision="highp", channels=None, inline_masks=False,
            order="chain", weights="literals", residual_after=LAST, stage=None,
            half=None, unit_masks=False) -> Pass:
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
    products times its :func:`~workbench.es2.ops.padding.unit_mask`, exactly 1, and a
    residual read at the vertex shader's :data:`~workbench.es2.shaders.OUT_TEXEL` times its
    own (the same bytes).  ``order``: how the products are added (:data:`ORDERS`; a program
    that writes part of a pack adds them in a chain).  ``weights``: as literals or uniforms
    (:data:`~workbench.es2.ops.weights.WEIGHTS`; uniforms for a program that writes one whole pack).
    ``residual_after``: the residual added after that many of the order's terms
    (:func:`place_residual`; vc4 then fetches it with the taps instead of waiting for it at
    the end).  Where ``op`` is :func:`~workbench.es2.ops.padding.bordered`, it reads its
    input through the border, without masks; with ``border_out``, it draws its output's
    texture with that border, zeros there.  ``stage``: the program is that
    :class:`~workbench.es2.ops.split.Stage` of a split op, for one pack: its run of input packs
    and rows of taps, starting from the partial sums before it; a partial stage writes its
    half's sums."""
    packs = [packs] if isinstance(packs, int) else list(packs)
    many = len(packs) > 1
    partial = stage is not None and not stage.last
    if partial:
        channels, order, weights = stage.components, "chain", "literals"
    if channels is not None and many:
        raise ValueError("a program that writes part of a pack writes one pack")
    wide = fixed16.tensor_bits(op) == 16 and not partial
    if wide and (many or (half is None) == (channels is None)
                 or len({k // 2 for k in channels or ()}) > 1):
        raise ValueError("a program of a 16-bit output writes one half of one pack: a whole "
                         "pack's program with its half, or one or two channels of that half")
    if order not in ORDERS or (order != "chain" and channels is not None):
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)} (a chain for a "
                         "program that writes part of a pack)")
    constants = Weights(weights)
    if weights == "uniforms" and (many or channels is not None):
        raise ValueError("weights as uniforms: for a program that writes one whole pack")
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
    drawn = getattr(op, "border_out", None)  # its output drawn inside a zero border
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
    units = unit_masks and not padded and order != "chain"
    body = coordinates(op.size, padded, inline_masks, rows)
    fetched = [fetch(texel) + (f" * {unit_mask(texel + '.x')}" if units and texel == OUT_TEXEL
                               else "") for fetch in residual_fetches]
    if op.residual_scale is not None:  # its stored scale over the sum's
        fetched = [f"({f}) * {constants.vec4(_kept(op.residual_scale[o], kept))}"
                   for f, o in zip(fetched, outs)]
    starts = [constants.vec4(_kept(op.bias[o], kept)) for o in outs]
    if stage:
        starts = [split.start_glsl(op, stage, start, texel) for start in starts]
    body += [f"    vec4 {s} = {start};" for s, start in zip(sums, starts)]
    present = [present_components(op, p) for p in in_packs]
    if order != "chain":
        terms = grouped(op, order, sums, outs, weights, fetches, padded, inline_masks,
                        constants, present, units)
    else:
        terms = chain(op, sums, outs, weights, fetches, padded, inline_masks, constants,
                      padding, present, channels, rows)
    body += place_residual(terms, dict(zip(sums, fetched)), residual_after, order)
    for k, s in enumerate(sums):
        if partial:
            body.append(f"    gl_FragColor = {split.store_glsl(op, stage, s)};")
            continue
        target = f"gl_FragData[{k}]" if many else "gl_FragColor"
        out = activations.glsl(op, s, packs[k])
        if op.storage != "linear":  # the activation, then its companded value
            body.append(f"    {s} = {out};")
            out = storage.ENCODE_GLSL[op.storage].format(x=s)
        if wide:  # the activation, then its half's two values in 16 bits
            body.append(f"    {s} = {out};")
            out = fixed16.store_glsl(s, split.HALVES[channels[0] // 2] if channels else None)
        body.append(f"    {target} = {out};")
    sixteen = parts or partial or wide or any(
        fixed16.tensor_bits(op, t) == 16 for t in ("input", "residual"))
    source = (header(precision, many) + (fixed16.GLSL if sixteen else "")
              + uniform_declarations(samplers, vectors,
                                     out_texel=texel == OUT_TEXEL and bool(parts or residuals))
              + constants.declaration() + "void main() {\n" + "\n".join(body) + "\n}\n")
    name = f"{op.name}.{packs[0]}" + (f"-{packs[-1]}" if many else "")
    outputs = [(op.name, p) for p in packs]
    mask = channels  # the components it writes (None: all)
    if partial:  # the whole texel of its half's texture
        name += f".s{stage.index}h{stage.half}"
        outputs = [(split.partial_tensor(op, stage.index), 2 * packs[0] + stage.half)]
        channels = mask = None
    elif wide and half is not None:  # its half's texture
        outputs, name = [(op.name, 2 * packs[0] + half)], name + f".h{half}"
    elif wide:  # its channels' half's texture: whole, or the two components of its one channel
        outputs = [(op.name, 2 * packs[0] + channels[0] // 2)]
        mask = None if len(channels) == 2 else (0, 1) if channels[0] % 2 == 0 else (2, 3)
    if channels is not None:
        name += ".c" + "".join(map(str, channels))
    return Pass(name, op.name, source, bindings, outputs, vectors,
                border=tuple(drawn[:2]) if drawn else None,
                channels=tuple(mask) if mask is not None else None, arrays=constants.arrays())


def reads(op: ir.Conv, tensor, packs, samplers, border=False):
    """``(fetches, samplers, bindings)`` of a program reading ``packs`` of ``op``'s
    ``tensor`` (``"input"`` or ``"residual"``) through the ``samplers`` named, one a pack:
    each pack's fetch at GLSL coordinates (a function of them); a 16-bit tensor's pack
    through two samplers (the name and the name + ``b``: its textures ``2p``, ``2p + 1``),
    decoded (:func:`workbench.es2.fixed16.fetch_glsl`); ``border``: the input's bordered
    copy (the same texture indices)."""
    name = op.input if tensor == "input" else op.residual
    if border and tensor == "input" and not getattr(op, "input_bordered", False):
        name = border_tensor(op)
    fetches, names, bindings = [], [], []
    for sampler, pack in zip(samplers, packs):
        if fixed16.tensor_bits(op, tensor) == 16:
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
    :func:`~workbench.es2.ops.orders.places_residual`)."""
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


def passes(op: ir.Conv, shapes, target: Target, channels=None, inline_masks=False,
           order=None, weights="literals", residual_after=None, row_split=None,
           zero_border=None, input_bordered=None, border_out=None,
           unit_masks=False) -> list[Pass]:
    """Its programs for ``target``: runs of up to ``target.draw_buffers`` output packs
    (:func:`programs`).  ``channels``: output channels a program writes (4, 2 or 1; default
    what the target's constant budget allows, :func:`channels_per_program`); under 4, each
    pack is drawn by several programs of that many components each, one target each.
    ``inline_masks``: see :func:`workbench.es2.shaders.coordinates`; ``unit_masks``: see
    :func:`program`.  ``order``: how they add
    their products (:data:`ORDERS`), default the op's own (a plain Conv: the chain).
    ``weights="uniforms"``: weights set at each draw (:class:`~.weights.Weights`), one pack a
    program, where they fit the limits' uniform vectors (else literals).
    ``residual_after``: see :func:`program`, default the op's own.  A 16-bit output
    (:func:`wide_tensors`): each pack's program drawn once a half; programs of 2 or 1
    channels each write their half.  A split op
    (:mod:`workbench.es2.ops.split`): its partial stages' programs, then its last stage's as
    these options make them, one pack each; ``row_split``: its kernel rows split over that
    many stages a run of input packs (a driver's ask, :func:`workbench.es2.drivers.fit`),
    default the op's own.  ``zero_border``: its input read through a zero border
    (:func:`~workbench.es2.ops.padding.bordered`: the copies' programs first, or
    ``input_bordered``: none, its producer drew it), ``border_out``: its output drawn with a
    border (:func:`~workbench.es2.ops.padding.producer_borders`), default the op's own."""
    precision, limits = target.precision, target.limits
    if row_split:
        op = formed(op, row_split=row_split)
    given = {"zero_border": zero_border, "input_bordered": input_bordered,
             "border_out": border_out}
    if any(v is not None for v in given.values()):
        op = formed(op, **{k: v for k, v in given.items() if v is not None})
    order = order_of(op, order)
    if residual_after is None:
        residual_after = getattr(op, "residual_after", LAST)
    channels = channels or channels_per_program(op, limits.constant_vectors)
    if weights != "uniforms" or channels < ir.PACK or not uniforms_fit(op, limits):
        weights = "literals"
    partials, last = border_passes(op, shapes, precision) if bordered(op) else [], {}
    if split.count(op) > 1:
        for pack in range(op.out_packs()):
            *stages, last[pack] = split.stage_list(op, pack)
            partials += [program(op, pack, precision, inline_masks=inline_masks, stage=stage)
                         for stage in stages]
    if channels < ir.PACK:
        return partials + [
            program(op, pack, precision, tuple(range(k, k + channels)), inline_masks, order,
                    residual_after=residual_after, stage=last.get(pack))
            for pack in range(op.out_packs()) for k in range(0, ir.PACK, channels)
            if k < op.cout - pack * ir.PACK]
    wide = fixed16.tensor_bits(op) == 16
    draw_buffers = target.draw_buffers if weights == "literals" and not last and not wide else 1
    return partials + [
        program(op, packs, precision, inline_masks=inline_masks, order=order, weights=weights,
                residual_after=residual_after, stage=last.get(packs[0]), half=half,
                unit_masks=unit_masks)
        for packs in programs(op, draw_buffers, limits.texture_units,
                              limits.fetches_per_fragment)
        for half in (split.halves(op, packs[0]) if wide else [None])]


def apply(op: ir.Conv, tensors, arithmetic):
    """The stored output, as the next op fetches it (8 or 16 bits)."""
    res = tensors[op.residual] if op.residual else None
    out = emulate(op, tensors[op.input], res, fast=arithmetic in (REAL, FAST))
    if fixed16.tensor_bits(op) == 16:
        return fixed16.stored_tensor(out, arithmetic)
    return quantize(out, arithmetic)


def check(op: ir.Conv, shapes, limits):
    """The limits of every program of ``op`` (each stage's, where it is split) in its
    one-target form, and 8-bit storage."""
    for stage in split.programs(op):
        split.check_stage(op, stage, limits)
    check_storage(op.name, activations.of(op), limits)


def prepare(op: ir.Conv, shapes, limits, options):
    """``op`` split over the stages its programs need to fit ``limits``
    (:func:`workbench.es2.ops.split.stages_needed`), or ``op`` itself where it fits whole."""
    n, rows = split.stages_needed(op, limits)
    return op if (n, rows) == (1, 1) else formed(op, split=n, row_split=rows)


def fetches(op: ir.Conv, packs) -> int:
    """Texel fetches per fragment of one program writing output packs ``packs`` of ``op``:
    each input pack once per tap (shared by the outputs), plus one residual texel per output;
    a split op's heaviest stage's."""
    if split.count(op) > 1:
        return max(stage.fetches(op) for stage in split.programs(op))
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return (op.size ** 2 * len(inputs) * fixed16.textures_a_pack(op, "input")
            + (len(packs) * fixed16.textures_a_pack(op, "residual") if op.residual else 0))


def units(op: ir.Conv, packs) -> int:
    """Texture units of one program writing output packs ``packs`` of ``op``."""
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return (len(inputs) * fixed16.textures_a_pack(op, "input")
            + (len(packs) * fixed16.textures_a_pack(op, "residual") if op.residual else 0))


def programs(op: ir.Conv, draw_buffers=1, max_units=None, max_fetches=None) -> list[list[int]]:
    """The output packs of each program of ``op``: runs of up to ``draw_buffers`` consecutive
    packs that read the same input packs (one group of a grouped conv), a run ended early where
    one more output would exceed ``max_units`` texture units or ``max_fetches`` per fragment
    (None: no budget).  ``draw_buffers=1``: one pack per program, the plain ES 2.0 form."""
    max_units, max_fetches = max_units or float("inf"), max_fetches or float("inf")
    runs = []
    for pack in range(op.out_packs()):
        last = runs[-1] if runs else None
        if (last and len(last) < draw_buffers
                and op.input_packs(last[0]) == op.input_packs(pack)
                and units(op, last + [pack]) <= max_units
                and fetches(op, last + [pack]) <= max_fetches):
            last.append(pack)
        else:
            runs.append([pack])
    return runs


def channels_per_program(op: ir.Conv, constant_vectors=None) -> int:
    """Output channels one program of ``op`` writes: 4 (a whole pack), or 2 or 1 when its
    literals would not fit ``constant_vectors`` slots (None: no such budget)."""
    last = split.programs(op)[-1]  # the last stage's, where it is split
    for channels in (4, 2, 1):
        if constant_vectors is None or \
                split.constant_slots(op, channels, last) <= constant_vectors:
            return channels
    return 1


def cost(op: ir.Conv, shapes, programs=None) -> Cost:
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
    border = border_textures(op, shapes) if bordered(op) else {}  # a fetch a texel each
    return Cost(multiply_adds=outputs * op.kernel.size,
                texel_fetches=outputs * sum(n * fetches(op, packs)
                                            for n, packs in zip(copies, programs))
                + sum(bw * bh for bw, bh, _ in border.values()),
                texture_bytes=pixels * 4 * op.out_packs() * fixed16.textures_a_pack(op),
                programs=sum(copies) + len(border))


def writers(op: ir.Conv, pack) -> int:
    """Programs that write output pack ``pack`` (of a 2-channel program of a 16-bit output,
    one a half it has channels in; else one)."""
    return len(split.halves(op, pack)) if fixed16.tensor_bits(op) == 16 else 1


def textures(op: ir.Conv, shapes) -> dict:
    """Its output packs (two RGBA8 textures each where it is 16-bit), and a split op's partial
    sums: two RGBA8 textures an output pack and partial stage, of the output's size; a
    bordered op's copy of its input (:func:`~workbench.es2.ops.padding.border_textures`)."""
    out = {key: _output_texture(op, shapes)
           for key in pack_textures(op.name, shapes, fixed16.textures_a_pack(op))}
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
    left, top, right, bottom = getattr(op, "border_out", None) or (0, 0, 0, 0)
    return w + left + right, h + top + bottom, "f1"


def origin(op: ir.Conv):
    """Where the output lies in its textures: ``(left, top)`` of its ``border_out``, or None."""
    drawn = getattr(op, "border_out", None)
    return tuple(drawn[:2]) if drawn else None


def check_program(op: ir.Conv, packs, limits):
    """One compiled program writing output packs ``packs``: its fetches per fragment (a split
    op's: its heaviest stage's)."""
    fits(op.name, "texel fetches per fragment", fetches(op, packs), limits.fetches_per_fragment,
         limits)


def tile(op: ir.Conv, step, reach):
    """A stride-1 'same' (or 1x1) convolution keeps the grid and reaches ``size // 2`` more
    of its input's pixels (and as far as its residual)."""
    if op.stride != 1 or (op.padding != "same" and op.size != 1):
        return None
    return step[op.input], max([reach[op.input] + (op.size // 2) * step[op.input]]
                               + ([reach[op.residual]] if op.residual else []))


def layer_options(op: ir.Conv) -> tuple[str, ...]:
    """What a driver may ask of its programs (:func:`passes`' keywords that change them)."""
    masks = ("inline_masks",) if masked(op.size, op.padding) else ()
    masks += ("zero_border",) if border_offered(op) else ()
    residual = ("residual_after",) if op.residual else ()
    order = () if chained(op) else ("order", "unit_masks")
    rows = ("row_split",) if op.size > 1 else ()
    return ("channels", *masks, *order, *residual, "weights", *rows)


RECORD = register(ir.Conv, OpRecord(
    "Conv", passes=passes, apply=apply, check=check, cost=cost, tile=tile, textures=textures,
    check_program=check_program, layer_options=layer_options, prepare=prepare,
    prepared=ConvForm, origin=origin))
