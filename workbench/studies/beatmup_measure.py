"""x2 and the classifier, Beatmup's apps and ours side by side on this machine's GL (the first two
tables of ``python -m workbench bench beatmup``, :mod:`workbench.studies.beatmup`), and their
tables beside the article's times measured on its boards.

* x2: Beatmup's ``X2`` app and our net on the same 8-bit low-resolution images (PSNR), one
  256x256 upscale timed in alternating rounds, the shaders' compile time.
* classifier: Beatmup's ``Classify``, TensorFlow and our ES 2.0 shaders on the same decoded
  pixels: top-1, agreement, the largest probability difference, time per photo, programs and
  start-up.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from workbench import references, tables, timings
from workbench.data import datasets, images, metrics
from workbench.gl import beatmup
from workbench.nets import beatmup_model
from workbench.studies import compilers, peak

WOOF = "imagewoof_val"
SIZE = 256  # the x2 timing's input side, as the article's
# The classifier's weights as uniforms in its layers of at most this many output pixels (a
# program a layer shape, as Beatmup's), literals in its larger ones (its first 12 layers,
# 191x191 and 95x95: a program a pass, as Beatmup's first layer), where on llvmpipe a uniform
# read at every fragment costs more than compiling the layer's programs
# (es2.net.shared_weights; 128 * 128, the 191x191 layers alone: 57 programs, start-up 7.0
# s, a photo 152 ms; this: 113 programs, 10.8 s, 119 ms; Beatmup's app 7.4 s, 203 ms)
SHARED_PIXELS = 64 * 64
# the articles' times measured on their boards (what the Pi model is calibrated on), and the V3D
# clock the classifier article gives
MEASURED_MS = {("x2", board): ms for board, ms in (
    ("Raspberry Pi 3 B / B+", references.SR_PI3_MS),
    ("Raspberry Pi Zero W", references.SR_PI_ZERO_MS))}
MEASURED_MS.update({("classifier", "Raspberry Pi 3 B / B+"): references.DOGS120_PI3BPLUS_MS,
                    ("classifier", "Raspberry Pi Zero W"): references.DOGS120_PI_ZERO_MS})
ARTICLE_MHZ = {"Raspberry Pi 3 B / B+": 300, "Raspberry Pi Zero W": 250}  # the classifier article's
BEATMUP_X2 = "Beatmup X2 (its 2.1 weights)"


# --- x2 ------------------------------------------------------------------------------------

def x2(sets=("Set5", "Set14"), rounds=5, runs=3, model=None, label="workbench reference") -> dict:
    """PSNR of Beatmup's X2 app, our net (``model``, default the reference checkpoint; ES 2.0,
    this GL) and bicubic on ``sets``, on the same 8-bit low-resolution images; the 256x256
    timing (:func:`x2_timing`)."""
    from workbench import es2
    from workbench.nets.models import load_model, reference_sr

    picture = images.to_uint8(datasets.photos(SIZE, 1)[0])
    cold = beatmup.upscale([picture])[0].compile_ms  # its first compile in this cache
    net = es2.compile(model or load_model(reference_sr()))
    rows = []
    for name in sets:
        sr_set = datasets.sr_images(name)
        pairs = [(hr, images.degrade(hr, 2, "bicubic_aa"))
                 for hr in (images.modcrop(hr, 2) for _, hr in sr_set.images)]
        theirs = beatmup.upscale([images.to_uint8(lr) for _, lr in pairs])
        scores = {"bicubic": [], BEATMUP_X2: [], label: []}
        for (hr, lr), their in zip(pairs, theirs):
            for method, out in (("bicubic", images.upscale_bicubic(lr, 2)),
                                (BEATMUP_X2, their.image.astype(np.float32) / 255),
                                (label, net.run(lr))):
                scores[method].append(metrics.psnr(hr, out, 2, "studio"))
        shown = name if sr_set.is_benchmark else f"{name} (stand-in: scikit-image photos)"
        rows += [{"set": shown, "method": method, "PSNR Y (dB)": float(np.mean(v)),
                  "images": len(v)} for method, v in scores.items()]
    timing = x2_timing(net, picture, rounds, runs)
    timing["compile ms"] = {"Beatmup": cold, **timing["compile ms"]}
    return {"psnr": rows, "timing": timing}


def x2_timing(net, picture, rounds=5, runs=3) -> dict:
    """Both sides on ``picture`` (HxWx3 uint8), in ``rounds`` alternating rounds of ``runs``
    runs a side: Beatmup's app's own per-run times (after its warm-up, the picture on the
    GPU), ours ``net.run`` (upload, draws back to back, read-back).  Our compile: the
    programs' compile, link and first draw (Beatmup's is its app's "compiling shaders": all
    programs and a first run on a dummy picture, measured by :func:`x2` on its first
    start)."""
    lr = picture.astype(np.float32) / 255
    theirs, ours = [], []
    net.run(lr)
    for _ in range(rounds):
        theirs += beatmup.upscale([picture], repeat=runs)[0].times_ms
        ours += _timed(lambda: net.run(lr, timed=False), runs)
    return {"input": "x".join(map(str, picture.shape[:2])), "runs": len(ours), "ms": {
        "Beatmup": _spread(theirs), "workbench": _spread(ours)},
        "faster": _faster(theirs, ours),
        "multiply_adds": peak.net_multiply_adds(net, picture.shape[:2]),
        "compile ms": {"workbench": 1e3 * net.compile_seconds}}


def _timed(fn, runs) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return times


def _faster(theirs, ours) -> str:
    return {"a": "Beatmup", "b": "workbench", None: "neither (within the spread)"}[
        timings.faster(theirs, ours)]


def _spread(runs_ms) -> dict:
    lo, hi = timings.quartiles(runs_ms)
    return {"median": float(np.median(runs_ms)), "q25": lo, "q75": hi}


# --- the classifier ------------------------------------------------------------------------

def woof_files(which="val", root=None) -> list[tuple[Path, int | None]]:
    """``(file, class index of the 120)`` of data/cls/imagewoof_val (``which="val"``: the
    ImageNet validation images of the classes among the 120; ``"all"``: every photo, dingo's
    with index None: it is not among them)."""
    from workbench.data import catalog

    base = datasets.data_root(root)
    folder = base / "cls" / WOOF if base else None
    if folder is None or not folder.is_dir():
        raise FileNotFoundError(f"{folder or 'no data root'}: no cls/{WOOF} (Imagewoof's "
                                f"validation photos); fetch its 162 ImageNet validation images "
                                f"with: {catalog.COMMAND} {WOOF}")
    index = {c["wnid"]: i for i, c in enumerate(datasets.imagenet120())}
    files = []
    for wnid in sorted(p.name for p in folder.iterdir() if p.is_dir()):
        label = index.get(wnid)
        for f in sorted((folder / wnid).iterdir()):
            if which == "all" or (label is not None and f.name.startswith("ILSVRC2012_val_")):
                files.append((f, label))
    return files


def _picture(path) -> np.ndarray:
    return images.to_uint8(images.load_image(path))


def classifier(model_path, which="val", rounds=5, limit=None, chunk=500) -> dict:
    """Beatmup's Classify, TensorFlow and our ES 2.0 shaders on the Imagewoof photos
    ``which`` (:func:`woof_files`; ``limit``: that many, evenly spaced over them), on the same
    decoded pixels (Beatmup gets them as BMP and applies its input step; ours is
    :func:`workbench.nets.beatmup_model.sample`).  Ours compiled with weights as uniforms
    in the layers of at most :data:`SHARED_PIXELS` output pixels: a program a layer shape
    there, as Beatmup's."""
    from tqdm import tqdm

    from workbench import es2

    model = beatmup_model.load(model_path)
    files = woof_files(which)
    if limit:
        files = [files[i] for i in np.linspace(0, len(files) - 1, limit).round().astype(int)]
    step = model.beatmup_input
    first = _picture(files[0][0])
    start = time.perf_counter()  # its first start in this cache: loading, compiling, a pass
    cold = beatmup.classify_timed(first)
    their_start_s = time.perf_counter() - start - sum(cold.times_ms) / 1e3
    start = time.perf_counter()
    net = es2.compile(model, "videocore4", shared=SHARED_PIXELS)
    net.run(beatmup_model.sample(first, step).astype(np.float32) / 255)
    ours_compile_s = time.perf_counter() - start
    their_probs, tf_probs, gpu_probs = [], [], []
    for i in tqdm(range(0, len(files), chunk), desc="Beatmup, TF and the ES 2.0 shaders",
                  unit="chunk", leave=False):  # each photo decoded once, for the three
        pictures = [_picture(f) for f, _ in files[i:i + chunk]]
        their_probs.append(beatmup.classify(pictures, chunk=chunk,
                                            progress=lambda done: None).probs)
        batch = np.stack([beatmup_model.sample(p, step) for p in pictures]).astype(np.float32) / 255
        tf_probs.append(model.predict(batch, verbose=0))
        gpu_probs += [net.run(x, timed=False) for x in batch]
    labels = [label for _, label in files]
    return {"which": which, "photos": len(files),
            **compare(labels, np.concatenate(their_probs), np.concatenate(tf_probs),
                      np.stack(gpu_probs)),
            "timing": classifier_timing(net, [f for f, _ in files[:rounds]], step),
            "programs": {"Beatmup": len(beatmup.capture("Classify", first).programs),
                         "workbench": len({p.source for p in net.passes})},
            "compile s": {"Beatmup": their_start_s, "workbench": ours_compile_s}}


def compare(labels, beatmup_probs, tf_probs, gpu_probs) -> dict:
    """Top-1 of each system on the photos whose label (a class index, or None) is among its
    classes, the agreement of their top-1 on every photo, the largest probability
    differences."""
    labels = np.array([-1 if label is None else label for label in labels])
    top = {"Beatmup": beatmup_probs.argmax(1), "TF (imported)": tf_probs.argmax(1),
           "workbench ES 2.0 (imported)": gpu_probs.argmax(1)}
    known = labels >= 0
    rows = [{"system": name, "top-1 %": 100 * float(np.mean(t[known] == labels[known])),
             "correct": int(np.sum(t[known] == labels[known])), "photos": int(known.sum())}
            for name, t in top.items()]
    names = list(top)
    agreement = {f"{a} = {b}": 100 * float(np.mean(top[a] == top[b]))
                 for i, a in enumerate(names) for b in names[i + 1:]}
    return {"top1": rows, "agreement %": agreement, "largest probability difference": {
        "Beatmup vs ES 2.0": float(np.abs(beatmup_probs - gpu_probs).max()),
        "TF vs ES 2.0": float(np.abs(tf_probs - gpu_probs).max())}}


def classifier_timing(net, paths, step) -> dict:
    """Per photo of ``paths``, alternately: Beatmup's single-picture mode (10 runs of its
    whole inference task: upload, input step, net, probabilities back) and ours (10 runs of
    the input step and ``net.run``)."""
    theirs, ours = [], []
    for path in paths:
        picture = _picture(path)
        result = beatmup.classify_timed(picture)
        theirs += result.times_ms
        ours += _timed(lambda: net.run(beatmup_model.sample(picture, step).astype(np.float32)
                                       / 255, timed=False), len(result.times_ms))
    return {"runs": len(ours), "ms": {"Beatmup": _spread(theirs), "workbench": _spread(ours)},
            "faster": _faster(theirs, ours),
            "multiply_adds": peak.net_multiply_adds(net, (step.height, step.width))}


# --- the tables ------------------------------------------------------------------------------

def x2_section(x, top=None) -> str:
    """The x2 table and timing of :func:`x2`'s result (``top``: this GL's peak,
    :func:`workbench.studies.peak.gl_peak`)."""
    t = x["timing"]
    return ("**x2 SR**, the same 8-bit low-resolution images to both (MATLAB's antialiased "
            "bicubic; PSNR on Y of BT.601 studio range, crop 2):\n\n" + tables.markdown(x["psnr"])
            + f"\n\nOne {t['input']} -> x2 upscale, {t['runs']} runs a side in alternating "
            f"rounds; the article's times measured on its boards:\n\n"
            + tables.markdown(timing_rows(t, "x2", top))
            + f"\n\nFaster here: {t['faster']}. Compile, "
            f"every program with a first draw: Beatmup {t['compile ms']['Beatmup']:.0f} ms, "
            f"workbench {t['compile ms']['workbench']:.0f} ms (each side's first, Mesa's cache "
            "empty).")


def classifier_section(c, top=None) -> str:
    """The classifier's tables of :func:`classifier`'s result (``top``: as
    :func:`x2_section`'s)."""
    t = c["timing"]
    return (f"**Classifier**: Beatmup's trained dog classifier on {c['photos']} photos of "
            f"`cls/{WOOF}` ({_which(c['which'])}); the same decoded pixels to both sides; the "
            "imported net through TensorFlow and our ES 2.0 shaders:\n\n"
            + tables.markdown(c["top1"])
            + "\n\nTop-1 agreement: " + "; ".join(f"{k}: {v:.2f} %" for k, v in
                                                  c["agreement %"].items())
            + ". Largest probability difference: " + "; ".join(
                f"{k} {v:.4f}" for k, v in c["largest probability difference"].items())
            + f".\n\nTime per photo, {t['runs']} runs a side alternating photo by photo; "
            "the article's times measured on its boards:\n\n"
            + tables.markdown(timing_rows(t, "classifier", top))
            + f"\n\nFaster here: {t['faster']}. Programs compiled: "
            f"Beatmup {c['programs']['Beatmup']}, workbench {c['programs']['workbench']}; "
            f"start-up to a first result, Mesa's cache empty: Beatmup "
            f"{c['compile s']['Beatmup']:.1f} s (its app: loading, compiling, a first pass), "
            f"workbench {c['compile s']['workbench']:.1f} s (generating, compiling, a first "
            "photo).")


def timing_rows(t, net, top=None) -> list[dict]:
    """A timing of :func:`x2_timing` / :func:`classifier_timing` as rows: each side's median
    (quartiles) here, then the article's measured times of ``net`` ("x2", "classifier") on
    its boards; with the net's count, GMAC/s and % of the peak: ``top``'s here (this GL's,
    measured), the QPUs' on a Pi (:func:`qpu_shares`)."""
    count = t.get("multiply_adds")
    rows = [{"where": "this machine", "side": side,
             "median ms (quartiles)": f"{v['median']:.1f} ({v['q25']:.1f}-{v['q75']:.1f})",
             **(peak.rate_cells(count, v["median"], top and top["gmacs"]) if count else {})}
            for side, v in t["ms"].items()]
    for (name, board), ms in MEASURED_MS.items():
        if name == net:
            rows.append({"where": board, "side": "Beatmup (the article's time)",
                         "median ms (quartiles)": f"{ms:.0f}",
                         **({"GMAC/s": f"{peak.gmacs(count, ms):.2f}",
                             "% of peak": qpu_shares(peak.gmacs(count, ms), board)}
                            if count else {})})
    return rows


def qpu_shares(rate, board) -> str:
    """``rate`` (GMAC/s) as % of the QPUs' peak of ``board`` at the article's V3D clock and at
    the documented one: ``"a (article's N MHz) / b (documented M MHz)"``."""
    return " / ".join(f"{peak.share(rate, compilers.qpu_peak_gmacs(mhz)):.1f} ({what} {mhz} MHz)"
                      for what, mhz in (("article's", ARTICLE_MHZ[board]),
                                        ("documented", compilers.BOARDS_MHZ[board])))


def _which(which) -> str:
    return ("its ImageNet validation images of the 9 classes among the 120" if which == "val"
            else "every photo; of those of the 9 classes among the 120, all but 145 are "
                 "ImageNet training images; dingo's 410 count in the agreement only")
