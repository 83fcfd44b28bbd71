"""How a convolution's program holds its weights and bias (:data:`WEIGHTS`): as literals, as
rows of a ``vec4`` uniform array set at each draw, or the weights as literals and the bias as
that array's one row (:class:`Weights`)."""
from __future__ import annotations

import numpy as np

from workbench import ir
from workbench.glsl_text import glsl_float, glsl_vec

WEIGHTS = ("literals", "uniforms", "uniform bias")
XYZW = "xyzw"


class Weights:
    """How a program spells its weights and bias: as literals, or as rows of the ``vec4``
    uniform array ``u_w`` set at each draw (:attr:`Pass.arrays`), so that one program serves
    every layer of its shape (the same float32 values: the same bytes).  With uniforms every
    product is written, a zero weight's too: the program text depends on the shape alone.
    ``"uniform bias"``: the weights literals, the bias ``u_w[0]`` (:meth:`bias`), so that the
    sum starts from it as the uniforms' program and the emulator start: Mesa's NIR moves a
    literal bias to the end of the sum (its inexact reassociation, ``(a + #b) + c -> (a + c)
    + #b``), which rounds a few near-ties the other way (the dog classifier's first 5
    layers: 17 of 5.8 M bytes; with the bias a uniform, none)."""

    def __init__(self, kind):
        if kind not in WEIGHTS:
            raise ValueError(f"weights {kind!r}: one of {', '.join(WEIGHTS)}")
        self.kind = kind
        self.rows = [] if kind != "literals" else None
        self.partial = set()  # the component counts of the partial products written (mul<n>)

    def bias(self, values) -> str:
        """The sum's start: a row where the bias is a uniform (not with literal weights)."""
        return self._row(values) if self.kind == "uniform bias" else self.vec4(values)

    def vec4(self, values) -> str:
        return self._row(values) if self.kind == "uniforms" else glsl_vec(values)

    def _row(self, values) -> str:
        self.rows.append(np.pad(np.asarray(values, np.float32), (0, ir.PACK - len(values))))
        return f"u_w[{len(self.rows) - 1}]"

    def mat4(self, m) -> str:
        """``m[i, o]`` (input component i -> output component o): GLSL's ``mat4`` is
        column-major, so column i holds input component i."""
        if self.kind != "uniforms":
            return f"mat4({', '.join(glsl_float(v) for v in np.asarray(m).ravel())})"
        return f"mat4({', '.join(self.vec4(column) for column in m)})"

    def product(self, m, texel, present=ir.PACK) -> str:
        """``mat4(m) * texel`` where only its first ``present`` components exist (a tensor's
        last pack: an RGB image's 3) and the weights are uniforms: ``mul<n>(c0, .., texel)``,
        the same terms in ``mat4``'s order without the absent ones (their weights are 0: they
        add exactly 0), so the absent columns are neither read nor multiplied (literal zeros
        the compilers drop themselves)."""
        if self.kind != "uniforms" or present >= ir.PACK:
            return f"{self.mat4(m)} * {texel}"
        self.partial.add(present)
        columns = ", ".join(self.vec4(column) for column in np.asarray(m)[:present])
        return f"mul{present}({columns}, {texel})"

    def kept(self, m) -> bool:
        """Whether a product with the weights ``m`` is written (a literal 0 is left out)."""
        return self.kind == "uniforms" or bool(np.any(m))

    def declaration(self) -> str:
        """The uniform array and the partial products' functions the program uses."""
        if not self.rows:
            return ""
        functions = "".join(
            f"vec4 mul{n}({', '.join(f'vec4 c{i}' for i in range(n))}, vec4 t) {{ return "
            f"{' + '.join(f'c{i} * t.{XYZW[i]}' for i in range(n))}; }}\n"
            for n in sorted(self.partial))
        return f"uniform vec4 u_w[{len(self.rows)}];\n" + functions

    def arrays(self) -> dict:
        return {"u_w": np.stack(self.rows)} if self.rows else {}


def present_components(op: ir.Conv, pack: int) -> int:
    """The components input pack ``pack`` holds: 4, or fewer in the input's last pack (an RGB
    image's 3; where the packs are read in another order, 4: not worked out)."""
    if op.luma_input or op.input_order is not None:
        return ir.PACK
    return max(1, min(ir.PACK, op.cin - ir.PACK * pack))


def uniform_rows(op: ir.Conv) -> int:
    """The most rows of ``u_w`` one of its programs with weights as uniforms has: the bias,
    and a vec4 a tap (luma input) or one a tap and component of an input pack it reads."""
    if op.luma_input:
        return 1 + op.size ** 2
    return 1 + op.size ** 2 * max(sum(present_components(op, p) for p in op.input_packs(out))
                                  for out in range(op.out_packs()))


def uniforms_fit(op: ir.Conv, limits) -> bool:
    """Whether a program with its weights as uniforms fits the fragment uniform vectors (its
    vec2 uniforms too) and, where literals share that file, the constant budget."""
    rows = uniform_rows(op) + 2 + bool(op.residual) + (op.residual_scale is not None)
    return rows <= min(limits.fragment_uniform_vectors, limits.constant_vectors or rows)
