"""The ES 3.1 op rules: everything the back end does with one IR op type, in one place.

Each op type has one :class:`OpRules`, written in its own module of :mod:`workbench.es31.ops`
(``ops/conv.py``, ``ops/dense.py``, ...) beside its kernels, plan, loads and cost, which
registers it here when the package is imported.  The net (:mod:`workbench.es31.net`) asks
:func:`rules` and never looks at the op's type, as the ES 2.0 back end asks its records
(:mod:`workbench.es2.record`; the same lookup along the type's MRO and the same error,
:mod:`workbench.ir.registry`): a new op is a new module in ``ops/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from workbench import ir
from workbench.ir.registry import Table


def tensor_images(op, shapes, dtype) -> dict:
    """The default: one image with the op's packs as layers."""
    h, w, c = shapes[op.name]
    return {op.name: (w, h, ir.packs(c), dtype)}


@dataclass(frozen=True)
class OpRules:
    """What the ES 3.1 back end does with one IR op type: its ``kernels(op, shapes, opts)``,
    its ``cost(op, shapes, opts)``, its weight buffer ``weights(op, opts)`` (float32, as
    uploaded; None: no weights), its ``images(op, shapes, dtype)`` and, where the net's
    output is not an image, ``output(op, stored)``: the values from the stored image."""
    kernels: Callable
    cost: Callable
    weights: Callable | None = None
    images: Callable = tensor_images
    output: Callable | None = None


OPS = Table("the ES 3.1 back end")  # IR op type -> its OpRules, each from its module of ops/


def register(op_type: type, op_rules: OpRules) -> OpRules:
    return OPS.add(op_type)(op_rules)


def rules(op) -> OpRules:
    """The rules of ``op``'s type, or of the IR type it extends (an es2 ``ConvForm`` is a
    Conv: its order is the ES 2.0 programs' own); :class:`workbench.ir.registry.NotTaken`
    naming the op and the types the back end takes."""
    return OPS.of(op)
