"""workbench: design, train, and deploy neural nets as OpenGL ES 2.0 shaders.

Modules: ``activations``, ``layers``, ``models``, ``images``, ``datasets``, ``metrics``,
``training``, ``evaluation``, ``figures``, ``fetch``.  :func:`load_model` reads any model the
workbench saved.  Importing the package does not import TensorFlow (the GL workers import it).
"""
import os

# Keep TensorFlow's C++ start-up chatter out of notebooks and test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN CPU kernels: TensorFlow enables them by itself only on CPUs with AVX-512 VNNI, and
# only they compute the gradients of grouped convolutions natively (layers.GroupConv2D).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"


def load_model(path):
    """Load a ``.keras`` model the workbench saved, its custom layers registered (TensorFlow is
    imported here, on first use); see :func:`workbench.nets.models.load_model`."""
    from workbench.nets.models import load_model
    return load_model(path)
