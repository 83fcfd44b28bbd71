"""`python -m workbench run`: profiles, dependency order, failure propagation, skipping
unchanged steps.  Uses tiny notebooks made here (each appends its name to a log file)."""
import json
from pathlib import Path

import nbformat
import pytest
import yaml

from workbench.run import pipeline

DEPENDENCIES = {"a": [], "b": ["a"], "c": ["b"], "d": []}


def _notebook(path, body, upstream=(), alone=None):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                  "language": "python"}}
    params = nbformat.v4.new_code_cell(f"# upstream: {', '.join(upstream) or 'none'}\n"
                                       + (f"# alone: {alone}\n" if alone else "")
                                       + "log = None\nfail = False")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path):
    books = tmp_path / "notebooks"
    books.mkdir()
    for name in DEPENDENCIES:
        _notebook(books / f"{name}.ipynb",
                  f"open(log, 'a').write('{name}\\n')\nprint('partial output of {name}')\n"
                  "assert not fail, 'made to fail'", DEPENDENCIES[name])
    log = tmp_path / "log.txt"
    profiles = tmp_path / "profiles.yml"
    profiles.write_text(yaml.safe_dump({
        "p": {name: {"log": str(log)} for name in DEPENDENCIES},
        "broken": {**{name: {"log": str(log)} for name in DEPENDENCIES},
                   "b": {"log": str(log), "fail": True}},
    }))

    def run(profile="p", data_root=None, manifest=None, **kw):
        runs = tmp_path / "runs" / str(len(list(tmp_path.glob("runs/*"))))
        return pipeline.run(profile, places=pipeline.Places(
            profiles, books, runs_dir=runs, artifacts_dir=tmp_path / "artifacts",
            data_root=data_root, manifest=manifest), **kw)
    return tmp_path, log, run


def test_profile_parsing(tmp_path):
    path = tmp_path / "profiles.yml"
    path.write_text("quick:\n  sr_train: {steps: 3}\nodd:\n  nope: {}\n")
    assert pipeline.load_profile("quick", path) == {"sr_train": {"steps": 3}}
    with pytest.raises(ValueError, match="no profile 'full'; profiles: quick, odd"):
        pipeline.load_profile("full", path)
    with pytest.raises(ValueError, match="unknown notebooks \\['nope'\\]"):
        pipeline.load_profile("odd", path)
    # the real profiles name only real notebooks, each upstream notebook runs before its readers
    for name in ("quick", "full", "ci"):
        deps = pipeline.upstream_of(pipeline.NOTEBOOKS_DIR, pipeline.load_profile(name))
        assert deps["glsl_deploy"] == ["sr_train"] and deps["classifier_deploy"] == ["classifier_train"]
        assert list(deps)[-1] == "figures"
    assert pipeline.declarations(pipeline.NOTEBOOKS_DIR / "sr_eval.ipynb") == \
        {"upstream": ["sr_train"], "data": ["Set5", "Set14"], "alone": []}
    # what times something or gathers the run's results runs alone
    alone = {n for n in pipeline.load_profile("quick")
             if pipeline.declarations(pipeline.NOTEBOOKS_DIR / f"{n}.ipynb")["alone"]}
    assert alone == {"glsl_deploy", "classifier_deploy", "conv_algorithms", "figures"}


def test_an_upstream_listed_after_its_reader_is_refused(project):
    root, log, run = project
    profiles = root / "late.yml"
    profiles.write_text(yaml.safe_dump({"late": {"b": {"log": str(log)}, "a": {"log": str(log)}}},
                                       sort_keys=False))
    with pytest.raises(ValueError, match="notebook 'b' declares upstream \\['a'\\], which must run "
                                         "before it"):
        pipeline.run("late", places=pipeline.Places(
            profiles, root / "notebooks", runs_dir=root / "runs" / "late",
            artifacts_dir=root / "artifacts"))


def test_dependency_order_and_skip_when_unchanged(project):
    root, log, run = project
    assert run() == {n: "ok" for n in DEPENDENCIES}
    assert log.read_text().split() == ["a", "b", "c", "d"]
    assert run() == {n: "unchanged" for n in DEPENDENCIES}
    assert log.read_text().split() == ["a", "b", "c", "d"]          # nothing ran again
    # a changed upstream notebook re-runs it and everything downstream of it
    nb = nbformat.read(root / "notebooks" / "a.ipynb", as_version=4)
    nb.cells[1].source += "\n# changed"
    nbformat.write(nb, root / "notebooks" / "a.ipynb")
    assert run() == {"a": "ok", "b": "ok", "c": "ok", "d": "unchanged"}
    assert run(force=True) == {n: "ok" for n in DEPENDENCIES}


def test_failure_stops_dependants_and_keeps_partial_output(project):
    root, log, run = project
    with pytest.raises(SystemExit, match=r"notebooks failed: b \(failed in cell \d+: AssertionError: "
                                         r"made to fail\); partial output in"):
        run("broken")
    assert log.read_text().split() == ["a", "b", "d"]                 # c never started
    executed = next((root / "runs").glob("*/b.ipynb"))
    outputs = nbformat.read(executed, as_version=4).cells[-1].outputs
    assert any("partial output of b" in o.get("text", "") for o in outputs)
    state = json.loads((root / "artifacts" / "pipeline-state.json").read_text())
    assert "b" not in state and "a" in state


def test_overrides_are_scoped_to_one_notebook(project):
    root, log, run = project
    other = root / "other.txt"
    assert run(only=["d"], overrides={"d.log": str(other)}) == {"d": "ok"}
    assert other.read_text().split() == ["d"] and not log.exists()
    assert run(only=["a"], overrides={"log": str(other)}) == {"a": "ok"}  # only a has it
    assert other.read_text().split() == ["d", "a"]
    with pytest.raises(ValueError, match="-p log: a, b, c, d all have 'log'; say which, e.g. "
                                         "-p a.log VALUE"):
        run(overrides={"log": "x"})
    with pytest.raises(ValueError, match="-p nosuchkey: no notebook of this run has"):
        run(overrides={"nosuchkey": 1})
    with pytest.raises(ValueError, match="notebook 'a' has no parameter 'steps'"):
        run(overrides={"a.steps": 1})
    with pytest.raises(ValueError, match="--only nosuch: not a notebook of profile 'p'"):
        run(only=["nosuch"])
    with pytest.raises(ValueError, match=r"-p a.fail 'abc': a's fail takes true/false \(as "
                                         r"False\), not a string"):
        run(overrides={"a.fail": "abc"})
    with pytest.raises(ValueError, match=r"-p d.log 3: d's log takes a string \(as '.*log"
                                         r".txt'\), not a number"):
        run(overrides={"d.log": 3})  # the default is None: the profile's value gives the kind
    assert not (root / "log.txt").exists()  # nothing ran


def test_check_value_by_the_default_and_the_profile():
    check = pipeline.check_value
    check("steps", 3, "nb", 4)
    check("lr", 3, "nb", 0.5)  # an int is a number
    check("limit", None, "nb", None, 8)  # null fits a default None
    check("limit", 20, "nb", None, 8)
    check("anything", [1], "nb", None)  # nothing says its kind
    for value, default in ((1.5, [1]), ("abc", 6), (None, 6), (True, "x"), ({"a": 1}, [1])):
        with pytest.raises(ValueError, match=f"-p k {value!r}: nb's k takes"):
            check("k", value, "nb", default)


def test_cli_reports_a_bad_run_in_one_line(capsys):
    from workbench.run.cli import main
    assert main(["run", "--profile", "ci", "--only", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --only nosuch: not a notebook of profile 'ci'") and err.count("\n") == 1


def test_missing_data_is_fetched_first_or_named_in_one_line(project, tmp_path):
    import zipfile

    from PIL import Image

    root, log, run = project
    pics = tmp_path / "pics"
    pics.mkdir()
    Image.new("RGB", (4, 4), (9, 9, 9)).save(pics / "one.png")
    archive = tmp_path / "toy.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(pics / "one.png", "pics/one.png")
    entry = {"url": archive.as_uri(), "sha256": None, "subdir": "pics"}
    manifest = {"Toy": {"about": "test", "target": "sr/Toy", "default": False, "files": [entry]}}
    data_root = tmp_path / "data"
    with pytest.raises(ValueError, match=r"^the run needs Toy, which could not be fetched \(.*\); "
                                         r"fetch with: python -m workbench fetch-data --root .* Toy$"):
        run(only=["d"], data={"d": ["Toy"]}, data_root=data_root,
            manifest={"Toy": {**manifest["Toy"], "files": [{**entry, "url": (tmp_path / "gone.zip").as_uri()}]}})
    assert not log.exists()  # nothing ran
    entry["sha256"] = __import__("hashlib").sha256(archive.read_bytes()).hexdigest()
    assert run(only=["d"], data={"d": ["Toy"]}, data_root=data_root, manifest=manifest) == {"d": "ok"}
    assert (data_root / "sr" / "Toy" / "one.png").exists() and log.read_text().split() == ["d"]


def test_each_profile_writes_its_own_figures_folder(tmp_path, monkeypatch):
    """`{figures}` and, inside the notebook, `files.figures_dir()` are figures/<profile>."""
    monkeypatch.setenv("WORKBENCH_FIGURES", str(tmp_path / "figures"))
    books = tmp_path / "notebooks"
    books.mkdir()
    _notebook(books / "a.ipynb", "from workbench import files\n"
              "open(log, 'w').write(f'{results_dir}\\n{files.figures_dir()}')")
    nb = nbformat.read(books / "a.ipynb", as_version=4)
    nb.cells[0].source += "\nresults_dir = None"
    nbformat.write(nb, books / "a.ipynb")
    profiles = tmp_path / "profiles.yml"
    profiles.write_text(yaml.safe_dump({p: {"a": {"log": str(tmp_path / f"{p}.txt"),
                                                  "results_dir": "{figures}"}}
                                        for p in ("quick", "ci")}))
    for profile in ("quick", "ci"):
        pipeline.run(profile, dependencies={"a": []}, places=pipeline.Places(
            profiles, books, runs_dir=tmp_path / "runs",
            artifacts_dir=tmp_path / "artifacts" / profile))
        folder = str(tmp_path / "figures" / profile)
        assert (tmp_path / f"{profile}.txt").read_text().split("\n") == [folder, folder]


def test_the_log_is_a_line_a_notebook_unless_verbose(project, capfd):
    """No papermill trace ("Executing Cell"), no cell output in the terminal by default: a
    line a notebook with its time; --verbose brings both back."""
    _, _, run = project
    run(only=["d"])
    out, err = capfd.readouterr()
    text = out + err
    assert "Executing" not in text and "partial output of d" not in text
    assert [line.split(" (")[0] for line in out.splitlines() if line.startswith("[d]")] == [
        "[d] running", "[d] ok"]
    run(only=["d"], force=True, verbose=True)
    text = "".join(capfd.readouterr())
    assert "Executing Cell" in text and "partial output of d" in text


def test_jobs_run_notebooks_side_by_side_and_an_alone_one_by_itself(tmp_path):
    """jobs=2: independent notebooks overlap in time, a reader starts after its upstream
    step; a notebook declaring ``# alone:`` starts after everything listed before it ends,
    and nothing listed after it starts before it ends."""
    books = tmp_path / "notebooks"
    books.mkdir()
    body = ("import time\nopen(log, 'a').write(f'{name} {time.time()} start\\n')\n"
            "time.sleep(1.5)\nopen(log, 'a').write(f'{name} {time.time()} end\\n')")
    spec = {"a": ((), None), "d": ((), None), "b": (("a",), None), "c": ((), "times it"),
            "e": ((), None)}
    for name, (upstream, alone) in spec.items():
        _notebook(books / f"{name}.ipynb", f"name = {name!r}\n" + body, upstream, alone)
    log = tmp_path / "log.txt"
    profiles = tmp_path / "profiles.yml"
    profiles.write_text(yaml.safe_dump({"p": {n: {"log": str(log)} for n in spec}},
                                       sort_keys=False))
    status = pipeline.run("p", jobs=2, places=pipeline.Places(
        profiles, books, runs_dir=tmp_path / "runs", artifacts_dir=tmp_path / "artifacts"))
    assert status == {n: "ok" for n in spec}
    times = {}
    for line in log.read_text().split("\n")[:-1]:
        name, when, what = line.split()
        times.setdefault(name, {})[what] = float(when)

    def before(x, y):
        return times[x]["end"] <= times[y]["start"]
    assert not before("a", "d") and not before("d", "a")       # side by side
    assert before("a", "b")                                    # its upstream first
    assert all(before(n, "c") for n in "adb") and before("c", "e")   # alone


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_overrides_write_a_folder_of_their_own(tmp_path, monkeypatch, capsys):
    """`-p model_path=my.keras` changes the profile's parameters: the notebook's results (its
    ``{figures}``, its ``results_dir``) go to figures/<profile>-custom/<notebook>-my/, the
    profile's folder and its record of the last run stay as they were."""
    figures = tmp_path / "figures"
    monkeypatch.setenv("WORKBENCH_FIGURES", str(figures))
    books = tmp_path / "notebooks"
    books.mkdir()
    _notebook(books / "deploy.ipynb", "import os\nfrom workbench import files\n"
              "out = results_dir or files.figures_dir()\nos.makedirs(out, exist_ok=True)\n"
              "open(os.path.join(out, 'result.txt'), 'w').write(model_path)\n"
              "os.makedirs(shaders, exist_ok=True)\n"
              "open(os.path.join(shaders, 'net.txt'), 'w').write(model_path)")
    nb = nbformat.read(books / "deploy.ipynb", as_version=4)
    nb.cells[0].source += "\nmodel_path = 'model.keras'\nresults_dir = None\nshaders = None"
    nbformat.write(nb, books / "deploy.ipynb")
    profiles = tmp_path / "profiles.yml"
    profiles.write_text(yaml.safe_dump({"quick": {"deploy": {
        "model_path": "{artifacts}/model.keras", "shaders": "{figures}/shaders"}}}))

    def run(**overrides):
        return pipeline.run("quick", overrides=overrides, dependencies={"deploy": []},
                            places=pipeline.Places(profiles, books, runs_dir=tmp_path / "runs",
                                                   artifacts_dir=tmp_path / "artifacts"))
    assert run() == {"deploy": "ok"}
    profile_results = _files(figures / "quick")
    assert profile_results[Path("result.txt")].endswith(b"artifacts/model.keras")
    capsys.readouterr()
    assert run(model_path="/data/nets/my.keras") == {"deploy": "ok"}
    own = figures / "quick-custom" / "deploy-my"
    assert f"its results go to {own}" in capsys.readouterr().out
    assert _files(figures / "quick") == profile_results
    assert _files(own) == {Path("result.txt"): b"/data/nets/my.keras",
                           Path("shaders/net.txt"): b"/data/nets/my.keras"}
    assert run() == {"deploy": "unchanged"}  # the profile's last run is still recorded
    same = str(tmp_path / "artifacts" / "model.keras")
    assert run(model_path=same) == {"deploy": "unchanged"}  # the profile's value: its folder
    assert sorted(p.name for p in figures.iterdir()) == ["quick", "quick-custom"]


def test_variant_names():
    name = pipeline.variant_name
    assert name({"model_path": "runs/x/my_net.keras"}) == "my_net"
    assert name({"precision": "mediump", "steps": 100}) == "mediump-steps=100"
    assert name({"sets": ["Set5"], "limit": None}) == "sets=Set5-limit=null"
    assert name({"model_path": "../"}) == "custom"
