"""The convolution-algorithm study: direct vs im2col + GEMM (and Winograd) timed over image sizes.

The study we reproduce (:mod:`workbench.references`) compared direct ("full") convolution with
convolution as im2col + matrix multiply (ConvMM) on a Tegra K1, from CIFAR (32x32) to UXGA
(1600x1200): direct won on small images, ConvMM past about VGA; Winograd was named as the next
step.  Here, on whatever GL this machine has (Mesa llvmpipe: the "GPU" is the CPU), with the
kernels of :mod:`workbench.es31.conv`.
"""
from __future__ import annotations

from pathlib import Path

from workbench import references, tables, timings
from workbench.es31.conv import ALGORITHMS, Layer, time_conv
from workbench.files import read_json, write_json

STUDY_SIZES = [(32, 32), (224, 224), (640, 480), (800, 600), (1280, 1024), (1600, 1200)]  # (w, h)
# the study's Tegra K1 times (the two ends it reports)
STUDY_MS = references.CONV_STUDY_MS


def sweep(sizes, cin=3, cout=16, k=3, algorithms=ALGORITHMS, repeat=5, groups=1, progress=None):
    """Time each algorithm for each ``(width, height)`` in ``sizes`` (the median of at least
    5 runs, however small ``repeat``); a list of records ``{"width", "height", "pixels", "cin",
    "cout", "k", "groups", "algorithm", "ms", "runs_ms"}``."""
    repeat = max(repeat, 5)
    layer = Layer.random(cin, cout, k, groups=groups)
    records = []
    for w, h in sizes:
        for algorithm in algorithms:
            t = time_conv(algorithm, layer, (h, w), repeat)
            records.append({"width": w, "height": h, "pixels": w * h, "cin": cin, "cout": cout,
                            "k": k, "groups": groups, "algorithm": algorithm,
                            "ms": 1000 * t["seconds"], "runs_ms": [1000 * r for r in t["runs"]]})
            if progress:
                progress(records[-1])
    return records


def _by_size(records):
    """``{(pixels, "WxH"): {algorithm: record}}``."""
    out = {}
    for r in records:
        out.setdefault((r["pixels"], f"{r['width']}x{r['height']}"), {})[r["algorithm"]] = r
    return out


def _runs(record):
    return record.get("runs_ms") or [record["ms"]]


def faster(ra, rb):
    """``"a"`` or ``"b"`` where one record is faster beyond the spread of its runs
    (:func:`workbench.timings.faster`), else None."""
    return timings.faster(_runs(ra), _runs(rb))


def fastest(records) -> str:
    """Of the records of one point (one per algorithm), the algorithm faster than every other
    beyond the spread (:func:`faster`), else ``"tie: a, b"`` naming those it cannot split."""
    best = min(records, key=lambda r: r["ms"])
    ties = [r["algorithm"] for r in records if r is not best and faster(best, r) != "a"]
    return best["algorithm"] if not ties else "tie: " + ", ".join([best["algorithm"]] + ties)


def trend(records, a="direct", b="im2col_gemm") -> str:
    """Whether ``b`` gains on ``a`` from the smallest to the largest size, said only where the
    two ends' ratio ranges (from the runs' quartiles) do not overlap."""
    table = [r for r in ratio_table(records, a, b) if "range" in r]
    if len(table) < 2:
        return "one size: no trend"
    (lo0, hi0), (lo1, hi1) = (map(float, r["range"].split("-")) for r in (table[0], table[-1]))
    ends = (f"{a} / {b} {table[0][f'{a} / {b} here']:.2f} ({table[0]['range']}) at "
            f"{table[0]['size']} -> {table[-1][f'{a} / {b} here']:.2f} ({table[-1]['range']}) "
            f"at {table[-1]['size']}")
    if lo1 > hi0:
        return f"{b} gains on {a} as images grow, beyond the spread: {ends}"
    if hi1 < lo0:
        return f"{a} gains on {b} as images grow, beyond the spread: {ends}"
    return f"no trend beyond the spread: {ends}"


def crossovers(records, a="direct", b="im2col_gemm"):
    """Where ``a`` and ``b`` change places along the size axis of ``records`` (one
    (cin, cout, k) series), counting only sizes where one is faster beyond the spread of the
    runs (:func:`faster`): a list of ``{"between": (size, size), "faster_before",
    "faster_after"}``; sizes as ``"WxH"``.  Empty when one wins everywhere it is told apart."""
    series = [(label, faster(t[a], t[b])) for (_, label), t in sorted(_by_size(records).items())
              if a in t and b in t]
    called = [(label, a if w == "a" else b) for label, w in series if w]
    return [{"between": (l0, l1), "faster_before": w0, "faster_after": w1}
            for (l0, w0), (l1, w1) in zip(called, called[1:]) if w0 != w1]


def ratio_table(records, a="direct", b="im2col_gemm"):
    """Per size: median ms of each algorithm, ``a / b`` here with its range from the runs'
    quartiles, who is faster beyond the spread, and the study's ratio where it has one."""
    out = []
    for (_, label), t in sorted(_by_size(records).items()):
        w, h = map(int, label.split("x"))
        row = {"size": label, **{f"{k} ms": r["ms"] for k, r in t.items()}}
        if a in t and b in t:
            qa, qb = (timings.quartiles(_runs(t[k])) for k in (a, b))
            row[f"{a} / {b} here"] = t[a]["ms"] / t[b]["ms"]
            row["range"] = f"{qa[0] / qb[1]:.2f}-{qa[1] / qb[0]:.2f}"
            row["faster"] = {"a": a, "b": b, None: "tie"}[faster(t[a], t[b])]
        study = STUDY_MS.get((w, h))
        if study:
            row[f"{a} / {b} Tegra K1"] = study[a] / study[b]
        out.append(row)
    return out


def net_layers():
    """The 3x3 convolutions of our own nets, with their channel counts and groups:
    ``{label: (cin, cout, groups)}``."""
    return {"SR L2 48->32 g4": (48, 32, 4), "SR L4 24->16 g2": (24, 16, 2),
            "dogs 3x3 32->32 g8": (32, 32, 8), "dogs 3x3 192->192 g48": (192, 192, 48),
            "dense 3x3 32->32": (32, 32, 1)}


def plot(records, title="3x3 convolution, 3 -> 16 channels"):
    """Time vs image size (log-log), one line per algorithm."""
    from workbench.figures import plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for algorithm in dict.fromkeys(r["algorithm"] for r in records):
        rs = sorted((r for r in records if r["algorithm"] == algorithm), key=lambda r: r["pixels"])
        ax.plot([r["pixels"] for r in rs], [r["ms"] for r in rs], marker="o", label=algorithm)
    sizes = sorted({(r["pixels"], f"{r['width']}x{r['height']}") for r in records})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([p for p, _ in sizes])
    ax.set_xticklabels([s for _, s in sizes], rotation=30, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("input size (pixels, log scale)")
    ax.set_ylabel("ms per convolution")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


# --- results and the report --------------------------------------------------------------------

RESULT, NOTEBOOK = "conv_algorithms.json", "conv_algorithms"


def save_results(directory, renderer, repeat, records, found, shape, net_size, net_layers_,
                 net_records):
    """``conv_algorithms.json``: every timed point, the crossovers and the direct/ConvMM ratios
    beside the Tegra K1 study's, and the timings at our nets' channel counts."""
    write_json(Path(directory) / RESULT, {
        "renderer": renderer, "repeat": repeat, "records": records, "crossovers": found,
        "shape": shape, "study_ms": {f"{w}x{h}": v for (w, h), v in STUDY_MS.items()},
        "net_size": net_size, "net_layers": net_layers_, "net_records": net_records})


def report_section(directory) -> str | None:
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    sizes = dict.fromkeys(f"{r['width']}x{r['height']}" for r in results["records"])
    times = {(f"{r['width']}x{r['height']}", r["algorithm"]): r["ms"] for r in results["records"]}
    algorithms = list(dict.fromkeys(r["algorithm"] for r in results["records"]))
    rows = [{"input": size, **{f"{a} ms": times.get((size, a), "") for a in algorithms}}
            for size in sizes]
    shape = [{"input": r["size"], "direct / ConvMM here": r["direct / im2col_gemm here"],
              "range (quartiles)": r.get("range", ""), "faster beyond the spread": r.get("faster", ""),
              "direct / ConvMM Tegra K1": r.get("direct / im2col_gemm Tegra K1", "")}
             for r in results["shape"]]
    crossings = "; ".join(f"{pair}: " + (", ".join(f"{c['faster_before']} -> {c['faster_after']} "
                                                    f"between {' and '.join(c['between'])}"
                                                    for c in found) or "none")
                          for pair, found in results["crossovers"].items())
    return (f"3x3 conv, 3 -> 16 channels, ES 3.1 compute shaders on {results['renderer']}, "
            f"median of {max(results['repeat'], 5)}+ runs per point:\n\n"
            + tables.markdown(rows) + "\n\n" + tables.markdown(shape) + f"\n\nCrossovers "
            f"(only where the order holds beyond the runs' quartiles): {crossings}.")
