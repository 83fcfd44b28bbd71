"""The intermediate representation: a graph (:mod:`.graph`) of ops with numpy weights
(:mod:`.ops`), lowered from Keras (:mod:`.lower`) or ONNX (:mod:`.onnx`), either by
:func:`from_model`; the record of what an op costs (:mod:`.cost`), which each back end
counts for its own programs."""
from workbench.ir.cost import Cost
from workbench.ir.graph import (LUMA, PACK, Graph, Input, conv_out_hw, conv_pads, explicit_pads,
                                packs, uniform_values)
from workbench.ir.ops import (OP_TYPES, Add, Concat, Conv, Dense, DepthToSpace, Pool, Upsample,
                              softmax)
from workbench.ir.front import from_beatmup, from_keras, from_model
from workbench.ir.onnx import from_onnx, is_onnx
from workbench.ir.lowering import LoweringError

__all__ = ["Cost", "LUMA", "PACK", "OP_TYPES", "Add", "Concat", "Conv", "Dense", "DepthToSpace",
           "Graph", "Input", "Pool", "Upsample", "packs", "softmax", "conv_out_hw", "conv_pads",
           "uniform_values", "LoweringError", "from_keras", "from_onnx", "from_model", "from_beatmup", "is_onnx",
           "explicit_pads"]
