"""TensorFlow's start-up lines are dropped from stderr; everything else passes unchanged."""
import os
import subprocess
import sys
import threading

from workbench import quiet

NOISE = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1795618010.286432   23012 port.cc:153] oneDNN custom operations are on. You "
    b"may see slightly different numerical results.\n",
    b"I0000 00:00:1795618010.287777   23012 cudart_stub.cc:31] Could not find cuda drivers on "
    b"your machine, GPU will not be used.\n",
    b"[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.\n",
    b"E0000 00:00:1795677509.000183    3907 util.cc:131] oneDNN supports DT_HALF only on "
    b"platforms with AVX-512. Falling back to the default Eigen-based implementation if "
    b"present.\n",
]
KEPT = [b"error: model x.keras not found\n", b"\rGPU:  50%|#####     | 1/2", b"\rGPU: 100%|#####"
        b"#####| 2/2\n", b"I0000 00:00:1.0 other.cc:1] a message we do not know\n",
        b"W0000 a warning\n", b"[IPKernelApp] ERROR | something else\n"]


def test_forward_drops_only_the_noise_lines():
    read, write = os.pipe()
    out_read, out_write = os.pipe()
    thread = threading.Thread(target=quiet._forward, args=(read, out_write))
    thread.start()
    for piece in [NOISE[0], KEPT[0], NOISE[1][:30], NOISE[1][30:] + KEPT[1], KEPT[2], NOISE[2],
                  KEPT[3] + NOISE[3] + KEPT[4], NOISE[4][:5], NOISE[4][5:] + KEPT[5]]:
        os.write(write, piece)
    os.close(write)
    thread.join(5)
    os.close(out_write)
    with os.fdopen(out_read, "rb") as f:
        assert f.read() == b"".join(KEPT)
    os.close(read)


def test_children_inherit_the_filter(tmp_path):
    """A child process (as a notebook kernel is) writes noise and a real line to its fd 2."""
    child = ("import os; os.write(2, " + repr(b"".join(NOISE[:2]) + b"real line\n" + NOISE[2])
             + ")")
    parent = ("import subprocess, sys\nfrom workbench.quiet import filtered_stderr\n"
              f"with filtered_stderr():\n    subprocess.run([sys.executable, '-c', {child!r}])\n"
              "    print('parent line', file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, timeout=60)
    assert done.returncode == 0
    assert done.stderr == b"real line\nparent line\n"


def test_a_workbench_function_imports_tensorflow_without_its_start_up_lines():
    """``import workbench`` and then anything that imports TensorFlow (a plain python, a
    notebook's kernel): its start-up lines are gone, a later line on stderr is not."""
    import pytest

    def stderr_of(code):
        env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                              env=env)
        assert done.returncode == 0, done.stderr.decode()
        return done.stderr.splitlines(keepends=True)

    bare = stderr_of("import tensorflow")
    if not any(quiet.is_noise(line) for line in bare):
        pytest.skip("TensorFlow prints no start-up lines on this machine")
    lines = stderr_of("import workbench.nets.models, os; os.write(2, b'after\\n')")
    assert not any(quiet.is_noise(line) for line in lines), lines
    assert lines[-1] == b"after\n"
