"""workbench.timings and the verdicts built on it: one side faster only beyond the quartiles."""
import pytest

from workbench import timings
from workbench.files import write_json
from workbench.studies import peers


def test_quartiles_and_faster():
    assert timings.quartiles([5, 1, 4, 2, 3]) == (2.0, 4.0)   # linear interpolation, as numpy's
    assert timings.quartiles([1, 2, 3, 4]) == (1.75, 3.25)
    assert timings.faster([1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == "a"
    assert timings.faster([10, 11, 12, 13, 14], [1, 2, 3, 4, 5]) == "b"
    assert timings.faster([1, 2, 3, 4, 5], [3, 4, 5, 6, 7]) is None   # a's 75th = b's 25th: level


def _side(name, engine, runs, fastest=None):
    q1, q3 = timings.quartiles(runs)
    side = {"name": name, "engine": engine, "runs_ms": runs, "median_ms": sorted(runs)[len(runs) // 2],
            "q1_ms": q1, "q3_ms": q3}
    return side | ({"fastest_grouping": fastest} if fastest is not None else {})


def test_peer_verdicts_read_the_spread():
    result = {"sides": [
        _side("ours", "page", [270, 280, 290, 300, 310]),
        _side("ours, MRT", "page", [150, 155, 160, 165, 170]),
        _side("TF.js wasm", "tfjs", [190, 195, 200, 205, 210], fastest=True),
        _side("TF.js wasm", "tfjs", [240, 245, 250, 255, 260], fastest=False),
        _side("TF.js webgl", "tfjs", [280, 290, 300, 310, 320], fastest=True)]}
    assert peers.verdicts(result) == [
        "ours vs TF.js wasm: slower (0.69x)",
        "ours vs TF.js webgl: level (medians 1.03x; quartiles overlap)",
        "ours, MRT vs TF.js wasm: faster (1.25x)",
        "ours, MRT vs TF.js webgl: faster (1.88x)"]
    for side in result["sides"]:
        del side["q1_ms"]
    assert peers.verdicts(result) == []  # a peers.json from before the quartiles


def test_peers_json_of_either_age(tmp_path):
    """peers.json holds a result per GL; one from before GLs (a result alone) reads as one."""
    one, two = {"gl": "swiftshader", "sides": []}, {"gl": "llvmpipe", "sides": []}
    assert peers.load_results(tmp_path) == []
    write_json(tmp_path / peers.RESULT, {"results": [one, two]})
    assert peers.load_results(tmp_path) == [one, two]
    write_json(tmp_path / peers.RESULT, one)
    assert peers.load_results(tmp_path) == [one]


@pytest.mark.parametrize("ra, rb, expected", [
    ({"ms": 3.0, "runs_ms": [1, 2, 3, 4, 5]}, {"ms": 12.0, "runs_ms": [10, 11, 12, 13, 14]}, "a"),
    ({"ms": 3.0}, {"ms": 2.0}, "b"),   # records without runs: their one time
])
def test_conv_study_uses_the_same_rule(ra, rb, expected):
    from workbench.studies import conv_algorithms
    assert conv_algorithms.faster(ra, rb) == expected
