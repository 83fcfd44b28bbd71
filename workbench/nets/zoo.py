"""Two nets of the ecosystem, small, for 32x32 CIFAR-10: a MobileNetV2-style net and a
ResNet-style net, as Keras models (issue 43, item 4).  tools/torch_style_onnx.py writes them
as the ONNX graph ``torch.onnx.export`` writes for the equivalent PyTorch module.

Layouts.  Input RGB in [0, 1], (N, size, size, 3) float32 (channel-last); output class
probabilities (N, classes) (a ``Softmax`` after the ``logits`` Dense).

Padding.  PyTorch pads a 3x3 conv by 1 on every side (``padding=1``); Keras' ``"same"`` at
stride 2 on an even size pads only the bottom and right, which no ``nn.Conv2d`` does.  With
``padding="torch"`` (the default) the nets pad the stride-2 3x3 layers with
``ZeroPadding2D(1)`` and a ``"valid"`` conv, as ``keras.applications.MobileNetV2`` does, so
that Keras and the PyTorch module compute the same thing (the padding is the ONNX Conv's
``pads``).  With ``padding="keras"`` every 3x3 layer is ``"same"``.

:func:`train_briefly` trains either net on the CIFAR-10 training images for a few hundred
steps; :func:`multiply_adds` counts a net's multiply-adds an image.
"""
from __future__ import annotations

import time

import keras
import numpy as np


def _divisible(value, divisor=8):
    """MobileNet's channel rounding: to a multiple of ``divisor``, never down by > 10 %."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv(x, filters, kernel, stride, padding, name, depthwise=False):
    """A bias-free conv (or depthwise conv) with PyTorch's or Keras' padding."""
    pad = "same"
    if kernel > 1 and stride > 1 and padding == "torch":
        x = keras.layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
        pad = "valid"
    if depthwise:
        return keras.layers.DepthwiseConv2D(kernel, stride, padding=pad, use_bias=False,
                                            name=name)(x)
    return keras.layers.Conv2D(filters, kernel, stride, padding=pad, use_bias=False,
                               name=name)(x)


def _bn(x, name):
    return keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=f"{name}_bn")(x)


def _check_padding(padding):
    if padding not in ("torch", "keras"):
        raise ValueError(f"padding={padding!r}: 'torch' (ZeroPadding2D + valid at stride 2) "
                         "or 'keras' ('same' everywhere)")


# (expansion t, channels c before `width`, blocks n, stride s of the first), as MobileNetV2's
# table, cut to 7 blocks and 3 stride-2 stages for 32x32 images
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 1, 2),
                       (6, 96, 1, 1))


def mobilenet_v2_style(input_size=32, classes=10, width=0.35, seed=0, *, stem=32, head=128,
                       stem_stride=1, blocks=MOBILENET_V2_BLOCKS, padding="torch",
                       name="mobilenet_v2_style"):
    """A MobileNetV2-style net (Sandler et al. 2018) for small images.

    Stem: 3x3 conv to ``_divisible(stem * width)`` channels (stride ``stem_stride``), BN,
    ReLU6.  Then inverted residual blocks per ``blocks`` row ``(t, c, n, s)``: ``n`` blocks of
    ``_divisible(c * width)`` output channels, the first at stride ``s``; each block is a 1x1
    expansion conv to ``t`` x its input channels + BN + ReLU6 (no expansion where t = 1, as in
    MobileNetV2), a 3x3 depthwise conv + BN + ReLU6, a 1x1 linear projection + BN (no
    activation), and where stride is 1 and the channels match, ``Add`` of the block's input
    (a linear residual: no activation after it).  Then a 1x1 conv to ``head`` channels + BN +
    ReLU6, global average pooling, ``Dense(classes)`` (``logits``) and ``Softmax``.

    With the defaults (width 0.35): channels 16 | 8 | 8, 8 | 16, 16 | 24 | 32 | 128 at
    32, 32, 16, 8, 4, 4, 4 pixels, 7 blocks, 2 residual adds.  Layer names ``stem``,
    ``b{i}_expand`` / ``b{i}_dw`` / ``b{i}_project`` (+ ``_bn``, ``_relu6``, ``_pad``),
    ``b{i}_add``, ``head``, ``pool``, ``logits``, ``softmax``; blocks count from 1.
    ``padding``: see the module's docstring.  ``seed`` seeds the initial weights."""
    _check_padding(padding)
    keras.utils.set_random_seed(seed)

    def relu6(x, label):
        return keras.layers.ReLU(max_value=6.0, name=f"{label}_relu6")(x)

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    channels = _divisible(stem * width)
    x = relu6(_bn(_conv(x, channels, 3, stem_stride, padding, "stem"), "stem"), "stem")
    i = 0
    for t, c, n, s in blocks:
        out = _divisible(c * width)
        for k in range(n):
            i += 1
            label, stride, y = f"b{i}", s if k == 0 else 1, x
            if t != 1:
                y = _conv(y, channels * t, 1, 1, padding, f"{label}_expand")
                y = relu6(_bn(y, f"{label}_expand"), f"{label}_expand")
            y = _conv(y, None, 3, stride, padding, f"{label}_dw", depthwise=True)
            y = relu6(_bn(y, f"{label}_dw"), f"{label}_dw")
            y = _bn(_conv(y, out, 1, 1, padding, f"{label}_project"), f"{label}_project")
            if stride == 1 and channels == out:
                y = keras.layers.Add(name=f"{label}_add")([y, x])
            x, channels = y, out
    x = relu6(_bn(_conv(x, head, 1, 1, padding, "head"), "head"), "head")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(classes, name="logits")(x)
    outputs = keras.layers.Softmax(name="softmax")(x)
    return keras.Model(inputs, outputs, name=name)


def resnet_style(input_size=32, classes=10, widths=(32, 64), blocks=1, seed=0, *,
                 padding="torch", name="resnet_style"):
    """A ResNet-style net of basic blocks (He et al. 2016, the CIFAR variant: no max pool).

    Stem: 3x3 conv to ``widths[0]`` + BN + ReLU.  Then per stage ``s`` (``widths[s]``
    channels) ``blocks`` basic blocks: 3x3 conv + BN + ReLU, 3x3 conv + BN, ``Add`` with the
    shortcut, ReLU.  Every stage but the first starts at stride 2 with a 1x1 stride-2 conv +
    BN as its shortcut (torchvision's ``downsample``); other shortcuts are the identity.
    Then global average pooling, ``Dense(classes)`` (``logits``) and ``Softmax``.

    With the defaults: 3x3 convs over 32 channels at 32x32 and over 64 at 16x16, 2 blocks.
    Layer names ``stem``, ``s{stage}b{block}_conv1`` / ``_conv2`` / ``_down`` (+ ``_bn``,
    ``_relu``, ``_pad``), ``s{stage}b{block}_add`` / ``_relu``, ``pool``, ``logits``,
    ``softmax``; stages and blocks count from 1.  ``padding``: see the module's docstring."""
    _check_padding(padding)
    keras.utils.set_random_seed(seed)

    def relu(x, label):
        return keras.layers.ReLU(name=f"{label}_relu")(x)

    x = inputs = keras.Input((input_size, input_size, 3), name="rgb")
    x = relu(_bn(_conv(x, widths[0], 3, 1, padding, "stem"), "stem"), "stem")
    channels = widths[0]
    for s, width in enumerate(widths, start=1):
        for b in range(1, blocks + 1):
            label = f"s{s}b{b}"
            stride = 2 if s > 1 and b == 1 else 1
            y = relu(_bn(_conv(x, width, 3, stride, padding, f"{label}_conv1"),
                         f"{label}_conv1"), f"{label}_conv1")
            y = _bn(_conv(y, width, 3, 1, padding, f"{label}_conv2"), f"{label}_conv2")
            shortcut = x
            if stride != 1 or channels != width:
                shortcut = _bn(_conv(x, width, 1, stride, padding, f"{label}_down"),
                               f"{label}_down")
            x = relu(keras.layers.Add(name=f"{label}_add")([y, shortcut]), label)
            channels = width
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(classes, name="logits")(x)
    outputs = keras.layers.Softmax(name="softmax")(x)
    return keras.Model(inputs, outputs, name=name)


def multiply_adds(model) -> int:
    """Multiply-adds an image of the model's kernels (its weights of rank 2 or more: convs,
    depthwise convs, dense layers; batch norm, activations, adds and pooling not counted,
    BN folds into the convs): each output pixel's kernel, whose shape (k_h, k_w,
    C_in / groups, C_out), depthwise (k_h, k_w, C, multiplier) and dense (C_in, C_out)
    counts each multiply-add once."""
    return int(sum(np.prod(layer.output.shape[1:-1], dtype=int) * np.prod(w.shape)
                   for layer in model.layers for w in layer.weights if len(w.shape) >= 2))


# --- brief training on CIFAR-10 ------------------------------------------------------------
def cifar10_test(per_class=50, root=None):
    """``(images, labels)``: the first ``per_class`` test images of each CIFAR-10 class (500
    by default), float32 (N, 32, 32, 3) in [0, 1].  Without CIFAR-10 in the data folder, a
    one-line FileNotFoundError naming what is missing (see
    :func:`workbench.data.datasets.classification_root`)."""
    from workbench.data import datasets

    folder = datasets.classification_root("cifar10", root)
    images, labels, _ = datasets.classification_arrays(folder, "test", 32, limit=per_class)
    return images, labels


def train_briefly(model, steps=400, batch=64, seed=0, learning_rate=3e-3, calibrate=True,
                  limit=None, test_per_class=50, root=None, verbose=0):
    """Train ``model`` (a net of this module: probabilities out, a ``logits`` layer before
    them) on CIFAR-10's training images for ``steps`` steps of ``batch`` (Adam at
    ``learning_rate`` with cosine decay to 1 %, no augmentation; ``limit``: the first
    ``limit`` training images of each class, default all), then (``calibrate``) reset
    its BatchNorm statistics to those of 500 training images in inference mode
    (:func:`workbench.nets.classify.calibrate_batchnorm`: the moving averages of a run this
    short still lag the weights).  Returns ``(model, result)``: ``result`` has ``top1`` (on
    :func:`cifar10_test`, 500 images), ``top1_before_calibration``, ``steps``, ``seconds``
    (the ``fit`` call: tracing and the shuffle buffer's first fill included) and ``loss``
    (the run's mean training loss).  Without CIFAR-10, a one-line
    FileNotFoundError naming what is missing."""
    from workbench.data import datasets
    from workbench.nets import classify

    folder = datasets.classification_root("cifar10", root)
    test_images, test_labels = cifar10_test(test_per_class, root)
    keras.utils.set_random_seed(seed)
    data, _ = datasets.image_folder(folder, "train", 32, batch=batch, limit=limit,
                                    shuffle=seed, repeat=True)
    logits = keras.Model(model.input, model.get_layer("logits").output)
    rate = keras.optimizers.schedules.CosineDecay(learning_rate, steps, alpha=0.01)
    classify.compile_classifier(logits, "adam", rate)
    start = time.perf_counter()
    history = logits.fit(data.take(steps), epochs=1, shuffle=False, verbose=verbose)
    seconds = time.perf_counter() - start

    def top1():
        predicted = model.predict(test_images, batch_size=250, verbose=0).argmax(1)
        return float(np.mean(predicted == test_labels))

    before = top1()
    if calibrate:
        calibration = np.concatenate([x for x, _ in data.take(-(-500 // batch))])[:500]
        classify.calibrate_batchnorm(model, calibration)
    return model, {"top1": top1() if calibrate else before, "top1_before_calibration": before,
                   "steps": steps, "batch": batch, "seconds": round(seconds, 1),
                   "loss": round(float(history.history["loss"][-1]), 4)}
