"""How an ES 2.0 net is compiled: :class:`Options`, what :func:`workbench.es2.compile` takes
beside the model and the target (as one value, or its fields as keywords for short)."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from workbench.es2 import drivers


@dataclass(frozen=True)
class Options:
    """The options of :func:`workbench.es2.compile`, checked when made (a bad value: one
    ValueError naming the option).

    ``luma_input``: as :func:`workbench.ir.from_model`.  ``dense``: number format of a final
    Dense layer, ``"fixed16"`` or ``"float"`` (see :class:`workbench.es2.ops.dense.Gemv`).
    ``mediump_warn_db``: warn (:class:`workbench.es2.mediump.MediumpWarning`) when on a
    float16-mediump GPU an op's output is predicted below this PSNR against highp.
    ``check_driver``: compile every program with the device's own compiler (its Mesa driver
    on a drm-shim, :mod:`workbench.es2.drivers`; ``True``: the profile's ``driver``, or a
    driver's name, ``"vc4"``) and refuse, naming program, driver and message, what it
    refuses; ``fit``: instead split the refused layers' programs until it takes them
    (``net.changes`` says what changed);
    ``tune``: fit, then keep the form of each layer's programs that the driver runs fastest
    by its own numbers (:func:`workbench.es2.drivers.tune`; ``True``: its estimated cycles
    where it gives them, vc4, else its instructions; or the count's name,
    :data:`workbench.es2.drivers.COUNTS`: ``"two threads"`` for a vc4 program's instructions
    or its estimated cycles over its two threads, whichever is longer).  ``shared``: the
    weights of each layer whose programs can hold them as uniform arrays set at each draw, so
    that one program serves every layer of its shape (fewer programs to compile; the same
    bytes); or a pixel count (a net of a fixed input size): only in the layers whose output
    has at most that many pixels, the larger layers' weights literals, a program a pass,
    their bias a uniform (:func:`workbench.es2.net.shared_weights`: on llvmpipe a uniform
    costs ~5x a literal at every fragment; the same bytes as True).
    ``calibration``: the images on which the ranges of unbounded tensors (a ReLU's, a linear
    add's) are measured, which are then stored with a scale (:mod:`workbench.es2.calibrate`):
    HxWxC arrays in [0, 1], or a source as :func:`workbench.data.calibration.images` reads it
    (``"cifar10:100"``, a folder, a glob; a fifth of them, from 10 on, held back for the
    check); default the built-in samples (:func:`workbench.es2.samples.test_images`, with a
    warning that says so).  ``headroom``: the share of each channel's calibrated span kept
    past its measured ends (default :data:`workbench.es2.calibrate.HEADROOM`).  ``mean``,
    ``std``: the exporter's input normalisation, as torchvision writes it (per channel, on
    [0, 1] pixels), prepended to the model (:func:`workbench.nets.normalise.normalised`).
    ``check``: run the net (the emulator) against the model's reference runtime on the
    calibration images (:mod:`workbench.es2.reference`; ``net.reference``); default where the
    net was calibrated (the samples' warning then says so) or its output image clamped to
    [0, 1] (:func:`workbench.es2.calibrate.images_clamped`); below its bound the net is
    refused in one line unless ``force``.  ``scaled_bits``: 16 stores such a tensor (a
    ReLU6's y / 6 too) in 16-bit fixed point, two RGBA8 textures a pack, where only
    convolutions read it and the shaders are highp (:func:`workbench.es2.ops.conv.wide_tensors`:
    twice the fetches and draws of those layers; the MobileNetV2-style net's GPU top-1 =
    TF's on 98.6 -> 99.4 % of 500 CIFAR-10 images); 8 in one RGBA8 texture a pack."""

    luma_input: bool | None = None
    dense: str = "fixed16"
    mediump_warn_db: float | None = None
    check_driver: bool | str = False
    fit: bool = False
    tune: bool | str = False
    shared: bool | int = False
    calibration: object = None
    headroom: float | None = None
    scaled_bits: int = 16
    mean: object = None
    std: object = None
    check: bool | None = None
    force: bool = False

    def __post_init__(self):
        if not isinstance(self.tune, bool) and self.tune not in drivers.COUNTS:
            raise ValueError(f"tune must be True, False or one of {', '.join(drivers.COUNTS)}, "
                             f"not {self.tune!r}")
        if self.dense not in ("fixed16", "float"):
            raise ValueError(f"dense must be 'fixed16' or 'float', not {self.dense!r}")
        if self.scaled_bits not in (8, 16):
            raise ValueError(f"scaled_bits must be 8 or 16, not {self.scaled_bits!r}")
        if not isinstance(self.shared, bool) and not (isinstance(self.shared, int)
                                                      and self.shared > 0):
            raise ValueError(f"shared must be True, False or a pixel count, not {self.shared!r}")
        for name in ("fit", "force", "check"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "check" and value is None):
                raise ValueError(f"{name} must be True or False, not {value!r}")

    @classmethod
    def of(cls, options: Options | None = None, keywords=None) -> Options:
        """``options`` (default ``Options()``) with ``keywords`` replacing its fields, as
        :func:`workbench.es2.compile` takes them: an unknown keyword is refused as Python
        refuses a function's (TypeError, one line naming it)."""
        unknown = [name for name in keywords or {} if name not in NAMES]
        if unknown:
            raise TypeError(f"compile() got an unexpected keyword argument {unknown[0]!r}")
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options: an es2.Options, not {type(options).__name__}")
        return replace(options or cls(), **(keywords or {}))

    @property
    def calibration_headroom(self) -> float:
        """The headroom calibration keeps: ``headroom``, or its default."""
        from workbench.es2.calibrate import HEADROOM

        return HEADROOM if self.headroom is None else self.headroom

    def plan(self, target, calibrated_on: str | None) -> dict:
        """What ``Net.plan`` records of a net compiled with these options for ``target``
        (:class:`workbench.es2.limits.Target`): ``calibrated_on`` the images' description, None
        where nothing was calibrated (nor any headroom kept)."""
        calibrated = calibrated_on is not None
        return {"limits": target.limits.name, "precision": target.precision,
                "draw_buffers": target.draw_buffers, "tune": self.tune,
                "fit": self.fit or self.tune, "shared": self.shared,
                "scaled_bits": self.scaled_bits, "dense": self.dense,
                "mean": _floats(self.mean), "std": _floats(self.std),
                "calibration": calibrated_on,
                "headroom": self.calibration_headroom if calibrated else None}


NAMES = tuple(f.name for f in fields(Options))  # the options' names, in their order


def _floats(values) -> list[float] | None:
    """Per-channel values as a JSON list (None as it is)."""
    return None if values is None else [float(v) for v in np.ravel(values)]
