"""A convolution as the ES 2.0 back end forms it (es2.ops.conv.ConvForm): every conv of a
compiled net is one, a frozen value; a folder saved before every conv was formed still
loads."""
import json
from dataclasses import FrozenInstanceError, fields, replace
from pathlib import Path

import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.es2 import saved
from workbench.es2.ops.conv import ConvForm
from workbench.nets.layers import Act, GroupConv2D


def small_net():
    """Two convs that fit whole: a 3x3 and a 1x1 over one pack."""
    keras.utils.set_random_seed(3)
    x = inputs = keras.Input((None, None, 4))
    x = Act("sigmoid_like")(GroupConv2D(4, 3)(x))
    return es2.compile(keras.Model(inputs, Act("sigmoid_like")(GroupConv2D(4, 1)(x))))


def image():
    return np.random.default_rng(5).integers(0, 256, (9, 11, 4)).astype(np.float32) / 255


def test_every_conv_of_a_compiled_net_is_formed_and_frozen():
    """prepare forms every conv, split or not (one stage, a chain, 8 bits: the defaults);
    neither a form field nor an IR field of it can be set, ``replace`` makes another."""
    convs = small_net().graph.ops
    assert [type(op) for op in convs] == [ConvForm, ConvForm]
    assert {(op.split, op.row_split, op.order, op.bits()) for op in convs} == {(1, 1, "chain", 8)}
    for field, value in (("split", 2), ("kernel", None)):
        with pytest.raises(FrozenInstanceError, match=field):
            setattr(convs[0], field, value)
    with pytest.raises(FrozenInstanceError):
        del convs[0].order
    assert replace(convs[0], split=2).split == 2 and convs[0].split == 1


def test_a_folder_saved_before_every_conv_was_formed_loads(tmp_path):
    """The manifest names a conv "Conv" and now holds its form's fields; one that holds only
    the IR's fields (what a net saved before every conv was formed wrote of an unsplit conv)
    loads them as ConvForms of the defaults, which predict the same bytes."""
    net, x = small_net(), image()
    folder = Path(net.save(tmp_path / "net"))
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    assert {op["type"] for op in manifest["ops"]} == {"Conv"}
    assert all(op["split"] == 1 and op["order"] == "chain" for op in manifest["ops"])
    older = {f.name for f in fields(ir.Conv)} | {"type"}
    manifest["ops"] = [{k: v for k, v in op.items() if k in older} for op in manifest["ops"]]
    path.write_text(json.dumps(saved.sealed(manifest)))
    loaded = es2.load(folder)
    assert [type(op) for op in loaded.graph.ops] == [ConvForm, ConvForm]
    assert [op.split for op in loaded.graph.ops] == [1, 1]
    np.testing.assert_array_equal(loaded.emulate(x, keep=True)[loaded.graph.output],
                                  net.emulate(x, keep=True)[net.graph.output])
