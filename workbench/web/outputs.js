/* The outputs on the CPU: a classifier's logits decoded and put through a softmax, the
 * bicubic upscale shown beside an SR net's output, base64 of bytes.
 */

/** Logits from the stored dense output: two values per texel, 16-bit fixed point in byte pairs
 *  (high, low; q = 256 v + 32768, see workbench/es2/fixed16.py) or float. */
export function decodeLogits(stored, output) {
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

export function softmax(values) {
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
export function bicubicUpscale(rgba, width, height, scale) {
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

export function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
