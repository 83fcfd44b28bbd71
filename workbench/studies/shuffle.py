"""The deterministic channel shuffle of the dogs classifier (docs/design.md, "The dogs classifier"): its texture binding
order, and how fast it mixes information across the 32-channel groups of the 1x1 convolutions.

Conventions.  Channels come in packs of 4 (one RGBA texture each); ``d = C / 4`` textures.
A shuffle with step ``n`` binds, at output position ``i``, the input texture
``order[i] = (i*n) % d + (i*n) // d`` (:func:`workbench.nets.layers.shuffle_order`).  After ``k``
shuffles position ``i`` holds the original texture ``order^k[i]`` (the order applied ``k`` times):
:func:`cumulative_orders`.

Mixing.  A regular unit of the classifier is: shuffle -> 1x1 conv with ``C/32`` groups (1 if
C <= 32) -> 3x3 conv with ``C/4`` groups (within a pack) -> add the unit's input.  Its channel
dependencies are a boolean ``C x C`` matrix ``M[out, in]`` (:func:`unit_matrix`); a chain of
units is their boolean product.  :func:`mixing_units` counts the units (each with the shuffle)
until every output channel depends on every input channel; spatial extent is ignored (the
3x3 kernels only widen the receptive field).  Step 1 (and step ``d``) is the identity: the
groups never mix.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench import tables
from workbench.files import read_json, write_json
from workbench.nets.layers import shuffle_order
from workbench.nets.models import CLASSIFIER_PRESETS, SHUFFLE_STEP

PACK = 4             # channels per RGBA texture
GROUP_CHANNELS = 32  # channels per group of the 1x1 convolutions (models.dogs_classifier)


def whole_packs(channels: int) -> int:
    """Textures of 4 channels that hold ``channels`` (which must be whole packs: a shuffle moves
    whole textures)."""
    if channels % PACK:
        raise ValueError(f"{channels} channels are not whole packs of {PACK}")
    return channels // PACK


def valid_steps(channels: int) -> list[int]:
    """The steps ``n`` (1..d) for which the shuffle over ``channels`` is a permutation."""
    d = whole_packs(channels)
    steps = []
    for n in range(1, d + 1):
        try:
            shuffle_order(d, n)
        except ValueError:
            continue
        steps.append(n)
    return steps


def cumulative_orders(channels: int, step: int, iterations: int) -> list[list[int]]:
    """``orders[k-1][i]``: the original texture bound at position ``i`` after ``k`` shuffles."""
    order = np.array(shuffle_order(whole_packs(channels), step))
    current, orders = np.arange(len(order)), []
    for _ in range(iterations):
        current = current[order]
        orders.append(current.tolist())
    return orders


def order_rows(channels: int, step: int, iterations: int) -> list[dict]:
    """The order table as rows ``{"position": i, "after 1": ..., "after 2": ...}``."""
    orders = cumulative_orders(channels, step, iterations)
    return [{"position": i, **{f"after {k + 1}": o[i] for k, o in enumerate(orders)}}
            for i in range(whole_packs(channels))]


def order_table(channels: int, step: int, iterations: int, width: int | None = None) -> str:
    """The texture order after each of ``iterations`` shuffles, one line per iteration
    (``width``: show only the first positions, then ``...``)::

        128 channels (32 textures), step 8
        iteration 1: 0, 8, 16, 24, 1, 9, 17, 25, ...
        iteration 2: 0, 2, 4, 6, 8, 10, 12, 14, ...
    """
    lines = [f"{channels} channels ({whole_packs(channels)} textures), step {step}"]
    for k, order in enumerate(cumulative_orders(channels, step, iterations), start=1):
        shown = order if width is None else order[:width]
        tail = ", ..." if len(shown) < len(order) else ""
        lines.append(f"iteration {k}: " + ", ".join(map(str, shown)) + tail)
    return "\n".join(lines)


def markdown_table(channels: int, step: int, iterations: int) -> str:
    """The order table in markdown: one row per position, one column per iteration."""
    rows = order_rows(channels, step, iterations)
    columns = {"position": "position", **{f"after {k}": f"texture after {k}"
                                          for k in range(1, iterations + 1)}}
    return tables.markdown(rows, columns)


# --- dependency matrices ------------------------------------------------------------------

def _blocks(channels: int, size: int) -> np.ndarray:
    """Block-diagonal boolean ``C x C`` matrix with blocks of ``size`` channels."""
    group = np.arange(channels) // size
    return group[:, None] == group[None, :]


def conv1x1_groups(channels: int, group_channels: int = GROUP_CHANNELS) -> int:
    """Groups of the unit's 1x1 conv, as in ``models.dogs_classifier``: ``C/32``, 1 if C <= 32."""
    return max(1, channels // group_channels)


def shuffle_matrix(channels: int, step: int) -> np.ndarray:
    """``P[out, in]``: output channel ``out`` is input channel ``in`` after the shuffle."""
    matrix = np.zeros((channels, channels), bool)
    matrix[np.arange(channels), _shuffle_index(channels, step)] = True
    return matrix


def unit_matrix(channels: int, step: int, group_channels: int = GROUP_CHANNELS,
                shuffle: bool = True, residual: bool = True) -> np.ndarray:
    """Channel dependencies ``M[out, in]`` of one regular unit: (shuffle) -> grouped 1x1 ->
    3x3 within packs (-> + input); the boolean product ``conv3 . conv1 . P (| I)``, formed by
    indexing."""
    m = _blocks(channels, channels // conv1x1_groups(channels, group_channels))
    if shuffle:  # conv1 . P: input channel index[j] reaches what channel j reached
        shuffled = np.empty_like(m)
        shuffled[:, _shuffle_index(channels, step)] = m
        m = shuffled
    m = _group_or(m, PACK)  # conv3 . m
    return m | np.eye(channels, dtype=bool) if residual else m


def _shuffle_index(channels, step):
    return [PACK * p + c for p in shuffle_order(whole_packs(channels), step) for c in range(PACK)]


def _group_or(m, size):
    """``blocks(size) . m``: each row becomes the OR of the rows of its block."""
    rows = m.reshape(m.shape[0] // size, size, -1).any(axis=1)
    return np.repeat(rows, size, axis=0)


def _bool_product(a, b):
    # float32 goes through BLAS; the sums (at most C) are exact
    return (a.astype(np.float32) @ b.astype(np.float32)) > 0


def _units(channels, step, group_channels, residual, first_shuffled):
    """The unit matrices of a chain: the first (maybe unshuffled), then the shuffled one."""
    shuffled = unit_matrix(channels, step, group_channels, True, residual)
    first = shuffled if first_shuffled else unit_matrix(channels, step, group_channels, False,
                                                        residual)
    return first, shuffled


def coverage_curve(channels: int, step: int, units: int, group_channels: int = GROUP_CHANNELS,
                   residual: bool = True, first_shuffled: bool = True) -> list[float]:
    """After each of ``units`` units: the share of (output, input) channel pairs where the output
    depends on the input (1.0 = fully mixed).  ``first_shuffled=False`` leaves the first unit
    without a shuffle, as the first unit of each stage of the classifier."""
    first, shuffled = _units(channels, step, group_channels, residual, first_shuffled)
    curve, m = [], first
    for u in range(units):
        if u:
            m = _bool_product(shuffled, m)
        curve.append(float(m.mean()))
    return curve


def mixing_units(channels: int, step: int, group_channels: int = GROUP_CHANNELS,
                 residual: bool = True, first_shuffled: bool = True,
                 max_units: int = 64) -> int | None:
    """Units until every output channel depends on every input channel; ``None`` if that
    never happens (the dependencies stop growing first, e.g. step 1)."""
    first, shuffled = _units(channels, step, group_channels, residual, first_shuffled)
    m = first
    for u in range(1, max_units + 1):
        if m.all():
            return u
        grown = _bool_product(shuffled, m)
        if (grown == m).all():
            return None
        m = grown
    return None


def mixing_table(channels=(64, 128, 192), steps=None, group_channels: int = GROUP_CHANNELS,
                 residual: bool = True, curve_units: int = 8) -> list[dict]:
    """Per channel count and valid step (``steps``: all valid steps by default): units to mix
    fully (``None``: never), with every unit shuffled and with the stage layout (first unit
    not shuffled), and the coverage after each of ``curve_units`` units."""
    rows = []
    for c in channels:
        for n in (valid_steps(c) if steps is None else [s for s in steps if s in valid_steps(c)]):
            rows.append({
                "channels": c, "textures": whole_packs(c),
                "groups_1x1": conv1x1_groups(c, group_channels),
                "step": n, "identity": shuffle_order(whole_packs(c), n) == list(range(whole_packs(c))),
                "units_to_mix": mixing_units(c, n, group_channels, residual),
                "units_to_mix_stage": mixing_units(c, n, group_channels, residual,
                                                   first_shuffled=False),
                "coverage": coverage_curve(c, n, curve_units, group_channels, residual),
            })
    return rows


def stage_layout(preset: str = "dogs120") -> list[dict]:
    """The shuffles of a classifier preset, per stage, as ``models.dogs_classifier`` builds them:
    a unit is shuffled when it is not the stage's first and the stage has more than 32 channels.
    With the unit at which the stage's output first depends on all of its input channels."""
    rows = []
    for s, (units, c) in enumerate(CLASSIFIER_PRESETS[preset]["stages"], start=1):
        shuffled = [u for u in range(1, units + 1) if c > 32 and u > 1]
        curve, m, mixed_at = [], np.eye(c, dtype=bool), None
        for u in range(1, units + 1):
            m = _bool_product(unit_matrix(c, SHUFFLE_STEP, shuffle=u in shuffled), m)
            curve.append(float(m.mean()))
            if mixed_at is None and m.all():
                mixed_at = u
        order = shuffle_order(whole_packs(c), SHUFFLE_STEP)
        rows.append({"stage": s, "channels": c, "textures": whole_packs(c), "units": units,
                     "groups_1x1": conv1x1_groups(c), "shuffled_units": shuffled,
                     "step": SHUFFLE_STEP if shuffled else None,
                     "order": order if shuffled else None,
                     "mixed_at_unit": mixed_at, "coverage": curve})
    return rows


def verdict(rows: list[dict], reference_step: int = 8) -> str:
    """One sentence per channel count: units to mix with the reference step, the fewest units
    any step needs, and the steps that never mix."""
    lines = []
    for c in sorted({r["channels"] for r in rows}):
        mine = [r for r in rows if r["channels"] == c]
        ref = next((r for r in mine if r["step"] == reference_step), None)
        mixing = [r["units_to_mix"] for r in mine if r["units_to_mix"] is not None]
        best = min(mixing) if mixing else None
        never = [r["step"] for r in mine if r["units_to_mix"] is None]
        text = f"{c} channels ({conv1x1_groups(c)} groups of 32): "
        if ref is not None:
            n = ref["units_to_mix"]
            text += (f"step {reference_step} mixes every group into every other in {n} units"
                     if n is not None else f"step {reference_step} never mixes")
            text += "; " if best is None else \
                (f" (the fewest any step needs: {best}); " if best == n or n is None
                 else f", but step(s) {[r['step'] for r in mine if r['units_to_mix'] == best]} "
                      f"need only {best}; ")
        text += f"never with step(s) {never} (the identity)." if never else "every step mixes."
        lines.append(text)
    return "\n".join(lines)


# --- figures ------------------------------------------------------------------------------

def binding_diagram(channels: int = 128, step: int = 8, iterations: int = 3, ax=None):
    """The texture binding order as the reference article draws it: one column of textures per
    shuffle (column 0 = the input), each box labelled with the original texture it holds, a line
    from each texture to its position after the next shuffle; colour = the 32-channel group of
    the 1x1 conv the original texture belongs to.  Returns the figure."""
    import matplotlib
    from matplotlib.patches import Rectangle

    d = whole_packs(channels)
    orders = [list(range(d))] + cumulative_orders(channels, step, iterations)
    order = shuffle_order(d, step)
    per_group = max(1, (channels // conv1x1_groups(channels)) // PACK)  # textures per group
    colours = matplotlib.colormaps["tab10"]
    if ax is None:
        from workbench.figures import plt

        fig, ax = plt.subplots(figsize=(1.6 + 1.7 * iterations, 0.8 + 0.19 * d))
    else:
        fig = ax.figure
    box_w, gap = 0.5, 1.7
    for k, held in enumerate(orders):
        x = k * gap
        for i, texture in enumerate(held):
            colour = colours((texture // per_group) % 10)
            ax.add_patch(Rectangle((x - box_w / 2, i - 0.4), box_w, 0.8, facecolor=colour,
                                   alpha=0.35, edgecolor=colour, linewidth=0.8))
            ax.text(x, i, str(texture), ha="center", va="center", fontsize=6.5)
        if k:  # position i after this shuffle reads position order[i] of the previous column
            for i in range(d):
                src = order[i]
                colour = colours((orders[k - 1][src] // per_group) % 10)
                ax.plot([x - gap + box_w / 2, x - box_w / 2], [src, i], color=colour,
                        linewidth=0.7, alpha=0.8)
    for boundary in range(per_group, d, per_group):  # the 1x1 conv's groups read these rows
        ax.axhline(boundary - 0.5, color="grey", linewidth=0.5, linestyle=":")
    ax.set_xlim(-gap / 2, iterations * gap + gap / 2)
    ax.set_ylim(d - 0.5, -0.5)
    ax.set_xticks([k * gap for k in range(iterations + 1)],
                  ["input"] + [f"after {k}" for k in range(1, iterations + 1)], fontsize=8)
    ax.set_yticks([])
    ax.set_ylabel("texture position (4 channels each)", fontsize=8)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"shuffle binding order: {channels} channels, step {step}\n"
                 "colour: the original texture's 32-channel group\n"
                 "dotted: the groups of the next 1x1 conv", fontsize=9)
    fig.tight_layout()
    return fig


def mixing_figure(rows: list[dict], reference_step: int = 8):
    """Coverage (share of output/input channel pairs connected) against units, one panel per
    channel count, one line per step (the reference step in black, drawn last); rows from
    :func:`mixing_table`.  Steps with the same curve overlap."""
    from workbench.figures import plt

    channel_counts = sorted({r["channels"] for r in rows})
    fig, axes = plt.subplots(1, len(channel_counts), figsize=(3.6 * len(channel_counts), 3.2),
                             squeeze=False, sharey=True)
    for ax, c in zip(axes[0], channel_counts):
        mine = [r for r in rows if r["channels"] == c]
        mine.sort(key=lambda r: r["step"] == reference_step)
        for r in mine:
            units = np.arange(1, len(r["coverage"]) + 1)
            mixed = r["units_to_mix"]
            label = f"step {r['step']}: " + ("never" if mixed is None else f"{mixed} units")
            style = (dict(color="black", linewidth=2.2, linestyle="--", zorder=3)
                     if r["step"] == reference_step else dict(linewidth=1.2))
            ax.plot(units, r["coverage"], marker="o", markersize=3, label=label, **style)
        ax.set_title(f"{c} channels ({conv1x1_groups(c)} groups of 32)", fontsize=9)
        ax.set_xlabel("units (shuffle + grouped 1x1 + 3x3 + residual)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("output-input channel pairs connected")
    fig.tight_layout()
    return fig


# --- results and the report --------------------------------------------------------------------

RESULT, NOTEBOOK = "shuffle.json", "shuffle"


def save_results(directory, preset, channels, step, iterations, mixing):
    """``shuffle.json``: the preset's stages, the order table of ``channels`` at ``step`` over
    ``iterations`` shuffles, the mixing table and its verdict."""
    write_json(Path(directory) / RESULT, {
        "preset": preset, "reference_step": step, "stages": stage_layout(preset),
        "order_table": {"channels": channels, "step": step,
                        "orders": cumulative_orders(channels, step, iterations)},
        "mixing": mixing, "verdict": verdict(mixing, step)})


def report_section(directory) -> str | None:
    results = read_json(Path(directory) / RESULT)
    if not results:
        return None
    table = results["order_table"]
    rows = [{"after": f"{i + 1} shuffle(s)", "texture order": ", ".join(map(str, order[:12])) + ", ..."}
            for i, order in enumerate(table["orders"])]
    mixing = [{"channels": r["channels"], "step": r["step"],
               "units until every output depends on every input":
                   r["units_to_mix"] if r["units_to_mix"] is not None else "never"}
              for r in results["mixing"] if r["channels"] == table["channels"]]
    return (f"{table['channels']} channels, step {table['step']} (reference: texture orders 0, 8, "
            "16, 24, 1, 9, ... / 0, 2, 4, 6, ...):\n\n" + tables.markdown(rows) + "\n\n"
            + tables.markdown(mixing) + "\n\n" + results["verdict"].replace("\n", " "))
