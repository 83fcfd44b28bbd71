"""TensorFlow.js as a peer of the WebGL page: the IR's ops and weights for ``peers.js``, and
the pinned TF.js files from the npm cache; :func:`peers_js`, ``peers.js`` with the registered
activations' TF.js forms.

:func:`net_files` writes what ``peers.js`` (beside ``workbench.js``) builds the same net from
with tf ops: ``tfjs.json`` (format ``workbench-tfjs/1``: the input, each op's fields, the
output) and ``tfjs.bin`` (every weight array as float32, little-endian, C order; an op names
``[offset, shape]`` in float32 elements).  Ops as :mod:`workbench.ir.graph`, one entry per
IR op type in :data:`ENTRIES`, each op's ``kind`` its type's name in snake case:

* ``conv``: kernel ``(k, k, cin // groups, cout)`` as ``tf.conv2d``, bias, stride, padding
  (TF's 'same' / 'valid'), groups, activation (a name of :mod:`workbench.nets.activations`;
  ``"prelu"`` with ``slope``, one per output channel, ``"bounded_prelu"`` with ``zero`` too),
  ``residual`` (a tensor added before the activation), ``luma`` (the input is RGB; the conv
  sees its full-range luma, :data:`workbench.ir.LUMA`), ``gather`` (the input channels in
  the order the conv reads them: a channel shuffle's binding order, else ``null``);
* ``depth_to_space``: ``block``; with ``chroma_from`` the SR demux (the luma recombined with
  that RGB tensor's bilinear upscale, half-pixel centres, edges clamped:
  ``rgb + (y - luma(rgb))``, clipped to [0, 1] as an RGBA8 target clips); ``anchor``
  (``null``, ``"nearest"`` or ``"bilinear"``) and ``anchor_scale``: ``y`` is then
  ``clip(a + anchor_scale * (y - 0.5), 0, 1)``, ``a`` the input's luma upsampled so);
* ``dense``: weight ``(cin, cout)``, bias, ``pool`` (a global average first); float logits.

TF.js itself comes from the npm registry at :data:`TFJS_VERSION` (``tools/tfjs.sh``, run by
``make setup``) into :func:`cache_dir`; :func:`unavailable` says in one line why it cannot
be used here.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

from workbench import ir
from workbench.es2.net import output_spec
from workbench.files import project_root
from workbench.ir.registry import Table
from workbench.nets import activations

TFJS_VERSION = "4.22.0"  # keep in step with tools/tfjs.sh
CACHE_ENV = "WORKBENCH_TFJS"
# files served to the page from the cache, as  cache/node_modules/<package>/dist/<file>
SCRIPTS = {"@tensorflow/tfjs": ["tf.min.js"],
           "@tensorflow/tfjs-backend-wasm": ["tf-backend-wasm.min.js", "tfjs-backend-wasm.wasm",
                                             "tfjs-backend-wasm-simd.wasm",
                                             "tfjs-backend-wasm-threaded-simd.wasm"]}


def cache_dir() -> Path:
    """Where ``tools/tfjs.sh`` installs TF.js: ``$WORKBENCH_TFJS``, else ``.cache/tfjs`` in the
    checkout."""
    return Path(os.environ.get(CACHE_ENV) or project_root() / ".cache" / "tfjs")


def installed_version(package="@tensorflow/tfjs", cache=None) -> str | None:
    """The version of the npm ``package`` installed in ``cache`` (default :func:`cache_dir`),
    or ``None``."""
    path = Path(cache or cache_dir()) / "node_modules" / package / "package.json"
    try:
        return json.loads(path.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def unavailable() -> str | None:
    """``None`` when the pinned TF.js is in the cache, else why not, in one line."""
    wrong = [f"{p} {installed_version(p) or 'missing'}" for p in SCRIPTS
             if installed_version(p) != TFJS_VERSION]
    if not wrong:
        return None
    how = ("run `make setup` (tools/tfjs.sh: npm install into the cache)" if shutil.which("npm")
           else "npm is not installed (apt-get install npm), then `make setup`")
    return (f"TensorFlow.js {TFJS_VERSION} is not in {cache_dir()} ({', '.join(wrong)}): {how}")


def script_files() -> dict[str, bytes]:
    """The TF.js files the page loads, by file name (from the cache; see :func:`unavailable`)."""
    reason = unavailable()
    if reason:
        raise FileNotFoundError(reason)
    base = cache_dir() / "node_modules"
    return {name: (base / package / "dist" / name).read_bytes()
            for package, names in SCRIPTS.items() for name in names}


PEERS_JS = Path(__file__).with_name("peers.js")
ACTIVATIONS_MARK = "  // ACTIVATIONS: the registered ones' TF.js forms (workbench/web/tfjs.py)\n"


def peers_js() -> bytes:
    """``peers.js`` as the page loads it: its table of activations (``PEER_ACTIVATIONS``) filled
    in from the registry, one line each of those with a TF.js form (``Activation.tfjs``);
    ``leaky_relu:<slope>``, ``prelu`` and ``bounded_prelu`` it forms from an op's entry."""
    table = "".join(f"  {name}: (tf, x) => {activations.get(name).tfjs},\n"
                    for name in activations.names("tfjs"))
    return PEERS_JS.read_text().replace(ACTIVATIONS_MARK, table).encode()


def _padding(padding):
    """TF.js' ``pad``: ``"same"``, ``"valid"``, or explicit ``[[0, 0], [top, bottom], [left,
    right], [0, 0]]`` (NHWC)."""
    if isinstance(padding, str):
        return padding
    top, left, bottom, right = padding
    return [[0, 0], [top, bottom], [left, right], [0, 0]]


# The TF.js peer's op table: IR op type -> entry(op, input channels, array) -> the op's fields
# for peers.js; its ``kind`` is the IR type's name in snake case (:func:`_kind`).
ENTRIES = Table("the TF.js peer")


def _kind(op_type: type) -> str:
    """``Conv`` -> ``"conv"``, ``DepthToSpace`` -> ``"depth_to_space"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op_type.__name__).lower()


@ENTRIES.add(ir.Conv)
def _conv(op: ir.Conv, channels, array) -> dict:
    """A conv's TF.js entry; ``channels`` of its input, ``gather`` the channel order it reads
    (a shuffle's binding order, or the first ``cin`` channels)."""
    op.zero_padded("the TF.js peer")
    op.residual_as_stored("the TF.js peer")
    gather = None
    if op.input_order is not None:
        gather = [c for p in op.input_order
                  for c in range(ir.PACK * p, min(ir.PACK * p + ir.PACK, channels))]
    elif channels != op.cin and not op.luma_input:
        gather = list(range(op.cin))
    return dict(kernel=array(op.kernel), bias=array(op.bias), stride=op.stride,
                padding=_padding(op.padding), groups=op.groups, activation=op.activation,
                residual=op.residual, luma=op.luma_input, gather=gather and gather[:op.cin],
                **_prelu(op, array))


def _prelu(op, array) -> dict:
    """A PRelu's ``slope`` and, stored calibrated (``"bounded_prelu"``), ``zero``, one per
    output channel, or ``None``."""
    return {key: None if getattr(op, f, None) is None else array(getattr(op, f))
            for key, f in (("slope", "activation_slope"), ("zero", "activation_zero"))}


@ENTRIES.add(ir.DepthToSpace)
def _depth_to_space(op, channels, array) -> dict:
    return dict(block=op.block, chroma_from=op.chroma_from, anchor=op.anchor,
                anchor_scale=op.anchor_scale)


@ENTRIES.add(ir.Dense)
def _dense(op, channels, array) -> dict:
    return dict(weight=array(op.weight), bias=array(op.bias), pool=op.pool, softmax=op.softmax)


@ENTRIES.add(ir.Pool)
def _pool(op, channels, array) -> dict:
    return dict(pool=op.kind, size=op.size, stride=op.stride, padding=_padding(op.padding))


@ENTRIES.add(ir.Upsample)
def _upsample(op, channels, array) -> dict:
    return dict(scale=op.scale, interpolation=op.interpolation)


@ENTRIES.add(ir.Add)
def _add(op, channels, array) -> dict:
    return dict(other=op.other, activation=op.activation, **_prelu(op, array))


@ENTRIES.add(ir.Concat)
def _concat(op, channels, array) -> dict:
    return dict(others=list(op.others))


def net_files(graph: ir.Graph) -> dict:
    """``{"tfjs.json": spec, "tfjs.bin": bytes}`` for ``graph`` (see the module docstring)."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    blob = []
    size = 0

    def array(a):
        nonlocal size
        a = np.ascontiguousarray(a, "<f4")
        blob.append(a.tobytes())
        size += a.size
        return [size - a.size, list(a.shape)]

    ops = []
    for op in graph.ops:
        entry = ENTRIES.of(op)  # a back end's form of an IR op (es2's Gemv) takes its entry
        ops.append({"name": op.name, "input": op.input, "kind": _kind(ENTRIES.key(type(op))),
                    **entry(op, shapes[op.input][2], array)})
    kind = output_spec(graph)["kind"]
    spec = {"format": "workbench-tfjs/1", "name": graph.name,
            "input": {"name": graph.input.name, "channels": graph.input.channels,
                      "rgb": graph.input.rgb},
            "luma": [float(v) for v in ir.LUMA], "ops": ops, "output": graph.output,
            "kind": kind}
    return {"tfjs.json": spec, "tfjs.bin": b"".join(blob)}
