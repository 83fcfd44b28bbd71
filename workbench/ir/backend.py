"""What a back end's compiled net offers, whichever back end made it (:class:`Net`): ES 2.0
(:class:`workbench.es2.Net`) and ES 3.1 (:class:`workbench.es31.Net`) alike, so that a study
or a test takes either.

Each back end's package also has ``compile(model, target=None, **options) -> Net`` (a Keras
or ONNX model, its own ``Target``: ``es2.Target``, ``es31.Target``; default the back end's
minimum; its options as keywords, an unknown one refused as Python refuses a function's:
TypeError; ES 2.0's also as one ``es2.Options``) and ``load(directory) -> Net`` (a folder
:meth:`Net.save` wrote).  Images are HxWxC
float in [0, 1] (HxWx3 RGB for luma nets); an output is an image or the logits, float32.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from workbench.ir.cost import Cost
from workbench.ir.graph import Graph


@runtime_checkable
class Net(Protocol):
    """A compiled net.  ``graph``: its IR graph as compiled; ``target``: what it was compiled
    for; ``timings``: seconds per program of the last :meth:`run` (empty after one with
    ``timed=False``).  Both back ends' nets also have ``compile_seconds``, the GL compile of
    their programs, left out of the protocol's members: ``isinstance`` on Python 3.11 reads
    every member, and reading it compiles an ES 2.0 net's programs."""

    graph: Graph
    target: object
    timings: dict

    def run(self, image, keep=False, timed=True):
        """On the GPU: the output, or with ``keep`` every tensor as stored."""

    def emulate(self, image, keep=False):
        """The back end's numpy prediction of :meth:`run`; NotImplementedError where it has
        none."""

    def save(self, directory, force=False):
        """Write :meth:`files` into the folder ``directory`` at once."""

    def files(self) -> dict:
        """The saved net, ``{file name: content}``, with a ``manifest.json``."""

    def cost(self, hw) -> dict[str, Cost]:
        """The cost of every op for an input of ``hw = (height, width)``."""
