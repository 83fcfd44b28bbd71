/* Runs a net exported by workbench.web with WebGL 1.0 (= OpenGL ES 2.0, GLSL ES 1.00): the page.
 *
 * Everything about the net comes from webgl.json (workbench/web/page.py page_spec): size rules
 * of every tensor and texture, each pass's shader, bindings and uniform formulas, the programs
 * to run where the browser offers fewer render targets than a pass writes, how to decode the
 * output, the receptive field for tiling.  This code evaluates them and knows no op.  Modules:
 * net.js (loading, planning), gl.js (limits, runner), tiles.js, outputs.js, check.js.
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
import { fetchFile, fitDrawBuffers, loadNet, plan } from "./net.js";
import { Runner, browserLimits, checkNetLimits, createContext } from "./gl.js";
import { runImage } from "./tiles.js";
import { base64, bicubicUpscale, decodeLogits, softmax } from "./outputs.js";
import { deviceReport, loadCheck, showCheck } from "./check.js";

const $ = (id) => document.getElementById(id);

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
      // an upscaler (a whole scale > 1) is shown beside bicubic; any other image net alone
      const upscaler = Number.isInteger(scale) && scale > 1 && h === height * scale;
      const bicubic = upscaler ? bicubicUpscale(run.input, width, height, scale) : null;
      Object.assign(result, { width: w, height: h, output: base64(run.output), bicubic: bicubic && base64(bicubic), input: base64(run.input) });
      showCanvas("input", run.input, width, height, `input, ${width}x${height}${note}` + (upscaler ? ` (shown ×${scale}, nearest neighbour)` : ""));
      if (upscaler) showCanvas("bicubic", bicubic, w, h, `bicubic ×${scale} (MATLAB imresize, Keys a = −0.5; JavaScript on the CPU)`);
      showCanvas("output", run.output, w, h, `${spec.name}` + (upscaler ? ` ×${scale}` : "") + `, ${w}x${h} (WebGL, ${run.passes.length} passes)`);
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
    const { spec } = page.net;
    document.body.dataset.kind = spec.output.kind; // image or logits: the layout
    $("title").textContent = `${spec.name}: ${spec.passes.length} WebGL passes`
      + (spec.input.size ? `, input ${spec.input.size[1]}x${spec.input.size[0]}` : "");
    $("plan").textContent = spec.compiled_with || "";  // the compile options it was made with
    const gl = createContext(params);
    page.limits = browserLimits(gl, params);
    checkNetLimits(page.net, page.limits);
    const split = await fitDrawBuffers(page.net, page.limits);
    page.runner = new Runner(gl, page.net);
    setState("ready", `Ready (${page.limits.renderer}; ${page.net.passes.length} programs compiled in `
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

/** Run the embedded inputs; returns the device report and shows it (table, download link). */
async function runCheck() {
  if (!page.runner) return { error: page.loadError || "the net is not loaded yet" };
  setState("running", "Running the self-check…");
  try {
    const check = page.check || (page.check = await loadCheck(page.net.spec.check));
    const report = deviceReport(page.runner, page.limits, check);
    showCheck(report, check.kind);
    $("result").textContent = JSON.stringify(report);
    window.workbench.deviceReport = report;
    setState("done", `Self-check: ${report.inputs.length} inputs on ${report.device.unmasked_renderer || report.device.renderer}.`);
    return report;
  } catch (error) {
    setState("error", error.message, "error");
    return { error: error.message };
  }
}

/** Offer the self-check when the export embeds one; run it at once with ?check=1. */
async function setUpCheck() {
  if (!page.net.spec.check) return;
  $("check").hidden = false;
  $("check-run").addEventListener("click", runCheck);
  if (page.params.get("check") === "1") await runCheck();
}

// What the tests and peers.js (loaded into the page as a classic script) use.
window.workbench = {
  runUrl, runBlob, runCheck, plan, bicubicUpscale, spec: () => page.net && page.net.spec, deviceReport: null,
  page, modules: { fetchFile, loadNet, fitDrawBuffers, checkNetLimits, Runner, runImage, decodeLogits, softmax, base64 },
};
main();
