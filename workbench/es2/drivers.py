"""An ES 2.0 net through the target GPUs' own compilers (:mod:`workbench.gl.drivers`).

:func:`check` compiles every program of a net with a target's Mesa driver (on its drm-shim)
and returns what the driver said of each; :func:`require` refuses, in one line naming the
program, the target and the driver's message, a net the target's compiler cannot take;
:func:`fit` re-plans the refused layers with fewer output channels a program (a compiler
that keeps literals in a small constant file, as Vivante's does, then takes them) until the
driver accepts.  A colour mask lets several programs write one RGBA target, so the bytes
stay those of the whole-pack programs: the cost is passes and texel fetches, not dB.
"""
from __future__ import annotations

from workbench import ir
from workbench.es2.limits import LimitError
from workbench.es2.shaders import VERTEX_SHADER
from workbench.gl import drivers

CHANNELS = (4, 2, 1)  # output channels a conv program may write, most first


class DriverRejected(LimitError):
    """A target's compiler refused a program; the message names program, target and why."""


def check(net, target: str) -> list[drivers.ProgramReport]:
    """What the driver of ``target`` (:data:`workbench.gl.drivers.TARGETS`) says of every
    program of ``net``, in pass order."""
    return drivers.compile_programs(target, VERTEX_SHADER,
                                    [(p.name, p.source, len(p.outputs)) for p in net.passes])


def failures(net, reports) -> list[tuple]:
    """``[(pass, report)]`` of the programs the driver refused."""
    return [(p, r) for p, r in zip(net.passes, reports) if not r.ok]


def rejection(target: str, failed) -> str:
    """One line for the first refused program."""
    p, r = failed[0]
    t = drivers.target(target)
    more = f" ({len(failed) - 1} more programs refused)" if len(failed) > 1 else ""
    return (f"program {p.name!r} (layer {p.op!r}): the {t.gpu} compiler ({t.name}, Mesa "
            f"{drivers.MESA_VERSION}) refuses it: {r.errors[0] if r.errors else 'no reason given'}"
            f"{more}")


def require(net, target: str):
    """Raise :class:`DriverRejected` when ``target``'s compiler refuses a program of ``net``;
    returns the reports otherwise."""
    reports = check(net, target)
    failed = failures(net, reports)
    if failed:
        raise DriverRejected(rejection(target, failed))
    return reports


def fit(graph, generate, target: str):
    """Passes of ``graph`` that ``target``'s compiler takes: ``generate(channels)`` makes the
    passes with ``{conv layer: output channels a program}``; each refused convolution gets the
    next smaller count (4, 2, 1) until the driver accepts every program.  Returns ``(passes,
    reports, changes)``: ``changes`` says per layer what was changed; a program still refused
    at 1 channel, or one of another op, raises :class:`DriverRejected`."""
    channels: dict[str, int] = {}
    while True:
        passes = generate(channels)
        reports = drivers.compile_programs(target, VERTEX_SHADER,
                                           [(p.name, p.source, len(p.outputs)) for p in passes])
        failed = [(p, r) for p, r in zip(passes, reports) if not r.ok]
        if not failed:
            break
        for layer in dict.fromkeys(p.op for p, _ in failed):
            smaller = [c for c in CHANNELS if c < _channels(passes, layer)]
            if not isinstance(graph.op(layer), ir.Conv) or not smaller:
                raise DriverRejected(rejection(target, failed) + "; nothing left to split")
            channels[layer] = smaller[0]
    changes = [f"layer {name!r}: {c} output channel{'s' if c > 1 else ''} a program (was "
               f"{ir.PACK}), for the {drivers.target(target).gpu} compiler"
               for name, c in channels.items()]
    return passes, reports, changes


def _channels(passes, layer) -> int:
    """Output channels the programs of ``layer`` write now."""
    return min(len(p.channels) if p.channels is not None else ir.PACK
               for p in passes if p.op == layer)
