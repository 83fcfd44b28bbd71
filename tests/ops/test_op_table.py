"""Every case of the op table (tests/ops/cases.py) through every consumer:

* tf: the emulator's output (the GPU's bytes, predicted) is Keras' within the case's tolerance
  (half a level for one stored layer: TF rounded to the nearest of 256 levels; a Dense layer's
  logits within its number format's steps);
* gpu: every tensor's bytes (its own channels) are the emulator's on Mesa llvmpipe (another
  GPU: >= 99.99 % of them, the rest a level apart);
* glslang: every ES 2.0 program and ES 3.1 kernel passes glslangValidator;
* es31: the ES 3.1 compute kernels (float storage) are Keras within 1e-4;
* onnx: the ONNX writer's model, run by ONNX Runtime, is Keras within 1e-4;
* page, tfjs: in one headless Chromium for the whole table, the page's output (pack 0, or the
  logits) is the emulator's within a level (SwiftShader rounds a value within float32
  rounding of a half level either way), TF.js's (cpu, each grouping of a grouped conv) Keras'
  within 1e-4;
* vc4, gc2000: the net compiled for the driver's profile with ``fit=True`` (a refused layer
  re-planned: fewer output channels, then fewer kernel rows a program) is taken by the Mesa
  driver, every program (where ``make drivers`` built them).

A consumer that does not take a case is declared in the table (``refuses``: the harness checks
its one-line refusal), one that gets it wrong too (``xfail``: the reason)."""
import base64
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.ops import cases
from workbench import es2, ir

ENTRIES = {i: (case, activation) for i, case, activation in cases.entries()}


def param(i, consumer, *values):
    """``pytest.param`` of entry ``i`` (and ``values``) for ``consumer``: an xfail where the table
    says the consumer gets the case wrong."""
    xfail = ENTRIES[i][0].xfail.get(consumer)
    return pytest.param(i, *values, id="-".join([i, *values]),
                        marks=[pytest.mark.xfail(reason=xfail, strict=True)] if xfail else [])


def params(consumer):
    return [param(i, consumer) for i in ENTRIES]


@functools.lru_cache(maxsize=None)
def built(i):
    """(case, activation, Keras model, image, Keras' output)."""
    case, activation = ENTRIES[i]
    model = case.build(activation)
    image = cases.image(case)
    return case, activation, model, image, model(image[None]).numpy()[0]


@functools.lru_cache(maxsize=None)
def net(i):
    case, _, model, _, _ = built(i)
    return es2.compile(model, dense=case.dense)


def consume(i, consumer, call):
    """``call()``'s result; where the table declares ``consumer``'s refusal of the case, check
    that it refuses in one line naming it, and return None."""
    case, activation = ENTRIES[i]
    fragment = cases.refused(case, activation, consumer)
    if not fragment:
        return call()
    with pytest.raises(ValueError, match=re.escape(fragment)) as err:
        call()
    assert "\n" not in str(err.value)
    return None


def test_the_table_covers_every_ir_op_type():
    assert {case.op for case in cases.CASES} == set(ir.OP_TYPES)
    for i, (case, _) in ENTRIES.items():
        assert set(case.refuses) | set(case.xfail) <= set(cases.CONSUMERS), i
        # (a refusal by these the harness would not check: none refuses an op yet)
        assert not set(case.refuses) & {"tf", "gpu", "glslang", "page"}, i


@pytest.mark.parametrize("i", params("tf"))
def test_tf_against_the_emulator(i):
    case, _, model, image, reference = built(i)
    graph = net(i).graph
    assert case.op in {type(op).__name__ for op in graph.ops} | {
        base.__name__ for op in graph.ops for base in type(op).__mro__}
    emulated = net(i).emulate(image)
    assert emulated.shape == reference.shape
    assert np.abs(emulated - reference).max() <= case.tolerance


@pytest.mark.gl
@pytest.mark.parametrize("i", params("gpu"))
def test_llvmpipe_bytes_are_the_emulators(i):
    from workbench import gl

    exact = "llvmpipe" in gl.info()["GL_RENDERER"]  # the emulator's order is llvmpipe's
    case, _, _, image, _ = built(i)
    graph = net(i).graph
    channels = {name: graph.channels(name) for name in graph.shapes(image.shape[:2])}
    gpu, emulated = net(i).run(image, keep=True), net(i).emulate(image, keep=True)
    assert emulated.keys() <= gpu.keys()  # (the GPU keeps a dense layer's partial sums too)
    for name in emulated:
        c = channels.get(name, gpu[name].shape[-1])
        mine, predicted = gpu[name][..., :c], emulated[name][..., :c]
        if case.dense == "float" and name == graph.output:  # the Dense layer's
            # float logits: the emulator sums as the GPU does, to float32 rounding
            np.testing.assert_allclose(mine, predicted, rtol=0, atol=1e-6, err_msg=name)
        elif exact:
            np.testing.assert_array_equal(mine, predicted, err_msg=name)
        else:  # another GPU: a value within float32 rounding of a half level may round apart
            levels = np.abs(mine.astype(float) - predicted) * (255 if mine.dtype.kind == "f" else 1)
            assert levels.max() <= 1 + 1e-3 and np.mean(levels < 0.5) >= 0.9999, name


@pytest.mark.parametrize("i", params("glslang"))
def test_glslang_takes_every_program(i, tmp_path):
    if os.environ.get("WORKBENCH_SKIP_GLSLANG") or shutil.which("glslangValidator") is None:
        pytest.skip("glslangValidator not installed (or WORKBENCH_SKIP_GLSLANG)")
    from workbench import es31
    from workbench.es2 import glslang

    glslang.validate_many({p.name: p.source for p in net(i).passes})
    case, activation, model, _, _ = built(i)
    if cases.refused(case, activation, "es31"):
        return
    for kernel in es31.compile(model).kernels:
        path = tmp_path / f"{kernel.name}.comp"
        path.write_text(kernel.source)
        run = subprocess.run(["glslangValidator", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout


@pytest.mark.gl
@pytest.mark.parametrize("i", params("es31"))
def test_es31_against_tf(i):
    from workbench import es31

    _, _, model, image, reference = built(i)
    out = consume(i, "es31", lambda: es31.compile(model).run(image))
    if out is not None:
        out = out[..., :reference.shape[-1]]
        assert out.shape == reference.shape and np.abs(out - reference).max() <= 1e-4


@pytest.mark.parametrize("i", params("onnx"))
def test_the_onnx_writer_against_tf(i):
    from workbench.ir.to_onnx import to_onnx
    from workbench.nets.onnx_model import OnnxModel

    case, _, model, image, reference = built(i)
    graph = ir.from_model(model)
    written = consume(i, "onnx", lambda: to_onnx(graph, input_size=case.size))
    if written is not None:
        out = OnnxModel(written)(image[None])[0]
        assert out.shape == reference.shape and np.abs(out - reference).max() <= 1e-4


@pytest.mark.parametrize("i, driver", [param(i, d, d) for i in ENTRIES for d in ("vc4", "gc2000")])
def test_the_drivers_take_every_program(i, driver):
    from workbench.es2 import drivers as es2_drivers
    from workbench.gl import drivers
    from workbench.studies import compilers

    if drivers.available() is not None:
        pytest.skip(drivers.available())
    case, _, model, _, _ = built(i)

    def check():
        compiled = es2.compile(model, compilers.profile_for(driver), dense=case.dense,
                               fit=True)
        reports = es2_drivers.check(compiled, driver)
        assert len(reports) == len(compiled.passes)
        failed = [(p.name, r.errors) for p, r in zip(compiled.passes, reports) if not r.ok]
        if failed:
            raise ValueError(f"{driver} refuses {failed}")
        return reports
    consume(i, driver, check)


# --- the page and the TF.js peer: one Chromium for the whole table -----------------------------

@pytest.fixture(scope="module")
def browser_results():
    """``{entry: {"page": output, "tfjs": [outputs], "tfjs_refused": error or None}}``: every
    case's page (its own folder of one served root) and TF.js peer (cpu) run by peers.js's
    benchPeers, one navigation a case in one headless Chromium."""
    from tests.conftest import skip_module_without_chromium

    skip_module_without_chromium()
    from workbench import web
    from workbench.web import browser, tfjs

    if tfjs.unavailable():
        pytest.skip(tfjs.unavailable())
    results = {}
    with tempfile.TemporaryDirectory(prefix="op-table-") as tmp:
        root = Path(tmp)
        for name, content in {**{f"tfjs/{k}": v for k, v in tfjs.script_files().items()},
                              "peers.js": tfjs.peers_js()}.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
        refused = {}
        for k, i in enumerate(ENTRIES):
            folder = root / f"case{k}"
            web.export(net(i), folder)
            try:
                files = tfjs.net_files(net(i).graph)  # as bench web stages it
            except ValueError as err:
                refused[i] = err
                continue
            (folder / "tfjs.json").write_text(json.dumps(files["tfjs.json"]))
            (folder / "tfjs.bin").write_bytes(files["tfjs.bin"])
        with browser.serve(root) as base, browser.open_page() as page:
            for k, i in enumerate(ENTRIES):
                _, _, _, image, _ = built(i)
                h, w = image.shape[:2]
                pixels = np.rint(image * 255).astype(np.uint8)
                page.goto(f"{base}/case{k}/index.html")
                page.wait_for_function("['ready', 'error'].includes(document.body.dataset.state)")
                assert page.evaluate("document.body.dataset.state") == "ready", \
                    page.inner_text("#message")
                for script in ("tf.min.js", "tf-backend-wasm.min.js"):
                    page.add_script_tag(url=f"{base}/tfjs/{script}")
                page.add_script_tag(url=f"{base}/peers.js")
                result = page.evaluate("config => benchPeers(config)", {
                    "input": base64.b64encode(pixels.tobytes()).decode(), "width": w,
                    "height": h, "runs": 1, "warmup": 0,
                    "backends": [] if i in refused else ["cpu"], "ort": [], "threads": 1,
                    "groupings": ["split", "block-diagonal"], "profile": 1, "variants": {},
                    "programs": "", "wasmPath": f"{base}/tfjs/", "ortPath": f"{base}/ort/"})
                sides = [base64.b64decode(s["output"]) for s in result["sides"]]
                results[i] = {"page": sides[0], "tfjs": sides[1:], "refused": refused.get(i)}
    return results


@pytest.mark.gl
@pytest.mark.parametrize("i", params("page"))
def test_the_page_gives_the_emulators_bytes(i, browser_results):
    case, _, _, image, _ = built(i)
    raw = browser_results[i]["page"]
    emulated = net(i).emulate(image)
    if emulated.ndim == 1:  # logits (or their softmax)
        page = np.frombuffer(raw, np.float32)
        step = 1e-4 if case.dense == "float" else 2 / 256
        assert page.shape == emulated.shape and np.abs(page - emulated).max() <= step
        assert page.argmax() == emulated.argmax()
        return
    h, w, c = emulated.shape
    page = np.frombuffer(raw, np.uint8).reshape(h, w, 4)[..., :min(c, 4)].astype(int)
    levels = np.round(emulated[..., :4] * 255).astype(int)
    assert np.abs(page - levels).max() <= 1 and np.mean(page == levels) >= 0.99


@pytest.mark.gl
@pytest.mark.parametrize("i", params("tfjs"))
def test_tfjs_against_tf(i, browser_results):
    case, activation, _, _, reference = built(i)
    fragment = cases.refused(case, activation, "tfjs")
    error = browser_results[i]["refused"]
    if fragment or error:
        assert fragment and error and fragment in str(error) and "\n" not in str(error), error
        return
    outputs = browser_results[i]["tfjs"]
    assert outputs
    for raw in outputs:
        out = np.frombuffer(raw, np.float32).reshape(reference.shape)
        assert np.abs(out - reference).max() <= 1e-4
