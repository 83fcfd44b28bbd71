/* The exported net as the page runs it: loading webgl.json and its files, and planning a run
 * for one input size by evaluating webgl.json's rules (see workbench/web/page.py page_spec).
 *
 * Size rule of a tensor or texture ([height, width]): {fixed: [h, w]}, or {from, num, den,
 * offset}: on each axis floor((n * num + offset) / den) of tensor `from`'s size n.  Uniform
 * formula ([x, y] = from widths, from heights): floor(max(sum of coef * ceil(size(tensor) /
 * div) over terms [coef, tensor, div] + offset, at_least) / divide), offset a number or
 * [x, y]; its inverse, 1 / that, where `invert`.  Nothing here knows an op.
 */

export const PACK = 4;
export const textureKey = (tensor, index) => `${tensor}#${index}`;

/** The response to `url` as `as` ("json", "text", "arrayBuffer", "blob"). */
export async function fetchFile(url, as) {
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

/** Each pass with its fragment shader's text as `source` (files relative to `base`). */
async function withSources(passes, base) {
  const sources = await Promise.all(passes.map((p) => fetchFile(base + p.shader, "text")));
  return passes.map((p, i) => ({ ...p, source: sources[i] }));
}

/** The exported files next to the page, or in the folder `base` ("variant/") beside it:
 *  {spec (webgl.json), vertex, passes (spec.passes with their sources), constants, base}. */
export async function loadNet(base = "") {
  const spec = await fetchFile(`${base}webgl.json`, "json");
  const [vertex, passes] = await Promise.all([fetchFile(base + spec.vertex_shader, "text"),
    withSources(spec.passes, base)]);
  const constants = {};
  for (const t of spec.textures.filter((t) => t.constant)) {
    constants[textureKey(t.tensor, t.index)] = parseNpy(await fetchFile(base + t.constant, "arrayBuffer"), t.constant);
  }
  return { spec, vertex, passes, constants, base };
}

/** Passes that write more render targets than the browser offers (`room`) are replaced by
 *  the programs webgl.json ships for them with fewer targets each (the most that fit; same
 *  bytes); returns a note for the ready message, or "" if none. */
export async function fitDrawBuffers(net, limits) {
  const most = Math.max(...net.passes.map((p) => p.outputs.length));
  const room = limits.drawBuffers.value;
  if (most <= room) return "";
  const passes = [];
  for (const pass of net.passes) {
    if (pass.outputs.length <= room) {
      passes.push(pass);
    } else {
      const fits = Object.keys(pass.fallback).map(Number).filter((n) => n <= room);
      passes.push(...(await withSources(pass.fallback[Math.max(...fits)], net.base)));
    }
  }
  const before = net.passes.length;
  net.passes = passes;
  const kind = room === 1 ? "one-target passes" : `passes of at most ${room} targets`;
  return `The net writes up to ${most} render targets per pass, but this browser offers `
    + `${room} (WEBGL_draw_buffers${limits.drawBuffers.note}): its ${before} passes run as `
    + `${passes.length} ${kind}, with the same output and more texture fetches.`;
}

/** [height, width] by a size rule, from the sizes found so far. */
function applySizeRule(rule, sizes) {
  if (rule.fixed) return rule.fixed;
  return sizes[rule.from].slice(0, 2).map((n) => Math.floor((n * rule.num + rule.offset) / rule.den));
}

/** [x, y] of a uniform formula, from the tensors' sizes ([height, width]). */
function evaluateUniform(formula, sizes) {
  return [1, 0].map((axis) => {
    const offset = Array.isArray(formula.offset) ? formula.offset[1 - axis] : formula.offset;
    const sum = formula.terms.reduce((s, [coef, tensor, div]) => s + coef * Math.ceil(sizes[tensor][axis] / div),
      offset);
    const value = Math.floor(Math.max(sum, formula.at_least ?? -Infinity) / formula.divide);
    return formula.invert ? 1 / value : value;
  });
}

/** Every uniform of `pass`: {name: [x, y]}. */
export function passUniforms(pass, sizes) {
  return Object.fromEntries(Object.entries(pass.uniforms).map(([name, f]) => [name, evaluateUniform(f, sizes)]));
}

/** A run of an input of height x width: {shapes: {tensor: [h, w, c]}, textures: {key: {tensor,
 *  index, width, height, format, constant, layer}}, uniforms: {pass: {name: [x, y]}}} (of
 *  spec.passes; workbench.ir Graph.shapes, es2.plan.textures and ir.uniform_values agree). */
export function plan(spec, height, width) {
  const shapes = { [spec.input.name]: [height, width, spec.input.channels] };
  for (const t of spec.tensors) shapes[t.name] = [...applySizeRule(t.size, shapes), t.channels];
  const textures = {};
  for (const t of spec.textures) {
    const [h, w] = applySizeRule(t.size, shapes);
    textures[textureKey(t.tensor, t.index)] = { ...t, width: w, height: h };
  }
  const uniforms = Object.fromEntries(spec.passes.map((p) => [p.name, passUniforms(p, shapes)]));
  return { shapes, textures, uniforms };
}
