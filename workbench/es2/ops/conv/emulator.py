"""The emulator of :class:`workbench.ir.Conv` (:func:`emulate`): its sums as its programs
add them, stage by stage where it is split (:mod:`workbench.es2.ops.conv.split`), in its
summation order (:mod:`workbench.es2.ops.conv.orders`), before the 8-bit store."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.es2.emulate import F32, luma, quantize
from workbench.es2.ops.conv import split
from workbench.es2.ops.conv.form import LAST, ConvForm, formed
from workbench.es2.ops.conv.orders import emulated_terms, order_of
from workbench.es2.ops.conv.padding import BYTE, copies_luma
from workbench.nets import activations, storage


def emulate(op: ir.Conv, x, residual=None, fast=False):
    """Convolution + bias (+ residual) + activation of HxWxC ``x`` (float32, or float16 for
    mediump: the arithmetic follows ``x``'s type), companded by its ``storage`` law, before
    the 8-bit store.

    ``op``: a :class:`~.form.ConvForm`, or a plain Conv of an IR graph (its default form:
    :func:`~.form.formed`; the emulator runs those too).  Summed as the shader sums, in the
    op's ``order`` (:data:`ORDERS`; a plain Conv: the chain): the products are per tap and
    input pack of 4 channels ``mat4 * vec4`` (its 4 terms in channel order; a weight 0 where
    the channel is outside the output's group adds exactly 0); a tap in the padding reads
    zeros, as the shader's masks make it.  The residual is added after ``residual_after`` of the order's terms (0: to the bias first;
    :data:`~workbench.es2.ops.conv.orders.LAST`: last), as the program adds it.  ``fast``: each
    stage's sums as matrix products instead, in float32 (:func:`_fast_sums`: the same values
    but for the last bits of the sums; a split conv's partial sums still stored in fixed
    point).
    """
    op, F = formed(op), np.float16 if np.asarray(x).dtype == np.float16 else F32
    if residual is not None and op.residual_scale is not None:  # (the shader's fetch * scale)
        residual = np.asarray(residual[..., :op.cout], F) * op.residual_scale.astype(F)
    padded, (oh, ow) = _padded(op, x)
    k, s = op.size, op.stride
    if fast:
        return _fast(op, padded, (oh, ow), residual)
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
    after = op.residual_after if residual is not None else None
    for n, term in enumerate(summed(order_of(op), *last)):
        if n == after:
            out += residual[..., :op.cout]
        out += term
    if after is not None and (after == LAST or after > n):
        out += residual[..., :op.cout]
    return np.asarray(storage.encode(activations.of(op).np_fn(out), op.storage), F)


def _padded(op: ConvForm, x):
    """``(padded input, output (height, width))``: ``x`` (HxWxC, its float type kept) in the
    op's logical channel order (a luma input's luma), in its padding (zeros, or the stored
    value of a real 0 where the op has a ``pad_value``: what the shader's masked taps read)."""
    F = np.float16 if np.asarray(x).dtype == np.float16 else F32
    x = np.asarray(x, F)
    if op.luma_input:
        x = luma(x[..., :3])[..., None]
        if copies_luma(op):
            x = copied_luma(x)
    if op.input_order is not None:  # physical pack order -> logical channel order
        x = np.concatenate([x[..., 4 * p:4 * p + 4] for p in op.input_order], axis=-1)
    x = x[..., :op.cin]
    h, w = x.shape[:2]
    (oh, ow), (pt, pl), k, s = op.out_hw((h, w)), op.pads((h, w)), op.size, op.stride
    padded = np.zeros((max(h + 2 * pt, (oh - 1) * s + k), max(w + 2 * pl, (ow - 1) * s + k),
                       x.shape[2]), F)
    if op.pad_value is not None:
        padded[:] = op.pad_value[:x.shape[2]].astype(F)
    padded[pt:pt + h, pl:pl + w] = x
    return padded, (oh, ow)


def copied_luma(y):
    """A luma input's luma ``y`` (its float type) as its programs read it from the op's own
    copy (:func:`~.padding.copies_luma`, :func:`~.padding.tap_luma`): the copy's ``l = y *
    255`` and ``h = floor(l)``, stored as the bytes of ``h / 255`` and ``l - h``, read back
    ``r + g / 255``."""
    F = y.dtype.type
    arithmetic = "float16" if F is np.float16 else "float32"
    lum = y * F(255)
    whole = np.floor(lum)
    r, g = (quantize(v, arithmetic) for v in (whole * F(BYTE), lum - whole))
    return r + g * F(BYTE)


def partial_bound(op: ir.Conv, x) -> float:
    """The largest sum of magnitudes, over an output's input packs and kernel rows, of their
    products on the input ``x``: a bound of every partial sum any split of ``op`` into stages
    stores (:func:`workbench.es2.ops.conv.split.shift`), measured."""
    padded, (oh, ow) = _padded(formed(op), np.asarray(x, F32))
    kernel, k, s = _dense_kernel(op), op.size, op.stride
    total = np.zeros((oh, ow, op.cout), F32)
    for first in range(0, op.cin, ir.PACK):
        for dy in range(k):
            rows = kernel[dy:dy + 1, :, first:first + ir.PACK]
            window = padded[dy:, :, first:first + ir.PACK]
            total += np.abs(_fast_sums(window, rows, (oh, ow), s))
    return float(total.max())


def _fast(op: ir.Conv, padded, out_hw, residual):
    """:func:`emulate` in float32 as matrix products: each stage's taps (a split op's partial
    sums stored in fixed point as its programs store them), then the bias, the residual and
    the activation."""
    (oh, ow), s = out_hw, op.stride
    kernel = _dense_kernel(op)  # (k, k, cin, cout)
    *partials, last = split.stages(op)
    out = np.tile(op.bias.astype(F32), (oh, ow, 1))
    partial = None
    for run, rows in partials:
        sums = (np.zeros((oh, ow, op.cout), F32) if partial is None else partial) + \
            _fast_sums(padded, kernel * _stage_mask(op, run, rows), (oh, ow), s)
        partial = split.stored(op, sums, F32)
    if partial is not None:
        out += partial
    out += _fast_sums(padded, kernel * _stage_mask(op, *last), (oh, ow), s)
    if residual is not None:
        out += residual[..., :op.cout]
    return np.asarray(storage.encode(activations.of(op).np_fn(out), op.storage), F32)


def _fast_sums(padded, kernel, out_hw, stride):
    """``sum over taps of window @ kernel[dy, dx]``, float32 (taps of zeros skipped)."""
    (oh, ow), (kh, kw) = out_hw, kernel.shape[:2]
    sums = np.zeros((oh, ow, kernel.shape[3]), F32)
    for dy in range(kh):
        for dx in range(kw):
            if np.any(kernel[dy, dx]):
                window = padded[dy:dy + (oh - 1) * stride + 1:stride,
                                dx:dx + (ow - 1) * stride + 1:stride]
                sums += window @ kernel[dy, dx]
    return sums


def _dense_kernel(op: ir.Conv) -> np.ndarray:
    """``op``'s kernel over all its input channels, ``(k, k, cin, cout)``, 0 outside each
    output's group."""
    kernel = np.zeros((op.size, op.size, op.cin, op.cout), F32)
    cin_g = op.kernel.shape[2]
    for o in range(op.cout):
        group = op.in_group(o)
        kernel[:, :, group.start:group.start + cin_g, o] = op.kernel[:, :, :, o]
    return kernel


def _stage_mask(op: ir.Conv, positions, rows) -> np.ndarray:
    """``(k, 1, cin, cout)``: 1 where a stage of ``positions`` (of each output pack's input
    packs) and kernel ``rows`` multiplies input channel ``c`` into output ``o``."""
    mask = np.zeros((op.size, 1, op.cin, op.cout), F32)
    for p in range(op.out_packs()):
        logical = [0] if op.luma_input else op.logical_packs(p)
        outs = slice(p * ir.PACK, min(p * ir.PACK + ir.PACK, op.cout))
        for j in positions:
            if j < len(logical):
                first = ir.PACK * logical[j]
                mask[list(rows), 0, first:first + ir.PACK, outs] = 1
    return mask


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
