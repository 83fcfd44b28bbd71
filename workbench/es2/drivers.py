"""An ES 2.0 net through the target GPUs' own compilers (:mod:`workbench.gl.drivers`).

:func:`check` compiles every program of a net with a Mesa driver (on its drm-shim) and
returns what the driver said of each; :func:`require` refuses, in one line naming the
program, the driver and its message, a net the driver's compiler cannot take;
:func:`fit` re-plans the refused layers with fewer output channels a program (a compiler
that keeps literals in a small constant file, as Vivante's does, then takes them) and then,
a convolution at one input pack a stage, fewer kernel rows a stage, until the driver
accepts, and keeps VideoCore IV's programs within its two-thread register budget where its
estimated cycles say that pays.  A colour mask lets several programs write one RGBA target,
so the bytes stay those of the whole-pack programs: the cost is passes and texel fetches, not
dB (a row split adds the partial sums' fixed-point step, :mod:`workbench.es2.ops.conv.split`).
"""
from __future__ import annotations

import itertools
from dataclasses import replace

from workbench import ir
from workbench.es2.limits import LimitError
from workbench.es2.ops.conv import FORM, ORDERS
from workbench.es2.ops.conv.orders import LAST, places_residual
from workbench.es2.ops.conv.padding import UNIT_COLUMNS, producer_borders
from workbench.es2.ops.conv.program import COORDINATES
from workbench.es2.ops.conv.split import finer_rows
from workbench.es2.record import record
from workbench.es2.shaders import VERTEX_SHADER, fragments
from workbench.gl import drivers

CHANNELS = (4, 2, 1)  # output channels a conv program may write, most first
RESIDUAL_PLACES = {LAST: "", 0: ", the residual added to the bias first",  # the places tried
                   1: ", the residual added after the first term"}


class DriverRejected(LimitError):
    """A driver's compiler refused a program; the message names program, driver and why."""


def check(net, driver: str) -> list[drivers.ProgramReport]:
    """What the Mesa driver ``driver`` (:data:`workbench.gl.drivers.DRIVERS`) says of every
    program of ``net``, in pass order."""
    return _reports(net.passes, driver)


def failures(net, reports) -> list[tuple]:
    """``[(pass, report)]`` of the programs the driver refused."""
    return [(p, r) for p, r in zip(net.passes, reports) if not r.ok]


def rejection(driver: str, failed) -> str:
    """One line for the first refused program."""
    p, r = failed[0]
    t = drivers.driver(driver)
    more = f" ({len(failed) - 1} more programs refused)" if len(failed) > 1 else ""
    return (f"program {p.name!r} (layer {p.op!r}): the {t.gpu} compiler ({t.name}, Mesa "
            f"{drivers.MESA_VERSION}) refuses it: {r.errors[0] if r.errors else 'no reason given'}"
            f"{more}")


def require(net, driver: str):
    """Raise :class:`DriverRejected` when ``driver``'s compiler refuses a program of ``net``;
    returns the reports otherwise."""
    reports = check(net, driver)
    failed = failures(net, reports)
    if failed:
        raise DriverRejected(rejection(driver, failed))
    return reports


def fit(graph, generate, driver: str):
    """Passes of ``graph`` that ``driver``'s compiler takes, and runs well: ``generate(options)``
    makes the passes with ``{conv layer: {"channels": n, "inline_masks": bool}}``.

    1. Each refused convolution gets the next smaller count of output channels a program
       (4, 2, 1), then, at 1 and one input pack a stage (or one in all), its kernel rows
       split over more stages (``row_split``, :func:`workbench.es2.ops.conv.split.finer_rows`),
       until the driver accepts every program.
    2. Where the driver estimates cycles (vc4), a convolution with single-threaded programs
       computes its padding masks per tap (fewer live registers), kept only when the
       driver's estimated cycles of that layer drop.

    Returns ``(passes, reports, changes, options)``: ``changes`` says per layer what changed
    and what it measured, ``options`` what ``generate`` was asked; a program still refused at
    1 channel and one row a stage, or one of another op, raises :class:`DriverRejected`."""
    options: dict[str, dict] = {}
    changes = []
    gpu = drivers.driver(driver).gpu
    while True:
        passes, reports = _compiled(generate, options, driver)
        failed = [(p, r) for p, r in zip(passes, reports) if not r.ok]
        if not failed:
            break
        for layer in dict.fromkeys(p.op for p, _ in failed):
            op, asked = graph.op(layer), options.setdefault(layer, {})
            now = _channels(passes, layer)
            smaller = [c for c in CHANNELS if c < now]
            rows = "row_split" in layer_options(op) and finer_rows(op, asked.get("row_split"))
            why = f"the {gpu} compiler refused it ({_reason(failed, layer)})"
            if "channels" not in layer_options(op) or not (smaller or rows):
                raise DriverRejected(rejection(driver, failed) + "; nothing left to split")
            if smaller:
                asked["channels"] = smaller[0]
                changes.append(f"layer {layer!r}: {smaller[0]} output channel"
                               f"{'s' if smaller[0] > 1 else ''} a program (was {now}): {why}")
            else:
                asked["row_split"] = rows
                changes.append(f"layer {layer!r}: its kernel rows split over {rows} stages "
                               f"a run of input packs: {why}")
    single = dict.fromkeys(p.op for p, r in zip(passes, reports)
                           if r.stats.get("threads") == 1 and "estimated_cycles" in r.stats
                           and _padded(graph.op(p.op)))
    for layer in single:
        trial = {**options, layer: {**options.get(layer, {}), "inline_masks": True}}
        new_passes, new_reports = _compiled(generate, trial, driver)
        before, after = (_layer_stat(ps, rs, layer, "estimated_cycles")
                         for ps, rs in ((passes, reports), (new_passes, new_reports)))
        if all(r.ok for r in new_reports) and after < before:
            options, passes, reports = trial, new_passes, new_reports
            threads = min(r.stats.get("threads", 1) for p, r in zip(passes, reports)
                          if p.op == layer)
            changes.append(f"layer {layer!r}: padding masks computed per tap, {threads} threads "
                           f"instead of 1 on {gpu}: estimated cycles {before:,} -> {after:,}")
    return passes, reports, changes, options


def two_thread_cycles(stats) -> float:
    """What a vc4 program costs a fragment where its threads interleave: one thread runs in
    the other's stalls, so two threads of it take the longer of their instructions and one
    thread's estimated cycles (its instructions and its stalls): ``max(instructions,
    estimated cycles / threads)`` (a single-threaded program: its estimated cycles)."""
    return max(stats["instructions"], stats["estimated_cycles"] / stats.get("threads", 1))


# tune's default where the driver estimates cycles (vc4): the fewest instructions whose
# estimated cycles stay within this share above the fewest (:func:`_budgeted`): a Pi pays
# between the two (the calibrated model, studies.beatmup.pi_model)
BUDGET_SLACK = 0.14

# What tune then tries on each layer's best form: the same arithmetic spelled otherwise (its
# window's coordinates; its unit masks on fewer columns, where it has them and the driver
# estimates cycles), for the compiler's scheduler
REFINEMENTS = {"coordinates": list(COORDINATES), "unit_masks": list(UNIT_COLUMNS)}

# The layer options that only steer vc4's scheduler (its estimate's waits), offered where the
# driver estimates cycles: elsewhere they only add instructions
STEERING = ("unit_masks", "chained")

# What :func:`tune` may minimise, by name: a program's count from its driver's statistics
# (the last two where the driver estimates cycles: vc4)
COUNTS = {"instructions": lambda stats: stats["instructions"],
          "estimated cycles": lambda stats: stats["estimated_cycles"],
          "two threads": two_thread_cycles}


def tune(graph, generate, driver: str, options=None, count=None):
    """After :func:`fit` (``options``: what it chose), the form of each layer's programs that
    ``driver``'s compiler runs fastest by its own numbers: each convolution whose programs
    write whole packs is compiled in every summation order (:data:`ORDERS`), with its padding
    masks computed once or per tap, or its input read through a zero border instead
    (:func:`workbench.es2.ops.conv.padding.bordered`: the copies' programs counted with the
    layer's), with or without unit masks where no tap lies in the padding and the driver
    estimates cycles (:func:`workbench.es2.ops.conv.padding.unit_mask`: elsewhere they only add
    instructions), and its residual added last, first or after the order's first term
    (:data:`RESIDUAL_PLACES`) where it has them; a depth-to-space (the SR demux) with its
    fetches chained or not where the driver estimates cycles
    (:func:`workbench.es2.shaders.fetch_lines`); then each layer's best form with its
    :data:`REFINEMENTS`.  It keeps the form with the fewest spills, then the most threads,
    then the smallest sum of ``count`` (:data:`COUNTS`; default the estimated cycles where
    the driver estimates them, vc4, else the instructions; ``"two threads"``:
    :func:`two_thread_cycles`); a tie keeps what it had.  Last, a luma layer read through a
    zero border may read the luma its copy computed (:func:`_luma_copies`).  A form changes
    the float rounding, not the arithmetic (but the luma copy's: its luma at two bytes,
    within 7.7e-6); the emulator follows it (:func:`ordered`).

    Returns ``(passes, reports, changes, options)`` as :func:`fit` does."""
    options = {layer: dict(o) for layer, o in (options or {}).items()}
    passes, reports = _compiled(generate, options, driver)
    layers = [op.name for op in graph.ops
              if ("order" in layer_options(op) and _channels(passes, op.name) == ir.PACK)
              or "chained" in layer_options(op)]
    estimates = any("estimated_cycles" in r.stats for r in reports)
    budget = count is None and estimates  # (the default where the driver estimates cycles)
    count = count or ("estimated cycles" if estimates else "instructions")
    if count not in COUNTS or (count != "instructions" and not estimates):
        raise ValueError(f"tune: count {count!r} is not one the {driver} driver gives; "
                         f"{'one of ' + ', '.join(COUNTS) if estimates else 'instructions'}")

    def under(layer, form):  # the layer's options under ``form``, as far as it has them
        allowed = layer_options(graph.op(layer))
        return {**options.get(layer, {}), **{k: v for k, v in form.items() if k in allowed}}

    choices = {"order": list(ORDERS), "inline_masks": [False, True],
               "zero_border": [False, True], "unit_masks": [False, True],
               "residual_after": list(RESIDUAL_PLACES),
               "chained": [False, True]}  # each only where some layer has it
    choices = {k: v for k, v in choices.items()
               if any(k in layer_options(graph.op(layer)) for layer in layers)
               and (k not in STEERING or estimates)}
    trials = []
    for values in itertools.product(*choices.values()):
        form = dict(zip(choices, values))
        if not places_residual(form.get("order"), form.get("residual_after", LAST)) or (
                form.get("zero_border") and form.get("inline_masks")) or (  # (no masks)
                form.get("unit_masks") and (form.get("inline_masks")
                                            or form.get("order") == "chain")):
            continue
        trial = {**options, **{layer: under(layer, form) for layer in layers}}
        trials.append((trial, generate(trial)))
    tried = [(options, passes, reports)] + _tried(trials, driver)
    bases = [_best(layers, tried, count)] + ([_best(layers, tried, "instructions")]
                                             if budget else [])
    refined = []  # each layer's best forms spelled otherwise (the same programs' arithmetic)
    for best, values in itertools.product(bases, itertools.product(*REFINEMENTS.values())):
        trial = dict(options)
        for layer in layers:
            form = dict(tried[best[layer]][0].get(layer, {}))
            for k, v in zip(REFINEMENTS, values):
                if k in layer_options(graph.op(layer)) and (k != "unit_masks" or (
                        estimates and form.get("unit_masks"))):
                    form[k] = v
            trial[layer] = form
        refined.append((trial, generate(trial)))
    tried += _tried(refined, driver)
    picks = _budgeted(graph, layers, tried, BUDGET_SLACK) if budget else \
        _best(layers, tried, count)
    tried, picks = _luma_copies(graph, options, tried, picks, generate, driver, count)
    changes = []
    for layer in layers:
        i = picks[layer]
        (key, before) = (_form_key(*tried[k][1:], layer, count) for k in (i, 0))
        if i:
            options[layer] = chosen = tried[i][0].get(layer, {})
            also = ""
            if count != "instructions":  # what the count's gain cost or saved in instructions
                counts = [_layer_stat(*tried[k][1:], layer, "instructions") for k in (0, i)]
                also = f", instructions {counts[0]:,} -> {counts[1]:,}"
            changes.append(f"layer {layer!r}: {_described(chosen)} on "
                           f"{drivers.driver(driver).gpu}: {count} "
                           f"{before[-1]:,.0f} -> {key[-1]:,.0f}{also}")
    if changes:
        passes, reports = _compiled(generate, options, driver)
    return passes, reports, changes, options


def _budgeted(graph, layers, tried, slack) -> dict:
    """``{layer: index in tried}``: a form a layer (among those with its fewest spills and
    most threads) for few instructions over the layers, their estimated cycles summed at
    most ``1 + slack`` times their fewest, each program's counts weighted by the fragments
    it draws at the net's input size (or 64x64).  From each layer's fewest cycles, it moves
    one layer at a time to a form of fewer instructions, the move that saves the most
    instructions a cycle it adds first, while the sum stays within the bound (a tie keeps the
    earlier form, the first what it had)."""
    hw = graph.input_size or (64, 64)
    weighted = []  # per trial: {layer: (instructions, cycles)}, weighted by fragments
    for trial, ps, rs in tried:
        sums = {}
        for p, r, f in zip(ps, rs, fragments(ordered(graph, trial), ps, hw)):
            i, c = sums.get(p.op, (0, 0))
            sums[p.op] = (i + f * r.stats.get("instructions", 0),
                          c + f * r.stats.get("estimated_cycles", 0))
        weighted.append(sums)
    candidates = {}
    for layer in layers:
        keys = [_form_key(ps, rs, layer, "estimated cycles")[:-1] for _, ps, rs in tried]
        candidates[layer] = [i for i, k in enumerate(keys) if k == min(keys)]
    picks = {layer: min(found, key=lambda i: (weighted[i][layer][1], weighted[i][layer][0], i))
             for layer, found in candidates.items()}
    spent = sum(weighted[i][layer][1] for layer, i in picks.items())
    bound = (1 + slack) * spent
    while True:
        moves = []  # (instructions saved a cycle added, layer, form)
        for layer, found in candidates.items():
            count, cycles = weighted[picks[layer]][layer]
            for i in found:
                saved, added = count - weighted[i][layer][0], weighted[i][layer][1] - cycles
                if saved > 0 and spent + added <= bound:
                    moves.append((saved / max(added, 1e-9), -i, layer, i))
        if not moves:
            return picks
        _, _, layer, i = max(moves)
        spent += weighted[i][layer][1] - weighted[picks[layer]][layer][1]
        picks[layer] = i


def _luma_copies(graph, options, tried, picks, generate, driver, count) -> tuple:
    """``(tried, picks)`` with the picks of each luma layer that reads through a zero border
    also tried with its copy holding the luma (``luma_copy``,
    :func:`~workbench.es2.ops.conv.padding.copies_luma`: one more trial, the picks together),
    that form kept where the driver counts it no more instructions and less by
    :func:`_form_key` (on VideoCore IV 324 -> 260 instructions a program of the x2 net's L1;
    on Mali-T720 175 -> 200, kept out)."""
    offered = [layer for layer, i in picks.items()
               if "luma_copy" in layer_options(graph.op(layer))
               and tried[i][0].get(layer, {}).get("zero_border")]
    if not offered:
        return tried, picks
    trial = {**options, **{layer: dict(tried[i][0].get(layer, {})) for layer, i in picks.items()}}
    for layer in offered:
        trial[layer]["luma_copy"] = True
    tried = tried + _tried([(trial, generate(trial))], driver)
    picks = dict(picks)
    for layer in offered:
        new, old = tried[-1][1:], tried[picks[layer]][1:]
        if (_form_key(*new, layer, count) < _form_key(*old, layer, count)
                and _layer_stat(*new, layer, "instructions")
                <= _layer_stat(*old, layer, "instructions")):
            picks[layer] = len(tried) - 1
    return tried, picks


def _tried(trials, driver) -> list[tuple]:
    """``[(options, passes, reports)]`` of ``trials`` (``[(options, passes)]``), every new
    program compiled in one child."""
    _reports([p for _, ps in trials for p in ps], driver)
    return [(trial, ps, _reports(ps, driver)) for trial, ps in trials]


def _best(layers, tried, count) -> dict:
    """``{layer: index in tried}``: the form of each layer with the smallest
    :func:`_form_key` among ``tried`` (``[(options, passes, reports)]``), the first where
    several tie."""
    return {layer: min(range(len(tried)),
                       key=lambda i: (_form_key(*tried[i][1:], layer, count), i))
            for layer in layers}


def _described(form) -> str:
    order = form.get("order", "chain")
    return ", ".join(filter(None, [
        f"products added {order!r} ({ORDERS[order]})" if "order" in form else "",
        "padding masks computed per tap" if form.get("inline_masks") else "",
        "its input read through a zero border (no masks)" if form.get("zero_border") else "",
        "its luma computed once, by its copy" if form.get("luma_copy") else "",
        f"{UNIT_COLUMNS[form['unit_masks']]} times a unit mask" if form.get("unit_masks")
        else "",
        {"chained": "its coordinates a texel apart, each from the one before",
         "x chained": "its columns' coordinates a texel apart, each from the one before"}.get(
            form.get("coordinates"), ""),
        RESIDUAL_PLACES.get(form.get("residual_after", LAST), "")[2:],
        "its fetches chained, each after the previous one's result" if form.get("chained")
        else ""]))


def _form_key(passes, reports, layer, count):
    """How a layer's programs compare: refused last, then the most spills, the fewest
    threads, and the sum of ``count`` (:data:`COUNTS`)."""
    mine = [r for p, r in zip(passes, reports) if p.op == layer]
    if not all(r.ok for r in mine):
        return (1, 0, 0, float("inf"))
    return (0, max(r.stats.get("spills", r.stats.get("spill", 0)) for r in mine),
            -min(r.stats.get("threads", 1) for r in mine),
            sum(COUNTS[count](r.stats) for r in mine))


def ordered(graph, options):
    """``graph`` with the summation order (and residual's place, the row split :func:`fit`
    asked, the zero borders and who draws them,
    :func:`~workbench.es2.ops.conv.padding.producer_borders`) ``options`` chose recorded on its
    convolutions
    (:class:`~workbench.es2.ops.conv.ConvForm`), for the emulator and a saved net."""
    options = producer_borders(graph, options)

    def form(op):
        return {k: v for k, v in options.get(op.name, {}).items() if k in FORM}

    return replace(graph, ops=[replace(op, **form(op)) if form(op) else op for op in graph.ops])


def _padded(op) -> bool:
    """A layer whose padding masks may move into its taps (``inline_masks``, see
    :func:`workbench.es2.shaders.coordinates`)."""
    return "inline_masks" in layer_options(op)


def layer_options(op) -> tuple[str, ...]:
    """The layer options a driver may set for ``op`` (its record's ``layer_options``)."""
    return record(op).layer_options(op) if record(op).layer_options else ()


_COMPILED: dict[tuple, drivers.ProgramReport] = {}  # (driver, source, render targets) -> report


def _reports(passes, driver) -> list[drivers.ProgramReport]:
    """A report a pass; a program is compiled once a process and driver (passes that share
    a program, weights as uniforms, share it; :func:`tune`'s forms recompile only what
    changed)."""
    missing = {}
    for p in passes:
        key = (driver, p.source, len(p.outputs))
        if key not in _COMPILED:
            missing.setdefault(key, p.name)
    if missing:
        reports = drivers.compile_programs(driver, VERTEX_SHADER,
                                           [(name, source, targets)
                                            for (_, source, targets), name in missing.items()])
        _COMPILED.update(zip(missing, reports))
    return [replace(_COMPILED[driver, p.source, len(p.outputs)], name=p.name) for p in passes]


def _compiled(generate, options, driver):
    passes = generate(options)
    return passes, _reports(passes, driver)


def _reason(failed, layer) -> str:
    errors = next(r.errors for p, r in failed if p.op == layer)
    return errors[0] if errors else "no reason given"


def _layer_stat(passes, reports, layer, key) -> int:
    """The sum of statistic ``key`` over the programs of ``layer``."""
    return sum(r.stats.get(key, 0) for p, r in zip(passes, reports) if p.op == layer)


def _channels(passes, layer) -> int:
    """Output channels the programs of ``layer`` write now."""
    return min(len(p.channels) if p.channels is not None else ir.PACK
               for p in passes if p.op == layer)
