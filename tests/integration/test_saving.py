"""Saving a net (es2, es31) and exporting its page: the folder is written whole or not at all,
and a folder the user made is never replaced without ``force`` (issue 18)."""
import hashlib
import json
import os

import keras
import numpy as np
import pytest

from workbench import es2, es31, web
from workbench.__main__ import main
from workbench.es2 import saved
from workbench.folders import MARKER, FolderNotReplaceable, write_folder
from workbench.nets.models import sr_x2


def _sr(seed):
    keras.utils.set_random_seed(seed)
    return sr_x2(widths=(8, 8, 8, 8), groups=(1, 2, 1, 2))


def _contents(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _interrupt_npz(monkeypatch):
    """Make the weights' write fail, after the shaders are written (as a full disk would)."""
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez", full_disk)


def test_interrupted_es2_save_leaves_the_old_net_intact(tmp_path, monkeypatch):
    old, new = es2.compile(_sr(1)), es2.compile(_sr(2))
    old.save(tmp_path / "net")
    before = _contents(tmp_path / "net")
    _interrupt_npz(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        new.save(tmp_path / "net")
    monkeypatch.undo()
    assert _contents(tmp_path / "net") == before
    assert [p.name for p in tmp_path.iterdir()] == ["net"]  # no staging folder left
    loaded = es2.load(tmp_path / "net")
    assert [p.source for p in loaded.passes] == [p.source for p in old.passes]
    image = np.random.default_rng(0).random((6, 5, 3), np.float32)
    np.testing.assert_array_equal(loaded.emulate(image), old.emulate(image))
    new.save(tmp_path / "net")  # a finished save replaces it
    assert [p.source for p in es2.load(tmp_path / "net").passes] == [p.source for p in new.passes]


def test_interrupted_es31_save_leaves_the_old_net_intact(tmp_path, monkeypatch):
    old, new = es31.compile(_sr(1)), es31.compile(_sr(2))
    old.save(tmp_path / "net")
    before = _contents(tmp_path / "net")
    assert MARKER in before and "manifest.json" in before
    _interrupt_npz(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        new.save(tmp_path / "net")
    assert _contents(tmp_path / "net") == before


def test_save_refuses_a_users_folder_unless_forced(tmp_path):
    net = es2.compile(_sr(1))
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes")
    with pytest.raises(FolderNotReplaceable, match="mine: notes.txt was not written by the workbench"):
        net.save(folder)
    assert _contents(folder) == {"notes.txt": b"my notes"}
    net.save(folder, force=True)
    assert "notes.txt" not in _contents(folder)


def test_a_folder_with_files_the_workbench_did_not_write_is_kept(tmp_path):
    """A file added to a saved net's folder, a file changed there, and a folder of an earlier
    version (a workbench manifest, no marker) are refused by name unless forced; they used
    to be replaced whole, the user's file with them."""
    net = es2.compile(_sr(1))
    folder = tmp_path / "net"
    net.save(folder)
    net.save(folder)  # its own files only: replaced without force
    (folder / "thesis.tex").write_text("my thesis")
    with pytest.raises(FolderNotReplaceable, match=r"net: thesis.tex was not written by the "
                                                   r"workbench; .*force=True"):
        net.save(folder)
    assert (folder / "thesis.tex").read_text() == "my thesis"
    (folder / "thesis.tex").unlink()
    (folder / "vertex.glsl").write_text("// edited by hand\n")
    with pytest.raises(FolderNotReplaceable, match="vertex.glsl changed since"):
        net.save(folder)
    (folder / MARKER).unlink()
    with pytest.raises(FolderNotReplaceable, match="was not written by the workbench"):
        net.save(folder)
    net.save(folder, force=True)
    assert "edited" not in (folder / "vertex.glsl").read_text()


def test_the_swap_is_one_step_where_linux_offers_it(tmp_path, monkeypatch):
    """A process killed between the two renames of the old swap left nothing at the path;
    with RENAME_EXCHANGE there is no such moment (the second rename is never needed)."""
    from workbench import folders

    net = es2.compile(_sr(1))
    net.save(tmp_path / "net")
    renames = []
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: renames.append((a, b)) or real(a, b))
    net.save(tmp_path / "net")
    assert folders._exchange(tmp_path / "net", tmp_path / "net")  # the kernel has it here
    assert renames == [] and sorted(p.name for p in tmp_path.iterdir()) == ["net"]


def test_export_web_refuses_a_users_folder_unless_forced(tmp_path, capsys):
    es2.compile(_sr(1)).save(tmp_path / "shaders")
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<h1>my page</h1>")
    args = ["export-web", "--model", str(tmp_path / "shaders"), "--out", str(site)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {site}: index.html was not written by the workbench") and err.count("\n") == 1
    assert _contents(site) == {"index.html": b"<h1>my page</h1>"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shaders", "site"]
    assert main(args + ["--force"]) == 0
    assert "my page" not in (site / "index.html").read_text()
    assert {"webgl.json", "workbench.js", "manifest.json", MARKER} <= set(_contents(site))
    assert main(args) == 0  # its own page: replaced without --force


def test_interrupted_export_leaves_the_old_page(tmp_path, monkeypatch):
    old, new = es2.compile(_sr(1)), es2.compile(_sr(2))
    web.export(old, tmp_path / "page")
    before = _contents(tmp_path / "page")
    _interrupt_npz(monkeypatch)
    with pytest.raises(OSError):
        web.export(new, tmp_path / "page")
    assert _contents(tmp_path / "page") == before


def test_write_folder_writes_each_kind(tmp_path):
    write_folder(tmp_path / "f", {"a.txt": "text", "b.bin": b"\x00\x01", "c.json": {"k": [1]},
                                  "d.npy": np.arange(3), "e.npz": {"x/y": np.ones(2)}})
    f = tmp_path / "f"
    assert (f / "a.txt").read_text() == "text" and (f / "b.bin").read_bytes() == b"\x00\x01"
    assert json.loads((f / "c.json").read_text()) == {"k": [1]}
    np.testing.assert_array_equal(np.load(f / "d.npy"), np.arange(3))
    with np.load(f / "e.npz") as npz:
        np.testing.assert_array_equal(npz["x/y"], np.ones(2))
    with pytest.raises(TypeError, match="g.dat"):
        write_folder(tmp_path / "g", {"g.dat": object()})
    assert not (tmp_path / "g").exists()


def _refused_with(folder, manifest, change) -> str:
    """The one line es2.load refuses ``folder`` with once ``change`` edits its manifest and
    seals it again (the checks behind the manifest's own sha256; the manifest is written back
    after)."""
    from workbench import es2

    m = json.loads(json.dumps(manifest))
    change(m)
    (folder / "manifest.json").write_text(json.dumps(saved.sealed(m)))
    with pytest.raises(ValueError) as err:
        es2.load(folder)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_tampered_shader_folder_is_refused_in_one_line(tmp_path):
    """A pass pointing at another pass's shader, a shader edited after saving, a shader path
    outside the folder, a missing key and an unknown op type: one line each, naming the
    manifest or the shader, never a traceback of a KeyError or AttributeError."""
    import json

    from workbench import es2
    from workbench.nets.layers import Act, GroupConv2D

    x = keras.Input((None, None, 4))
    y = Act("bounded_relu")(GroupConv2D(8, 3, padding="same")(x))
    folder = tmp_path / "net"
    es2.compile(keras.Model(x, y)).save(folder)
    manifest = json.loads((folder / "manifest.json").read_text())

    def broken(change):
        return _refused_with(folder, manifest, change)

    assert "sha256 differs" in broken(lambda m: m["passes"][0].update(
        shader=m["passes"][1]["shader"]))
    assert "names a file outside its folder (../../../../etc/hostname)" in broken(
        lambda m: m["passes"][0].update(shader="../../../../etc/hostname"))
    assert "key 'ops' is missing" in broken(lambda m: m.pop("ops"))
    assert "op type this workbench does not know" in broken(
        lambda m: m["ops"][0].update(type="Softmax"))
    (folder / manifest["passes"][0]["shader"]).write_text("void main() {}\n")
    with pytest.raises(ValueError, match="sha256 differs"):
        es2.load(folder)


def test_a_saved_net_without_a_hash_of_each_file_is_refused(tmp_path):
    """Deleting the manifest's hashes disabled the check (a pass pointing at another pass's
    shader loaded); weights.npz had no hash; a manifest saying lowp loaded; a pickled array
    in weights.npz was a line naming no file."""
    from workbench import es2

    folder = tmp_path / "net"
    es2.compile(_sr(1)).save(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    shader = manifest["passes"][0]["shader"]
    assert {shader, "weights.npz", "vertex.glsl"} <= set(manifest["files"])

    def refused(change):
        return _refused_with(folder, manifest, change)

    assert refused(lambda m: m.pop("files")) == (
        f"{folder / 'manifest.json'}: lists no sha256 of vertex.glsl (written by an older "
        "version, or edited): write the folder again")
    assert (f"(pass {manifest['passes'][0]['name']!r}): lists no sha256 of "
            f"{manifest['passes'][1]['shader']}") in refused(  # the sha256 keys deleted
        lambda m: [p.pop("sha256") for p in m["passes"]]
        and m["passes"][0].update(shader=m["passes"][1]["shader"]))
    assert "lists no sha256 of weights.npz" in refused(lambda m: m["files"].pop("weights.npz"))
    assert "precision 'lowp' unknown; highp or mediump" in refused(
        lambda m: m.update(precision="lowp"))
    es2.load(folder)  # as saved
    pickled = {"w": np.array([object()], dtype=object)}
    np.savez(folder / "weights.npz", **pickled)
    m = json.loads(json.dumps(manifest))
    m["files"]["weights.npz"] = hashlib.sha256((folder / "weights.npz").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(saved.sealed(m)))
    with pytest.raises(ValueError, match=f"{folder / 'weights.npz'}: not arrays of numbers .*"
                                         "pickled objects are refused"):
        es2.load(folder)


def test_a_saved_dense_layer_keeps_its_es2_number_format(tmp_path):
    """The dense layer's number format is ES 2.0's (es2.compile(dense=...)): a field of its
    prepared op, not of the IR, saved with the back end's other choices; a folder saved while
    the IR's Dense held it (``number`` between ``pool`` and ``softmax``) loads the same."""
    from workbench import ir

    x = keras.Input((5, 5, 4))
    y = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="sigmoid")(x))
    model = keras.Model(x, keras.layers.Dense(3)(y))
    assert not hasattr(ir.from_model(model).ops[-1], "number")
    image = np.random.default_rng(0).random((5, 5, 4), np.float32)
    for number in ("fixed16", "float"):
        net, folder = es2.compile(model, dense=number), tmp_path / number
        net.save(folder)
        manifest = json.loads((folder / "manifest.json").read_text())
        dense = manifest["ops"][-1]
        assert (dense["type"], dense["number"]) == ("Dense", number)
        before = {k: dense[k] for k in ("type", "name", "input", "pool", "number", "softmax")}
        manifest["ops"][-1] = {**before, **dense}  # the order an older version wrote
        (folder / "manifest.json").write_text(json.dumps(saved.sealed(manifest)))
        loaded = es2.load(folder)
        op = loaded.graph.ops[-1]
        assert (type(op).__name__, op.number, op.weight_shift) == (
            "Gemv", number, net.graph.ops[-1].weight_shift)
        assert es2.net.output_spec(loaded.graph)["number"] == number
        np.testing.assert_array_equal(loaded.emulate(image), net.emulate(image))


def test_an_exported_pages_manifest_lists_every_file_of_the_page(tmp_path):
    """The page's own files (webgl.json, the scripts, the fallback programs) had no hash: an
    edited page loaded for `devices --moderngl`; now every file but the self-check's (which
    check.json ties to the manifest's bytes) is listed and checked, naming the file."""
    site = tmp_path / "site"
    web.export(es2.compile(_sr(1), es2.Target.of(draw_buffers=4)), site)
    listed = set(json.loads((site / "manifest.json").read_text())["files"])
    on_disk = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    assert any(f.startswith("fallback/") for f in listed)
    assert listed == on_disk - {"manifest.json", MARKER}
    es2.load(site)
    (site / "webgl.json").write_text((site / "webgl.json").read_text() + " ")
    with pytest.raises(ValueError, match=f"{site / 'webgl.json'}: not the file .* lists"):
        es2.load(site)


EDITS = {  # issue 58: each ran the wrong net, exit 0
    "a stride": lambda m: m["ops"][0].update(stride=2),
    "the passes reversed": lambda m: m["passes"].reverse(),
    "a uniform": lambda m: m["passes"][0]["uniform_values"].update(u_v_stride=["value", 2, 2]),
    "an activation": lambda m: m["ops"][0].update(activation="relu"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_manifest_is_refused_by_load_upscale_and_export_web(tmp_path, capsys, edit):
    """The manifest's own sha256 (``manifest_sha256``) covers what the files it lists do not
    (ops, passes, their order, uniforms): an edit is refused in one line naming it."""
    from workbench import es2

    folder, path = tmp_path / "net", tmp_path / "net" / "manifest.json"
    es2.compile(_sr(1)).save(folder)
    manifest = json.loads(path.read_text())
    assert manifest[saved.SEAL] == saved.seal(manifest, saved.SEAL)
    EDITS[edit](manifest)
    path.write_text(json.dumps(manifest, indent=2))
    message = f"{path}: edited after it was saved (manifest_sha256 differs); save it again"
    with pytest.raises(ValueError) as err:
        es2.load(folder)
    assert str(err.value) == message
    from PIL import Image

    Image.fromarray(np.full((8, 8, 3), 128, np.uint8)).save(tmp_path / "in.png")
    for command in (["upscale", str(tmp_path / "in.png"), str(tmp_path / "out.png")],
                    ["export-web", "--out", str(tmp_path / "page")]):
        assert main([*command, "--model", str(folder)]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out.png").exists() and not (tmp_path / "page").exists()


def test_a_manifest_without_its_hash_or_not_json_is_one_line(tmp_path):
    """A manifest without ``manifest_sha256`` (saved before manifests had one), truncated,
    not an object, or nested 100,000 deep (a RecursionError before): one line naming it."""
    from workbench import es2

    folder, path = tmp_path / "net", tmp_path / "net" / "manifest.json"
    es2.compile(_sr(1)).save(folder)
    text = path.read_text()
    manifest = json.loads(text)
    del manifest[saved.SEAL]
    for content, message in [
            (json.dumps(manifest), "has no manifest_sha256 (saved by an older workbench, or "
                                   "edited): save it again"),
            (text[:len(text) // 2], "not valid JSON"),
            ("[1, 2]", "not a JSON object"),
            ("[" * 100_000 + "]" * 100_000, "nested too deep"),
            ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deep")]:
        path.write_text(content)
        with pytest.raises(ValueError) as err:
            es2.load(folder)
        assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
        assert "\n" not in str(err.value)
    path.write_text(text)
    es2.load(folder)


def test_an_exported_pages_manifest_is_sealed_over_the_page_files(tmp_path):
    """export-web adds the page's files to the manifest's ``files`` and seals it again: the
    page loads as a saved net, and check.json ties to the sealed manifest's bytes."""
    from workbench import es2

    site = tmp_path / "site"
    web.export(es2.compile(_sr(1)), site)
    manifest = json.loads((site / "manifest.json").read_text())
    assert "webgl.json" in manifest["files"]
    assert manifest[saved.SEAL] == saved.seal(manifest, saved.SEAL)
    es2.load(site)
