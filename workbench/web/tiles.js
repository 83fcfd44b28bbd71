/* Tiling, as workbench/es2/tiling.py: an image whose textures would exceed the browser's
 * MAX_TEXTURE_SIZE runs in overlapping tiles of one size when webgl.json gives the net's
 * receptive_field; the stitched output has the untiled run's bytes.
 */
import { plan } from "./net.js";
import { LimitError } from "./gl.js";

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
export function runImage(runner, source, limits, fences = true) {
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
