"""Whether an ONNX Resize is the IR's upsampling: its scale on each NCHW axis, and both on a
probe."""
from __future__ import annotations

import numpy as np

from workbench.ir.onnx.reader import refuse, text


def resize_scales(node, attrs, scales, sizes, shape) -> list[float]:
    """The scale of each NCHW axis of a Resize node given ``scales`` or ``sizes`` (of its
    ``axes``, opset 18, else of all four) and ``shape``, its input's NCHW shape (None where
    dynamic): ``keep_aspect_ratio_policy`` ``not_larger`` / ``not_smaller`` scales every
    axis of ``axes`` by the smallest / largest of ``sizes / shape``."""
    axes = [int(a) for a in attrs.get("axes", range(4))]
    if any(not -4 <= a < 4 for a in axes) or len({a % 4 for a in axes}) != len(axes):
        refuse(node, f"axes {axes}: distinct axes of the NCHW input")
    axes = [a % 4 for a in axes]
    by_sizes = scales is None or scales.size == 0
    if by_sizes and sizes is None:
        refuse(node, "neither scales nor sizes is given")
    values = np.asarray(sizes if by_sizes else scales, np.float64).reshape(-1)
    if values.size != len(axes):
        refuse(node, f"{values.size} {'sizes' if by_sizes else 'scales'} for axes {axes}")
    if by_sizes:
        if shape is None:
            refuse(node, "sizes of a tensor of dynamic size; export with scale_factor")
        values = values / [shape[a] for a in axes]
        policy = text(attrs.get("keep_aspect_ratio_policy", b"stretch"))
        if policy in ("not_larger", "not_smaller"):
            values[:] = values.min() if policy == "not_larger" else values.max()
    full = [1.0] * 4
    for axis, value in zip(axes, values):
        full[axis] = float(value)
    return full


def resize_agrees(attrs, scale, how, opsets) -> bool:
    """Whether a Resize node of ``attrs`` gives the IR's upsampling on a 5x6 probe."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    probe = np.random.default_rng(0).random((1, 1, 5, 6)).astype(np.float32)
    resize = onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"], **{  # of scales
        k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")
        and (k != "antialias" or v)})
    graph = onnx.helper.make_graph(
        [resize], "probe", [onnx.helper.make_tensor_value_info("x", 1, probe.shape)],
        [onnx.helper.make_tensor_value_info("y", 1, None)],
        [onnx.numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")])
    try:
        got = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=opsets)).run(
            None, {"x": probe})[0][0, 0]
    except Exception:  # a mode the evaluator refuses on it (tf_crop_and_resize, no roi)
        return False
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
