"""workbench.folders: folders written whole and replaced only where the workbench wrote them."""
import os

import pytest

from tests.conftest import mode
from workbench.files import write_text
from workbench.folders import MARKER, FolderNotReplaceable, atomic_dir, owned_files


def test_atomic_dir_creates_folder_with_marker_and_umask_mode(tmp_path, umask):
    umask(0o027)
    target = tmp_path / "sub" / "set"
    with atomic_dir(target) as stage:
        assert stage.parent == target.parent and stage != target and not target.exists()
        (stage / "a.png").write_bytes(b"a")
    assert sorted(p.name for p in target.iterdir()) == sorted([MARKER, "a.png"])
    assert mode(target) == 0o777 & ~0o027
    assert os.listdir(target.parent) == ["set"]  # no staging folder left


def test_atomic_dir_replaces_its_own_folder(tmp_path):
    target = tmp_path / "set"
    with atomic_dir(target) as stage:
        (stage / "old.png").write_bytes(b"old")
    with atomic_dir(target) as stage:
        (stage / "new.png").write_bytes(b"new")
    assert sorted(p.name for p in target.iterdir()) == sorted([MARKER, "new.png"])
    assert os.listdir(tmp_path) == ["set"]


def test_atomic_dir_refuses_a_users_folder_unless_forced(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    with pytest.raises(FolderNotReplaceable, match=f"{target}: notes.txt was not written by the "
                                                   f"workbench \\(no {MARKER}\\).*pass force=True"):
        with atomic_dir(target) as stage:
            (stage / "x").write_text("x")
    assert os.listdir(target) == ["notes.txt"] and os.listdir(tmp_path) == ["mine"]
    with atomic_dir(target, force=True) as stage:
        (stage / "x").write_text("x")
    assert sorted(os.listdir(target)) == sorted([MARKER, "x"])


def test_atomic_dir_fills_an_empty_existing_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty") as stage:
        (stage / "x").write_text("x")
    assert (tmp_path / "empty" / "x").read_text() == "x"


def test_atomic_dir_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("file")
    with pytest.raises(FolderNotReplaceable, match="not a folder"):
        with atomic_dir(tmp_path / "f"):
            pass
    assert (tmp_path / "f").read_text() == "file"


def test_atomic_dir_interrupted_write_leaves_old_folder(tmp_path):
    target = tmp_path / "set"
    with atomic_dir(target) as stage:
        (stage / "good.png").write_bytes(b"good")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target) as stage:
            (stage / "half.png").write_bytes(b"ha")
            raise KeyboardInterrupt
    assert sorted(os.listdir(target)) == sorted([MARKER, "good.png"])
    assert os.listdir(tmp_path) == ["set"]


KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from workbench import folders
folders._exchange = lambda a, b: False  # the fallback: two renames
rename = os.rename
def rename_then_die(a, b):
    rename(a, b)
    if str(b).endswith(".old"):
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename_then_die
with folders.atomic_dir(sys.argv[1]) as stage:
    (stage / "new.txt").write_text("new")
"""


def test_atomic_dir_puts_back_a_folder_a_kill_left_aside(tmp_path):
    """Killed between the fallback's two renames, a run leaves nothing at the target and the
    old folder hidden as ``.set.<pid>.*.old`` beside the new one
    (``.partial``); the next run puts the old one back and removes the other."""
    import subprocess
    import sys

    target = tmp_path / "set"
    with atomic_dir(target) as stage:
        (stage / "old.txt").write_text("old")
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(target)],
                            check=False)
    assert killed.returncode == -9 and not target.exists()
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".old", ".partial"]
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target):
            assert (target / "old.txt").read_text() == "old"
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["set"] and (target / "old.txt").read_text() == "old"


def test_atomic_dir_removes_dead_runs_partial_folders_only(tmp_path):
    """A ``.partial`` folder of a process that is gone is removed by the next run; one of a
    live process (its work in progress) stays."""
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    leftovers = [tmp_path / f".set.{dead.pid}.ab12.partial",
                 tmp_path / f".set.{os.getpid()}.cd34.partial"]
    for p in leftovers:
        p.mkdir()
        (p / "half.png").write_bytes(b"ha")
    with atomic_dir(tmp_path / "set") as stage:
        (stage / "a.txt").write_text("a")
    assert sorted(os.listdir(tmp_path)) == sorted([leftovers[1].name, "set"])


@pytest.mark.parametrize("marker", ["", "{}", '{"note": "written by the workbench"}',
                                    '{"files": null}', '{"files": []}', "\udcff not json"])
def test_a_marker_that_lists_nothing_proves_nothing(tmp_path, marker):
    """An empty, old-format, null or unreadable marker let the folder be replaced whole (the
    user's thesis.tex with it; `{"files": null}` was a TypeError); now refused naming it."""
    target = tmp_path / "out"
    target.mkdir()
    (target / MARKER).write_text(marker, errors="surrogateescape")
    (target / "thesis.tex").write_text("mine")
    with pytest.raises(FolderNotReplaceable, match=f"{target}: thesis.tex was not written by "
                       f"the workbench \\(its {MARKER} is empty, unreadable or of an old"):
        with atomic_dir(target) as stage:
            (stage / "x").write_text("x")
    assert (target / "thesis.tex").read_text() == "mine"
    (target / "thesis.tex").unlink()
    with atomic_dir(target) as stage:  # the marker alone: nothing to lose
        (stage / "x").write_text("x")
    assert sorted(os.listdir(target)) == sorted([MARKER, "x"])


def test_a_folder_the_user_added_even_empty_stops_the_replacement(tmp_path):
    """An empty sub-folder the user added to an export was removed on re-export; the
    workbench's own sub-folders, empty ones included, are listed and replaced."""
    target = tmp_path / "out"
    with atomic_dir(target) as stage:
        (stage / "shaders").mkdir()
        (stage / "shaders" / "a.glsl").write_text("a")
        (stage / "empty").mkdir()
    with atomic_dir(target) as stage:  # all its own: replaced
        (stage / "shaders").mkdir()
        (stage / "shaders" / "a.glsl").write_text("a")
        (stage / "empty").mkdir()
    (target / "shaders" / "drafts").mkdir()
    with pytest.raises(FolderNotReplaceable, match=f"{target}: shaders/drafts/ was not written"):
        with atomic_dir(target):
            pass
    assert (target / "shaders" / "drafts").is_dir()
    (target / "shaders" / "drafts").rmdir()
    (target / "link").symlink_to(tmp_path)
    with pytest.raises(FolderNotReplaceable, match="link is not a file or folder the workbench"):
        with atomic_dir(target):
            pass


def test_owned_files_keeps_a_users_file_of_the_same_name(tmp_path):
    """`drivers --out DIR` overwrote the user's own DIR/drivers.md: a file a command writes into
    a folder the user may own is replaced only when the folder's marker lists it unchanged."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "drivers.md").write_text("my notes")
    with pytest.raises(FolderNotReplaceable, match=f"{out}: drivers.md was not written by the "
                       "workbench .*force=True to replace drivers.md, drivers.json"):
        with owned_files(out, ["drivers.md", "drivers.json"]):
            raise AssertionError("refused before the work")
    assert (out / "drivers.md").read_text() == "my notes"
    with owned_files(out, ["drivers.md", "drivers.json"], force=True):
        write_text(out / "drivers.md", "table")
    with owned_files(out, ["drivers.md", "drivers.json"]):  # its own now: no force needed
        write_text(out / "drivers.md", "table 2")
        write_text(out / "drivers.json", "{}")
    (out / "drivers.json").write_text('{"edited": 1}')
    with pytest.raises(FolderNotReplaceable, match="drivers.json changed since"):
        with owned_files(out, ["drivers.md", "drivers.json"]):
            pass
    (out / "drivers.json").unlink()
    (out / "notes.txt").write_text("more notes")
    with pytest.raises(FolderNotReplaceable, match="notes.txt was not written"):
        with atomic_dir(out):  # the folder whole: the user's other files stop it
            pass
