"""The emulator of :class:`workbench.ir.Conv` (:func:`emulate`): its sums as its programs
add them, stage by stage where it is split (:mod:`workbench.es2.ops.split`), in its
summation order (:mod:`workbench.es2.ops.orders`), before the 8-bit store."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.emulate import F32, luma
from workbench.es2.ops import split
from workbench.es2.ops.orders import LAST, emulated_terms, order_of
from workbench.nets import activations, storage


def emulate(op: ir.Conv, x, residual=None):
    """Convolution + bias (+ residual) + activation of HxWxC ``x`` (float32, or float16 for
    mediump: the arithmetic follows ``x``'s type), companded by its ``storage`` law, before
    the 8-bit store.

    Summed as the shader sums, in the op's ``order`` (:data:`ORDERS`; a plain Conv: the
    chain): the products are per tap and input pack of 4 channels ``mat4 * vec4`` (its 4
    terms in channel order; a weight 0 where the channel is outside the output's group adds
    exactly 0); a tap in the padding reads zeros, as the shader's masks make it.  The
    residual is added after ``residual_after`` of the order's terms (0: to the bias first;
    :data:`~workbench.es2.ops.orders.LAST`: last), as the program adds it.
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

    def summed(order, positions, rows):  # the terms in ``order``, each added to the sum in turn
        return emulated_terms(order, k, lambda dy, dx: products(dy, dx, positions),
                              None if len(rows) == k else rows)

    *partials, last = split.stages(op)
    partial = None  # the stages before, as the next reads them (a split op)
    for run, rows in partials:  # a partial stage: a chain from the sums before, in fixed point
        sums = np.zeros((oh, ow, op.cout), F) if partial is None else partial.copy()
        for term in summed("chain", run, rows):
            sums += term
        partial = split.stored(op, sums, F)
    out = np.tile(op.bias.astype(F), (oh, ow, 1))
    if partial is not None:
        out += partial
    after = getattr(op, "residual_after", LAST) if residual is not None else None
    for n, term in enumerate(summed(order_of(op), *last)):
        if n == after:
            out += residual[..., :op.cout]
        out += term
    if after is not None and (after == LAST or after > n):
        out += residual[..., :op.cout]
    return np.asarray(storage.encode(activations.of(op).np_fn(out), op.storage), F)


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
