"""One line and exit status 2 for what a user can get wrong on the command line, checked before
any work (issue 29: these were tracebacks, some only after the GPU work)."""
import re

import pytest

from workbench.__main__ import main
from workbench.files import check_writable


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_outputs_that_cannot_be_written_are_named_before_the_work(tmp_path, capsys):
    image = tmp_path / "in.png"
    from PIL import Image
    Image.new("RGB", (8, 8)).save(image)
    long_name = tmp_path / ("a" * 300 + ".png")
    assert main(["upscale", str(image), str(long_name)]) == 2
    assert "a name of 304 bytes; file systems take 255" in _one_line(capsys)
    (tmp_path / "out.png").mkdir()
    assert main(["upscale", str(image), str(tmp_path / "out.png")]) == 2
    assert "out.png: is a folder; give a file name" in _one_line(capsys)
    (tmp_path / "file").write_text("x")
    assert main(["export-web", "--out", str(tmp_path / "file" / "page")]) == 2
    assert "is a file, not a folder" in _one_line(capsys)
    for dot in (".", str(tmp_path / "sub" / "..")):
        assert main(["export-web", "--out", dot]) == 2
        assert "give the folder to write by its name" in _one_line(capsys)


@pytest.mark.parametrize("argv, says", [
    (["bench", "sr", "--size", "0"], "argument --size: '0': give a whole number >= 1"),
    (["sweep", "glsl_deploy", "-p", "precision", "highp", "--workers", "0"],
     "argument --workers: '0': give a whole number >= 1"),
])
def test_numbers_below_one_are_refused_by_the_parser(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_check_writable_refuses_what_would_fail(tmp_path):
    assert check_writable(tmp_path / "new" / "deeper" / "x.png") == tmp_path / "new" / "deeper" / "x.png"
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_writable(tmp_path / "f" / "page", folder=True)


def test_a_classifier_given_to_upscale_is_refused_before_it_runs(tmp_path, capsys):
    from PIL import Image

    from workbench.nets.models import reference_cifar10

    Image.new("RGB", (16, 16)).save(tmp_path / "in.png")
    argv = ["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
            "--model", str(reference_cifar10())]
    assert main(argv) == 2
    assert "is not an RGB SR net (its last layer is a Dense)" in _one_line(capsys)
    assert not (tmp_path / "out.png").exists()


def test_an_empty_driver_list_and_a_profile_path_are_refused(tmp_path, capsys):
    """`drivers --target ''` wrote an empty drivers.json, then a traceback (--target: the
    older name of --driver); `--profile ../..` wrote outside the figures folder."""
    for option in ("--driver", "--target"):
        assert main(["drivers", option, "", "--out", str(tmp_path)]) == 2
        assert "--driver '' names no driver" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []
    from workbench.files import figures_dir

    for profile in ("../..", "a/b", ".."):
        with pytest.raises(ValueError, match="a name, not a path"):
            figures_dir(profile)
    assert figures_dir("quick").name == "quick"


def test_a_bench_out_that_is_a_file_is_refused_before_the_runs(tmp_path, capsys):
    """`bench web --out FILE` was refused only after 43 s of browser runs."""
    (tmp_path / "taken").write_text("mine")
    for what in ("web", "beatmup"):
        assert main(["bench", what, "--out", str(tmp_path / "taken")]) == 2
        assert "taken: is a file; give a folder" in _one_line(capsys)
    assert (tmp_path / "taken").read_text() == "mine"


def test_a_driver_process_killed_by_a_signal_says_so(monkeypatch):
    """A damaged driver build said `failed (exit -7):` with nothing after it."""
    import subprocess

    from workbench.gl import GLError, drivers

    monkeypatch.setattr(drivers, "available", lambda: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, -7, b"", b""))
    with pytest.raises(GLError, match=r"\(vc4\) failed \(exit -7\): killed by signal SIGBUS, a "
                                      r"damaged build\? \(make drivers again after removing"):
        drivers.info("vc4")


def test_publish_writes_through_a_link_and_refuses_an_empty_path(tmp_path):
    """`report --publish LINK` replaced the link with a copy and left the real file stale;
    `--publish ''` was ignored."""
    from workbench.run import report

    real = tmp_path / "results.md"
    real.write_text(f"# Results\n\n{report.BEGIN}\nold\n{report.END}\n\nkept\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    report.publish("# Report\n\n## A\n\nnew numbers\n", link, "From a test.", force=True)
    assert link.is_symlink() and "new numbers" in real.read_text()
    assert "old" not in real.read_text() and real.read_text().endswith("kept\n")
    with pytest.raises(ValueError, match="--publish '': give the Markdown file"):
        report.publish("# Report\n", "", "From a test.")


def test_a_16_bit_input_warns_in_one_line(tmp_path, capsys):
    """16-bit and RGBA inputs printed two lines each (the message, then Python's source line)."""
    import numpy as np
    import png

    rows = np.full((8, 8 * 3), 30000, np.uint16)
    with open(tmp_path / "in.png", "wb") as f:
        png.Writer(8, 8, greyscale=False, bitdepth=16).write(f, rows)
    assert main(["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    warned = [line for line in err if "16-bit image" in line]
    assert warned == [f"warning: {tmp_path / 'in.png'}: 16-bit image converted to float "
                      "(divided by 65535)"]
    assert not any("warnings.warn" in line for line in err)


@pytest.mark.parametrize("swallowed", [False, True])
def test_ctrl_c_always_exits_130(monkeypatch, capsys, swallowed):
    """A Ctrl-C that a library caught (JAX's clean-up did) let the command finish with 0."""
    import os
    import signal

    from workbench.run import cli

    def work(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            if not swallowed:
                raise
        return 0

    monkeypatch.setattr(cli, "_report", work)
    assert main(["report"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    assert signal.getsignal(signal.SIGINT) is not cli._interrupt  # handed back


def test_publish_replaces_only_the_report_it_put_there(tmp_path, capsys):
    """`report --publish` replaced whatever lay between the report lines, a user's edits
    there included; now only its own signed report, unchanged (or nothing), unless --force."""
    from workbench.run import report

    results = tmp_path / "results.md"
    results.write_text(f"# Results\n\n{report.BEGIN}\n{report.END}\n")
    report.publish("# Report\n\n## A\n\nfirst\n", results, "From a test.")
    report.publish("# Report\n\n## A\n\nsecond\n", results, "From a test.")  # its own
    assert "second" in results.read_text() and "first" not in results.read_text()
    results.write_text(results.read_text().replace("second", "second, as I corrected it"))
    edited = results.read_text()
    with pytest.raises(FileExistsError, match=f"{results}: what is between its report lines is "
                                              "not the report the workbench put there"):
        report.publish("# Report\n\n## A\n\nthird\n", results, "From a test.")
    assert results.read_text() == edited
    unsigned = tmp_path / "old.md"  # as an older version published it
    unsigned.write_text(f"{report.BEGIN}\n_From make reproduce._\n\nold\n{report.END}\n")
    with pytest.raises(FileExistsError, match="put there unsigned by an older version"):
        report.publish("# Report\n\n## A\n\nnew\n", unsigned, "From a test.")
    report.publish("# Report\n\n## A\n\nnew\n", unsigned, "From a test.", force=True)
    assert "old" not in unsigned.read_text() and "new" in unsigned.read_text()


def test_a_users_file_in_out_is_kept_unless_forced(tmp_path, capsys):
    """`drivers --out DIR` overwrote the user's own DIR/drivers.md (bench --out, devices --out
    the same); now refused in one line before any work, naming it."""
    (tmp_path / "drivers.md").write_text("my notes")
    (tmp_path / "peers.md").write_text("my notes")
    assert main(["drivers", "--target", "vc4", "--out", str(tmp_path)]) == 2
    assert _one_line(capsys) == (f"error: {tmp_path}: drivers.md was not written by the "
                                 f"workbench (no .workbench-folder); move it away, or use "
                                 f"--force to replace drivers.md, drivers.json, "
                                 f"drivers_instructions.png, drivers_instructions.svg")
    assert main(["bench", "web", "--out", str(tmp_path)]) == 2
    assert "peers.md was not written by the workbench" in _one_line(capsys)
    (tmp_path / "devices.json").write_text("{}")
    assert main(["devices", "--out", str(tmp_path)]) == 2
    assert "devices.json was not written by the workbench" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["devices.json", "drivers.md",
                                                          "peers.md"]


def test_a_size_over_the_memory_available_is_refused_before_any_work(tmp_path, capsys):
    """`export-web --model dynamic.onnx --input-size 100000x100000` grew to 19.5 GB until the
    OOM killer took it; `bench sr|web --size 100000` was a MemoryError traceback."""
    import onnx

    from tests.ir.onnx_graphs import NEWEST
    from workbench import ir
    from workbench.ir.to_onnx import to_onnx
    from workbench.nets.models import load_model, reference_sr

    model = tmp_path / "dynamic.onnx"
    onnx.save(to_onnx(ir.from_keras(load_model(reference_sr())), NEWEST), model)
    assert main(["export-web", "--model", str(model), "--input-size", "100000x100000",
                 "--out", str(tmp_path / "page")]) == 2
    assert re.fullmatch(r"error: a 100000x100000 input to 'dynamic' needs about \d+\.\d GB "
                        r"\(GL textures [\d.]+, emulator [\d.]+, reference [\d.]+\); [\d.]+ GB "
                        r"available; give a smaller --input-size", _one_line(capsys))
    assert not (tmp_path / "page").exists()
    assert main(["bench", "sr", "--size", "100000"]) == 2
    assert _one_line(capsys).endswith("GB available; give a smaller --size")


def test_the_memory_check_takes_a_classifier_file_at_its_own_size():
    """`bench web --model classifier.onnx`: the check crashed on the unprepared dense layer;
    a fixed-size net is checked at its size, not --size."""
    import argparse

    from workbench.files import project_root
    from workbench.run.cli import _require_memory

    model = str(project_root() / "models" / "cifar10_plain.onnx")
    assert _require_memory(argparse.Namespace(model=model, size=100000, what="web")) is None


@pytest.mark.parametrize("argv", [["drivers", "--model", "sr4"],
                                  ["bench", "web", "--model", "dogs"]])
def test_an_unknown_model_name_is_one_line_naming_the_known_ones(argv, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert _one_line(capsys).startswith(f"error: unknown model name {argv[-1]!r}; known: sr, ")


@pytest.mark.parametrize("command", [["bench", "sr", "--images", "all"],
                                     ["bench", "activation", "--gl", "llvmpipe"],
                                     ["bench", "web", "--precision", "highp"],
                                     ["bench", "es31", "--out", "x"]])
def test_a_bench_takes_only_its_own_options(command, capsys):
    """`bench` is one sub-command a benchmark: another benchmark's option is refused by the
    parser (it was one positional with six meanings, every option accepted by all)."""
    with pytest.raises(SystemExit) as exit:
        main(command)
    assert exit.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


COMPILE_OPTIONS = ("--calibration", "--headroom", "--mean", "--std", "--force-deploy",
                   "--shared", "--scaled-bits", "--tune")


@pytest.mark.parametrize("command", [["upscale"], ["export-web"], ["bundle"], ["bench", "sr"],
                                     ["bench", "draw-buffers"]])
def test_every_command_that_compiles_a_net_lists_the_compile_options(command, capsys):
    """`bench sr` and `bench draw-buffers` took none (issue 57): each command that compiles
    a net lists them in --help; draw-buffers, without --device, all but --tune."""
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    wanted = COMPILE_OPTIONS[:-1] if command[-1] == "draw-buffers" else COMPILE_OPTIONS
    assert [o for o in COMPILE_OPTIONS if o in out] == list(wanted)


def test_bench_sr_passes_the_compile_options_to_the_compiler(monkeypatch, capsys):
    """Given to `bench sr`, they reach es2.compile as upscale's reach es2.load_net; --tune
    without a device's driver is refused in one line."""
    from workbench.studies import bench
    given = {}
    monkeypatch.setattr("workbench.run.cli._require_memory", lambda args: None)
    monkeypatch.setattr(bench, "bench_sr", lambda model, size, repeat, target, **options:
                        given.update(options) or {})
    monkeypatch.setattr(bench, "print_sr", lambda result: None)
    assert main(["bench", "sr", "--shared", "--scaled-bits", "8", "--calibration", "Set5",
                 "--mean", "0.5", "--std", "0.25", "--headroom", "0.1"]) == 0
    assert given == {"shared": True, "scaled_bits": 8, "calibration": "Set5", "mean": (0.5,),
                     "std": (0.25,), "headroom": 0.1}
    given.clear()
    assert main(["bench", "sr", "--shared", "4096"]) == 0 and given == {"shared": 4096}
    monkeypatch.undo()
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "sr", "--shared", "0"])
    assert exit_.value.code == 2 and "give a whole number >= 1" in capsys.readouterr().err
    assert main(["bench", "sr", "--size", "8", "--tune"]) == 2
    assert "names no driver to check with" in _one_line(capsys)
