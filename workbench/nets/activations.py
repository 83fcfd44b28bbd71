"""Activations, each defined once: TensorFlow, keras.ops, numpy and GLSL forms side by side.

Every activation here maps into [0, 1] (or is the identity), so that its output
fits an RGBA8 texture of OpenGL ES 2.0.  The GLSL form is an expression template
over a ``vec4`` (or ``float``) named ``{x}``; back ends fill it in with
``act.glsl.format(x="sum")``, an IR op's with :func:`glsl` (a PRelu's per-channel slopes too).

Register a new candidate with :func:`register` and it shows up in the layers,
the code generators, the emulator and the figures, the scale folding (``stored_as``), the ONNX
writer (``onnx``) and the TF.js peer (``tfjs``): every consumer reads this registry.

The layers call :meth:`Activation.fn`: ``tf_fn`` under Keras' TensorFlow back end (TF's own
kernels and the hand-written gradients tuned for its CPU training), ``ops_fn`` (written with
``keras.ops``, the same values and gradients) under any other back end, e.g. JAX.  Those live
in :mod:`workbench.nets.activation_forms`, imported at their first call: the GLSL and numpy
forms, all that shaders and the emulator need, load no TensorFlow.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import numpy as np

from workbench.glsl_text import glsl_float, glsl_vec


@dataclass(frozen=True)
class Activation:
    """One activation: its name, the implementations and a description.  ``np_fn``
    computes in float32, or in float16 when given float16 (the emulator's mediump).
    ``ops_fn``: the ``keras.ops`` form for Keras' other back ends (None: TensorFlow only).
    ``stored_as``: the activation that stores its output at a calibrated scale, clamped to
    [0, 1] (:meth:`workbench.ir.lowering.Scales.store`; None: it has none, refused).
    ``onnx``: ``onnx(w, x, layer)`` writes it as ONNX nodes on the tensor named ``x`` and
    returns its output's name, ``w`` the ONNX writer's helpers (``node``, ``const``, ``clip``,
    ``scaled``: :class:`workbench.ir.to_onnx._Writer`; None: no ONNX form, refused).
    ``tfjs``: the TF.js peer's form, a JS expression of ``tf`` and ``x`` (``peers.js``,
    :func:`workbench.web.tfjs.peers_js`; None: none, or formed there from the op's entry)."""

    name: str
    tf_fn: Callable
    np_fn: Callable[[np.ndarray], np.ndarray]
    glsl: str
    description: str
    output_range: tuple[float, float] | None = (0.0, 1.0)
    ops_fn: Callable | None = None
    stored_as: str | None = None
    onnx: Callable | None = None
    tfjs: str | None = None

    def fn(self, tensorflow: bool | None = None) -> Callable:
        """The form for the running Keras back end (or, given ``tensorflow``, for TensorFlow or
        not): ``tf_fn`` under TensorFlow, else ``ops_fn`` (an activation without one names
        itself)."""
        import keras

        if tensorflow is None:
            tensorflow = keras.backend.backend() == "tensorflow"
        if tensorflow:
            return self.tf_fn
        if self.ops_fn is None:
            raise ValueError(f"activation {self.name!r} has no keras.ops form (ops_fn), so it "
                             f"runs only under Keras' TensorFlow back end, not "
                             f"{keras.backend.backend()!r}")
        return self.ops_fn

    def __call__(self, x):
        return self.fn()(x)


class _Form:
    """A TF or keras.ops form of :mod:`workbench.nets.activation_forms`, by name, imported
    at its first call (with ``args`` after ``x``)."""

    def __init__(self, name, *args):
        self.name, self.args = name, args

    def __call__(self, x):
        from workbench.nets import activation_forms

        return getattr(activation_forms, self.name)(x, *self.args)


_REGISTRY: dict[str, Activation] = {}


def register(act: Activation) -> Activation:
    """Add an activation to the registry (replacing one of the same name)."""
    _REGISTRY[act.name] = act
    return act


def get(name: str | Activation) -> Activation:
    """Look an activation up by name (``"leaky_relu:<slope>"``: :func:`leaky_relu`); the
    error lists the known names."""
    if isinstance(name, Activation):
        return name
    if isinstance(name, str) and name.startswith("leaky_relu:") and name not in _REGISTRY:
        try:
            return leaky_relu(float(name.split(":", 1)[1]))
        except ValueError:
            pass
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; known: {', '.join(sorted(_REGISTRY))}, "
            "leaky_relu:<slope>") from None


def leaky_relu(slope: float) -> Activation:
    """``slope x`` below 0, for a slope in [0, 1) (Keras' LeakyReLU, ONNX's LeakyRelu), named
    ``"leaky_relu:<slope>"`` (registered at first use): :func:`prelu`'s numpy and GLSL forms
    with one slope; unbounded below and above: ES 2.0 stores it with a calibrated scale and
    offset (as ``"bounded_prelu"``, :meth:`workbench.ir.lowering.Scales.store`)."""
    if not 0 <= slope < 1:
        raise ValueError(f"leaky_relu's slope {slope}: one in [0, 1)")
    name = f"leaky_relu:{slope:.9g}"
    if name not in _REGISTRY:
        register(replace(prelu(np.float32(slope)), name=name,
                         glsl=_PRELU_GLSL.format(x="{x}", a=glsl_float(slope)),
                         tf_fn=_Form("leaky_relu_tf", slope),
                         description=f"leaky ReLU, slope {slope:.9g} below 0 (unbounded)",
                         ops_fn=_Form("leaky_relu_ops", slope),
                         onnx=partial(_leaky_relu_onnx, alpha=float(f"{slope:.9g}"))))
    return _REGISTRY[name]


def _leaky_relu_onnx(w, x, layer, alpha):  # nn.LeakyReLU(alpha), alpha as its name says
    return w.node("LeakyRelu", [x], layer, alpha=alpha)


# --- PRelu: a slope per channel ---------------------------------------------------------------
# An IR op's (Conv, Add) activation "prelu" takes its ``activation_slope``, one per output
# channel; ES 2.0 stores it calibrated as "bounded_prelu", ``clamp(prelu(x) + zero, 0, 1)``: a
# positive scale commutes with a PRelu (into the weights), the offset comes after it, as
# ``activation_zero`` (the stored value of a real 0; :meth:`workbench.ir.lowering.Scales.fold`).
# Their GLSL forms hold ``{a}`` and ``{z}``, an output pack's values (:func:`glsl`).
_PRELU_GLSL = "(max({x}, 0.0) + {a} * min({x}, 0.0))"
PARAMETERS = {"prelu": ("activation_slope",), "bounded_prelu": ("activation_slope",
                                                                "activation_zero")}


def _prelu_np(x, slope, zero=None):
    x = _float(x)
    y = np.maximum(x, 0) + np.asarray(slope, np.float32).astype(x.dtype) * np.minimum(x, 0)
    return y if zero is None else np.clip(y + np.asarray(zero, np.float32).astype(x.dtype), 0, 1)


def _prelu_onnx(w, x, layer, slope, zero=None):
    """nn.PReLU(channels): a slope ``(C, 1, 1)``; with ``zero``, + zero, then Clip(0, 1)."""
    y = w.node("PRelu", [x, w.const(f"{layer}.slope", slope.reshape(-1, 1, 1))], layer)
    if zero is None:
        return y
    y = w.node("Add", [y, w.const(f"{layer}.zero", zero.reshape(-1, 1, 1))], layer)
    return w.clip(y, layer, 0.0, 1.0)


def prelu(slope, zero=None) -> Activation:
    """``max(x, 0) + slope min(x, 0)``, ``slope`` one value or one per channel (the last axis);
    with ``zero`` (the same) ES 2.0's stored form ``clamp(prelu(x) + zero, 0, 1)``."""
    slope = np.asarray(slope, np.float32)
    if zero is None:
        return Activation("prelu", _Form("prelu_tf", slope), partial(_prelu_np, slope=slope),
                          _PRELU_GLSL, "PReLU: a slope per channel below 0 (unbounded)",
                          (-float("inf"), float("inf")), _Form("prelu_ops", slope),
                          stored_as="bounded_prelu", onnx=partial(_prelu_onnx, slope=slope))
    zero = np.asarray(zero, np.float32)
    return Activation("bounded_prelu", _Form("prelu_tf", slope, zero),
                      partial(_prelu_np, slope=slope, zero=zero),
                      f"clamp({_PRELU_GLSL} + {{z}}, 0.0, 1.0)",
                      "PReLU stored with a calibrated offset, clamped to [0, 1]",
                      ops_fn=_Form("prelu_ops", slope, zero),
                      onnx=partial(_prelu_onnx, slope=slope, zero=zero))


def of(op, order=None) -> Activation:
    """The activation of IR op ``op`` (a Conv or an Add): its ``activation`` by name, a PRelu's
    with its per-channel parameters (:data:`PARAMETERS`), given ``order`` (an index of its
    output channels) in that order."""
    if op.activation not in PARAMETERS:
        return get(op.activation)
    values = [getattr(op, field) for field in PARAMETERS[op.activation]]
    return prelu(*(values if order is None else [v[order] for v in values]))


def glsl(op, x, pack, stored=False) -> str:
    """The GLSL of ``op``'s activation on ``x``, a ``vec4`` of its output pack ``pack``: a
    PRelu's parameters as that pack's ``vec4`` literals, or, for ``pack`` GLSL code of an int
    (a pack chosen at run time), read from the arrays :func:`glsl_arrays` declares.
    ``stored``: the value goes straight to an RGBA8 target, whose conversion to fixed point
    clamps to [0, 1]: the form without its outer ``clamp(..., 0.0, 1.0)`` where it ends in
    one (the same bytes, a clamp's instructions fewer: 8-14 a program on VideoCore IV)."""
    fields = PARAMETERS.get(op.activation, ())
    if isinstance(pack, str):
        values = [f"{f.upper()}[{pack}]" for f in fields]
    else:
        values = [glsl_vec(getattr(op, f)[4 * pack:4 * pack + 4]) for f in fields]
    text = of(op).glsl.format(x=x, **dict(zip("az", values)))
    return unclamped(text) if stored else text


def unclamped(text: str) -> str:
    """GLSL ``text`` without its outer clamp to [0, 1] (``clamp(e, 0.0, 1.0)`` -> ``(e)``, an
    identifier bare); ``text`` itself where it is no such clamp."""
    head, tail = "clamp(", ", 0.0, 1.0)"
    if not (text.startswith(head) and text.endswith(tail)):
        return text
    inner, depth = text[len(head):-len(tail)], 0
    for c in inner:  # the clamp's first argument: its parentheses balanced, no comma outside
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0 or (depth == 0 and c == ","):
            return text
    return inner if inner.isidentifier() else f"({inner})"


def glsl_arrays(op, packs) -> str:
    """GLSL ES 3 ``const vec4`` arrays of ``op``'s PRelu parameters, one a pack (of ``packs``)
    (:func:`glsl`); empty for another activation."""
    return "".join(
        f"const vec4 {f.upper()}[{packs}] = vec4[{packs}]("
        f"{', '.join(glsl_vec(getattr(op, f)[4 * p:4 * p + 4]) for p in range(packs))});\n"
        for f in PARAMETERS.get(op.activation, ()))


def slopes(op, channels):
    """The slopes below 0 of ``op``'s leaky ReLU or PRelu, one per of its ``channels``
    output channels (float32); None for another activation."""
    if op.activation == "prelu":
        return np.broadcast_to(op.activation_slope, channels).astype(np.float32)
    if op.activation.startswith("leaky_relu:"):
        return np.full(channels, float(op.activation.split(":", 1)[1]), np.float32)
    return None


def names(having: str | None = None) -> list[str]:
    """The registered names, in their order; ``having`` a field's name: those it is not None
    for (``"onnx"``: those the ONNX writer writes)."""
    return [n for n, a in _REGISTRY.items() if having is None or getattr(a, having) is not None]


def gradient(name: str | Activation, x) -> np.ndarray:
    """d act(x) / dx at the points ``x`` (float32), by TensorFlow autodiff: the gradient the
    training uses (for ``sigmoid_like`` its hand-written one)."""
    import tensorflow as tf

    x = tf.constant(np.asarray(x, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = get(name).tf_fn(x)
    return tape.gradient(y, x).numpy()


# --- the sigmoid-like piecewise-linear activation -------------------------------
# y = clip(0.05x + clip(0.1x, -0.05, 0.05) + clip(0.05x, -0.125, 0.125) + 0.5, 0, 1)
# Breakpoints at |x| = 0.5, 2.5, 6.5; slopes 0.2, 0.1, 0.05, then 0.
_SIGMOID_BREAKS = np.array([0.5, 2.5, 6.5], np.float32)
_SIGMOID_SLOPES = np.array([0.2, 0.1, 0.05, 0.0], np.float32)


def _float(x):
    """``x`` as float32, or kept float16 (the emulator's mediump prediction computes in it:
    with numpy's scalar rules every constant and every step below then rounds to float16)."""
    x = np.asarray(x)
    return x if x.dtype == np.float16 else x.astype(np.float32)


def _sigmoid_like_np(x):
    x = _float(x)
    inner = 0.05 * x + np.clip(0.1 * x, -0.05, 0.05) + np.clip(0.05 * x, -0.125, 0.125)
    return np.clip(inner + 0.5, 0.0, 1.0).astype(x.dtype)


def _sigmoid_like_onnx(w, x, layer):  # torch.clamp(0.05 x + torch.clamp(0.1 x, ...) ..., 0, 1)
    y = w.node("Add", [w.scaled(x, layer, 0.05),
                       w.clip(w.scaled(x, layer, 0.1), layer, -0.05, 0.05)], layer)
    y = w.node("Add", [y, w.clip(w.scaled(x, layer, 0.05), layer, -0.125, 0.125)], layer)
    y = w.node("Add", [y, w.const(f"{layer}.half", 0.5)], layer)
    return w.clip(y, layer, 0.0, 1.0)


def _clip01_onnx(w, x, layer):  # nn.Hardtanh(0, 1)
    return w.clip(x, layer, 0.0, 1.0)


def _node_onnx(kind):
    """The writer of an activation that is one ONNX node of ``kind`` (nn.ReLU: ``"Relu"``)."""
    return lambda w, x, layer: w.node(kind, [x], layer)


register(Activation(
    name="bounded_relu",
    tf_fn=_Form("bounded_relu_tf"),
    np_fn=lambda x: np.clip(_float(x), 0.0, 1.0),
    glsl="clamp({x}, 0.0, 1.0)",
    description="ReLU bounded to [0, 1] (an RGBA8 target clamps for free)",
    ops_fn=_Form("bounded_relu_ops"),
    stored_as="bounded_relu",
    onnx=_clip01_onnx,
    tfjs="tf.clipByValue(x, 0, 1)",
))
register(Activation(
    name="relu6_scaled",
    tf_fn=_Form("relu6_scaled_tf"),
    np_fn=lambda x: np.clip(_float(x), 0.0, 6.0) / 6.0,
    glsl="(clamp({x}, 0.0, 6.0) / 6.0)",
    description="ReLU6 rescaled to [0, 1]",
    ops_fn=_Form("relu6_scaled_ops"),
    tfjs="tf.div(tf.clipByValue(x, 0, 6), 6)",
))
register(Activation(
    name="sigmoid_like",
    tf_fn=_Form("sigmoid_like_tf"),
    np_fn=_sigmoid_like_np,
    glsl=("clamp(0.05 * {x} + clamp(0.1 * {x}, -0.05, 0.05)"
          " + clamp(0.05 * {x}, -0.125, 0.125) + 0.5, 0.0, 1.0)"),
    description="piecewise-linear sigmoid: slopes 0.2/0.1/0.05/0 with breaks at |x| = 0.5/2.5/6.5",
    ops_fn=_Form("sigmoid_like_ops"),
    onnx=_sigmoid_like_onnx,
    tfjs=("tf.clipByValue(tf.add(tf.add(tf.add(tf.mul(x, 0.05),\n"  # peers.js's line break
          "    tf.clipByValue(tf.mul(x, 0.1), -0.05, 0.05)), tf.clipByValue(tf.mul(x, 0.05), "
          "-0.125, 0.125)), 0.5), 0, 1)"),
))
register(Activation(
    name="sigmoid",
    tf_fn=_Form("sigmoid_tf"),
    np_fn=lambda x: 1.0 / (1.0 + np.exp(-_float(x))),
    glsl="(1.0 / (1.0 + exp(-{x})))",
    description="logistic sigmoid (reference, not piecewise linear)",
    ops_fn=_Form("sigmoid_ops"),
    onnx=_node_onnx("Sigmoid"),
    tfjs="tf.sigmoid(x)",
))
register(Activation(
    name="relu",
    tf_fn=_Form("relu_tf"),
    np_fn=lambda x: np.maximum(_float(x), 0.0).astype(np.asarray(x).dtype),
    glsl="max({x}, 0.0)",
    description="ReLU, unbounded: stored in RGBA8 only with a calibrated scale "
                "(workbench.es2.calibrate)",
    output_range=(0.0, float("inf")),
    ops_fn=_Form("relu_ops"),
    stored_as="bounded_relu",
    onnx=_node_onnx("Relu"),
    tfjs="tf.relu(x)",
))
register(Activation(
    name="linear",
    tf_fn=_Form("identity_tf"),
    np_fn=_float,
    glsl="{x}",
    description="identity (no activation); only for outputs that are not stored in RGBA8",
    output_range=None,
    ops_fn=_Form("identity_ops"),
    stored_as="bounded_relu",
    onnx=lambda w, x, layer: x,
    tfjs="x",
))
