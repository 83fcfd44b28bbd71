"""Markdown tables from lists of dicts, for notebooks and reports."""
from __future__ import annotations


def _cell(value, digits):
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"  # a count carried as a float: 1,804, not 1804.00
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(rows, columns: dict[str, str] | None = None, digits=2) -> str:
    """``rows``: dicts; ``columns``: key -> header (default: the first row's keys).
    Floats are shown with ``digits`` decimals, an int or ``{key: decimals}`` for some columns
    (2 for the others); whole floats from 1,000 on, counts, as whole numbers with thousands
    separators; None as an empty cell."""
    columns = columns or {k: k for k in rows[0]}
    places = {k: digits.get(k, 2) if isinstance(digits, dict) else digits for k in columns}
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k, ""), places[k]) for k in columns) + " |")
    return "\n".join(lines)
