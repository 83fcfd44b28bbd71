"""How far a run is from the limit: a GL's measured peak of multiply-adds, and a run's rate.

The peak (:func:`gl_peak`, :func:`browser_peak`): one fullscreen draw of a plain fragment
shader (:func:`fragment_source`) doing :data:`MADS` vec4 multiply-adds a fragment in
:data:`CHAINS` accumulator(s) (a vec4's 4 components are already 4 independent chains, and
llvmpipe runs 8 fragments a SIMD instruction; on llvmpipe 2, 4 or 8 accumulators measured
slower than 1: 10-14 against 18 GMAC/s, interleaved), the inputs uniforms and
``gl_FragCoord`` (nothing the compiler can fold), over :data:`SIDE` x :data:`SIDE` fragments;
the median of :data:`RUNS` timed draws after an untimed one, each until ``glFinish``
(natively) or a 1-pixel ``readPixels`` (WebGL).  Conventions: a vec4 multiply-add is 4
multiply-adds (MACs); G = 1e9; a rate is multiply-adds over a median time; its share of a
peak in %.  A peak is measured, not a bound: a layer may beat it where the machine was less
busy, or where its compiled code overlaps better than one chain does.

In the page (:func:`browser_peak`) the peak shader is drawn in rounds with other forms of
work (:data:`FORMS`), one draw of each a round, so that their times share the machine's load:
the same multiply-adds in 4 chains, as ``mat4`` products with literal weights
(:func:`mat4_source`: the form of a convolution program's products, each weight a literal
used once) and :data:`FETCHES` texel fetches (:func:`fetch_source`): what the GL's JIT makes
of each, and a fetch's cost in multiply-adds of the ``mat4`` form.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from workbench import timings
from workbench.glsl_text import glsl_float

MADS, CHAINS, SIDE, RUNS = 256, 1, 1024, 7
FETCHES = 64  # texel fetches a fragment of the fetch form
KEY = ("peak", 0)  # the worker's texture the peak draws into
VERTEX = ("#version 100\nattribute vec2 a_pos;\n"
          "void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }\n")
UNIFORMS = {"u_x": (0.1, 0.2, 0.3, 0.4), "u_m": (0.5, 0.5, 0.5, 0.5),
            "u_a": (0.25, 0.25, 0.25, 0.25)}  # x -> 0.5 m + 0.25: bounded, never denormal


def fragment_source(mads=MADS, chains=CHAINS) -> str:
    """The peak's fragment shader: ``mads`` lines ``xi = xi * u_m + u_a;`` (vec4), round robin
    over ``chains`` accumulators; no other line multiplies."""
    lines = ["#version 100", "precision highp float;", "uniform vec4 u_x, u_m, u_a;",
             "void main() {"]
    lines += [f"  vec4 x{i} = u_x + gl_FragCoord.xyxy + vec4({i}.0);" for i in range(chains)]
    lines += [f"  x{k % chains} = x{k % chains} * u_m + u_a;" for k in range(mads)]
    lines += ["  gl_FragColor = " + " + ".join(f"x{i}" for i in range(chains)) + ";", "}"]
    return "\n".join(lines) + "\n"


def multiply_adds_per_fragment(mads=MADS) -> int:
    """4 a vec4 multiply-add."""
    return 4 * mads


def mat4_source(products=MADS // 4) -> str:
    """``products`` lines ``s += mat4(<16 literals>) * v;`` (16 multiply-adds each, every
    weight a distinct literal, as a convolution program's products are), ``v`` from the
    uniforms and ``gl_FragCoord``."""
    weights = np.random.default_rng(0).uniform(-0.5, 0.5, (products, 16))
    lines = ["#version 100", "precision highp float;", "uniform vec4 u_x, u_a;",
             "void main() {", "  vec4 v = u_x + gl_FragCoord.xyxy;", "  vec4 s = u_a;"]
    lines += ["  s += mat4(" + ", ".join(glsl_float(w) for w in row) + ") * v;"
              for row in weights]
    return "\n".join(lines + ["  gl_FragColor = s;", "}"]) + "\n"


def fetch_source(fetches=FETCHES) -> str:
    """``fetches`` texel fetches a fragment (an 8-texel-wide window of the texture ``u_t``,
    NEAREST, as the page samples its tensors), each added to the sum."""
    lines = ["#version 100", "precision highp float;", "uniform vec4 u_a, u_step;",
             "uniform sampler2D u_t;", "void main() {",
             "  vec2 uv = gl_FragCoord.xy * u_step.xy;", "  vec4 s = u_a;"]
    lines += [f"  s += texture2D(u_t, uv + vec2({k % 8}.0, {k // 8}.0) * u_step.xy);"
              for k in range(fetches)]
    return "\n".join(lines + ["  gl_FragColor = s;", "}"]) + "\n"


# The forms of :func:`browser_peak`: name -> (fragment shader, multiply-adds a fragment).
FORMS = {"1 chain": (fragment_source(), multiply_adds_per_fragment()),
         "4 chains": (fragment_source(chains=4), multiply_adds_per_fragment()),
         "mat4 literals": (mat4_source(), multiply_adds_per_fragment()),
         f"{FETCHES} fetches": (fetch_source(), 0)}
PEAK_FORM, MAT4_FORM, FETCH_FORM = "1 chain", "mat4 literals", f"{FETCHES} fetches"


def net_multiply_adds(net, hw) -> int:
    """A compiled net's multiply-adds for one input of ``hw`` (its ops' costs summed)."""
    return sum(c.multiply_adds for c in net.cost(hw).values())


def gmacs(multiply_adds, ms) -> float:
    """G multiply-adds a second: ``multiply_adds`` in ``ms`` milliseconds."""
    return multiply_adds / (ms * 1e6)


def share(rate, peak) -> float:
    """``rate`` as % of ``peak`` (both G a second)."""
    return 100 * rate / peak


def summary(ms, multiply_adds, where) -> dict:
    """A peak from timed draws ``ms`` of ``multiply_adds`` each: ``{"gmacs": at the median
    time, "q1", "q3": at the quartiles' times (q1 the slower), "runs_ms", "multiply_adds",
    "where"}``."""
    lo, hi = timings.quartiles(ms)
    return {"gmacs": gmacs(multiply_adds, float(np.median(ms))), "q1": gmacs(multiply_adds, hi),
            "q3": gmacs(multiply_adds, lo), "runs_ms": [float(t) for t in ms],
            "multiply_adds": multiply_adds, "where": where,
            "shader": f"{MADS} vec4 multiply-adds a fragment in {CHAINS} chain(s), "
                      f"{SIDE}x{SIDE} fragments, median of {len(ms)} draws"}


def fetch_cost(forms) -> dict:
    """What a texel fetch costs a fragment, from :func:`browser_peak`'s ``forms`` (ms of
    each draw): ``{"ns": at the fetch form's median, "macs": that time in multiply-adds of
    the mat4 form}``."""
    ns = 1e6 * float(np.median(forms[FETCH_FORM])) / (SIDE * SIDE * FETCHES)
    mat4_ns = 1e6 * float(np.median(forms[MAT4_FORM])) / (SIDE * SIDE * FORMS[MAT4_FORM][1])
    return {"ns": ns, "macs": ns / mat4_ns}


def peak_text(p) -> str:
    """``"N GMAC/s (q1-q3)"`` of a :func:`summary`."""
    return f"{p['gmacs']:.1f} GMAC/s ({p['q1']:.1f}-{p['q3']:.1f})"


@cache
def gl_peak() -> dict:
    """This machine's GL (the GL worker's: llvmpipe here), measured once a process
    (:func:`summary`; ``where``: its GL_RENDERER)."""
    from workbench import gl

    worker = gl.worker()
    _, [program] = worker.call("compile", vertex=VERTEX, fragments=[fragment_source()])
    sizes = {KEY: (SIDE, SIDE, "f1")}
    worker.call("allocate", sizes=sizes)
    worker.allocation = sizes  # not a net's: its runner allocates its own again
    draw = {"program": program, "inputs": [], "uniforms": UNIFORMS, "outputs": [KEY],
            "viewport": None}
    worker.call("run", uploads={}, passes=[draw], reads=[])
    seconds, _ = worker.call("run", uploads={}, passes=[draw] * RUNS, reads=[])
    return summary([1e3 * s for s in seconds], SIDE * SIDE * multiply_adds_per_fragment(),
                   worker.info["GL_RENDERER"])


# Rounds of one draw of each fragment shader in the page, each timed to a 1-pixel readPixels
# (ms, a list a shader); the fetch form reads a SIDE x SIDE RGBA8 texture, NEAREST.
BROWSER_JS = """({vertex, fragments, side, runs, uniforms}) => {
  const gl = document.createElement("canvas").getContext("webgl");
  const shader = (kind, source) => {
    const s = gl.createShader(kind);
    gl.shaderSource(s, source);
    gl.compileShader(s);
    return s;
  };
  const vs = shader(gl.VERTEX_SHADER, vertex);
  const programs = fragments.map((fragment) => {
    const program = gl.createProgram();
    gl.attachShader(program, vs);
    gl.attachShader(program, shader(gl.FRAGMENT_SHADER, fragment));
    gl.bindAttribLocation(program, 0, "a_pos");
    gl.linkProgram(program);
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw gl.getProgramInfoLog(program);
    gl.useProgram(program);
    for (const [name, value] of Object.entries(uniforms))
      gl.uniform4fv(gl.getUniformLocation(program, name), value);
    return program;
  });
  gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
  gl.enableVertexAttribArray(0);
  gl.vertexAttribPointer(0, 2, gl.FLOAT, false, 0, 0);
  const texture = (data) => {
    const t = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, t);
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    for (const p of [gl.TEXTURE_WRAP_S, gl.TEXTURE_WRAP_T]) gl.texParameteri(gl.TEXTURE_2D, p, gl.CLAMP_TO_EDGE);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, side, side, 0, gl.RGBA, gl.UNSIGNED_BYTE, data);
    return t;
  };
  const target = texture(null);
  texture(Uint8Array.from({ length: 4 * side * side }, (_, i) => (37 * i) & 255)); // unit 0: u_t
  gl.bindFramebuffer(gl.FRAMEBUFFER, gl.createFramebuffer());
  gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, target, 0);
  gl.viewport(0, 0, side, side);
  const pixel = new Uint8Array(4), ms = programs.map(() => []);
  for (let i = 0; i <= runs; i++) {
    programs.forEach((program, j) => {
      gl.useProgram(program);
      const start = performance.now();
      gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
      gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, pixel);
      if (i > 0) ms[j].push(performance.now() - start);
    });
  }
  gl.getExtension("WEBGL_lose_context")?.loseContext();
  return ms;
}"""


def browser_peak(page, where) -> dict:
    """The peak of the WebGL of a Playwright ``page`` (:func:`summary` of :data:`PEAK_FORM`,
    ``where`` as given), measured in rounds with the other :data:`FORMS` (an untimed round,
    then :data:`RUNS`); ``forms``: each form's :func:`summary` (the fetch form's ms only,
    ``runs_ms``), ``fetch``: :func:`fetch_cost`."""
    uniforms = {**UNIFORMS, "u_step": (1 / SIDE, 1 / SIDE, 0.0, 0.0)}  # the fetch form's
    ms = page.evaluate(BROWSER_JS, {"vertex": VERTEX, "fragments": [f for f, _ in FORMS.values()],
                                    "side": SIDE, "runs": RUNS, "uniforms": uniforms})
    timed = dict(zip(FORMS, ms))
    forms = {name: summary(timed[name], SIDE * SIDE * macs, where) if macs
             else {"runs_ms": [float(t) for t in timed[name]]}
             for name, (_, macs) in FORMS.items()}
    return {**forms[PEAK_FORM], "forms": forms, "fetch": fetch_cost(timed)}


def forms_text(p) -> str | None:
    """The forms of a :func:`browser_peak` in one sentence (None for a peak without them)."""
    if "forms" not in p:
        return None
    rates = ", ".join(f"{name} {f['gmacs']:.1f}" for name, f in p["forms"].items() if "gmacs" in f)
    fetch = p["fetch"]
    return (f"GMAC/s of each form drawn in the same rounds: {rates} (mat4 literals: "
            f"{FORMS[MAT4_FORM][1] // 16} products mat4(16 literal weights) * vec4 a fragment, "
            "a convolution program's form); a texel fetch (RGBA8, NEAREST) costs a fragment "
            f"{fetch['ns']:.1f} ns, {fetch['macs']:.0f} multiply-adds of the mat4 form")


def rate_cells(multiply_adds, ms, peak_gmacs) -> dict:
    """``{"GMAC/s", "% of peak"}`` of ``multiply_adds`` in ``ms`` against ``peak_gmacs``
    (None: no peak, an empty cell), as table cells."""
    rate = gmacs(multiply_adds, ms)
    return {"GMAC/s": f"{rate:.2f}",
            "% of peak": f"{share(rate, peak_gmacs):.1f}" if peak_gmacs else None}
