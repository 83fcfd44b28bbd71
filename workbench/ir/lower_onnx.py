"""The ONNX front end is :mod:`workbench.ir.onnx`; this name stays for
:mod:`workbench.ir.to_onnx`'s import of the anchor's metadata key."""
from workbench.ir.onnx.reader import ANCHOR_STORAGE

__all__ = ["ANCHOR_STORAGE"]
