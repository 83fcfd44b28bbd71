"""Models by name (``--model sr``) and the classifier presets, without Keras: what a command
resolves before it knows whether it needs TensorFlow (:func:`named`, :func:`reference_sr`);
the builders and :func:`~workbench.nets.models.load_model` are :mod:`workbench.nets.models`'."""
from __future__ import annotations

import dataclasses
from pathlib import Path

# stem: (kernel, stride, padding); stages: (regular units, channels); each stage is followed
# by a downsampling unit to the next stage's channels (``head`` after the last); ``final``:
# a 3x3 valid conv head -> head (groups head/8) before the global average pool.
CLASSIFIER_PRESETS = {
    "dogs120": dict(input_size=385, classes=120, stem=(5, 2, "valid"),
                    stages=((2, 32), (3, 32), (3, 64), (4, 128), (5, 192)), head=192, final=True),
    "cifar10": dict(input_size=32, classes=10, stem=(3, 1, "same"),
                    stages=((2, 32), (3, 64), (3, 128)), head=192, final=False),
    "tiny": dict(input_size=16, classes=4, stem=(3, 1, "same"),
                 stages=((1, 32), (2, 64)), head=64, final=False),
}


def reference_sr() -> Path:
    """The x2 SR reference checkpoint of this checkout (``models/sr_x2_reference.keras``, with
    its card beside it); FileNotFoundError naming the path when there is none."""
    path = named("sr").path
    if not path.is_file():
        raise FileNotFoundError(f"no --model given and no reference checkpoint at {path}")
    return path


def reference_cifar10() -> Path:
    """The CIFAR-10 reference classifier of this checkout (``models/cifar10_reference.keras``,
    with its card beside it); it may not exist (callers check)."""
    return named("cifar10").path


@dataclasses.dataclass(frozen=True)
class NamedModel:
    """A model the commands take by name (``--model sr``): a checkpoint of this checkout's
    ``models/``, or a classifier preset (:data:`CLASSIFIER_PRESETS`) with seeded random
    weights where no checkpoint is named or there (:func:`workbench.nets.models.load_named`); ``draw_buffers``: the render targets a
    program writes, where the name asks for more than one (the target's, ``es2.compile``)."""
    name: str
    checkpoint: str | None = None
    preset: str | None = None
    draw_buffers: int | None = None

    @property
    def path(self) -> Path | None:
        """The checkpoint's path (it may not exist), or None."""
        from workbench.files import project_root

        return project_root() / "models" / self.checkpoint if self.checkpoint else None

    @property
    def trained(self) -> bool:
        """Whether :meth:`load` gives trained weights (the checkpoint is there)."""
        return self.path is not None and self.path.is_file()


NAMED = {m.name: m for m in (
    NamedModel("sr", "sr_x2_reference.keras"),
    NamedModel("sr-mrt4", "sr_x2_reference.keras", draw_buffers=4),
    NamedModel("cifar10", "cifar10_reference.keras", preset="cifar10"),
    *(NamedModel(p, preset=p) for p in CLASSIFIER_PRESETS if p != "cifar10"))}


def named(name) -> NamedModel:
    """The model of a name of :data:`NAMED`; another name is refused in one line listing them."""
    if name not in NAMED:
        raise ValueError(f"unknown model name {name!r}; known: {', '.join(NAMED)}")
    return NAMED[name]


def is_name(model) -> bool:
    """Whether a ``--model`` value is a name for :func:`named` rather than a file: one of
    :data:`NAMED`, or a word with no file suffix where there is no such file."""
    path = Path(model)
    return str(model) in NAMED or not (path.suffix or path.exists())
