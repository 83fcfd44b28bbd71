/* The peers benchmark, loaded into an exported page after workbench.js, tf.min.js and
 * tf-backend-wasm.min.js (workbench/studies/peers.py does it): this page's WebGL 1.0 runner and
 * TensorFlow.js (backends webgl, wasm, cpu) run the same net, weights and input in one browser.
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

const PEER_ACTIVATIONS = {
  bounded_relu: (x) => tf.clipByValue(x, 0, 1),
  relu6_scaled: (x) => tf.div(tf.clipByValue(x, 0, 6), 6),
  sigmoid_like: (x) => tf.clipByValue(tf.add(tf.add(tf.add(tf.mul(x, 0.05),
    tf.clipByValue(tf.mul(x, 0.1), -0.05, 0.05)), tf.clipByValue(tf.mul(x, 0.05), -0.125, 0.125)), 0.5), 0, 1),
  sigmoid: (x) => tf.sigmoid(x),
  linear: (x) => x,
};

function peerActivation(name, op) {
  const fn = PEER_ACTIVATIONS[name];
  if (!fn) throw new Error(`op ${op}: activation ${name} has no TF.js form in peers.js (known: ${Object.keys(PEER_ACTIVATIONS)})`);
  return fn;
}

async function loadTfjsNet() {
  const [spec, buffer] = await Promise.all([fetchFile("tfjs.json", "json"), fetchFile("tfjs.bin", "arrayBuffer")]);
  return { spec, values: new Float32Array(buffer) };
}

const sizeOf = (shape) => shape.reduce((a, b) => a * b, 1);

/** A grouped kernel (k, k, cin / groups, cout) as the dense (k, k, cin, cout) block-diagonal one. */
function blockDiagonal(data, [k1, k2, cg, cout], groups) {
  const cin = cg * groups;
  const out = new Float32Array(k1 * k2 * cin * cout);
  const perGroup = cout / groups;
  for (let t = 0; t < k1 * k2; t++) {
    for (let c = 0; c < cg; c++) {
      for (let o = 0; o < cout; o++) {
        const g = Math.floor(o / perGroup);
        out[(t * cin + g * cg + c) * cout + o] = data[(t * cg + c) * cout + o];
      }
    }
  }
  return tf.tensor(out, [k1, k2, cin, cout]);
}

/** The net's weights as tensors of the active backend; `grouping`: "split" or "block-diagonal". */
function buildTfjsNet({ spec, values }, grouping) {
  const view = ([offset, shape]) => values.subarray(offset, offset + sizeOf(shape));
  const tensor = (entry) => tf.tensor(view(entry), entry[1]);
  const ops = spec.ops.map((op) => {
    if (op.kind === "conv") {
      const split = op.groups > 1 && grouping === "split";
      const kernel = op.groups > 1 && !split ? blockDiagonal(view(op.kernel), op.kernel[1], op.groups) : tensor(op.kernel);
      const bias = tensor(op.bias);
      return { ...op, act: peerActivation(op.activation, op.name), split,
        filters: split ? tf.split(kernel, op.groups, 3) : [kernel], biases: split ? tf.split(bias, op.groups) : [bias],
        indices: op.gather ? tf.tensor1d(op.gather, "int32") : null };
    }
    if (op.kind === "dense") return { ...op, w: tensor(op.weight), b: tensor(op.bias) };
    if (op.kind === "add") return { ...op, act: peerActivation(op.activation, op.name) };
    return op;
  });
  return { spec, ops, lumaFilter: tf.tensor(spec.luma, [1, 1, 3, 1]) };
}

function peerLuma(net, rgb) {
  return tf.conv2d(tf.slice(rgb, [0, 0, 0, 0], [-1, -1, -1, 3]), net.lumaFilter, 1, "same");
}

/** The net on a [1, h, w, c] float32 input in [0, 1]: the output tensor (inside tf.tidy). */
function tfjsForward(net, input) {
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
        t[op.name] = tf.clipByValue(tf.add(up, tf.sub(tf.slice(y, [0, 0, 0, 0], [-1, -1, -1, 1]), peerLuma(net, up))), 0, 1);
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

async function tfjsSide(backend, grouping, net, pixels, initMs) {
  const channels = net.spec.input.channels;
  const t0 = performance.now();
  const built = buildTfjsNet(net, grouping);
  return { name: `TF.js ${backend}`, engine: "tfjs", backend, grouping, init_ms: initMs + performance.now() - t0,
    run: async () => {
      if (tf.getBackend() !== backend) await tf.setBackend(backend);
      const start = performance.now();
      const out = tf.tidy(() => tfjsForward(built, tf.div(tf.expandDims(tf.browser.fromPixels(pixels, channels), 0).toFloat(), 255)));
      const output = await out.data();
      const ms = performance.now() - start;
      out.dispose();
      return { ms, output };
    } };
}

/** Each pass of the page's runner timed to a 1-pixel readPixels of its target: the median of
 *  `count` runs, as [[pass, op, ms]]. */
function profilePage(runner, pixels, count) {
  const runs = Array.from({ length: count }, () => runImage(runner, pixels, page.limits, true).passes);
  return runner.passes.map((pass, i) => [pass.name, pass.op, median(runs.map((r) => r[i][1]))]);
}

/** The benchmark (see the file's comment).  `input`: base64 RGBA8 bytes of a width x height
 *  image.  Returns {sides: [{name, engine, backend, grouping, init_ms, first_run_ms, runs_ms,
 *  output (base64: float32, but the page's image as RGBA8 bytes)}]; `variants`: {name: {folder,
 *  programs}} of other exports of the net beside the page, run as more page sides (loadNet(folder));
 *  `programs`: what a program of the page writes (the table's grouping column).  Also returns
 *  page_passes and variant_passes ({side name: passes}: each pass's median time, profilePage),
 *  tfjs, renderer. */
async function benchPeers({ input, width, height, runs, warmup, backends, groupings, profile, wasmPath, variants, programs }) {
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
    for (const backend of backends) {
      const t0 = performance.now();
      if (!(await tf.setBackend(backend))) throw new Error(`TF.js backend ${backend} did not initialise`);
      await tf.ready();
      const initMs = performance.now() - t0;
      const flags = {};
      for (const f of ["WEBGL_VERSION", "WEBGL_PACK", "WASM_HAS_SIMD_SUPPORT", "WASM_HAS_MULTITHREAD_SUPPORT"]) {
        try { flags[f] = await tf.env().getAsync(f); } catch (e) { /* not a flag of this build */ }
      }
      tfjs.backends[backend] = { init_ms: initMs, flags };
      for (const grouping of grouped ? groupings : ["none"]) sides.push(await tfjsSide(backend, grouping, net, pixels, initMs));
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
    renderer: page.limits.renderer, user_agent: navigator.userAgent };
}

window.benchPeers = benchPeers;
