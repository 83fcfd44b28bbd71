"""workbench: design, train, and deploy neural nets as OpenGL ES 2.0 shaders.

Subpackages, lowest first: ``gl``, ``data``, ``nets``, ``ir``, ``es2`` / ``es31``, ``web``,
``studies``, ``run`` (docs/design.md, "Architecture").  :func:`load_model` reads any model the
workbench saved.  Importing the package does not import TensorFlow (the GL workers import it).
"""
import glob
import os

# Keep TensorFlow's C++ start-up chatter out of notebooks and test logs. Set here, before
# anything imports TensorFlow; the notebooks' kernels inherit them from `python -m workbench`.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# No NVIDIA GPU (no /dev/nvidia* nodes, nor WSL's /dev/dxg): only TensorFlow's CPU device, so
# that it does not try CUDA and log "failed call to cuInit" (an error-level line) each start.
if not (glob.glob("/dev/nvidia*") or os.path.exists("/dev/dxg")):
    os.environ.setdefault("TF_ENABLED_DEVICE_TYPES", "CPU")
# oneDNN CPU kernels: TensorFlow enables them by itself only on CPUs with AVX-512 VNNI, and
# only they compute the gradients of grouped convolutions natively (layers.GroupConv2D).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

from workbench.quiet import quiet_tensorflow_import  # noqa: E402  (after the variables above)

# TensorFlow's start-up lines (logged before absl's logging exists: the variables above do not
# reach them) dropped wherever a workbench function first imports it: a plain python, a notebook
quiet_tensorflow_import()

__version__ = "0.1.0"


def load_model(path, mean=None, std=None):
    """Load a model file (``.keras``, its custom layers registered, TensorFlow imported here on
    first use; ``.onnx``, run by ONNX Runtime); see :func:`workbench.nets.models.load_model`.
    ``mean``, ``std``: the exporter's input normalisation on [0, 1] pixels, prepended
    (:func:`workbench.nets.normalise.normalised`), so that the model takes [0, 1] images."""
    from workbench.nets.models import load_model
    from workbench.nets.normalise import normalised
    return normalised(load_model(path), mean, std)
