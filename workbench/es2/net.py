"""OpenGL ES 2.0 back end: one ``#version 100`` fragment shader per 4 output channels.

``net = workbench.glsl.compile(model)`` lowers a Keras model to the IR, checks the ES 2.0
limits and generates the passes; ``net.run(image)`` runs them on the GPU (moderngl, headless
EGL), ``net.emulate(image)`` runs the numpy emulator that predicts the GPU's bytes,
``net.save(dir)`` writes the shaders and a JSON manifest, ``workbench.glsl.load(dir)`` reads
them back.

Each program is a small generator returning a :class:`Pass`: its source and its bindings.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from workbench import activations, cost, emulate, fixed16, ir, limits
from workbench.files import atomic_path, write_json

PRECISIONS = ("highp", "mediump")
CONVENTIONS = (
    "One RGBA8 texture per 4 channels (channel c = component c % 4 of pack c // 4); texture row "
    "r = tensor row r; pixel (col, row) = gl_FragCoord.xy - 0.5. Uniforms set from the tensor "
    "shapes: u_in_size = (width, height) of the first input tensor, u_out_size = of the output, "
    "u_pad = zero padding before the first column and row (TensorFlow 'SAME'). Samplers: "
    "CLAMP_TO_EDGE, filter as the binding says. A fullscreen quad is drawn per pass.")
VERTEX_SHADER = """#version 100
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
"""


@dataclass
class Binding:
    uniform: str
    tensor: str
    pack: int
    filter: str = "nearest"


@dataclass
class Pass:
    name: str
    op: str
    source: str
    inputs: list[Binding]
    output: tuple[str, int]
    uniforms: list[str] = field(default_factory=list)
    viewport: tuple[int, int, int, int] | None = None  # (x, y, width, height); None: all


# --- GLSL text ------------------------------------------------------------------------------

def _f(v) -> str:
    """A float32 as a GLSL ES 1.00 literal that reads back exactly."""
    s = f"{float(np.float32(v)):.9g}"
    return s if any(ch in s for ch in ".en") else s + ".0"


def _vec(values, n=4) -> str:
    values = list(values) + [0.0] * (n - len(values))
    return f"vec{n}({', '.join(_f(v) for v in values)})"


def _header(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "mediump":
        return "#version 100\nprecision mediump float;\n"
    return ("#version 100\n#ifdef GL_FRAGMENT_PRECISION_HIGH\nprecision highp float;\n"
            "precision highp sampler2D;\n#else\nprecision mediump float;\n#endif\n")


def _uniforms(samplers, vectors):
    return "".join(f"uniform sampler2D {s};\n" for s in samplers) + \
        "".join(f"uniform vec2 {v};\n" for v in vectors)


_FETCH_MASKED = """vec4 fetch(sampler2D s, vec2 p) {
    vec2 inside = step(vec2(0.0), p) * step(p, u_in_size);
    return texture2D(s, p / u_in_size) * (inside.x * inside.y);
}
"""
_FETCH = """vec4 fetch(sampler2D s, vec2 p) {
    return texture2D(s, p / u_in_size);
}
"""


def conv_pass(op: ir.Conv, pack: int, precision="highp") -> Pass:
    """Output channels ``4*pack .. 4*pack+3`` of a convolution (+ residual) + activation."""
    in_packs = op.input_packs(pack)
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    outs = list(range(pack * ir.PACK, min(pack * ir.PACK + ir.PACK, op.cout)))
    _, count = op.group_channels(pack)  # the group's channels are 0..count-1 of the kernel
    vectors = ["u_in_size", "u_pad"]
    if op.residual:
        samplers.append("u_res")
        bindings.append(Binding("u_res", op.residual, pack))
        vectors.append("u_out_size")
    masked = op.padding == "same" and op.size > 1
    body = [f"    vec2 base = (gl_FragCoord.xy - 0.5) * {_f(op.stride)} + 0.5 - u_pad;",
            f"    vec4 sum = {_vec(op.bias[outs])};"]
    for dy in range(op.size):
        for dx in range(op.size):
            where = f"base + vec2({_f(dx)}, {_f(dy)})"
            if op.luma_input:
                w = op.kernel[dy, dx, 0, outs]
                body.append(f"    sum += {_vec(w)} * dot(fetch(u_in0, {where}).rgb, "
                            f"{_vec(ir.LUMA, 3)});")
                continue
            for j, sampler in enumerate(samplers[:len(in_packs)]):
                chans = range(j * ir.PACK, min((j + 1) * ir.PACK, count))
                m = np.zeros((4, 4), np.float32)  # m[i, o]: input component i -> output o
                for i, c in enumerate(chans):
                    m[i, :len(outs)] = op.kernel[dy, dx, c, outs]
                if np.any(m):
                    # GLSL mat4(...) is column-major: column i holds input component i.
                    body.append(f"    sum += mat4({', '.join(_f(v) for v in m.ravel())}) * "
                                f"fetch({sampler}, {where});")
    if op.residual:
        body.append("    sum += texture2D(u_res, gl_FragCoord.xy / u_out_size);")
    body.append(f"    gl_FragColor = {activations.get(op.activation).glsl.format(x='sum')};")
    source = (_header(precision) + _uniforms(samplers, vectors)
              + (_FETCH_MASKED if masked else _FETCH)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, bindings, (op.name, pack), vectors)


def depth_to_space_pass(op: ir.DepthToSpace, pack: int, shapes, precision="highp") -> Pass:
    """Depth-to-space; with ``chroma_from`` the SR demux: the sub-pixel luma plus the chroma
    of the input image sampled bilinearly (a luma change added equally to R, G and B leaves
    Cb and Cr unchanged, since their weights sum to 0 and Y's to 1)."""
    in_packs = op.source_packs(shapes, pack)
    samplers = [f"u_in{i}" for i in range(len(in_packs))]
    bindings = [Binding(s, op.input, p) for s, p in zip(samplers, in_packs)]
    b = _f(op.block)
    body = ["    vec2 o = gl_FragCoord.xy - 0.5;",
            f"    vec2 lr = floor((o + 0.5) / {b});",
            f"    vec2 sub = o - lr * {b};",
            f"    float s = sub.y * {b} + sub.x;",
            "    vec2 uv = (lr + 0.5) / u_in_size;"]
    body += [f"    vec4 t{p} = texture2D({s}, uv);" for s, p in zip(samplers, in_packs)]
    body.append("    vec4 v = vec4(0.0);")
    for s, chans in enumerate(op.source_channels(shapes, pack)):
        parts = [f"t{c // ir.PACK}.{'xyzw'[c % ir.PACK]}" for c in chans]
        body.append(f"    v += vec4({', '.join(parts + ['0.0'] * (4 - len(parts)))}) * "
                    f"(1.0 - step(0.5, abs(s - {_f(s)})));")
    vectors = ["u_in_size"]
    if op.chroma_from:
        # Bilinear chroma with half-pixel centres and clamped edges, computed from 4 nearest
        # fetches in float: a GL_LINEAR sampler on RGBA8 filters with 8-bit weights on
        # llvmpipe, which would not match the emulator byte for byte.
        samplers.append("u_image")
        bindings.append(Binding("u_image", op.chroma_from, 0))
        vectors.append("u_out_size")
        body += ["    vec2 u = (o + 0.5) / " + b + " - 0.5;",
                 "    vec2 i0 = floor(u);",
                 "    vec2 f = u - i0;",
                 "    vec2 lo = (clamp(i0, vec2(0.0), u_in_size - 1.0) + 0.5) / u_in_size;",
                 "    vec2 hi = (clamp(i0 + 1.0, vec2(0.0), u_in_size - 1.0) + 0.5) / u_in_size;",
                 "    vec3 rgb = mix(mix(texture2D(u_image, lo).rgb, "
                 "texture2D(u_image, vec2(hi.x, lo.y)).rgb, f.x),",
                 "                   mix(texture2D(u_image, vec2(lo.x, hi.y)).rgb, "
                 "texture2D(u_image, hi).rgb, f.x), f.y);",
                 f"    gl_FragColor = vec4(rgb + (v.x - dot(rgb, {_vec(ir.LUMA, 3)})), 1.0);"]
    else:
        body.append("    gl_FragColor = v;")
    source = (_header(precision) + _uniforms(samplers, vectors)
              + "void main() {\n" + "\n".join(body) + "\n}\n")
    return Pass(f"{op.name}.{pack}", op.name, source, bindings, (op.name, pack), vectors)


def _number_glsl(op: ir.Dense):
    """enc2/dec2 (two values per texel) and wdec (a weight pair) for the op's number format."""
    if op.number == "float":
        return ("vec4 enc2(vec2 v) { return vec4(v, 0.0, 0.0); }\n"
                "vec2 dec2(vec4 t) { return t.xy; }\nvec2 wdec(vec4 t) { return t.xy; }\n")
    return fixed16.GLSL + f"vec2 wdec(vec4 t) {{ return dec2(t) / {_f(2 ** op.weight_shift)}; }}\n"


def dense_passes(op: ir.Dense, shapes, precision="highp") -> list[Pass]:
    """The blocked GEMV: one multiply program per block of input packs (each writes one row
    of partial sums), then reduction passes; the last adds the bias row."""
    h, w, _ = shapes[op.input]
    pixels = [(x, y) for y in range(h) for x in range(w)] if op.pool else [(0, 0)]
    rows_w = op.cin + 1
    head = _header(precision) + _number_glsl(op)
    passes = []
    for row, block in enumerate(op.blocks()):
        samplers = [f"u_in{k}" for k in range(len(block))] + ["u_w"]
        bindings = [Binding(s_, op.input, p) for s_, p in zip(samplers, block)]
        bindings.append(Binding("u_w", f"{op.name}/weights", 0))
        body = [f"    float x = gl_FragCoord.x / {_f(op.pairs)};", "    vec2 acc = vec2(0.0);",
                "    vec4 s;"]
        for k, pack in enumerate(block):
            taps = " + ".join(f"texture2D(u_in{k}, vec2({_f((px + 0.5) / w)}, {_f((py + 0.5) / h)}))"
                              for px, py in pixels)
            body.append(f"    s = {taps};")
            for i in range(min(4, op.cin - 4 * pack)):
                c = 4 * pack + i
                body.append(f"    acc += wdec(texture2D(u_w, vec2(x, {_f((c + 0.5) / rows_w)})))"
                            f" * s.{'xyzw'[i]};")
        body.append(f"    gl_FragColor = enc2(acc / {_f(len(pixels))});")
        source = head + _uniforms(samplers, []) + "void main() {\n" + "\n".join(body) + "\n}\n"
        passes.append(Pass(f"{op.name}.multiply{row}", op.name, source, bindings,
                           (f"{op.name}/partial0", 0), [], (0, row, op.pairs, 1)))
    rows = op.reductions()
    for k, (prev, r) in enumerate(zip(rows, rows[1:])):
        last = r == 1 and k == len(rows) - 2
        source_key = f"{op.name}/partial{k}"
        target = (op.name, 0) if last else (f"{op.name}/partial{k + 1}", 0)
        samplers = ["u_p"] + (["u_w"] if last else [])
        bindings = [Binding("u_p", source_key, 0)]
        body = [f"    float x = gl_FragCoord.x / {_f(op.pairs)};",
                f"    float first = (gl_FragCoord.y - 0.5) * {_f(op.reduce)};",
                "    vec2 acc = vec2(0.0);"]
        for t in range(min(op.reduce, prev)):
            body.append(f"    acc += dec2(texture2D(u_p, vec2(x, (first + {_f(t + 0.5)}) / {_f(prev)})))"
                        f" * step(first + {_f(t)}, {_f(prev - 0.5)});")
        if last:
            bindings.append(Binding("u_w", f"{op.name}/weights", 0))
            bias = "dec2" if op.number == "fixed16" else "wdec"
            body.append(f"    acc += {bias}(texture2D(u_w, vec2(x, {_f((op.cin + 0.5) / rows_w)})));")
        body.append("    gl_FragColor = enc2(acc);")
        source = head + _uniforms(samplers, []) + "void main() {\n" + "\n".join(body) + "\n}\n"
        passes.append(Pass(f"{op.name}.reduce{k}", op.name, source, bindings, target, []))
    return passes


def dense_weight_texture(op: ir.Dense) -> np.ndarray:
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


def generate(graph: ir.Graph, precision="highp") -> list[Pass]:
    """All passes of ``graph``, in execution order."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    passes = []
    for op in graph.ops:
        if isinstance(op, ir.Conv):
            passes += [conv_pass(op, p, precision) for p in range(op.out_packs())]
        elif isinstance(op, ir.DepthToSpace):
            passes += [depth_to_space_pass(op, p, shapes, precision)
                       for p in range(op.out_packs(shapes))]
        elif isinstance(op, ir.Dense):
            passes += dense_passes(op, shapes, precision)
        else:
            raise limits.LimitError(f"layer {op.name!r}: no ES 2.0 shader for {type(op).__name__}")
    return passes


# --- the compiled net -----------------------------------------------------------------------

class Net:
    """A net as ES 2.0 passes.  Images are HxWxC float in [0, 1] (HxWx3 RGB for luma nets)."""

    def __init__(self, graph: ir.Graph, passes: list[Pass], precision="highp"):
        self.graph, self.passes, self.precision = graph, passes, precision
        self._runner = None

    @property
    def runner(self):
        """The GL runner, created (and every program compiled) on first use."""
        if self._runner is None:
            from workbench.gl import Runner
            constants = {(f"{op.name}/weights", 0): dense_weight_texture(op)
                         for op in self.graph.ops if isinstance(op, ir.Dense)}
            self._runner = Runner(self.graph, self.passes, VERTEX_SHADER, constants)
        return self._runner

    @property
    def compile_seconds(self):
        return self.runner.compile_seconds

    @property
    def timings(self):
        """Seconds per pass of the last :meth:`run`."""
        return self.runner.timings

    def run(self, image, keep=False):
        """Run on the GPU: the output as float32 (an image in 8-bit levels, or the logits of a
        dense layer), or with ``keep`` every texture as stored, ``{tensor: HxWx(4*packs)}``
        (uint8 for RGBA8, float32 for RGBA32F).  A dense layer's fixed-point overflow raises
        :class:`workbench.fixed16.FixedPointOverflow`."""
        arrays = self.runner.run(image, keep=keep)
        tensors = {}
        for (name, pack) in sorted(arrays, key=lambda k: k[1]):
            a = arrays[name, pack]
            tensors[name] = a if name not in tensors else np.concatenate([tensors[name], a], -1)
        self._check_overflow(tensors, image)
        return tensors if keep else output_values(self.graph, tensors[self.graph.output])

    def _check_overflow(self, tensors, image):
        """Saturated fixed16 codes on the GPU: let the emulator say where and how far."""
        for op in self.graph.ops:
            if isinstance(op, ir.Dense) and op.number == "fixed16":
                stored = [t for name, t in tensors.items() if name.split("/")[0] == op.name]
                if any(fixed16.saturated(t.reshape(*t.shape[:-1], 2, 2)).any() for t in stored):
                    self.emulate(image)  # raises FixedPointOverflow with the exact values
                    raise fixed16.FixedPointOverflow(
                        f"layer {op.name!r}: a partial sum saturated the 16-bit fixed-point "
                        "range on the GPU")

    def emulate(self, image, keep=False):
        """The numpy emulator's prediction of :meth:`run`."""
        return emulate.run(self.graph, image, keep=keep)

    def cost(self, hw) -> dict[str, cost.Cost]:
        """Cost of every op for an input of ``hw = (height, width)``."""
        return self.graph.cost(hw)

    def export_webgl(self, directory, labels=None):
        """Write a static web page that runs this net with WebGL 1.0 (net.save's files, the
        page, ``webgl.json``); returns the path of its ``index.html``.  See
        :mod:`workbench.webgl`."""
        from workbench import webgl
        return webgl.export(self, directory, labels)

    def save(self, directory):
        """Write ``<pass>.glsl`` files, ``vertex.glsl``, ``weights.npz`` and ``manifest.json``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for p in self.passes:
            with atomic_path(directory / f"{p.name}.glsl") as tmp:
                tmp.write_text(p.source)
        with atomic_path(directory / "vertex.glsl") as tmp:
            tmp.write_text(VERTEX_SHADER)
        weights, ops = {}, []
        for op in self.graph.ops:
            desc = {"type": type(op).__name__}
            for key, value in vars(op).items():
                if isinstance(value, np.ndarray):
                    weights[f"{op.name}/{key}"] = value
                else:
                    desc[key] = value
            ops.append(desc)
        with atomic_path(directory / "weights.npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **weights)
        constants = {}
        for op in self.graph.ops:
            if isinstance(op, ir.Dense):  # the weights texture, as uploaded (HxWx4)
                constants[f"{op.name}/weights"] = f"{op.name}.weights.npy"
                with atomic_path(directory / constants[f"{op.name}/weights"]) as tmp:
                    with open(tmp, "wb") as f:
                        np.save(f, dense_weight_texture(op))
        hw = self.graph.input_size or (256, 256)
        write_json(directory / "manifest.json", {
            "format": "workbench-es2/1",
            "name": self.graph.name,
            "precision": self.precision,
            "conventions": CONVENTIONS,
            "input": asdict(self.graph.input),
            "input_size": self.graph.input_size,
            "output": self.graph.output,
            "vertex_shader": "vertex.glsl",
            "tensors": {name: {"channels": c, "packs": ir.packs(c)}
                        for name, (h, w, c) in self.graph.shapes(hw).items()},
            "textures_for_input": {"height": hw[0], "width": hw[1], "textures": [
                {"tensor": k[0], "index": k[1], "width": w, "height": h,
                 "format": "RGBA8" if dtype == "f1" else "RGBA32F"}
                for k, (w, h, dtype) in self.graph.textures(hw).items()]},
            "constant_textures": constants,
            "ops": ops,
            "passes": [{"name": p.name, "op": p.op, "shader": f"{p.name}.glsl",
                        "inputs": [asdict(b) for b in p.inputs],
                        "output": {"tensor": p.output[0], "pack": p.output[1]},
                        "uniforms": p.uniforms, "viewport": p.viewport} for p in self.passes],
        })


def output_values(graph: ir.Graph, stored):
    """The net's output from its stored texture: an image in [0, 1] (HxWxC float32), or the
    logits of a dense layer (float32 vector)."""
    op = graph.op(graph.output)
    if isinstance(op, ir.Dense):
        pairs = stored[0, :op.pairs]
        values = pairs[..., :2] if op.number == "float" else fixed16.decode(pairs.reshape(-1, 2, 2))
        return np.asarray(values, np.float32).reshape(-1)[:op.cout]
    return (stored[..., :graph.channels(op.name)] / np.float32(255)).astype(np.float32)


def compile(model, precision="highp", luma_input=None, limits_table=limits.ES2,
            dense="fixed16", target="es2", **options) -> Net:
    """Keras model -> IR -> ES 2.0 limits check -> passes.  See the module docstring.

    ``target="es31"``: OpenGL ES 3.1 compute shaders instead (:func:`workbench.es31.compile`;
    ``options``: ``storage="rgba32f"|"rgba16f"``, ``local_size``, ``max_outputs``, ``tile``)."""
    if target == "es31":
        from workbench import es31
        return es31.compile(model, luma_input=luma_input, **options)
    if target != "es2" or options:
        raise ValueError(f"target must be 'es2' or 'es31' (options only for es31), not {target!r}")
    graph = ir.from_keras(model, luma_input=luma_input, dense=dense)
    limits.check(graph, limits_table)
    return Net(graph, generate(graph, precision), precision)


def load(directory) -> Net:
    """Read a net written by :meth:`Net.save` (shaders as saved, graph for shapes/emulator)."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path}: no manifest; is this a saved net?")
    manifest = json.loads(manifest_path.read_text())
    with np.load(directory / "weights.npz") as npz:
        weights = dict(npz)
    ops = []
    for desc in manifest["ops"]:
        kind = getattr(ir, desc.pop("type"))
        arrays = {k.split("/", 1)[1]: v for k, v in weights.items()
                  if k.split("/", 1)[0] == desc["name"]}
        if desc.get("input_order") is not None:
            desc["input_order"] = tuple(desc["input_order"])
        ops.append(kind(**desc, **arrays))
    size = manifest.get("input_size")
    graph = ir.Graph(ir.Input(**manifest["input"]), ops, manifest["output"], manifest["name"],
                     tuple(size) if size else None)
    passes = [Pass(p["name"], p["op"], (directory / p["shader"]).read_text(),
                   [Binding(**b) for b in p["inputs"]],
                   (p["output"]["tensor"], p["output"]["pack"]), p["uniforms"],
                   tuple(p["viewport"]) if p.get("viewport") else None)
              for p in manifest["passes"]]
    return Net(graph, passes, manifest["precision"])
