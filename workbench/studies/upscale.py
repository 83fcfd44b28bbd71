"""``python -m workbench upscale``: image files upscaled with the shaders (one start-up for
them all), tiled where one exceeds the GPU's texture size, their PSNR against ground truths
given; no TensorFlow for an ONNX model or a saved shader folder."""
from __future__ import annotations

import glob
from pathlib import Path

from workbench import es2
from workbench.data import datasets, images, metrics
from workbench.es2 import tiling
from workbench.es2.record import record


def upscale_files(sources, output, model_path, target=None, quality=95, reference=None,
                  done=None, **options):
    """Upscale image files with the shaders, the net loaded and its programs compiled once;
    greyscale/RGBA/16-bit load as RGB.  ``sources``: files, folders (their images) and globs;
    ``output``: the file to write for one image (PNG, or JPEG at ``quality``, by its
    extension), else (or where it ends in ``/``) a folder (``<stem>.png`` each); a path that
    is an input, or that cannot be saved, is refused before anything runs.  ``target``: what
    the net is compiled for (as :func:`workbench.es2.load_net` takes it: default plain ES 2.0,
    or a saved folder's own),
    with :func:`~workbench.es2.compile`'s ``options`` (its reference check printed).  An image
    whose textures would exceed this GPU's GL_MAX_TEXTURE_SIZE (or the net's
    ``max_texture_size`` if smaller), or larger than a net of one size takes, runs in
    overlapping tiles (:mod:`workbench.es2.tiling`).  ``reference``: the ground-truth image,
    or a folder of them by the inputs' stems: each output's PSNR on studio-range luma (Y601,
    the SR papers' convention, ``scale`` pixels of border cropped).  Returns per image
    ``(output shape, GPU seconds, tiles, PSNR or None)``; ``done``, where given, is called with
    each as its image is written (the first: the first run, the driver's first draws)."""
    files = _expanded(sources)
    many = len(files) > 1 or str(output).endswith("/")  # (one image into a folder: "out/")
    outputs = [Path(output) / f"{Path(f).stem}.png" for f in files] if many else [Path(output)]
    for out in outputs:
        images.check_save_path(out, quality, inputs=files)  # check_output_path and more
    truths = [_reference_of(reference, f, many) if reference else None for f in files]
    net, _ = es2.load_net(model_path, target, **options)
    print(net.deployed_lines())
    last = net.graph.op(net.graph.output)
    if not net.graph.rgb_output:
        raise ValueError(f"{model_path}: net {net.graph.name!r} is not an RGB SR net (its last "
                         f"layer is a {record(last).name}); upscale takes one whose last layer "
                         "puts the sub-pixels and the chroma back together, as "
                         "models/sr_x2_reference.keras")
    max_size = net.runner.worker.info["GL_MAX_TEXTURE_SIZE"]
    max_size = min(max_size, net.target.limits.max_texture_size or max_size)
    print(f"{len(net.passes)} programs compiled and linked in {net.compile_seconds * 1000:.0f} "
          "ms (first run: compile, link and a warm-up draw each)")
    results = []
    for source, out_path, truth in zip(files, outputs, truths):
        image = images.load_image(source)
        out, tiles, seconds = tiling.run_tiled(net, image, max_size)
        images.save_image(out_path, out, quality, inputs=files)
        db = _psnr(truth, out, out.shape[0] // image.shape[0]) if truth else None
        results.append((out.shape, seconds, tiles, db))
        if done:
            done(results[-1])
    return results


def _expanded(sources) -> list[Path]:
    """The image files ``sources`` name: files as given, a folder's images, a glob's matches
    (:func:`workbench.data.datasets.image_files`); none, or a file that is not there, is one
    line naming the source."""
    files = []
    for source in map(str, sources):
        found = datasets.image_files(source) or ([] if glob.has_magic(source) or
                                                 Path(source).is_dir() else [Path(source)])
        if found == [Path(source)] and not found[0].is_file():  # (before the net loads)
            raise FileNotFoundError(f"{source}: no such image file")
        if not found:
            raise ValueError(f"{source}: no images ({', '.join(datasets.IMAGE_SUFFIXES)})")
        files += found
    return files


def _psnr(truth, out, scale) -> float:
    """PSNR of ``out`` against the ground truth file ``truth`` (cut to a multiple of
    ``scale``), studio-range luma, ``scale`` pixels of border cropped."""
    hr = images.modcrop(images.load_image(truth), scale)
    if hr.shape != out.shape:
        raise ValueError(f"--reference {truth}: {hr.shape[1]}x{hr.shape[0]} (cut to a multiple "
                         f"of {scale}), the output {out.shape[1]}x{out.shape[0]}")
    return metrics.psnr(hr, out, scale, "studio")


def _reference_of(reference, source, many) -> Path:
    """The ground truth of ``source``: ``reference`` itself for one image, else the image of
    ``source``'s stem in the folder ``reference``."""
    reference = Path(reference)
    if not reference.is_dir():
        if many:
            raise ValueError(f"--reference {reference}: several images need a folder of "
                             "ground truths (by the inputs' names)")
        return reference
    found = [p for p in reference.iterdir() if p.stem == Path(source).stem]
    if not found:
        raise ValueError(f"--reference {reference}: no image named {Path(source).stem}.* "
                         f"for {source}")
    return found[0]
