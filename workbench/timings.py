"""Repeated timings and what they allow one to say: the median with the quartiles as its
spread, and one side faster than another only beyond that spread."""
from __future__ import annotations

import numpy as np


def quartiles(runs_ms) -> tuple[float, float]:
    """The 25th and 75th percentiles of the runs (numpy's linear interpolation)."""
    lo, hi = np.percentile(runs_ms, (25, 75))
    return float(lo), float(hi)


def faster(runs_a, runs_b):
    """``"a"`` or ``"b"`` where one side's runs are faster beyond the spread (its 75th
    percentile below the other's 25th), else None: a tie the timings cannot split."""
    qa, qb = quartiles(runs_a), quartiles(runs_b)
    if qa[1] < qb[0]:
        return "a"
    if qb[1] < qa[0]:
        return "b"
    return None
