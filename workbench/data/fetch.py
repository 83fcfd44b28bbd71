"""Download the data sets named in data_manifest.json into the data root.

Manifest entry: name -> {"about", "target" (folder under the data root), "default" (fetched when no
name is given), "files": [{"url", "sha256" (null: unverified), "subdir" (optional: the folder
inside an archive whose contents go to the target)}]}. Archives (.zip, .tar*) are unpacked, other
files copied. Each data set appears in its target folder complete or not at all.
"""

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from workbench.data.datasets import REPO_DATA

MANIFEST = Path(__file__).with_name("data_manifest.json")
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


class FetchError(RuntimeError):
    """A download that failed or could not be verified; the message names the file or URL."""


def load_manifest(path=None):
    """The manifest dict, from `path` or the package's data_manifest.json."""
    return json.loads(Path(path or MANIFEST).read_text())


def fetch(names, root, manifest=None, force=False, allow_unverified=False):
    """Fetch the data sets `names` into `root`; returns their target folders.

    A target folder that already holds files is skipped unless force.
    """
    manifest = load_manifest() if manifest is None else manifest
    unknown = [n for n in names if n not in manifest]
    if unknown:
        raise FetchError(f"unknown data set(s) {unknown}; the manifest has {sorted(manifest)}")
    targets = []
    for name in names:
        target = Path(root) / manifest[name]["target"]
        targets.append(target)
        if target.is_dir() and any(target.iterdir()) and not force:
            print(f"{name}: {target} already present, skipped (--force to fetch again)")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        # Stage next to the target (same file system), so that the final rename is atomic.
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
            staging = Path(tmp) / "staging"
            staging.mkdir()
            for src in manifest[name]["files"]:
                file = _download(src["url"], Path(tmp), src.get("sha256"), allow_unverified)
                _unpack(file, staging, src.get("subdir"))
            if target.exists():
                target.rename(Path(tmp) / "old")  # removed with tmp
            staging.rename(target)
        print(f"{name}: {target}")
    return targets


def _download(url, folder, sha256, allow_unverified):
    """Download url into folder with a progress bar and check its sha256; the file's path."""
    path = folder / Path(urllib.parse.urlparse(url).path).name
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url) as r, open(path, "wb") as f:
            size = int(r.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=path.name) as bar:
                while chunk := r.read(1 << 20):
                    f.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        actual = digest.hexdigest()
        if sha256 is None:
            print(f"{path.name}: sha256 {actual} (the manifest has none to check against)")
            if not allow_unverified:
                raise FetchError(
                    f"{path.name} from {url}: no sha256 in the manifest, computed {actual};"
                    " add it to the manifest or pass --allow-unverified"
                )
        elif actual != sha256.lower():
            raise FetchError(
                f"{path.name} from {url}: sha256 mismatch, expected {sha256}, got {actual}"
            )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _unpack(file, dest, subdir=None):
    """Unpack an archive (or move a single file) into dest; subdir picks a folder inside it."""
    name = file.name.lower()
    if not (name.endswith(".zip") or name.endswith(TAR_SUFFIXES)):
        shutil.move(file, dest / file.name)
        return
    out = file.with_name(file.name + ".d")
    if name.endswith(".zip"):
        with zipfile.ZipFile(file) as z:
            z.extractall(out)
    else:
        with tarfile.open(file) as t:
            t.extractall(out, filter="data")
    file.unlink()
    src = out / subdir if subdir else out
    if not src.is_dir():
        raise FetchError(f"{file.name}: no folder {subdir!r} inside the archive")
    for p in src.iterdir():
        shutil.move(p, dest / p.name)


def default_root():
    """Where fetch-data writes without --root: $WORKBENCH_DATA, else <repo>/data."""
    return Path(os.environ.get("WORKBENCH_DATA") or REPO_DATA)


def add_arguments(p):
    manifest = load_manifest()
    defaults = [k for k, v in manifest.items() if v["default"]]
    p.add_argument(
        "names", nargs="*", metavar="NAME",
        help=f"data sets to fetch, of {sorted(manifest)} (default: {defaults})",
    )
    p.add_argument("--root", help="data root (default: $WORKBENCH_DATA, else <repo>/data)")
    p.add_argument("--div2k", action="store_true", help="also fetch DIV2K train and valid HR")
    p.add_argument("--force", action="store_true", help="fetch again what is already present")
    p.add_argument(
        "--allow-unverified", action="store_true",
        help="accept files whose sha256 the manifest does not give",
    )


def run(args):
    manifest = load_manifest()
    names = list(args.names) or [k for k, v in manifest.items() if v["default"]]
    if args.div2k:
        names += [k for k in manifest if k.startswith("DIV2K") and k not in names]
    root = Path(args.root) if args.root else default_root()
    try:
        fetch(names, root, manifest, force=args.force, allow_unverified=args.allow_unverified)
    except (FetchError, OSError) as e:
        print(f"fetch-data: {e}", file=sys.stderr)
        return 1
    return 0
