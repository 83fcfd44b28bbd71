"""A convolution's programs for a target (:func:`passes`): which output packs each writes,
how many channels, and the stages of a split op; its limits, and what a driver may ask."""
from __future__ import annotations

from dataclasses import replace

from workbench import ir
from workbench.es2.limits import Target, check_storage, fits
from workbench.es2.ops.conv import split
from workbench.es2.ops.conv.form import FORM, ConvForm, formed
from workbench.es2.ops.conv.orders import chained
from workbench.es2.ops.conv.padding import (border_offered, border_passes, bordered,
                                             luma_offered)
from workbench.es2.ops.conv.program import MODE, Mode, program
from workbench.es2.ops.conv.weights import uniforms_fit
from workbench.es2.shaders import Pass, masked
from workbench.nets import activations


def passes(op: ConvForm, shapes, target: Target, channels=None, **options) -> list[Pass]:
    """Its programs for ``target``: runs of up to ``target.draw_buffers`` output packs
    (:func:`programs`).  ``channels``: output channels a program writes (4, 2 or 1; default
    what the target's constant budget allows, :func:`channels_per_program`); under 4, each
    pack is drawn by several programs of that many components each, one target each.
    ``options`` (a driver's, :func:`layer_options`): the form's (:data:`~.form.FORM`: ``order``,
    ``residual_after``, ``row_split``, ``zero_border``, ``input_bordered``, ``border_out``,
    ``luma_copy``;
    :class:`~.form.ConvForm`), default its own fields, and the :class:`~.program.Mode`'s
    (``inline_masks``, ``weights``, ``unit_masks``, ``coordinates``).  ``weights="uniforms"``:
    weights set at each draw (:class:`~.weights.Weights`), one pack a program, where they fit
    the limits' uniform vectors (else literals); ``"uniform bias"``: the bias alone, one pack a
    program.  A 16-bit output (:func:`wide_tensors`): each
    pack's program drawn once a half; programs of 2 or 1 channels each write their half.  A split op
    (:mod:`workbench.es2.ops.conv.split`): its partial stages' programs, then its last stage's
    as these options make them, one pack each.  A zero border
    (:func:`~workbench.es2.ops.conv.padding.bordered`): the copies' programs first (none where
    its producer drew it)."""
    unknown = set(options) - set(FORM) - set(MODE)
    if unknown:
        raise TypeError(f"passes() got unexpected keyword arguments {sorted(unknown)}")
    op = replace(op, **{k: v for k, v in options.items() if k in FORM and v is not None})
    limits = target.limits
    channels = channels or channels_per_program(op, limits.constant_vectors)
    plain, whole = modes(op, target, channels, options)
    partials, last = border_passes(op, shapes, target.precision) if bordered(op) else [], {}
    if split.count(op) > 1:
        for pack in range(op.out_packs()):
            *stages, last[pack] = split.stage_list(op, pack)
            partials += [program(op, pack, plain, stage=stage) for stage in stages]
    if channels < ir.PACK:
        return partials + [
            program(op, pack, plain, tuple(range(k, k + channels)), last.get(pack))
            for pack in range(op.out_packs()) for k in range(0, ir.PACK, channels)
            if k < op.cout - pack * ir.PACK]
    wide = op.out_bits == 16
    draw_buffers = target.draw_buffers \
        if whole.weights == "literals" and not last and not wide else 1
    return partials + [
        program(op, packs, whole, stage=last.get(packs[0]), half=half)
        for packs in programs(op, draw_buffers, limits.texture_units,
                              limits.fetches_per_fragment)
        for half in (split.halves(op, packs[0]) if wide else [None])]


def modes(op: ConvForm, target: Target, channels, options) -> tuple[Mode, Mode]:
    """``(plain, whole)``: the :class:`~.program.Mode` of its partial stages' programs and of
    its programs of part of a pack (``options``' ``inline_masks``; weights as literals), and
    of its programs of whole packs (``channels`` 4): ``options``' ``unit_masks`` too, and
    its ``weights``, as uniforms where they fit the limits' uniform vectors (else literals)."""
    plain = Mode(target.precision, options.get("inline_masks", False),
                 coordinates=options.get("coordinates", "pairs"))
    weights = options.get("weights", "literals")
    if channels < ir.PACK or (weights == "uniforms" and not uniforms_fit(op, target.limits)):
        weights = "literals"
    return plain, replace(plain, weights=weights, unit_masks=options.get("unit_masks", False))


def check(op: ConvForm, shapes, limits):
    """The limits of every program of ``op`` (each stage's, where it is split) in its
    one-target form, and 8-bit storage."""
    for stage in split.programs(op):
        split.check_stage(op, stage, limits)
    check_storage(op.name, activations.of(op), limits)


def prepare(op: ir.Conv, shapes, limits, options) -> ConvForm:
    """``op`` (the IR's, or as calibration formed it: :mod:`.calibration`) as a
    :class:`ConvForm` split over the stages its programs need to fit ``limits``
    (:func:`workbench.es2.ops.conv.split.stages_needed`: one where it fits whole)."""
    op = formed(op)
    n, rows = split.stages_needed(op, limits)
    return replace(op, split=n, row_split=rows)


def fetches(op: ConvForm, packs) -> int:
    """Texel fetches per fragment of one program writing output packs ``packs`` of ``op``:
    each input pack once per tap (shared by the outputs), plus one residual texel per output;
    a split op's heaviest stage's."""
    if split.count(op) > 1:
        return max(stage.fetches(op) for stage in split.programs(op))
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return (op.size ** 2 * len(inputs) * op.textures_a_pack("input")
            + (len(packs) * op.textures_a_pack("residual") if op.residual else 0))


def units(op: ConvForm, packs) -> int:
    """Texture units of one program writing output packs ``packs`` of ``op``."""
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return (len(inputs) * op.textures_a_pack("input")
            + (len(packs) * op.textures_a_pack("residual") if op.residual else 0))


def programs(op: ConvForm, draw_buffers=1, max_units=None, max_fetches=None) -> list[list[int]]:
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


def channels_per_program(op: ConvForm, constant_vectors=None) -> int:
    """Output channels one program of ``op`` writes: 4 (a whole pack), or 2 or 1 when its
    literals would not fit ``constant_vectors`` slots (None: no such budget)."""
    last = split.programs(op)[-1]  # the last stage's, where it is split
    for channels in (4, 2, 1):
        if constant_vectors is None or \
                split.constant_slots(op, channels, last) <= constant_vectors:
            return channels
    return 1


def check_program(op: ConvForm, packs, limits):
    """One compiled program writing output packs ``packs``: its fetches per fragment (a split
    op's: its heaviest stage's)."""
    fits(op.name, "texel fetches per fragment", fetches(op, packs),
         limits.fetches_per_fragment, limits)


def layer_options(op: ConvForm) -> tuple[str, ...]:
    """What a driver may ask of its programs (:func:`passes`' keywords that change them)."""
    masks = ("inline_masks",) if masked(op.size, op.padding) else ()
    masks += ("zero_border",) if border_offered(op) else ()
    masks += ("luma_copy",) if luma_offered(op) else ()
    residual = ("residual_after",) if op.residual else ()
    order = () if chained(op) else ("order", "unit_masks")
    rows = ("row_split", "coordinates") if op.size > 1 else ()
    return ("channels", *masks, *order, *residual, "weights", *rows)
