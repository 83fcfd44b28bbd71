"""The IR's own checks: a companded tensor needs the op that decodes it; a size is a picture's."""
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


@pytest.mark.parametrize("hw, message", [
    ((-1, 5), r"the input size: -1x5 is not a picture"),
    ((0, 0), r"the input size: 0x0 is not a picture"),
    ("16x16", r"the input size: \(height, width\) as two whole numbers, not '16x16'"),
    ((16.5, 16), r"not \(16.5, 16\)"),
])
def test_a_size_that_is_not_a_picture_is_refused(hw, message):
    """It gave negative texel counts and empty shapes (`ir.cost` of a negative size)."""
    graph = Graph(Input("x", 4), [_conv("c", "x", 4)], "c")
    assert graph.shapes((6, 5))["c"] == (6, 5, 4)
    with pytest.raises(ValueError, match=message):
        graph.shapes(hw)
