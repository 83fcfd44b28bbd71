"""The IR's own checks: a companded tensor needs the op that decodes it."""
import numpy as np
import pytest

from workbench.ir import Conv, DepthToSpace, Graph, Input


def _conv(name, source, cout, law="linear"):
    return Conv(name, source, np.zeros((1, 1, 1 if source == "image" else 4, cout), np.float32),
                np.zeros(cout, np.float32), luma_input=source == "image", storage=law)


def test_a_companded_tensor_is_read_by_the_demux_that_decodes_it():
    image = Input("image", 3, rgb=True)
    demux = DepthToSpace("out", "q", 2, chroma_from="image", anchor="nearest",
                         anchor_storage="sqrt")
    Graph(image, [_conv("q", "image", 4, "sqrt"), demux], "out")  # accepted
    with pytest.raises(ValueError, match="layer 'out': anchor_storage 'sqrt' needs its input"):
        Graph(image, [_conv("q", "image", 4), demux], "out")
    plain = DepthToSpace("out", "q", 2, chroma_from="image", anchor="nearest")
    with pytest.raises(ValueError, match="layer 'q': storage 'sqrt' needs one reader"):
        Graph(image, [_conv("q", "image", 4, "sqrt"), plain], "out")
    with pytest.raises(ValueError, match="layer 'q': storage 'sqrt' needs one reader"):
        Graph(image, [_conv("q", "image", 4, "sqrt"), _conv("r", "q", 4), demux], "out")
    with pytest.raises(ValueError, match="layer 'q': storage must be one of linear, sqrt"):
        Graph(image, [_conv("q", "image", 4, "log")], "q")
    with pytest.raises(ValueError, match="layer 'out': anchor_storage needs an anchor"):
        DepthToSpace("out", "q", 2, chroma_from="image", anchor_storage="sqrt")
