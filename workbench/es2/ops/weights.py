"""How a convolution's program holds its weights and bias (:data:`WEIGHTS`): as literals, or
as rows of a ``vec4`` uniform array set at each draw (:class:`Weights`)."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.glsl_text import glsl_float, glsl_vec

WEIGHTS = ("literals", "uniforms")


class Weights:
    """How a program spells its weights and bias: as literals, or as rows of the ``vec4``
    uniform array ``u_w`` set at each draw (:attr:`Pass.arrays`), so that one program serves
    every layer of its shape (the same float32 values: the same bytes).  With uniforms every
    product is written, a zero weight's too: the program text depends on the shape alone."""

    def __init__(self, kind):
        if kind not in WEIGHTS:
            raise ValueError(f"weights {kind!r}: one of {', '.join(WEIGHTS)}")
        self.rows = [] if kind == "uniforms" else None

    def vec4(self, values) -> str:
        if self.rows is None:
            return glsl_vec(values)
        self.rows.append(np.pad(np.asarray(values, np.float32), (0, ir.PACK - len(values))))
        return f"u_w[{len(self.rows) - 1}]"

    def mat4(self, m) -> str:
        """``m[i, o]`` (input component i -> output component o): GLSL's ``mat4`` is
        column-major, so column i holds input component i."""
        if self.rows is None:
            return f"mat4({', '.join(glsl_float(v) for v in np.asarray(m).ravel())})"
        return f"mat4({', '.join(self.vec4(column) for column in m)})"

    def kept(self, m) -> bool:
        """Whether a product with the weights ``m`` is written (a literal 0 is left out)."""
        return self.rows is not None or bool(np.any(m))

    def declaration(self) -> str:
        return f"uniform vec4 u_w[{len(self.rows)}];\n" if self.rows else ""

    def arrays(self) -> dict:
        return {"u_w": np.stack(self.rows)} if self.rows else {}


def uniform_rows(op: ir.Conv) -> int:
    """The rows of ``u_w`` of one of its programs with weights as uniforms: the bias, and a
    vec4 a tap (luma input) or four a tap and input pack."""
    packs = 1 if op.luma_input else len(op.input_packs(0))
    return 1 + op.size ** 2 * (1 if op.luma_input else ir.PACK * packs)


def uniforms_fit(op: ir.Conv, limits) -> bool:
    """Whether a program with its weights as uniforms fits the fragment uniform vectors (its
    vec2 uniforms too) and, where literals share that file, the constant budget."""
    rows = uniform_rows(op) + 2 + bool(op.residual)
    return rows <= min(limits.fragment_uniform_vectors, limits.constant_vectors or rows)
