"""Markdown tables from lists of dicts, for notebooks and reports."""
from __future__ import annotations


def _cell(value, digits):
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(rows, columns: dict[str, str] | None = None, digits=2) -> str:
    """``rows``: dicts; ``columns``: key -> header (default: the first row's keys).
    Floats are shown with ``digits`` decimals."""
    columns = columns or {k: k for k in rows[0]}
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k, ""), digits) for k in columns) + " |")
    return "\n".join(lines)
