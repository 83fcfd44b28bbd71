"""Which layer breaks first on a GPU whose ``mediump`` is float16: each op's output against
TensorFlow (float32) for the emulator's ``highp`` (llvmpipe's bytes) and its ``mediump``
prediction (:mod:`workbench.es2.emulate`), with TensorFlow run in float16 beside them as an
independent check of the prediction.

Conventions: images HxWx3 RGB in [0, 1], rounded to 8 bits first (what the GPU uploads).
Per op, PSNR over every value of the tensor with peak 1, or for logits the TF logits' range
(:func:`workbench.es2.mediump.psnr`); TF's tensor of an op is the Keras output after its
BatchNorm, residual add and activation.  The SR demux compares RGB images rounded to 8
bits, as :func:`workbench.studies.deploy.compare` does ("TF" = Keras luma + bilinear chroma).
"""
from __future__ import annotations

import keras
import numpy as np

from workbench import ir, tables
from workbench.data import images as imaging
from workbench.es2 import emulate, mediump
from workbench.es2.net import output_spec
from workbench.nets import superres
from workbench.nets.layers import Act, FastBatchNorm

LINES = {"highp": "highp (emulator = llvmpipe) vs TF", "mediump": "mediump predicted vs TF",
         "TF float16": "TF float16 vs TF"}


def float16_model(model):
    """A copy of ``model`` computing in float16 (every layer's dtype policy ``"float16"``,
    weights rounded to float16): TensorFlow's own float16 answer, not bit-exact to a GPU."""
    def in_float16(layer):
        return layer.__class__.from_config({**layer.get_config(), "dtype": "float16"})

    clone = keras.models.clone_model(model, clone_function=in_float16)
    clone.set_weights([np.asarray(w, np.float16) for w in model.get_weights()])
    return clone


def _op_tensor(model, name):
    """The Keras tensor holding IR op ``name``'s output: its layer's, followed through
    BatchNorm, the residual Add and the activation."""
    follows = (keras.layers.BatchNormalization, FastBatchNorm, keras.layers.Add, Act,
               keras.layers.Activation)
    tensor = model.get_layer(name).output
    while not isinstance(tensor._keras_history[0], (Act, keras.layers.Activation)):
        nxt = [layer for layer in model.layers if isinstance(layer, follows) and any(
            t is tensor for t in (layer.input if isinstance(layer.input, list) else [layer.input]))]
        if len(nxt) != 1:
            break
        tensor = nxt[0].output
    return tensor


def tf_tensors(model, graph: ir.Graph, image):
    """``{op name: TF's value}`` for ``image`` (HxWx3, 8-bit levels), in the model's own
    precision; the SR demux as an 8-bit RGB image."""
    outputs = keras.Model(model.inputs, [_op_tensor(model, op.name) for op in graph.ops])
    demux = graph.rgb_output
    x = superres.net_input(image) if demux else image
    x = np.asarray(x, model.inputs[0].dtype)[None]
    values = [np.asarray(v, np.float32)[0] for v in outputs([x], training=False)]
    if demux:
        values[-1] = superres.with_chroma(image, values[-1], graph.ops[-1].block)
    return {op.name: v for op, v in zip(graph.ops, values)}


def compare(model, net, images):
    """Each op of ``net`` (an es2 Net compiled from Keras ``model``) on ``images``, pooled
    over the images.  Returns ``(rows, summary)``: per op the PSNR of highp, mediump and
    TF float16 against TF, and of mediump against TF float16 and against highp; the
    summary holds the net's output: for an image, PSNR (peak 255, all channels, as
    ``deploy.compare``), for logits, top-1 agreement and the largest logit difference."""
    model16 = float16_model(model)
    pairs = {"highp": ("TF", "highp"), "mediump": ("TF", "mediump"),
             "TF float16": ("TF", "TF float16"), "mediump vs TF float16": ("TF float16", "mediump"),
             "mediump vs highp": ("highp", "mediump")}
    runs = []
    for image in images:
        image = imaging.round_8bit(image)
        runs.append({"TF": tf_tensors(model, net.graph, image),
                     "TF float16": tf_tensors(model16, net.graph, image),
                     **{p: emulate.tensors(net.graph, image, a)
                        for p, a in (("highp", "float32"), ("mediump", "float16"))}})
    def pooled(kind, name):
        return np.concatenate([np.ravel(run[kind][name]) for run in runs])

    rows = []
    for op in net.graph.ops:
        peak = mediump.peak(net.graph, op.name, pooled("TF", op.name))
        rows.append({"op": op.name, **{
            f"{k} dB": mediump.psnr(pooled(a, op.name), pooled(b, op.name), peak)
            for k, (a, b) in pairs.items()}})
    out = net.graph.output
    final = {k: [run[k][out] for run in runs] for k in runs[0]}
    if output_spec(net.graph)["kind"] == "logits":
        top1 = {k: np.array([np.argmax(v) for v in vs]) for k, vs in final.items()}
        others = [k for k in final if k != "TF"]
        summary = {f"top1 {k} = TF": float(np.mean(top1[k] == top1["TF"])) for k in others}
        summary |= {f"max logit diff {k} vs TF": float(np.abs(np.subtract(final[k], final["TF"])).max())
                    for k in others}
        summary["top1 mediump = TF float16"] = float(np.mean(top1["mediump"] == top1["TF float16"]))
    else:
        summary = {f"PSNR {b} vs {a}": float(np.mean([mediump.psnr(x, y) for x, y in
                                                      zip(final[a], final[b])]))
                   for a, b in pairs.values()}
    return rows, {"images": len(images), **summary}


def sr_crops(sr_set, kernel="bicubic_aa", count=2, size=64, scale=superres.SCALE):
    """Low-resolution inputs from the first ``count`` images of ``sr_set`` (degraded by
    ``kernel``), centre crops of ``size`` x ``size``: the numpy float16 emulation is 6-12
    times slower than float32, so the deploy notebooks predict mediump on a few crops."""
    crops = []
    for _, hr in sr_set.images[:count]:
        lr = imaging.degrade(imaging.modcrop(hr, scale), scale, kernel)
        top, left = (max(0, (n - size) // 2) for n in lr.shape[:2])
        crops.append(lr[top:top + size, left:left + size])
    return crops


def table(rows) -> str:
    """The per-op rows of :func:`compare` as a markdown table (dB)."""
    return tables.markdown(rows, digits=1)


def first_break(rows, threshold_db=40.0, kind="mediump"):
    """The first op whose ``kind`` PSNR against TF falls below ``threshold_db``, or None."""
    return next((r["op"] for r in rows if r[f"{kind} dB"] < threshold_db), None)


def figure(rows, title="PSNR against TF per op"):
    """PSNR against TF per op, one line each for highp, mediump (predicted) and TF float16."""
    from workbench.figures import plt

    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(rows) + 2), 3.5))
    x = np.arange(len(rows))
    for kind, label in LINES.items():
        values = np.array([r[f"{kind} dB"] for r in rows], np.float64)
        ax.plot(x, np.clip(values, 0, 120), "o-" if kind != "TF float16" else "s--", label=label,
                alpha=1 if kind != "TF float16" else 0.6)
    ax.set_xticks(x, [r["op"] for r in rows], rotation=60 if len(rows) > 8 else 0, fontsize=8)
    ax.set_ylabel("PSNR vs TF float32 (dB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
