"""Keras patterns of real nets (keras.applications' and the zoo's): a ZeroPadding2D before a
'valid' conv becomes its explicit padding; a BatchNormalization that Keras orders after a
branch's layers still folds into its conv."""
import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.nets import zoo

L = keras.layers
IMAGES = np.round(np.random.default_rng(4).random((6, 32, 32, 3)) * 255).astype(np.float32) / 255


def test_zero_padding_becomes_the_convs_padding():
    keras.utils.set_random_seed(0)
    x = inputs = keras.Input((32, 32, 3))
    y = L.Conv2D(4, 3, strides=2, name="c")(L.ZeroPadding2D(((1, 2), (0, 1)))(x))
    model = keras.Model(inputs, L.Activation("sigmoid")(y))
    op = ir.from_model(model).op("c")
    assert op.padding == (1, 0, 2, 1)  # (top, left, bottom, right)
    np.testing.assert_allclose(es2.compile(model).emulate(IMAGES[0]), model(IMAGES[:1])[0],
                               atol=0.5 / 255 + 1e-6)


def test_zero_padding_before_anything_but_a_valid_conv_is_refused():
    x = inputs = keras.Input((32, 32, 3))
    y = L.Conv2D(4, 3, padding="same", name="c")(L.ZeroPadding2D(1)(x))
    with pytest.raises(ir.LoweringError, match="layer 'c': reads a ZeroPadding2D, so its own "
                       "padding must be 'valid'"):
        ir.from_model(keras.Model(inputs, L.Activation("sigmoid")(y)))
    y = L.MaxPooling2D(2)(L.ZeroPadding2D(1)(x))
    with pytest.raises(ir.LoweringError, match="a ZeroPadding2D must feed a convolution"):
        ir.from_model(keras.Model(inputs, L.Activation("sigmoid")(L.Conv2D(4, 1)(y))))


def test_a_batchnorm_ordered_after_a_shortcut_conv_folds_into_its_own():
    """The ResNet's second stage: Keras orders the shortcut's 1x1 conv between the block's
    second conv and its BatchNormalization."""
    model = zoo.resnet_style()
    names = [layer.name for layer in model.layers]
    assert names.index("s2b1_down") < names.index("s2b1_conv2_bn")
    graph = ir.from_model(model)
    assert {"s2b1_conv2", "s2b1_down"} <= {op.name for op in graph.ops}
    net = es2.compile(model, calibration=list(IMAGES[:4]))
    np.testing.assert_allclose(np.stack([net.emulate(x) for x in IMAGES]), model(IMAGES),
                               atol=0.02)
