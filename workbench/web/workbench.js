/* Runs a net exported by workbench.web with WebGL 1.0 (= OpenGL ES 2.0, GLSL ES 1.00).
 *
 * Reads net.save's manifest.json (passes, bindings, uniforms, constant textures) and shaders,
 * and webgl.json (each op's shape rule; see workbench/web/page.py).  Conventions as
 * workbench/es2/runner.py and gl/fragment.py: one RGBA8 texture per pack of 4 channels (channel c is
 * component c % 4 of pack c / 4), texture row r = tensor row r = image row r counted from the
 * top, CLAMP_TO_EDGE, NEAREST unless a binding says "linear"; a fullscreen quad per pass into
 * the pass's output textures (whole texture, or the pass's viewport; several outputs are the
 * draw buffers of one framebuffer with WEBGL_draw_buffers, else the pass is split:
 * fitDrawBuffers); uniforms u_in_size / u_out_size = (width, height) of the first input /
 * the output tensor, u_pad = TensorFlow 'SAME' padding (left, top).  Output read back with
 * readPixels; logits decoded from 16-bit fixed point (or float) and put through a softmax
 * here, on the CPU.
 *
 * URL parameters: image=URL; repeat=N (time N more runs without the per-pass waits); check=1
 * (run the embedded self-check of export-web --check: a device report, see runCheck);
 * max_texture_size=N, max_texture_image_units=N, max_draw_buffers=N, no_float_textures=1,
 * no_webgl=1, no_draw_buffers=1 (act as if the browser's limit were that small, or it lacked the
 * extension).  An image over MAX_TEXTURE_SIZE runs in overlapping tiles when webgl.json
 * gives the net's receptive_field (runImage).
 * State in document.body.dataset.state: loading, ready, running, done, error.
 * No framework, no build step, nothing fetched from the network but the files next to the page.
 */
"use strict";

const PACK = 4;
const packs = (channels) => Math.ceil(channels / PACK);
const textureKey = (tensor, index) => `${tensor}#${index}`;
const $ = (id) => document.getElementById(id);

/** A browser limit too small for the net or the image; the message names the limit. */
class LimitError extends Error {}

// --- loading the exported files ---------------------------------------------------------------

async function fetchFile(url, as) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    const hint = location.protocol === "file:"
      ? " Browsers do not let a page opened from file:// read its files: serve the folder, "
        + "e.g. `python3 -m http.server --bind 127.0.0.1 -d <folder>`, and open http://localhost:8000/."
      : "";
    throw new Error(`could not fetch ${url} (${error.message}).${hint}`);
  }
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}; is this folder an export of workbench.web?`);
  return response[as]();
}

/** A .npy file (uint8 '|u1' or float32 '<f4', C order) as {shape, data}. */
function parseNpy(buffer, name) {
  const bytes = new Uint8Array(buffer);
  if (bytes[0] !== 0x93 || String.fromCharCode(...bytes.slice(1, 6)) !== "NUMPY") {
    throw new Error(`${name}: not a .npy file`);
  }
  const view = new DataView(buffer);
  const [start, length] = bytes[6] === 1 ? [10, view.getUint16(8, true)] : [12, view.getUint32(8, true)];
  const header = new TextDecoder().decode(bytes.slice(start, start + length));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").filter((s) => s.trim()).map(Number);
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${name}: Fortran order is not supported`);
  const body = buffer.slice(start + length);
  if (descr === "|u1") return { shape, data: new Uint8Array(body) };
  if (descr === "<f4") return { shape, data: new Float32Array(body) };
  throw new Error(`${name}: dtype ${descr} is not supported (uint8 or float32)`);
}

/** The exported files next to the page, or in the folder `base` ("variant/") beside it. */
async function loadNet(base = "") {
  const get = (file, as) => fetchFile(base + file, as);
  const [manifest, spec] = await Promise.all([get("manifest.json", "json"), get("webgl.json", "json")]);
  const [vertex, ...sources] = await Promise.all(
    [manifest.vertex_shader, ...manifest.passes.map((p) => p.shader)].map((f) => get(f, "text")));
  const constants = {};
  for (const [tensor, file] of Object.entries(manifest.constant_textures)) {
    constants[textureKey(tensor, 0)] = parseNpy(await get(file, "arrayBuffer"), file);
  }
  return { manifest, spec, vertex, sources, constants };
}

// --- planning a run: shapes, textures and uniforms for one input size (as workbench.ir) ------

function convOut(op, n) {
  return op.padding === "same" ? Math.ceil(n / op.stride) : Math.floor((n - op.size) / op.stride) + 1;
}

/** Zero padding before the first row or column, as TensorFlow's 'SAME' puts it. */
function convPad(op, n) {
  if (op.padding === "valid") return 0;
  return Math.floor(Math.max((convOut(op, n) - 1) * op.stride + op.size - n, 0) / 2);
}

/** {shapes: {tensor: [h, w, c]}, textures: {key: {tensor, index, width, height, format}}}. */
function plan(spec, height, width) {
  const shapes = { [spec.input.name]: [height, width, spec.input.channels] };
  const textures = {};
  const addPacks = (name) => {
    const [h, w, c] = shapes[name];
    for (let p = 0; p < packs(c); p++) {
      textures[textureKey(name, p)] = { tensor: name, index: p, width: w, height: h, format: "RGBA8" };
    }
  };
  addPacks(spec.input.name);
  for (const op of spec.ops) {
    const [h, w] = shapes[op.input];
    if (op.kind === "conv") {
      shapes[op.name] = [convOut(op, h), convOut(op, w), op.channels];
    } else if (op.kind === "depth_to_space") {
      shapes[op.name] = [h * op.block, w * op.block, op.channels];
    } else if (op.kind === "dense") {
      shapes[op.name] = [1, 1, op.channels];
      for (const t of op.textures) textures[textureKey(t.tensor, t.index)] = t;
      continue;
    } else {
      throw new Error(`op ${op.name}: unknown kind ${op.kind}`);
    }
    addPacks(op.name);
  }
  return { shapes, textures };
}

/** The uniform values of a pass, as workbench.ir.uniform_values computes them. */
function passUniforms(pass, op, shapes) {
  const size = (tensor) => (shapes[tensor] ? [shapes[tensor][1], shapes[tensor][0]] : null);
  const values = { u_in_size: size(pass.inputs[0].tensor), u_out_size: size(pass.outputs[0].tensor) };
  if (op.kind === "conv") {
    const [h, w] = shapes[op.input];
    values.u_pad = [convPad(op, w), convPad(op, h)];
  }
  return Object.fromEntries(pass.uniforms.map((name) => [name, values[name]]));
}

// --- the browser's limits ---------------------------------------------------------------------

function createContext(params) {
  const canvas = document.createElement("canvas");
  const gl = params.has("no_webgl") ? null : canvas.getContext("webgl", {
    alpha: true, antialias: false, depth: false, stencil: false, premultipliedAlpha: false,
    preserveDrawingBuffer: false, failIfMajorPerformanceCaveat: false });
  if (!gl) {
    const why = params.has("no_webgl") ? " (simulated by the URL parameter no_webgl)" : "";
    throw new LimitError("WebGL 1.0 is not available in this browser: canvas.getContext('webgl') "
      + `returned null${why}. Enable WebGL / hardware acceleration, or try another browser.`);
  }
  return gl;
}

/** The limits that matter, each lowered by its URL parameter if one is given. */
function browserLimits(gl, params) {
  const limit = (name, param, real) => {
    const simulated = params.has(param) ? Number(params.get(param)) : Infinity;
    return simulated < real
      ? { name, value: simulated, note: ` (simulated by the URL parameter ${param}; the real limit is ${real})` }
      : { name, value: real, note: "" };
  };
  const floatExtensions = params.has("no_float_textures") ? []
    : ["OES_texture_float", "WEBGL_color_buffer_float"].filter((e) => gl.getExtension(e));
  const debug = gl.getExtension("WEBGL_debug_renderer_info");
  // getExtension also enables "#extension GL_EXT_draw_buffers" in this context's shaders
  const drawBuffers = params.has("no_draw_buffers") ? null : gl.getExtension("WEBGL_draw_buffers");
  return {
    drawBuffers: drawBuffers
      ? limit("MAX_DRAW_BUFFERS_WEBGL", "max_draw_buffers", Math.min(gl.getParameter(drawBuffers.MAX_DRAW_BUFFERS_WEBGL),
        gl.getParameter(drawBuffers.MAX_COLOR_ATTACHMENTS_WEBGL)))
      : { value: 1, note: params.has("no_draw_buffers") ? " (simulated by the URL parameter no_draw_buffers)" : "" },
    textureSize: limit("MAX_TEXTURE_SIZE", "max_texture_size", gl.getParameter(gl.MAX_TEXTURE_SIZE)),
    viewport: limit("MAX_VIEWPORT_DIMS", "max_texture_size", Math.min(...gl.getParameter(gl.MAX_VIEWPORT_DIMS))),
    textureUnits: limit("MAX_TEXTURE_IMAGE_UNITS", "max_texture_image_units",
      gl.getParameter(gl.MAX_TEXTURE_IMAGE_UNITS)),
    floatExtensions,
    floatNote: params.has("no_float_textures") ? " (simulated by the URL parameter no_float_textures)" : "",
    highp: gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_FLOAT).precision > 0,
    renderer: `${gl.getParameter(gl.VERSION)}; ${debug ? gl.getParameter(debug.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER)}`,
  };
}

/** Limits that do not depend on the image: texture units per pass, float textures. */
function checkNetLimits(net, limits) {
  const units = limits.textureUnits;
  for (const pass of net.manifest.passes) {
    if (pass.inputs.length > units.value) {
      throw new LimitError(`pass ${pass.name} binds ${pass.inputs.length} textures, but this browser's `
        + `${units.name} (texture units per fragment shader) is ${units.value}${units.note}.`);
    }
  }
  const float = net.spec.ops.find((op) => op.kind === "dense" && op.textures.some((t) => t.format === "RGBA32F"));
  const missing = ["OES_texture_float", "WEBGL_color_buffer_float"].filter((e) => !limits.floatExtensions.includes(e));
  if (float && missing.length) {
    throw new LimitError(`layer ${float.name} computes in float textures (RGBA32F), but this browser lacks `
      + `${missing.join(" and ")}${limits.floatNote}. Export the net with the 16-bit fixed-point dense layer `
      + "(es2.compile(model, dense=\"fixed16\")).");
  }
}

/** The shader of a pass that writes several outputs (gl_FragData[i], one line each, as
 *  workbench/es2/shaders.py writes them) cut down to outputs ks: output ks[j] to
 *  gl_FragData[j] (gl_FragColor when one is left, without the extension), the others dropped;
 *  the compiler then drops their arithmetic, and the kept outputs' is unchanged. */
function targetsSource(source, ks) {
  const single = ks.length === 1;
  return (single ? source.replace(/^#extension GL_EXT_draw_buffers : require\n/m, "") : source)
    .replace(/^( *)gl_FragData\[(\d+)\] = (.*)\n/gm, (line, indent, i, value) => {
      const j = ks.indexOf(Number(i));
      return j < 0 ? "" : `${indent}${single ? "gl_FragColor" : `gl_FragData[${j}]`} = ${value}\n`;
    });
}

/** Passes that write more render targets than the browser offers (no WEBGL_draw_buffers, or
 *  too few) become passes of as many outputs as it offers, with the same bytes; returns a
 *  note, or "" if none. */
function fitDrawBuffers(net, limits) {
  const most = Math.max(...net.manifest.passes.map((p) => p.outputs.length));
  const room = limits.drawBuffers.value;
  if (most <= room) return "";
  const passes = [];
  const sources = [];
  net.manifest.passes.forEach((pass, i) => {
    if (pass.outputs.length <= room) {
      passes.push(pass);
      sources.push(net.sources[i]);
      return;
    }
    for (let k = 0; k < pass.outputs.length; k += room) {
      const ks = pass.outputs.slice(k, k + room).map((_, j) => k + j);
      passes.push({ ...pass, name: `${pass.name}/${k}`, outputs: ks.map((j) => pass.outputs[j]) });
      sources.push(targetsSource(net.sources[i], ks));
    }
  });
  const before = net.manifest.passes.length;
  [net.manifest.passes, net.sources] = [passes, sources];
  const kind = room === 1 ? "one-target passes" : `passes of at most ${room} targets`;
  return `The net writes up to ${most} render targets per pass, but this browser offers `
    + `${room} (WEBGL_draw_buffers${limits.drawBuffers.note}): its ${before} passes run as `
    + `${passes.length} ${kind}, with the same output and more texture fetches.`;
}

/** Limits that depend on the image size: the largest texture. */
function checkSizeLimits(textures, limits) {
  for (const t of Object.values(textures)) {
    for (const lim of [limits.textureSize, limits.viewport]) {
      if (Math.max(t.width, t.height) > lim.value) {
        throw new LimitError(`tensor ${t.tensor} would be a ${t.width}x${t.height} texture, over this browser's `
          + `${lim.name} of ${lim.value}${lim.note}; use a smaller image.`);
      }
    }
  }
}

// --- the runner (as workbench/gl/fragment.py) -------------------------------------------------

function compileShader(gl, type, source, name) {
  const shader = gl.createShader(type);
  gl.shaderSource(shader, source);
  gl.compileShader(shader);
  if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) {
    throw new Error(`${name} does not compile in this browser's WebGL:\n${gl.getShaderInfoLog(shader)}`);
  }
  return shader;
}

class Runner {
  /** Compiles and links every program and draws each once into a 1x1 target (drivers such
   *  as SwiftShader translate a shader at its first draw), as gl/fragment.py compile does. */
  constructor(gl, net) {
    this.gl = gl;
    this.net = net;
    this.textures = new Map();
    this.size = null;
    const start = performance.now();
    const vertex = compileShader(gl, gl.VERTEX_SHADER, net.vertex, net.manifest.vertex_shader);
    const programs = new Map(); // fragment source -> {program, locations}
    this.passes = net.manifest.passes.map((pass, i) => {
      const source = net.sources[i];
      if (!programs.has(source)) {
        const program = gl.createProgram();
        gl.attachShader(program, vertex);
        gl.attachShader(program, compileShader(gl, gl.FRAGMENT_SHADER, source, pass.shader));
        gl.bindAttribLocation(program, 0, "a_pos");
        gl.linkProgram(program);
        if (!gl.getProgramParameter(program, gl.LINK_STATUS)) {
          throw new Error(`${pass.shader} does not link: ${gl.getProgramInfoLog(program)}`);
        }
        programs.set(source, { program, locations: new Map(), targets: pass.outputs.length });
      }
      const entry = programs.get(source);
      for (const name of [...pass.uniforms, ...pass.inputs.map((b) => b.uniform)]) {
        if (!entry.locations.has(name)) entry.locations.set(name, gl.getUniformLocation(entry.program, name));
      }
      return { ...pass, ...entry, op: net.spec.ops.find((op) => op.name === pass.op) };
    });
    gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
    gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
    gl.enableVertexAttribArray(0);
    gl.vertexAttribPointer(0, 2, gl.FLOAT, false, 0, 0);
    gl.disable(gl.BLEND);
    gl.disable(gl.DITHER); // dithering may perturb the 8-bit rounding of the outputs
    this.warmUp(programs);
    this.compileMs = performance.now() - start;
  }

  warmUp(programs) {
    const gl = this.gl;
    const most = Math.max(...this.passes.map((p) => p.outputs.length));
    const targets = Array.from({ length: most }, () => this.createTexture(1, 1, "RGBA8"));
    const fbos = targets.map((t, i) => (i === 0 ? t.fbo : this.framebuffer(targets.slice(0, i + 1))));
    const sampled = this.createTexture(3, 3, "RGBA8"); // NPOT and NEAREST, as most tensors
    for (let unit = 0; unit < 8; unit++) {
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(gl.TEXTURE_2D, sampled.texture);
    }
    gl.viewport(0, 0, 1, 1);
    for (const { program, targets: n } of programs.values()) {
      gl.bindFramebuffer(gl.FRAMEBUFFER, fbos[n - 1]); // as many targets as it writes
      gl.useProgram(program);
      gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
    }
    this.fence(targets[0]);
    fbos.slice(1).forEach((fbo) => gl.deleteFramebuffer(fbo));
    targets.forEach((t) => this.releaseTexture(t));
    this.releaseTexture(sampled);
  }

  /** A framebuffer drawing into several textures: draw buffer i is textures[i]. */
  framebuffer(textures) {
    const gl = this.gl;
    const ext = gl.getExtension("WEBGL_draw_buffers");
    const fbo = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
    const attachments = textures.map((t, i) => ext.COLOR_ATTACHMENT0_WEBGL + i);
    textures.forEach((t, i) => gl.framebufferTexture2D(gl.FRAMEBUFFER, attachments[i], gl.TEXTURE_2D, t.texture, 0));
    ext.drawBuffersWEBGL(attachments);
    const status = gl.checkFramebufferStatus(gl.FRAMEBUFFER);
    if (status !== gl.FRAMEBUFFER_COMPLETE) {
      throw new LimitError(`this browser cannot render into ${textures.length} RGBA8 textures at once `
        + `(framebuffer status 0x${status.toString(16)})`);
    }
    return fbo;
  }

  createTexture(width, height, format, data = null) {
    const gl = this.gl;
    const texture = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, texture);
    for (const [p, v] of [[gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE], [gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE],
      [gl.TEXTURE_MIN_FILTER, gl.NEAREST], [gl.TEXTURE_MAG_FILTER, gl.NEAREST]]) gl.texParameteri(gl.TEXTURE_2D, p, v);
    const type = format === "RGBA8" ? gl.UNSIGNED_BYTE : gl.FLOAT;
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, width, height, 0, gl.RGBA, type, data);
    const fbo = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
    const status = gl.checkFramebufferStatus(gl.FRAMEBUFFER);
    if (status !== gl.FRAMEBUFFER_COMPLETE) {
      throw new LimitError(`this browser cannot render into a ${width}x${height} ${format} texture `
        + `(framebuffer status 0x${status.toString(16)})`);
    }
    return { texture, fbo, width, height, format, type };
  }

  releaseTexture(t) {
    this.gl.deleteFramebuffer(t.fbo);
    this.gl.deleteTexture(t.texture);
  }

  /** Textures for an input of height x width, constants uploaded; limits checked first. */
  allocate(height, width, limits) {
    if (this.size && this.size[0] === height && this.size[1] === width) return;
    const { shapes, textures } = plan(this.net.spec, height, width);
    checkSizeLimits(textures, limits);
    for (const pass of this.passes) if (pass.fbo) this.gl.deleteFramebuffer(pass.fbo);
    for (const t of this.textures.values()) this.releaseTexture(t);
    this.textures.clear();
    for (const [key, t] of Object.entries(textures)) {
      const constant = this.net.constants[key];
      if (constant && (constant.shape[0] !== t.height || constant.shape[1] !== t.width)) {
        throw new Error(`constant texture ${key}: ${constant.shape} does not match ${t.height}x${t.width}`);
      }
      this.textures.set(key, this.createTexture(t.width, t.height, t.format, constant ? constant.data : null));
    }
    for (const pass of this.passes) {
      pass.values = passUniforms(pass, pass.op, shapes);
      const targets = pass.outputs.map((o) => this.textures.get(textureKey(o.tensor, o.pack)));
      pass.fbo = targets.length > 1 ? this.framebuffer(targets) : null; // else the texture's own
    }
    this.shapes = shapes;
    this.size = [height, width];
  }

  draw(pass) {
    const gl = this.gl;
    gl.useProgram(pass.program);
    pass.inputs.forEach((binding, unit) => {
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(gl.TEXTURE_2D, this.textures.get(textureKey(binding.tensor, binding.pack)).texture);
      const filter = binding.filter === "linear" ? gl.LINEAR : gl.NEAREST;
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, filter);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, filter);
      gl.uniform1i(pass.locations.get(binding.uniform), unit);
    });
    for (const [name, value] of Object.entries(pass.values)) gl.uniform2f(pass.locations.get(name), ...value);
    const target = this.textures.get(textureKey(pass.outputs[0].tensor, pass.outputs[0].pack));
    gl.bindFramebuffer(gl.FRAMEBUFFER, pass.fbo || target.fbo);
    gl.viewport(...(pass.viewport || [0, 0, target.width, target.height]));
    const channels = pass.channels; // a program may write some components of its output only
    if (channels != null) gl.colorMask(...[0, 1, 2, 3].map((k) => channels.includes(k)));
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
    if (channels != null) gl.colorMask(true, true, true, true);
    return target;
  }

  /** Wait for the GPU: read one pixel of ``target`` (a synchronous round trip). */
  fence(target, x = 0, y = 0) {
    const gl = this.gl;
    gl.bindFramebuffer(gl.FRAMEBUFFER, target.fbo);
    const pixel = target.type === gl.FLOAT ? new Float32Array(4) : new Uint8Array(4);
    gl.readPixels(x, y, 1, 1, gl.RGBA, target.type, pixel);
  }

  read(key) {
    const gl = this.gl;
    const t = this.textures.get(key);
    gl.bindFramebuffer(gl.FRAMEBUFFER, t.fbo);
    const out = t.type === gl.FLOAT ? new Float32Array(t.width * t.height * 4) : new Uint8Array(t.width * t.height * 4);
    gl.readPixels(0, 0, t.width, t.height, gl.RGBA, t.type, out);
    return out;
  }

  /** Upload ``source`` (ImageBitmap, canvas...) as the input, run every pass, read back.
   *  With ``fences`` each pass is timed until a 1-pixel readPixels of its target returns.
   *  Returns {input, output, passes: [[name, ms]], runMs}. */
  run(source, limits, fences = true) {
    const gl = this.gl;
    const input = this.net.spec.input;
    if (input.channels > PACK) throw new Error(`the page feeds images; the net's input has ${input.channels} channels`);
    this.allocate(source.height, source.width, limits);
    const start = performance.now();
    const inputTexture = this.textures.get(textureKey(input.name, 0));
    gl.bindTexture(gl.TEXTURE_2D, inputTexture.texture);
    gl.pixelStorei(gl.UNPACK_FLIP_Y_WEBGL, false); // first image row -> texture row 0
    gl.pixelStorei(gl.UNPACK_PREMULTIPLY_ALPHA_WEBGL, false);
    gl.pixelStorei(gl.UNPACK_COLORSPACE_CONVERSION_WEBGL, gl.NONE);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, gl.RGBA, gl.UNSIGNED_BYTE, source);
    const passes = this.passes.map((pass) => {
      const t0 = performance.now();
      const target = this.draw(pass);
      if (fences) this.fence(target, ...(pass.viewport || [0, 0]).slice(0, 2));
      return [pass.name, performance.now() - t0];
    });
    const output = this.read(textureKey(this.net.spec.output.tensor, 0));
    const runMs = performance.now() - start;
    const error = gl.getError();
    if (error !== gl.NO_ERROR) throw new Error(`WebGL error 0x${error.toString(16)} during the run`);
    return { input: this.read(textureKey(input.name, 0)), output, passes, runMs };
  }
}

// --- tiling (as workbench/es2/tiling.py) -----------------------------------------------------

/** The largest input side whose every texture fits MAX_TEXTURE_SIZE and MAX_VIEWPORT_DIMS. */
function largestTile(spec, limits) {
  const max = Math.min(limits.textureSize.value, limits.viewport.value);
  const widest = (side) => Math.max(...Object.values(plan(spec, side, side).textures)
    .map((t) => Math.max(t.width, t.height)));
  let side = Math.floor((max * 64) / widest(64)); // textures grow in proportion to the input
  while (side > 0 && widest(side) > max) side--;
  return side;
}

/** Along one axis of n pixels: [start, keepFrom, keepTo] per tile of `side` pixels (the last
 *  shifted in, so all have one size); kept pixels lie `margin` or more from an inner edge. */
function tileSpans(n, side, margin) {
  if (n <= side) return [[0, 0, n]];
  const core = side - 2 * margin;
  const spans = [];
  for (let keepFrom = 0; keepFrom < n; keepFrom += core) {
    spans.push([Math.min(Math.max(keepFrom - margin, 0), n - side), keepFrom, Math.min(keepFrom + core, n)]);
  }
  return spans;
}

/** RGBA bytes of an image source (ImageBitmap, canvas), rows top first, as ImageData. */
function imagePixels(source) {
  const canvas = document.createElement("canvas");
  [canvas.width, canvas.height] = [source.width, source.height];
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(source, 0, 0);
  return ctx.getImageData(0, 0, source.width, source.height);
}

/** Rows y0.. and columns x0.. of RGBA bytes `from` (width fromWidth) into `to` (width toWidth). */
function copyRect(from, fromWidth, x0, y0, to, toWidth, x1, y1, width, height) {
  for (let y = 0; y < height; y++) {
    const start = ((y0 + y) * fromWidth + x0) * 4;
    to.set(from.subarray(start, start + width * 4), ((y1 + y) * toWidth + x1) * 4);
  }
}

/** runner.run on `source`, in overlapping tiles when its textures would exceed the browser's
 *  limits and the net can be tiled (spec.receptive_field); the stitched output has the untiled
 *  run's bytes.  Adds size, outSize ([h, w] of input and output) and tiles to the result. */
function runImage(runner, source, limits, fences = true) {
  const { spec } = runner.net;
  const margin = spec.receptive_field;
  const side = margin === null || margin === undefined ? Infinity : largestTile(spec, limits);
  if (source.height <= side && source.width <= side) {
    const run = runner.run(source, limits, fences);
    return { ...run, size: runner.size, outSize: runner.shapes[spec.output.tensor].slice(0, 2), tiles: 1 };
  }
  if (side - 2 * margin < 1) {
    const lim = limits.textureSize;
    throw new LimitError(`a ${source.width}x${source.height} image is over this browser's ${lim.name} of `
      + `${lim.value}${lim.note}, and tiles of ${side} pixels cannot hold the net's receptive field of `
      + `${margin} pixels each side; use a smaller image.`);
  }
  const [H, W] = [source.height, source.width];
  const [th, tw] = [Math.min(side, H), Math.min(side, W)];
  const pixels = imagePixels(source).data;
  const tile = new ImageData(tw, th);
  let output = null;
  let scale = 1;
  const passes = new Map();
  let runMs = 0;
  let tiles = 0;
  for (const [y0, ky0, ky1] of tileSpans(H, side, margin)) {
    for (const [x0, kx0, kx1] of tileSpans(W, side, margin)) {
      copyRect(pixels, W, x0, y0, tile.data, tw, 0, 0, tw, th);
      const run = runner.run(tile, limits, fences);
      if (!output) {
        scale = runner.shapes[spec.output.tensor][0] / th;
        output = new Uint8Array(H * scale * W * scale * 4);
      }
      copyRect(run.output, tw * scale, (kx0 - x0) * scale, (ky0 - y0) * scale, output, W * scale,
        kx0 * scale, ky0 * scale, (kx1 - kx0) * scale, (ky1 - ky0) * scale);
      for (const [name, ms] of run.passes) passes.set(name, (passes.get(name) || 0) + ms);
      runMs += run.runMs;
      tiles++;
    }
  }
  return { input: pixels, output, passes: [...passes], runMs, size: [H, W], outSize: [H * scale, W * scale], tiles };
}

// --- outputs ----------------------------------------------------------------------------------

/** Logits from the stored dense output: two values per texel, 16-bit fixed point in byte pairs
 *  (high, low; q = 256 v + 32768, see workbench/es2/fixed16.py) or float. */
function decodeLogits(stored, output) {
  const logits = [];
  let saturated = false;
  for (let i = 0; i < output.count; i++) {
    if (output.number === "float") {
      logits.push(stored[4 * (i >> 1) + (i & 1)]); // texel (v0, v1, 0, 0)
    } else {
      const q = stored[2 * i] * 256 + stored[2 * i + 1];
      saturated ||= q === 0 || q === 65535;
      logits.push((q - 32768) / 256);
    }
  }
  return { logits, saturated };
}

function softmax(values) {
  const top = Math.max(...values);
  const e = values.map((v) => Math.exp(v - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

/** Keys' cubic convolution kernel, a = -0.5 (MATLAB's and Pillow's bicubic). */
function cubic(x) {
  x = Math.abs(x);
  return x <= 1 ? 1.5 * x ** 3 - 2.5 * x ** 2 + 1 : x < 2 ? -0.5 * x ** 3 + 2.5 * x ** 2 - 4 * x + 2 : 0;
}

/** Taps and weights of MATLAB imresize's bicubic upscaling by ``scale`` along one axis
 *  (as workbench.data.images._imresize_matrix: mirrored edges, weights summing to 1). */
function upscaleTaps(n, scale) {
  const taps = [];
  for (let i = 0; i < n * scale; i++) {
    const u = (i + 1) / scale + 0.5 * (1 - 1 / scale); // 1-based input coordinate
    const left = Math.floor(u - 2);
    const index = [];
    const weight = [];
    for (let k = 0; k < 6; k++) {
      let t = (((left + k - 1) % (2 * n)) + 2 * n) % (2 * n);
      if (t >= n) t = 2 * n - 1 - t;
      index.push(t);
      weight.push(cubic(u - (left + k)));
    }
    const sum = weight.reduce((a, b) => a + b, 0);
    taps.push({ index, weight: weight.map((w) => w / sum) });
  }
  return taps;
}

/** Bicubic upscaling of RGBA8 bytes (rows top first), as images.upscale_bicubic: rounded to 8
 *  bits; alpha 255. */
function bicubicUpscale(rgba, width, height, scale) {
  const rows = upscaleTaps(height, scale);
  const cols = upscaleTaps(width, scale);
  const W = width * scale;
  const H = height * scale;
  const tmp = new Float64Array(H * width * 3); // rows resized first
  for (let y = 0; y < H; y++) {
    const { index, weight } = rows[y];
    for (let x = 0; x < width; x++) {
      for (let c = 0; c < 3; c++) {
        let v = 0;
        for (let k = 0; k < 6; k++) v += weight[k] * rgba[(index[k] * width + x) * 4 + c];
        tmp[(y * width + x) * 3 + c] = v;
      }
    }
  }
  const out = new Uint8Array(W * H * 4);
  for (let y = 0; y < H; y++) {
    for (let x = 0; x < W; x++) {
      const { index, weight } = cols[x];
      for (let c = 0; c < 3; c++) {
        let v = 0;
        for (let k = 0; k < 6; k++) v += weight[k] * tmp[(y * width + index[k]) * 3 + c];
        out[(y * W + x) * 4 + c] = Math.round(Math.min(255, Math.max(0, v)));
      }
      out[(y * W + x) * 4 + 3] = 255;
    }
  }
  return out;
}

function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

// --- the page ---------------------------------------------------------------------------------

const page = { net: null, runner: null, limits: null, loadError: null, params: new URLSearchParams(location.search) };

function setState(state, message, kind = "info") {
  document.body.dataset.state = state;
  const box = $("message");
  box.textContent = message;
  box.className = kind;
}

function showCanvas(id, bytes, width, height, caption) {
  const canvas = $(id);
  canvas.width = width;
  canvas.height = height;
  const pixels = new Uint8ClampedArray(bytes.length);
  pixels.set(bytes);
  for (let i = 3; i < pixels.length; i += 4) pixels[i] = 255; // show colour, not the stored alpha
  canvas.getContext("2d").putImageData(new ImageData(pixels, width, height), 0, 0);
  canvas.parentElement.querySelector("figcaption").textContent = caption;
  canvas.parentElement.hidden = false;
}

function showTimings(result) {
  $("timings").innerHTML = `<ol>${result.passes.map(([name, ms]) => `<li>${name} <b>${ms.toFixed(2)}</b></li>`).join("")}</ol>`;
  $("total").textContent = `${result.passes.length} passes: ${result.total_ms.toFixed(1)} ms (sum of the passes, each `
    + `timed until a 1-pixel readPixels of its target returned); upload + passes + read-back ${result.run_ms.toFixed(1)} ms; `
    + `shaders compiled, linked and drawn once in ${result.compile_ms.toFixed(0)} ms. ${result.renderer}`;
  $("times").hidden = false;
}

function showTop5(result) {
  const rows = result.top5.map(({ label, probability, logit }, i) =>
    `<tr><td>${i + 1}</td><td>${label}</td><td>${(100 * probability).toFixed(1)} %</td><td>${logit.toFixed(3)}</td></tr>`);
  $("classes").innerHTML = `<table><thead><tr><th>#</th><th>class</th><th>probability</th><th>logit</th></tr></thead>`
    + `<tbody>${rows.join("")}</tbody></table>`;
  $("classes").hidden = false;
}

/** An image of the net's fixed input size: the centre square, resized by the canvas. */
function fitToInput(bitmap, size) {
  if (!size || (bitmap.height === size[0] && bitmap.width === size[1])) return { source: bitmap, note: "" };
  const canvas = document.createElement("canvas");
  [canvas.height, canvas.width] = size;
  const side = Math.min(bitmap.width, bitmap.height);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(bitmap, (bitmap.width - side) / 2, (bitmap.height - side) / 2, side, side, 0, 0, size[1], size[0]);
  return { source: canvas, note: ` (centre square of the ${bitmap.width}x${bitmap.height} image, resized by the browser)` };
}

/** Run an image (a Blob) through the net; shows and returns the result object. */
async function runBlob(blob, name = "image") {
  if (!page.runner) return { error: page.loadError || "the net is not loaded yet" };
  setState("running", `Running ${name}…`);
  try {
    const bitmap = await createImageBitmap(blob, { premultiplyAlpha: "none", colorSpaceConversion: "none" });
    const { spec } = page.net;
    const { source, note } = fitToInput(bitmap, spec.input.size);
    const run = runImage(page.runner, source, page.limits);
    const repeat = Number(page.params.get("repeat") || 0); // runs without the per-pass waits
    const repeatMs = Array.from({ length: repeat }, () => runImage(page.runner, source, page.limits, false).runMs);
    const [height, width] = run.size;
    const result = {
      kind: spec.output.kind, name, passes: run.passes, run_ms: run.runMs,
      total_ms: run.passes.reduce((a, [, ms]) => a + ms, 0), compile_ms: page.runner.compileMs,
      renderer: page.limits.renderer, input_width: width, input_height: height, tiles: run.tiles,
    };
    if (repeat) result.repeat_ms = repeatMs;
    if (spec.output.kind === "image") {
      const [h, w] = run.outSize;
      const scale = w / width;
      const bicubic = bicubicUpscale(run.input, width, height, scale);
      Object.assign(result, { width: w, height: h, output: base64(run.output), bicubic: base64(bicubic), input: base64(run.input) });
      showCanvas("input", run.input, width, height, `input, ${width}x${height}${note} (shown ×${scale}, nearest neighbour)`);
      showCanvas("bicubic", bicubic, w, h, `bicubic ×${scale} (MATLAB imresize, Keys a = −0.5; JavaScript on the CPU)`);
      showCanvas("output", run.output, w, h, `${spec.name} ×${scale}, ${w}x${h} (WebGL, ${run.passes.length} passes)`);
    } else {
      const { logits, saturated } = decodeLogits(run.output, spec.output);
      const probabilities = softmax(logits);
      const order = probabilities.map((p, i) => i).sort((a, b) => probabilities[b] - probabilities[a]);
      Object.assign(result, { logits, probabilities, saturated, top5: order.slice(0, 5).map((i) => (
        { index: i, label: spec.labels[i], probability: probabilities[i], logit: logits[i] })) });
      showCanvas("input", run.input, width, height, `input, ${width}x${height}${note}`);
      showTop5(result);
    }
    showTimings(result);
    $("result").textContent = JSON.stringify(result);
    const warning = [saturatedWarning(result), page.limits.highp ? "" : "This browser has no highp float in "
      + "fragment shaders: the shaders fall back to mediump and may differ by a level or more."].filter(Boolean).join(" ");
    setState("done", `${name}: ${result.total_ms.toFixed(1)} ms on the GPU.${warning ? " " + warning : ""}`, warning ? "warning" : "info");
    return result;
  } catch (error) {
    setState("error", error.message, "error");
    return { error: error.message };
  }
}

function saturatedWarning(result) {
  return result.saturated ? "A logit saturated the 16-bit fixed-point range [-128, 128): the top classes may be wrong." : "";
}

async function runUrl(url) {
  try {
    return await runBlob(await fetchFile(url, "blob"), url.startsWith("data:") ? "image" : url);
  } catch (error) {
    setState("error", error.message, "error");
    return { error: error.message };
  }
}

function wireInputs() {
  $("file").addEventListener("change", (e) => e.target.files[0] && runBlob(e.target.files[0], e.target.files[0].name));
  const zone = document.body;
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("dragging"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("dragging");
    const file = e.dataTransfer.files[0];
    if (file) runBlob(file, file.name);
  });
}

async function main() {
  const { params } = page;
  setState("loading", "Loading the net…");
  wireInputs();
  try {
    page.net = await loadNet();
    const { spec, manifest } = page.net;
    document.body.dataset.kind = spec.output.kind; // image or logits: the layout
    $("title").textContent = `${spec.name}: ${manifest.passes.length} WebGL passes`
      + (spec.input.size ? `, input ${spec.input.size[1]}x${spec.input.size[0]}` : "");
    const gl = createContext(params);
    page.limits = browserLimits(gl, params);
    checkNetLimits(page.net, page.limits);
    const split = fitDrawBuffers(page.net, page.limits);
    page.runner = new Runner(gl, page.net);
    setState("ready", `Ready (${page.limits.renderer}; ${page.net.manifest.passes.length} programs compiled in `
      + `${page.runner.compileMs.toFixed(0)} ms). Choose or drop an image.${split ? " " + split : ""}`,
    split ? "warning" : "info");
  } catch (error) {
    page.loadError = error.message;
    setState("error", error.message, "error");
    return;
  }
  if (params.get("image")) await runUrl(params.get("image"));
  await setUpCheck();
}

// --- the self-check (export-web --check): device report, see workbench/web/check.py ---------

const REPORT_FORMAT = "workbench-device-report/1";

/** check.json and its raw files: input (RGBA8 bytes), tf (float32), expected (RGBA8 bytes). */
async function loadCheck(file) {
  const check = await fetchFile(file, "json");
  for (const item of check.inputs) {
    const [input, tf, expected] = await Promise.all(["input", "tf", "expected"].map((k) => fetchFile(item[k], "arrayBuffer")));
    Object.assign(item, { input: new Uint8ClampedArray(input), tf: new Float32Array(tf), expected: new Uint8Array(expected) });
  }
  return check;
}

/** GL strings, unmasked ones where WEBGL_debug_renderer_info exists, precision, limits. */
function deviceInfo(gl) {
  const debug = gl.getExtension("WEBGL_debug_renderer_info");
  const format = (kind) => {
    const f = gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, kind);
    return { rangeMin: f.rangeMin, rangeMax: f.rangeMax, precision: f.precision };
  };
  const limits = {};
  for (const name of ["MAX_TEXTURE_SIZE", "MAX_TEXTURE_IMAGE_UNITS", "MAX_VARYING_VECTORS",
    "MAX_FRAGMENT_UNIFORM_VECTORS", "MAX_RENDERBUFFER_SIZE"]) limits[name] = gl.getParameter(gl[name]);
  return {
    vendor: gl.getParameter(gl.VENDOR), renderer: gl.getParameter(gl.RENDERER),
    version: gl.getParameter(gl.VERSION), shading_language_version: gl.getParameter(gl.SHADING_LANGUAGE_VERSION),
    unmasked_vendor: debug ? gl.getParameter(debug.UNMASKED_VENDOR_WEBGL) : null,
    unmasked_renderer: debug ? gl.getParameter(debug.UNMASKED_RENDERER_WEBGL) : null,
    precision: { highp: format(gl.HIGH_FLOAT), mediump: format(gl.MEDIUM_FLOAT) }, limits,
  };
}

/** One report entry, as check.py input_entry: PSNR vs TF on the first `channels` channels
 *  ([0, 1] scale, peak 1) or the logits against TF's; share of bytes equal to the emulator. */
function checkEntry(item, output, check, runner) {
  const { width: w, height: h } = runner.textures.get(textureKey(runner.net.spec.output.tensor, 0));
  const entry = { name: item.name, width: w, height: h };
  if (check.kind === "logits") {
    const { logits } = decodeLogits(output, runner.net.spec.output);
    const top = (v) => v.reduce((best, x, i) => (x > v[best] ? i : best), 0);
    Object.assign(entry, { logits, max_abs_logit_diff_vs_tf: Math.max(...logits.map((v, i) => Math.abs(v - item.tf[i]))),
      top1_equal_tf: top(logits) === top(Array.from(item.tf)) });
  } else {
    const c = check.output_channels;
    let sum = 0;
    for (let p = 0; p < w * h; p++) {
      for (let k = 0; k < c; k++) sum += (output[4 * p + k] / 255 - item.tf[c * p + k]) ** 2;
    }
    const mse = sum / (w * h * c);
    entry.psnr_vs_tf = mse ? 10 * Math.log10(1 / mse) : null;
  }
  let equal = 0;
  for (let i = 0; i < output.length; i++) equal += output[i] === item.expected[i];
  entry.bytes_equal_emulator = equal / output.length;
  entry.output = base64(output);
  return entry;
}

/** Every pass of the current input again, each timed until gl.finish() and a 1-pixel
 *  readPixels of its target returned (Chrome's finish() alone does not wait for the GPU). */
function timePasses(runner) {
  return runner.passes.map((pass) => {
    const t0 = performance.now();
    const target = runner.draw(pass);
    runner.gl.finish();
    runner.fence(target, ...(pass.viewport || [0, 0]).slice(0, 2));
    return [pass.name, performance.now() - t0];
  });
}

/** Run the embedded inputs; returns the device report and shows it (table, download link). */
async function runCheck() {
  if (!page.runner) return { error: page.loadError || "the net is not loaded yet" };
  setState("running", "Running the self-check…");
  try {
    const check = page.check || (page.check = await loadCheck(page.net.spec.check));
    const runner = page.runner;
    let firstDrawMs = null;
    const entries = check.inputs.map((item) => {
      const source = new ImageData(item.input, item.width, item.height);
      const t0 = performance.now();
      const run = runner.run(source, page.limits, false);
      firstDrawMs ??= performance.now() - t0;
      return checkEntry(item, run.output, check, runner);
    });
    runner.run(new ImageData(check.inputs[0].input, check.inputs[0].width, check.inputs[0].height), page.limits, false);
    const report = {
      format: REPORT_FORMAT, source: "webgl", model: check.model, model_sha256: check.model_sha256,
      output_channels: check.output_channels, device: deviceInfo(runner.gl), user_agent: navigator.userAgent,
      compile_ms: runner.compileMs, first_draw_ms: firstDrawMs, passes: timePasses(runner), inputs: entries,
    };
    showCheck(report, check.kind);
    $("result").textContent = JSON.stringify(report);
    window.workbench.deviceReport = report;
    setState("done", `Self-check: ${entries.length} inputs on ${report.device.unmasked_renderer || report.device.renderer}.`);
    return report;
  } catch (error) {
    setState("error", error.message, "error");
    return { error: error.message };
  }
}

function showCheck(report, kind) {
  const d = report.device;
  const head = kind === "logits" ? "<th>max |logit − TF|</th><th>top-1 = TF</th>" : "<th>PSNR vs TF (dB)</th>";
  const rows = report.inputs.map((e) => `<tr><td>${e.name}</td><td>${e.width}x${e.height}</td>`
    + (kind === "logits" ? `<td>${e.max_abs_logit_diff_vs_tf.toFixed(4)}</td><td>${e.top1_equal_tf ? "yes" : "no"}</td>`
      : `<td>${e.psnr_vs_tf === null ? "∞" : e.psnr_vs_tf.toFixed(2)}</td>`)
    + `<td>${(100 * e.bytes_equal_emulator).toFixed(3)} %</td></tr>`);
  const total = report.passes.reduce((a, [, ms]) => a + ms, 0);
  $("check-table").innerHTML = `<p>${d.unmasked_renderer || d.renderer} (${d.version}); highp float precision `
    + `${d.precision.highp.precision} bits, mediump ${d.precision.mediump.precision}; MAX_TEXTURE_SIZE ${d.limits.MAX_TEXTURE_SIZE}. `
    + `Compile ${report.compile_ms.toFixed(0)} ms, first draw ${report.first_draw_ms.toFixed(1)} ms, passes ${total.toFixed(1)} ms.</p>`
    + `<table><thead><tr><th>input</th><th>output</th>${head}<th>bytes = emulator</th></tr></thead>`
    + `<tbody>${rows.join("")}</tbody></table>`;
  const link = $("check-download");
  if (link.href) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(new Blob([JSON.stringify(report, null, 1)], { type: "application/json" }));
  link.download = `device-report-${(d.unmasked_renderer || d.renderer).replace(/[^A-Za-z0-9]+/g, "_").slice(0, 40)}.json`;
  link.hidden = false;
}

/** Offer the self-check when the export embeds one; run it at once with ?check=1. */
async function setUpCheck() {
  if (!page.net.spec.check) return;
  $("check").hidden = false;
  $("check-run").addEventListener("click", runCheck);
  if (page.params.get("check") === "1") await runCheck();
}

window.workbench = { runUrl, runBlob, runCheck, plan, bicubicUpscale, spec: () => page.net && page.net.spec, deviceReport: null };
main();
