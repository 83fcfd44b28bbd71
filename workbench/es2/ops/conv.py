"""The ES 2.0 record of :class:`workbench.ir.Conv`: convolution + bias (+ residual) +
activation, one program per output pack of 4 channels (or, with draw buffers, per run of packs
that read the same inputs; or, for a compiler with a small constant file, per 2 or 1 output
channels under a colour mask), its emulator, limits, cost and tiling.

The shader sums as :func:`emulate` does, in one of :data:`ORDERS` (the arithmetic is the
same, the float rounding follows the order; a compiler schedules each differently, so
:func:`workbench.es2.drivers.tune` keeps the one the target's compiler runs fastest).  A tap
in the zero padding is multiplied by 0/1 masks (exact: the padding adds 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.emulate import F32, luma, quantize
from workbench.es2.limits import LimitError, Target, check_storage, fits
from workbench.es2.ops import split
from workbench.es2.plan import pack_textures
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import (
    Binding,
    Pass,
    coordinates,
    header,
    inside_mask,
    masked,
    uniform_declarations,
)
from workbench.glsl_text import glsl_float, glsl_vec
from workbench.ir.cost import Cost
from workbench.nets import activations, storage


# How a program adds its products (``mat4 * vec4``, one an input pack and tap; a tap's group is
# the sum of its packs' products, left to right):
ORDERS = {
    "chain": "the bias, then every product in turn (tap by tap, row by row; pack by pack)",
    "taps": "the bias, then each tap's group in turn",
    "rows": "the bias, then each row of taps: its groups summed left to right",
    "columns": "the bias, then each column of taps: its groups summed top to bottom",
}


@dataclass
class ConvForm(ir.Conv):
    """A :class:`workbench.ir.Conv` whose programs add their products in ``order``
    (:data:`ORDERS`), its residual (if any) to the bias before them where
    ``residual_first`` (else after them), as :func:`workbench.es2.drivers.tune` chose for a
    target's compiler; the emulator follows both.  ``split``: the stages its input packs are
    split over where one program would exceed the limits (:mod:`workbench.es2.ops.split`,
    chosen by :func:`prepare`).  (How a program holds its weights changes no arithmetic: a
    layer option of :func:`passes`, not a field.)"""
    order: str = "chain"
    residual_first: bool = False
    split: int = 1


FORM = ("order", "residual_first")  # the layer options a ConvForm records


def formed(op: ir.Conv, **form) -> ConvForm:
    """``op`` with the fields ``form`` (:data:`FORM`: ``order``, ``residual_first``)."""
    fields = {k: v for k, v in vars(op).items() if k not in form}
    return ConvForm(**fields, **form)


def uniform_rows(op: ir.Conv) -> int:
    """The rows of ``u_w`` of one of its programs with weights as uniforms: the bias, and a
    vec4 a tap (luma input) or four a tap and input pack."""
    packs = 1 if op.luma_input else len(op.input_packs(0))
    return 1 + op.size ** 2 * (1 if op.luma_input else ir.PACK * packs)


def _uniforms_fit(op: ir.Conv, limits) -> bool:
    """Whether a program with its weights as uniforms fits the fragment uniform vectors (its
    vec2 uniforms too) and, where literals share that file, the constant budget."""
    rows = uniform_rows(op) + 2 + bool(op.residual)
    return rows <= min(limits.fragment_uniform_vectors, limits.constant_vectors or rows)


WEIGHTS = ("literals", "uniforms")  # how a program holds its weights (:class:`_Weights`)


class _Weights:
    """How a program spells its weights and bias: as literals, or as rows of the ``vec4``
    uniform array ``u_w`` set at each draw (:attr:`Pass.arrays`), so that one program serves
    every layer of its shape (the same float32 values: the same bytes).  With uniforms every
    product is written, a zero weight's too: the program text depends on the shape alone."""

    def __init__(self, kind):
        if kind not in WEIGHTS:
            raise ValueError(f"weights {kind!r}: one of {', '.join(WEIGHTS)}")
        self.rows = [] if kind == "uniforms" else None

    def vec4(self, values) -> str:
        if self.rows is None:
            return glsl_vec(values)
        self.rows.append(np.pad(np.asarray(values, np.float32), (0, ir.PACK - len(values))))
        return f"u_w[{len(self.rows) - 1}]"

    def mat4(self, m) -> str:
        """``m[i, o]`` (input component i -> output component o): GLSL's ``mat4`` is
        column-major, so column i holds input component i."""
        if self.rows is None:
            return f"mat4({', '.join(glsl_float(v) for v in np.asarray(m).ravel())})"
        return f"mat4({', '.join(self.vec4(column) for column in m)})"

    def kept(self, m) -> bool:
        """Whether a product with the weights ``m`` is written (a literal 0 is left out)."""
        return self.rows is not None or bool(np.any(m))

    def declaration(self) -> str:
        return f"uniform vec4 u_w[{len(self.rows)}];\n" if self.rows else ""

    def arrays(self) -> dict:
        return {"u_w": np.stack(self.rows)} if self.rows else {}


def program(op: ir.Conv, packs, precision="highp", channels=None, inline_masks=False,
            order="chain", weights="literals", residual_first=False, stage=None) -> Pass:
    """Output packs ``packs`` of a convolution (+ residual) + activation: channels
    ``4*pack .. 4*pack+3`` of each; several packs (which read the same input packs) make one
    program with draw buffers, ``gl_FragData[i]`` for ``packs[i]``.  ``channels``: with one
    pack, only these components of it (0-3), the others' weights left out of the program (a
    compiler that keeps literals in a small constant file takes it then); the runtime masks
    the rest, so a component's arithmetic, and its bytes, are those of the whole program.
    ``inline_masks``: see :func:`workbench.es2.shaders.coordinates` (the same 0/1 masks:
    the same bytes).  ``order``: how the products are added (:data:`ORDERS`; a program that
    writes part of a pack adds them in a chain).  ``weights``: as literals or uniforms
    (:data:`WEIGHTS`, :class:`_Weights`; uniforms for a program that writes one whole pack).
    ``residual_first``: the residual added to the bias, before the products (vc4 then fetches
    it with the others instead of waiting for it at the end).  ``stage``: the program is that
    :class:`~workbench.es2.ops.split.Stage` of a split op, for one pack: its run of input packs,
    starting from the partial sums before it; a partial stage writes its half's sums."""
    packs = [packs] if isinstance(packs, int) else list(packs)
    many = len(packs) > 1
    partial = stage is not None and not stage.last
    if partial:
        channels, order, weights = stage.components, "chain", "literals"
    if channels is not None and many:
        raise ValueError("a program that writes part of a pack writes one pack")
    if order not in ORDERS or (order != "chain" and channels is not None):
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)} (a chain for a "
                         "program that writes part of a pack)")
    constants = _Weights(weights)
    if weights == "uniforms" and (many or channels is not None):
        raise ValueError("weights as uniforms: for a program that writes one whole pack")
    every = op.input_packs(packs[0])
    positions = [j for j in stage.positions if j < len(every)] if stage else range(len(every))
    in_packs = [every[j] for j in positions]
    padding = _padding_terms(op, [op.logical_packs(packs[0])[j] for j in positions]
                             if not op.luma_input else [0])
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    outs = [list(range(p * ir.PACK, min(p * ir.PACK + ir.PACK, op.cout))) for p in packs]
    kept = [k for k in range(ir.PACK) if channels is None or k in channels]
    # [dy, dx, input pack, in component, out]
    weights = [op.tap_weights(p)[:, :, list(positions)] for p in packs]
    sums = [f"sum{k}" if many else "sum" for k in range(len(packs))]
    vectors = {"u_in_size": ("size", op.input),
               "u_pad": ("pad", op.input, op.size, op.stride, op.padding)}
    parts = stage.reads(op, packs[0]) if stage else []
    samplers += [f"u_part{h}" for h in range(len(parts))]
    bindings += [Binding(f"u_part{h}", *part) for h, part in enumerate(parts)]
    if parts:
        vectors["u_out_size"] = ("size", op.name)
    if op.residual and not partial:
        residuals = [f"u_res{k}" if many else "u_res" for k in range(len(packs))]
        samplers += residuals
        bindings += [Binding(r, op.residual, p) for r, p in zip(residuals, packs)]
        vectors["u_out_size"] = ("size", op.name)
    padded = masked(op.size, op.padding)
    body = coordinates(op.size, glsl_float(op.stride), padded, inline_masks)
    residual = "" if not (op.residual and residual_first and not partial) else \
        " + texture2D({}, gl_FragCoord.xy / u_out_size)"
    starts = [constants.vec4(_kept(op.bias[o], kept)) for o in outs]
    if stage:
        starts = [split.start_glsl(op, stage, start) for start in starts]
    body += [f"    vec4 {s} = {start}{residual.format(residuals[k]) if residual else ''};"
             for k, (s, start) in enumerate(zip(sums, starts))]
    part = "".join("xyzw"[k] for k in kept)
    if order != "chain":
        body += _grouped(op, order, sums, outs, weights, samplers[:len(in_packs)], padded,
                         inline_masks, constants)
    else:
        if many or (channels is not None and not op.luma_input):  # a texel fetched once
            body.append("    float y;" if op.luma_input else "    vec4 t;")
        for dy, dx in _taps(op.size):
            where, mask = f"vec2(x{dx}, y{dy})", (f" * m{dx}_{dy}" if padded else "")
            if padded:
                mx, my = ((f"({inside_mask('x', dx)})", f"({inside_mask('y', dy)})") if inline_masks
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
                body += [f"    {s} += {constants.vec4(op.kernel[dy, dx, 0, o])} * {y};"
                         for s, o in zip(sums, outs)]
                continue
            for j, sampler in enumerate(samplers[:len(in_packs)]):
                # m[i, o]: input component i -> output component o
                products = [(s, w[dy, dx, j]) for s, w in zip(sums, weights)
                            if constants.kept(w[dy, dx, j])]
                pad = padding[j].format(dx=dx, dy=dy) if padded else ""
                texel = f"(texture2D({sampler}, {where}){mask}{pad})"
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
                body += [f"    {s} += {constants.mat4(m)} * {texel};" for s, m in products]
    for k, s in enumerate(sums):
        if partial:
            body.append(f"    gl_FragColor = {split.store_glsl(op, stage, s)};")
            continue
        if op.residual and not residual_first:
            body.append(f"    {s} += texture2D({residuals[k]}, gl_FragCoord.xy / u_out_size);")
        target = f"gl_FragData[{k}]" if many else "gl_FragColor"
        out = activations.glsl(op, s, packs[k])
        if op.storage != "linear":  # the activation, then its companded value
            body.append(f"    {s} = {out};")
            out = storage.ENCODE_GLSL[op.storage].format(x=s)
        body.append(f"    {target} = {out};")
    source = (header(precision, many) + (fixed16.GLSL if parts or partial else "")
              + uniform_declarations(samplers, vectors)
              + constants.declaration() + "void main() {\n" + "\n".join(body) + "\n}\n")
    name = f"{op.name}.{packs[0]}" + (f"-{packs[-1]}" if many else "")
    outputs = [(op.name, p) for p in packs]
    if partial:  # the whole texel of its half's texture
        name += f".s{stage.index}h{stage.half}"
        outputs = [(split.partial_tensor(op, stage.index), 2 * packs[0] + stage.half)]
        channels = None
    if channels is not None:
        name += ".c" + "".join(map(str, channels))
    return Pass(name, op.name, source, bindings, outputs, vectors,
                channels=tuple(channels) if channels is not None else None,
                arrays=constants.arrays())


def _padding_terms(op, logical) -> list[str]:
    """What each input pack's masked tap adds where the padding holds ``pad_value`` (a
    tensor stored with an offset): ``+ pv * (1.0 - m)`` after its ``texel * m`` (exact: m is
    0 or 1); nothing where the padding holds 0."""
    if op.pad_value is None:
        return [""] * len(logical)
    values = np.pad(op.pad_value, (0, ir.PACK * max(logical, default=0) + ir.PACK))
    return [f" + {glsl_vec(values[ir.PACK * p:ir.PACK * p + ir.PACK])} * (1.0 - m{{dx}}_{{dy}})"
            for p in logical]


def _taps(size):
    """The window's taps ``(dy, dx)``, row by row."""
    return [(dy, dx) for dy in range(size) for dx in range(size)]


def _grouped(op, order, sums, outs, weights, samplers, padded, inline_masks,
             constants) -> list[str]:
    """The lines that add the products into ``sums`` in ``order`` (not the chain): a tap's
    group ``(P0 + P1 + ...)`` over its input packs, times its masks where it may lie in the
    padding."""
    def mask(axis, d):
        if not padded:
            return ""
        return f" * ({inside_mask(axis, d)})" if inline_masks else f" * m{axis}{d}"

    lines = []
    for s, o, w in zip(sums, outs, weights):
        def group(dy, dx):
            where = f"vec2(x{dx}, y{dy})"
            if op.luma_input:
                return (f"{constants.vec4(op.kernel[dy, dx, 0, o])} * dot(texture2D("
                        f"{samplers[0]}, {where}).rgb, {glsl_vec(ir.LUMA, 3)})")
            terms = [f"{constants.mat4(w[dy, dx, j])} * texture2D({sampler}, {where})"
                     for j, sampler in enumerate(samplers) if constants.kept(w[dy, dx, j])]
            return " + ".join(terms) or "vec4(0.0)"

        if order == "taps":
            lines += [f"    {s} += ({group(dy, dx)}){mask('x', dx)}{mask('y', dy)};"
                      for dy, dx in _taps(op.size)]
            continue
        for line in range(op.size):
            if order == "rows":
                terms = [f"({group(line, dx)}){mask('x', dx)}" for dx in range(op.size)]
                lines.append(f"    {s} += ({' + '.join(terms)}){mask('y', line)};")
            else:
                terms = [f"({group(dy, line)}){mask('y', dy)}" for dy in range(op.size)]
                lines.append(f"    {s} += ({' + '.join(terms)}){mask('x', line)};")
    return lines


def _kept(values, kept):
    """``values`` (one per output component) with the components not in ``kept`` zeroed."""
    values = np.array(values, np.float32)
    values[[k for k in range(len(values)) if k not in kept]] = 0.0
    return values


def _vec(values, kept):
    """The ``kept`` components of ``values`` as a GLSL float, vec2 or vec3 literal."""
    values = np.pad(np.asarray(values, np.float32), (0, ir.PACK))[list(kept)]
    return glsl_float(values[0]) if len(values) == 1 else glsl_vec(values, len(values))


def passes(op: ir.Conv, shapes, target: Target, channels=None, inline_masks=False,
           order=None, weights="literals", residual_first=None) -> list[Pass]:
    """Its programs for ``target``: runs of up to ``target.draw_buffers`` output packs
    (:func:`programs`).  ``channels``: output channels a program writes (4, 2 or 1; default
    what the target's constant budget allows, :func:`channels_per_program`); under 4, each
    pack is drawn by several programs of that many components each, one target each.
    ``inline_masks``: see :func:`workbench.es2.shaders.coordinates`.  ``order``: how they add
    their products (:data:`ORDERS`), default the op's own (a plain Conv: the chain).
    ``weights="uniforms"``: weights set at each draw (:class:`_Weights`), one pack a
    program, where they fit the limits' uniform vectors (else literals).
    ``residual_first``: see :func:`program`, default the op's own.  A split op
    (:mod:`workbench.es2.ops.split`): its partial stages' programs, then its last stage's as
    these options make them, one pack each."""
    precision, limits = target.precision, target.limits
    order = "chain" if op.pad_value is not None else order or getattr(op, "order", "chain")
    if residual_first is None:
        residual_first = getattr(op, "residual_first", False)
    channels = channels or channels_per_program(op, limits.constant_vectors)
    if weights != "uniforms" or channels < ir.PACK or not _uniforms_fit(op, limits):
        weights = "literals"
    partials, last = [], {}
    if split.count(op) > 1:
        for pack in range(op.out_packs()):
            *stages, last[pack] = split.stage_list(op, pack)
            partials += [program(op, pack, precision, inline_masks=inline_masks, stage=stage)
                         for stage in stages]
    if channels < ir.PACK:
        return partials + [
            program(op, pack, precision, tuple(range(k, k + channels)), inline_masks, order,
                    residual_first=residual_first, stage=last.get(pack))
            for pack in range(op.out_packs()) for k in range(0, ir.PACK, channels)
            if k < op.cout - pack * ir.PACK]
    draw_buffers = target.draw_buffers if weights == "literals" and not last else 1
    return partials + [
        program(op, packs, precision, inline_masks=inline_masks, order=order, weights=weights,
                residual_first=residual_first, stage=last.get(packs[0]))
        for packs in programs(op, draw_buffers, limits.texture_units,
                              limits.fetches_per_fragment)]


def emulate(op: ir.Conv, x, residual=None):
    """Convolution + bias (+ residual) + activation of HxWxC ``x`` (float32, or float16 for
    mediump: the arithmetic follows ``x``'s type), companded by its ``storage`` law, before
    the 8-bit store.

    Summed as the shader sums, in the op's ``order`` (:data:`ORDERS`; a plain Conv: the
    chain): the products are per tap and input pack of 4 channels ``mat4 * vec4`` (its 4
    terms in channel order; a weight 0 where the channel is outside the output's group adds
    exactly 0); a tap in the padding reads zeros, as the shader's masks make it.  The
    residual is added last, or to the bias first (``residual_first``).
    """
    F = np.float16 if np.asarray(x).dtype == np.float16 else F32
    x = np.asarray(x, F)
    if op.luma_input:
        x = luma(x[..., :3])[..., None]
    if op.input_order is not None:  # physical pack order -> logical channel order
        x = np.concatenate([x[..., 4 * p:4 * p + 4] for p in op.input_order], axis=-1)
    x = x[..., :op.cin]
    h, w = x.shape[:2]
    (oh, ow), (pt, pl), k, s = op.out_hw((h, w)), op.pads((h, w)), op.size, op.stride
    padded = np.zeros((max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k),
                       x.shape[2]), F)
    if op.pad_value is not None:  # what the shader's masked taps read (exactly)
        padded[:] = op.pad_value[:x.shape[2]].astype(F)
    padded[pt:pt + h, pl:pl + w] = x
    index, weight = _gathers(op)  # [j, i, o]: input channel, [dy, dx, j, i, o]: its weight
    weight = weight.astype(F)

    def products(dy, dx, positions):  # of the tap's input packs, each output's j-th: mat4 * vec4
        window = padded[dy:dy + (oh - 1) * s + 1:s, dx:dx + (ow - 1) * s + 1:s]
        for j in positions:
            product = window[..., index[j, 0]] * weight[dy, dx, j, 0]
            for i in range(1, ir.PACK):
                product += window[..., index[j, i]] * weight[dy, dx, j, i]
            yield product

    def terms(order, positions):
        if order == "chain":
            return (p for dy, dx in _taps(k) for p in products(dy, dx, positions))
        if order == "taps":
            return (_added(products(dy, dx, positions)) for dy, dx in _taps(k))
        if order == "rows":
            return (_added(_added(products(dy, dx, positions)) for dx in range(k))
                    for dy in range(k))
        return (_added(_added(products(dy, dx, positions)) for dy in range(k)) for dx in range(k))

    *runs, last = split.stages(op) if split.count(op) > 1 else [range(index.shape[0])]
    partial = None  # the stages before, as the next reads them (a split op)
    for run in runs:  # a partial stage: a chain from the sums before, stored in fixed point
        sums = np.zeros((oh, ow, op.cout), F) if partial is None else partial.copy()
        for term in terms("chain", run):
            sums += term
        partial = split.stored(op, sums, F)
    out = np.tile(op.bias.astype(F), (oh, ow, 1))
    if partial is not None:
        out += partial
    first = getattr(op, "residual_first", False)
    if residual is not None and first:
        out += residual[..., :op.cout]
    for term in terms(getattr(op, "order", "chain"), last):
        out += term
    if residual is not None and not first:
        out += residual[..., :op.cout]
    return np.asarray(storage.encode(activations.of(op).np_fn(out), op.storage), F)


def _added(values):
    """The sum of ``values`` left to right, in their float type."""
    values = iter(values)
    total = next(values).copy()
    for v in values:
        total += v
    return total


def _gathers(op: ir.Conv):
    """For every output channel ``o`` at once, what its program multiplies: ``index[j, i, o]``
    the input channel that is component ``i`` of its ``j``-th input pack and ``weight[dy, dx,
    j, i, o]`` its weight (:meth:`workbench.ir.Conv.tap_weights`; 0 past the pack's inputs or
    the channel's group, and for a ``j`` beyond those of its pack, which adds exactly 0)."""
    packs = range(op.out_packs())
    logical = [[0] if op.luma_input else op.logical_packs(p) for p in packs]
    slots = max(map(len, logical))
    index = np.zeros((slots, ir.PACK, op.cout), int)
    weight = np.zeros((op.size, op.size, slots, ir.PACK, op.cout), np.float32)
    for p, firsts in zip(packs, logical):
        outs = range(p * ir.PACK, min(p * ir.PACK + ir.PACK, op.cout))
        w = op.tap_weights(p)
        for j, first in enumerate(firsts):
            for i in range(ir.PACK):
                index[j, i, outs.start:outs.stop] = min(ir.PACK * first + i, op.cin - 1)
            weight[:, :, j, :, outs.start:outs.stop] = w[:, :, j, :, :len(outs)]
    return index, weight


def apply(op: ir.Conv, tensors, arithmetic):
    """The stored output, as the next op fetches it."""
    res = tensors[op.residual] if op.residual else None
    return quantize(emulate(op, tensors[op.input], res), arithmetic)


def check(op: ir.Conv, shapes, limits):
    """The limits of every program of ``op`` (each stage's, where it is split) in its
    one-target form, and 8-bit storage."""
    for need in stage_needs(op):
        _check_need(op, need, limits)
    check_storage(op.name, activations.of(op), limits)


def _check_need(op, need, limits):
    channels, texture_units, texel_fetches = need
    fits(op.name, "input channels sampled per program", channels, limits.channels_per_program,
         limits)
    if limits.sampled_channels:
        fits(op.name, "input channels sampled per output", 3 if op.luma_input else channels,
             limits.sampled_channels[op.size > 1], limits)
    fits(op.name, "texture units", texture_units, limits.texture_units, limits)
    fits(op.name, "texel fetches per fragment", texel_fetches, limits.fetches_per_fragment, limits)


def stage_needs(op: ir.Conv, n=None) -> list[tuple[int, int, int]]:
    """``(input channels sampled, texture units, texel fetches a fragment)`` of a program of
    each of ``n`` stages (default the op's own split; 1: the op whole), one pack a program."""
    n = n or split.count(op)
    needs = []
    for k, run in enumerate(split.stages(op, n)):
        stage = split.Stage(k, n, run, None if k == n - 1 else 0)
        needs.append((min(op.kernel.shape[2], ir.PACK * len(run)), stage.units(op),
                      stage.fetches(op)))
    return needs


def stages_needed(op: ir.Conv, limits) -> int:
    """The fewest stages whose programs fit ``limits`` (with a constant budget: a partial
    stage's at 2 output channels a program, the last stage's at 1); 1 where the op fits
    whole, or where no split fits (its check then names the limit)."""
    for n in range(1, len(split.stages(op, 1)[0]) + 1):
        needs = stage_needs(op, n)
        try:
            for need in needs:
                _check_need(op, need, limits)
        except LimitError:
            continue
        slots = [constant_slots(op, 2, channels) for channels, _, _ in needs[:-1]]
        slots.append(constant_slots(op, 1, needs[-1][0]))
        if limits.constant_vectors is None or max(slots) <= limits.constant_vectors:
            return n
    return 1


def prepare(op: ir.Conv, shapes, limits):
    """``op`` split over the stages its programs need to fit ``limits``
    (:func:`stages_needed`; :mod:`workbench.es2.ops.split`), or ``op`` itself where it fits
    whole."""
    n = stages_needed(op, limits)
    return op if n == 1 else formed(op, split=n)


def fetches(op: ir.Conv, packs) -> int:
    """Texel fetches per fragment of one program writing output packs ``packs`` of ``op``:
    each input pack once per tap (shared by the outputs), plus one residual texel per output;
    a split op's heaviest stage's."""
    if split.count(op) > 1:
        return max(need[2] for need in stage_needs(op))
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return op.size ** 2 * len(inputs) + (len(packs) if op.residual else 0)


def units(op: ir.Conv, packs) -> int:
    """Texture units of one program writing output packs ``packs`` of ``op``."""
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return len(inputs) + (len(packs) if op.residual else 0)


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


def constant_slots(op: ir.Conv, channels, inputs=None) -> int:
    """The vec4 constant slots a program of ``op`` writing ``channels`` output channels needs
    where the compiler keeps literals in the uniform file (Vivante): its weights and biases,
    4 to a slot, plus 8 for the coordinates' constants (measured on etnaviv: the SR net's
    3x3 program of 432 weights took 111 slots, 109 for the weights and biases); ``inputs``:
    the input channels it reads (default all of its group's)."""
    taps = op.size * op.size * (1 if op.luma_input else inputs or op.kernel.shape[2])
    return -(-channels * (taps + 1) // ir.PACK) + 8


def channels_per_program(op: ir.Conv, constant_vectors=None) -> int:
    """Output channels one program of ``op`` writes: 4 (a whole pack), or 2 or 1 when its
    literals would not fit ``constant_vectors`` slots (None: no such budget)."""
    inputs = stage_needs(op)[-1][0]  # the last stage's, where it is split
    for channels in (4, 2, 1):
        if constant_vectors is None or constant_slots(op, channels, inputs) <= constant_vectors:
            return channels
    return 1


def cost(op: ir.Conv, shapes, programs=None) -> Cost:
    """``programs``: output packs per program (:func:`programs`); default one each."""
    h, w, _ = shapes[op.name]
    pixels = h * w
    if split.count(op) > 1:  # every stage's programs, one pack each
        stages = [s for pack in range(op.out_packs()) for s in split.stage_list(op, pack)]
        per_pixel = sum(s.fetches(op) for s in stages)
        return Cost(multiply_adds=pixels * op.kernel.size, texel_fetches=pixels * per_pixel,
                    texture_bytes=pixels * 4 * len(textures(op, shapes)), programs=len(stages))
    programs = programs or [[p] for p in range(op.out_packs())]
    return Cost(multiply_adds=pixels * op.kernel.size,
                texel_fetches=pixels * sum(fetches(op, packs) for packs in programs),
                texture_bytes=pixels * 4 * op.out_packs(),
                programs=len(programs))


def textures(op: ir.Conv, shapes) -> dict:
    """Its output packs, and a split op's partial sums: two RGBA8 textures an output pack
    and partial stage, of the output's size."""
    out = pack_textures(op.name, shapes)
    h, w, _ = shapes[op.name]
    for k in range(split.count(op) - 1):
        out.update({(split.partial_tensor(op, k), i): (w, h, "f1")
                    for i in range(2 * op.out_packs())})
    return out


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
    residual = ("residual_first",) if op.residual else ()
    order = ("order",) if op.pad_value is None else ()  # a padding value: masked per tap
    return ("channels", *masks, *order, *residual, "weights")


RECORD = register(ir.Conv, OpRecord(
    "Conv", passes=passes, apply=apply, check=check, cost=cost, tile=tile, textures=textures,
    check_program=check_program, layer_options=layer_options, prepare=prepare,
    prepared=ConvForm))
