import errno
import hashlib
import io
import json
import os
import pickle
import re
import socket
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from workbench.data import catalog, converters
from workbench.data.datasets import image_folder_files, sr_images
from workbench.data.catalog import FetchError, load_manifest, missing, require, verify
from workbench.data.fetch import fetch
from workbench.data.images import load_image
from workbench.folders import MARKER
from workbench.run.cli import main


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
    monkeypatch.setattr(catalog, "MANIFEST", manifest_path)
    root = tmp_path / "data"
    assert main(["fetch-data", "--root", str(root)]) == 0  # default names
    assert len(sr_images("Toy", root=root)) == 2
    assert main(["fetch-data", "--root", str(root), "Bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Bogus" in err and err.count("\n") == 1
    assert main(["fetch-data", "--root", str(root), "--force", "Toy"]) == 0


def test_package_manifest_is_well_formed():
    manifest = load_manifest()
    assert {"Set5", "Set14", "train", "DIV2K_train", "DIV2K_valid", "cifar10"} <= set(manifest)
    assert [k for k, v in manifest.items() if v["default"]] == ["Set5", "Set14", "train", "cifar10"]
    for name, entry in manifest.items():
        assert entry["target"].startswith(("sr/", "cls/")) and entry["files"], name
        assert entry.get("convert") in (None, *converters.CONVERTERS), name
        for f in entry["files"]:
            assert f["url"].startswith("https://"), f
            assert f["sha256"] is None or re.fullmatch("[0-9a-f]{64}", f["sha256"]), f
    assert len(manifest["Set5"]["files"]) == 5 and len(manifest["Set14"]["files"]) == 14
    assert manifest["cifar10"]["target"] == "cls/cifar10"
    assert manifest["cifar10"]["files"] == [{
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "sha256": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"}]


# --- CIFAR-10, verification, corruption, offline, missing ----------------------------------

CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                 "ship", "truck"]


def _batch(rng, n, name):
    labels = [i % 10 for i in range(10)] + rng.integers(0, 10, n - 10).tolist()
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    return {b"batch_label": name.encode(), b"labels": labels, b"data": data,
            b"filenames": [f"img_{i}.png".encode() for i in range(n)]}


@pytest.fixture
def cifar_archive(tmp_path):
    """A tiny cifar-10-python.tar.gz in the official layout; returns (path, {member: batch})."""
    rng = np.random.default_rng(0)
    batches = {f"data_batch_{i}": _batch(rng, 12 + i, f"training batch {i} of 5")
               for i in range(1, 6)}
    batches["test_batch"] = _batch(rng, 14, "testing batch 1 of 1")
    meta = {b"num_cases_per_batch": 12, b"label_names": [c.encode() for c in CIFAR_CLASSES],
            b"num_vis": 3072}
    path = tmp_path / "src" / "cifar-10-python.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in [("batches.meta", meta), *batches.items(), ("readme.html", None)]:
            raw = pickle.dumps(obj, protocol=2) if obj is not None else b"<html></html>"
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path, batches


def cifar_manifest(path):
    return {"cifar10": {"about": "test", "target": "cls/cifar10", "default": True,
                        "files": [{"url": path.as_uri(), "sha256": sha256(path)}],
                        "convert": "cifar10-python"}}


def expected_split(batches, members):
    """[(label, HxWx3 uint8)] of the members' images in archive order."""
    out = []
    for m in members:
        images = batches[m][b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        out += list(zip(batches[m][b"labels"], images))
    return out


def test_cifar10_archive_becomes_image_folders(tmp_path, cifar_archive):
    archive, batches = cifar_archive
    root = tmp_path / "data"
    assert fetch(["cifar10"], root, cifar_manifest(archive)) == [root / "cls" / "cifar10"]
    folder = root / "cls" / "cifar10"
    for split, members in [("train", [f"data_batch_{i}" for i in range(1, 6)]),
                           ("test", ["test_batch"])]:
        paths, labels, names = image_folder_files(folder, split)
        assert names == CIFAR_CLASSES
        want = expected_split(batches, members)
        assert len(paths) == len(want)
        # image_folder_files orders by class, then file name: the archive order within a class
        want = sorted(want, key=lambda lw: lw[0])  # stable: keeps archive order per class
        assert labels.tolist() == [label for label, _ in want]
        for path, (label, img) in zip(paths, want):
            assert path.suffix == ".png" and path.parent.name == CIFAR_CLASSES[label]
            np.testing.assert_array_equal(np.asarray(Image.open(path)), img)
    [check] = verify(["cifar10"], root, cifar_manifest(archive))
    assert check.state == "ok" and check.checked == 5 * 12 + 15 + 14, check.line()
    assert (folder / MARKER).is_file() and sorted(p.name for p in (root / "cls").iterdir()) == [
        "cifar10"]


def test_cifar10_archive_without_test_batch_is_refused(tmp_path, cifar_archive):
    archive, _ = cifar_archive
    bad = tmp_path / "src" / "bad.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            if not m.name.endswith("test_batch"):
                dst.addfile(m, src.extractfile(m))
    root = tmp_path / "data"
    with pytest.raises(FetchError, match="bad.tar.gz: no test_batch inside"):
        fetch(["cifar10"], root, cifar_manifest(bad))
    assert list((root / "cls").iterdir()) == []  # no half-written data set


def test_cifar10_pickle_running_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "src" / "evil.tar.gz"
    path.parent.mkdir()
    with tarfile.open(path, "w:gz") as tar:
        raw = pickle.dumps({b"label_names": Evil()}, protocol=2)
        info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    with pytest.raises(FetchError, match=r"batches.meta is not a CIFAR-10 batch \(\w+\.print is not allowed"):
        fetch(["cifar10"], tmp_path / "data", cifar_manifest(path))


def corrupt(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_verify_finds_corruption_and_fetch_repairs_its_own_folder(tmp_path, toy_zip, capsys):
    root = tmp_path / "data"
    manifest = manifest_for(toy_zip, sha256(toy_zip))
    fetch(["Toy"], root, manifest)
    one = root / "sr" / "Toy" / "one.png"
    good = one.read_bytes()
    corrupt(one)
    [check] = verify(["Toy"], root, manifest)
    assert (check.state, check.bad, check.checked) == ("corrupt", ["one.png"], 2)
    assert "corrupt" in check.line() and "one.png" in check.line()
    (root / "sr" / "Toy" / "two.png").unlink()
    assert verify(["Toy"], root, manifest)[0].bad == ["one.png", "two.png"]
    capsys.readouterr()
    toy_zip.unlink()  # fetched again from the download cache
    fetch(["Toy"], root, manifest)
    assert "fetching it again" in capsys.readouterr().out
    assert one.read_bytes() == good and (root / "sr" / "Toy" / "two.png").is_file()
    assert verify(["Toy"], root, manifest)[0].state == "ok"
    assert leftovers(root) == ["Toy"]


def test_cli_verify_reports_without_fetching(tmp_path, toy_zip, monkeypatch, capsys):
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(json.dumps(manifest_for(toy_zip, sha256(toy_zip))))
    monkeypatch.setattr(catalog, "MANIFEST", manifest_path)
    root = tmp_path / "data"
    assert main(["fetch-data", "--root", str(root), "--verify"]) == 1
    assert capsys.readouterr().out == (f"Toy: {root / 'sr' / 'Toy'} missing; fetch it with:"
                                       f" python -m workbench fetch-data --root {root} Toy\n")
    assert not root.exists()
    assert main(["fetch-data", "--root", str(root)]) == 0
    assert main(["fetch-data", "--root", str(root), "--verify"]) == 0
    assert "verified, 2 files match SHA256SUMS" in capsys.readouterr().out
    corrupt(root / "sr" / "Toy" / "two.png")
    before = (root / "sr" / "Toy" / "two.png").read_bytes()
    assert main(["fetch-data", "--root", str(root), "--verify"]) == 1
    assert "corrupt: 1 of 2 files" in capsys.readouterr().out
    assert (root / "sr" / "Toy" / "two.png").read_bytes() == before  # reported, not fetched


def test_corrupt_folder_not_written_by_fetch_is_reported_and_kept(tmp_path, toy_zip, pngs):
    root = tmp_path / "data"
    (root / "sr" / "Toy").mkdir(parents=True)
    for p in pngs.iterdir():
        (root / "sr" / "Toy" / p.name).write_bytes(p.read_bytes())
    (root / "sr" / "SHA256SUMS").write_text(  # as the shared data folder lists its files
        "".join(f"{sha256(p)}  ./Toy/{p.name}\n" for p in sorted(pngs.iterdir()))
        + f"{'0' * 64}  ./Other/x.png\n")
    manifest = manifest_for(toy_zip, sha256(toy_zip))
    [check] = verify(["Toy"], root, manifest)
    assert check.state == "ok" and check.checked == 2 and "sr/SHA256SUMS" in check.source
    corrupt(root / "sr" / "Toy" / "one.png")
    kept = (root / "sr" / "Toy" / "one.png").read_bytes()
    with pytest.raises(FetchError) as e:
        fetch(["Toy"], root, manifest)
    message = str(e.value)
    assert "\n" not in message and str(root / "sr" / "Toy") in message
    assert "one.png" in message and "--force" in message
    assert (root / "sr" / "Toy" / "one.png").read_bytes() == kept
    fetch(["Toy"], root, manifest, force=True)
    assert (root / "sr" / "Toy" / "one.png").read_bytes() == (pngs / "one.png").read_bytes()


def test_single_files_are_verified_against_the_manifest(tmp_path, pngs):
    one = pngs / "one.png"
    manifest = manifest_for(one, sha256(one), subdir=None)
    root = tmp_path / "data"
    fetch(["Toy"], root, manifest)
    (root / "sr" / "Toy" / "SHA256SUMS").unlink()
    [check] = verify(["Toy"], root, manifest)
    assert (check.state, check.source) == ("ok", "the manifest")
    corrupt(root / "sr" / "Toy" / "one.png")
    assert verify(["Toy"], root, manifest)[0].bad == ["one.png"]


def test_single_files_go_to_their_folders_and_verify_there(tmp_path, pngs):
    """A manifest file's ``folder`` (the Imagewoof photos' class folders)."""
    files = [{"url": (pngs / n).as_uri(), "sha256": sha256(pngs / n), "folder": f}
             for n, f in (("one.png", "n1"), ("two.png", "n2"))]
    manifest = {"Toy": {"about": "test", "target": "cls/Toy", "default": False, "files": files}}
    root = tmp_path / "data"
    fetch(["Toy"], root, manifest)
    folder = root / "cls" / "Toy"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.png")) == [
        "n1/one.png", "n2/two.png"]
    (folder / "SHA256SUMS").unlink()
    assert verify(["Toy"], root, manifest)[0].state == "ok"
    corrupt(folder / "n2" / "two.png")
    assert verify(["Toy"], root, manifest)[0].bad == ["n2/two.png"]


def test_damaged_download_in_cache_is_downloaded_again(tmp_path, toy_zip, cache):
    root = tmp_path / "data"
    manifest = manifest_for(toy_zip, sha256(toy_zip))
    fetch(["Toy"], root, manifest)
    cached = cache / "Toy" / "toy.zip"
    corrupt(cached)
    fetch(["Toy"], root, manifest, force=True)
    assert sha256(cached) == sha256(toy_zip)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("where", ["file", "http"])
def test_offline_message_names_data_set_and_url(tmp_path, cifar_archive, where):
    archive, _ = cifar_archive
    manifest = cifar_manifest(archive)
    url = ((tmp_path / "nowhere" / archive.name).as_uri() if where == "file"
           else f"http://127.0.0.1:{closed_port()}/{archive.name}")
    manifest["cifar10"]["files"][0]["url"] = url
    root = tmp_path / "data"
    with pytest.raises(FetchError) as e:
        fetch(["cifar10"], root, manifest)
    message = str(e.value)
    assert message.startswith(f"cifar10: cannot download {url} (") and "offline" in message
    assert "\n" not in message
    assert not root.exists()


@pytest.mark.parametrize("how", ["file in the way", "disk full"])
def test_an_unwritable_cache_is_named_not_called_offline(tmp_path, toy_zip, monkeypatch, how):
    """A download cache that cannot be written is not the network's fault: the message names
    the cache and the way to move it, not "offline?"."""
    manifest, cache = manifest_for(toy_zip, sha256(toy_zip)), tmp_path / "cache"
    if how == "file in the way":
        cache.write_text("a file where the cache folder should be")
    else:
        def full(url, output_file, pooch_obj):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(output_file))
        monkeypatch.setattr("workbench.data.fetch._downloader", full)
    with pytest.raises(FetchError) as e:
        fetch(["Toy"], tmp_path / "data", manifest, cache=cache)
    message = str(e.value)
    assert message.startswith("Toy: cannot write the download cache (") and "--cache" in message
    assert "offline" not in message and "\n" not in message
    assert (how != "disk full") or "No space left on device" in message


def test_missing_names_what_to_fetch_and_the_command(tmp_path, toy_zip, monkeypatch):
    root = tmp_path / "data"
    manifest = manifest_for(toy_zip, sha256(toy_zip))
    manifest["Other"] = dict(manifest["Toy"], target="sr/Other")
    assert missing(["Toy", "Other"], root, manifest) == (
        ["Toy", "Other"], f"python -m workbench fetch-data --root {root} Toy Other")
    fetch(["Toy"], root, manifest)
    assert missing(["Toy", "Other"], root, manifest) == (
        ["Other"], f"python -m workbench fetch-data --root {root} Other")
    with pytest.raises(FetchError) as e:
        require(["Toy", "Other"], root, manifest)
    assert str(e.value) == (f"missing data under {root}: Other; fetch with:"
                            f" python -m workbench fetch-data --root {root} Other")
    monkeypatch.setenv("WORKBENCH_DATA", str(root))  # the default root: no --root needed
    assert missing(["Other"], None, manifest) == (["Other"], "python -m workbench fetch-data Other")
    fetch(["Other"], root, manifest)
    assert missing(["Toy", "Other"], root, manifest) == ([], None)
    assert require(["Toy", "Other"], root, manifest) == root
    with pytest.raises(FetchError, match="Nope"):
        missing(["Nope"], root, manifest)


SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "sr" / "SHA256SUMS").is_file(), reason="no shared data folder")
def test_shared_data_verifies():
    checks = verify(["Set5", "Set14", "train", "cifar10", "imagewoof_val"], SHARED)
    assert [c.state for c in checks] == ["ok"] * 5, [c.line() for c in checks]
    assert [c.checked for c in checks[:2]] == [5, 14]


def test_train291_from_file_urls(tmp_path):
    """The train291 entry: T91's BMPs become t91_*.png with the same pixels, BSD200's PNGs are
    copied as bsd200_*.png, checked against the manifest's sha256 (file URLs stand in for
    the repository's raw files); the real entry lists all 291 files with their sha256."""
    rng = np.random.default_rng(0)
    bmp, png = tmp_path / "t1.bmp", tmp_path / "100075.png"
    Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(bmp)
    Image.fromarray(rng.integers(0, 256, (4, 7, 3), dtype=np.uint8)).save(png)
    real = load_manifest()["train291"]
    entry = {**real, "files": [{"url": f.as_uri(), "sha256": sha256(f)} for f in (bmp, png)]}
    root = tmp_path / "data"
    fetch(["train291"], root, {"train291": entry})
    folder = root / "sr" / "train291"
    assert images_in(folder) == ["bsd200_100075.png", "t91_t1.png"]
    np.testing.assert_array_equal(np.asarray(Image.open(folder / "t91_t1.png")),
                                  np.asarray(Image.open(bmp)))
    assert (folder / "bsd200_100075.png").read_bytes() == png.read_bytes()
    assert verify(["train291"], root, {"train291": entry})[0].state == "ok"
    assert len(real["files"]) == 291 and not real["default"]
    assert sum(f["url"].endswith(".bmp") for f in real["files"]) == 91
    assert all(len(f["sha256"]) == 64 for f in real["files"])
