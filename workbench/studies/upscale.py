"""``python -m workbench upscale``: one image file x2 with the shaders, tiled where it exceeds
the GPU's texture size; no TensorFlow for an ONNX model or a saved shader folder."""
from __future__ import annotations

from workbench import es2
from workbench.data import images
from workbench.es2 import tiling
from workbench.es2.record import record


def upscale_file(source, output, model_path, target=None, quality=95, **options):
    """Upscale one image file x2 with the shaders; greyscale/RGBA/16-bit load as RGB.  The
    output's format follows its extension (PNG, or JPEG at ``quality``); an output path that
    is the input, or that cannot be saved, is refused before anything runs.  ``target``: what
    the net is compiled for (as :func:`workbench.es2.load_net` takes it: default plain ES 2.0,
    or a saved folder's own), with :func:`~workbench.es2.compile`'s ``options`` (its reference
    check printed).  An image whose textures would exceed this GPU's
    GL_MAX_TEXTURE_SIZE (or the net's ``max_texture_size`` if smaller) runs in overlapping
    tiles, with the same bytes
    (:mod:`workbench.es2.tiling`).  Returns ``(output shape, GPU seconds, tiles)``."""
    images.check_save_path(output, quality, inputs=[source])  # check_output_path and more
    net, _ = es2.load_net(model_path, target, **options)
    if net.reference is not None:
        print(net.reference.line())
    out = net.graph.op(net.graph.output)
    if not net.graph.rgb_output:
        raise ValueError(f"{model_path}: net {net.graph.name!r} is not an RGB SR net (its last "
                         f"layer is a {record(out).name}); upscale takes one whose last layer "
                         "puts the sub-pixels and the chroma back together, as "
                         "models/sr_x2_reference.keras")
    image = images.load_image(source)
    max_size = net.runner.worker.info["GL_MAX_TEXTURE_SIZE"]
    max_size = min(max_size, net.target.limits.max_texture_size or max_size)
    out, tiles, seconds = tiling.run_tiled(net, image, max_size)
    images.save_image(output, out, quality, inputs=[source])
    return out.shape, seconds, tiles
