"""Images larger than the GPU's largest texture, run in overlapping tiles.

Every tile's textures fit ``max_size``; neighbouring tiles overlap by the net's receptive
field (:func:`receptive_field`), and only the part of each tile whose outputs read no pixel
outside the tile (or read past the image's own edge, as the untiled run does) is kept.  So the
stitched image equals the untiled run byte for byte: the same shaders read the same texels and
compute in the same order; only the tile's origin differs (but for an x3 SR net's bilinear
chroma, whose weights ``(n + 0.5) / 3`` round differently in float32 at another offset: one
level in a rare value).  Nets whose tensors share the input's
pixel grid (stride-1 'same' convolutions and depth-to-space) can be tiled.  A net that takes
one input size (an ONNX export's) runs on a larger image in tiles of that size the same way.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from workbench import ir
from workbench.es2 import plan
from workbench.es2.record import record


def receptive_field(graph: ir.Graph) -> int:
    """The radius R in input pixels of what one output pixel reads: output pixel ``o`` (at
    input pixel ``o // scale``) depends only on input pixels within R of that one, each axis.

    Per tensor: ``step`` (input pixels per tensor pixel) and ``reach`` (in input pixels).  A
    stride-1 'same' k x k convolution adds ``k // 2`` of its input's pixels; depth-to-space
    keeps the reach (an output pixel reads its own source pixel) and divides the step; the SR
    demux's bilinear chroma reads the image one pixel either side.  Raises ValueError for an
    op that changes the pixel grid otherwise (a stride, 'valid' padding, a dense layer)."""
    step, reach = {graph.input.name: Fraction(1)}, {graph.input.name: Fraction(0)}
    for op in graph.ops:
        grid = record(op).tile(op, step, reach)
        if grid is None:
            raise ValueError(f"layer {op.name!r}: tiling needs stride-1 'same' convolutions and "
                             f"depth-to-space; this {record(op).name} changes the pixel grid")
        step[op.name], reach[op.name] = grid
    return math.ceil(reach[graph.output])


def largest_tile(graph: ir.Graph, max_size: int) -> int:
    """The largest input side whose every texture is at most ``max_size`` pixels a side."""
    def widest(side):
        return max(max(w, h) for w, h, _ in plan.textures(graph, (side, side)).values())

    side = max_size * 64 // widest(64)  # textures grow in proportion to the input
    while side > 0 and widest(side) > max_size:
        side -= 1
    return side


def tiles(n: int, side: int, margin: int) -> list[tuple[int, int, int]]:
    """Along one axis of ``n`` pixels: ``(start, keep_from, keep_to)`` per tile of ``side``
    pixels (the last may be shifted in, so all have the same size); the tile keeps input
    pixels ``keep_from .. keep_to - 1``, each at least ``margin`` from an inner tile edge."""
    if n <= side:
        return [(0, 0, n)]
    core = side - 2 * margin
    if core < 1:
        raise ValueError(f"tiles of {side} pixels cannot hold a receptive field of {margin} "
                         "pixels each side")
    out = []
    for keep_from in range(0, n, core):
        keep_to = min(keep_from + core, n)
        start = min(max(keep_from - margin, 0), n - side)
        out.append((start, keep_from, keep_to))
    return out


class Tiled(NamedTuple):
    output: np.ndarray    # the net's output for the whole image, as ``run`` returns it
    tiles: int            # runs made (1: the image fitted)
    seconds: float        # sum of ``net.timings`` over the runs (GPU passes only)


def fitting_side(graph: ir.Graph, side: int, budget: int) -> int:
    """The largest tile side, from ``side`` down by quarters (to 64 at least), whose GL
    textures take at most ``budget`` bytes."""
    while side > 64 and sum(plan.memory_bytes(graph, (side, side), ("GL textures",))
                            .values()) > budget:
        side = side * 3 // 4
    return side


def offer(graph: ir.Graph, hw) -> str:
    """What a run at input size ``hw`` that does not fit memory can do instead, for its
    refusal: ``"; in tiles it would fit: 12 tiles of 768x768 (es2.tiling.run_tiled, as
    upscale does)"``, or ``""`` where tiles would not help (a net that cannot be tiled, a
    margin wider than the tile)."""
    free = plan.available_memory()
    try:
        margin = receptive_field(graph)
    except ValueError:
        return ""
    side = fitting_side(graph, max(hw), (free or 0) // 2) if free else 0
    if side - 2 * margin < 1 or side >= max(hw):
        return ""
    count = len(tiles(hw[0], min(side, hw[0]), margin)) * len(tiles(hw[1], min(side, hw[1]),
                                                                    margin))
    return (f"; in tiles it would fit: {count} tiles of {side}x{side} (es2.tiling.run_tiled, "
            "as upscale does)")


def run_tiled(net, image, max_size: int, run=None) -> Tiled:
    """``net`` on an HxWxC ``image`` in tiles whose textures are at most ``max_size`` pixels a
    side (one run when the image fits); ``run``: the function to run a tile, default
    ``net.run`` (``net.emulate`` gives the emulator's tiled result)."""
    run = run or net.run
    graph = net.graph
    if graph.input_size:  # a net of one size: tiles of that size
        return _fixed_tiles(net, image, run)
    image = graph.input_image(image)
    h, w = image.shape[:2]
    side = largest_tile(graph, max_size)
    if side < 1:
        raise ValueError(f"no input fits textures of {max_size} pixels")
    free = plan.available_memory()
    if free is not None:  # the output whole, and tiles (and its saving) in as much again
        out_bytes = 4 * math.prod(graph.shapes((h, w))[graph.output])
        plan.require_bytes({"output": out_bytes, "its tiles and saving": out_bytes},
                           f"the {w}x{h} image", "use a smaller image", free)
        side = fitting_side(graph, side, (free - out_bytes) // 2)

    if h <= side and w <= side:
        return Tiled(run(image), 1, _seconds(net, run))
    margin = receptive_field(graph)
    if side - 2 * margin < 1:
        raise ValueError(f"a {w}x{h} image needs textures over {max_size} pixels, and tiles "
                         f"that fit ({side} pixels) cannot hold the net's receptive field of "
                         f"{margin} pixels each side; use a smaller image")
    return _stitched(net, image, run, (min(side, h), min(side, w)), margin)


def _seconds(net, run) -> float:
    """The GPU seconds of the last ``run`` (its passes; 0 for the emulator)."""
    return sum(net.timings.values()) if run == net.run else 0.0


def _fixed_tiles(net, image, run) -> Tiled:
    """A net that takes one input size (an ONNX export's 224x224) on a larger image: in
    tiles of that size overlapping by its receptive field, as :func:`run_tiled`."""
    graph = net.graph
    th, tw = graph.input_size
    h, w = np.shape(image)[:2]
    if (h, w) == (th, tw) or h < th or w < tw:  # (a smaller one: the net's own refusal)
        return Tiled(run(image), 1, _seconds(net, run))
    margin = receptive_field(graph)
    if min(th, tw) - 2 * margin < 1:
        raise ValueError(f"net {graph.name!r} takes {tw}x{th} and reads {margin} pixels each "
                         f"side: it cannot run on a {w}x{h} image in tiles of its size")
    return _stitched(net, image, run, (th, tw), margin)


def _stitched(net, image, run, tile, margin) -> Tiled:
    """``run`` over tiles of ``tile = (height, width)`` of ``image`` overlapping by
    ``margin``, each keeping what reads no pixel outside it; the outputs stitched."""
    h, w = np.shape(image)[:2]
    th, tw = tile
    rows, cols = tiles(h, th, margin), tiles(w, tw, margin)
    out, seconds = None, 0.0
    for y0, ky0, ky1 in rows:
        for x0, kx0, kx1 in cols:
            part = run(image[y0:y0 + th, x0:x0 + tw])
            seconds += _seconds(net, run)
            if out is None:
                s = part.shape[0] // th  # the net's scale (1 for a same-size output)
                out = np.empty((h * s, w * s, part.shape[2]), part.dtype)
            out[ky0 * s:ky1 * s, kx0 * s:kx1 * s] = \
                part[(ky0 - y0) * s:(ky1 - y0) * s, (kx0 - x0) * s:(kx1 - x0) * s]
    return Tiled(out, len(rows) * len(cols), seconds)
