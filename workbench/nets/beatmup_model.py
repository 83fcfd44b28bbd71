"""Beatmup's model files read as data: a chunk file becomes a Keras model with its weights.

Beatmup is the reference articles' C++ library (GPL-3.0); the workbench runs it only as a
separate program (:mod:`workbench.gl.beatmup`) and reads its files, as here.

A chunk file is a sequence of chunks, each ``uint32 id length, id, uint32 size, data``
(little-endian).  Chunk ``""`` describes the model as YAML: ``ops`` (in execution order, each
with ``_name`` and ``_type``) and ``connections`` (``from``, ``to``, optional ``to_input``: 1
is a conv's residual input, added before its activation; optional ``shuffle: n``: the packs of
4 channels are sent in the order :func:`workbench.nets.layers.shuffle_order` gives for step
n).  Chunk ``labels`` holds the class names, one a line; ``<op>/w`` and ``<op>/b`` the
float32 weights: conv filters in TensorFlow's HWIO order (I the input channels of a group;
index ``o + O (i + I (x + k y))``, though its docs say OIHW), a dense layer's matrix
row-major (outputs x inputs), ``y = A x + b``.

The ops taken: ``image_sampler`` (the input step: :func:`sample`), ``conv2d`` (groups,
stride, valid / same padding, bias, activation ``default`` = ReLU bounded to [0, 1] or
``sigmoid_like``), ``pooling2d`` (max / average; an average over the whole map before the
dense layer is a global average pool), ``dense``, ``softmax``.  Anything else is refused in
one line naming the op.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np
import yaml

from workbench.files import readable_file
from workbench.nets.layers import Act, GroupConv2D, Quantize8, Shuffle

ACTIVATIONS = {"default": "bounded_relu", "sigmoid_like": "sigmoid_like"}


class BeatmupModelError(ValueError):
    """A chunk file that cannot be read as a model; the message names the file and the op."""


@dataclass(frozen=True)
class InputStep:
    """Beatmup's ``image_sampler``: the picture centre-cropped to the output's aspect (when
    ``center_crop``) and resampled to ``width`` x ``height`` (bilinear when ``linear``)."""

    width: int
    height: int
    center_crop: bool = True
    linear: bool = True


def read_chunks(path) -> dict[str, bytes]:
    """The chunks of the file at ``path``, id -> bytes."""
    path = readable_file(path)
    data = path.read_bytes()
    chunks, i = {}, 0
    while i < len(data):
        try:
            (n,) = struct.unpack_from("<I", data, i)
            name = data[i + 4:i + 4 + n].decode()
            (size,) = struct.unpack_from("<I", data, i + 4 + n)
        except (struct.error, UnicodeDecodeError):
            raise BeatmupModelError(f"{path}: not a Beatmup chunk file (bad chunk header at "
                                    f"byte {i})") from None
        start = i + 8 + n
        if start + size > len(data):
            raise BeatmupModelError(f"{path}: truncated (chunk {name!r} needs {size} bytes, "
                                    f"{len(data) - start} are left)")
        chunks[name], i = data[start:start + size], start + size
    if "" not in chunks:
        raise BeatmupModelError(f"{path}: no model description (the chunk named '')")
    return chunks


def write_chunks(path, chunks: dict[str, bytes]):
    """Write ``chunks`` (id -> bytes) as a chunk file at ``path`` (the format above)."""
    with open(path, "wb") as f:
        for name, data in chunks.items():
            key = name.encode()
            f.write(struct.pack("<I", len(key)) + key + struct.pack("<I", len(data)) + data)


def description(chunks, path="model") -> tuple[list[dict], list[dict]]:
    """``(ops, connections)`` of the model description chunk."""
    try:
        spec = yaml.safe_load(chunks[""].decode())
        ops, connections = spec["ops"], spec.get("connections") or []
        if not all(isinstance(op, dict) and "_name" in op and "_type" in op for op in ops):
            raise TypeError("an op without _name or _type")
    except (yaml.YAMLError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise BeatmupModelError(f"{path}: unreadable model description ({e})") from None
    return ops, connections


def labels(path) -> list[str]:
    """The class names of the chunk file at ``path`` (empty when it has none)."""
    text = read_chunks(path).get("labels", b"").decode()
    return [line.strip() for line in text.splitlines() if line.strip()]


def input_step(path) -> InputStep:
    """The model's input step (its ``image_sampler`` op)."""
    ops, _ = description(read_chunks(path), path)
    sampler = next((op for op in ops if op["_type"] == "image_sampler"), None)
    if sampler is None:
        raise BeatmupModelError(f"{path}: no image_sampler op (the net's input)")
    return _input_step(sampler, path)


def _input_step(op, path) -> InputStep:
    where = _where(path, op)
    return InputStep(number(op, "output_width", where), number(op, "output_height", where),
                     bool(op.get("center_crop", True)), bool(op.get("linear_interp", True)))


def _where(path, op) -> str:
    """The file and the op (or connection) a message is about."""
    if "_name" in op:
        return f"{path}: op {op['_name']!r} ({op['_type']})"
    return f"{path}: the connection {op.get('from')!r} -> {op.get('to')!r}"


def number(fields: dict, key, where, default=None, least=1) -> int:
    """The whole-number field ``key`` of ``fields`` (an op's, a connection's; ``default``
    where it has none), at least ``least``; else :class:`BeatmupModelError` after
    ``where`` (:func:`_where`) naming the field."""
    value = fields.get(key, default)
    try:
        n = int(value) if not isinstance(value, (bool, float)) or value == int(value) else None
    except (TypeError, ValueError, OverflowError):
        n = None
    if n is None or n < least:
        raise BeatmupModelError(f"{where}: {key} {value!r}: give a whole number >= {least}"
                                if value is not None else f"{where}: no {key}")
    return n


def sample(image, step: InputStep) -> np.ndarray:
    """``image`` (HxWx3 RGB, any size: uint8, or float in [0, 1], else ValueError) through the
    input step: HxWx3 uint8 of the step's size.  Output pixel ``j`` of ``n`` samples the
    crop at ``a + (b - a) j / (n - 1)``, ``a`` and ``b`` the crop's first and last pixel
    centres (the crop is the centred region of the output's aspect, its margins fractional),
    bilinearly between the 4 nearest pixels (or the nearest one), rounded to 8 bits as a
    texture stores it."""
    image = np.asarray(image)
    if image.dtype.kind == "f":
        low, high = (float(image.min()), float(image.max())) if image.size else (0, 0)
        if not 0 <= low <= high <= 1:
            raise ValueError(f"a float image takes values in [0, 1], not [{low:.4g}, "
                             f"{high:.4g}] (give 0-255 pixels as uint8)")
        image = image * 255.0
    h, w = image.shape[:2]
    if step.center_crop and w * step.height > h * step.width:
        margins = (0.0, 0.5 * (w - h * step.width / step.height))
    elif step.center_crop:
        margins = (0.5 * (h - w * step.height / step.width), 0.0)
    else:
        margins = (0.0, 0.0)
    ys, xs = (np.linspace(m, size - 1 - m, n, dtype=np.float64)
              for m, size, n in zip(margins, (h, w), (step.height, step.width)))
    if not step.linear:
        picked = image[np.floor(ys + 0.5).astype(int)][:, np.floor(xs + 0.5).astype(int)]
        return np.clip(np.round(picked), 0, 255).astype(np.uint8)
    y0, x0 = (np.clip(np.floor(v).astype(int), 0, n - 1) for v, n in ((ys, h), (xs, w)))
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]

    def across(y):  # rows y, interpolated along x (the rows taken before the columns: faster)
        rows = image[y]
        return np.take(rows, x0, axis=1) * (1 - fx) + np.take(rows, x1, axis=1) * fx

    out = np.empty((step.height, step.width, image.shape[2]), np.uint8)
    for top in range(0, step.height, 32):  # 32 rows at a time: its float64 terms stay in cache
        r = slice(top, top + 32)
        out[r] = np.clip(np.round(across(y0[r]) * (1 - fy[r]) + across(y1[r]) * fy[r]), 0, 255)
    return out


def load(path, quantize=False) -> keras.Model:
    """The chunk file at ``path`` as a Keras model: input RGB in [0, 1] of the input step's
    size (the sampled picture, :func:`sample`), output the softmax probabilities; layer names
    are the ops' names.  ``model.beatmup_input`` is the :class:`InputStep`,
    ``model.class_names`` the labels.  ``quantize``: every activation rounded to 8 bits as
    its texture stores it (:class:`~workbench.nets.layers.Quantize8`)."""
    path = Path(path)
    chunks = read_chunks(path)
    ops, connections = description(chunks, path)
    builder = _Builder(path, chunks, connections, quantize)
    for op in ops:
        builder.add(op)
    if builder.inputs is None or builder.last is None:
        raise BeatmupModelError(f"{path}: the model has no image_sampler input or no ops")
    model = keras.Model(builder.inputs, builder.tensors[builder.last], name=path.stem)
    model.beatmup_input = builder.step
    model.class_names = labels(path)
    return model


class _Builder:
    """Keras tensors made op by op, in the description's order."""

    def __init__(self, path, chunks, connections, quantize=False):
        self.path, self.chunks, self.quantize = path, chunks, quantize
        self.incoming: dict[str, dict[int, dict]] = {}
        for c in connections:
            if not (isinstance(c, dict) and "from" in c and "to" in c):
                raise BeatmupModelError(f"{path}: a connection without from and to ({c!r})")
            self.incoming.setdefault(c["to"], {})[number(c, "to_input", _where(path, c), 0,
                                                         0)] = c
        self.tensors, self.inputs, self.step, self.last = {}, None, None, None

    def fail(self, op, why):
        raise BeatmupModelError(f"{_where(self.path, op)}: {why}")

    def number(self, op, key, default=None, least=1) -> int:
        return number(op, key, _where(self.path, op), default, least)

    def source(self, op, index=0):
        """The tensor connected to input ``index`` of ``op`` (shuffled as the connection
        says), or None."""
        c = self.incoming.get(op["_name"], {}).get(index)
        if c is None:
            return None
        if c["from"] not in self.tensors:
            self.fail(op, f"its input {c['from']!r} is not an earlier op")
        x, step = self.tensors[c["from"]], number(c, "shuffle", _where(self.path, c), 0, 0)
        if step:
            x = Shuffle(step, name=f"{op['_name']}_shuffle{index}")(x)
        return x

    def weights(self, op, suffix, count):
        raw = self.chunks.get(f"{op['_name']}/{suffix}")
        if raw is None or len(raw) != 4 * count:
            self.fail(op, f"chunk '{op['_name']}/{suffix}' should hold {count} float32 values, "
                          f"has {'none' if raw is None else len(raw) // 4}")
        return np.frombuffer(raw, "<f4").astype(np.float32)

    def add(self, op):
        kind = op["_type"]
        handler = getattr(self, f"_{kind}", None)
        if handler is None:
            self.fail(op, "not taken (the importer takes image_sampler, conv2d, pooling2d, "
                          "dense and softmax)")
        if kind != "image_sampler":
            x = self.source(op)
            if x is None:
                self.fail(op, "nothing is connected to its input")
        try:
            self.tensors[op["_name"]] = handler(op, x) if kind != "image_sampler" else handler(op)
        except BeatmupModelError:
            raise
        except ValueError as err:  # Keras' refusal of the shapes the file gives
            self.fail(op, (str(err).strip().splitlines() or [type(err).__name__])[0])
        self.last = op["_name"]

    def _image_sampler(self, op):
        if self.inputs is not None:
            self.fail(op, "a second input")
        self.step = _input_step(op, self.path)
        self.inputs = keras.Input((self.step.height, self.step.width, 3), name=op["_name"])
        return self.inputs

    def _conv2d(self, op, x):
        k, cin, cout, groups, stride = (self.number(op, key, default) for key, default in (
            ("kernel_size", None), ("input_channels", None), ("output_channels", None),
            ("groups", 1), ("stride", 1)))
        bias = bool(op.get("use_bias", True))
        if cin % groups or cout % groups:
            self.fail(op, f"groups {groups} must divide input_channels {cin} and "
                          f"output_channels {cout}")
        activation = ACTIVATIONS.get(op.get("activation", "default"))
        if activation is None:
            self.fail(op, f"activation {op['activation']!r} not taken (only "
                          f"{', '.join(ACTIVATIONS)})")
        if int(x.shape[-1]) != cin:
            self.fail(op, f"input_channels {cin}, but its input has {x.shape[-1]}")
        layer = GroupConv2D(cout, k, groups=groups, strides=stride,
                            padding=str(op.get("padding", "valid")), use_bias=bias,
                            name=op["_name"])
        y = layer(x)
        kernel = self.weights(op, "w", cout * cin // groups * k * k).reshape(k, k, -1, cout)
        layer.set_weights([kernel, self.weights(op, "b", cout)] if bias else [kernel])
        residual = self.source(op, 1)
        if residual is not None and residual.shape[1:] != y.shape[1:]:
            source = self.incoming[op["_name"]][1]["from"]
            self.fail(op, f"its residual input {source!r} is {'x'.join(map(str, residual.shape[1:]))}, "
                          f"its output {'x'.join(map(str, y.shape[1:]))}")
        if residual is not None:
            y = keras.layers.Add(name=f"{op['_name']}_add")([y, residual])
        y = Act(activation, name=f"{op['_name']}_act")(y)
        return Quantize8(name=f"{op['_name']}_q8")(y) if self.quantize else y

    def _pooling2d(self, op, x):
        size, stride = self.number(op, "size"), self.number(op, "stride", 1)
        padding, kind = str(op.get("padding", "valid")), op.get("operator", "max")
        if kind not in ("max", "average"):
            self.fail(op, f"operator {kind!r} (max or average)")
        whole = (x.shape[1], x.shape[2]) == (size, size) and padding == "valid"
        if kind == "average" and whole:
            return keras.layers.GlobalAveragePooling2D(name=op["_name"])(x)
        pool = keras.layers.MaxPooling2D if kind == "max" else keras.layers.AveragePooling2D
        return pool(size, stride, padding, name=op["_name"])(x)

    def _dense(self, op, x):
        if x.ndim != 2:
            self.fail(op, "takes a pooled vector (an average pooling over the whole map "
                          "before it)")
        n, bias = self.number(op, "output_dims"), bool(op.get("use_bias", True))
        layer = keras.layers.Dense(n, use_bias=bias, name=op["_name"])
        y = layer(x)
        matrix = self.weights(op, "w", n * int(x.shape[-1])).reshape(n, -1).T
        layer.set_weights([matrix, self.weights(op, "b", n)] if bias else [matrix])
        return y

    def _softmax(self, op, x):
        return keras.layers.Softmax(name=op["_name"])(x)
