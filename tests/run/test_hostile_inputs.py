"""Issue 58: what a user (or a hostile file) can hand the workbench gets one line naming the
file or option and what is wrong: no traceback, no hang, nothing silently wrong.  Each test
failed before its fix."""
import contextlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from workbench.files import checked_file, read_json
from workbench.folders import MARKER, FolderNotReplaceable, write_folder
from workbench.gl import beatmup
from workbench.nets import beatmup_model as bm
from workbench.run import report
from workbench.run.cli import main


@contextlib.contextmanager
def deadline(seconds):
    """Fail (TimeoutError) what takes longer than ``seconds``: a hang, not a wait."""
    def expired(signum, frame):
        raise TimeoutError(f"no answer in {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


# --- A: tracebacks -------------------------------------------------------------------------

def test_publish_onto_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
    with pytest.raises(OSError, match=r"--publish .*loop.md: cannot be read \(Too many"):
        report.publish("# Workbench report\n", tmp_path / "loop.md", "test")


def _chunks(path, edit):
    """A small chunk file (a 12x12 sampler, a conv, a grouped conv, pool, dense, softmax)
    with ``edit(ops)`` applied to its description."""
    from tests.nets.test_beatmup_model import _tiny

    _tiny(path, np.random.default_rng(0))
    chunks = bm.read_chunks(path)
    spec = yaml.safe_load(chunks[""])
    edit({op["_name"]: op for op in spec["ops"]})
    chunks[""] = yaml.safe_dump(spec).encode()
    bm.write_chunks(path, chunks)
    return path


def test_a_chunk_file_with_groups_0_names_the_op(tmp_path):
    path = _chunks(tmp_path / "g.chunks", lambda ops: ops["c1"].update(groups=0))
    with pytest.raises(bm.BeatmupModelError, match=r"g.chunks: op 'c1' \(conv2d\): groups 0: "
                       "give a whole number >= 1"):
        bm.load(path)


def _onnx_conv(path, shape, kernel_shape=None):
    """A 3 -> 3 channel 3x3 conv and a ReLU, input ``shape`` (NCHW, names for dynamic
    dimensions); ``kernel_shape`` an attribute that ONNX Runtime checks against the weights
    (the checker does not)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    extra = {"kernel_shape": kernel_shape} if kernel_shape else {}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], **extra),
             helper.make_node("Relu", ["c"], ["y"])]
    weights = numpy_helper.from_array(np.full((3, 3, 3, 3), 0.05, np.float32), "w")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_an_input_size_that_a_partly_dynamic_onnx_input_contradicts_is_one_line(tmp_path):
    from workbench.nets.model_files import load_model

    path = _onnx_conv(tmp_path / "partly.onnx", [1, 3, "h", 16])
    assert load_model(path, (8, 16)).input_size == (8, 16)
    with pytest.raises(ValueError, match=r"partly.onnx: input 'x' has a fixed width of 16; "
                       r"the input size 8x8 \(height x width\) gives 8"):
        load_model(path, (8, 8))


def test_a_net_onnx_runtime_cannot_run_is_one_line_naming_it(tmp_path):
    from workbench.nets.model_files import load_model
    from workbench.nets.onnx_model import OnnxRuntimeError

    model = load_model(_onnx_conv(tmp_path / "bad.onnx", [1, 3, 8, 8], kernel_shape=[5, 5]))
    with pytest.raises(OnnxRuntimeError, match=r"bad.onnx: ONNX Runtime cannot run it \(Fail: "
                       "Non-zero status code"):
        model(np.zeros((1, 8, 8, 3), np.float32))


def test_a_marker_nested_too_deep_is_a_foreign_folder_not_a_recursion_error(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (folder / MARKER).write_text("[" * 100_000)
    with pytest.raises(FolderNotReplaceable, match=f"a.txt was not written by the workbench "
                       f"\\(its {MARKER} is empty, unreadable"):
        write_folder(folder, {"a.txt": "b"})
    with pytest.raises(ValueError, match=f"{MARKER}: nested too deep"):
        read_json(folder / MARKER)


# --- B: hangs ------------------------------------------------------------------------------

def test_publish_onto_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "fifo.md")
    with deadline(5), pytest.raises(OSError, match=r"--publish .*fifo.md: is a FIFO"):
        report.publish("# Workbench report\n", tmp_path / "fifo.md", "test")


def test_a_saved_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    """A saved folder's vertex.glsl (any file es2.load checks) or manifest a FIFO."""
    os.mkfifo(tmp_path / "vertex.glsl")
    with deadline(5), pytest.raises(ValueError, match="vertex.glsl: is a FIFO"):
        checked_file(tmp_path, "vertex.glsl", {"vertex.glsl": "0" * 64}, "manifest.json")
    os.mkfifo(tmp_path / "manifest.json")
    with deadline(5), pytest.raises(ValueError, match="manifest.json: is a FIFO"):
        read_json(tmp_path / "manifest.json")


def _stand_in(tmp_path, monkeypatch, app, body):
    """A shell script named as Beatmup's ``app``, in a build of stand-ins."""
    monkeypatch.setenv("WORKBENCH_BEATMUP", str(tmp_path))
    (tmp_path / "build").mkdir(exist_ok=True)
    (tmp_path / ".built").write_text("")
    for name in beatmup.APPS:
        script = tmp_path / "build" / name
        script.write_text(f"#!/bin/sh\n{body if name == app else 'exit 0'}\n")
        script.chmod(0o755)


def test_a_hung_x2_is_stopped_in_seconds(tmp_path, monkeypatch):
    _stand_in(tmp_path, monkeypatch, "X2", 'echo "Compiling shaders..."; exec sleep 60')
    monkeypatch.setattr(beatmup, "STALL_S", 1)
    monkeypatch.setattr(beatmup, "ATTEMPTS", 1)
    with deadline(8), pytest.raises(beatmup.BeatmupError, match="X2 hung 1 times"):
        beatmup.upscale([np.zeros((4, 4, 3), np.uint8)])


def test_beatmup_dies_with_the_command_even_killed(tmp_path, monkeypatch):
    pid_file = tmp_path / "x2.pid"
    _stand_in(tmp_path, monkeypatch, "X2", f'echo $$ > {pid_file}; exec sleep 60')
    code = ("import numpy as np; from workbench.gl import beatmup; "
            "beatmup.upscale([np.zeros((4, 4, 3), np.uint8)])")
    command = subprocess.Popen([sys.executable, "-c", code])
    try:
        with deadline(30):
            while not pid_file.exists() or not pid_file.read_text().strip():
                time.sleep(0.1)
        command.kill()
        command.wait()
        app = int(pid_file.read_text())
        for _ in range(50):
            if not os.path.exists(f"/proc/{app}") or " Z " in open(f"/proc/{app}/stat").read():
                break
            time.sleep(0.1)
        else:
            os.kill(app, signal.SIGKILL)
            pytest.fail("the app outlived the killed command")
    finally:
        if command.poll() is None:
            command.kill()


def test_bench_beatmup_removes_its_temporary_folders(tmp_path, monkeypatch):
    import tempfile

    from workbench.studies import beatmup as study

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("MESA_SHADER_CACHE_DIR", raising=False)
    monkeypatch.setattr(beatmup, "available", lambda: None)
    model = _chunks(tmp_path / "m.chunks", lambda ops: None)

    def stop(*args, **kwargs):
        assert os.environ["MESA_SHADER_CACHE_DIR"].startswith(str(tmp_path))
        raise KeyboardInterrupt
    monkeypatch.setattr(study, "_run", stop)
    with pytest.raises(KeyboardInterrupt):
        study.run(model)
    assert list(tmp_path.glob("workbench-mesa-cache-*")) == []
    assert "MESA_SHADER_CACHE_DIR" not in os.environ


# --- C: silently wrong ---------------------------------------------------------------------

@pytest.mark.parametrize("value", ["no", "False", 0, -4096, 1.5, None])
def test_shared_takes_a_bool_or_a_pixel_count_only(value):
    from workbench import es2

    with pytest.raises(ValueError, match=f"shared must be True, False or a pixel count, not "
                                         f"{value!r}"):
        es2.compile(object(), shared=value)


@pytest.mark.parametrize("argv", [["drivers", "--driver", "vc4", "--out", ""],
                                  ["bench", "web", "--out", ""]])
def test_an_empty_out_is_refused(argv, capsys):
    assert main(argv) == 2
    assert _one_line(capsys).startswith("error: --out '': an empty path; give a name")


def test_force_over_a_file_makes_a_folder_of_folder_permissions(tmp_path):
    (tmp_path / "out").write_text("a file")
    (tmp_path / "out").chmod(0o644)
    write_folder(tmp_path / "out", {"a.txt": "a"}, force=True)
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "out" / "a.txt").read_text() == "a"


def test_sample_takes_a_float_image_in_0_1():
    image = np.full((8, 8, 3), 0.5, np.float32)
    picture = bm.sample(image, bm.InputStep(4, 4))
    assert picture.dtype == np.uint8 and (picture == 128).all()
    with pytest.raises(ValueError, match=r"a float image takes values in \[0, 1\]"):
        bm.sample(image * 255, bm.InputStep(4, 4))


# --- D: late or unclear --------------------------------------------------------------------

def test_bench_beatmup_reads_its_model_before_any_run(tmp_path, monkeypatch):
    from workbench.studies import beatmup as study
    from workbench.studies import beatmup_measure

    monkeypatch.setattr(beatmup, "available", lambda: None)
    monkeypatch.setattr(beatmup_measure, "x2",
                        lambda *a, **k: pytest.fail("X2 ran before the check"))
    with pytest.raises(FileNotFoundError, match="nope.chunks: no such file"):
        study.run(tmp_path / "nope.chunks")


@pytest.mark.parametrize("edit, says", [
    (lambda ops: ops["c0"].update(kernel_size="five"),
     r"op 'c0' \(conv2d\): kernel_size 'five': give a whole number >= 1"),
    (lambda ops: ops["fc"].pop("output_dims"), r"op 'fc' \(dense\): no output_dims"),
    (lambda ops: ops["pool"].update(size=9, operator="max"),
     r"op 'pool' \(pooling2d\): .*"),
])
def test_the_chunk_importer_names_the_file_and_op(tmp_path, edit, says):
    path = _chunks(tmp_path / "m.chunks", edit)
    with pytest.raises(bm.BeatmupModelError, match="m.chunks: " + says):
        bm.load(path)


@pytest.mark.parametrize("make, says", [
    (lambda p: p.mkdir(), "is a folder, not a file"),
    (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\), not a file"),
])
def test_load_model_says_what_the_path_is(tmp_path, make, says):
    from workbench.nets.model_files import load_model

    make(tmp_path / "m.keras")
    with deadline(5), pytest.raises(OSError, match=f"m.keras: {says}"):
        load_model(tmp_path / "m.keras")
    with deadline(5), pytest.raises(OSError, match="/dev/zero: is a device, not a file"):
        load_model("/dev/zero")


def test_an_upper_case_keras_suffix_is_taken(tmp_path):
    from workbench.nets.model_files import load_model
    from workbench.nets.models import reference_sr

    (tmp_path / "REF.KERAS").write_bytes(reference_sr().read_bytes())
    assert load_model(tmp_path / "REF.KERAS").count_params() > 0


@pytest.mark.parametrize("make, says", [
    (lambda p: p.mkdir(), "is a folder, not a file"),
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a file"),
    (lambda p: None, "no such file"),
    (lambda p: p.write_bytes("chien,caf\xe9\n".encode("latin-1")),
     "not UTF-8 text (byte 0xe9 at offset 9)"),
])
def test_labels_that_are_no_text_file_are_refused(tmp_path, make, says, capsys):
    make(tmp_path / "labels.txt")
    with deadline(5):
        code = main(["export-web", "--labels", str(tmp_path / "labels.txt"),
                     "--out", str(tmp_path / "page")])
    assert code == 2
    assert _one_line(capsys).startswith(f"error: --labels {tmp_path / 'labels.txt'}: {says}")
    assert not (tmp_path / "page").exists()


def test_fetch_data_names_a_root_it_cannot_write(tmp_path, capsys):
    (tmp_path / "root").write_text("a file")
    assert main(["fetch-data", "Set5", "--root", str(tmp_path / "root")]) == 2
    assert _one_line(capsys).startswith(f"error: {tmp_path / 'root'}/sr/Set5: "
                                        f"{tmp_path / 'root'} is a file, not a folder")
