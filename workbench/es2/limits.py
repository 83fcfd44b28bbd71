"""The OpenGL ES 2.0 limits a net must fit, in one table, and the checker that enforces them.

Mesa (llvmpipe) does not enforce these: it offers 32 texture units and allows dynamic
indexing and while loops.  So the workbench checks every model itself before generating
shaders, and the test suite validates the shaders with glslangValidator.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.es2 import fixed16
from workbench.ir import PACK, Conv, Dense, DepthToSpace
from workbench.nets import activations


@dataclass(frozen=True)
class Limits:
    texture_units: int = 8            # samplers one fragment shader may use
    fetches_per_fragment: int = 64    # texture2D calls per fragment (VideoCore IV budget)
    outputs_per_program: int = 4      # one RGBA target, no MRT (MaxDrawBuffers = 1)
    storage: str = "RGBA8"            # activations stored as 8-bit in [0, 1]
    storage_range: tuple = (0.0, 1.0)
    dynamic_indexing: bool = False    # only constant or loop-index expressions as indices
    constant_loop_bounds: bool = True  # for loops with constant bounds; no while/do

    @property
    def channels_per_program(self):
        """Input channels one program can sample: one RGBA texture per texture unit."""
        return self.texture_units * PACK


ES2 = Limits()


class LimitError(ValueError):
    """A net that breaks an ES 2.0 limit; names the layer, the limit and the value."""


def check(graph, limits: Limits = ES2):
    """Raise :class:`LimitError` for the first op of ``graph`` that breaks a limit."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    for op in graph.ops:
        CHECKS[type(op)](op, shapes, limits)


def _fits(layer, limit, value, maximum):
    if value > maximum:
        raise LimitError(f"layer {layer!r}: {limit} = {value} exceeds the ES 2.0 limit of {maximum}")


def _check_storage(op, limits):
    rng = activations.get(op.activation).output_range
    if rng is None or rng[0] < limits.storage_range[0] or rng[1] > limits.storage_range[1]:
        raise LimitError(f"layer {op.name!r}: activation {op.activation!r} does not keep the "
                         f"output in {limits.storage_range}, the range of {limits.storage} "
                         "storage; add a bounded activation")


def _check_dense(op, shapes, limits):
    _fits(op.name, "texture units", op.block + 1, limits.texture_units)
    _fits(op.name, "texel fetches per fragment", op.fetches_per_fragment(shapes),
          limits.fetches_per_fragment)
    if op.number == "fixed16":
        fixed16.check(op.bias, op.name, "the bias")


def _check_depth_to_space(op, shapes, limits):
    for pack in range(op.out_packs(shapes)):
        _fits(op.name, "texel fetches per fragment", op.fetches_per_fragment(shapes, pack),
              limits.fetches_per_fragment)


def _check_conv(op, shapes, limits):
    cin_g, cout_g = op.kernel.shape[2], op.cout // op.groups
    _fits(op.name, "input channels sampled per program", cin_g, limits.channels_per_program)
    if op.groups > 1 and (cin_g % PACK or cout_g % PACK):
        raise LimitError(f"layer {op.name!r}: with groups={op.groups} each group must read and "
                         f"write whole RGBA packs of {PACK} channels; it reads {cin_g} and writes "
                         f"{cout_g}")
    for pack in range(op.out_packs()):
        units = len(op.input_packs(pack)) + (1 if op.residual else 0)
        _fits(op.name, "texture units", units, limits.texture_units)
        _fits(op.name, "texel fetches per fragment", op.fetches_per_fragment(pack),
              limits.fetches_per_fragment)
    _check_storage(op, limits)


# One entry per IR op: ``op type -> check(op, shapes, limits)`` (raises LimitError).
CHECKS = {Conv: _check_conv, DepthToSpace: _check_depth_to_space, Dense: _check_dense}


def dense_block(op: Dense, shapes, limits: Limits = ES2) -> int:
    """The most input packs one multiply program of a dense layer can read within the fetch
    and texture-unit limits (its weights: 4 fetches per pack; its input: 1 per pack and
    pixel; one unit for the weights texture)."""
    per_pack = 4 + op.pixels(shapes)
    block = min(limits.fetches_per_fragment // per_pack, limits.texture_units - 1)
    if block < 1:
        raise LimitError(f"layer {op.name!r}: texel fetches per fragment = {per_pack} for one "
                         f"input pack ({op.pixels(shapes)} pixels to average) exceeds the ES 2.0 "
                         f"limit of {limits.fetches_per_fragment}")
    return block
