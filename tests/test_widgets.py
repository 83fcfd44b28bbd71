"""The ipywidgets, without a browser: setting a control's value redraws what the widget shows."""
import numpy as np
import pytest

from workbench import widgets
from workbench.es2 import emulate
from workbench.nets import activations


def _shown(box):
    return bytes(box.outputs["image"].value), box.outputs["text"].value


def test_activation_explorer_reacts_to_every_control():
    box = widgets.activation_explorer()
    image, text = _shown(box)
    assert image.startswith(b"\x89PNG") and "sigmoid_like" in text and "linear" not in text
    box.controls["probe"].value = 3.0
    assert _shown(box)[0] != image and _shown(box)[1] != text
    # sigmoid_like(3) = 0.825
    assert "<td style='padding:0 8px;text-align:right'>0.8250</td>" in _shown(box)[1]
    image, text = _shown(box)
    box.controls["activations"].value = ("bounded_relu",)
    assert "sigmoid_like" not in _shown(box)[1] and _shown(box)[0] != image
    image = _shown(box)[0]
    box.controls["range"].value = (-2.0, 2.0)
    assert _shown(box)[0] != image
    box.controls["gradient"].value = "tf"
    assert "bounded_relu" in _shown(box)[1]
    box.controls["activations"].value = ()
    assert "choose at least one" in _shown(box)[1]


def test_activation_numbers():
    x = np.array([-7.0, -3.0, -1.0, -0.2, 0.3, 1.5, 4.0, 7.0], np.float32)  # off every breakpoint
    for name in activations.names():
        np.testing.assert_allclose(widgets.activation_gradient(name, x, "numpy"),
                                   widgets.activation_gradient(name, x, "tf"), atol=2e-3)
        y = activations.get(name).np_fn(x).astype(np.float64)  # the emulator's arithmetic
        assert (widgets.stored_levels(name, x) == np.round(emulate.quantize(y) * 255)).all()
    rows = widgets.activation_rows(widgets.activation_samples(["sigmoid_like"], -8, 8, 1601), 0.25)
    assert rows[0]["value"] == pytest.approx(0.55, abs=1e-6)
    assert rows[0]["gradient"] == pytest.approx(0.2, abs=1e-4)
    assert rows[0]["level"] == 140  # round(0.55 * 255)
    # the sigmoid-like output spans 0..1 over [-8, 8]: every 8-bit level is used
    assert rows[0]["levels used"] == 256
    with pytest.raises(ValueError, match="gradient source"):
        widgets.activation_gradient("sigmoid", x, "finite")


def test_activation_explorer_draws_what_the_net_computes():
    """The value panel is each activation's TF form; the stored panel, read back (level / 255
    times the scale, plus the offset), is the same within half a level: ReLU is not clipped
    at 1 (ES 2.0 stores it calibrated, docs/design.md)."""
    import tensorflow as tf

    names = ["relu", "bounded_relu", "relu6_scaled", "sigmoid_like", "sigmoid", "linear"]
    curves = widgets.activation_samples(names, -8, 8, 801)
    value, _, stored = widgets.activation_figure(curves).axes
    drawn = {line.get_label(): line.get_ydata() for line in value.lines}
    levels = {line.get_label(): line.get_ydata() for line in stored.lines}
    assert set(drawn) == set(levels) == set(names)
    for name in names:
        x, c = curves[name]["x"], curves[name]
        truth = activations.get(name).tf_fn(tf.constant(x)).numpy()
        np.testing.assert_allclose(drawn[name], truth, atol=1e-6, err_msg=name)
        back = levels[name] / 255 * c["scale"] + c["offset"]
        assert np.abs(back - truth).max() <= c["scale"] / 510 + 1e-6, name
    relu = curves["relu"]
    assert drawn["relu"].max() == 8 and relu["offset"] == 0 and relu["scale"] == 12  # HEADROOM
    assert levels["relu"][-1] == round(8 / 12 * 255)
    row = widgets.activation_rows({"relu": relu}, 3.0)[0]
    assert row["stored as"] == "y / 12" and abs(row["storage error"]) <= 12 / 510


def test_shuffle_visualiser():
    box = widgets.shuffle_visualiser()
    image, text = _shown(box)
    assert "iteration 1: 0, 8, 16, 24, 1, 9, 17, 25," in text
    assert "iteration 2: 0, 2, 4, 6, 8," in text
    assert "depends on every input channel (4 groups of 32 in the 1x1 conv): 2" in text
    box.controls["step"].value = 4
    assert "iteration 1: 0, 4, 8, 12, 16, 20, 24, 28, 1, 5," in _shown(box)[1]
    assert _shown(box)[0] != image
    box.controls["step"].value = 1
    assert "never (the shuffle is the identity)" in _shown(box)[1]
    box.controls["channels"].value = 64  # step 1 stays valid
    assert box.controls["step"].options == (1, 2, 4, 8, 16) and box.controls["step"].value == 1
    box.controls["step"].value = 16
    box.controls["channels"].value = 32  # 16 is no step over 8 textures: back to the reference
    assert box.controls["step"].options == (1, 2, 4, 8) and box.controls["step"].value == 8
    assert "32 channels (8 textures), step 8" in _shown(box)[1]
    image = _shown(box)[0]
    box.controls["iterations"].value = 1
    assert "iteration 2" not in _shown(box)[1] and _shown(box)[0] != image


def _sr_images():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 0.8, size=(48, 40, 3)).astype(np.float32)  # +0.1: no clipping
    small = rng.uniform(size=(32, 32, 3)).astype(np.float32)
    return {"a": {"ground truth": truth, "bicubic": np.clip(truth + 0.1, 0, 1),
                  "net": np.clip(truth + 0.02, 0, 1), "GPU": np.clip(truth + 0.02, 0, 1)},
            "b": {"ground truth": small, "bicubic": small * 0.5, "net": small * 0.9,
                  "GPU": small * 0.9}}


def test_sr_viewer():
    box = widgets.sr_viewer(_sr_images(), crop=16)
    image, text = _shown(box)
    assert image.startswith(b"\x89PNG") and "GPU vs net" in text and "inf" in text
    psnr = widgets.crop_psnr(_sr_images()["a"], (0, 0, 16))
    # bicubic: +0.1 on R, G, B -> +0.1 * 219 / 255 on studio-range luma: 21.32 dB
    assert psnr[1]["PSNR image"] == pytest.approx(20 - 20 * np.log10(219 / 255), abs=0.1)
    assert psnr[2]["PSNR image"] > psnr[1]["PSNR image"]
    box.controls["x"].value = 0
    assert _shown(box)[0] != image
    image = _shown(box)[0]
    box.controls["size"].value = 40  # the whole width of image "a": x and y limits shrink
    assert box.controls["x"].max == 0 and box.controls["y"].max == 8 and _shown(box)[0] != image
    box.controls["image"].value = "b"  # smaller: the crop is kept inside it
    assert box.controls["size"].max == 32 and box.controls["size"].value == 32
    bicubic = widgets.crop_psnr(_sr_images()["b"], (0, 0, 32))[1]
    assert bicubic["method"] == "bicubic" and f"{bicubic['PSNR crop']:.2f}" in _shown(box)[1]
    with pytest.raises(ValueError, match="no images"):
        widgets.sr_viewer({})


def test_sr_viewer_images_from_a_model():
    """The helper on an untrained net, TF only (the GPU path is the deploy tests' business)."""
    from workbench.nets.models import sr_x2

    hr = np.random.default_rng(1).uniform(size=(17, 20, 3)).astype(np.float32)
    images = widgets.sr_viewer_images(sr_x2(), [("noise", hr)], gpu=False)
    assert list(images["noise"]) == ["ground truth", "bicubic", "net"]
    assert all(v.shape == (16, 20, 3) for v in images["noise"].values())
    assert _shown(widgets.sr_viewer(images))[0].startswith(b"\x89PNG")
