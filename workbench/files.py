"""Files the workbench writes and reads, one at a time: written atomically (temp file in the same
folder, then ``os.replace``), so an interrupted run never leaves a half-written output behind;
read bounded, and a path that cannot be read or written refused in one line before the work.
Folders written whole: :mod:`workbench.folders`."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
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
        os.chmod(tmp, mode_for(path, 0o666))
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


def mode_for(path, default, folder=False):
    """The permission bits to give what is written at ``path``: those of the existing ``path``
    where it is of the kind written (a folder with ``folder``, else a file), else ``default &
    ~umask``: a folder that replaces a file gets a folder's bits, not the file's (no x bit)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return default & ~_umask()
    return stat.S_IMODE(mode) if stat.S_ISDIR(mode) == folder else default & ~_umask()


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


def content_bytes(name, content) -> bytes:
    """The bytes of a file ``name`` of :func:`workbench.folders.write_folder`'s ``contents``:
    text (``str``, UTF-8), ``bytes``, or by the name's extension a JSON-able object
    (``.json``), a numpy array (``.npy``) or a dict of arrays (``.npz``)."""
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


def file_sha256(path) -> str:
    """The sha256 of the file ``path``, read in chunks (a data set's files may be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


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
