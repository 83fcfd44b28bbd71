"""The ES 2.0 op records: everything the back end knows about one IR op type, in one place.

Each op type has one :class:`OpRecord`, written in its own module of :mod:`workbench.es2.ops`
(``ops/conv/``, ``ops/dense.py``, ...), which registers it here when the package is
imported.  The rest of the back end (shader generation, the emulator, the limits, the cost,
the runner's textures, the output decoding, tiling) asks :func:`record` and never looks at
the op's type: a new op is a new module in ``ops/``.

Conventions of the callables (``shapes``: ``{tensor: (height, width, channels)}`` of one
input size; ``limits``: a :class:`workbench.es2.limits.Limits`):

* ``passes(op, shapes, target, **layer_options)`` -> the op's
  :class:`~workbench.es2.shaders.Pass` list, in execution order (``target``: a
  :class:`workbench.es2.limits.Target`: the limits, the precision, the render targets);
* ``apply(op, tensors, arithmetic)`` -> the op's output as the next op fetches it (the
  emulator; ``tensors``: every earlier tensor, float32, or float16 for ``arithmetic=
  "float16"``, the prediction for a GPU whose mediump is float16);
* ``check(op, shapes, limits)`` raises :class:`~workbench.es2.limits.LimitError`;
* ``cost(op, shapes, programs=None)`` -> :class:`workbench.ir.Cost`; ``programs``: the
  output packs of each of its programs as compiled (None: one each);
* ``textures(op, shapes)`` -> ``{(tensor, index): (width, height, dtype)}`` (``"f1"``
  RGBA8, ``"f4"`` RGBA32F); default: one RGBA8 texture per 4 output channels;
* ``constants(op)`` -> ``{tensor: HxWx4 array}`` uploaded once (weights textures);
* ``stored(op, value)`` -> the output tensor as the GPU stores it (default: 8-bit packs);
* ``output(op, stored)`` -> the net's output from its stored texture when the op is last
  (default: an image in [0, 1]), and ``output_spec(op)`` what a runtime needs to decode it;
* ``check_program(op, packs, limits)``: limits of one compiled program writing ``packs``;
* ``tile(op, step, reach)`` -> ``(step, reach)`` of its output for tiling
  (:mod:`workbench.es2.tiling`), or None when the op cannot be tiled;
* ``saturated(op, textures)``: whether its stored textures hit their number format's range;
* ``prepare(op, shapes, limits, options)`` -> a copy of ``op`` with what the back end
  chooses for ``limits`` and for compile's ``options`` (``{"dense": "fixed16"}``: each
  record reads those it knows), of the type ``prepared`` (a subclass of the IR op: a dense
  layer's number format and blocks of packs and pixels); compile never changes the IR it
  lowered, and a saved net's ops are rebuilt as that type;
* ``layer_options(op)``: the keywords of ``passes`` a driver may set for this layer
  (:func:`workbench.es2.drivers.fit`);
* ``origin(op)`` -> ``(left, top)`` of its output in its textures where they hold a border
  around it (default, or None: at (0, 0), the texture the output's size);
* ``bits(op)`` -> the bits a value of its output is stored in, 8 or 16 (default 8: one
  RGBA8 texture a pack; :func:`workbench.es2.fixed16.tensor_bits`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from workbench.ir.registry import Table


@dataclass(frozen=True)
class OpRecord:
    name: str                      # the IR op type's name, as the manifest writes it
    passes: Callable
    apply: Callable
    check: Callable
    cost: Callable
    tile: Callable
    textures: Callable | None = None
    constants: Callable | None = None
    stored: Callable | None = None
    output: Callable | None = None
    output_spec: Callable | None = None
    check_program: Callable | None = None
    saturated: Callable | None = None
    layer_options: Callable | None = None
    prepare: Callable | None = None
    prepared: type | None = None
    origin: Callable | None = None
    bits: Callable | None = None
    source_bytes: Callable | None = None  # (op, shapes) -> bytes of its programs' text
    #   that grow with the input (plan.memory_bytes); None: none do


RECORDS = Table("the ES 2.0 back end")  # IR op type -> its OpRecord


def register(op_type: type, op_record: OpRecord) -> OpRecord:
    return RECORDS.add(op_type)(op_record)


def record_of_type(op_type: type) -> OpRecord | None:
    """The record of an op type (or of the IR type a prepared type extends), or None."""
    return RECORDS.get(op_type)


def record(op) -> OpRecord:
    """The record of ``op``'s type; :class:`workbench.ir.registry.NotTaken` naming the op and
    the types the back end takes."""
    return RECORDS.of(op)
