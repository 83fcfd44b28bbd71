"""Device limit profiles (workbench.es2.limits.PROFILES) and tiled runs (workbench.es2.tiling).

References: the profiles' numbers against the sources named in limits.py; tiled runs against
the untiled run of the same net (GPU and emulator, byte for byte); the receptive field against a
direct measurement in the emulator (one input pixel changed, which output pixels move).
"""
import argparse
import json
import re
from dataclasses import replace

import keras
import numpy as np
import pytest

from workbench import es2, ir
from workbench.__main__ import main
from workbench.es2 import limits, tiling
from workbench.es2.ops import conv
from workbench.nets.layers import Act, DepthToSpace, GroupConv2D
from workbench.nets.models import sr_x2


def _image(h, w, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c)).astype(np.float32) / 255


def _model(channels, *layers, size=None):
    x = inputs = keras.Input((size, size, channels))
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def _levels(x):
    return np.round(np.asarray(x) * 255).astype(np.uint8)


@pytest.mark.parametrize("name, size, units, highp", [
    ("es2-minimum", 64, 8, False), ("videocore4", 2048, 8, True), ("mali400", 4096, 8, False),
    ("adreno3xx", 4096, 16, True), ("gc2000", 8192, 8, True), ("webgl1-minimum", 4096, 8, False)])
def test_profiles_hold_their_numbers(name, size, units, highp):
    p = limits.profile(name)
    assert (p.name, p.max_texture_size, p.texture_units) == (name, size, units)
    assert p.float_precision == ("highp" if highp else "mediump")
    uniforms = 4095 if name == "videocore4" else 16  # what Mesa vc4 answers (the Pi's driver)
    assert (p.varying_vectors, p.fragment_uniform_vectors, p.fetches_per_fragment) == (
        8, uniforms, 64)
    assert p.sampled_channels == ((128, 96) if name == "videocore4" else None)


def test_default_is_es2_with_the_per_program_minimums():
    es2_minimum = limits.profile("es2-minimum")
    assert limits.profile() is limits.ES2 and limits.profile(limits.ES2) is limits.ES2
    for field in ("texture_units", "fetches_per_fragment", "outputs_per_program",
                  "varying_vectors", "fragment_uniform_vectors"):
        assert getattr(limits.ES2, field) == getattr(es2_minimum, field), field
    # the image size is the runtime's, the precision the caller's: nothing else changed
    assert limits.ES2.max_texture_size is None and limits.ES2.float_precision == "highp"


def test_unknown_profile_is_one_line_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown device profile 'pi5'; valid: es2-minimum, "
                       "videocore4, mali400, adreno3xx, gc2000, webgl1-minimum$"):
        limits.profile("pi5")


def test_net_that_fits_a_larger_device_whole_is_split_for_a_smaller_one():
    # 9 textures: 8 input packs + the residual; fits adreno3xx's 16 units, not videocore4's 8
    # (nor ES 2.0's): there its input packs are split over 2 stages (es2.ops.split)
    x = inputs = keras.Input((None, None, 32))
    y = GroupConv2D(32, 1, name="L3")(x)
    model = keras.Model(inputs, Act("bounded_relu")(keras.layers.Add()([y, x])))
    assert getattr(es2.compile(model, "adreno3xx").graph.op("L3"), "split", 1) == 1
    for target in (es2.Target.of("videocore4"), es2.Target.of(limits.ES2)):
        assert es2.compile(model, target).graph.op("L3").split == 2


def test_one_target_validated_once():
    """``es2.Target.of`` resolves the device and checks precision and render targets once;
    compile takes a target (or a profile's name), and the command line makes one."""
    from workbench.run.cli import _target, parser

    target = es2.Target.of("videocore4")
    assert (target.limits.name, target.precision, target.draw_buffers) == ("videocore4", "highp", 1)
    assert es2.Target.of("mali400").precision == "mediump"
    assert es2.Target.of(draw_buffers=8).draw_buffers == 8  # plain ES2: the runtime checks it
    with pytest.raises(limits.LimitError, match="no highp float"):
        es2.Target.of("mali400", "highp")
    with pytest.raises(limits.LimitError, match="draw_buffers = 4 exceeds the videocore4"):
        es2.Target.of("videocore4", draw_buffers=4)
    model = _model(4, GroupConv2D(4, 3, name="c"), Act("bounded_relu"))
    with pytest.raises(TypeError, match="an es2.Target"):
        es2.compile(model, limits.ES2)
    with pytest.raises(ValueError, match="unknown device profile 'mediump'"):
        es2.compile(model, "mediump")
    with pytest.raises(TypeError, match="precision"):
        es2.compile(model, precision="mediump")  # the loose options are gone
    net = es2.compile(model, es2.Target.of("mali400"))
    assert net.precision == "mediump" and "precision mediump float;" in net.passes[0].source
    assert net.target == es2.compile(model, "mali400").target == es2.Target.of("mali400")
    args = parser().parse_args(["upscale", "in.png", "out.png", "--device", "adreno3xx",
                                "--draw-buffers", "4", "--precision", "mediump"])
    assert _target(args) == es2.Target(limits.profile("adreno3xx"), "mediump", 4)
    assert _target(parser().parse_args(["upscale", "in.png", "out.png"])) is None


def test_fixed_input_size_is_checked_against_the_device_texture_size():
    model = _model(4, GroupConv2D(4, 3, name="c"), Act("bounded_relu"), size=100)
    es2.compile(model)  # ES2 leaves the size to the runtime
    es2.compile(model, "videocore4")
    with pytest.raises(limits.LimitError, match=r"^layer 'image.*': texture side of .* \(100x100\) "
                       r"for a 100x100 input = 100 exceeds the es2-minimum limit of 64$"):
        es2.compile(model, "es2-minimum")


def test_channels_per_output_budget():
    # Beatmup's Pi budget (< 100 channels for kernels over 1x1) binds once units do not:
    # 25 packs fit 32 units, 100 channels do not fit 96
    graph = ir.from_keras(_model(100, GroupConv2D(4, 3, name="wide"), Act("bounded_relu")))
    graph = replace(graph, ops=[conv.formed(op) for op in graph.ops])  # whole: one stage
    table = replace(limits.profile("videocore4"), texture_units=32, fetches_per_fragment=1024)
    with pytest.raises(limits.LimitError, match="^layer 'wide': input channels sampled per output "
                       "= 100 exceeds the videocore4 limit of 96$"):
        limits.check(graph, table)
    limits.check(graph, replace(table, sampled_channels=None))


def test_highp_on_a_mediump_device_is_refused_and_its_default_is_mediump():
    model = _model(4, GroupConv2D(4, 3), Act("bounded_relu"))
    assert es2.compile(model, "mali400").precision == "mediump"
    assert es2.compile(model, "videocore4").precision == "highp"
    with pytest.raises(limits.LimitError, match="mali400 fragment shaders have no highp"):
        es2.compile(model, es2.Target.of("mali400", "highp"))


@pytest.mark.parametrize("target", [es2.Target.of("videocore4"), es2.Target.of("mali400"),
                                    es2.Target.of(draw_buffers=2),
                                    es2.Target.of(replace(limits.ES2, texture_units=16))])
def test_a_saved_net_keeps_its_target(tmp_path, target):
    """A net saved and loaded keeps what it was compiled for (a profile by its name, other
    limits whole); a folder written before nets kept theirs loads as ES 2.0 with its own
    precision and render targets."""
    net = es2.compile(_model(8, GroupConv2D(8, 3, name="c"), Act("bounded_relu")), target)
    assert net.target == target
    net.save(tmp_path)
    path = tmp_path / "manifest.json"
    manifest = json.loads(path.read_text())
    named = target.limits.name in limits.PROFILES
    assert isinstance(manifest["target"]["limits"], str) == named
    assert es2.load(tmp_path).target == es2.load_net(tmp_path)[0].target == target
    del manifest["target"]
    path.write_text(json.dumps(es2.saved.sealed(manifest)))
    old = es2.load(tmp_path)
    assert old.target == es2.Target.of(None, net.precision, net.draw_buffers)


COMPILING = ("upscale", "export-web", "bundle", "bench sr")  # the commands that compile a net


def test_every_compiling_command_has_the_device_options_alike():
    """--device, --precision and --draw-buffers on every command that compiles a net, with
    the same help and the device's defaults (bundle defaulted to highp, bench had no
    --precision)."""
    from workbench.run.cli import parser

    def commands(p, prefix=""):  # {"upscale": parser, ..., "bench sr": parser, ...}
        found = {}
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[prefix + name] = sub
                    found.update(commands(sub, f"{prefix}{name} "))
        return found

    options = {name: {o: (a.help, a.default, a.choices, a.type) for a in command._actions
                      for o in a.option_strings if o in ("--device", "--precision",
                                                         "--draw-buffers")}
               for name, command in commands(parser()).items()}
    assert {name for name, found in options.items() if found} == set(COMPILING)
    assert all(options[name] == options["upscale"] for name in COMPILING)
    assert len(options["upscale"]) == 3
    assert all(default is None for _, default, _, _ in options["upscale"].values())


def test_cli_bad_device_is_one_line_and_exit_2(tmp_path, capsys):
    for command in (["upscale", "in.png", str(tmp_path / "out.png")],
                    ["export-web", "--out", str(tmp_path / "page")],
                    ["bundle", "--out", str(tmp_path / "bundle")],
                    ["bench", "sr", "--size", "8"]):
        assert main(command + ["--device", "pi5"]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(r"error: unknown device profile 'pi5'; valid: .*webgl1-minimum\n", err)
    assert main(["bundle", "--out", str(tmp_path / "bundle"), "--device", "mali400",
                 "--precision", "highp"]) == 2
    assert "error: precision 'highp': mali400 fragment shaders have no highp" in \
        capsys.readouterr().err


# --- tiling -----------------------------------------------------------------------------------

@pytest.mark.parametrize("build, radius", [
    (sr_x2, 4),  # 5x5, 3x3, 1x1, 3x3, 1x1: 2 + 1 + 0 + 1 + 0
    (lambda: _model(1, GroupConv2D(4, 1), Act("bounded_relu"), DepthToSpace(2)), 1),  # chroma
    (lambda: _model(1, GroupConv2D(4, 5), Act("bounded_relu"), DepthToSpace(2)), 2),
    (lambda: _model(1, GroupConv2D(4, 3), Act("bounded_relu"),  # 1 + 1 (a 3x3 'same' max)
                    keras.layers.MaxPooling2D(3, 1, padding="same"), DepthToSpace(2)), 2)])
def test_receptive_field_matches_a_measurement(build, radius):
    """Set one input pixel to black, then to white, at a few places: no output pixel further
    than the radius moves (what tiling relies on), and some at the radius do (the bound is
    tight; a bounded activation can hide a change, so the furthest over all the tries)."""
    keras.utils.set_random_seed(5)
    net = es2.compile(build())
    assert tiling.receptive_field(net.graph) == radius
    image = _image(21, 21, seed=4)
    before = _levels(net.emulate(image))
    reach = []
    for y, x in [(10, 10), (9, 11), (11, 9)]:
        for value in (0.0, 1.0):
            changed = image.copy()
            changed[y, x] = value
            ys, xs = np.nonzero(np.any(_levels(net.emulate(changed)) != before, axis=-1))
            reach.append(max(np.abs(ys // 2 - y).max(initial=0), np.abs(xs // 2 - x).max(initial=0)))
    assert max(reach) == radius, reach


@pytest.mark.parametrize("interpolation, radius", [("nearest", 1), ("bilinear", 2)])
def test_receptive_field_of_upsampling(interpolation, radius):
    """x2 upsampling halves the step; bilinear reads one source pixel further: a 3x3 conv
    after it reaches half an input pixel more (0 + 0.5 or 1 + 0.5, rounded up)."""
    net = es2.compile(_model(4, keras.layers.UpSampling2D(2, interpolation=interpolation),
                             GroupConv2D(4, 3), Act("bounded_relu")))
    assert tiling.receptive_field(net.graph) == radius


def test_receptive_field_refuses_a_stride():
    net = es2.compile(_model(4, GroupConv2D(4, 3, strides=2, name="down"), Act("bounded_relu")))
    with pytest.raises(ValueError, match="layer 'down': tiling needs stride-1"):
        tiling.receptive_field(net.graph)


def test_tiles_cover_the_axis_once_with_real_neighbours():
    spans = tiling.tiles(80, 32, 4)
    assert [s for s, _, _ in spans] == [0, 20, 44, 48]   # the last one shifted in, same size
    kept = [i for _, a, b in spans for i in range(a, b)]
    assert kept == list(range(80))
    for start, a, b in spans:
        assert (a - start >= 4 or start == 0) and (start + 32 - b >= 4 or start + 32 == 80)


def test_tiles_too_small_for_the_receptive_field_are_one_line():
    net = es2.compile(sr_x2())
    with pytest.raises(ValueError, match=r"^a 30x20 image needs textures over 16 pixels, and "
                       r"tiles that fit \(8 pixels\) cannot hold the net's receptive field of 4 "
                       r"pixels each side; use a smaller image$"):
        tiling.run_tiled(net, _image(20, 30), max_size=16)


def test_tiled_upscale_equals_untiled_byte_for_byte():
    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2())
    image = _image(72, 80, seed=6)  # 2.5x the 32-pixel tiles that keep textures <= 64
    assert tiling.largest_tile(net.graph, 64) == 32
    tiled = tiling.run_tiled(net, image, max_size=64)
    assert tiled.tiles == 3 * 4 and tiled.output.shape == (144, 160, 3)
    untiled = net.run(image)
    assert np.array_equal(tiled.output, untiled)
    emulated = tiling.run_tiled(net, image, 64, run=net.emulate)
    assert np.array_equal(emulated.output, net.emulate(image))
    assert np.array_equal(_levels(emulated.output), _levels(untiled))  # llvmpipe = emulator


def test_an_image_over_the_memory_available_runs_in_tiles_that_fit(monkeypatch):
    """A 10000x10000 upscale grew past 14 GB: the run is now refused in one line before any
    allocation where its textures would not fit, and run_tiled (upscale) picks tiles that fit
    the memory available, with the same bytes."""
    from workbench.es2 import plan

    keras.utils.set_random_seed(5)
    net = es2.compile(sr_x2())
    image = _image(150, 160, seed=7)
    per_pixel = plan.memory_bytes(net.graph, (100, 100), ("GL textures",))["GL textures"] / 1e4
    room = int(4 * 300 * 320 * 3 + 2 * per_pixel * 80 ** 2)  # the output and 80-pixel tiles
    monkeypatch.setattr(plan, "available_memory", lambda: room)
    with pytest.raises(plan.OutOfMemory, match=r"^a 160x150 input to '.*' needs about 0.0 GB "
                       r"\(GL textures 0.0\); 0.0 GB available; run it on a smaller image; "
                       r"in tiles it would fit: \d+ tiles of"):
        net.run(image)
    tiled = tiling.run_tiled(net, image, max_size=4096)
    assert tiled.tiles > 1
    monkeypatch.undo()
    assert np.array_equal(tiled.output, net.run(image))
