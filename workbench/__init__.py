"""workbench: design, train, and deploy neural nets as OpenGL ES 2.0 shaders.

Modules: ``activations``, ``layers``, ``models``, ``images``, ``datasets``, ``metrics``,
``training``, ``evaluation``, ``figures``, ``fetch``.
"""
import os

# Keep TensorFlow's C++ start-up chatter out of notebooks and test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
