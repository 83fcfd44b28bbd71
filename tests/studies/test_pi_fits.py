"""The calibrated Raspberry Pi model of any net (workbench.studies.compilers: pi_rows,
stored_fits; workbench.studies.beatmup_pi: calibrate_pi, write_pi_fits).

References: the article's measured times (references.py) met by the stored fits from the
stored counts; the fits solved again from Beatmup's programs through vc4 (needs `make beatmup`
and `make drivers`); a net's times by hand (numpy on the stored fits, made-up vc4 statistics
and the fragments each pass draws counted from the net's shape); the QPUs' peak as 12 x 4 x
MHz multiply-adds.
"""
import json

import numpy as np
import pytest

from workbench import es2
from workbench.__main__ import main
from workbench.files import read_json
from workbench.gl import beatmup as peer
from workbench.gl import drivers
from workbench.nets.models import sr_x2
from workbench.studies import beatmup_measure, beatmup_pi, compilers

needs_drivers = pytest.mark.skipif(drivers.available() is not None,
                                   reason=drivers.available() or "")
needs_peer = pytest.mark.skipif(peer.available() is not None, reason=peer.available() or "")
PI3 = "Raspberry Pi 3 B / B+"


def _tiny():
    """An x2 SR net of 120 multiply-adds a pixel (3x3x1x8 + 8x4 + 4x4): passes L1.0, L1.1,
    L2.0, L3.0 over the input's pixels, subpixels.0 over the output's."""
    return sr_x2(widths=(8, 4), kernels=(3, 1), groups=(1, 1))


def _clocks(fragment_counts):
    """V3D clocks by hand: 16 fragments an instruction in 4 clocks on 12 QPUs."""
    return fragment_counts / 16 * 4 / 12


def test_the_stored_fits_meet_the_articles_times_from_the_stored_counts():
    stored = read_json(compilers.PI_FITS)
    measured = {(m["net"], m["board"]): m["ms"] for m in stored["measured ms"]}
    assert measured == beatmup_measure.MEASURED_MS
    programs = {p["net"]: p for p in stored["article's programs (vc4)"]}
    assert len(stored["fits"]) == 2 * 2 * 3  # boards x clocks assumed x counts
    for fit in stored["fits"]:
        column = beatmup_pi.PI_COUNTS[fit["count"]]
        for net in ("x2", "classifier"):
            p = programs[net]
            ms = fit["a"] * _clocks(p[column] * 1e9) / (fit["V3D MHz"] * 1e3) \
                + fit["d"] * p["draws"]
            assert ms == pytest.approx(measured[(net, fit["board"])], rel=1e-5)


@needs_peer
@needs_drivers
def test_the_stored_fits_are_those_of_the_articles_programs_through_vc4():
    """Solved again (Beatmup's two apps captured, their programs through vc4: seconds), the
    fits and the counts are the stored ones, to the stored decimals."""
    stored = read_json(compilers.PI_FITS)
    assert stored["mesa"] == drivers.MESA_VERSION and stored["beatmup"] == peer.COMMIT
    rows = beatmup_pi.article_rows()
    fresh = beatmup_pi.calibrate_pi(rows)
    key = ("board", "clock from", "V3D MHz", "count")
    assert [[f[k] for k in key] for f in fresh] == [[f[k] for k in key] for f in stored["fits"]]
    for new, old in zip(fresh, stored["fits"]):
        assert [new["a"], new["d"]] == pytest.approx([old["a"], old["d"]],
                                                     abs=10 ** -stored["digits"])
    theirs = {r["net"]: r for r in rows if r["implementation"] == "Beatmup"}
    for p in stored["article's programs (vc4)"]:
        assert p == {k: theirs[p["net"]][k] for k in p}


def test_a_nets_pi_range_by_hand_from_its_vc4_statistics():
    net = es2.compile(_tiny())
    assert [p.name for p in net.passes] == ["L1.0", "L1.1", "L2.0", "L3.0", "subpixels.0"]
    instructions = np.array([100, 120, 40, 30, 10])
    cycles = np.array([300, 200, 90, 30, 25])
    threads = np.array([2, 2, 1, 2, 2])
    reports = [{"ok": True, "stats": {"instructions": int(i), "estimated_cycles": int(c),
                                      "threads": int(t)}}
               for i, c, t in zip(instructions, cycles, threads)]
    results = {"mine": {"targets": {"vc4": {"net": net, "reports": reports,
                                            "compiled_for": "ES 2.0"}}}}
    rows = compilers.pi_rows(results, {"mine": ("model", 64)})
    assert [r["board"] for r in rows] == list(compilers.BOARDS_MHZ)

    fragments = np.array([64 * 64] * 4 + [128 * 128])
    per_fragment = {"cycles": cycles, "instructions": instructions,
                    "two threads": np.maximum(instructions, cycles / threads)}
    macs = 64 * 64 * (3 * 3 * 8 + 8 * 4 + 4 * 4)
    for row in rows:
        fits = compilers.stored_fits()[row["board"]]
        mhz = compilers.BOARDS_MHZ[row["board"]]
        ms = {count: fit["a"] * _clocks(fragments @ per_fragment[count]) / (mhz * 1e3)
              + fit["d"] * 5 for count, fit in fits.items()}
        for count, value in ms.items():
            assert row[f"calibrated ms ({count})"] == pytest.approx(value)
        assert row["calibrated ms min"] == pytest.approx(min(ms.values()))
        assert row["calibrated ms max"] == pytest.approx(max(ms.values()))
        assert row["predicted ms"] == round(_clocks(fragments @ cycles) / (mhz * 1e3), 1)
        assert row["GMAC an image"] == pytest.approx(macs / 1e9)
        assert row["GMAC/s max"] == pytest.approx(macs / (min(ms.values()) / 1e3) / 1e9)
        assert row["GMAC/s min"] == pytest.approx(macs / (max(ms.values()) / 1e3) / 1e9)
        peak = 12 * 4 * mhz * 1e6 / 1e9
        for end in ("min", "max"):
            assert row[f"% of QPU peak {end}"] == pytest.approx(100 * row[f"GMAC/s {end}"] / peak)


def test_the_qpus_peak_is_12_qpus_of_4_lanes_a_multiply_add_a_clock():
    assert compilers.qpu_peak_gmacs(400) == pytest.approx(12 * 4 * 400e6 / 1e9) == 19.2
    assert compilers.qpu_peak_gmacs(300) == pytest.approx(14.4)


def test_the_clock_assumed_changes_a_not_the_times():
    documented, article = compilers.stored_fits(), compilers.stored_fits("article")
    for board, fits in documented.items():
        for count, fit in fits.items():
            other = article[board][count]
            assert other["V3D MHz"] != fit["V3D MHz"]
            assert compilers.calibrated_ms(other, 1e7, 30) == pytest.approx(
                compilers.calibrated_ms(fit, 1e7, 30), rel=1e-5)


@needs_drivers
def test_drivers_prints_the_pi_range_of_a_users_keras_net(tmp_path, capsys):
    """``drivers --model mine.keras --driver vc4``: each vc4 row of a user's net (random
    weights, no input size: 256x256) with its calibrated range printed; the plain row's range
    by hand from the saved vc4 statistics."""
    _tiny().save(tmp_path / "mine.keras")
    assert main(["drivers", "--model", str(tmp_path / "mine.keras"), "--driver", "vc4",
                 "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "d" / compilers.RESULT).read_text())
    rows = saved["pi"]
    assert {(r["net"], r["input"]) for r in rows} == {("mine", "256x256")} and len(rows) == 4
    for r in rows:
        span = f"{r['calibrated ms min']:.1f}-{r['calibrated ms max']:.1f}"
        line = next(line for line in out.splitlines()
                    if line.startswith(f"| mine | {r['compiled for']} |") and r["board"] in line)
        assert f"| {span} |" in line and "% of QPU peak" in out

    target = saved["nets"]["mine"]["targets"]["vc4"]
    assert [p["name"] for p in target["passes"]] == ["L1.0", "L1.1", "L2.0", "L3.0",
                                                     "subpixels.0"]
    fragments = np.array([256 * 256] * 4 + [512 * 512])
    stats = [r["stats"] for r in target["reports"]]
    cycles = np.array([s["estimated_cycles"] for s in stats])
    instructions = np.array([s["instructions"] for s in stats])
    two = np.maximum(instructions, cycles / np.array([s["threads"] for s in stats]))
    plain = [r for r in rows if r["compiled for"] == "ES 2.0" and r["board"] == PI3][0]
    fits = compilers.stored_fits()[PI3]
    ms = [fits[count]["a"] * _clocks(fragments @ counts) / 400e3 + fits[count]["d"] * 5
          for count, counts in (("cycles", cycles), ("instructions", instructions),
                                ("two threads", two))]
    assert [plain["calibrated ms min"], plain["calibrated ms max"]] == pytest.approx(
        [min(ms), max(ms)])
