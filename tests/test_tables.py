"""workbench.tables: what a report's cells look like (issue 29: `None` and `1804.00` in the
report)."""
from workbench import tables


def test_cells_of_counts_missing_values_and_measurements():
    text = tables.markdown([{"macs": 1804.0, "spread": None, "psnr": 36.4217, "ms": 130.0,
                             "programs": 32, "ratio": "20 / 32"}])
    assert text.splitlines()[2] == "| 1,804 |  | 36.42 | 130.00 | 32 | 20 / 32 |"


def test_decimals_per_column():
    """A share of 99.9989 % must not print as 100.00 where equality is the claim."""
    rows = [{"bytes %": 99.99889502762431, "psnr": 50.4152, "fetches": 174.0}]
    text = tables.markdown(rows, digits={"bytes %": 4, "fetches": 0})
    assert text.splitlines()[2] == "| 99.9989 | 50.42 | 174 |"
