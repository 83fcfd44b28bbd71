"""Lowering an ONNX model, as PyTorch's exporter writes it, to the IR (:class:`Graph`).

Layout: ONNX tensors are NCHW, the IR's HWC; weights are transposed on the way (a Conv's
``W`` ``(cout, cin / group, kh, kw)`` becomes the IR's ``(kh, kw, cin / group, cout)``, a
Gemm's ``B`` the IR's ``(cin, cout)``).  Constant subgraphs (initializers, Constant, Identity,
a Shape of a tensor of known size and what is computed from it) are evaluated by ONNX's
reference evaluator.  BatchNormalization folds into the Conv before it, an activation into the
Conv or Add before it (HardSigmoid's ``alpha x + beta`` into the conv's weights), a CRD
depth-to-space (``nn.PixelShuffle``: one DepthToSpace node, or its Reshape-Transpose-Reshape)
into the order of the conv's output channels.  ``Clip(0, m)`` (ReLU6) and Mul / Div / Sub /
Add of constants on the input are folded into the weights (:class:`~workbench.ir.lowering.
Scales`).  Relu, LeakyRelu and PRelu are unbounded (ES 2.0 stores them with a calibrated
scale, :mod:`workbench.es2.calibrate`); :attr:`Graph.origin` names the ONNX tensor each op
stands for, so that a check can run ONNX Runtime beside the emulator and name a layer whose values
leave [0, 1] (:func:`workbench.es2.onnx_check.ranges`).

The modules: :mod:`.reader` (the model: opset, initialisers, input, constant folding),
:mod:`.patterns` (the multi-node patterns, one frozen dataclass each, found before lowering),
:mod:`.walk` (the walk over the nodes and its state), :mod:`.fused` (a handler per pattern),
:mod:`.nodes` (a handler per node type, :data:`~.nodes.NODES`); anything else is refused
naming the node, its op type and the supported list.
"""
from __future__ import annotations

from workbench.ir.graph import Graph
from workbench.ir.onnx.nodes import SUPPORTED
from workbench.ir.onnx.patterns import ANCHOR
from workbench.ir.onnx.reader import ANCHOR_STORAGE, OPSET_MIN, Model, is_onnx, opset_max
from workbench.ir.onnx.resize import upsample_reference
from workbench.ir.onnx.walk import Lowering

__all__ = ["ANCHOR", "ANCHOR_STORAGE", "OPSET_MIN", "SUPPORTED", "from_onnx", "is_onnx",
           "opset_max", "upsample_reference"]


def from_onnx(model, luma_input=None, input_size=None) -> Graph:
    """Lower an ONNX model (an ``onnx.ModelProto``, an :class:`~workbench.nets.onnx_model.
    OnnxModel` or a path) to a :class:`Graph`.  ``luma_input`` as
    :func:`workbench.ir.from_keras`; ``input_size`` ``(height, width)`` fixes a dynamic input
    size (a net with a Gemm, or a Shape node, needs one)."""
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        from workbench.nets import onnx_model

        model = onnx_model.load(model)
    if not is_onnx(model):
        raise TypeError(f"model: an ONNX ModelProto, an OnnxModel or an .onnx file's path, not "
                        f"{type(model).__name__}")
    proto = getattr(model, "proto", model)
    input_size = input_size or getattr(model, "input_size", None)
    lowering = Lowering(Model(proto, luma_input, input_size))
    return lowering.graph(getattr(model, "name", None))
