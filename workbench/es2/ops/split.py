"""A convolution too wide for one ES 2.0 program, split over its input packs.

Where one program of a :class:`workbench.ir.Conv` would need more texel fetches, texture
units or sampled channels than the target allows (a 3x3 conv over 32 channels: 72 fetches,
the ES 2.0 budget is 64), :func:`stages_needed` splits each output pack's input packs into
``n`` runs ("stages", :func:`stages`).  Stage ``k < n - 1`` adds its run's products to the
partial sums of the stages before it (no bias) and stores them in 16-bit fixed point
(:mod:`workbench.es2.fixed16`, two values a texel) scaled by ``2**shift``: channels 0-1 of
output pack ``p`` in texture ``2p`` of tensor ``{layer}/partial{k}``, channels 2-3 in
``2p + 1`` (one program each).  The last stage starts from the bias plus the decoded partial
sums, adds its own products, then the residual and the activation as an unsplit program.

The inputs are 8-bit levels in [0, 1], so a partial sum lies between minus the sum of an
output's negative weights and the sum of its positive ones: :func:`shift` keeps that bound
under 128, so a partial sum never saturates, at a resolution of ``2**-(8 + shift)``.  The
emulator follows every stage's float arithmetic and fixed-point store exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.emulate import load, store
from workbench.es2.limits import LimitError, fits
from workbench.glsl_text import glsl_float

HALVES = ("xy", "zw")  # the components a partial-sum texture holds: 2 values a texel


@dataclass(frozen=True)
class Stage:
    """One program's share of a split convolution: the positions (in the list of input packs
    an output pack reads) of its run, its index among ``count`` stages and, for a stage that
    writes partial sums, the ``half`` of the output pack it writes (0: channels 0-1)."""
    index: int
    count: int
    positions: tuple[int, ...]
    half: int | None = None

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    @property
    def components(self) -> tuple[int, ...] | None:
        """The output components a partial stage computes (None: the last stage, all)."""
        return None if self.half is None else (2 * self.half, 2 * self.half + 1)

    def units(self, op) -> int:
        """Texture units of its program: its run's input packs, the partial sums it starts
        from and, in the last stage, the residual."""
        return len(self.positions) + _extra_inputs(self, bool(op.residual))

    def fetches(self, op) -> int:
        """Texel fetches a fragment of its program: each input pack of its run once a tap,
        one texel of each partial-sum texture and of the residual."""
        return op.size ** 2 * len(self.positions) + _extra_inputs(self, bool(op.residual))

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
    """The stages of ``op``: its ``split`` (1 for an op compiled whole)."""
    return getattr(op, "split", 1)


def stages(op, n=None) -> list[tuple[int, ...]]:
    """The positions each of ``n`` stages (default :func:`count`) reads: consecutive runs of
    the output pack's input packs, the longer runs first."""
    n = n or count(op)
    total = 1 if op.luma_input else max(len(op.logical_packs(p)) for p in range(op.out_packs()))
    size, extra = divmod(total, n)
    out, first = [], 0
    for k in range(n):
        length = size + (k < extra)
        out.append(tuple(range(first, first + length)))
        first += length
    return out


def stage_list(op, pack) -> list[Stage]:
    """The programs of output pack ``pack`` of a split ``op`` in order: each partial stage's
    halves (only those the pack's channels reach), then the last stage."""
    runs, n = stages(op), count(op)
    halves = [h for h in range(2) if 2 * h < op.cout - pack * ir.PACK]
    return ([Stage(k, n, runs[k], h) for k in range(n - 1) for h in halves]
            + [Stage(n - 1, n, runs[-1])])


def _extra_inputs(stage: Stage, residual: bool) -> int:
    """Texture units (and fetches a fragment) a stage needs beyond its input packs: the
    partial sums it starts from, and the residual in the last stage."""
    return (0 if stage.index == 0 else (1 if stage.half is not None else 2)) \
        + (1 if stage.last and residual else 0)


def shift(op) -> int:
    """The power of 2 the partial sums are stored times: the largest that keeps every
    output's bound (inputs in [0, 1]: the sum of its positive, or of its negative, weights
    over all taps and inputs) under 127, at most 15."""
    w = op.kernel.reshape(-1, op.cout).astype(np.float64)
    bound = max(float(np.maximum(w, 0).sum(0).max()), float(np.maximum(-w, 0).sum(0).max()),
                2.0 ** -15)
    return int(min(15, np.floor(np.log2(127.0 / bound))))


def start_glsl(op, stage: Stage, bias: str) -> str:
    """The initial value of a stage's ``vec4`` sum: a partial stage's the partial sums before
    it in its half's components (zero for the first), the last stage's ``bias`` plus them."""
    def fetched(h):
        return f"dec2(texture2D(u_part{h}, gl_FragCoord.xy / u_out_size))"

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
    scaled = sums * dtype(2.0 ** shift(op))
    levels = store(fixed16.glsl_enc(scaled))
    return (fixed16.glsl_dec(load(levels, arithmetic)) * dtype(2.0 ** -shift(op))).astype(dtype)


def stage_needs(op, n=None) -> list[tuple[int, int, int]]:
    """``(input channels sampled, texture units, texel fetches a fragment)`` of a program of
    each of ``n`` stages (default the op's own split; 1: the op whole), one pack a program."""
    n = n or count(op)
    needs = []
    for k, run in enumerate(stages(op, n)):
        stage = Stage(k, n, run, None if k == n - 1 else 0)
        needs.append((min(op.kernel.shape[2], ir.PACK * len(run)), stage.units(op),
                      stage.fetches(op)))
    return needs


def check_need(op, need, limits):
    """A program's ``need`` (one of :func:`stage_needs`) against ``limits``:
    :class:`~workbench.es2.limits.LimitError` naming the limit it exceeds."""
    channels, texture_units, texel_fetches = need
    fits(op.name, "input channels sampled per program", channels, limits.channels_per_program,
         limits)
    if limits.sampled_channels:
        fits(op.name, "input channels sampled per output", 3 if op.luma_input else channels,
             limits.sampled_channels[op.size > 1], limits)
    fits(op.name, "texture units", texture_units, limits.texture_units, limits)
    fits(op.name, "texel fetches per fragment", texel_fetches, limits.fetches_per_fragment, limits)


def stages_needed(op, limits) -> int:
    """The fewest stages whose programs fit ``limits`` (with a constant budget: a partial
    stage's at 2 output channels a program, the last stage's at 1); 1 where the op fits
    whole, or where no split fits (its check then names the limit)."""
    for n in range(1, len(stages(op, 1)[0]) + 1):
        needs = stage_needs(op, n)
        try:
            for need in needs:
                check_need(op, need, limits)
        except LimitError:
            continue
        slots = [constant_slots(op, 2, channels) for channels, _, _ in needs[:-1]]
        slots.append(constant_slots(op, 1, needs[-1][0]))
        if limits.constant_vectors is None or max(slots) <= limits.constant_vectors:
            return n
    return 1


def constant_slots(op, channels, inputs=None) -> int:
    """The vec4 constant slots a program of ``op`` writing ``channels`` output channels needs
    where the compiler keeps literals in the uniform file (Vivante): its weights and biases,
    4 to a slot, plus 8 for the coordinates' constants (measured on etnaviv: the SR net's
    3x3 program of 432 weights took 111 slots, 109 for the weights and biases); ``inputs``:
    the input channels it reads (default all of its group's)."""
    taps = op.size * op.size * (1 if op.luma_input else inputs or op.kernel.shape[2])
    return -(-channels * (taps + 1) // ir.PACK) + 8
