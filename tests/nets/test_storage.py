import keras
import numpy as np
import pytest

from workbench.nets import storage


def test_sqrt_law_is_its_own_inverse_with_its_steps_finest_at_half():
    q = np.linspace(0, 1, 2001)
    np.testing.assert_allclose(storage.decode(storage.encode(q, "sqrt"), "sqrt"), q, atol=1e-12)
    levels = storage.decode(np.arange(256) / 255, "sqrt")
    steps = np.diff(levels)
    assert np.all(steps > 0) and levels[0] == 0 and levels[-1] == 1
    # the levels nearest 0.5 (at v = 0.5 -+ 0.5/255) are 1/255**2 apart; the ends' steps
    # (v - 0.5 = -+127.5/255 and -+126.5/255) are 2/255 - 2/255**2
    assert steps.min() == pytest.approx(1 / 255 ** 2, rel=1e-6)
    assert steps.max() == pytest.approx(2 / 255 - 2 / 255 ** 2, rel=1e-6)


def test_sqrt_storage_rounds_small_corrections_more_finely():
    # An SR anchor's corrections are small almost everywhere: rounding them after the sqrt
    # law errs ~2.5x less (rms) than rounding them linearly.
    q = 0.5 + np.random.default_rng(0).laplace(0, 0.01, 100_000).clip(-0.5, 0.5)

    def rms(law):
        stored = np.round(storage.encode(q, law) * 255) / 255
        return np.sqrt(np.mean((storage.decode(stored, law) - q) ** 2))

    assert rms("sqrt") < rms("linear") / 2


def test_keras_ops_forms_equal_numpy():
    q = np.random.default_rng(1).random(1000).astype(np.float32)
    for law in storage.LAWS:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(storage.encode(q, law, keras.ops)),
                                   storage.encode(q, law), atol=1e-7)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(storage.decode(q, law, keras.ops)),
                                   storage.decode(q, law), atol=1e-7)


def test_an_unknown_law_is_named():
    with pytest.raises(ValueError, match="storage must be one of linear, sqrt, not 'log'"):
        storage.check("log")
