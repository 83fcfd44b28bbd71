from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from workbench.data import datasets
from workbench.data.datasets import SRPairs, data_root, sr_images, sr_patches, sr_training_pairs
from workbench.data.images import (
    ImageError,
    degrade,
    imresize,
    modcrop,
    rgb_to_y,
    round_8bit,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    """No WORKBENCH_DATA and an empty <repo>/data."""
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    monkeypatch.setattr(datasets, "REPO_DATA", tmp_path / "repo_data")


def test_data_root_order(monkeypatch, tmp_path, no_data):
    assert data_root() is None
    repo_data = tmp_path / "repo_data"
    repo_data.mkdir()
    (repo_data / "README.md").write_text("x")
    (repo_data / ".gitkeep").write_text("")
    assert data_root() is None  # only a README and .gitkeep
    (repo_data / "sr").mkdir()
    assert data_root() == repo_data
    monkeypatch.setenv("WORKBENCH_DATA", "")  # empty: ignored
    assert data_root() == repo_data
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert data_root(repo_data / "sr") == repo_data / "sr"  # the parameter wins


def test_data_root_missing_path_and_env(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.*path parameter"):
        data_root(tmp_path / "nowhere")
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError, match="WORKBENCH_DATA=.*gone"):
        data_root()


@pytest.mark.skipif(not (SHARED / "sr" / "Set14").is_dir(), reason="shared SR data not present")
def test_sr_images_real_benchmarks():
    set5 = sr_images("Set5", root=SHARED)
    set14 = sr_images("Set14", root=SHARED)
    assert (set5.name, set5.is_benchmark, len(set5)) == ("Set5", True, 5)
    assert (set14.name, set14.is_benchmark, len(set14)) == ("Set14", True, 14)
    assert [n for n, _ in set5.images] == ["baby", "bird", "butterfly", "head", "woman"]
    bridge = dict(set14.images)["bridge"]
    assert bridge.shape[2] == 3 and bridge.dtype == np.float32
    np.testing.assert_array_equal(bridge[..., 0], bridge[..., 2])  # greyscale, replicated
    assert len(sr_images("train", root=SHARED, limit=3)) == 3


def test_sr_images_falls_back_to_skimage_samples(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))  # exists, but has no sr/
    with pytest.warns(UserWarning, match=r"NOT Set5.*fetch-data"):
        s = sr_images("Set5")
    assert not s.is_benchmark and "NOT Set5" in s.name and len(s) == 5
    for name, img in s.images:
        assert img.dtype == np.float32 and img.ndim == 3 and img.shape[2] == 3
        assert 0 <= img.min() and img.max() <= 1
    with pytest.warns(UserWarning):
        assert len(sr_images("Set14", limit=2)) == 2


def test_sr_images_empty_folder_and_limit(tmp_path):
    (tmp_path / "sr" / "Empty").mkdir(parents=True)
    with pytest.raises(ImageError, match="Empty"):
        sr_images("Empty", root=tmp_path)
    folder = tmp_path / "sr" / "Mine"
    folder.mkdir()
    for name in ("b.png", "a.jpg", "c.bmp"):
        Image.new("RGB", (8, 6), (255, 0, 0)).save(folder / name)
    (folder / "notes.txt").write_text("ignored")
    s = sr_images("Mine", root=tmp_path)
    assert [n for n, _ in s.images] == ["a", "b", "c"] and not s.is_benchmark
    assert [n for n, _ in sr_images("Mine", root=tmp_path, limit=2).images] == ["a", "b"]


def smooth(h, w):
    y, x = np.mgrid[0:h, 0:w] / 50.0
    return np.stack([0.5 + 0.4 * np.sin(x + k) * np.cos(y - k) for k in range(3)], -1).astype(
        np.float32
    )


def test_sr_training_pairs():
    imgs = [("a", smooth(41, 50)), smooth(30, 33)]
    pairs = sr_training_pairs(imgs, 2, ("bicubic_aa", "lanczos"))
    assert pairs.kernels == ("bicubic_aa", "lanczos") and pairs.scale == 2
    assert [y.shape for y in pairs.hr] == [(40, 50), (30, 32)]
    assert [[y.shape for y in lrs] for lrs in pairs.lr] == [[(20, 25)] * 2, [(15, 16)] * 2]
    rgb = modcrop(imgs[0][1], 2)
    np.testing.assert_array_equal(pairs.hr[0], rgb_to_y(rgb, range="full"))
    lanczos = rgb_to_y(degrade(rgb, 2, "lanczos"), range="full")
    np.testing.assert_array_equal(pairs.lr[0][1], lanczos)
    # pairs made once serve every net of a study; pairs of other kernels are refused
    assert sr_training_pairs(pairs, 2, ["bicubic_aa", "lanczos"]) is pairs
    with pytest.raises(ValueError, match=r"made for x2 \('bicubic_aa', 'lanczos'\)"):
        sr_training_pairs(pairs, 2, ("bicubic_aa",))


def test_sr_training_pairs_scale_augmentation():
    """FSRCNN's scale augmentation: each image again, shrunk by each factor (antialiased
    bicubic, 8-bit); checked against Pillow's own antialiased bicubic shrink."""
    rgb = smooth(80, 100)
    pairs = sr_training_pairs([rgb], 2, scales=(1.0, 0.6))
    assert pairs.scales == (1.0, 0.6) and pairs.sources == 1 and len(pairs.hr) == 2
    assert [y.shape for y in pairs.hr] == [(80, 100), (48, 60)]
    assert [lrs[0].shape for lrs in pairs.lr] == [(40, 50), (24, 30)]
    pil = Image.fromarray((rgb * 255).round().astype(np.uint8)).resize((60, 48), Image.BICUBIC)
    expected = rgb_to_y(np.asarray(pil, np.float32) / 255, range="full")
    inner = (slice(3, -3), slice(3, -3))  # edges: MATLAB mirrors, Pillow clamps
    assert np.abs(pairs.hr[1][inner] - expected[inner]).max() < 2 / 255
    np.testing.assert_array_equal(pairs.lr[1][0], rgb_to_y(
        degrade(round_8bit(np.clip(imresize(rgb, 0.6), 0, 1)), 2, "bicubic_aa"),
        range="full"))
    # pairs made once are reused only for the same scales
    assert sr_training_pairs(pairs, 2, scales=[1, 0.6]) is pairs
    with pytest.raises(ValueError, match=r"scales \(1.0, 0.6\), not x2 .* scales \(1.0,\)"):
        sr_training_pairs(pairs, 2)
    with pytest.raises(ValueError, match=r"scales=\(1.0, 1.5\): want factors in \(0, 1\]"):
        sr_training_pairs([rgb], 2, scales=(1.0, 1.5))


def coded_pairs(scale=2):
    """Pairs whose pixels encode where they come from: HR pixel (Y, X) of image i holds
    1e6*i + 1000*Y + X; its LR pixel (y, x) for kernel k holds the code of HR (scale*y, scale*x)
    plus 1e5*k (all exact in float32)."""
    hr, lr = [], []
    for i, (h, w) in enumerate([(40, 60), (24, 30), (10, 12)]):  # the last is too small
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        hr.append(1e6 * i + 1000 * y + x)
        lr.append([hr[-1][::scale, ::scale] + 1e5 * k for k in range(2)])
    return SRPairs(scale, ("bicubic_aa", "bilinear"), hr, lr)


def _undo(a, t):
    """Inverse of datasets._dihedral(a, t)."""
    return np.rot90(a[:, ::-1] if t >= 4 else a, -(t % 4))


@pytest.mark.parametrize("augment", [False, True])
def test_sr_patches_shapes_alignment_determinism(augment):
    pairs, patch, batch = coded_pairs(), 8, 32
    with pytest.warns(UserWarning, match="1 images are smaller than patch=8"):
        ds = sr_patches(pairs, patch, batch, seed=3, augment=augment)
    lr_b, hr_b = (t.numpy() for t in next(iter(ds)))
    assert lr_b.shape == (batch, 8, 8, 1) and hr_b.shape == (batch, 16, 16, 1)
    assert lr_b.dtype == np.float32 and hr_b.dtype == np.float32
    seen = set()
    for lr, hr in zip(lr_b[..., 0], hr_b[..., 0]):
        # the one transform that puts the smallest code top-left, growing fastest to the right
        t = min(range(8), key=lambda t: tuple(_undo(lr, t)[0, :2])) if augment else 0
        lr, hr = _undo(lr, t), _undo(hr, t)
        code = int(lr[0, 0])
        i, k, y0, x0 = code // 10**6, code // 10**5 % 10, code // 1000 % 100, code % 1000
        expected = 1e6 * i + 1000 * (y0 + np.arange(16))[:, None] + x0 + np.arange(16)
        np.testing.assert_array_equal(hr, expected)
        np.testing.assert_array_equal(lr, expected[::2, ::2] + 1e5 * k)
        seen.add((i, k, t))
    assert {i for i, _, _ in seen} == {0, 1} and {k for _, k, _ in seen} == {0, 1}
    assert len({t for _, _, t in seen}) == (8 if augment else 1)
    # same seed, same stream (a fresh iterator restarts it); another seed, another stream
    with pytest.warns(UserWarning):
        again = next(iter(sr_patches(pairs, patch, batch, seed=3, augment=augment)))
        other = next(iter(sr_patches(pairs, patch, batch, seed=4, augment=augment)))
    np.testing.assert_array_equal(again[0].numpy(), lr_b)
    np.testing.assert_array_equal(again[1].numpy(), hr_b)
    assert not np.array_equal(other[0].numpy(), lr_b)


def test_sr_patches_teacher_blends_the_target():
    """Distillation: the same crops as without a teacher, the target blended with the
    teacher's output on the LR batch."""
    pairs, patch, batch = coded_pairs(), 8, 6

    def nearest(lr):  # a stand-in teacher: nearest-neighbour x2
        return np.repeat(np.repeat(lr, 2, axis=1), 2, axis=2)

    with pytest.warns(UserWarning):
        lr, hr = (t.numpy() for t in next(iter(sr_patches(pairs, patch, batch, seed=5))))
        lr_t, hr_t = (t.numpy() for t in next(iter(sr_patches(
            pairs, patch, batch, seed=5, teacher=nearest, teacher_weight=0.25))))
    np.testing.assert_array_equal(lr_t, lr)
    np.testing.assert_allclose(hr_t, 0.75 * hr + 0.25 * nearest(lr), rtol=1e-6)
    assert hr_t.dtype == np.float32


def test_sr_patches_none_fit():
    with pytest.raises(ImageError, match="patch=64"), pytest.warns(UserWarning):
        sr_patches(coded_pairs(), 64, 4, seed=0)


def test_sr_patches_on_sample_photos(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    with pytest.warns(UserWarning, match="NOT train"):
        images = sr_images("train", limit=2)
    pairs = sr_training_pairs(images, 2, ("bicubic_aa", "bicubic"))
    lr, hr = next(iter(sr_patches(pairs, 24, 4, seed=0)))
    assert lr.shape == (4, 24, 24, 1) and hr.shape == (4, 48, 48, 1)
    # the LR patch is a degraded HR patch: their means agree closely
    np.testing.assert_allclose(lr.numpy().mean(axis=(1, 2)), hr.numpy().mean(axis=(1, 2)),
                               atol=0.03)
