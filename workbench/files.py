"""Files the workbench writes: always atomically (temp file in the same folder, then
``os.replace``), so an interrupted run never leaves a half-written output behind."""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path


def project_root() -> Path:
    """The checkout this package lives in (the folder holding ``pyproject.toml``),
    or the current directory for an installed copy."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


PROFILE_ENV = "WORKBENCH_PROFILE"  # set by ``python -m workbench run`` for its notebooks


def figures_dir(profile=None) -> Path:
    """Where figures go: ``<root>/<profile>``, the root being ``$WORKBENCH_FIGURES`` or
    ``<project>/figures`` and the profile ``profile`` or ``$WORKBENCH_PROFILE``; the root
    itself when neither names one (a notebook run by hand)."""
    root = Path(os.environ.get("WORKBENCH_FIGURES") or project_root() / "figures")
    profile = profile or os.environ.get(PROFILE_ENV)
    if profile and (Path(profile).name != profile or profile in (".", "..")):
        raise ValueError(f"profile {profile!r}: a name, not a path (its figures go to "
                         f"<figures>/<profile>)")
    return root / profile if profile else root


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        # mkstemp creates 0600; give the mode a plain open() would: the old file's, else 0666 & ~umask
        os.chmod(tmp, _mode_of(path, 0o666))
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask():
    """The process umask (from /proc when it can, so that no thread sees it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_of(path, default, folder=False):
    """Permission bits of the existing ``path`` where it is of the kind written (a folder with
    ``folder``, else a file), else ``default & ~umask``: a folder that replaces a file gets a
    folder's bits, not the file's (no x bit)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return default & ~_umask()
    return stat.S_IMODE(mode) if stat.S_ISDIR(mode) == folder else default & ~_umask()


MARKER = ".workbench-folder"  # written into every folder atomic_dir creates
NAME_MAX = 255  # bytes of one file name on Linux file systems


def given_path(path, what=None) -> Path:
    """``path`` as a Path; ValueError in one line (after ``what``, the option that gave it)
    where it is empty: ``''`` would mean the current folder, never what was meant."""
    if not os.fspath(path):
        raise ValueError(f"{what + ' ' if what else ''}'': an empty path; give a name")
    return Path(path)


def check_writable(path, folder=False, what=None) -> Path:
    """Raise OSError, in one line naming ``path``, where writing it (a file, or with
    ``folder`` a folder) is sure to fail: a name too long, a folder where a file should go, a
    file where a folder above it should be, or no write permission in the nearest existing
    folder above it (read-only file systems included); ValueError for an empty path
    (:func:`given_path`).  Called before the work, so that a command does not fail only
    after it."""
    path = given_path(path, what)
    if folder and (not path.name or path.name == ".."):  # ".", "/", "..": a folder to replace
        raise IsADirectoryError(f"{path}: give the folder to write by its name (the "
                                "workbench replaces a folder it writes whole)")
    if len(os.fsencode(path.name)) > NAME_MAX:
        raise OSError(f"{path.name[:40]}...: a name of {len(os.fsencode(path.name))} bytes; "
                      f"file systems take {NAME_MAX}")
    if path.is_dir() and not folder:
        raise IsADirectoryError(f"{path}: is a folder; give a file name")
    above = path.absolute().parent
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        raise NotADirectoryError(f"{path}: {above} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise PermissionError(f"{path}: cannot write into {above} (permission denied or a "
                              "read-only file system)")
    return path


def readable_file(path, what=None) -> Path:
    """``path`` where it is a file to read, checked before it is opened (a FIFO's open waits
    for a writer, a device never ends); else OSError in one line naming it (after ``what``,
    the option that gave it) and what it is: missing, a folder, a FIFO, a device, a socket, a
    link loop, not permitted."""
    path = given_path(path, what)
    name = f"{what} {path}" if what else str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name}: no such file") from None
    except OSError as err:  # a link loop, a file where a folder should be, no permission
        raise OSError(f"{name}: cannot be read ({err.strerror or err})") from None
    if stat.S_ISREG(mode):
        return path
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{name}: is a folder, not a file")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
    raise OSError(f"{name}: is {kind}, not a file")


def read_text(path, what=None) -> str:
    """The UTF-8 text of the file ``path`` (:func:`readable_file` first); ValueError in one
    line naming it where it is not UTF-8."""
    data = readable_file(path, what).read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise ValueError(f"{f'{what} ' if what else ''}{path}: not UTF-8 text (byte "
                         f"0x{data[err.start]:02x} at offset {err.start}); save it as "
                         "UTF-8") from None


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
        os.chmod(staging, _mode_of(path, 0o777, folder=True))  # mkdtemp creates 0700
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


def content_bytes(name, content) -> bytes:
    """The bytes of a file ``name`` of :func:`write_folder`'s ``contents``: text (``str``,
    UTF-8), ``bytes``, or by the name's extension a JSON-able object (``.json``), a numpy
    array (``.npy``) or a dict of arrays (``.npz``)."""
    import io

    import numpy as np  # only the writers of nets need it

    if isinstance(content, str):
        return content.encode()
    if isinstance(content, bytes):
        return content
    suffix, buffer = Path(name).suffix, io.BytesIO()
    if suffix == ".json":
        return json_text(content).encode()
    if suffix == ".npy":
        np.save(buffer, content)
    elif suffix == ".npz":
        np.savez(buffer, **content)
    else:
        raise TypeError(f"{name}: cannot write {type(content).__name__}")
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checked_file(folder, name, digests: dict, manifest) -> bytes:
    """The bytes of the file ``name`` that the manifest ``manifest`` of ``folder`` names,
    where ``digests`` (the manifest's ``{file: sha256}``) lists it with its sha256 and the
    file, inside ``folder``, has it; else ValueError in one line naming the file."""
    folder = Path(folder)
    path = (folder / str(name)).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise ValueError(f"{manifest}: names a file outside its folder ({name})")
    if not isinstance(digests, dict) or not isinstance(digests.get(name), str):
        raise ValueError(f"{manifest}: lists no sha256 of {name} (written by an older version, "
                         "or edited): write the folder again")
    try:
        data = readable_file(folder / name).read_bytes()
    except OSError as err:
        raise _unreadable(folder / name, err) from None
    if sha256(data) != digests[name]:
        raise ValueError(f"{folder / name}: not the file {manifest} lists (sha256 differs); "
                         "write the folder again")
    return data


def write_json(path, obj):
    """Write ``obj`` as indented JSON, atomically."""
    write_text(path, json_text(obj))


def json_text(obj) -> str:
    """``obj`` as the workbench writes JSON files: indented, numpy scalars as numbers."""
    return json.dumps(obj, indent=2, default=_to_builtin) + "\n"


MAX_JSON_BYTES = 256 << 20  # the most a JSON file the workbench reads may hold


def read_json(path, default=None):
    """The JSON in ``path`` (``default`` where there is none); ValueError in one line naming
    the file where it cannot be read, is over :data:`MAX_JSON_BYTES`, is not UTF-8 JSON or
    is nested too deep for the parser."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        if readable_file(path).stat().st_size > MAX_JSON_BYTES:
            raise ValueError(f"{path}: {path.stat().st_size} bytes, over the "
                             f"{MAX_JSON_BYTES} a JSON file of the workbench may hold")
        return json.loads(path.read_bytes())
    except OSError as err:
        raise _unreadable(path, err) from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deep to be JSON the workbench wrote") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def _unreadable(path, err: OSError) -> ValueError:
    """ValueError in one line for an OSError reading ``path`` (:func:`readable_file`'s
    names the file already)."""
    return ValueError(str(err) if err.strerror is None else
                      f"{path}: cannot be read ({err.strerror})")


def _to_builtin(obj):
    """JSON fallback for numpy scalars and paths."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def write_text(path, text):
    """Write ``text`` to ``path``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
