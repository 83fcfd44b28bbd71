"""What an ES 2.0 net needs for one input size: the textures of every tensor and the cost of
every op (the counting convention is :mod:`workbench.ir.cost`'s), each op's from its record
(:mod:`workbench.es2.ops`)."""
from __future__ import annotations

from dataclasses import replace

from workbench import ir
from workbench.data import memory
from workbench.data.memory import OutOfMemory, require_bytes  # noqa: F401
from workbench.es2.record import record
from workbench.ir.cost import Cost


def texture_bytes(width, height, dtype) -> int:
    """Memory of an RGBA texture: 4 bytes a texel for RGBA8 ("f1"), 16 for RGBA32F ("f4")."""
    return width * height * (4 if dtype == "f1" else 16)


def cost(graph: ir.Graph, hw, programs=None) -> dict[str, Cost]:
    """Cost of every op for an input of ``hw = (height, width)``; ``programs``: ``{op name:
    output packs of each program}`` as compiled (see
    :func:`workbench.es2.shaders.programs`), None for one output per program.  ``single_target_fetches`` is
    the fetch count of the one-output form, whatever ``programs`` says."""
    shapes, programs, out = graph.shapes(hw), programs or {}, {}
    for op in graph.ops:
        single = record(op).cost(op, shapes)
        compiled = record(op).cost(op, shapes, programs.get(op.name))
        out[op.name] = replace(compiled, single_target_fetches=single.texel_fetches)
    return out


def textures(graph: ir.Graph, hw) -> dict[tuple[str, int], tuple[int, int, str]]:
    """Every texture the net needs for input size ``hw``: ``(tensor, index) -> (width,
    height, dtype)``; dtype ``"f1"`` is RGBA8, ``"f4"`` RGBA32F."""
    shapes = graph.shapes(hw)
    out = {}
    for op in [graph.input] + graph.ops:
        special = op is not graph.input and record(op).textures
        out.update(special(op, shapes) if special else pack_textures(op.name, shapes))
    return out


def pack_textures(name, shapes, per_pack=1) -> dict[tuple[str, int], tuple[int, int, str]]:
    """The RGBA8 textures of tensor ``name``: ``per_pack`` (2 for a 16-bit tensor) per 4
    channels, of its size."""
    h, w, c = shapes[name]
    return {(name, p): (w, h, "f1") for p in range(per_pack * ir.packs(c))}


def peak_texture_bytes(graph: ir.Graph, hw) -> int:
    """Texture memory when each texture is freed after its last reader (the input and the
    output are kept): the most that is alive at once while the ops run in order."""
    nbytes = {}
    for (name, _), texture in textures(graph, hw).items():
        owner = name.split("/")[0]
        nbytes[owner] = nbytes.get(owner, 0) + texture_bytes(*texture)
    last = {graph.input.name: len(graph.ops), graph.output: len(graph.ops)}
    for i, op in enumerate(graph.ops):
        for name in op.reads:
            last[name] = max(last.get(name, i), i)
    born = {graph.input.name: -1, **{op.name: i for i, op in enumerate(graph.ops)}}
    return max(sum(b for name, b in nbytes.items() if born[name] <= i <= last.get(name, born[name]))
               for i in range(len(graph.ops)))


def memory_bytes(graph: ir.Graph, hw, parts=("GL textures", "emulator", "reference"),
                 images=0) -> dict:
    """The bytes a run at input size ``hw`` needs, estimated from the IR's shapes, for each
    of ``parts``: ``"GL textures"`` every texture (the runner keeps them all), ``"emulator"``
    every tensor of one image as float32 and, for a check on ``images`` images, those images
    as float32 and its comparison of every tensor of each (its float64 and float32 values:
    12 bytes a value; the largest tensor's joined, clipped and compared: 48 bytes a value),
    ``"reference"`` (TensorFlow / ONNX Runtime) every tensor of its batch (``images``, at
    least 1) as float32, and ``"programs"`` the shader text that grows with the input (a
    dense layer's pixel taps, :meth:`workbench.es2.ops.dense.Gemv.source_bytes`).  Measured
    against the peak RSS of a compile with the check: 0.98-1.05 of it."""
    shapes = graph.shapes(hw)
    values = sum(h * w * c for h, w, c in shapes.values())
    largest = max(h * w * c for h, w, c in shapes.values())
    h, w, c = shapes[graph.input.name]
    sizes = {"GL textures": lambda: sum(texture_bytes(*t) for t in textures(graph, hw).values()),
             "emulator": lambda: 4 * values + images * (4 * h * w * c + 12 * values
                                                        + 48 * largest),
             "reference": lambda: 4 * values * max(images, 1),
             "programs": lambda: sum(record(op).source_bytes(op, shapes) for op in graph.ops
                                     if record(op).source_bytes)}
    return {part: sizes[part]() for part in parts}  # (only the parts asked for)


COMPILE_CHECKED = ("GL textures", "emulator", "reference", "programs")  # (compile's parts)


def available_memory():
    """The bytes this process may still take (:func:`workbench.data.memory.available_bytes`:
    the least of MemAvailable, its ulimit and its cgroup's room), None unknown."""
    return memory.available_bytes()


def require_memory(graph: ir.Graph, hw, helps: str, parts=("GL textures", "emulator",
                                                            "reference"), images=0):
    """Refuse, before anything is allocated, a run at input size ``hw`` whose
    :func:`memory_bytes` (for a check on ``images`` images) exceed the memory available
    (:func:`available_memory`): :class:`OutOfMemory` in one line with the need, what is
    available and ``helps`` (the option that helps)."""
    require_bytes(memory_bytes(graph, hw, parts, images),
                  f"a {hw[1]}x{hw[0]} input to {graph.name!r}", helps, available_memory())
