/* The peers benchmark, loaded into an exported page after workbench.js, tf.min.js and
 * tf-backend-wasm.min.js (workbench/studies/peers.py does it, the page served cross-origin
 * isolated): this page's WebGL 1.0 runner, TensorFlow.js (backends webgl, wasm on one thread,
 * wasm with its thread pool, cpu) and onnxruntime-web (wasm, threaded; webgl) run the same net,
 * weights and input in one browser.
 *
 * TF.js's WASM back end is one per TF.js: the main one (window.tf: webgl, wasm, cpu) runs its
 * build without threads (WASM_HAS_MULTITHREAD_SUPPORT set false, as on a page without
 * cross-origin isolation), a second TF.js in an iframe of the same origin (tfjs-threads.html,
 * which reports 2 x threads as navigator.hardwareConcurrency to it: TF.js caps its pool at half
 * of that) its threaded SIMD build with tf.wasm.setThreadsCount(threads); both are driven from
 * here (tensors and pixels made in the frame's realm).  onnxruntime-web: ort.wasm.min.js
 * (ort.env.wasm.numThreads = threads) and ort.webgl.min.js, loaded by loadScript, each its own
 * `ort`; the model is the IR graph as ONNX (workbench/web/ort.py: model.onnx + ort.json), fed
 * NCHW; the SR net's luma in and out are made and recombined here in JS (ortInput, demux: the
 * same bilinear chroma as the page's demux), inside the timed run.
 *
 * The TF.js net is built from the IR export tfjs.json + tfjs.bin (workbench/web/tfjs.py) with
 * tf ops: conv -> tf.fused.conv2d (bias fused) + the activation (as workbench/nets/activations.py),
 * a grouped conv either split into one conv per group ("split") or as one conv with a
 * block-diagonal filter ("block-diagonal"); depth_to_space -> tf.depthToSpace, the SR demux
 * recombining the luma with tf.image.resizeBilinear of the RGB input (half-pixel centres) as
 * the page's demux does; dense -> mean + tf.matMul + bias.  The SR net's TF.js output is the
 * page's end to end: RGB in [0, 1] -> luma -> net -> depth-to-space -> chroma -> RGB clipped.
 *
 * A run: the input ImageData uploaded (tf.browser.fromPixels / texImage2D), the net, the output
 * read back (await data() / readPixels).  benchPeers() times each side's first run, then
 * `warmup` untimed runs, then `runs` rounds of one run per side in turn (interleaved).
 */
"use strict";

// The page's own code (ES modules, see workbench.js) as it hands it to this script.
const { fetchFile, loadNet, fitDrawBuffers, checkNetLimits, Runner, runImage, decodeLogits, softmax, base64 } = window.workbench.modules;
const page = window.workbench.page;

// Activations as tf ops; `tf`: the TF.js of the realm that runs them (this page's or a frame's).
const PEER_ACTIVATIONS = {
  // ACTIVATIONS: the registered ones' TF.js forms (workbench/web/tfjs.py)
};

// `slope`, `zero`: a PRelu's, one per channel (tensors), for "prelu" and "bounded_prelu".
function peerActivation(tf, name, op, slope, zero) {
  if (name.startsWith("leaky_relu:")) return (x) => tf.leakyRelu(x, Number(name.split(":")[1]));
  if (name === "prelu") return (x) => tf.prelu(x, slope);
  if (name === "bounded_prelu") return (x) => tf.clipByValue(tf.add(tf.prelu(x, slope), zero), 0, 1);
  const fn = PEER_ACTIVATIONS[name];
  if (!fn) throw new Error(`op ${op}: activation ${name} has no TF.js form in peers.js (known: ${Object.keys(PEER_ACTIVATIONS)})`);
  return (x) => fn(tf, x);
}

async function loadTfjsNet() {
  const [spec, buffer] = await Promise.all([fetchFile("tfjs.json", "json"), fetchFile("tfjs.bin", "arrayBuffer")]);
  return { spec, values: new Float32Array(buffer) };
}

const sizeOf = (shape) => shape.reduce((a, b) => a * b, 1);

/** A grouped kernel (k, k, cin / groups, cout) as the dense (k, k, cin, cout) block-diagonal one. */
function blockDiagonal(realm, data, [k1, k2, cg, cout], groups) {
  const cin = cg * groups;
  const out = new realm.Float32Array(k1 * k2 * cin * cout);
  const perGroup = cout / groups;
  for (let t = 0; t < k1 * k2; t++) {
    for (let c = 0; c < cg; c++) {
      for (let o = 0; o < cout; o++) {
        const g = Math.floor(o / perGroup);
        out[(t * cin + g * cg + c) * cout + o] = data[(t * cg + c) * cout + o];
      }
    }
  }
  return realm.tf.tensor(out, [k1, k2, cin, cout]);
}

/** The net's weights as tensors of the active backend of `realm`'s TF.js ({tf, Float32Array}:
 *  the window that loaded it); `grouping`: "split" or "block-diagonal". */
function buildTfjsNet(realm, { spec, values: mine }, grouping) {
  const tf = realm.tf;
  const values = new realm.Float32Array(mine);  // typed arrays of the realm (TF.js checks instanceof)
  const view = ([offset, shape]) => values.subarray(offset, offset + sizeOf(shape));
  const tensor = (entry) => tf.tensor(view(entry), entry[1]);
  const prelu = (op) => [op.slope && tensor(op.slope), op.zero && tensor(op.zero)];
  const ops = spec.ops.map((op) => {
    if (op.kind === "conv") {
      const split = op.groups > 1 && grouping === "split";
      const kernel = op.groups > 1 && !split ? blockDiagonal(realm, view(op.kernel), op.kernel[1], op.groups) : tensor(op.kernel);
      const bias = tensor(op.bias);
      return { ...op, act: peerActivation(tf, op.activation, op.name, ...prelu(op)), split,
        filters: split ? tf.split(kernel, op.groups, 3) : [kernel], biases: split ? tf.split(bias, op.groups) : [bias],
        indices: op.gather ? tf.tensor1d(op.gather, "int32") : null };
    }
    if (op.kind === "dense") return { ...op, w: tensor(op.weight), b: tensor(op.bias) };
    if (op.kind === "add") return { ...op, act: peerActivation(tf, op.activation, op.name, ...prelu(op)) };
    return op;
  });
  return { tf, spec, ops, lumaFilter: tf.tensor(spec.luma, [1, 1, 3, 1]) };
}

function peerLuma(net, rgb) {
  const tf = net.tf;
  return tf.conv2d(tf.slice(rgb, [0, 0, 0, 0], [-1, -1, -1, 3]), net.lumaFilter, 1, "same");
}

/** The net on a [1, h, w, c] float32 input in [0, 1]: the output tensor (inside tf.tidy). */
function tfjsForward(net, input) {
  const tf = net.tf;
  const t = { [net.spec.input.name]: input };
  for (const op of net.ops) {
    let x = t[op.input];
    if (op.kind === "conv") {
      if (op.luma) x = peerLuma(net, x);
      if (op.indices) x = tf.gather(x, op.indices, 3);
      const parts = op.split ? tf.split(x, op.groups, 3) : [x];
      const outs = parts.map((part, g) => tf.fused.conv2d({ x: part, filter: op.filters[g], bias: op.biases[g],
        strides: op.stride, pad: op.padding }));
      let y = outs.length > 1 ? tf.concat(outs, 3) : outs[0];
      if (op.residual) y = tf.add(y, t[op.residual]);
      t[op.name] = op.act(y);
    } else if (op.kind === "depth_to_space") {
      const y = tf.depthToSpace(x, op.block, "NHWC");
      if (op.chroma_from) {
        const rgb = t[op.chroma_from];
        const up = tf.image.resizeBilinear(tf.slice(rgb, [0, 0, 0, 0], [-1, -1, -1, 3]), y.shape.slice(1, 3), false, true);
        let luma = tf.slice(y, [0, 0, 0, 0], [-1, -1, -1, 1]);
        if (op.anchor) {  // the sub-pixels correct the input's luma upsampled
          const anchor = op.anchor === "nearest"
            ? tf.image.resizeNearestNeighbor(peerLuma(net, rgb), y.shape.slice(1, 3), false, true) : peerLuma(net, up);
          luma = tf.clipByValue(tf.add(anchor, tf.mul(tf.sub(luma, 0.5), op.anchor_scale)), 0, 1);
        }
        t[op.name] = tf.clipByValue(tf.add(up, tf.sub(luma, peerLuma(net, up))), 0, 1);
      } else {
        t[op.name] = y;
      }
    } else if (op.kind === "pool") {
      const pool = op.pool === "max" ? tf.maxPool : tf.avgPool;
      t[op.name] = pool(x, op.size, op.stride, op.padding);
    } else if (op.kind === "add") {
      t[op.name] = op.act(tf.add(x, t[op.other]));
    } else if (op.kind === "concat") {
      t[op.name] = tf.concat([x, ...op.others.map((name) => t[name])], 3);
    } else if (op.kind === "upsample") {
      const size = [x.shape[1] * op.scale, x.shape[2] * op.scale];
      t[op.name] = op.interpolation === "nearest"
        ? tf.image.resizeNearestNeighbor(x, size, false, true) : tf.image.resizeBilinear(x, size, false, true);
    } else if (op.kind === "dense") {
      const cin = op.weight[1][0];
      const v = op.pool ? tf.mean(x, [1, 2]) : tf.reshape(x, [1, -1]);
      const logits = tf.add(tf.matMul(tf.slice(v, [0, 0], [1, cin]), op.w), op.b);
      t[op.name] = op.softmax ? tf.softmax(logits) : logits;
    } else {
      throw new Error(`op ${op.name}: unknown kind ${op.kind}`);
    }
  }
  return t[net.spec.output];
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

/** One side of the benchmark: {name, ..., run: async () => ({ms, output: typed array})}. */
function pageSide(name, runner, pixels, programs) {
  return { name, engine: "page", grouping: programs, init_ms: runner.compileMs, runner,
    run: async () => {
      const r = runImage(runner, pixels, page.limits, false);
      const out = page.net.spec.output;  // a classifier's logits decoded as the page decodes them
      if (out.kind !== "logits") return { ms: r.runMs, output: r.output };
      const { logits } = decodeLogits(r.output, out); // the net's output: its softmax where it ends with one
      return { ms: r.runMs, output: Float32Array.from(out.softmax ? softmax(logits) : logits) };
    } };
}

/** A TF.js side: `realm` {tf, Float32Array, ImageData} (see buildTfjsNet), `peer` its name in
 *  bench_web's --backends, `threads` the WASM back end's. */
async function tfjsSide(realm, peer, backend, threads, grouping, net, pixels, initMs) {
  const tf = realm.tf;
  const channels = net.spec.input.channels;
  const t0 = performance.now();
  const built = buildTfjsNet(realm, net, grouping);
  const input = new realm.ImageData(new realm.Uint8ClampedArray(pixels.data), pixels.width, pixels.height);
  // the frame's threaded build named apart from the main one's where both run one thread
  const threadsBuild = peer === "wasm-threads" && threads === 1 ? ", threads build" : "";
  const name = `TF.js ${backend}` + (backend === "wasm" ? `${threadsBuild}, ${threads} thread${threads === 1 ? "" : "s"}` : "");
  return { name, engine: "tfjs", peer, backend, threads, grouping, init_ms: initMs + performance.now() - t0,
    run: async () => {
      if (tf.getBackend() !== backend) await tf.setBackend(backend);
      const start = performance.now();
      const out = tf.tidy(() => tfjsForward(built, tf.div(tf.expandDims(tf.browser.fromPixels(input, channels), 0).toFloat(), 255)));
      const output = await out.data();
      const ms = performance.now() - start;
      out.dispose();
      return { ms, output };
    } };
}

/** The ONNX model's input for `pixels` (RGBA8 ImageData): NCHW float32, the luma (io.luma) or
 *  io.channels of RGB, in [0, 1]. */
function ortInput(pixels, io) {
  const { width: w, height: h, data } = pixels;
  const n = w * h;
  const out = new Float32Array(io.channels * n);
  const [kr, kg, kb] = io.luma_weights;
  for (let i = 0; i < n; i++) {
    const r = data[4 * i] / 255, g = data[4 * i + 1] / 255, b = data[4 * i + 2] / 255;
    if (io.luma) out[i] = kr * r + kg * g + kb * b;
    else for (let c = 0; c < io.channels; c++) out[c * n + i] = data[4 * i + c] / 255;
  }
  return out;
}

/** The SR demux in JS: the net's luma `y` (oh x ow) with the bilinear upscale of the RGB input
 *  (half-pixel centres, edges clamped, as tf.image.resizeBilinear(..., false, true) and the
 *  page's demux): rgb + (y - luma(rgb)), clipped to [0, 1]; HxWx3 float32. */
function demux(pixels, y, oh, ow, [kr, kg, kb]) {
  const { width: w, height: h, data } = pixels;
  const taps = (outSize, inSize) => {  // per output row or column: the two input taps, the weight
    const i0 = new Int32Array(outSize), i1 = new Int32Array(outSize), f = new Float32Array(outSize);
    for (let o = 0; o < outSize; o++) {
      const x = ((o + 0.5) * inSize) / outSize - 0.5;
      const i = Math.floor(x);
      i0[o] = Math.min(Math.max(i, 0), inSize - 1);
      i1[o] = Math.min(Math.max(i + 1, 0), inSize - 1);
      f[o] = x - i;
    }
    return [i0, i1, f];
  };
  const [y0s, y1s, fys] = taps(oh, h), [x0s, x1s, fxs] = taps(ow, w);
  const out = new Float32Array(oh * ow * 3);
  const clip = (v) => (v < 0 ? 0 : v > 1 ? 1 : v);
  let p = 0;
  for (let oy = 0; oy < oh; oy++) {
    const r0 = y0s[oy] * w, r1 = y1s[oy] * w, fy = fys[oy];
    for (let ox = 0; ox < ow; ox++, p++) {
      const a = (r0 + x0s[ox]) * 4, b = (r0 + x1s[ox]) * 4, c = (r1 + x0s[ox]) * 4, d = (r1 + x1s[ox]) * 4;
      const fx = fxs[ox];
      const tr = data[a] + (data[b] - data[a]) * fx, br = data[c] + (data[d] - data[c]) * fx;
      const tg = data[a + 1] + (data[b + 1] - data[a + 1]) * fx, bg = data[c + 1] + (data[d + 1] - data[c + 1]) * fx;
      const tb = data[a + 2] + (data[b + 2] - data[a + 2]) * fx, bb = data[c + 2] + (data[d + 2] - data[c + 2]) * fx;
      const r = (tr + (br - tr) * fy) / 255, g = (tg + (bg - tg) * fy) / 255, bl = (tb + (bb - tb) * fy) / 255;
      const delta = y[p] - (kr * r + kg * g + kb * bl);
      out[3 * p] = clip(r + delta);
      out[3 * p + 1] = clip(g + delta);
      out[3 * p + 2] = clip(bl + delta);
    }
  }
  return out;
}

/** An NCHW image [1, c, h, w] as HxWxc. */
function toHWC(data, [, c, h, w]) {
  const out = new Float32Array(data.length);
  for (let k = 0; k < c; k++) for (let i = 0; i < h * w; i++) out[i * c + k] = data[k * h * w + i];
  return out;
}

/** An onnxruntime-web side: `ort` the build that runs it, `backend` its execution provider.
 *  A run: the input made in JS (ortInput), session.run, the output read (its data on the CPU)
 *  and, for the SR net, the demux in JS; `glue_ms` of a run: the JS parts. */
async function ortSide(ort, peer, backend, threads, model, io, pixels) {
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(model, { executionProviders: [backend] });
  const initMs = performance.now() - t0;
  if (backend === "wasm") threads = ort.env.wasm.numThreads;  // what ORT kept (1 without isolation)
  const shape = [1, io.channels, pixels.height, pixels.width];
  const name = `onnxruntime-web ${backend}` + (backend === "wasm" ? `, ${threads} thread${threads === 1 ? "" : "s"}` : "");
  return { name, engine: "ort", peer, backend, threads, grouping: "onnx", init_ms: initMs, glue_ms: [],
    run: async function () {
      const start = performance.now();
      const feed = new ort.Tensor("float32", ortInput(pixels, io), shape);
      const t1 = performance.now();
      const result = await session.run({ [io.input]: feed });
      const out = result[io.output];
      const data = out.data;
      const t2 = performance.now();
      let output = data;
      if (io.chroma) output = demux(pixels, data, out.dims[2], out.dims[3], io.luma_weights);
      else if (!io.logits) output = toHWC(data, out.dims);
      const ms = performance.now() - start;
      this.glue_ms.push(t1 - start + performance.now() - t2);
      feed.dispose?.();
      out.dispose?.();
      return { ms, output };
    } };
}

/** A classic script (an UMD bundle) added to the page; resolves once it ran. */
function loadScript(url) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = url;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`could not load ${url}`));
    document.head.appendChild(script);
  });
}

/** An iframe of `url` (same origin) once loaded: its window. */
function loadFrame(url) {
  return new Promise((resolve, reject) => {
    const frame = document.createElement("iframe");
    frame.src = url;
    frame.style.display = "none";
    frame.onload = () => resolve(frame.contentWindow);
    frame.onerror = () => reject(new Error(`could not load ${url}`));
    document.body.appendChild(frame);
  });
}

/** TF.js's flags of the wasm and webgl back ends that the notes report. */
async function tfjsFlags(tf) {
  const flags = {};
  for (const f of ["WEBGL_VERSION", "WEBGL_PACK", "WASM_HAS_SIMD_SUPPORT", "WASM_HAS_MULTITHREAD_SUPPORT"]) {
    try { flags[f] = await tf.env().getAsync(f); } catch (e) { /* not a flag of this build */ }
  }
  return flags;
}

/** Each pass of the page's runner timed to a 1-pixel readPixels of its target: the median of
 *  `count` runs, as [[pass, op, ms]]. */
function profilePage(runner, pixels, count) {
  const runs = Array.from({ length: count }, () => runImage(runner, pixels, page.limits, true).passes);
  return runner.passes.map((pass, i) => [pass.name, pass.op, median(runs.map((r) => r[i][1]))]);
}

/** The benchmark (see the file's comment).  `input`: base64 RGBA8 bytes of a width x height
 *  image.  Returns {sides: [{name, engine, peer, backend, threads, grouping, init_ms,
 *  first_run_ms, runs_ms, output (base64: float32, but the page's image as RGBA8 bytes)}]; `variants`:
 *  {name: {folder, programs}} of other exports of the net beside the page, run as more page sides
 *  (loadNet(folder)); `programs`: what a program of the page writes (the table's grouping column);
 *  `backends`: the TF.js peers (webgl, wasm, wasm-threads, cpu), `ort`: the onnxruntime-web ones
 *  (wasm, webgl); `threads`: the threaded WASM back ends' threads (null: navigator.hardwareConcurrency).
 *  Also returns page_passes and variant_passes ({side name: passes}: each pass's median time,
 *  profilePage), tfjs, ort, cross_origin_isolated, hardware_concurrency, renderer. */
async function benchPeers({ input, width, height, runs, warmup, backends, ort: ortBackends = [], threads = null,
  groupings, profile, wasmPath, ortPath, variants, programs }) {
  threads = threads || navigator.hardwareConcurrency;
  const bytes = Uint8ClampedArray.from(atob(input), (c) => c.charCodeAt(0));
  const pixels = new ImageData(bytes, width, height);
  const sides = [pageSide("ours (WebGL 1.0 page)", page.runner, pixels, programs)];
  for (const [name, { folder, programs: how }] of Object.entries(variants)) {  // other exports of the net
    const net = await loadNet(folder);
    const note = await fitDrawBuffers(net, page.limits);  // MRT pages
    checkNetLimits(net, page.limits);
    sides.push({ ...pageSide(`ours, ${name}`, new Runner(page.runner.gl, net), pixels, how), note });
  }
  const tfjs = { version: typeof tf === "undefined" ? null : tf.version.tfjs, backends: {} };
  if (backends.length) {
    const net = await loadTfjsNet();
    const grouped = net.spec.ops.some((op) => op.kind === "conv" && op.groups > 1);
    tf.wasm.setWasmPaths(wasmPath);
    tf.env().set("WASM_HAS_MULTITHREAD_SUPPORT", false);  // "wasm": the build without threads
    for (const peer of backends) {
      // "wasm-threads": the second TF.js, in a frame, its threaded build with `threads` threads
      const realm = peer === "wasm-threads" ? await loadFrame(`tfjs-threads.html?threads=${threads}`) : window;
      const backend = peer === "wasm-threads" ? "wasm" : peer;
      const t0 = performance.now();
      if (realm !== window) {
        realm.tf.wasm.setWasmPaths(wasmPath);
        realm.tf.wasm.setThreadsCount(threads);
      }
      if (!(await realm.tf.setBackend(backend))) throw new Error(`TF.js backend ${peer} did not initialise`);
      await realm.tf.ready();
      const initMs = performance.now() - t0;
      const used = backend === "wasm" ? realm.tf.wasm.getThreadsCount() : null;
      tfjs.backends[peer] = { init_ms: initMs, flags: await tfjsFlags(realm.tf), threads: used,
        threads_asked: realm !== window ? threads : null };
      for (const grouping of grouped ? groupings : ["none"]) {
        sides.push(await tfjsSide(realm, peer, backend, used, grouping, net, pixels, initMs));
      }
    }
  }
  const ortInfo = { backends: {} };
  if (ortBackends.length) {
    const [model, io] = await Promise.all([fetchFile("model.onnx", "arrayBuffer"), fetchFile("ort.json", "json")]);
    for (const backend of ortBackends) {
      await loadScript(`${ortPath}ort.${backend}.min.js`);
      const ort = window.ort;  // this build's; the next script's replaces the global
      ortInfo.version = ort.env.versions?.web;
      if (backend === "wasm") {
        ort.env.wasm.wasmPaths = ortPath;
        ort.env.wasm.numThreads = threads;
      }
      const side = await ortSide(ort, `ort-${backend}`, backend, null, new Uint8Array(model), io, pixels);
      ortInfo.backends[backend] = { init_ms: side.init_ms, threads: side.threads,
        threads_asked: backend === "wasm" ? threads : null };
      sides.push(side);
    }
  }
  for (const side of sides) {
    const first = await side.run();
    side.first_run_ms = first.ms;
    side.output = base64(new Uint8Array(first.output.buffer, first.output.byteOffset, first.output.byteLength));
    for (let i = 0; i < warmup; i++) await side.run();
    side.runs_ms = [];
  }
  for (let r = 0; r < runs; r++) {
    for (const side of sides) side.runs_ms.push((await side.run()).ms);
  }
  const pagePasses = profilePage(page.runner, pixels, profile);
  const variantPasses = Object.fromEntries(sides.filter((s) => s.runner && s.runner !== page.runner)
    .map((s) => [s.name, profilePage(s.runner, pixels, profile)]));
  return { sides: sides.map(({ run, runner, ...rest }) => rest), page_passes: pagePasses, variant_passes: variantPasses, tfjs,
    ort: ortInfo, cross_origin_isolated: self.crossOriginIsolated, hardware_concurrency: navigator.hardwareConcurrency,
    renderer: page.limits.renderer, user_agent: navigator.userAgent };
}

window.benchPeers = benchPeers;
