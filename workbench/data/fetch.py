"""Download, convert and verify the data sets named in data_manifest.json under the data root
(the manifest and the checks of what is there: :mod:`workbench.data.catalog`).

Downloads go through pooch, with the manifest's sha256 as its registry, into a cache
($WORKBENCH_CACHE, else the user cache folder, e.g. ~/.cache/workbench): a file already there with
the right hash is not downloaded again, a damaged one is. Archives (.zip, .tar*) are unpacked,
other files copied, or a converter of :mod:`workbench.data.converters` writes the data set. Each
data set is written in a folder beside its target and renamed into place (folders.atomic_dir),
so it appears complete or not at all, with its SHA256SUMS.

A data set already present is verified (:func:`workbench.data.catalog.verify`); a corrupt one
that fetch-data wrote is fetched again, one it did not write is reported and left alone unless
--force.
"""

import errno
import os
import re
import shutil
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from workbench.data.catalog import (SUMS, FetchError, basename, default_root, entries,
                                    is_archive, load_manifest, state_of, verify, write_sums)
from workbench.data.converters import CONVERTERS
from workbench.files import check_writable, file_sha256, given_path
from workbench.folders import MARKER, FolderNotReplaceable, atomic_dir


def default_cache():
    """Where downloads are kept: $WORKBENCH_CACHE, else the user cache folder's workbench/."""
    import pooch

    return Path(os.environ.get("WORKBENCH_CACHE") or pooch.os_cache("workbench"))


def fetch(names, root, manifest=None, force=False, allow_unverified=False, cache=None):
    """Fetch the data sets `names` into `root`; returns their target folders.

    A data set already present is verified and skipped when it matches its checksum list (or has
    none); when corrupt it is fetched again if fetch-data wrote it, else FetchError (the folder is
    left alone) unless force. force fetches and replaces whatever is there. cache: the download
    folder (default: default_cache()).
    """
    manifest = entries(names, manifest)
    cache = Path(cache) if cache is not None else default_cache()
    for name in names:  # a root that cannot be written: said before any download, not "offline?"
        check_writable(Path(root) / manifest[name]["target"], folder=True)
    targets = []
    for name in names:
        entry = manifest[name]
        target = Path(root) / entry["target"]
        targets.append(target)
        if not force:
            check = state_of(name, entry, root)
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
                write_sums(stage)
        except FolderNotReplaceable as e:
            raise FetchError(f"{name}: {e.command_line()}") from None
        print(f"{name}: {target}")
    return targets


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
    fname = f"{name}/{basename(url)}"
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
        raise FetchError(f"{name}: {basename(url)} from {url}: {msg}") from None
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
        actual = file_sha256(path)
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
    if not is_archive(file.name):
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
