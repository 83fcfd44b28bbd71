"""The intermediate representation: a list of ops with numpy weights (:mod:`.graph`), lowered
from Keras (:mod:`.lower`); what an op costs is counted by each back end (:mod:`.cost`)."""
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
                                texture_bytes,
                                uniform_values,
)
from workbench.ir.lower import LoweringError, from_keras

__all__ = ["Cost", "LUMA", "PACK", "Conv", "Dense", "DepthToSpace", "Graph", "Input", "packs",
           "texture_bytes", "conv_out_hw", "conv_pads", "uniform_values",
           "LoweringError", "from_keras"]
