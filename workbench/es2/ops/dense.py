"""The ES 2.0 record of :class:`workbench.ir.Dense`: the logits as a blocked GEMV (one multiply
program per block of input packs and chunk of pooled pixels, then reduction passes; the last
adds the bias), its numbers in 16-bit fixed point packed two to an RGBA8 texel (or float in
RGBA32F); its weights texture, emulator, limits, cost and output decoding.  What compile
chooses (the number format, the blocks for a device's limits) lives in :class:`Gemv`, the
prepared op.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from workbench import ir
from workbench.es2 import fixed16
from workbench.es2.emulate import dtype, load, store
from workbench.es2.limits import LimitError, Target, fits
from workbench.es2.plan import texture_bytes
from workbench.es2.record import OpRecord, register
from workbench.es2.shaders import Binding, Pass, header, uniform_declarations
from workbench.glsl_text import glsl_float
from workbench.ir.cost import Cost


@dataclass
class Gemv(ir.Dense):
    """A :class:`workbench.ir.Dense` as ES 2.0 runs it: one multiply program per ``block``
    input packs and ``chunk`` of the pooled pixels (0: all) writes one row of partial sums
    (divided by the number of pixels: the rows add up to the average); reduction passes add
    ``reduce`` rows at a time; the last adds the bias.  Weights and bias live in a texture:
    row c = input channel c, the last row = bias.  ``number`` (``es2.compile(dense=...)``):
    ``"fixed16"`` keeps weights, partial sums and logits in 16-bit fixed point (range
    [-128, 128), steps of 1/256; the weights scaled by ``2**weight_shift``) in RGBA8
    textures, ``"float"`` in float32 (RGBA32F)."""
    number: str = "fixed16"
    block: int = 4
    chunk: int = 0
    reduce: int = 8

    @property
    def pairs(self):
        """Texels per row: two outputs per texel."""
        return -(-self.cout // 2)

    @property
    def weight_shift(self):
        """Power of two the fixed16 weights are scaled by, to use the range fully."""
        if self.number != "fixed16":
            return 0
        biggest = float(np.abs(self.weight).max()) or 1.0
        return int(np.clip(np.floor(np.log2(127.0 / biggest)), 0, 7))

    def pieces(self, shapes) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """``(input packs, pixels (x, y))`` of each multiply program, in row order."""
        h, w, _ = shapes[self.input]
        pixels = [(x, y) for y in range(h) for x in range(w)] if self.pool else [(0, 0)]
        n, every = ir.packs(self.cin), max(len(pixels), 1)  # (an empty input: one chunk)
        step = self.chunk or every
        return [(list(range(b, min(b + self.block, n))), pixels[c:c + step])
                for b in range(0, n, self.block) for c in range(0, every, step)]

    def piece_count(self, shapes) -> int:
        """``len(self.pieces(shapes))``, without listing the pixels (the page sizes its
        textures at large sample sizes)."""
        h, w, _ = shapes[self.input]
        every = max(h * w if self.pool else 1, 1)
        return -(-ir.packs(self.cin) // self.block) * -(-every // (self.chunk or every))

    def source_bytes(self, shapes) -> int:
        """Memory of its multiply programs' text (a tap of about 70 characters per input pack
        and pixel) and, while they are made, of the list of its pixels (about 160 bytes a
        pixel): what grows with the input size (:func:`workbench.es2.plan.memory_bytes`)."""
        pixels = self.pixels(shapes)
        return 70 * ir.packs(self.cin) * pixels + 160 * pixels

    def reductions(self, shapes) -> list[int]:
        """Row counts: of the partial sums, then after each reduction pass (ends at 1)."""
        rows = [self.piece_count(shapes)]
        while rows[-1] > 1 or len(rows) == 1:
            rows.append(-(-rows[-1] // self.reduce))
        return rows


def fetches(op: Gemv, shapes) -> int:
    """Texel fetches per fragment of the heaviest stage, a multiply program: 4 weights and
    one input texel per pixel, for each input pack of its block."""
    block, pixels = min(op.block, ir.packs(op.cin)), op.pixels(shapes)
    return 4 * block + block * min(op.chunk or pixels, pixels)  # (the first piece's)


def _number_glsl(op: Gemv):
    """enc2/dec2 (two values per texel) and wdec (a weight pair) for the op's number format."""
    if op.number == "float":
        return ("vec4 enc2(vec2 v) { return vec4(v, 0.0, 0.0); }\n"
                "vec2 dec2(vec4 t) { return t.xy; }\nvec2 wdec(vec4 t) { return t.xy; }\n")
    return fixed16.GLSL + f"vec2 wdec(vec4 t) {{ return dec2(t) / {glsl_float(2 ** op.weight_shift)}; }}\n"


def passes(op: Gemv, shapes, target: Target) -> list[Pass]:
    """The blocked GEMV: one multiply program per block of input packs and chunk of pixels
    (each writes one row of partial sums), then reduction passes; the last adds the bias."""
    h, w, _ = shapes[op.input]
    rows_w, total = op.cin + 1, op.pixels(shapes)
    head = header(target.precision) + _number_glsl(op)
    out = []
    for row, (block, pixels) in enumerate(op.pieces(shapes)):
        samplers = [f"u_in{k}" for k in range(len(block))] + ["u_w"]
        bindings = [Binding(s_, op.input, p) for s_, p in zip(samplers, block)]
        bindings.append(Binding("u_w", f"{op.name}/weights", 0))
        body = [f"    float x = gl_FragCoord.x / {glsl_float(op.pairs)};", "    vec2 acc = vec2(0.0);",
                "    vec4 s;"]
        for k, pack in enumerate(block):
            taps = " + ".join(f"texture2D(u_in{k}, vec2({glsl_float((px + 0.5) / w)}, {glsl_float((py + 0.5) / h)}))"
                              for px, py in pixels)
            body.append(f"    s = {taps};")
            for i in range(min(4, op.cin - 4 * pack)):
                c = 4 * pack + i
                body.append(f"    acc += wdec(texture2D(u_w, vec2(x, {glsl_float((c + 0.5) / rows_w)})))"
                            f" * s.{'xyzw'[i]};")
        body.append(f"    gl_FragColor = enc2(acc / {glsl_float(total)});")
        source = head + uniform_declarations(samplers, {}) + "void main() {\n" + "\n".join(body) + "\n}\n"
        out.append(Pass(f"{op.name}.multiply{row}", op.name, source, bindings,
                           [(f"{op.name}/partial0", 0)], {}, (0, row, op.pairs, 1)))
    rows = op.reductions(shapes)
    for k, (prev, r) in enumerate(zip(rows, rows[1:])):
        last = r == 1 and k == len(rows) - 2
        source_key = f"{op.name}/partial{k}"
        target = (op.name, 0) if last else (f"{op.name}/partial{k + 1}", 0)
        samplers = ["u_p"] + (["u_w"] if last else [])
        bindings = [Binding("u_p", source_key, 0)]
        body = [f"    float x = gl_FragCoord.x / {glsl_float(op.pairs)};",
                f"    float first = (gl_FragCoord.y - 0.5) * {glsl_float(op.reduce)};",
                "    vec2 acc = vec2(0.0);"]
        for t in range(min(op.reduce, prev)):
            body.append(f"    acc += dec2(texture2D(u_p, vec2(x, (first + {glsl_float(t + 0.5)}) / {glsl_float(prev)})))"
                        f" * step(first + {glsl_float(t)}, {glsl_float(prev - 0.5)});")
        if last:
            bindings.append(Binding("u_w", f"{op.name}/weights", 0))
            bias = "dec2" if op.number == "fixed16" else "wdec"
            body.append(f"    acc += {bias}(texture2D(u_w, vec2(x, {glsl_float((op.cin + 0.5) / rows_w)})));")
        body.append("    gl_FragColor = enc2(acc);")
        source = head + uniform_declarations(samplers, {}) + "void main() {\n" + "\n".join(body) + "\n}\n"
        out.append(Pass(f"{op.name}.reduce{k}", op.name, source, bindings, [target]))
    return out


def weight_texture(op: Gemv) -> np.ndarray:
    """The weights texture (``cin + 1`` rows of ``pairs`` texels): row c holds the weights of
    input c for outputs (2j, 2j+1), the last row the bias.  fixed16: weights scaled by
    ``2**weight_shift``, 2 bytes per value (uint8); float: float32 (RGBA32F)."""
    values = np.zeros((op.cin + 1, op.pairs * 2))
    values[:op.cin, :op.cout] = op.weight * 2.0 ** op.weight_shift
    values[op.cin, :op.cout] = op.bias
    if op.number == "float":  # weight_shift is 0
        out = np.zeros((op.cin + 1, op.pairs, 4), np.float32)
        out[..., :2] = values.reshape(op.cin + 1, op.pairs, 2)
        return out
    return fixed16.encode(values).reshape(op.cin + 1, op.pairs, 4)


def constants(op: Gemv) -> dict[str, np.ndarray]:
    return {f"{op.name}/weights": weight_texture(op)}


def emulate(op: Gemv, x, arithmetic="float32"):
    """The blocked GEMV of :class:`Gemv`, stage by stage, with the storage of every stage;
    returns the logits as the CPU reads them back.  A stage out of the fixed16 range raises
    :class:`workbench.es2.fixed16.FixedPointOverflow`.

    ``highp`` models the values: sums in float64, stored in steps of 1/256 (fixed16) or as
    float32 (float).  ``mediump`` runs the shaders' arithmetic op by op in float16: the input
    taps summed in order, ``acc += w * s`` per input channel, ``acc / pixels``, and the GLSL
    ``enc``/``dec`` of :mod:`fixed16` (for the weights texture, every partial sum and the
    logits).  There ``dec``'s ``hi * 256 + lo`` (up to 65535) keeps 11 significant bits, so a
    value decodes in steps of 1/16 in [-64, 0) and 1/8 in [0, 128) instead of 1/256: small
    weights (``|w| * 2**weight_shift < 1/32``) become 0 and partial sums lose their low
    byte; ``enc`` rounds ``u`` the same way and at the top of the range makes ``inf``.
    """
    cin, shapes = op.cin, {op.input: x.shape}
    total = op.pixels(shapes)
    if arithmetic == "float32":
        def summed(pixels):  # the piece's share of the average (float64; all: the mean)
            if len(pixels) == total:
                return x[..., :cin].mean(axis=(0, 1)) if op.pool else x[0, 0, :cin]
            return np.sum([x[py, px, :cin] for px, py in pixels], 0, np.float64) / total
        divide = 1
        if op.number == "float":
            weight, bias = op.weight.astype(np.float64), op.bias.astype(np.float64)

            def put(v, stage, last=False):
                return v.astype(np.float32).astype(np.float64)
        else:
            scale = 2.0 ** op.weight_shift
            weight, bias = fixed16.quantize(op.weight * scale) / scale, fixed16.quantize(op.bias)

            def put(v, stage, last=False):
                fixed16.check(v, op.name, stage)
                return fixed16.quantize(v)
    else:
        F = dtype(arithmetic)

        def summed(pixels):  # the taps of the piece, summed in order
            s = x[pixels[0][1], pixels[0][0], :cin]
            for px, py in pixels[1:]:
                s = s + x[py, px, :cin]
            return s
        divide = total
        texture = weight_texture(op)  # (cin + 1, pairs, 4): the weight rows, the bias
        fetched = load(texture, arithmetic) if op.number == "fixed16" else texture.astype(F)
        fetched = fetched.reshape(cin + 1, -1, 2, 2)
        if op.number == "float":
            values = fetched[:, :, 0].reshape(cin + 1, -1)[:, :op.cout]  # components x, y
            weight, bias = values[:cin], values[cin]

            def put(v, stage, last=False):  # an RGBA32F texture holds the float16 value
                return v
        else:
            values = fixed16.glsl_dec(fetched).reshape(cin + 1, -1)[:, :op.cout]
            weight, bias = values[:cin] / F(2 ** op.weight_shift), values[cin]

            def put(v, stage, last=False):
                fixed16.check(v, op.name, stage)
                stored = store(fixed16.glsl_enc(v))
                return fixed16.decode(stored) if last else fixed16.glsl_dec(load(stored, arithmetic))
    rows = []
    for row, (block, pixels) in enumerate(op.pieces(shapes)):
        s = summed(pixels)
        rows.append(put(sum(weight[c] * s[c] for p in block
                            for c in range(4 * p, min(4 * p + 4, cin))) / divide,
                        f"the partial sum of program {row}"))
    passes = len(op.reductions(shapes)) - 1
    for k in range(passes):
        last = k == passes - 1
        rows = [put(sum(rows[i:i + op.reduce]) + (bias if last else 0),
                    "the output (with bias)" if last else f"reduction {k}", last)
                for i in range(0, len(rows), op.reduce)]
    return rows[0]


def apply(op: Gemv, tensors, arithmetic):
    return emulate(op, tensors[op.input], arithmetic)


def stored(op: Gemv, logits) -> np.ndarray:
    """The logits as the output texture holds them (1 x pairs x 4: two values a texel)."""
    values = np.zeros(2 * op.pairs)
    values[:op.cout] = logits
    if op.number == "float":
        out = np.zeros((1, op.pairs, 4), np.float32)
        out[0, :, :2] = values.reshape(-1, 2)
        return out
    return fixed16.encode(values).reshape(1, op.pairs, 4)


def output(op: Gemv, texture) -> np.ndarray:
    """The logits (float32 vector) from the output texture; their softmax where the net ends
    with one (on the CPU)."""
    pairs = texture[0, :op.pairs]
    values = pairs[..., :2] if op.number == "float" else fixed16.decode(pairs.reshape(-1, 2, 2))
    logits = np.asarray(values, np.float32).reshape(-1)[:op.cout]
    return ir.softmax(logits) if op.softmax else logits


def output_spec(op: Gemv) -> dict:
    """What a runtime needs to decode the logits texture (:func:`output`)."""
    return {"packs": 1, "kind": "logits", "number": op.number, "count": op.cout,
            "pairs": op.pairs, "softmax": op.softmax}


def saturated(op: Gemv, textures) -> bool:
    """Whether a fixed16 partial sum or logit hit the end of the range on the GPU;
    ``textures``: ``{tensor: stored}`` of this op's textures."""
    return op.number == "fixed16" and any(
        fixed16.saturated(t.reshape(*t.shape[:-1], 2, 2)).any() for t in textures.values())


def check(op: Gemv, shapes, limits):
    """Texture units and fetches of its multiply programs, the fixed16 range of its bias."""
    fits(op.name, "texture units", op.block + 1, limits.texture_units, limits)
    fits(op.name, "texel fetches per fragment", fetches(op, shapes), limits.fetches_per_fragment,
         limits)
    if op.number == "fixed16":
        fixed16.check(op.bias, op.name, "the bias")


def blocks_for(op: ir.Dense, shapes, limits) -> tuple[int, int]:
    """``(block, chunk)``: the most input packs one multiply program can read within the
    fetch and texture-unit limits (its weights: 4 fetches per pack; its input: 1 per pack
    and pixel; one unit for the weights texture), over all pixels (chunk 0); one pack over
    as many pixels as fit where one pack over all of them does not."""
    fetch, per_pack = limits.fetches_per_fragment, 4 + op.pixels(shapes)
    block = min(fetch // per_pack, limits.texture_units - 1)
    if block >= 1:
        return block, 0
    if fetch <= 4:
        raise LimitError(f"layer {op.name!r}: {limits.name} allows {fetch} texel fetches per "
                         "fragment, fewer than one input pack's 4 weights and a pixel")
    return 1, fetch - 4


def textures(op: Gemv, shapes) -> dict:
    """Textures of this op: ``{(name, index): (width, height, dtype)}``."""
    dtype = "f1" if op.number == "fixed16" else "f4"
    rows = op.reductions(shapes)
    out = {(f"{op.name}/weights", 0): (op.pairs, op.cin + 1, dtype)}
    for k, r in enumerate(rows[:-1]):
        out[(f"{op.name}/partial{k}", 0)] = (op.pairs, r, dtype)
    out[(op.name, 0)] = (op.pairs, 1, dtype)
    return out


def cost(op: Gemv, shapes, programs=None) -> Cost:
    rows = op.reductions(shapes)
    packs = ir.packs(op.cin)
    chunks = op.piece_count(shapes) // -(-packs // op.block)  # (each block reads every pixel)
    total = op.pairs * (4 * packs * chunks + packs * op.pixels(shapes))
    total += op.pairs * sum(r * min(op.reduce, prev) + (1 if r == 1 else 0)
                            for prev, r in zip(rows, rows[1:]))
    nbytes = sum(texture_bytes(*t) for t in textures(op, shapes).values())
    return Cost(multiply_adds=op.cin * op.cout, texel_fetches=total, texture_bytes=nbytes,
                programs=rows[0] + len(rows) - 1)


def prepare(op: ir.Dense, shapes, limits, options) -> Gemv:
    """``op`` as a :class:`Gemv` in the number format ``options["dense"]`` (compile's
    ``dense``; default ``"fixed16"``) with the largest blocks a multiply program can read
    within ``limits`` (:func:`blocks_for`)."""
    block, chunk = blocks_for(op, shapes, limits)
    ir_fields = {f.name: getattr(op, f.name) for f in fields(ir.Dense)}
    return Gemv(**ir_fields, number=options.get("dense", "fixed16"), block=block, chunk=chunk)


def tile(op: ir.Dense, step, reach):
    return None  # every logit reads every pixel


RECORD = register(ir.Dense, OpRecord(
    "Dense", passes=passes, apply=apply, check=check, cost=cost, tile=tile, textures=textures,
    constants=constants, stored=stored, output=output, output_spec=output_spec,
    saturated=saturated, prepare=prepare, prepared=Gemv, source_bytes=Gemv.source_bytes))
