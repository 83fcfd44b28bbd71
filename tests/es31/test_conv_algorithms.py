"""Convolution algorithms as ES 3.1 compute shaders (workbench.es31.conv and .winograd,
workbench.studies.conv_algorithms) against tf.nn.conv2d on random layers.  TF runs here, the
shaders in the GL child process.

Tolerance: float32 throughout, unit-variance weights over fan-ins of 27-144, outputs of
order 1: the GPU and TF differ by summation order only (~1e-6); Winograd's transforms add a
few roundings more (its 0.5 and sums of 4 in G and A^T), so 1e-5 for all.
"""
import numpy as np
import pytest
import tensorflow as tf

from workbench.es31 import conv, winograd
from workbench.studies import conv_algorithms as ca


def _reference(layer, x):
    y = tf.nn.conv2d(x[None], layer.kernel, layer.stride, layer.padding.upper()).numpy()[0]
    return y + layer.bias


LAYERS = [  # cin, cout, k, stride, padding, groups
    (3, 16, 3, 1, "same", 1),     # the study's layer
    (8, 12, 3, 1, "valid", 1),
    (16, 16, 3, 1, "same", 4),    # grouped, 4 -> 4 per group (the dogs 3x3 units)
    (8, 8, 3, 2, "valid", 2),     # the dogs downsampling units
    (5, 7, 5, 2, "same", 1),      # channels not multiples of 4
    (12, 8, 1, 1, "same", 1),
]


@pytest.mark.parametrize("cin, cout, k, stride, padding, groups", LAYERS)
@pytest.mark.parametrize("algorithm", conv.ALGORITHMS)
def test_algorithm_matches_tf(algorithm, cin, cout, k, stride, padding, groups):
    layer = conv.Layer.random(cin, cout, k, stride, padding, groups, seed=cin + k)
    x = np.random.default_rng(k * stride).random((19, 23, cin), dtype=np.float32)
    if algorithm == "winograd" and (k != 3 or stride != 1):
        with pytest.raises(ValueError, match="3x3 kernels with stride 1 only"):
            conv.run(algorithm, layer, x)
        return
    y, ref = conv.run(algorithm, layer, x), _reference(layer, x)
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-5


def test_bands_split_large_intermediate_buffers(monkeypatch):
    """With a tiny band budget im2col and Winograd run in many bands: same result."""
    monkeypatch.setattr(conv, "BAND_BYTES", 4096)
    layer = conv.Layer.random(4, 8, 3, seed=3)
    x = np.random.default_rng(4).random((21, 17, 4), dtype=np.float32)
    for algorithm in ("im2col_gemm", "winograd"):
        assert len(conv.plan(algorithm, layer, x.shape[:2])[3]) > 4
        assert np.abs(conv.run(algorithm, layer, x) - _reference(layer, x)).max() <= 1e-5


def test_winograd_filter_transform():
    """U = G g G^T, and A^T [(G g G^T) * (B^T d B)] A is the 2x2 valid correlation of d."""
    rng = np.random.default_rng(5)
    g, d = rng.normal(size=(3, 3)), rng.normal(size=(4, 4))
    u = winograd.G @ g @ winograd.G.T
    v = winograd.BT @ d @ winograd.BT.T
    y = winograd.AT @ (u * v) @ winograd.AT.T
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(y, direct, atol=1e-12)


def test_timing_and_crossovers():
    records = ca.sweep([(16, 16), (24, 24)], algorithms=("direct", "im2col_gemm"), repeat=1)
    assert [r["algorithm"] for r in records] == ["direct", "im2col_gemm"] * 2
    assert all(r["ms"] > 0 and len(r["runs_ms"]) >= 5 for r in records)  # never one run
    assert all(r["ms"] == pytest.approx(np.median(r["runs_ms"])) for r in records)
    fake = [{"width": w, "height": w, "pixels": w * w, "algorithm": a, "ms": ms}
            for w, a, ms in [(32, "direct", 1), (32, "im2col_gemm", 2), (64, "direct", 5),
                             (64, "im2col_gemm", 4), (128, "direct", 9), (128, "im2col_gemm", 8)]]
    assert ca.crossovers(fake) == [{"between": ("32x32", "64x64"), "faster_before": "direct",
                                    "faster_after": "im2col_gemm"}]
    table = ca.ratio_table(fake + [{"width": 1600, "height": 1200, "pixels": 1920000,
                                    "algorithm": a, "ms": 1.0} for a in ("direct", "im2col_gemm")])
    assert table[-1]["direct / im2col_gemm Tegra K1"] == pytest.approx(2404 / 1696)


def test_a_crossover_needs_the_order_to_hold_beyond_the_spread():
    def rec(w, algorithm, runs):
        return {"width": w, "height": w, "pixels": w * w, "algorithm": algorithm,
                "ms": float(np.median(runs)), "runs_ms": runs}

    clear_a = [rec(32, "direct", [1.0, 1.1, 1.0, 1.2, 1.1]), rec(32, "im2col_gemm", [2.0, 2.1, 2.2, 2.0, 2.1])]
    # medians flip at 64, but the runs overlap: a tie, not a crossover
    noisy = [rec(64, "direct", [3.0, 5.0, 4.1, 3.5, 4.6]), rec(64, "im2col_gemm", [3.2, 4.8, 4.0, 3.6, 4.4])]
    clear_a_again = [rec(128, "direct", [5.0, 5.1, 5.0, 5.2, 5.1]), rec(128, "im2col_gemm", [8.0, 8.1, 8.2, 8.0, 8.1])]
    records = clear_a + noisy + clear_a_again
    assert ca.crossovers(records) == []
    table = ca.ratio_table(records)
    assert [r["faster"] for r in table] == ["direct", "tie", "direct"]
    clear_b = [rec(256, "direct", [9.0, 9.1, 9.2, 9.0, 9.1]), rec(256, "im2col_gemm", [4.0, 4.1, 4.2, 4.0, 4.1])]
    assert ca.crossovers(records + clear_b) == [{"between": ("128x128", "256x256"),
                                                 "faster_before": "direct",
                                                 "faster_after": "im2col_gemm"}]


def test_fastest_and_trend_say_only_what_the_spread_supports():
    def rec(w, algorithm, runs):
        return {"width": w, "height": w, "pixels": w * w, "algorithm": algorithm,
                "ms": float(np.median(runs)), "runs_ms": runs}

    point = [rec(32, "direct", [1.0, 1.1, 1.2, 1.0, 1.1]), rec(32, "im2col_gemm", [1.05, 1.15, 1.1, 1.2, 1.0]),
             rec(32, "winograd", [3.0, 3.1, 3.2, 3.0, 3.1])]
    assert ca.fastest(point) == "tie: direct, im2col_gemm"
    assert ca.fastest([point[0], point[2]]) == "direct"
    small = [rec(32, "direct", [1.0] * 5), rec(32, "im2col_gemm", [2.0] * 5)]     # ratio 0.5
    large = [rec(256, "direct", [4.0] * 5), rec(256, "im2col_gemm", [2.0] * 5)]   # ratio 2
    assert ca.trend(small + large).startswith("im2col_gemm gains on direct as images grow")
    wobbly = [rec(256, "direct", [1.5, 2.5, 2.0, 1.8, 2.2]), rec(256, "im2col_gemm", [2.0, 3.0, 2.5, 2.2, 2.8])]
    small_noisy = [rec(32, "direct", [0.8, 1.2, 1.0, 0.9, 1.1]), rec(32, "im2col_gemm", [1.0, 1.4, 1.2, 1.1, 1.3])]
    assert ca.trend(small_noisy + wobbly).startswith("no trend beyond the spread")
