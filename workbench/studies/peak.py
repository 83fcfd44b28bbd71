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
"""
from __future__ import annotations

from functools import cache

import numpy as np

from workbench import timings

MADS, CHAINS, SIDE, RUNS = 256, 1, 1024, 7
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


# A draw of the peak shader in the page, timed to a 1-pixel readPixels (ms each).
BROWSER_JS = """({vertex, fragment, side, runs, uniforms}) => {
  const gl = document.createElement("canvas").getContext("webgl");
  const shader = (kind, source) => {
    const s = gl.createShader(kind);
    gl.shaderSource(s, source);
    gl.compileShader(s);
    return s;
  };
  const program = gl.createProgram();
  gl.attachShader(program, shader(gl.VERTEX_SHADER, vertex));
  gl.attachShader(program, shader(gl.FRAGMENT_SHADER, fragment));
  gl.linkProgram(program);
  if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw gl.getProgramInfoLog(program);
  gl.useProgram(program);
  for (const [name, value] of Object.entries(uniforms))
    gl.uniform4fv(gl.getUniformLocation(program, name), value);
  gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
  const at = gl.getAttribLocation(program, "a_pos");
  gl.enableVertexAttribArray(at);
  gl.vertexAttribPointer(at, 2, gl.FLOAT, false, 0, 0);
  const texture = gl.createTexture();
  gl.bindTexture(gl.TEXTURE_2D, texture);
  gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, side, side, 0, gl.RGBA, gl.UNSIGNED_BYTE, null);
  gl.bindFramebuffer(gl.FRAMEBUFFER, gl.createFramebuffer());
  gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
  gl.viewport(0, 0, side, side);
  const pixel = new Uint8Array(4), ms = [];
  for (let i = 0; i <= runs; i++) {
    const start = performance.now();
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
    gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, pixel);
    if (i > 0) ms.push(performance.now() - start);
  }
  gl.getExtension("WEBGL_lose_context")?.loseContext();
  return ms;
}"""


def browser_peak(page, where) -> dict:
    """The peak of the WebGL of a Playwright ``page`` (:func:`summary`, ``where`` as given)."""
    ms = page.evaluate(BROWSER_JS, {"vertex": VERTEX, "fragment": fragment_source(),
                                    "side": SIDE, "runs": RUNS, "uniforms": UNIFORMS})
    return summary(ms, SIDE * SIDE * multiply_adds_per_fragment(), where)


def rate_cells(multiply_adds, ms, peak_gmacs) -> dict:
    """``{"GMAC/s", "% of peak"}`` of ``multiply_adds`` in ``ms`` against ``peak_gmacs``
    (None: no peak, an empty cell), as table cells."""
    rate = gmacs(multiply_adds, ms)
    return {"GMAC/s": f"{rate:.2f}",
            "% of peak": f"{share(rate, peak_gmacs):.1f}" if peak_gmacs else None}
