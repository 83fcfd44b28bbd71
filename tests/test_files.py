import os

import pytest

from tests.conftest import mode
from workbench.files import atomic_path, write_text


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_path_new_file_gets_the_mode_open_would_give(tmp_path, umask, mask):
    umask(mask)
    with open(tmp_path / "plain.txt", "w") as f:
        f.write("x")
    write_text(tmp_path / "atomic.txt", "x")
    assert mode(tmp_path / "atomic.txt") == mode(tmp_path / "plain.txt") == 0o666 & ~mask


def test_atomic_path_keeps_the_mode_of_the_file_it_replaces(tmp_path, umask):
    path = tmp_path / "shared.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text(path, "new")
    assert path.read_text() == "new" and mode(path) == 0o640


def test_atomic_path_failure_leaves_old_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]
