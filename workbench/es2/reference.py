"""The reference check of a deploy: the compiled net (the emulator, which predicts the GPU's
bytes) against the reference runtime (TensorFlow for a Keras model, ONNX Runtime for an ONNX
one) on images like the user's: the calibration images and a few held back from them.

GPU = emulator cannot see a wrong deploy (both are wrong together); this can.  It runs the
emulator in its :data:`~workbench.es2.texels.FAST` arithmetic (the GPU's bytes but for
rounding ties, convolutions as matrix products) and measures:

- the output: a classifier's top-1 agreement with the reference, an image net's PSNR against
  the reference's output (what it has outside [0, 1], which an 8-bit image cannot keep,
  counts against it; a luma net's RGB image made of the reference's luma and the input's
  chroma, :func:`with_chroma`), the worst image;
- per layer, the stored tensor against the float graph (no storage, float32) in the stored
  units, clipped to [0, 1]: the first layer below :data:`LAYER_DB` (its steps and the
  errors it inherits); and the share of the float values that the storage clips (past half
  a level outside [0, 1]): a range calibrated on unlike images.

A net below :data:`AGREEMENT` (a classifier) or :data:`IMAGE_DB` (an image net) is refused by
:func:`require` in one line naming that layer and the remedies, unless forced.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from workbench import ir
from workbench.data.images import rgb_to_ycbcr, ycbcr_to_rgb
from workbench.es2 import emulate
from workbench.es2.emulate import FAST, REAL
from workbench.es2.mediump import psnr
from workbench.es2.onnx_check import onnx_input
from workbench.es2.record import record

AGREEMENT = 0.98   # a classifier's least top-1 agreement with the reference runtime
IMAGE_DB = 40.0    # an image net's least PSNR against the reference runtime (worst image)
LAYER_DB = 30.0    # a stored tensor this far below the float graph is named as departing
TIE = 0.01         # a classifier's top two closer than this share of its outputs' range: a tie
HALF_STEP = 0.5 / 255
REMEDIES = ("give calibration images like the net's own data (--calibration, e.g. "
            "cifar10:100 or a folder), store scaled tensors at 16 bits (scaled_bits=16, highp), "
            "or deploy anyway with --force")


class ReferenceCheckFailed(ValueError):
    """The deployed net departs from the reference runtime by more than the bound."""


@dataclass(frozen=True)
class Check:
    """What :func:`check` measured.  ``kind``: ``"classifier"`` (``value``: top-1 agreement,
    a share, where the reference's own top two closer than :data:`TIE` of its range count as
    agreeing; ``mean``: strictly) or ``"image"`` (``value``: PSNR in dB, the worst image;
    ``mean``: the mean);
    ``images`` checked, of which ``held_back`` were not calibrated on; ``runtime`` the
    reference's name; ``calibration`` where the calibration images came from; ``layer`` the
    first layer whose stored tensor is below :data:`LAYER_DB` from the float graph (None:
    none), ``layer_db`` its PSNR (else the worst layer's); ``clipped`` per layer whose
    storage clips any value, the share clipped (%); ``output`` the net's output tensor."""
    kind: str
    value: float
    mean: float
    images: int
    held_back: int
    runtime: str
    calibration: str
    layer: str | None
    layer_db: float | None
    clipped: dict = field(default_factory=dict)
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.value >= (AGREEMENT if self.kind == "classifier" else IMAGE_DB)

    def measure(self) -> str:
        if self.kind == "classifier":
            ties = (f" ({100 * self.mean:.1f} % strictly; the others near-ties, the "
                    f"reference's top two within {100 * TIE:g} % of its range)"
                    if self.mean < self.value else "")
            return (f"top-1 = {self.runtime}'s on {100 * self.value:.1f} % of {self.images} "
                    f"images{ties}")
        return (f"{self.value:.1f} dB from {self.runtime} (worst of {self.images} images; "
                f"mean {self.mean:.1f})")

    def line(self) -> str:
        """One line: the measure, the images, the first departing layer, the calibration."""
        layer = (f"first layer past {LAYER_DB:.0f} dB from the float graph: {self.layer!r} "
                 f"({self.layer_db:.1f} dB)" if self.layer else "no layer past "
                 f"{LAYER_DB:.0f} dB from the float graph")
        held = f" ({self.held_back} held back from calibration)" if self.held_back else ""
        return (f"reference check: {self.measure()}{held}; {layer}{self.clips()}; "
                f"calibration: {self.calibration}")

    def clips(self) -> str:
        """``"; most clipped: 'layer' 4.95 %"``: the layer whose storage clips the largest
        share of its values (nothing where none clips)."""
        clipped = max(self.clipped.items(), key=lambda kv: kv[1], default=None)
        return f"; most clipped: {clipped[0]!r} {clipped[1]:.2f} %" if clipped else ""

    def to_json(self) -> dict:
        return {**asdict(self), "passed": self.passed}

    @classmethod
    def from_json(cls, data: dict) -> "Check":
        return cls(**{k: v for k, v in data.items() if k != "passed"})


def with_chroma(image, luma) -> np.ndarray:
    """The RGB image a luma net's last layer makes of its luma output ``luma`` (HxWx1, a
    whole factor larger than ``image``) and ``image``'s chroma (full-range BT.601, upsampled
    bilinearly as its shader does), clipped to [0, 1] as an image keeps it."""
    block = luma.shape[0] // image.shape[0]
    chroma = emulate.bilinear(rgb_to_ycbcr(image, "full")[..., 1:], block).astype(np.float32)
    rgb = ycbcr_to_rgb(np.concatenate([np.asarray(luma, np.float32), chroma], -1), "full")
    return np.clip(rgb, 0, 1).astype(np.float64)


def check(model, source: ir.Graph, net, images, held_back, calibration="",
          stored=None) -> Check:
    """Run ``net`` (compiled from ``model``; ``source`` the graph it was calibrated from,
    ``stored`` each tensor's ``(scale, offset)`` after calibration, as
    :func:`workbench.es2.calibrate.calibrated` gives them) and ``model`` on
    ``images`` (of which the last ``held_back`` were not calibrated on) and measure
    (:class:`Check`)."""
    graph = net.graph
    runtime = "ONNX Runtime" if ir.is_onnx(model) else "TensorFlow"
    if not hasattr(model, "predict"):  # an onnx.ModelProto: ONNX Runtime runs it
        from workbench.nets.onnx_model import OnnxModel
        model = OnnxModel(model)
    reference = np.asarray(model.predict(onnx_input(graph, images), verbose=0),
                           np.float64)
    outputs, layers = _run(source, graph, images, stored or {})
    kind = "classifier" if reference.ndim == 2 else "image"
    if kind == "classifier":
        ours = reference[np.arange(len(reference)), outputs.argmax(1)]
        tie = TIE * np.ptp(reference)  # the reference's own top two closer than this: a tie
        mean = float(np.mean(reference.argmax(1) == outputs.argmax(1)))
        value = float(np.mean(ours >= reference.max(1) - tie))
    else:
        if outputs.shape[-1] == 3 and reference.shape[-1] == 1:  # a luma net, RGB out
            reference = np.stack([with_chroma(x, r) for x, r in zip(images, reference)])
        db = [psnr(r, o) for r, o in zip(reference, outputs)]
        value, mean = float(np.min(db)), float(np.mean(db))
    departing = next((name for name, (db, _) in layers.items() if db < LAYER_DB), None)
    worst = min(layers, key=lambda name: layers[name][0], default=None)
    name = departing or worst
    return Check(kind, value, mean, len(images), held_back, runtime, calibration,
                 departing, layers[name][0] if name else None,
                 {n: round(c, 3) for n, (_, c) in layers.items() if c >= 0.001}, graph.output)


def _run(source, graph, images, stored) -> tuple[np.ndarray, dict[str, tuple[float, float]]]:
    """``(outputs, layers)``: the outputs of ``graph`` (the compiled net; the emulator's
    :data:`~workbench.es2.texels.FAST` arithmetic: its bytes but for rounding ties) for
    ``images``, and per 8-bit layer, in order, ``(PSNR of its stored tensor against the
    float graph's values in stored units, clipped to [0, 1], % of those values clipped)``;
    the float values from ``source`` (before calibration), mapped through ``stored``; an
    RGB image composed of a luma net's output counts no clipping (its reference's is
    clipped too)."""
    head = [op for op in source.ops if record(op).stored is None]
    heads = {op.name for op in head}
    found = {op.name: ([], []) for op in graph.ops
             if record(op).stored is None and op.name in heads}
    outputs = []
    for image in images:
        real = emulate.tensors(source, image, REAL, head)
        kept = emulate.tensors(graph, image, FAST)
        outputs.append(emulate.output(graph, kept))
        for name, (floats, values) in found.items():
            c = min(real[name].shape[-1], kept[name].shape[-1])
            scale, offset = (np.resize(v, c) for v in stored.get(name, (1.0, 0.0)))
            floats.append(((real[name][..., :c] - offset) / scale).ravel())
            values.append(kept[name][..., :c].ravel())
    out = {}
    composed = {op.name for op in graph.ops if op.rgb_output}  # an RGB image: clipped as such
    for name, (floats, values) in found.items():
        floats, values = np.concatenate(floats), np.concatenate(values)
        clipped = (floats < -HALF_STEP) | (floats > 1 + HALF_STEP)
        out[name] = (psnr(np.clip(floats, 0, 1), values),
                     0.0 if name in composed else 100 * float(clipped.mean()))
    return np.stack(outputs).astype(np.float64), out


def require(result: Check, force=False) -> Check:
    """``result``, or :class:`ReferenceCheckFailed` in one line where it is below its bound
    (unless ``force``)."""
    if result.passed or force:
        return result
    bound = (f"{100 * AGREEMENT:.0f} %" if result.kind == "classifier" else f"{IMAGE_DB:.0f} dB")
    clipped = max(result.clipped.items(), key=lambda kv: kv[1], default=(None, 0))
    if result.layer:
        where = (f"layer {result.layer!r} departs first from the float graph "
                 f"({result.layer_db:.1f} dB)")
    elif clipped[1] >= 0.1:
        where = f"layer {clipped[0]!r} clips {clipped[1]:.2f} % of its values"
    else:
        where = f"output {result.output!r}: no single layer departs past {LAYER_DB:.0f} dB"
    raise ReferenceCheckFailed(
        f"{where}: the deployed net is not the model, {result.measure()}, below {bound}"
        f"{result.clips()}; calibration: {result.calibration}; {REMEDIES}")
