"""OpenGL ES 3.1 back end: ``#version 310 es`` compute shaders from the same IR.

``net = workbench.es31.compile(model, target)`` lowers a Keras or ONNX model to the IR
(:mod:`workbench.ir`: BatchNorm folded, shuffles as binding orders) and generates one compute
program per op for ``target`` (:class:`Target`: storage, local size, output packs per
invocation); ``net.run(image)`` runs them on the GPU (moderngl, headless EGL, in the child
process of :mod:`workbench.gl.compute`), ``net.cost(hw)`` counts what they do,
``net.save(dir)`` writes the shaders and a JSON manifest, ``workbench.es31.load(dir)`` reads
them back; ``net.emulate`` is not offered (no emulator of float storage).  The same interface
as an ES 2.0 net: :class:`workbench.ir.backend.Net`.

Storage: every tensor is one 2D array image, RGBA32F (``Target(storage="rgba32f")``) or
RGBA16F, layer ``p`` holding channels ``4p .. 4p+3`` (the ES 2.0 back end's packs, as layers
of one image instead of separate textures).  Weights live in one shader storage buffer per op:
``vec4 bias[out packs]`` followed by ``mat4 w[]`` (column ``i`` of a ``mat4`` = the weights
of input component ``i``, as in the ES 2.0 shaders).  Nothing crosses to the CPU between ops.

Convolution (:mod:`workbench.es31.ops.conv`): local size 8x8 (``local_size``); each invocation
computes one output pixel for ``B`` output packs of one group (``max_outputs`` caps ``B``), so
every input value it reads serves ``4B`` output channels; a work group loads the input tile its
8x8 outputs need (``(8s + k - s)^2`` texels per input pack) into shared memory once, and every
invocation reads its ``k x k`` window from there (``tile=False``: straight from the image).
Depth-to-space runs per input pixel (the SR demux: the ``block^2`` sub-pixels of one
low-resolution pixel and their bilinear chroma from its 3x3 neighbourhood).  Global average
pooling + Dense: a reduction per input pack in a work group's shared memory, then one work
group per output pack, in float (the IR's 16-bit fixed point is an ES 2.0 storage matter).

Cost convention (:meth:`Net.cost`): ``texel_fetches`` counts ``imageLoad`` calls executed,
one RGBA texel each, the same unit as the ES 2.0 back end's ``texture2D`` fetches, so the two
compare; reads of shared memory and of the weight buffers are not counted (the ES 2.0 convs
keep their weights in shader constants, which are not counted either).  Loads outside the
input (zero padding) are skipped, not made.  ``texture_bytes`` is the op's output image.
"""
from workbench.es31 import ops  # noqa: F401 (registers every op's rules)
from workbench.es31.kernels import STORAGES, Kernel, Options, Target
from workbench.es31.net import (Net, compile, from_graph, generate, image_specs, load,
                                output_values)
from workbench.es31.record import OPS

__all__ = ["OPS", "STORAGES", "Kernel", "Options", "Target", "Net", "compile", "from_graph",
           "generate", "image_specs", "load", "output_values"]
