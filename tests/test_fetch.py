import argparse
import hashlib
import io
import json
import pickle
import re
import socket
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from workbench import fetch as fetch_mod
from workbench.datasets import image_folder_files, sr_images
from workbench.fetch import (
    FetchError, add_parser, fetch, load_manifest, main, missing, require, verify)
from workbench.files import MARKER
from workbench.images import load_image


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Downloads go to a cache folder of the test's own."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


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
    return sorted(p.name for p in (root / "sr").iterdir()) if (root / "sr").exists() else []


def test_fetch_zip_from_file_url(tmp_path, toy_zip):
    root = tmp_path / "data"
    assert fetch(["Toy"], root, manifest_for(toy_zip, sha256(toy_zip))) == [root / "sr" / "Toy"]
    assert images_in(root / "sr" / "Toy") == ["one.png", "two.png"]
    np.testing.assert_array_equal(load_image(root / "sr" / "Toy" / "two.png")[0, 0], [0, 0, 1])
    assert len(sr_images("Toy", root=root)) == 2
    assert leftovers(root) == ["Toy"]  # no staging folder or download left


def images_in(folder):
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".png")


def test_fetch_skips_present_and_verified_unless_forced(tmp_path, toy_zip, capsys):
    root = tmp_path / "data"
    good = manifest_for(toy_zip, sha256(toy_zip))
    fetch(["Toy"], root, good)
    (root / "sr" / "Toy" / "extra.txt").write_text("mine")
    broken = manifest_for(tmp_path / "missing.zip", "0" * 64)
    fetch(["Toy"], root, broken)  # present and intact: no download attempted
    assert "already present, 2 files verified" in capsys.readouterr().out
    fetch(["Toy"], root, good, force=True)
    assert images_in(root / "sr" / "Toy") == ["one.png", "two.png"]
    assert not (root / "sr" / "Toy" / "extra.txt").exists()
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
    assert main(["--root", str(root)]) == 0  # default names
    assert len(sr_images("Toy", root=root)) == 2
    assert main(["--root", str(root), "Bogus"]) == 1
    assert "Bogus" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fetch-data", "--root", str(root), "--force", "Toy"])
    assert args.func is fetch_mod.run and args.func(args) == 0


def test_package_manifest_is_well_formed():
    manifest = load_manifest()
    assert {"Set5", "Set14", "train", "DIV2K_train", "DIV2K_valid", "cifar10"} <= set(manifest)
    assert [k for k, v in manifest.items() if v["default"]] == ["Set5", "Set14", "train", "cifar10"]
    for name, entry in manifest.items():
        assert entry["target"].startswith(("sr/", "cls/")) and entry["files"], name
        assert entry.get("convert") in (None, *fetch_mod.CONVERTERS), name
        for f in entry["files"]:
            assert f["url"].startswith("https://"), f
            assert f["sha256"] is None or re.fullmatch("[0-9a-f]{64}", f["sha256"]), f
    assert len(manifest["Set5"]["files"]) == 5 and len(manifest["Set14"]["files"]) == 14
    assert manifest["cifar10"]["target"] == "cls/cifar10"
    assert manifest["cifar10"]["files"] == [{
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "sha256": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"}]
