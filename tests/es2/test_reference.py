"""A deploy checked against the reference runtime (workbench.es2.reference), calibration
images from a source (workbench.data.calibration), the exporter's normalisation
(workbench.nets.normalise): against TensorFlow and ONNX Runtime, never the emulator alone."""
import keras
import numpy as np
import pytest
from PIL import Image

from tests.ir import onnx_graphs
from workbench import es2
from workbench.data import calibration
from workbench.es2 import onnx_check, reference
from workbench.nets import superres
from workbench.nets.normalise import normalised
from workbench.nets.onnx_model import OnnxModel

L = keras.layers
RNG = np.random.default_rng(0)
IMAGES = np.round(RNG.random((12, 16, 16, 3)) * 255).astype(np.float32) / 255


def image_net():
    """A ReLU conv (calibrated) and a sigmoid conv: an image net, judged by PSNR."""
    keras.utils.set_random_seed(7)
    x = inputs = keras.Input((16, 16, 3))
    x = L.Conv2D(8, 3, padding="same", activation="relu", name="relu")(x)
    return keras.Model(inputs, L.Conv2D(3, 3, padding="same", activation="sigmoid")(x))


def test_a_net_calibrated_on_unlike_images_is_refused_naming_its_layer():
    """Calibrated on 8 dark images, checked on those and 2 bright ones held back: the ReLU's
    stored range clips the bright ones, the output departs from TF's (< 40 dB), and the
    deploy is refused in one line naming the layer, the measure and the remedies; forced, the
    net carries the failed check."""
    dark = list(IMAGES[:8] * 0.05)
    given = dark + list(IMAGES[8:10])
    with pytest.raises(reference.ReferenceCheckFailed) as err:
        es2.compile(image_net(), calibration=given)
    message = str(err.value)
    assert "\n" not in message and "layer 'relu'" in message and "dB from TensorFlow" in message
    assert "--calibration" in message and "--force" in message
    net = es2.compile(image_net(), calibration=given, force=True)
    assert not net.reference.passed and net.reference.clipped["relu"] > 1
    assert net.reference.held_back == 2 and net.reference.images == 10


def test_a_net_calibrated_on_like_images_passes_and_keeps_its_check(tmp_path):
    """The same net on images like the held-back ones: >= 40 dB from TF on every image, its
    value the worst image's PSNR as measured here; the check survives save and load."""
    model = image_net()
    net = es2.compile(model, calibration=list(IMAGES[:10]))
    check = net.reference
    assert check.passed and check.kind == "image" and check.held_back == 2
    worst = min(reference.psnr(model(x[None]).numpy()[0], net.emulate(x)) for x in IMAGES[:10])
    assert check.value == pytest.approx(worst) and check.value >= reference.IMAGE_DB
    assert "dB from TensorFlow" in check.line()
    net.save(tmp_path / "net")
    assert es2.load(tmp_path / "net").reference == check


def test_a_classifier_is_judged_by_top1_agreement_and_the_samples_warn():
    model = onnx_graphs.classifier(17, act="relu", seed=2, gain=4.0)
    with pytest.warns(es2.net.CalibrationWarning, match="built-in samples"):
        net = es2.compile(OnnxModel(model))
    check = net.reference
    assert check.kind == "classifier" and check.runtime == "ONNX Runtime"
    assert check.value == 1.0 and check.images == 6 and check.held_back == 2


def test_mean_and_std_are_folded_as_the_exporter_would_prepend_them():
    """mean / std on [0, 1] pixels: the normalised ONNX model is the plain one on
    (x - mean) / std (ONNX Runtime both), and the compiled net follows it."""
    mean, std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    plain = OnnxModel(onnx_graphs.classifier(17, act="relu", seed=2, gain=1.0))
    model = normalised(plain, mean, std)
    x = IMAGES[:4]
    np.testing.assert_allclose(model.predict(x), plain.predict((x - mean) / np.array(std)),
                               rtol=1e-5, atol=1e-5)
    net = es2.compile(plain, mean=mean, std=std, calibration=list(IMAGES))
    logits = np.stack([net.emulate(image) for image in IMAGES])
    np.testing.assert_array_equal(logits.argmax(1), model.predict(IMAGES).argmax(1))
    with pytest.raises(ValueError, match="std: .* each above 0"):
        normalised(plain, mean, [0.2, 0.0, 0.2])
    with pytest.raises(ValueError, match="2 values for a net of 3 input channels"):
        normalised(plain, [0.5, 0.5], std)


def test_a_keras_model_normalised_is_one_flat_graph():
    keras.utils.set_random_seed(8)
    x = inputs = keras.Input((16, 16, 3))
    x = L.Conv2D(4, 3, padding="same", activation="sigmoid")(x)
    plain = keras.Model(inputs, L.Dense(3)(L.GlobalAveragePooling2D()(x)))
    model = normalised(plain, [0.5, 0.4, 0.3], 0.25)
    np.testing.assert_allclose(model.predict(IMAGES, verbose=0), plain.predict(
        (IMAGES - [0.5, 0.4, 0.3]) / 0.25, verbose=0), rtol=1e-5, atol=1e-5)
    net = es2.compile(model, check=True)
    assert net.reference.value == 1.0


def _write_images(folder, count, size=(40, 30)):
    folder.mkdir(parents=True)
    for i in range(count):
        Image.fromarray((RNG.random((*size, 3)) * 255).astype(np.uint8)).save(folder / f"{i}.png")


def test_calibration_sources_are_read_as_a_user_names_them(tmp_path):
    _write_images(tmp_path / "photos", 5)
    found, said = calibration.images(tmp_path / "photos", (16, 16))
    assert len(found) == 5 and found[0].shape == (16, 16, 3) and said.startswith("5 images of")
    found, _ = calibration.images(f"{tmp_path}/photos/*.png:3", None, channels=1)
    assert len(found) == 3 and found[0].shape == (40, 30, 1)  # smaller than the crop: whole
    _write_images(tmp_path / "data" / "cls" / "toy" / "train" / "cat", 3)
    _write_images(tmp_path / "data" / "cls" / "toy" / "train" / "dog", 3)
    found, said = calibration.images("toy:4", (8, 8), root=tmp_path / "data")
    assert len(found) == 4 and said == "4 images of toy (train)"
    for bad, says in (("nothing-here", "no such folder, glob or data set"),
                      ("toy:0", "a count of 0 images"),
                      (f"{tmp_path}/photos/*.gif", "no images there")):
        with pytest.raises(ValueError, match=says):
            calibration.images(bad, (8, 8), root=tmp_path / "data")


def test_an_espcn_as_exported_deploys_within_40_db_of_onnx_runtime(tmp_path):
    """The PyTorch tutorial's ESPCN as exported (opset 10, converted; its last conv linear,
    before the pixel shuffle, stored as the image it is: clamped to [0, 1]; a Reshape that
    fixes batch 1 under a symbolic batch): accepted, >= 40 dB from ONNX Runtime on photos,
    as the check measures it and here independently (the RGB image of ONNX Runtime's luma
    and the input's chroma, upsampled by TensorFlow, against the emulator's)."""
    import onnx

    from workbench.data import images as imaging
    onnx.save(onnx_graphs.espcn(), tmp_path / "espcn.onnx")
    photos = [imaging.round_8bit(imaging.imresize(x, output_shape=(16, 16)))
              for x in np.round(RNG.random((6, 48, 48, 3)) * 255) / 255]
    with pytest.warns(UserWarning, match="converted from opset 10"):
        net, model = es2.load_net(tmp_path / "espcn.onnx", calibration=photos)
    assert net.graph.input.rgb and net.reference.kind == "image"  # an SR net: on luma
    luma = onnx_check.onnx_input(net.graph, np.stack(photos))
    theirs = [superres.with_chroma(x, y, 3, rounded=False)  # (TF's bilinear chroma)
              for x, y in zip(photos, model.predict(luma))]
    worst = min(reference.psnr(t, net.emulate(x)) for t, x in zip(theirs, photos))
    assert worst >= 40 and net.reference.value == pytest.approx(worst, abs=0.5)


def test_a_net_of_one_size_runs_on_a_larger_image_in_tiles_of_its_size():
    """The ESPCN exported at 16x16 on a 40x32 image: tiles of 16x16 overlapping by its
    receptive field give what its graph gives run whole (the emulator, the size left free),
    byte for byte but where the x3 chroma's bilinear weights, (n + 0.5) / 3 in float32, round
    differently at another tile offset (one level, 1 value in 34,560 here)."""
    from dataclasses import replace

    from workbench.es2 import emulate, tiling

    net = es2.compile(OnnxModel(onnx_graphs.espcn(size=16)), calibration=list(IMAGES[:4]))
    image = np.round(np.random.default_rng(9).random((40, 32, 3)) * 255).astype(np.float32) / 255
    tiled = tiling.run_tiled(net, image, 4096, run=net.emulate)
    assert tiled.tiles > 1 and tiled.output.shape == (120, 96, 3)
    whole = emulate.run(replace(net.graph, input_size=None), image)
    apart = np.abs(tiled.output - whole) * 255
    assert apart.max() <= 1 + 1e-4 and np.mean(apart > 0.5) < 1e-3


def test_load_model_takes_the_normalisation_too(tmp_path):
    import onnx

    import workbench

    onnx.save(onnx_graphs.classifier(17, act="relu", seed=2), tmp_path / "c.onnx")
    plain = workbench.load_model(tmp_path / "c.onnx")
    model = workbench.load_model(tmp_path / "c.onnx", mean=0.5, std=0.25)
    np.testing.assert_allclose(model.predict(IMAGES[:2]), plain.predict((IMAGES[:2] - 0.5) / 0.25),
                               rtol=1e-5, atol=1e-6)


def test_a_saved_folder_takes_no_compile_option(tmp_path):
    es2.compile(image_net(), calibration=list(IMAGES[:4])).save(tmp_path / "net")
    with pytest.raises(ValueError, match="a saved shader folder is compiled already; "
                                         "mean, calibration apply to a .keras or .onnx model"):
        es2.load_net(tmp_path / "net", calibration="cifar10:10", mean=0.5)
    net, model = es2.load_net(tmp_path / "net", force=True)
    assert model is None and net.reference.kind == "image"
