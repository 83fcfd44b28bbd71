"""OpenGL ES 2.0 back end: one record per IR op (:mod:`.ops`, :mod:`.record`: its programs,
emulator, limits, cost, textures), the passes in order (:mod:`.shaders`), the compiled net
(:mod:`.net`), the options it is compiled with (:mod:`.options`) and its saved folder
(:mod:`.saved`), its GL runner (:mod:`.runner`), the limits it must fit (:mod:`.limits`), the
byte-exact numpy emulator (:mod:`.emulate`) and its float16-mediump prediction
(:mod:`.mediump`), 16-bit fixed point (:mod:`.fixed16`) and the glslangValidator check
(:mod:`.glslang`)."""
from workbench.es2 import ops  # registers every op's record
from workbench.es2.limits import Target
from workbench.es2.net import Net, compile, load, load_net, output_values
from workbench.es2.options import Options
from workbench.es2.record import RECORDS
from workbench.es2.saved import CONVENTIONS
from workbench.es2.shaders import PRECISIONS, VERTEX_SHADER, Binding, Pass, generate

__all__ = ["CONVENTIONS", "Net", "Options", "compile", "load", "load_net", "output_values",
           "ops", "RECORDS", "Target", "PRECISIONS", "VERTEX_SHADER", "Binding", "Pass", "generate"]
