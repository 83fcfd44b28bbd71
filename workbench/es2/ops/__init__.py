"""One module per IR op type, each holding the op's whole ES 2.0 record (its programs,
emulator, limits, cost, textures and output decoding; :mod:`workbench.es2.record`), which it
registers when imported.  Adding an op to the ES 2.0 back end is adding a module here."""
from workbench.es2.ops import conv, dense, depth_to_space

__all__ = ["conv", "dense", "depth_to_space"]
