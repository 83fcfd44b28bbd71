"""Training recipes for the x2 SR net that keep the deployed net :func:`models.sr_x2`.

:class:`SRRecipe` holds every parameter of a training (:func:`workbench.nets.superres.train`);
those that shape the training-time net (each a parameter of :func:`sr_x2_recipe` too):

* ``expand`` -- collapsible linear blocks (SESR, Bhardwaj et al. 2022): every conv is
  trained as a k x k conv to ``expand`` hidden channels (split evenly over the layer's
  groups) followed by a 1x1 conv back, with no activation between.  The two are
  multiplied into one grouped k x k kernel at every step, so the forward pass runs the
  small net; :func:`collapse` returns the plain ``sr_x2`` model with those kernels.
* ``qat`` -- a :class:`layers.Quantize8` after every activation (the RGBA8 textures).
* ``init="identity"`` -- a pass-through path at the start (QuickSRNet-like): channel 0
  of L1..L4 copies the input luma (bounded ReLU keeps [0, 1] intact), L5 copies channel 0
  to the 4 sub-pixels with its other weights zero, so the untrained net is nearest
  upsampling.  In the collapsible blocks the pass-through is a constant added to the
  collapsed kernel (SESR's residual inside the linear block), so it stays in place.
* ``loss`` -- ``"l1"``, ``"mse"`` or ``"charbonnier"``.
* ``anchor`` -- ``"nearest"`` or ``"bilinear"``: output = clip(anchor + s (q - 0.5)), q the
  8-bit L5 output (:class:`layers.AnchorResidual`; on the GPU the SR demux adds it).
  ``anchor_storage="sqrt"`` stores q companded (:mod:`workbench.nets.storage`): small
  corrections are rounded more finely, the float net is unchanged.

Tensors: NHWC float32; luma in [0, 1]; sub-pixel channel ``c = 2 dy + dx``.  Like
:mod:`workbench.nets.layers`, the layers here run TF's ops under Keras' TensorFlow back end and
``keras.ops`` under the others (JAX).
"""
from __future__ import annotations

import dataclasses
import math

import keras
import numpy as np
import tensorflow as tf

from workbench.data.images import KERNELS
from workbench.nets import storage, training
from workbench.nets.layers import (PACKAGE, Act, AnchorResidual, DepthToSpace, GroupConv2D,
                                   Quantize8, anchor_subpixels, conv2d_ops, grouped_conv2d,
                                   on_tensorflow)
from workbench.nets.models import SR_GROUPS, SR_KERNELS, SR_WIDTHS, sr_x2


def identity_kernel(k, cin_g, cout, groups, outputs=(0,), gain=1.0):
    """Grouped kernel (k, k, cin // groups, cout) that copies input channel 0 to each
    output channel in ``outputs`` (centre tap ``gain``, all else 0); channels in group 0."""
    a = np.zeros((k, k, cin_g, cout), np.float32)
    for o in outputs:
        a[k // 2, k // 2, 0, o] = gain
    return a


def identity_gain(activation) -> tuple[float, float]:
    """``(gain, bias)`` with ``activation(gain * v + bias)`` ~ ``v`` for ``v`` in [0, 1]
    (least squares on its inverse, found by bisection: it must rise on [-64, 64]): how a
    pass-through channel goes through a layer of that activation unchanged.  bounded_relu
    ``(1, 0)``, relu6_scaled ``(6, 0)``; exact where the activation is linear on its way from
    0 to 1, else the closest line."""
    from workbench.nets import activations

    f = activations.get(activation).np_fn
    v = np.linspace(0.02, 0.98, 49)
    low, high = np.full_like(v, -64.0), np.full_like(v, 64.0)
    for _ in range(60):  # bisection, all values at once
        mid = (low + high) / 2
        below = np.asarray(f(mid), np.float64) < v
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    gain, bias = np.polyfit(v, (low + high) / 2, 1)
    return round(float(gain), 6), round(float(bias), 6) + 0.0  # (the bisection's 1e-9s gone)


@keras.saving.register_keras_serializable(package=PACKAGE)
class CollapsibleConv(keras.layers.Layer):
    """A linear block trained over-parameterised, run as one grouped k x k conv (SAME).

    Weights: ``wide`` (k, k, cin/groups, expand) -- group g's k x k conv to its
    ``expand/groups`` hidden channels; ``narrow`` (groups, expand/groups, filters/groups)
    -- the 1x1 back; ``bias`` (filters,).  ``offset``: a constant kernel added to the
    product (identity init), or None.  :meth:`kernel` is the collapsed
    (k, k, cin/groups, filters) kernel of :class:`layers.GroupConv2D`.
    """

    def __init__(self, filters, kernel_size, groups=1, expand=256, identity_outputs=(),
                 zero_narrow=False, identity_gain=1.0, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.kernel_size, self.groups = int(filters), int(kernel_size), int(groups)
        self.expand = int(expand)
        self.identity_outputs = tuple(int(o) for o in identity_outputs)
        self.zero_narrow = bool(zero_narrow)
        self.identity_gain = float(identity_gain)
        if self.expand % self.groups or self.filters % self.groups:
            raise ValueError(f"{self.name}: expand={expand} and filters={filters} must divide "
                             f"by groups={groups}")

    def build(self, input_shape):
        cin, k, g = int(input_shape[-1]), self.kernel_size, self.groups
        cin_g, e_g, out_g = cin // g, self.expand // g, self.filters // g
        self.wide = self.add_weight(name="wide", shape=(k, k, cin_g, self.expand),
                                    initializer="he_uniform")
        # Var(kernel) = e_g Var(wide) Var(narrow): narrow ~ U(+-sqrt(3/e_g)) keeps He's scale.
        limit = math.sqrt(3.0 / e_g)
        mask = np.ones((g, e_g, out_g), np.float32)
        mask[0, :, list(self.identity_outputs)] = 0.0  # pass-through outputs start clean
        uniform = tf.random.uniform if on_tensorflow() else keras.random.uniform
        init = (keras.initializers.Zeros() if self.zero_narrow else
                lambda shape, dtype=None: uniform(shape, -limit, limit) * mask)
        self.narrow = self.add_weight(name="narrow", shape=(g, e_g, out_g), initializer=init)
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")
        constant = tf.constant if on_tensorflow() else keras.ops.convert_to_tensor
        self.offset = (constant(identity_kernel(k, cin_g, self.filters, g,
                                                self.identity_outputs, self.identity_gain))
                       if self.identity_outputs else None)

    def kernel(self):
        k, g = self.kernel_size, self.groups
        cin_g = self.wide.shape[2]
        ops = tf if on_tensorflow() else keras.ops
        wide = ops.reshape(self.wide, (k, k, cin_g, g, self.expand // g))
        kern = ops.reshape(ops.einsum("hwige,geo->hwigo", wide, self.narrow),
                           (k, k, cin_g, self.filters))
        return kern if self.offset is None else kern + self.offset

    def call(self, x):
        conv = grouped_conv2d if on_tensorflow() else conv2d_ops
        return conv(x, self.kernel(), 1, "SAME", self.groups) + self.bias

    def compute_output_shape(self, input_shape):
        return (*input_shape[:3], self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": self.kernel_size, "groups": self.groups,
                "expand": self.expand, "identity_outputs": list(self.identity_outputs),
                "zero_narrow": self.zero_narrow, "identity_gain": self.identity_gain}


def sr_x2_recipe(expand=None, qat=False, init="he", anchor=None, anchor_scale=0.5,
                 anchor_storage="linear", widths=SR_WIDTHS, kernels=SR_KERNELS,
                 groups=SR_GROUPS, activation="bounded_relu"):
    """The training-time x2 SR net.  With no option it is :func:`models.sr_x2`; layer
    names ``L1``..``L5`` (+ ``_act``, ``_q8``) match it.  See the module docstring."""
    scale = 2  # sub-pixels a side (the x2 net)
    if init not in ("he", "identity"):
        raise ValueError(f"init must be 'he' or 'identity', not {init!r}")
    ident = init == "identity"
    gain, bias = identity_gain(activation) if ident else (1.0, 0.0)
    specs = [(w, k, g) for w, k, g in zip(widths, kernels, groups)] + [(scale * scale, 1, 1)]
    x = inputs = keras.Input((None, None, 1), name="luma")
    for i, (w, k, g) in enumerate(specs, start=1):
        last = i == len(specs)
        # pass-through outputs; the last layer starts from zero weights (a clean copy of
        # channel 0 with identity init, the anchor's 0.5 with an anchor)
        outs = () if not ident or (last and anchor) else tuple(range(w)) if last else (0,)
        zero = last and (ident or bool(anchor))
        if expand:
            conv = CollapsibleConv(w, k, g, expand=expand - expand % g, identity_outputs=outs,
                                   zero_narrow=zero, identity_gain=gain, name=f"L{i}")
            x = conv(x)
        else:
            conv = GroupConv2D(w, k, groups=g, name=f"L{i}")
            x = conv(x)
            if outs or zero:
                kern = keras.ops.convert_to_numpy(conv.kernel)
                kern[..., list(outs)] = 0.0
                kern *= 0.0 if zero else 1.0
                conv.kernel.assign(kern + identity_kernel(k, kern.shape[2], w, g, outs, gain))
        if outs and bias:  # the pass-through outputs' bias: the activation's (gain, bias)
            conv.bias.assign(np.where(np.isin(np.arange(w), outs), bias, 0).astype(np.float32))
        x = Act(activation, name=f"L{i}_act")(x)
        if qat:
            x = Quantize8(anchor_storage if last and anchor else "linear", name=f"L{i}_q8")(x)
    if anchor:
        x = AnchorResidual(anchor, anchor_scale, anchor_storage, name="anchor")([inputs, x])
    outputs = DepthToSpace(scale, name="subpixels")(x)
    model = keras.Model(inputs, outputs, name="sr_x2_recipe")
    if anchor:  # start at the anchor: L5 output 0.5 (zero kernel above, bias 0.5)
        model.get_layer(f"L{len(specs)}").bias.assign(np.full(scale * scale, 0.5, np.float32))
    return model


def layout(model) -> dict:
    """What the net a run trains is (its ``config.json`` records it): an sr_x2-layout model's
    ``widths``, ``kernels``, ``groups`` of L1..L4, ``activation`` and ``parameters``; any
    other model's :func:`training.described`."""
    if not is_sr_layout(model):
        return training.described(model)
    layers = [model.get_layer(f"L{i}") for i in range(1, 5)]
    return {"widths": [l.filters for l in layers],
            "kernels": [int(np.ravel(l.kernel_size)[0]) for l in layers],
            "groups": [l.groups for l in layers],
            "activation": model.get_layer("L1_act").activation,
            "parameters": int(model.count_params())}


def is_sr_layout(model) -> bool:
    """``model`` has the sr_x2 layout's layers (L1..L5, each with its ``L<i>_act``)."""
    names = {layer.name for layer in model.layers}
    return all({f"L{i}", f"L{i}_act"} <= names for i in range(1, 6))


def deployable(model):
    """The net to deploy of a trained model: an sr_x2-layout model through :func:`collapse` (its
    CollapsibleConvs to plain convs, every layer option kept), any other model as it is."""
    return collapse(model) if is_sr_layout(model) else model


def anchor_of(model):
    """The recipe model's :class:`AnchorResidual` layer (named ``anchor``), or None."""
    return next((layer for layer in model.layers if layer.name == "anchor"), None)


def collapse(model, quantize=False):
    """A recipe model -> the deployable net: :func:`models.sr_x2` (or, with an anchor, the
    same layers + :class:`AnchorResidual`) of the model's widths, kernel sizes, groups and
    activation, with each CollapsibleConv's collapsed kernel.
    ``quantize=True`` keeps a :class:`Quantize8` after every activation (8-bit storage)."""
    specs = [model.get_layer(f"L{i}") for i in range(1, 6)]
    widths = tuple(l.filters for l in specs[:4])
    kernels = tuple(l.kernel_size for l in specs[:4])
    groups = tuple(l.groups for l in specs[:4])
    found = {model.get_layer(f"L{i}_act").activation for i in range(1, 6)}
    if len(found) > 1:
        raise ValueError(f"model {model.name!r}: layers L1..L5 end in different activations "
                         f"({', '.join(sorted(found))}); the sr_x2 layout has one")
    activation, anchor = found.pop(), anchor_of(model)
    if not quantize and anchor is None:
        plain = sr_x2(widths, kernels, groups, activation=activation)
    else:
        plain = sr_x2_recipe(qat=quantize, widths=widths, kernels=kernels, groups=groups,
                             anchor=anchor.mode if anchor else None,
                             anchor_scale=anchor.scale if anchor else 0.5,
                             anchor_storage=anchor.storage if anchor else "linear",
                             activation=activation)
    for layer in specs:
        kern = layer.kernel() if isinstance(layer, CollapsibleConv) else layer.kernel
        plain.get_layer(layer.name).set_weights([np.asarray(kern), np.asarray(layer.bias)])
    return plain


def with_anchor(model, lumas, anchor="nearest", anchor_scale=0.75, anchor_storage="linear"):
    """A trained recipe model -> the same recipe with the given anchor residual, as a warm
    start for fine-tuning: L1..L4 as they are; L5 refitted so that ``anchor + s (q - 0.5)``
    gives the old output (the old net's own anchor, if it has one, included).  The change of
    anchor is taken as the least-squares fit of the L4 features to it (``lumas``: the net's
    inputs, HxWx1 LR luma, to fit on; every 4th pixel used).  The fit is not exact (the
    features carry the anchors only approximately): fine-tuning closes it.  With the old
    net's anchor and scale, only ``anchor_storage`` changes: the float net stays the same."""
    layers = [model.get_layer(f"L{i}") for i in range(1, 6)]
    old_anchor = anchor_of(model)
    plain = collapse(model)
    probe = keras.Model(plain.input, plain.get_layer("L4_act").output)
    feats, targets = [], []
    for x in lumas:
        h = keras.ops.convert_to_numpy(probe(x[None], training=False))[0]
        a = keras.ops.convert_to_numpy(anchor_subpixels(x[None], anchor))[0]
        if old_anchor:
            a = a - keras.ops.convert_to_numpy(anchor_subpixels(x[None], old_anchor.mode))[0]
        feats.append(h.reshape(-1, h.shape[-1])[::4])
        targets.append(a.reshape(-1, a.shape[-1])[::4])
    feats = np.concatenate(feats)
    fit = np.linalg.lstsq(np.concatenate([feats, np.ones((len(feats), 1))], 1),
                          np.concatenate(targets), rcond=None)[0]  # (features + 1, 4)
    expand = layers[0].expand if isinstance(layers[0], CollapsibleConv) else None
    out = sr_x2_recipe(expand=expand, qat=any(isinstance(l, Quantize8) for l in model.layers),
                       init="identity", anchor=anchor, anchor_scale=anchor_scale,
                       anchor_storage=anchor_storage, widths=tuple(l.filters for l in layers[:4]),
                       kernels=tuple(l.kernel_size for l in layers[:4]),
                       groups=tuple(l.groups for l in layers[:4]))
    for old in layers[:4]:
        out.get_layer(old.name).set_weights(old.get_weights())
    old = layers[4]
    kernel = np.asarray(old.kernel() if isinstance(old, CollapsibleConv) else old.kernel)[0, 0]
    bias = np.asarray(old.bias)
    if old_anchor:  # the old output in luma units, less the old anchor: s (q - 0.5)
        kernel, bias = old_anchor.scale * kernel, old_anchor.scale * (bias - 0.5)
    wanted = (kernel - fit[:-1]) / anchor_scale  # (features, 4): q's 1x1 kernel
    bias = (bias - fit[-1]) / anchor_scale + 0.5
    if expand:  # the same wide 1x1; the narrow one that multiplies to the wanted kernel
        wide = np.asarray(old.wide)
        narrow = np.linalg.lstsq(wide[0, 0], wanted, rcond=None)[0]
        out.get_layer(old.name).set_weights([wide, narrow[None], bias])
    else:
        out.get_layer(old.name).set_weights([wanted[None, None], bias])
    return out


@keras.saving.register_keras_serializable(package=PACKAGE)
def charbonnier(y_true, y_pred, eps=1e-3):
    """Charbonnier loss: mean of sqrt((y - t)^2 + eps^2)."""
    if on_tensorflow():
        return tf.reduce_mean(tf.sqrt(tf.square(y_pred - y_true) + eps * eps))
    ops = keras.ops
    return ops.mean(ops.sqrt(ops.square(y_pred - y_true) + eps * eps))


LOSSES = {"l1": "mean_absolute_error", "mse": "mean_squared_error", "charbonnier": charbonnier}


@dataclasses.dataclass(frozen=True)
class SRRecipe(training.Recipe):
    """Every parameter of an x2 SR training (:func:`workbench.nets.superres.train`), checked
    when made; the run's ``config.json`` (with the count of training images).

    ``steps`` in epochs of at most ``steps_per_epoch`` (:func:`superres.epoch_plan`), batches
    of ``batch`` random LR patches of ``patch`` x ``patch`` pixels, Adam with a cosine decay of
    ``learning_rate`` to 1 %, ``loss`` one of :data:`LOSSES`.  The net: a fresh
    :func:`sr_x2_recipe` (``init``, ``expand``, ``qat``, ``anchor``, ``anchor_scale``,
    ``anchor_storage``: the module docstring; ``widths``: the channels of L1..L4, default the
    reference net's, :data:`models.SR_WIDTHS`; a member of the family, as ``(32, 16, 16, 12)``),
    or ``init_model``, the path of a ``.keras`` model to train as it is (a net of one's own, or
    one to fine-tune).  The data: ``degradations``, the kernels LR patches are made with (one
    at random a patch); ``flips``, each patch one of
    the 8 flips / 90-degree rotations; ``scales``, each image also shrunk by these factors
    (FSRCNN's scale augmentation, :data:`workbench.data.datasets.FSRCNN_SCALES`); ``teacher``,
    the path of a trained x2 SR ``.keras`` model to distil (the target is ``(1 -
    teacher_weight) * HR + teacher_weight * teacher(LR)``).
    """
    steps: int
    steps_per_epoch: int = 250
    batch: int = 16
    patch: int = 48
    learning_rate: float = 2e-3
    loss: str = "l1"
    seed: int = 0
    init: str = "identity"
    expand: int | None = None
    qat: bool = False
    anchor: str | None = None
    anchor_scale: float = 0.5
    anchor_storage: str = "linear"
    widths: tuple[int, ...] | None = None
    init_model: str | None = None
    degradations: tuple[str, ...] = ("bicubic_aa",)
    flips: bool = True
    scales: tuple[float, ...] = (1.0,)
    teacher: str | None = None
    teacher_weight: float = 0.5

    RUN_ENTRIES = ("train_images", "net")
    RENAMED = {"kernels": "degradations"}  # (runs before kernels meant only layer kernel sizes)

    def _check(self):
        self._whole("steps", "steps_per_epoch", "batch", "patch")
        self._whole("seed", least=0)
        self._whole("expand", optional=True)
        self._positive("learning_rate", "anchor_scale")
        self._fraction("teacher_weight")
        self._flag("qat", "flips")
        self._choice("loss", tuple(LOSSES))
        self._choice("init", ("he", "identity"))
        self._choice("anchor", (None, "nearest", "bilinear"))
        self._choice("anchor_storage", storage.LAWS)
        for name in ("init_model", "teacher"):
            if not isinstance(getattr(self, name), (str, type(None))):
                self._refuse(name, "want the path of a .keras model, or None")
        if not isinstance(self.degradations, tuple) or not self.degradations or \
                not set(self.degradations) <= set(KERNELS):
            self._refuse("degradations", f"want some of {', '.join(KERNELS)}")
        if self.widths is not None and not (isinstance(self.widths, tuple) and len(
                self.widths) == len(SR_WIDTHS) and all(map(training.is_whole, self.widths))):
            self._refuse("widths", f"want {len(SR_WIDTHS)} whole numbers >= 1 (L1..L4's "
                         "channels), or None")
        if not isinstance(self.scales, tuple) or not self.scales or not all(
                isinstance(f, (int, float)) and 0 < f <= 1 for f in self.scales):
            self._refuse("scales", "want factors in (0, 1]")

    def net(self):
        """The fresh training-time net of this recipe (:func:`sr_x2_recipe`)."""
        return sr_x2_recipe(expand=self.expand, qat=self.qat, init=self.init, anchor=self.anchor,
                            anchor_scale=self.anchor_scale, anchor_storage=self.anchor_storage,
                            widths=self.widths or SR_WIDTHS)
