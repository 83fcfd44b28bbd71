"""A convolution too wide for one ES 2.0 program, split over its input packs (and rows).

Where one program of a :class:`workbench.ir.Conv` would need more texel fetches, texture
units or sampled channels than the target allows (a 3x3 conv over 32 channels: 72 fetches,
the ES 2.0 budget is 64), :func:`stages_needed` splits each output pack's input packs into
runs and, where even one input pack a program is too many (a 9x9 window: 81 fetches), each
run's kernel rows into bands: a stage (:func:`stages`) is one run's taps in one band of rows,
``n`` stages in all.  Stage ``k < n - 1`` adds its products (a chain) to the partial sums
of the stages before it (no bias) and stores them in 16-bit fixed point
(:mod:`workbench.es2.fixed16`, two values a texel) scaled by ``2**shift``: channels 0-1 of
output pack ``p`` in texture ``2p`` of tensor ``{layer}/partial{k}``, channels 2-3 in
``2p + 1`` (one program each).  The last stage starts from the bias plus the decoded partial
sums, adds its own products, then the residual and the activation as an unsplit program
(in the op's summation order; a chain where its rows are split).

The inputs are 8-bit levels in [0, 1], so a partial sum lies between minus the sum of an
output's negative weights and the sum of its positive ones: :func:`shift` keeps that bound
under 128, so a partial sum never saturates, at a resolution of ``2**-(8 + shift)``.  The
emulator follows every stage's float arithmetic and fixed-point store exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.limits import LimitError, fits
from workbench.glsl_text import glsl_float

HALVES = ("xy", "zw")  # the components a partial-sum texture holds: 2 values a texel


@dataclass(frozen=True)
class Stage:
    """One program's share of a split convolution: the positions (in the list of input packs
    an output pack reads) of its run, the kernel ``rows`` (``dy``) of its taps, its index
    among ``count`` stages and, for a stage that writes partial sums, the ``half`` of the
    output pack it writes (0: channels 0-1)."""
    index: int
    count: int
    positions: tuple[int, ...]
    rows: tuple[int, ...]
    half: int | None = None

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    @property
    def components(self) -> tuple[int, ...] | None:
        """The output components a partial stage computes (None: the last stage, all)."""
        return None if self.half is None else (2 * self.half, 2 * self.half + 1)

    def units(self, op) -> int:
        """Texture units of its program: its run's input packs' textures, the partial sums it
        starts from and, in the last stage, the residual's."""
        return len(self.positions) * op.textures_a_pack("input") \
            + _extra_inputs(self, op)

    def fetches(self, op) -> int:
        """Texel fetches a fragment of its program: each input pack's textures once a tap,
        one texel of each partial-sum texture and of the residual's."""
        return self.taps(op) * len(self.positions) * op.textures_a_pack("input") \
            + _extra_inputs(self, op)

    def taps(self, op) -> int:
        """Taps of its window: its rows' columns."""
        return op.size * len(self.rows)

    def channels(self, op) -> int:
        """Input channels its program samples."""
        return min(op.kernel.shape[2], ir.PACK * len(self.positions))

    def reads(self, op, pack) -> list[tuple[str, int]]:
        """The partial-sum textures the stage starts from: none for the first."""
        if self.index == 0:
            return []
        tensor = partial_tensor(op, self.index - 1)
        halves = [self.half] if self.half is not None else [0, 1]
        return [(tensor, 2 * pack + h) for h in halves]


def partial_tensor(op, index) -> str:
    return f"{op.name}/partial{index}"


def count(op) -> int:
    """The stages of ``op``: its ``split`` times its ``row_split`` (1 for an op compiled
    whole)."""
    return op.split * op.row_split


def runs(total, n) -> list[tuple[int, ...]]:
    """``range(total)`` in ``n`` consecutive runs, the longer runs first."""
    size, extra = divmod(total, n)
    out, first = [], 0
    for k in range(n):
        length = size + (k < extra)
        out.append(tuple(range(first, first + length)))
        first += length
    return out


def stages(op, split=None, row_split=None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``(positions, rows)`` of each stage in order: the output pack's input packs in
    ``split`` runs (default the op's own), each run's kernel rows in ``row_split`` bands
    (default the op's own), the run's bands one after the other."""
    split, row_split = split or op.split, row_split or op.row_split
    return [(run, rows) for run in runs(packs_per_output(op), split)
            for rows in runs(op.size, row_split)]


def packs_per_output(op) -> int:
    """The input packs an output pack reads (the most of any)."""
    return 1 if op.luma_input else max(len(op.logical_packs(p)) for p in range(op.out_packs()))


def stage_list(op, pack) -> list[Stage]:
    """The programs of output pack ``pack`` of a split ``op`` in order: each partial stage's
    halves (only those the pack's channels reach), then the last stage."""
    *partials, last = programs(op)
    return [replace(stage, half=h) for stage in partials for h in halves(op, pack)] + [last]


def halves(op, pack) -> list[int]:
    """The halves of output pack ``pack`` (0: channels 0-1) that hold channels of ``op``."""
    return [h for h in range(2) if 2 * h < op.cout - pack * ir.PACK]


def _extra_inputs(stage: Stage, op) -> int:
    """Texture units (and fetches a fragment) a stage needs beyond its input packs: the
    partial sums it starts from, and the residual's textures in the last stage."""
    residual = op.textures_a_pack("residual") if stage.last and op.residual else 0
    return (0 if stage.index == 0 else (1 if stage.half is not None else 2)) + residual


def shift(op) -> int:
    """The power of 2 the partial sums are stored times: the largest that keeps their bound
    under 127, at most 15: :func:`weight_bound`, or where a calibration measured a lower one
    (``partial_bound``, :func:`workbench.es2.ops.conv.measured`), that."""
    bound = min(weight_bound(op), op.partial_bound or np.inf)
    return int(min(15, np.floor(np.log2(127.0 / max(bound, 2.0 ** -15)))))


def weight_bound(op) -> float:
    """A bound of every partial sum whatever the input (in [0, 1]): an output's sum of its
    positive, or of its negative, weights over all taps and inputs, the larger."""
    w = op.kernel.reshape(-1, op.cout).astype(np.float64)
    return max(float(np.maximum(w, 0).sum(0).max()), float(np.maximum(-w, 0).sum(0).max()))


def start_glsl(op, stage: Stage, bias: str, texel: str) -> str:
    """The initial value of a stage's ``vec4`` sum: a partial stage's the partial sums before
    it in its half's components (zero for the first), the last stage's ``bias`` plus them;
    ``texel``: GLSL for the coordinates of this fragment's texel in the partial sums."""
    def fetched(h):
        return f"dec2(texture2D(u_part{h}, {texel}))"

    scale = glsl_float(2.0 ** -shift(op))
    if stage.half is not None:
        if stage.index == 0:
            return "vec4(0.0)"
        value = f"{fetched(0)} * {scale}"
        return f"vec4({value}, 0.0, 0.0)" if stage.half == 0 else f"vec4(0.0, 0.0, {value})"
    if stage.index == 0:
        return bias
    return f"{bias} + vec4({fetched(0)}, {fetched(1)}) * {scale}"


def store_glsl(op, stage: Stage, sum_name: str) -> str:
    """The colour a partial stage writes: its half's sums, scaled and encoded."""
    return f"enc2({sum_name}.{HALVES[stage.half]} * {glsl_float(2.0 ** shift(op))})"


def stored(op, sums, dtype):
    """Partial sums ``sums`` (H x W x cout, in the emulator's float type) as the next stage
    reads them back: scaled, encoded as the shader's ``enc2`` does, stored in RGBA8, fetched
    and decoded as its ``dec2`` does, unscaled (exact powers of 2)."""
    arithmetic = "float16" if dtype == np.float16 else "float32"
    return fixed16.round_trip(np.asarray(sums, dtype), shift(op), arithmetic)


def programs(op, split=None, row_split=None) -> list[Stage]:
    """One program of each stage (:func:`stages`; default the op's own split; 1, 1: the op
    whole), of one output pack (a partial stage's first half): what the limits check."""
    *partials, last = stages(op, split, row_split)
    n = len(partials) + 1
    return [Stage(k, n, *partial, 0) for k, partial in enumerate(partials)] + [
        Stage(n - 1, n, *last)]


def check_stage(op, stage: Stage, limits):
    """A program of ``stage`` (one of :func:`programs`) against ``limits``:
    :class:`~workbench.es2.limits.LimitError` naming the limit it exceeds."""
    channels = stage.channels(op)
    fits(op.name, "input channels sampled per program", channels, limits.channels_per_program,
         limits)
    if limits.sampled_channels:
        fits(op.name, "input channels sampled per output", 3 if op.luma_input else channels,
             limits.sampled_channels[op.size > 1], limits)
    fits(op.name, "texture units", stage.units(op), limits.texture_units, limits)
    fits(op.name, "texel fetches per fragment", stage.fetches(op), limits.fetches_per_fragment,
         limits)


def stages_needed(op, limits) -> tuple[int, int]:
    """``(split, row_split)``: the fewest runs of input packs whose stages fit ``limits``
    (with a constant budget: a partial stage's program at 2 output channels, the last
    stage's at 1); where even one input pack a stage does not fit, the fewest stages in all
    with the kernel's rows split as well (fewer bands of rows first); ``(1, 1)`` where the op
    fits whole, or where no split fits (its check then names the limit)."""
    packs = packs_per_output(op)
    splits = [(n, 1) for n in range(1, packs + 1)] + sorted(
        ((n, r) for n in range(1, packs + 1) for r in range(2, op.size + 1)),
        key=lambda nr: (nr[0] * nr[1], nr[1]))
    for n, r in splits:
        stage_programs = programs(op, n, r)
        try:
            for stage in stage_programs:
                check_stage(op, stage, limits)
        except LimitError:
            continue
        slots = [constant_slots(op, 1 if stage.last else 2, stage) for stage in stage_programs]
        if limits.constant_vectors is None or max(slots) <= limits.constant_vectors:
            return n, r
    return 1, 1


def finer_rows(op, row_split=None) -> int | None:
    """The next ``row_split`` of ``op`` (from ``row_split``, default its own) that narrows
    its widest band of kernel rows, where its stages hold one input pack each (or it has
    one); None where they hold more, or one row each."""
    now = row_split or op.row_split
    if op.split < packs_per_output(op):
        return None
    widest = -(-op.size // now)
    return next((r for r in range(now + 1, op.size + 1) if -(-op.size // r) < widest), None)


def constant_slots(op, channels, stage=None) -> int:
    """The vec4 constant slots a program of ``op`` writing ``channels`` output channels needs
    where the compiler keeps literals in the uniform file (Vivante): its weights and biases,
    4 to a slot, plus 8 for the coordinates' constants (measured on etnaviv: the SR net's
    3x3 program of 432 weights took 111 slots, 109 for the weights and biases); ``stage``:
    a program of that stage (its input channels and rows; default all of its group's)."""
    taps = stage.taps(op) if stage else op.size * op.size
    inputs = stage.channels(op) if stage else op.kernel.shape[2]
    taps *= 1 if op.luma_input else inputs
    return -(-channels * (taps + 1) // ir.PACK) + 8
