import hashlib
import json
import re
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from workbench.data import fetch as fetch_mod
from workbench.data.datasets import sr_images
from workbench.data.fetch import FetchError, fetch, load_manifest
from workbench.data.images import load_image
from workbench.run.cli import main


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def pngs(tmp_path):
    """Two small PNGs in tmp_path/src/pics."""
    folder = tmp_path / "src" / "pics"
    folder.mkdir(parents=True)
    for name, colour in [("one.png", (255, 0, 0)), ("two.png", (0, 0, 255))]:
        Image.new("RGB", (6, 4), colour).save(folder / name)
    return folder


@pytest.fixture
def toy_zip(pngs):
    path = pngs.parent / "toy.zip"
    with zipfile.ZipFile(path, "w") as z:
        for p in pngs.iterdir():
            z.write(p, f"pics/{p.name}")
    return path


def manifest_for(path, digest, subdir="pics"):
    entry = {"url": path.as_uri(), "sha256": digest}
    if subdir:
        entry["subdir"] = subdir
    return {"Toy": {"about": "test", "target": "sr/Toy", "default": True, "files": [entry]}}


def leftovers(root):
    return sorted(p.name for p in (root / "sr").iterdir())


def test_fetch_zip_from_file_url(tmp_path, toy_zip):
    root = tmp_path / "data"
    assert fetch(["Toy"], root, manifest_for(toy_zip, sha256(toy_zip))) == [root / "sr" / "Toy"]
    assert sorted(p.name for p in (root / "sr" / "Toy").iterdir()) == ["one.png", "two.png"]
    np.testing.assert_array_equal(load_image(root / "sr" / "Toy" / "two.png")[0, 0], [0, 0, 1])
    assert len(sr_images("Toy", root=root)) == 2
    assert leftovers(root) == ["Toy"]  # no staging folder or download left


def test_fetch_skips_present_unless_forced(tmp_path, toy_zip, capsys):
    root = tmp_path / "data"
    good = manifest_for(toy_zip, sha256(toy_zip))
    fetch(["Toy"], root, good)
    (root / "sr" / "Toy" / "extra.txt").write_text("mine")
    broken = manifest_for(tmp_path / "missing.zip", "0" * 64)
    fetch(["Toy"], root, broken)  # present: no download attempted
    assert "already present" in capsys.readouterr().out
    fetch(["Toy"], root, good, force=True)
    assert sorted(p.name for p in (root / "sr" / "Toy").iterdir()) == ["one.png", "two.png"]
    assert leftovers(root) == ["Toy"]


def test_fetch_wrong_sha256_names_both_hashes_and_leaves_nothing(tmp_path, toy_zip):
    root = tmp_path / "data"
    wrong = "ab" * 32
    with pytest.raises(FetchError) as e:
        fetch(["Toy"], root, manifest_for(toy_zip, wrong))
    message = str(e.value)
    assert "toy.zip" in message and wrong in message and sha256(toy_zip) in message
    assert leftovers(root) == []


def test_fetch_unverified_refused_unless_allowed(tmp_path, toy_zip):
    root = tmp_path / "data"
    with pytest.raises(FetchError, match=f"{sha256(toy_zip)}.*--allow-unverified"):
        fetch(["Toy"], root, manifest_for(toy_zip, None))
    assert leftovers(root) == []
    fetch(["Toy"], root, manifest_for(toy_zip, None), allow_unverified=True)
    assert len(sr_images("Toy", root=root)) == 2


def test_fetch_tar_and_single_file(tmp_path, pngs):
    tar = pngs.parent / "toy.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(pngs, arcname="inner")
    root = tmp_path / "data"
    fetch(["Toy"], root, manifest_for(tar, sha256(tar), subdir="inner"))
    assert len(sr_images("Toy", root=root)) == 2
    one = pngs / "one.png"
    fetch(["Toy"], root, manifest_for(one, sha256(one), subdir=None), force=True)
    assert [n for n, _ in sr_images("Toy", root=root).images] == ["one"]


def test_fetch_unknown_name(tmp_path, toy_zip):
    with pytest.raises(FetchError, match="Nope.*Toy"):
        fetch(["Nope"], tmp_path, manifest_for(toy_zip, None))


def test_cli(tmp_path, toy_zip, monkeypatch, capsys):
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(json.dumps(manifest_for(toy_zip, sha256(toy_zip))))
    monkeypatch.setattr(fetch_mod, "MANIFEST", manifest_path)
    root = tmp_path / "data"
    assert main(["fetch-data", "--root", str(root)]) == 0  # default names
    assert len(sr_images("Toy", root=root)) == 2
    assert main(["fetch-data", "--root", str(root), "Bogus"]) == 1
    assert "Bogus" in capsys.readouterr().err
    assert main(["fetch-data", "--root", str(root), "--force", "Toy"]) == 0


def test_package_manifest_is_well_formed():
    manifest = load_manifest()
    assert {"Set5", "Set14", "train", "DIV2K_train", "DIV2K_valid"} <= set(manifest)
    assert [k for k, v in manifest.items() if v["default"]] == ["Set5", "Set14", "train"]
    for name, entry in manifest.items():
        assert entry["target"].startswith("sr/") and entry["files"], name
        for f in entry["files"]:
            assert f["url"].startswith("https://"), f
            assert f["sha256"] is None or re.fullmatch("[0-9a-f]{64}", f["sha256"]), f
    assert len(manifest["Set5"]["files"]) == 5 and len(manifest["Set14"]["files"]) == 14
