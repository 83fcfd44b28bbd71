"""The data sets of data_manifest.json and what of them is under the data root, checked against
their checksum lists; fetching them: :mod:`workbench.data.fetch`.

Manifest entry: name -> {"about", "target" (folder under the data root), "default" (fetched when no
name is given), "files": [{"url", "sha256" (null: unverified), "subdir" (optional: the folder
inside an archive whose contents go to the target), "folder" (optional: the folder of the target
a single file goes to)}], "convert" (optional: a converter of
:data:`workbench.data.converters.CONVERTERS` that writes the target from the downloaded files
instead of unpacking them)}.

A data set's folder holds a SHA256SUMS file listing every file's sha256 (paths relative to the
folder, as `sha256sum` writes them).  A data set present is verified against that list (or a
SHA256SUMS in a parent folder naming its files, or the manifest's hashes of single files).
"""

import json
import os
import shlex
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workbench.data.datasets import REPO_DATA
from workbench.files import file_sha256
from workbench.folders import MARKER

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


def entries(names, manifest):
    """The manifest (default: the package's), checked to name every data set of ``names``."""
    manifest = load_manifest() if manifest is None else manifest
    unknown = [n for n in names if n not in manifest]
    if unknown:
        raise FetchError(f"unknown data set(s) {unknown}; the manifest has {sorted(manifest)}")
    return manifest


def _relative(src) -> str:
    """Where manifest file entry ``src`` (a single file) lies in its target folder."""
    name = basename(src["url"])
    return f"{src['folder']}/{name}" if src.get("folder") else name


def basename(url):
    """The file name a URL ends in."""
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name


def is_archive(filename):
    """Whether ``filename`` is an archive fetch-data unpacks (.zip, .tar*)."""
    return filename.lower().endswith((".zip",) + TAR_SUFFIXES)


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


def write_sums(folder):
    """Write folder/SHA256SUMS listing every file below it (but itself and the marker)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (SUMS, MARKER))
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        digests = list(pool.map(file_sha256, files))
    (folder / SUMS).write_text("".join(
        f"{d}  ./{p.relative_to(folder).as_posix()}\n" for d, p in zip(digests, files)))


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
                  if f.get("sha256") and not is_archive(basename(f["url"]))}
        if single:
            expected.update(single)  # the manifest wins where a list disagrees (it was updated)
            sources.append("the manifest")
    return expected, " and ".join(sources)


def state_of(name, entry, root) -> Check:
    """The :class:`Check` of data set ``name`` (manifest entry ``entry``) under ``root``."""
    folder = Path(root) / entry["target"]
    if not _present(folder):
        return Check(name, folder, "missing", command=_command([name], root))
    expected, source = _expected(entry, folder, root)
    if not expected:
        return Check(name, folder, "unverified")

    def ok(item):
        rel, digest = item
        path = folder / rel
        return path.is_file() and file_sha256(path) == digest

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        good = list(pool.map(ok, sorted(expected.items())))
    bad = [rel for rel, g in zip(sorted(expected), good) if not g]
    return Check(name, folder, "corrupt" if bad else "ok", len(expected), bad, source)


def verify(names, root, manifest=None):
    """A Check (state "ok", "missing", "corrupt" or "unverified") for each data set; downloads
    nothing. `Check.line()` is a one-line report naming the folder and the bad files."""
    manifest = entries(names, manifest)
    return [state_of(name, manifest[name], root) for name in names]


def missing(names, root=None, manifest=None):
    """(the data sets of `names` absent under root, the one command that fetches them).

    root defaults to default_root(); the command is None when nothing is missing. Presence only:
    see verify() for checksums.
    """
    manifest = entries(names, manifest)
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
