"""Folders the workbench writes whole (:func:`atomic_dir`, :func:`write_folder`) or writes named
files into (:func:`owned_files`), and replaces only where it can show it wrote what is there: a
marker file (:data:`MARKER`) in each lists every file it wrote with its size and sha256, and
every sub-folder.  Files one at a time: :mod:`workbench.files`."""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from pathlib import Path

from workbench.files import (check_writable, content_bytes, given_path, json_text, mode_for,
                             read_json, sha256, write_text)

MARKER = ".workbench-folder"  # written into every folder atomic_dir creates


class FolderNotReplaceable(FileExistsError):
    """A write would replace what the workbench cannot show it wrote: ``reason`` names the
    folder and what is in the way; the message adds the cure in the API's words
    (``force=True``), :meth:`command_line` in the command line's (``--force``); ``replaced``
    says what force replaces (the folder whole, or the files named)."""

    def __init__(self, reason, cure=True, replaced="the folder whole"):
        self.reason, self.cure, self.replaced = reason, cure, replaced
        super().__init__(f"{reason}; move it away, or pass force=True to replace {replaced}"
                         if cure else reason)

    def command_line(self) -> str:
        return (f"{self.reason}; move it away, or use --force to replace {self.replaced}"
                if self.cure else self.reason)


@contextlib.contextmanager
def atomic_dir(path, force=False, repair=False):
    """Yield an empty folder beside ``path`` to fill; on success it takes the place of ``path``.

    The new folder gets a marker file (``MARKER``) listing every file in it with its size and
    sha256, and every sub-folder. An existing ``path`` is replaced only if it is empty, or every
    entry in it is one its marker lists, unchanged, or ``force`` is true; otherwise
    ``FolderNotReplaceable``, naming the first foreign entry, is raised before anything is
    written. If the body raises (or the
    process dies) the old folder stays as it was; the staging folder is removed (or, after a
    kill, left as a hidden ``.<name>.<pid>.*.partial`` folder beside it, which the next call
    for ``path`` removes).  The swap itself is one atomic step where Linux offers it
    (:func:`_exchange`), so a kill never leaves nothing at ``path``; where it falls back on two
    renames, the next call puts back an old folder a kill left between them.  ``repair``: files the marker lists may have changed (a data set whose checksums
    failed is fetched again); a file it does not list still stops the replacement.
    """
    path = check_writable(path, folder=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    _recover(path)
    check_replaceable(path, force, repair)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".partial",
                                    dir=path.parent))
    old = None
    try:
        os.chmod(staging, mode_for(path, 0o777, folder=True))  # mkdtemp creates 0700
        yield staging
        (staging / MARKER).write_text(_marker_text(_listing(staging), _folders(staging)))
        check_replaceable(path, force, repair)  # it may have appeared while we worked
        if (path.exists() or path.is_symlink()) and _exchange(staging, path):
            old, staging = staging, None  # one atomic step: the old folder is now at staging
        elif path.exists() or path.is_symlink():
            old = path.with_name(f"{staging.name[:-len('.partial')]}.old")
            os.rename(path, old)
        if staging is not None:
            try:
                os.rename(staging, path)
            except BaseException:
                if old is not None:
                    os.rename(old, path)
                    old = None
                raise
    finally:
        for p in (staging, old):
            if p is not None and p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif p is not None and (p.exists() or p.is_symlink()):
                p.unlink()


def _recover(path: Path):
    """Clean up after an :func:`atomic_dir` that was killed: put back an old folder that the
    kill left renamed aside with nothing at ``path`` (``.<name>.<pid>.*.old``), and remove the
    leftovers of dead processes (an ``.old`` whose replacement is in place, a half-written
    ``.partial``).  Leftovers of a live process are its work in progress and stay."""
    for leftover in sorted(path.parent.glob(f".{glob.escape(path.name)}.*.*")):
        pid, _, rest = leftover.name[len(path.name) + 2:].partition(".")
        if (not pid.isdigit() or not rest.endswith((".old", ".partial"))
                or not leftover.is_dir() or leftover.is_symlink() or _alive(int(pid))):
            continue
        if rest.endswith(".old") and not (path.exists() or path.is_symlink()):
            os.rename(leftover, path)
        else:
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``): a process killed at any moment leaves either the old or the new
    folder at ``b``, never neither.  False where the kernel, C library or file system lacks it
    (then two renames do it)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _listing(folder: Path, names=None) -> dict[str, list]:
    """``{relative path: [size, sha256]}`` of every file under ``folder`` but the marker (of
    those of ``names`` that are files, when given)."""
    paths = sorted(folder.rglob("*")) if names is None else [folder / n for n in names]
    return {p.relative_to(folder).as_posix(): [p.stat().st_size, sha256(p.read_bytes())]
            for p in paths if p.is_file() and not p.is_symlink() and p != folder / MARKER}


def _folders(folder: Path) -> list[str]:
    """Every sub-folder under ``folder``, relative."""
    return [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*"))
            if p.is_dir() and not p.is_symlink()]


def _marker_text(files: dict, folders=()) -> str:
    return json_text({
        "note": "The workbench wrote the files and folders listed here; it replaces one only "
                "while it is unchanged, and this folder whole only when all in it are listed.",
        "files": files, "folders": sorted(folders)})


def _read_marker(folder: Path):
    """``(files, folders)`` that ``folder``'s marker lists (the folders above a listed file
    count as listed), or ``(None, why)`` where it lists nothing usable."""
    marker = folder / MARKER
    if not marker.is_file():
        return None, f"no {MARKER}"
    try:
        data = read_json(marker)
        files, folders = data["files"], data.get("folders", [])
        if not (isinstance(files, dict) and isinstance(folders, list)
                and all(isinstance(v, list) for v in files.values())):
            raise TypeError
    except (ValueError, KeyError, TypeError):  # (read_json's errors are ValueErrors)
        return None, f"its {MARKER} is empty, unreadable or of an old format"
    folders = {f for f in folders if isinstance(f, str)}
    for rel in files:
        folders.update(p.as_posix() for p in Path(rel).parents if p != Path("."))
    return files, folders


def foreign_entry(folder, names=None, repair=False) -> str | None:
    """The first entry under ``folder`` (of ``names`` in it, when given) that the workbench
    cannot show it wrote, as ``"<entry> <why>"``: one its marker does not list, a file changed
    since (unless ``repair``), a link, or any entry where the marker is missing, empty,
    unreadable or of an old format.  None when there is none."""
    folder = Path(folder)
    paths = (sorted(folder.rglob("*")) if names is None else
             [folder / n for n in names if (folder / n).exists() or (folder / n).is_symlink()])
    paths = [p for p in paths if p != folder / MARKER]
    if not paths:
        return None
    files, folders = _read_marker(folder)
    for p in paths:
        rel = p.relative_to(folder).as_posix()
        if files is None:
            return f"{rel} was not written by the workbench ({folders})"
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            return f"{rel} is not a file or folder the workbench writes"
        if p.is_dir():
            if rel not in folders:
                return f"{rel}/ was not written by the workbench"
        elif rel not in files:
            return f"{rel} was not written by the workbench"
        elif not repair and files[rel] != _listing(folder, [rel])[rel]:
            return f"{rel} changed since"
    return None


def check_folder(path, force=False) -> Path:
    """``path`` as :func:`atomic_dir` will write it, checked before any work: a folder name
    that can be written (:func:`check_writable`) and replaced (:func:`check_replaceable`)."""
    path = check_writable(path, folder=True)
    check_replaceable(path, force)
    return path


def check_replaceable(path, force, repair=False):
    """Raise :class:`FolderNotReplaceable` unless ``path`` may be replaced: absent, or a folder
    with no :func:`foreign_entry`."""
    if force or not (path.exists() or path.is_symlink()):
        return
    if not path.is_dir() or path.is_symlink():
        raise FolderNotReplaceable(f"{path}: exists and is not a folder; move it away first",
                                   cure=False)
    foreign = foreign_entry(path, repair=repair)
    if foreign:
        raise FolderNotReplaceable(f"{path}: {foreign}")


@contextlib.contextmanager
def owned_files(folder, names, force=False, what=None):
    """Write the files ``names`` into ``folder``, a folder the user may own (a command's
    ``--out``, ``what`` in messages): before the body, each of them already there must be one
    ``folder``'s marker lists, unchanged (else :class:`FolderNotReplaceable` naming it, unless
    ``force``); after it, the marker lists them as written, beside what it listed before."""
    folder = given_path(folder, what)
    for name in names:
        check_writable(folder / name)
    foreign = None if force else foreign_entry(folder, names)
    if foreign:
        raise FolderNotReplaceable(f"{folder}: {foreign}", replaced=", ".join(names))
    yield folder
    files, folders = _read_marker(folder)
    write_text(folder / MARKER, _marker_text({**(files or {}), **_listing(folder, names)},
                                             folders if files is not None else ()))


def write_folder(path, contents: dict, force=False) -> Path:
    """Write a folder of files at once (:func:`atomic_dir`): ``contents`` maps each file name
    (``"sub/name"`` in a subfolder) to its content (see :func:`content_bytes`).

    An existing ``path`` is replaced as :func:`atomic_dir` says.
    """
    path = Path(path)
    with atomic_dir(path, force=force) as stage:
        for name, content in contents.items():
            target = stage / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content_bytes(name, content))
    return path
