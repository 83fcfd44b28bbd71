"""studies.own_net (my_net.ipynb's logic): a net built from a builder's name, told apart by
its output, trained as it is built; the notebook itself runs in the ci profile
(tests/integration/test_notebooks.py)."""
import json

import keras
import numpy as np
import pytest

from tests.nets.test_classifier import make_folder
from workbench.studies import own_net


def test_a_builder_named_module_function_is_called_with_its_arguments():
    model = own_net.built("workbench.nets.models:sr_x2", {"widths": [8, 8, 8, 4]})
    assert [model.get_layer(f"L{i}").filters for i in range(1, 5)] == [8, 8, 8, 4]
    with pytest.raises(ValueError, match=r"^builder workbench.nets.models:nope: not found"):
        own_net.built("workbench.nets.models:nope")
    with pytest.raises(ValueError, match=r"^builder sr_x2: .*width"):
        own_net.built("workbench.nets.models:sr_x2", {"width": 3})


def test_the_kind_of_a_net_is_read_from_its_output():
    x = inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(x)
    assert own_net.kind_of(keras.Model(inputs, keras.layers.Dense(3)(pooled))) == "classifier"
    assert own_net.kind_of(own_net.built("workbench.nets.models:sr_x2")) == "sr"
    flat = keras.Model(inputs, keras.layers.Reshape((64, 3))(x), name="flat")
    with pytest.raises(ValueError, match=r"^model 'flat': its output \(None, 64, 3\) is neither"):
        own_net.kind_of(flat)


def test_a_classifier_of_ones_own_trains_at_its_own_input_size(tmp_path):
    """A 16x16 classifier on a 3-class image folder: trained as built (its input size, not the
    preset's 32), the written model.keras is the net trained, config.json names it."""
    make_folder(tmp_path / "data", "train", n=6, size=16)
    make_folder(tmp_path / "data", "test", n=2, size=16, seed=1)
    keras.utils.set_random_seed(0)
    x = inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu6", name="mine")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
    trained = own_net.train(model, tmp_path / "run", steps=2, data=str(tmp_path / "data"),
                            batch=6)
    images = np.random.default_rng(2).random((2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(trained(images), model(images), atol=1e-6)  # (model: trained)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["input_size"] == 16 and config["model"]["parameters"] == model.count_params()
    assert trained.get_layer("mine").get_config()["activation"] == "relu6"
