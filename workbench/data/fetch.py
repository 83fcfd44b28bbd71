"""Download, convert and verify the data sets named in data_manifest.json under the data root.

Manifest entry: name -> {"about", "target" (folder under the data root), "default" (fetched when no
name is given), "files": [{"url", "sha256" (null: unverified), "subdir" (optional: the folder
inside an archive whose contents go to the target), "folder" (optional: the folder of the target
a single file goes to)}], "convert" (optional: a converter of
CONVERTERS that writes the target from the downloaded files instead of unpacking them)}.

Downloads go through pooch, with the manifest's sha256 as its registry, into a cache
($WORKBENCH_CACHE, else the user cache folder, e.g. ~/.cache/workbench): a file already there with
the right hash is not downloaded again, a damaged one is. Archives (.zip, .tar*) are unpacked,
other files copied. Each data set is written in a folder beside its target and renamed into place
(files.atomic_dir), so it appears complete or not at all; a SHA256SUMS file in it lists every
file's sha256 (paths relative to the folder, as `sha256sum` writes them).

A data set already present is verified against that list (or a SHA256SUMS in a parent folder
naming its files, or the manifest's hashes of single files); a corrupt one that fetch-data wrote
is fetched again, one it did not write is reported and left alone unless --force.
"""

import errno
import hashlib
import io
import json
import os
import pickle
import re
import shlex
import shutil
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.data.datasets import REPO_DATA
from workbench.files import MARKER, FolderNotReplaceable, atomic_dir, check_writable, given_path

MANIFEST = Path(__file__).with_name("data_manifest.json")
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
SUMS = "SHA256SUMS"
COMMAND = "python -m workbench fetch-data"


class FetchError(RuntimeError):
    """A download that failed or could not be verified; the message names the file or URL."""


def load_manifest(path=None):
    """The manifest dict, from `path` or the package's data_manifest.json."""
    return json.loads(Path(path or MANIFEST).read_text())


def default_root():
    """Where fetch-data writes without --root: $WORKBENCH_DATA, else <repo>/data."""
    return Path(os.environ.get("WORKBENCH_DATA") or REPO_DATA)


def default_cache():
    """Where downloads are kept: $WORKBENCH_CACHE, else the user cache folder's workbench/."""
    import pooch

    return Path(os.environ.get("WORKBENCH_CACHE") or pooch.os_cache("workbench"))


def _entries(names, manifest):
    manifest = load_manifest() if manifest is None else manifest
    unknown = [n for n in names if n not in manifest]
    if unknown:
        raise FetchError(f"unknown data set(s) {unknown}; the manifest has {sorted(manifest)}")
    return manifest


# --------------------------------------------------------------------------- what is there


@dataclass
class Check:
    """The state of one data set's folder: "ok", "missing", "corrupt" or "unverified"."""

    name: str
    folder: Path
    state: str
    checked: int = 0
    bad: list = field(default_factory=list)  # relative paths: missing or with another sha256
    source: str = ""  # the checksum list(s) used
    command: str = ""  # what fetches it (state "missing")

    def line(self):
        if self.state == "ok":
            return f"{self.name}: {self.folder} verified, {self.checked} files match {self.source}"
        if self.state == "missing":
            return f"{self.name}: {self.folder} missing; fetch it with: {self.command}"
        if self.state == "unverified":
            return (f"{self.name}: {self.folder} present, but there is no checksum list to"
                    f" verify it against ({SUMS})")
        shown = ", ".join(self.bad[:3]) + (", ..." if len(self.bad) > 3 else "")
        return (f"{self.name}: {self.folder} corrupt: {len(self.bad)} of {self.checked} files"
                f" missing or not matching {self.source} ({shown})")


def _present(folder):
    """True if folder holds anything besides the workbench's own bookkeeping files."""
    return folder.is_dir() and any(p.name not in (SUMS, MARKER) for p in folder.iterdir())


def _read_sums(path, prefix=""):
    """{path relative to the listed folder: sha256} of a SHA256SUMS file, only under prefix/."""
    out = {}
    prefix = prefix.strip("/")
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition(" ")
        name = name.lstrip(" *").removeprefix("./")
        if len(digest) != 64 or not name:
            raise FetchError(f"{path}:{n}: not a sha256sum line: {line[:80]!r}")
        if not prefix:
            out[name] = digest.lower()
        elif name.startswith(prefix + "/"):
            out[name[len(prefix) + 1:]] = digest.lower()
    return out


def _expected(entry, folder, root):
    """({relative path: sha256} the folder's files must have, description of the sources)."""
    expected, sources = {}, []
    if (folder / SUMS).is_file():
        expected.update(_read_sums(folder / SUMS))
        sources.append(SUMS)
    else:  # a SHA256SUMS higher up naming this folder's files (as the shared data has)
        root = Path(root).resolve()
        here = folder.resolve()
        for parent in here.parents:
            if (parent / SUMS).is_file():
                found = _read_sums(parent / SUMS, here.relative_to(parent).as_posix())
                if found:
                    expected.update(found)
                    sources.append(str(parent / SUMS))
                    break
            if parent == root or parent == parent.parent:
                break
    if not entry.get("convert"):
        single = {_relative(f): f["sha256"] for f in entry["files"]
                  if f.get("sha256") and not _is_archive(_basename(f["url"]))}
        if single:
            expected.update(single)  # the manifest wins where a list disagrees (it was updated)
            sources.append("the manifest")
    return expected, " and ".join(sources)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _check(name, entry, root):
    folder = Path(root) / entry["target"]
    if not _present(folder):
        return Check(name, folder, "missing", command=_command([name], root))
    expected, source = _expected(entry, folder, root)
    if not expected:
        return Check(name, folder, "unverified")

    def ok(item):
        rel, digest = item
        path = folder / rel
        return path.is_file() and _sha256(path) == digest

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        good = list(pool.map(ok, sorted(expected.items())))
    bad = [rel for rel, g in zip(sorted(expected), good) if not g]
    return Check(name, folder, "corrupt" if bad else "ok", len(expected), bad, source)


def verify(names, root, manifest=None):
    """A Check (state "ok", "missing", "corrupt" or "unverified") for each data set; downloads
    nothing. `Check.line()` is a one-line report naming the folder and the bad files."""
    manifest = _entries(names, manifest)
    return [_check(name, manifest[name], root) for name in names]


def missing(names, root=None, manifest=None):
    """(the data sets of `names` absent under root, the one command that fetches them).

    root defaults to default_root(); the command is None when nothing is missing. Presence only:
    see verify() for checksums.
    """
    manifest = _entries(names, manifest)
    root = Path(root) if root is not None else default_root()
    absent = [n for n in names if not _present(root / manifest[n]["target"])]
    return (absent, _command(absent, root)) if absent else ([], None)


def _command(names, root):
    """The fetch-data command line for names under root (--root only when not the default)."""
    root = Path(root)
    where = "" if root.resolve() == default_root().resolve() else f" --root {shlex.quote(str(root))}"
    return f"{COMMAND}{where} {' '.join(names)}"


def require(names, root=None, manifest=None):
    """Raise FetchError with one line naming the missing data sets and the command to fetch them
    (for a notebook or `make reproduce` to stop early); returns root when all are there."""
    absent, command = missing(names, root, manifest)
    if absent:
        root = Path(root) if root is not None else default_root()
        raise FetchError(f"missing data under {root}: {', '.join(absent)}; fetch with: {command}")
    return Path(root) if root is not None else default_root()


# --------------------------------------------------------------------------- fetching


def fetch(names, root, manifest=None, force=False, allow_unverified=False, cache=None):
    """Fetch the data sets `names` into `root`; returns their target folders.

    A data set already present is verified and skipped when it matches its checksum list (or has
    none); when corrupt it is fetched again if fetch-data wrote it, else FetchError (the folder is
    left alone) unless force. force fetches and replaces whatever is there. cache: the download
    folder (default: default_cache()).
    """
    manifest = _entries(names, manifest)
    cache = Path(cache) if cache is not None else default_cache()
    for name in names:  # a root that cannot be written: said before any download, not "offline?"
        check_writable(Path(root) / manifest[name]["target"], folder=True)
    targets = []
    for name in names:
        entry = manifest[name]
        target = Path(root) / entry["target"]
        targets.append(target)
        if not force:
            check = _check(name, entry, root)
            if check.state == "ok":
                print(f"{name}: {target} already present, {check.checked} files verified")
                continue
            if check.state == "unverified":
                print(f"{name}: {target} already present (no {SUMS} to verify it against),"
                      " skipped (--force to fetch again)")
                continue
            if check.state == "corrupt":
                if not (target / MARKER).is_file():
                    raise FetchError(f"{check.line()}; not written by fetch-data, so left as it"
                                     " is: move it away or fetch with --force")
                print(f"{check.line()}; fetching it again")
        files = [_download(name, src, cache, allow_unverified) for src in entry["files"]]
        try:
            repair = not force and check.state == "corrupt"
            with atomic_dir(target, force=force, repair=repair) as stage:
                if entry.get("convert"):
                    CONVERTERS[entry["convert"]](files, stage)
                else:
                    for src, file in zip(entry["files"], files):
                        dest = stage / src.get("folder", "")
                        dest.mkdir(parents=True, exist_ok=True)
                        _unpack(file, dest, src.get("subdir"))
                _write_sums(stage)
        except FolderNotReplaceable as e:
            raise FetchError(f"{name}: {e.command_line()}") from None
        print(f"{name}: {target}")
    return targets


def _relative(src) -> str:
    """Where manifest file entry ``src`` (a single file) lies in its target folder."""
    name = _basename(src["url"])
    return f"{src['folder']}/{name}" if src.get("folder") else name


def _basename(url):
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name


def _is_archive(filename):
    return filename.lower().endswith((".zip",) + TAR_SUFFIXES)


def _downloader(url, output_file, pooch_obj):
    """pooch downloader: file:// URLs are copied (tests, local mirrors), others go over HTTP(S)."""
    if urllib.parse.urlparse(url).scheme == "file":
        shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlparse(url).path), output_file)
        return
    import pooch

    pooch.HTTPDownloader(progressbar=sys.stderr.isatty(), timeout=60)(url, output_file, pooch_obj)


def _download(name, src, cache, allow_unverified):
    """The cached file of manifest file entry `src` of data set `name`, downloaded if needed."""
    import pooch
    import requests

    url, digest = src["url"], src.get("sha256")
    fname = f"{name}/{_basename(url)}"
    known = f"sha256:{digest.lower()}" if digest else None
    pup = pooch.create(path=cache, base_url="", registry={fname: known}, urls={fname: url})
    if not (Path(cache) / fname).exists():  # (said here: pooch's own logger holds the stderr
        print(f"downloading {fname} from {url}", flush=True)  # of its import, maybe closed)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")
    try:
        path = Path(pup.fetch(fname, downloader=_downloader))
    except ValueError as e:  # pooch: hash mismatch (the download is deleted)
        m = re.search(r"expected (?:sha256:)?(\w+) but got (\w+)", str(e))
        msg = f"sha256 mismatch, expected {m[1]}, got {m[2]}" if m else str(e).splitlines()[0]
        raise FetchError(f"{name}: {_basename(url)} from {url}: {msg}") from None
    except (OSError, requests.exceptions.RequestException) as e:
        if not isinstance(e, requests.exceptions.RequestException):
            _check_cache(name, Path(cache) / fname, e)
        reason = (str(e) if isinstance(e, requests.exceptions.HTTPError)
                  else type(e).__name__ if isinstance(e, requests.exceptions.RequestException)
                  else f"{type(e).__name__}: {e.strerror or e}")
        raise FetchError(
            f"{name}: cannot download {url} ({reason.splitlines()[0][:160]}); offline? fetch-data"
            " needs the internet (or copy the data set into the data root by hand)") from None
    finally:
        logger.setLevel(level)
    if digest is None:
        actual = _sha256(path)
        print(f"{path.name}: sha256 {actual} (the manifest has none to check against)")
        if not allow_unverified:
            path.unlink()
            raise FetchError(
                f"{name}: {path.name} from {url}: no sha256 in the manifest, computed {actual};"
                " add it to the manifest or pass --allow-unverified")
    return path


def _check_cache(name, file: Path, error: OSError):
    """Raise FetchError naming the download cache when ``error`` came from writing ``file``
    into it (no permission, a read-only or full disk, a file where a folder should be)."""
    try:
        check_writable(file)
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            raise OSError(f"{file.parent}: {error.strerror}")
    except OSError as bad:
        raise FetchError(f"{name}: cannot write the download cache ({bad}); give a writable "
                         "folder with --cache or $WORKBENCH_CACHE") from None


def _unpack(file, dest, subdir=None):
    """Unpack an archive (or copy a single file) into dest; subdir picks a folder inside it."""
    if not _is_archive(file.name):
        shutil.copyfile(file, dest / file.name)
        return
    out = dest / f".unpack-{file.name}"
    if file.name.lower().endswith(".zip"):
        with zipfile.ZipFile(file) as z:
            z.extractall(out)
    else:
        with tarfile.open(file) as t:
            t.extractall(out, filter="data")
    src = out / subdir if subdir else out
    if not src.is_dir():
        raise FetchError(f"{file.name}: no folder {subdir!r} inside the archive")
    for p in src.iterdir():
        shutil.move(p, dest / p.name)
    shutil.rmtree(out)


def _write_sums(folder):
    """Write folder/SHA256SUMS listing every file below it (but itself and the marker)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (SUMS, MARKER))
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        digests = list(pool.map(_sha256, files))
    (folder / SUMS).write_text("".join(
        f"{d}  ./{p.relative_to(folder).as_posix()}\n" for d, p in zip(digests, files)))


# --------------------------------------------------------------------------- converters


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays only (a pickle can otherwise run any code)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"),
               ("_codecs", "encode")}  # how Python 3's protocol 2 writes bytes

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a data pickle")
        if module.startswith("numpy.core") and not hasattr(np, "core"):
            module = module.replace("numpy.core", "numpy._core")
        return super().find_class(module, name)


def cifar10_python(files, stage):
    """Write the CIFAR-10 python archive (cifar-10-python.tar.gz: data_batch_1..5, test_batch,
    batches.meta) as image folders: stage/train/<class>/NNNN.png (data_batch_1..5) and
    stage/test/<class>/NNNN.png (test_batch), numbered per class in archive order. The class
    folders are the archive's label_names (airplane ... truck, already sorted, so the labels
    workbench.data.datasets reads from the folders equal CIFAR-10's)."""
    from PIL import Image

    (archive,) = files
    with tarfile.open(archive) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

        def load(key):
            if key not in members:
                raise FetchError(f"{archive.name}: no {key} inside (not the CIFAR-10 python archive?)")
            try:
                return _ArrayUnpickler(tar.extractfile(members[key]), encoding="bytes").load()
            except Exception as e:
                raise FetchError(f"{archive.name}: {key} is not a CIFAR-10 batch ({e})") from None

        classes = [c.decode() if isinstance(c, bytes) else c
                   for c in load("batches.meta")[b"label_names"]]
        jobs = []
        for split, keys in (("train", [f"data_batch_{i}" for i in range(1, 6)]),
                            ("test", ["test_batch"])):
            counts = [0] * len(classes)
            for c in classes:
                (stage / split / c).mkdir(parents=True)
            for key in keys:
                batch = load(key)
                data, labels = np.asarray(batch[b"data"], np.uint8), list(batch[b"labels"])
                if data.ndim != 2 or data.shape != (len(labels), 3072):
                    raise FetchError(f"{archive.name}: {key} holds data of shape {data.shape} for"
                                     f" {len(labels)} labels, want ({len(labels)}, 3072)")
                images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                for img, label in zip(images, labels):
                    if not 0 <= label < len(classes):
                        raise FetchError(f"{archive.name}: {key} has label {label}, want 0..9")
                    jobs.append((stage / split / classes[label] / f"{counts[label]:04d}.png", img))
                    counts[label] += 1

    def write(job):
        path, img = job
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        path.write_bytes(buf.getvalue())

    print(f"{archive.name}: writing {len(jobs)} PNG images (about a minute for CIFAR-10)")
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(write, jobs))


def train291(files, dest):
    """T91's BMP files as ``t91_<name>.png`` (the same pixels, lossless), BSD200's PNG files
    copied as ``bsd200_<name>.png``: one flat folder, as ``sr/train291``."""
    from PIL import Image

    for file in files:
        if file.suffix.lower() == ".bmp":
            with Image.open(file) as image:
                image.convert("RGB").save(dest / f"t91_{file.stem}.png")
        else:
            shutil.copyfile(file, dest / f"bsd200_{file.name}")


CONVERTERS = {"cifar10-python": cifar10_python, "train291": train291}


# --------------------------------------------------------------------------- command line


def add_arguments(p):
    manifest = load_manifest()
    defaults = [k for k, v in manifest.items() if v["default"]]
    p.add_argument(
        "names", nargs="*", metavar="NAME",
        help=f"data sets to fetch, of {sorted(manifest)} (default: {defaults})",
    )
    p.add_argument("--root", help="data root (default: $WORKBENCH_DATA, else <repo>/data)")
    p.add_argument("--div2k", action="store_true", help="also fetch DIV2K train and valid HR")
    p.add_argument("--force", action="store_true",
                   help="fetch again and replace what is already present")
    p.add_argument("--verify", action="store_true",
                   help="only check the data sets present against their sha256 lists; exit 1"
                        " if one is missing or corrupt")
    p.add_argument("--cache", help="download folder (default: $WORKBENCH_CACHE, else the user"
                                   " cache folder's workbench/)")
    p.add_argument(
        "--allow-unverified", action="store_true",
        help="accept files whose sha256 the manifest does not give",
    )


def run(args):
    manifest = load_manifest()
    names = list(args.names) or [k for k, v in manifest.items() if v["default"]]
    if args.div2k:
        names += [k for k in manifest if k.startswith("DIV2K") and k not in names]
    root = given_path(args.root, "--root") if args.root is not None else default_root()
    try:
        if getattr(args, "verify", False):
            checks = verify(names, root, manifest)
            for c in checks:
                print(c.line())
            return 0 if all(c.state in ("ok", "unverified") for c in checks) else 1
        fetch(names, root, manifest, force=args.force, allow_unverified=args.allow_unverified,
              cache=getattr(args, "cache", None))
    except (FetchError, OSError) as e:  # one line and exit 2, as every command's errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
