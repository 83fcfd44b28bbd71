"""What an ES 2.0 net needs for one input size: the textures of every tensor, which output
packs share a program (:func:`conv_programs`, with draw buffers) and the cost of every op (the
counting convention is :mod:`workbench.ir.cost`'s).  :data:`COSTS` is the op table: one
function per IR op type."""
from __future__ import annotations

from dataclasses import replace

from workbench import ir
from workbench.ir.cost import Cost


def texture_bytes(width, height, dtype) -> int:
    """Memory of an RGBA texture: 4 bytes a texel for RGBA8 ("f1"), 16 for RGBA32F ("f4")."""
    return width * height * (4 if dtype == "f1" else 16)


def conv_fetches(op: ir.Conv, packs) -> int:
    """Texel fetches per fragment of one program writing output packs ``packs`` of ``op``:
    each input pack once per tap (shared by the outputs), plus one residual texel per output."""
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return op.size ** 2 * len(inputs) + (len(packs) if op.residual else 0)


def conv_units(op: ir.Conv, packs) -> int:
    """Texture units of one program writing output packs ``packs`` of ``op``."""
    inputs = {p for pack in packs for p in op.input_packs(pack)}
    return len(inputs) + (len(packs) if op.residual else 0)


def conv_programs(op: ir.Conv, draw_buffers=1, units=None, fetches=None) -> list[list[int]]:
    """The output packs of each program of ``op``: runs of up to ``draw_buffers`` consecutive
    packs that read the same input packs (one group of a grouped conv), a run ended early where
    one more output would exceed ``units`` texture units or ``fetches`` per fragment (None: no
    budget).  ``draw_buffers=1``: one pack per program, the plain ES 2.0 form."""
    units, fetches = units or float("inf"), fetches or float("inf")
    programs = []
    for pack in range(op.out_packs()):
        last = programs[-1] if programs else None
        if (last and len(last) < draw_buffers
                and op.input_packs(last[0]) == op.input_packs(pack)
                and conv_units(op, last + [pack]) <= units
                and conv_fetches(op, last + [pack]) <= fetches):
            last.append(pack)
        else:
            programs.append([pack])
    return programs


def conv_constants(op: ir.Conv, channels) -> int:
    """The vec4 constant slots a program of ``op`` writing ``channels`` output channels needs
    where the compiler keeps literals in the uniform file (Vivante): its weights and biases,
    4 to a slot, plus 8 for the coordinates' constants (measured on etnaviv: the SR net's
    3x3 program of 432 weights took 111 slots, 109 for the weights and biases)."""
    taps = op.size * op.size * (1 if op.luma_input else op.kernel.shape[2])
    return -(-channels * (taps + 1) // ir.PACK) + 8


def conv_channels(op: ir.Conv, constant_vectors=None) -> int:
    """Output channels one program of ``op`` writes: 4 (a whole pack), or 2 or 1 when its
    literals would not fit ``constant_vectors`` slots (None: no such budget)."""
    for channels in (4, 2, 1):
        if constant_vectors is None or conv_constants(op, channels) <= constant_vectors:
            return channels
    return 1


def conv_cost(op: ir.Conv, shapes, programs=None) -> Cost:
    """``programs``: output packs per program (:func:`conv_programs`); default one each."""
    h, w, _ = shapes[op.name]
    pixels = h * w
    programs = programs or [[p] for p in range(op.out_packs())]
    return Cost(multiply_adds=pixels * op.kernel.size,
                texel_fetches=pixels * sum(conv_fetches(op, packs) for packs in programs),
                texture_bytes=pixels * 4 * op.out_packs(),
                programs=len(programs))


def depth_to_space_cost(op: ir.DepthToSpace, shapes, programs=None) -> Cost:
    h, w, _ = shapes[op.name]
    n = op.out_packs(shapes)
    fetches = sum(op.fetches_per_fragment(shapes, p) for p in range(n))
    return Cost(texel_fetches=h * w * fetches, texture_bytes=h * w * 4 * n, programs=n)


def dense_textures(op: ir.Dense, shapes) -> dict:
    """Textures of this op: ``{(name, index): (width, height, dtype)}``."""
    dtype = "f1" if op.number == "fixed16" else "f4"
    rows = op.reductions()
    out = {(f"{op.name}/weights", 0): (op.pairs, op.cin + 1, dtype)}
    for k, r in enumerate(rows[:-1]):
        out[(f"{op.name}/partial{k}", 0)] = (op.pairs, r, dtype)
    out[(op.name, 0)] = (op.pairs, 1, dtype)
    return out


def dense_cost(op: ir.Dense, shapes, programs=None) -> Cost:
    rows = op.reductions()
    fetches = op.pairs * sum(4 * len(b) + len(b) * op.pixels(shapes) for b in op.blocks())
    fetches += op.pairs * sum(r * min(op.reduce, prev) + (1 if r == 1 else 0)
                                for prev, r in zip(rows, rows[1:]))
    nbytes = sum(texture_bytes(*t) for t in dense_textures(op, shapes).values())
    return Cost(multiply_adds=op.cin * op.cout, texel_fetches=fetches, texture_bytes=nbytes,
                programs=len(op.blocks()) + len(rows) - 1)


# One entry per IR op: ``op type -> cost(op, shapes, programs)``; ``programs``: the output
# packs of each program (several with draw buffers; only convolutions group them), None: one each.
COSTS = {ir.Conv: conv_cost, ir.DepthToSpace: depth_to_space_cost, ir.Dense: dense_cost}


def cost(graph: ir.Graph, hw, programs=None) -> dict[str, Cost]:
    """Cost of every op for an input of ``hw = (height, width)``; ``programs``: ``{op name:
    output packs of each program}`` of a net compiled with draw buffers (see
    :func:`conv_programs`), None for one output per program.  ``single_target_fetches`` is
    the fetch count of the one-output form, whatever ``programs`` says."""
    shapes, programs, out = graph.shapes(hw), programs or {}, {}
    for op in graph.ops:
        single = COSTS[type(op)](op, shapes)
        compiled = COSTS[type(op)](op, shapes, programs.get(op.name))
        out[op.name] = replace(compiled, single_target_fetches=single.texel_fetches)
    return out


def textures(graph: ir.Graph, hw) -> dict[tuple[str, int], tuple[int, int, str]]:
    """Every texture the net needs for input size ``hw``: ``(tensor, index) -> (width,
    height, dtype)``; dtype ``"f1"`` is RGBA8, ``"f4"`` RGBA32F."""
    shapes = graph.shapes(hw)
    out = {}
    for op in [graph.input] + graph.ops:
        if isinstance(op, ir.Dense):
            out.update(dense_textures(op, shapes))
        else:
            h, w, c = shapes[op.name]
            out.update({(op.name, p): (w, h, "f1") for p in range(ir.packs(c))})
    return out


def peak_texture_bytes(graph: ir.Graph, hw) -> int:
    """Texture memory when each texture is freed after its last reader (the input and the
    output are kept): the most that is alive at once while the ops run in order."""
    nbytes = {}
    for (name, _), texture in textures(graph, hw).items():
        owner = name.split("/")[0]
        nbytes[owner] = nbytes.get(owner, 0) + texture_bytes(*texture)
    last = {graph.input.name: len(graph.ops), graph.output: len(graph.ops)}
    for i, op in enumerate(graph.ops):
        for name in (op.input, getattr(op, "residual", None), getattr(op, "chroma_from", None)):
            if name:
                last[name] = max(last.get(name, i), i)
    born = {graph.input.name: -1, **{op.name: i for i, op in enumerate(graph.ops)}}
    return max(sum(b for name, b in nbytes.items() if born[name] <= i <= last.get(name, born[name]))
               for i in range(len(graph.ops)))
