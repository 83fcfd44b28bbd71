"""The memory a process may still take, and the one check every large allocation goes
through first (a net's run or compile, calibration images, an image's decoding).

The budget is the smallest of: the kernel's MemAvailable; the process's own address-space and
data limits (``ulimit -v``, ``ulimit -d``: RLIMIT_AS, RLIMIT_DATA) less what it holds already;
its cgroup's limit less its usage (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, the
cgroup's and each parent's).  Estimates are in bytes, from shapes alone, before anything is
allocated; a need over the budget is :class:`OutOfMemory` in one line.
"""
from __future__ import annotations

import resource
from pathlib import Path

UNLIMITED = 2 ** 62  # a cgroup limit this large (v1's "none": 9223372036854771712) is none


class OutOfMemory(ValueError):
    """A run that would need more memory than the process may take (one line)."""


def _status() -> dict[str, int]:
    """``/proc/self/status``'s sizes in bytes (VmSize, VmData, ...); empty where unknown."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in lines)
            if v.strip().endswith("kB")}


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # (v2's "max": none)


def _cgroup_room() -> int | None:
    """The least room (limit - usage) of this process's memory cgroup and its parents."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            base, files = Path("/sys/fs/cgroup"), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, files = Path("/sys/fs/cgroup/memory"), ("memory.limit_in_bytes",
                                                          "memory.usage_in_bytes")
        else:
            continue
        folder = base / path.lstrip("/")
        for level in [folder, *folder.parents]:
            limit, used = (_read_int(level / name) for name in files)
            if limit is not None and used is not None and limit < UNLIMITED:
                rooms.append(limit - used)
            if level == base:
                break
    return min(rooms, default=None)


class Bytes(int):
    """A byte count that says what bounds it: ``limit``, e.g. ``"ulimit -v"``."""

    def __new__(cls, value, limit):
        out = super().__new__(cls, value)
        out.limit = limit
        return out


def available_bytes() -> Bytes | None:
    """The bytes this process may still take: the smallest of the limits in the module's
    docstring, as :class:`Bytes` whose ``limit`` names it (``"MemAvailable"``, ``"ulimit
    -v"``, ``"ulimit -d"``, ``"cgroup"``); None where none is known."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(Bytes(int(line.split()[1]) * 1024, "MemAvailable"))
    except OSError:
        pass
    status = _status()
    for limit, held, name in ((resource.RLIMIT_AS, "VmSize", "ulimit -v"),
                              (resource.RLIMIT_DATA, "VmData", "ulimit -d")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY and held in status:
            found.append(Bytes(max(soft - status[held], 0), name))
    room = _cgroup_room()
    if room is not None:
        found.append(Bytes(max(room, 0), "cgroup"))
    return min(found, default=None)


def require_bytes(need: dict[str, int], what: str, helps: str, free=None):
    """Refuse, before it is allocated, ``need`` (``{part: bytes}``) over the memory
    available (``free``, default :func:`available_bytes`): :class:`OutOfMemory` in one line,
    ``"{what} needs about 9.6 GB (part 1.2, ...); 3.9 GB available; {helps}"`` (parts of no
    bytes left out; naming the
    process's own limit where that is the smallest: ``"available under ulimit -v"``)."""
    free = available_bytes() if free is None else free
    total = sum(need.values())
    if free is None or total <= free:
        return
    each = ", ".join(f"{part} {b / 1e9:.1f}" for part, b in need.items() if b)
    limit = getattr(free, "limit", "MemAvailable")
    under = "" if limit == "MemAvailable" else f" under {limit}"
    raise OutOfMemory(f"{what} needs about {total / 1e9:.1f} GB ({each}); "
                      f"{free / 1e9:.1f} GB available{under}; {helps}")
