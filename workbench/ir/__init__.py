"""The intermediate representation: a list of ops with numpy weights (:mod:`.graph`), lowered
from Keras (:mod:`.lower`); the record of what an op costs (:mod:`.cost`), which each back end
counts for its own programs."""
from workbench.ir.cost import Cost
from workbench.ir.graph import (
                                LUMA,
                                PACK,
                                Conv,
                                Dense,
                                DepthToSpace,
                                Graph,
                                Input,
                                conv_out_hw,
                                conv_pads,
                                packs,
                                uniform_values,
)
from workbench.ir.lower import LoweringError, from_keras

# The op types by name, as a saved net's manifest names them.
OP_TYPES = {t.__name__: t for t in (Conv, DepthToSpace, Dense)}

__all__ = ["Cost", "LUMA", "PACK", "Conv", "Dense", "DepthToSpace", "Graph", "Input", "packs",
           "conv_out_hw", "conv_pads", "uniform_values", "LoweringError", "from_keras",
           "OP_TYPES"]
