/* WebGL 1.0 (= OpenGL ES 2.0, GLSL ES 1.00): the browser's limits and the runner, as
 * workbench/es2/runner.py and gl/fragment.py.  One RGBA8 texture per pack of 4 channels (channel
 * c is component c % 4 of pack c / 4; RGBA32F where webgl.json says so), texture row r = tensor
 * row r = image row r counted from the top, CLAMP_TO_EDGE, NEAREST unless a binding says
 * "linear"; a fullscreen quad per pass into the pass's output textures (whole texture, the
 * pass's viewport, or the output's own pixels where it lies in a zero border, cleared first;
 * several outputs are the draw buffers of one framebuffer with WEBGL_draw_buffers); each
 * pass's vec2 uniforms as webgl.json's formulas give them.
 */
import { PACK, plan, passUniforms, textureKey } from "./net.js";

/** A browser limit too small for the net or the image; the message names the limit. */
export class LimitError extends Error {}

export function createContext(params) {
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
export function browserLimits(gl, params) {
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
export function checkNetLimits(net, limits) {
  const units = limits.textureUnits;
  for (const pass of net.passes) {
    if (pass.inputs.length > units.value) {
      throw new LimitError(`pass ${pass.name} binds ${pass.inputs.length} textures, but this browser's `
        + `${units.name} (texture units per fragment shader) is ${units.value}${units.note}.`);
    }
  }
  const float = net.spec.textures.find((t) => t.format === "RGBA32F");
  const missing = ["OES_texture_float", "WEBGL_color_buffer_float"].filter((e) => !limits.floatExtensions.includes(e));
  if (float && missing.length) {
    throw new LimitError(`layer ${float.layer} computes in float textures (RGBA32F), but this browser lacks `
      + `${missing.join(" and ")}${limits.floatNote}. Export the net with the 16-bit fixed-point dense layer `
      + "(es2.compile(model, dense=\"fixed16\")).");
  }
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

export class Runner {
  /** Compiles and links every program and draws each once into a 1x1 target (drivers such
   *  as SwiftShader translate a shader at its first draw), as gl/fragment.py compile does. */
  constructor(gl, net) {
    this.gl = gl;
    this.net = net;
    this.textures = new Map();
    this.size = null;
    const start = performance.now();
    const vertex = compileShader(gl, gl.VERTEX_SHADER, net.vertex, net.spec.vertex_shader);
    const programs = new Map(); // fragment source -> {program, locations}
    this.passes = net.passes.map((pass) => {
      const { source } = pass;
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
      const arrays = Object.keys(pass.arrays || {});
      for (const name of [...Object.keys(pass.uniforms), ...pass.inputs.map((b) => b.uniform), ...arrays]) {
        if (!entry.locations.has(name)) entry.locations.set(name, gl.getUniformLocation(entry.program, name));
      }
      // vec4 uniform arrays (a layer's weights where passes of one shape share a program)
      const arrayValues = arrays.map((name) => [name, new Float32Array(pass.arrays[name])]);
      return { ...pass, ...entry, arrayValues };
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
      pass.values = passUniforms(pass, shapes);
      // an output in a zero border: its own pixels drawn, the border cleared (shaders.draw_area;
      // a layer's own texture, a bordered copy: its input's pixels)
      const own = pass.border && (shapes[pass.outputs[0].tensor] || shapes[pass.inputs[0].tensor]);
      pass.area = own ? [...pass.border, own[1], own[0]] : pass.viewport;
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
    for (const [name, data] of pass.arrayValues) gl.uniform4fv(pass.locations.get(name), data);
    const target = this.textures.get(textureKey(pass.outputs[0].tensor, pass.outputs[0].pack));
    gl.bindFramebuffer(gl.FRAMEBUFFER, pass.fbo || target.fbo);
    if (pass.border) {
      gl.clearColor(0, 0, 0, 0);
      gl.clear(gl.COLOR_BUFFER_BIT);
    }
    gl.viewport(...(pass.area || [0, 0, target.width, target.height]));
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
      if (fences) this.fence(target, ...(pass.area || [0, 0]).slice(0, 2));
      return [pass.name, performance.now() - t0];
    });
    const output = this.read(textureKey(this.net.spec.output.tensor, 0));
    const runMs = performance.now() - start;
    const error = gl.getError();
    if (error !== gl.NO_ERROR) throw new Error(`WebGL error 0x${error.toString(16)} during the run`);
    return { input: this.read(textureKey(input.name, 0)), output, passes, runMs };
  }
}
