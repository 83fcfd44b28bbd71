"""How a convolution's program adds its products (``mat4 * vec4``, one an input pack and tap;
a tap's group is the sum of its packs' products, left to right): :data:`ORDERS`, their GLSL
(:func:`chain`, :func:`grouped`) and the emulator's terms in each (:func:`emulated_terms`).
The arithmetic is the same, the float rounding follows the order; a
compiler schedules each differently, so :func:`workbench.es2.drivers.tune` keeps the one the
target's compiler runs fastest."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import ir
from workbench.es2.ops.conv.form import LAST
from workbench.es2.ops.conv.padding import (axis_mask, tap_luma, tap_mask, unit_columns,
                                             unit_mask)
from workbench.glsl_text import glsl_float, glsl_vec


ORDERS = {
    "chain": "the bias, then every product in turn (tap by tap, row by row; pack by pack)",
    "taps": "the bias, then each tap's group in turn",
    "rows": "the bias, then each row of taps: its groups summed left to right",
    "columns": "the bias, then each column of taps: its groups summed top to bottom",
}


@dataclass(frozen=True)
class Products:
    """What a program's sums add: ``sums`` (their GLSL names, one an output pack), ``outs``
    (each one's output channels), ``weights`` (each one's ``[dy, dx, input pack, in, out]``),
    ``fetches`` (each input pack's texel at GLSL coordinates, a function of them),
    ``present`` (the components each input pack has, :meth:`Weights.product`),
    ``constants`` (how the weights are spelled, :class:`~.weights.Weights`) and ``padding``
    (what each input pack's masked tap adds, :func:`~.padding.padding_terms`)."""
    sums: list
    outs: list
    weights: list
    fetches: list
    present: list
    constants: object
    padding: list


@dataclass(frozen=True)
class Masks:
    """A program's taps' masks: ``padded`` where a tap may lie in the padding (masked),
    ``inline`` (:func:`workbench.es2.shaders.coordinates`), ``unit`` (:func:`~.padding.unit_mask`
    where none may and the order groups its taps: on the columns
    :func:`~.padding.unit_columns` names)."""
    padded: bool
    inline: bool = False
    unit: bool | str = False


def taps(size, rows=None):
    """The window's taps ``(dy, dx)``, row by row (``rows``: only those rows)."""
    return [(dy, dx) for dy in (range(size) if rows is None else rows) for dx in range(size)]


def grouped(op, order, products: Products, masks: Masks) -> list[str]:
    """The lines that add the ``products`` into their sums in ``order`` (not the chain): a
    tap's group ``(P0 + P1 + ...)`` over its input packs, times its masks where it may lie in
    the padding (a luma input's tap: its scalar luma times the tap's own mask, a multiply
    instead of four; 0 or 1, so exact either way), or, ``masks.unit`` where none may, times
    its column's :func:`~workbench.es2.ops.conv.padding.unit_mask` where the column's mask
    would be."""
    sums, outs, weights, fetches = products.sums, products.outs, products.weights, \
        products.fetches
    present, constants = products.present, products.constants
    padded, inline_masks, unit_masks = masks.padded, masks.inline, masks.unit

    def mask(axis, d):
        if padded:
            return f" * {axis_mask(axis, d, inline_masks)}"
        units = axis == "x" and d in unit_columns(op.size, unit_masks)
        return f" * {unit_mask(f'x{d}')}" if units else ""

    lines = []
    for s, o, w in zip(sums, outs, weights):
        def group(dy, dx, own=""):  # ``own``: the tap's mask, where it is the tap's alone
            where = f"vec2(x{dx}, y{dy})"
            if op.luma_input:
                return (f"({constants.vec4(op.kernel[dy, dx, 0, o])} * ("
                        f"{tap_luma(op, fetches[0](where))}{own}))")
            terms = [constants.product(w[dy, dx, j], fetch(where), present[j])
                     for j, fetch in enumerate(fetches) if constants.kept(w[dy, dx, j])]
            return f"({' + '.join(terms) or 'vec4(0.0)'}){own}"

        if order == "taps":
            lines += [f"    {s} += {group(dy, dx, mask('x', dx) + mask('y', dy))};"
                      for dy, dx in taps(op.size)]
            continue
        for line in range(op.size):
            if order == "rows":
                terms = [group(line, dx, mask("x", dx)) for dx in range(op.size)]
                lines.append(f"    {s} += ({' + '.join(terms)}){mask('y', line)};")
            else:
                terms = [group(dy, line, mask("y", dy)) for dy in range(op.size)]
                lines.append(f"    {s} += ({' + '.join(terms)}){mask('x', line)};")
    return lines


def chain(op, products: Products, masks: Masks, channels=None, rows=None) -> list[str]:
    """The lines that add the ``products`` into their sums in a chain, tap by tap and, in a
    tap, input pack by input pack, times the tap's mask and plus its padding term where it
    may lie in the padding; ``channels``: a program that writes only these components of its
    one pack (the kept rows of each ``mat4 * t``); ``rows``: only the taps of these kernel
    rows (a stage of a row split, :mod:`workbench.es2.ops.conv.split`)."""
    sums, outs, weights, fetches = products.sums, products.outs, products.weights, \
        products.fetches
    present, constants, padding = products.present, products.constants, products.padding
    padded, inline_masks = masks.padded, masks.inline
    many = len(sums) > 1
    kept = [k for k in range(ir.PACK) if channels is None or k in channels]
    part = "".join("xyzw"[k] for k in kept)
    lines = []
    if many or (channels is not None and not op.luma_input):  # a texel fetched once
        lines.append("    float y;" if op.luma_input else "    vec4 t;")
    for dy, dx in taps(op.size, rows):
        where, mask = f"vec2(x{dx}, y{dy})", (f" * m{dx}_{dy}" if padded else "")
        if padded:
            lines.append(tap_mask(dx, dy, inline_masks))
        if op.luma_input:
            y = f"({tap_luma(op, fetches[0](where))}{mask})"
            if many:
                lines.append(f"    y = {y};")
                y = "y"
            if channels is not None:
                lines.append(f"    sum.{part} += {_vec(op.kernel[dy, dx, 0, outs[0]], kept)}"
                             f" * {y};")
                continue
            lines += [f"    {s} += {constants.vec4(op.kernel[dy, dx, 0, o])} * {y};"
                      for s, o in zip(sums, outs)]
            continue
        for j, fetch in enumerate(fetches):
            # m[i, o]: input component i -> output component o
            products = [(s, w[dy, dx, j]) for s, w in zip(sums, weights)
                        if constants.kept(w[dy, dx, j])]
            pad = padding[j].format(dx=dx, dy=dy) if padded else ""
            texel = f"({fetch(where)}{mask}{pad})"
            if channels is not None:  # the kept rows of mat4 * t, summed in its order
                if products:
                    m = products[0][1]
                    lines.append(f"    t = {texel};")
                    terms = [f"{_vec(m[i], kept)} * t.{'xyzw'[i]}" for i in range(ir.PACK)
                             if np.any(m[i, kept])]
                    lines.append(f"    sum.{part} += {' + '.join(terms)};")
                continue
            if len(products) > 1:
                lines.append(f"    t = {texel};")
                texel = "t"
            lines += [f"    {s} += {constants.product(m, texel, present[j])};"
                      for s, m in products]
    return lines


def _vec(values, kept):
    """The ``kept`` components of ``values`` as a GLSL float, vec2 or vec3 literal."""
    values = np.pad(np.asarray(values, np.float32), (0, ir.PACK))[list(kept)]
    return glsl_float(values[0]) if len(values) == 1 else glsl_vec(values, len(values))


def emulated_terms(order, size, products, rows=None):
    """The emulator's terms in ``order``, each added to the sum in turn: ``products(dy, dx)``
    yields the products of a tap, one an input pack; ``rows``: a chain over only the taps of
    these kernel rows."""
    if order == "chain":
        return (p for dy, dx in taps(size, rows) for p in products(dy, dx))
    if rows is not None:
        raise ValueError(f"order {order!r}: a stage of split rows adds its products in a chain")
    if order == "taps":
        return (added(products(dy, dx)) for dy, dx in taps(size))
    if order == "rows":
        return (added(added(products(dy, dx)) for dx in range(size)) for dy in range(size))
    return (added(added(products(dy, dx)) for dy in range(size)) for dx in range(size))


def added(values):
    """The sum of ``values`` left to right, in their float type."""
    values = iter(values)
    total = next(values).copy()
    for v in values:
        total += v
    return total


def places_residual(order, after) -> bool:
    """Whether a program adding its products in ``order`` may add its residual after ``after``
    of its terms: a chain first or last only (its lines skip a pack whose weights are all
    zero, the emulator's terms do not)."""
    return order != "chain" or after in (0, LAST)


def chained(op) -> bool:
    """Its programs add their products in a chain, whatever the order asked: where its
    padding holds a value (masked per tap) or its kernel rows are split over stages."""
    return op.pad_value is not None or op.row_split > 1


def order_of(op) -> str:
    """How its (last stage's) programs add their products: its ``order``, or a chain
    (:func:`chained`)."""
    return "chain" if chained(op) else op.order
