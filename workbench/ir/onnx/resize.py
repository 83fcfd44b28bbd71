"""Whether an ONNX Resize is the IR's upsampling: both on a probe."""
from __future__ import annotations

import numpy as np


def resize_agrees(attrs, scale, how, opsets) -> bool:
    """Whether a Resize node of ``attrs`` gives the IR's upsampling on a 5x6 probe."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    probe = np.random.default_rng(0).random((1, 1, 5, 6)).astype(np.float32)
    resize = onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"], **{
        k: v for k, v in attrs.items() if k != "axes" and (k != "antialias" or v)})
    graph = onnx.helper.make_graph(
        [resize], "probe", [onnx.helper.make_tensor_value_info("x", 1, probe.shape)],
        [onnx.helper.make_tensor_value_info("y", 1, None)],
        [onnx.numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")])
    got = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=opsets)).run(
        None, {"x": probe})[0][0, 0]
    return bool(np.allclose(got, upsample_reference(probe[0, 0], scale, how), atol=1e-6))


def upsample_reference(x, scale, how) -> np.ndarray:
    """A 2-D array upsampled as :class:`workbench.ir.Upsample` means it (float64):
    ``"nearest"`` repeats each value; ``"bilinear"`` samples at half-pixel centres with the
    edges clamped (``tf.image.resize``)."""
    if how == "nearest":
        return np.repeat(np.repeat(x, scale, 0), scale, 1)

    def weights(n):  # (n * scale, n) interpolation matrix along one axis
        src = np.clip((np.arange(n * scale) + 0.5) / scale - 0.5, 0, n - 1)
        low = np.floor(src).astype(int)
        high, frac = np.minimum(low + 1, n - 1), src - low
        m = np.zeros((n * scale, n))
        m[np.arange(n * scale), low] += 1 - frac
        m[np.arange(n * scale), high] += frac
        return m
    return weights(x.shape[0]) @ np.asarray(x, np.float64) @ weights(x.shape[1]).T
