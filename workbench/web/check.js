/* The self-check of export-web --check (workbench/web/check.py): the embedded test inputs
 * run on this browser's WebGL, compared with TensorFlow's outputs and the emulator's bytes,
 * as a device report (workbench-device-report/1).
 */
import { fetchFile, textureKey } from "./net.js";
import { base64, decodeLogits } from "./outputs.js";

const $ = (id) => document.getElementById(id);
const REPORT_FORMAT = "workbench-device-report/1";

/** check.json and its raw files: input (RGBA8 bytes), tf (float32), expected (RGBA8 bytes). */
export async function loadCheck(file) {
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
    runner.fence(target, ...(pass.area || [0, 0]).slice(0, 2));
    return [pass.name, performance.now() - t0];
  });
}

/** Run the embedded inputs on `runner`: the device report (check.py's format). */
export function deviceReport(runner, limits, check) {
  let firstDrawMs = null;
  const entries = check.inputs.map((item) => {
    const source = new ImageData(item.input, item.width, item.height);
    const t0 = performance.now();
    const run = runner.run(source, limits, false);
    firstDrawMs ??= performance.now() - t0;
    return checkEntry(item, run.output, check, runner);
  });
  runner.run(new ImageData(check.inputs[0].input, check.inputs[0].width, check.inputs[0].height), limits, false);
  return {
    format: REPORT_FORMAT, source: "webgl", model: check.model, model_sha256: check.model_sha256,
    output_channels: check.output_channels, device: deviceInfo(runner.gl), user_agent: navigator.userAgent,
    compile_ms: runner.compileMs, first_draw_ms: firstDrawMs, passes: timePasses(runner), inputs: entries,
  };
}

export function showCheck(report, kind) {
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
