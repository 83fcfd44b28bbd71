"""What every ES 3.1 op's kernels share: :class:`Target`, :class:`Options`, :class:`Kernel`
and the GLSL pieces (the header, image declarations, counted loads, the bounds tests).

Each op's kernels, plan, loads and cost are in its module of :mod:`workbench.es31.ops`;
conventions (storage, weights, local size, tiles, cost) in :mod:`workbench.es31`.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench import ir
from workbench.gl.compute import ES31_MIN
from workbench.glsl_text import glsl_float

STORAGES = {"rgba32f": "f4", "rgba16f": "f2"}
LOAD_COUNTER_BINDING = 1


@dataclass(frozen=True)
class Target:
    """What ES 3.1 kernels are generated for: the images' ``storage`` format (``"rgba32f"``
    or ``"rgba16f"``, the ES 2.0 target's precision's counterpart), the work group
    (``local_size``, at most the ``work_group_invocations`` every ES 3.1 GPU offers:
    :data:`workbench.gl.compute.ES31_MIN`) and the output packs one invocation computes
    (``max_outputs``: 4 floats of registers each)."""
    storage: str = "rgba32f"
    local_size: tuple[int, int] = (8, 8)
    max_outputs: int = 8

    def __post_init__(self):
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {sorted(STORAGES)}, not {self.storage!r}")
        lx, ly = self.local_size
        if lx * ly > ES31_MIN["work_group_invocations"] or lx < 1 or ly < 1:
            raise ValueError(f"local size {self.local_size}: ES 3.1 guarantees "
                             f"{ES31_MIN['work_group_invocations']} invocations")


@dataclass(frozen=True)
class Options(Target):
    """What kernels are generated with: a :class:`Target`'s fields, then ``tile`` (stage input
    tiles in shared memory: convs with k > 1) and ``count_loads`` (instrument every imageLoad
    with an atomic counter: tests)."""
    tile: bool = True
    count_loads: bool = False

    @classmethod
    def of(cls, target: Target, tile=True, count_loads=False) -> "Options":
        return cls(target.storage, target.local_size, target.max_outputs, tile, count_loads)

    @property
    def target(self) -> Target:
        return Target(self.storage, self.local_size, self.max_outputs)


@dataclass
class Kernel:
    """One compute program: its source and what it binds.

    ``images``: ``(unit, tensor, access)``; ``weights``: the op's storage-buffer key (binding
    0) or None; ``uniforms``: the ``ivec2`` uniforms and how to get their values
    (:func:`workbench.ir.uniform_values`); ``grid``: what the work groups cover --
    ``("pixels", tensor)`` that tensor's pixels (z: jobs), ``("jobs",)`` one group per job (z)."""

    name: str
    op: str
    source: str
    images: list[tuple[int, str, str]]
    weights: str | None
    uniforms: dict[str, tuple]
    grid: tuple
    jobs: int


def header(opts: Options | None = None, local=None):
    """A kernel's first lines: version, precisions, its work group (``local``, default
    ``opts.local_size``); without ``opts``, the default :class:`Options` (the
    convolution-algorithm study's kernels, :mod:`workbench.es31.conv`)."""
    opts = opts or Options()
    lx, ly = local or opts.local_size
    head = ("#version 310 es\nprecision highp float;\nprecision highp int;\n"
            "precision highp image2DArray;\n"
            f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = 1) in;\n")
    if opts.count_loads:
        head += (f"layout(std430, binding = {LOAD_COUNTER_BINDING}) buffer Loads "
                 "{ uint loads; };\n")
    return head


def image(opts, unit, name, access):
    """The declaration of image ``name`` at ``unit`` (``access``: readonly or writeonly)."""
    return f"layout({opts.storage}, binding = {unit}) uniform highp {access} image2DArray {name};\n"


def header_in_out(opts: Options):
    """The header and the images of a kernel that reads ``u_in`` and writes ``u_out``."""
    return header(opts) + image(opts, 0, "u_in", "readonly") + image(opts, 1, "u_out", "writeonly")


def load_fn(opts, fn, image_name, luma=False):
    """``vec4 fn(ivec2 p, int layer)``: one counted imageLoad (``luma``: the RGB's luma)."""
    count = "    atomicAdd(loads, 1u);\n" if opts.count_loads else ""
    value = "imageLoad({}, ivec3(p, layer))".format(image_name)
    if luma:
        value = f"vec4(dot({value}.rgb, vec3({', '.join(glsl_float(v) for v in ir.LUMA)})), 0.0, 0.0, 0.0)"
    return f"vec4 {fn}(ivec2 p, int layer) {{\n{count}    return {value};\n}}\n"


def int_array(name, values):
    return f"const int {name}[{len(values)}] = int[]({', '.join(str(int(v)) for v in values)});\n"


# ``inside(p)``: whether pixel ``p`` lies in the input image (``u_in_size``)
INSIDE = ("bool inside(ivec2 p) {\n    return all(greaterThanEqual(p, ivec2(0))) && "
          "all(lessThan(p, u_in_size));\n}\n")

# The first lines of a kernel run per output pixel ``q``: those past the output return.
OUTPUT_PIXEL = ["    ivec2 q = ivec2(gl_GlobalInvocationID.xy);",
                "    if (any(greaterThanEqual(q, u_out_size))) return;"]


def main(body: list[str]) -> str:
    return "void main() {\n" + "\n".join(body) + "\n}\n"


def texel_bytes(opts: Options) -> int:
    return 16 if opts.storage == "rgba32f" else 8
