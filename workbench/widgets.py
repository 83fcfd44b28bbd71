"""Interactive widgets (ipywidgets) for the notebooks: an activation explorer, a shuffle
visualiser and an SR before/after viewer.

Each widget is a function that returns an ``ipywidgets.VBox``; put it last in a cell to show it.
Its controls are in ``box.controls`` (name -> widget) and what it shows in ``box.outputs``:
``"image"`` (an ``ipywidgets.Image`` holding a PNG drawn with matplotlib) and ``"text"`` (an
``ipywidgets.HTML``).  Setting a control's ``value`` (from the browser or from Python) redraws
both, so the widgets work without a kernel-side matplotlib backend and can be tested in plain
Python.  Figures are drawn on ``matplotlib.figure.Figure`` objects, never through pyplot, so
nothing leaks into a notebook's inline output.

The drawing and the numbers are plain functions (:func:`activation_samples`,
:func:`activation_figure`, :func:`crop_psnr`, ...); the widgets only wire them to controls.
"""
from __future__ import annotations

import html
import io

import ipywidgets as w
import numpy as np
from matplotlib.figure import Figure

from workbench.nets import activations
from workbench.studies import shuffle

DPI = 90


def _show(image: w.Image, fig: Figure):
    """Draw ``fig`` into ``image`` as a PNG, shown at its own size (not stretched to the cell)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    image.layout.width = f"{round(fig.get_figwidth() * DPI)}px"
    image.value = buffer.getvalue()


def _box(controls: dict, image: w.Image, text: w.HTML, title: str, css: str,
         layout_rows=None) -> w.VBox:
    rows = layout_rows or [w.HBox(list(controls.values()))]
    box = w.VBox([w.HTML(f"<b>{html.escape(title)}</b>"), *rows, text, image])
    box.add_class(css)
    box.controls, box.outputs = controls, {"image": image, "text": text}
    return box


def _observe(controls: dict, update):
    for control in controls.values():
        control.observe(lambda change: update(), names="value")


# --- activation explorer ------------------------------------------------------------------

def storage(name, y) -> tuple[float, float]:
    """``(scale, offset)`` ES 2.0 stores the values ``y`` of activation ``name`` with, as
    ``(y - offset) / scale``: ``(1, 0)`` for one bounded to [0, 1]; for an unbounded one (a
    ReLU, a leaky ReLU, linear) the scale :mod:`workbench.es2.calibrate` gives when ``y`` are
    the calibration values (:func:`~workbench.es2.calibrate.tensor_storage`: its ``HEADROOM``
    past the top).  ES 3.1 stores those in float."""
    from workbench.es2 import calibrate

    low, high = activations.get(name).output_range or (-np.inf, np.inf)
    if low >= 0 and high <= 1:
        return 1.0, 0.0
    scale, offset = calibrate.tensor_storage(np.min(y), np.max(y))
    return float(scale), float(offset)


def stored_levels(name, x, scale=1.0, offset=0.0) -> np.ndarray:
    """The 8-bit level (0..255) an RGBA8 texture stores for ``(act(x) - offset) / scale``
    (``emulate.quantize``; :func:`storage` gives an unbounded activation's scale)."""
    from workbench.es2.emulate import quantize

    y = activations.get(name).np_fn(np.asarray(x, np.float32)).astype(np.float64)
    return np.round(quantize((y - offset) / scale) * 255).astype(np.uint8)


def activation_gradient(name, x, source="numpy") -> np.ndarray:
    """d act / dx at ``x``: ``"numpy"`` -- central difference of the numpy form (h = 1e-3, in
    float64 arithmetic on the float32 function; at a breakpoint it gives the mean of the two
    slopes); ``"tf"`` -- TensorFlow autodiff (:func:`workbench.nets.activations.gradient`), the
    gradient training uses (for ``sigmoid_like`` its hand-written one)."""
    x = np.asarray(x, np.float32)
    if source == "tf":
        return np.asarray(activations.gradient(name, x), np.float32)
    if source != "numpy":
        raise ValueError(f"gradient source must be 'numpy' or 'tf', not {source!r}")
    f, h = activations.get(name).np_fn, 1e-3
    up = f((x + h).astype(np.float32)).astype(np.float64)
    down = f((x - h).astype(np.float32)).astype(np.float64)
    return ((up - down) / (2 * h)).astype(np.float32)


def activation_samples(names, lo=-8.0, hi=8.0, points=801, gradient="numpy") -> dict:
    """``{name: {"x", "y", "dy", "level", "scale", "offset"}}`` over ``points`` inputs in
    [lo, hi]: ``y`` what the net computes, ``level`` what ES 2.0 stores, ``(y - offset) /
    scale`` in 8 bits (:func:`storage`, calibrated on these inputs)."""
    x = np.linspace(lo, hi, points, dtype=np.float32)
    curves = {}
    for name in names:
        y = activations.get(name).np_fn(x)
        scale, offset = storage(name, y)
        curves[name] = {"x": x, "y": y, "dy": activation_gradient(name, x, gradient),
                        "level": stored_levels(name, x, scale, offset),
                        "scale": scale, "offset": offset}
    return curves


def activation_figure(curves: dict, probe=None) -> Figure:
    """Three panels: the value the net computes, its gradient, the 8-bit level ES 2.0 stores
    (an unbounded activation's with a calibrated scale); a dashed line at ``probe``."""
    fig = Figure(figsize=(10.5, 3.0))
    axes = fig.subplots(1, 3)
    for name, c in curves.items():
        axes[0].plot(c["x"], c["y"], label=name)
        axes[1].plot(c["x"], c["dy"], label=name)
        axes[2].step(c["x"], c["level"], where="mid", label=name)
    titles = ("value (what the net computes)", "gradient",
              "stored: 8-bit level, ES 2.0 (0..255)\nunbounded: (y - offset) / scale")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("x", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if probe is not None:
            ax.axvline(probe, color="grey", linestyle="--", linewidth=0.8)
    if curves:
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _stored_as(scale, offset) -> str:
    if (scale, offset) == (1.0, 0.0):
        return "y"
    shifted = "y" if offset == 0 else f"(y {'+' if offset < 0 else '-'} {abs(offset):.3g})"
    return f"{shifted} / {scale:.3g}"


def activation_rows(curves: dict, probe: float, gradient="numpy") -> list[dict]:
    """Per activation: value, gradient, how ES 2.0 stores it and the 8-bit level at ``probe``,
    the storage error there (the level read back, times the scale, plus the offset, minus the
    value), and how many distinct 8-bit levels the plotted input range uses."""
    rows = []
    for name, c in curves.items():
        p = np.float32(probe)
        y = float(activations.get(name).np_fn(np.array([p]))[0])
        scale, offset = c["scale"], c["offset"]
        level = int(stored_levels(name, np.array([p]), scale, offset)[0])
        rows.append({"activation": name, "x": float(p), "value": y,
                     "gradient": float(activation_gradient(name, np.array([p]), gradient)[0]),
                     "stored as": _stored_as(scale, offset), "level": level,
                     "storage error": level / 255 * scale + offset - y,
                     "levels used": int(len(np.unique(c["level"])))})
    return rows


def _html_table(rows, digits=4) -> str:
    if not rows:
        return "<i>choose at least one activation</i>"

    def cell(v):
        return f"{v:.{digits}f}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th style='padding:0 8px'>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px;text-align:right'>{cell(v)}</td>"
                                    for v in r.values()) + "</tr>" for r in rows)
    return f"<table class='wb-table'><tr>{head}</tr>{body}</table>"


def activation_explorer(names=None, x_range=(-8.0, 8.0), probe=1.0, points=801) -> w.VBox:
    """Choose activations from the registry, slide the input range and a probe point; see the
    values the net computes, their gradients and the 8-bit levels an ES 2.0 RGBA8 texture
    stores (an unbounded one's calibrated on the plotted inputs: :func:`storage`) (plots), and
    the numbers at the probe (table).  Gradients by central difference of the numpy form, or
    by TF autodiff."""
    options = activations.names()
    chosen = [n for n in (names or [n for n in options if n != "linear"]) if n in options]
    controls = {
        "activations": w.SelectMultiple(options=options, value=tuple(chosen), rows=len(options),
                                        description="activations"),
        "range": w.FloatRangeSlider(value=x_range, min=-16.0, max=16.0, step=0.5,
                                    description="input range", readout_format=".1f",
                                    continuous_update=False),
        "probe": w.FloatSlider(value=probe, min=-16.0, max=16.0, step=0.05, description="probe x",
                               continuous_update=False),
        "gradient": w.Dropdown(options=[("numpy (central difference)", "numpy"),
                                        ("TF autodiff", "tf")], value="numpy",
                               description="gradient"),
    }
    for name, control in controls.items():
        control.add_class(f"wb-activation-{name}")
    image, text = w.Image(format="png"), w.HTML()

    def update():
        lo, hi = controls["range"].value
        source = controls["gradient"].value
        curves = activation_samples(controls["activations"].value, lo, hi, points, source)
        probe_x = controls["probe"].value
        _show(image, activation_figure(curves, probe_x if lo <= probe_x <= hi else None))
        text.value = _html_table(activation_rows(curves, probe_x, source))

    _observe(controls, update)
    update()
    rows = [w.HBox([controls["activations"],
                    w.VBox([controls["range"], controls["probe"], controls["gradient"]])])]
    return _box(controls, image, text, "Activation explorer", "wb-activation-explorer", rows)


# --- shuffle visualiser -------------------------------------------------------------------

def shuffle_text(channels: int, step: int, iterations: int) -> str:
    """The order table and the mixing counts, as HTML (``<pre>``)."""
    mixed = shuffle.mixing_units(channels, step)
    stage = shuffle.mixing_units(channels, step, first_shuffled=False)
    never = "never (the shuffle is the identity)"
    lines = [shuffle.order_table(channels, step, iterations), "",
             f"units until every output channel depends on every input channel "
             f"({shuffle.conv1x1_groups(channels)} groups of 32 in the 1x1 conv): "
             f"{never if mixed is None else mixed}",
             f"... with the first unit unshuffled (a classifier stage): "
             f"{never if stage is None else stage}"]
    return f"<pre class='wb-shuffle-table'>{html.escape(chr(10).join(lines))}</pre>"


def shuffle_visualiser(channels=128, step=8, iterations=3,
                       channel_options=(32, 64, 96, 128, 192, 256)) -> w.VBox:
    """Channels, step and iterations -> the texture binding order drawn as the reference
    article's diagram (a column per shuffle, a line from each texture to its new position),
    the order table and how many units it takes to mix the 32-channel groups."""
    options = sorted(set(channel_options) | {channels})

    def steps_for(c):
        return shuffle.valid_steps(c)

    controls = {
        "channels": w.Dropdown(options=options, value=channels, description="channels"),
        "step": w.Dropdown(options=steps_for(channels), value=step, description="step"),
        "iterations": w.IntSlider(value=iterations, min=1, max=6, description="iterations",
                                  continuous_update=False),
    }
    for name, control in controls.items():
        control.add_class(f"wb-shuffle-{name}")
    image, text = w.Image(format="png"), w.HTML()
    busy = [False]

    def update():
        if busy[0]:
            return
        c, n, k = controls["channels"].value, controls["step"].value, controls["iterations"].value
        if n not in steps_for(c):
            return
        fig = Figure(figsize=(1.6 + 1.7 * k, 0.8 + 0.19 * shuffle.whole_packs(c)))
        shuffle.binding_diagram(c, n, k, ax=fig.subplots())
        _show(image, fig)
        text.value = shuffle_text(c, n, k)

    def channels_changed(change):
        valid = steps_for(change["new"])
        old = controls["step"].value
        busy[0] = True  # one redraw, after both the options and the value are set
        try:
            controls["step"].options = valid
            controls["step"].value = old if old in valid else (8 if 8 in valid else valid[-1])
        finally:
            busy[0] = False
        update()

    controls["channels"].observe(channels_changed, names="value")
    controls["step"].observe(lambda change: update(), names="value")
    controls["iterations"].observe(lambda change: update(), names="value")
    update()
    return _box(controls, image, text, "Shuffle visualiser", "wb-shuffle-visualiser")


# --- SR before/after viewer ---------------------------------------------------------------

def sr_viewer_images(model, hr_images, kernel="bicubic_aa", scale=2, gpu=True,
                     target=None) -> dict:
    """Compute what :func:`sr_viewer` shows: ``{name: {"ground truth", "bicubic", "net",
    "GPU"}}`` (HxWx3 float32 in [0, 1]) for ``hr_images`` (``[(name, rgb)]``, e.g. an
    ``SRSet.images``), the low-resolution input made with ``kernel``.  ``gpu=False`` leaves the
    ES 2.0 shaders out; ``target``: what they are compiled for (:func:`workbench.es2.compile`)."""
    from workbench import es2
    from workbench.data import images
    from workbench.nets import superres

    net = es2.compile(model, target) if gpu else None
    out = {}
    for name, hr in hr_images:
        hr = images.modcrop(hr, scale)
        lr = images.degrade(hr, scale, kernel)
        out[name] = {"ground truth": hr, "bicubic": images.upscale_bicubic(lr, scale),
                     "net": superres.upscale(model, lr, scale)}
        if net is not None:
            out[name]["GPU"] = np.asarray(net.run(lr))[..., :3]
    return out


def load_sr_model(path=None):
    """``(model, label)``: the ``.keras`` net at ``path``; without one, the SR reference
    checkpoint (``models/``), else the fine-tuned net of the quick (then full) profile if it
    was trained in this checkout, else an untrained :func:`workbench.nets.models.sr_x2` (its
    output is noise; the label says so)."""
    from pathlib import Path

    from workbench.files import project_root
    from workbench.nets.models import load_model, reference_sr, sr_x2

    if path:
        return load_model(path), str(path)
    try:
        return load_model(reference_sr()), f"reference checkpoint {reference_sr().name}"
    except FileNotFoundError:
        pass
    for profile in ("quick", "full"):
        found = project_root() / "runs" / "artifacts" / profile / "sr" / "finetune" / "model.keras"
        if Path(found).exists():
            return load_model(found), str(found)
    return sr_x2(), "untrained sr_x2 (random weights: pass model_path)"


def crop_psnr(images: dict, box, reference="ground truth") -> list[dict]:
    """PSNR (dB) of each image against ``reference`` on studio-range luma (Y601, as the SR
    papers and the workbench's tables measure it; no border cropped), on the crop
    ``box = (y, x, size)`` and on the whole image; ``GPU`` also against ``net``."""
    from workbench.data import metrics

    y, x, size = box

    def psnr(a, b):
        return metrics.psnr(np.clip(a, 0, 1), np.clip(b, 0, 1), 0, "studio")

    rows = []
    for method, img in images.items():
        row = {"method": method}
        if reference in images and method != reference:
            ref = images[reference]
            row["PSNR crop"] = psnr(ref[y:y + size, x:x + size], img[y:y + size, x:x + size])
            row["PSNR image"] = psnr(ref, img)
        if method == "GPU" and "net" in images:
            row["GPU vs net (image)"] = psnr(images["net"], img)
        rows.append(row)
    return rows


def sr_figure(images: dict, box) -> Figure:
    """The whole image with the crop's outline, then each method's crop (nearest)."""
    from matplotlib.patches import Rectangle

    y, x, size = box
    methods = list(images)
    fig = Figure(figsize=(2.4 * (len(methods) + 1), 2.7))
    axes = fig.subplots(1, len(methods) + 1)
    first = images[methods[0]]
    axes[0].imshow(np.clip(first, 0, 1))
    axes[0].add_patch(Rectangle((x, y), size, size, fill=False, edgecolor="red", linewidth=1.2))
    axes[0].set_title("whole image, crop in red", fontsize=9)
    for ax, method in zip(axes[1:], methods):
        ax.imshow(np.clip(images[method][y:y + size, x:x + size], 0, 1), interpolation="nearest")
        ax.set_title(method, fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return fig


def _psnr_table(rows) -> str:
    columns = sorted({k for r in rows for k in r} - {"method"},
                     key=["PSNR crop", "PSNR image", "GPU vs net (image)"].index)
    full = [{"method": r["method"], **{c: r.get(c, "") for c in columns}} for r in rows]
    return _html_table(full, digits=2) + "<small>PSNR in dB on full-range RGB, peak 1</small>"


def sr_viewer(images: dict, crop=64) -> w.VBox:
    """Before/after viewer over precomputed images: ``images[name][method]`` is an HxWx3 float
    array in [0, 1] (e.g. from :func:`sr_viewer_images`: ground truth, bicubic, net, GPU).
    Controls: the image, the crop's top-left corner and size; shows the crops side by side and
    their PSNR against ``"ground truth"`` when there is one."""
    if not images:
        raise ValueError("sr_viewer: no images")
    names = list(images)

    def shape(name):
        return next(iter(images[name].values())).shape[:2]

    h, wd = shape(names[0])
    size = min(crop, h, wd)
    controls = {
        "image": w.Dropdown(options=names, value=names[0], description="image"),
        "size": w.IntSlider(value=size, min=8, max=min(h, wd), step=4, description="crop size",
                            continuous_update=False),
        "x": w.IntSlider(value=(wd - size) // 2, min=0, max=wd - size, description="crop x",
                         continuous_update=False),
        "y": w.IntSlider(value=(h - size) // 2, min=0, max=h - size, description="crop y",
                         continuous_update=False),
    }
    for name, control in controls.items():
        control.add_class(f"wb-sr-{name}")
    image, text = w.Image(format="png"), w.HTML()
    busy = [False]

    def update():
        if busy[0]:
            return
        name = controls["image"].value
        hh, ww = shape(name)
        busy[0] = True  # keep the crop inside the image; one redraw
        try:
            size = min(controls["size"].value, hh, ww)
            controls["size"].max = min(hh, ww)
            controls["x"].max, controls["y"].max = ww - size, hh - size
        finally:
            busy[0] = False
        box = (min(controls["y"].value, hh - size), min(controls["x"].value, ww - size), size)
        _show(image, sr_figure(images[name], box))
        text.value = _psnr_table(crop_psnr(images[name], box))

    _observe(controls, update)
    update()
    rows = [w.HBox([controls["image"], controls["size"]]), w.HBox([controls["x"], controls["y"]])]
    return _box(controls, image, text, "SR before/after", "wb-sr-viewer", rows)
