"""ONNX's own node tests (``onnx.backend.test.case.node``, generated at test time) whose nodes
are all of op types the ONNX front end claims (:data:`workbench.ir.onnx.SUPPORTED`), through
``es2.compile`` and the emulator.

A case runs as an image net: its first input is the image (``luma_input=False``: one channel
is one channel), its other inputs become initializers.  A 4-D float image is mapped affinely
into [0, 1] where it leaves it and rounded to 8-bit levels, as the GPU's input texture holds
it; ONNX Runtime then computes the expected output from that image.  Each case must be either

- accepted: the emulator's output within 2 % of the expected output's range (max - min), or
  of one 8-bit level where that is more, of ONNX Runtime's, compared as is (an output leaving
  [0, 1], which the 8-bit storage would clip, counts as wrong: the front end must refuse it), or
- refused: a LoweringError or ValueError of one line that starts by naming a node, layer,
  input, output or model (``node 'y' (Resize): ...``).

Anything else fails the case, as does accepting a case whose input is not an image."""
import re
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper
from onnx.backend.test.case.node import collect_testcases

from workbench import es2
from workbench.ir.onnx import SUPPORTED

CLAIMED = {w for w in re.findall(r"[A-Z][A-Za-z]+", " ".join(SUPPORTED)) if onnx.defs.has(w)}
with warnings.catch_warnings():  # the generators' own numpy warnings (log of 0, ...)
    warnings.simplefilter("ignore")
    ALL = collect_testcases()
CASES = {c.name: c for c in ALL
         if c.model.graph.node and all(n.op_type in CLAIMED for n in c.model.graph.node)}
REFUSAL = re.compile(r"(node|layer|input|output|model) '[^'\n]*'[^\n]*")
MIN_CASES, MIN_ACCEPTED = 240, 12  # measured: 242 cases, 13 accepted (onnx 1.23)


def as_image_net(model, inputs):
    """``model`` with its inputs after the first as initializers; the first input, mapped into
    [0, 1] and rounded to 8-bit levels where it is a 4-D float image (else None)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v), i.name)
                             for i, v in zip(graph.input[1:], inputs[1:]))
    del graph.input[1:]
    x = np.asarray(inputs[0]) if inputs else None
    if x is None or x.ndim != 4 or x.dtype != np.float32:
        return model, None
    low, high = x.min(), x.max()
    if low < 0 or high > 1:
        x = (x - low) / (high - low or 1)
    return model, (np.round(x * 255) / 255).astype(np.float32)


def outcome(model, inputs) -> tuple[str, str]:
    """``("accepted", error)`` or ``("refused", message)``; raises what is neither."""
    model, x = as_image_net(model, inputs)
    try:
        net = es2.compile(model, luma_input=False)
        got = None if x is None else net.emulate(np.moveaxis(x[0], 0, -1))
    except ValueError as e:  # LoweringError is one
        assert REFUSAL.fullmatch(str(e)), f"not a one-line refusal naming what: {e!r}"
        return "refused", str(e)
    assert x is not None, "a case whose input is not an image was accepted"
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, {model.graph.input[0].name: x})[0][0]
    want = np.moveaxis(want, 0, -1) if want.ndim == 3 else want
    assert got.size == want.size, f"output of shape {got.shape}, ONNX Runtime's {want.shape}"
    got = got.reshape(want.shape)  # a pooled (C, 1, 1) output: the emulator's C logits
    error = float(np.abs(got - want).max())
    bound = max(0.02 * float(want.max() - want.min()), 1 / 255)
    assert error <= bound, f"max error {error:.4g} > {bound:.4g}"
    return "accepted", f"max error {error:.4g}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case_is_accepted_within_range_or_refused_in_one_line(name):
    case = CASES[name]
    outcome(case.model, case.data_sets[0][0])


def test_enough_node_cases_are_accepted():
    kinds = [outcome(c.model, c.data_sets[0][0])[0] for c in CASES.values()]
    assert len(kinds) >= MIN_CASES and kinds.count("accepted") >= MIN_ACCEPTED, kinds


def resize_case(attrs, roi=None, scales=None, sizes=None, shape=(1, 2, 3, 4)):
    """A Resize node of ``attrs`` (opset 18) as a model and its inputs, X first."""
    given = {"roi": (roi, np.float32), "scales": (scales, np.float32), "sizes": (sizes, np.int64)}
    names = ["X"] + [k if v is not None else "" for k, (v, _) in given.items()]
    while not names[-1]:
        names.pop()
    values = [np.random.default_rng(0).random(shape, np.float32)] + [
        np.array(v, t) for v, t in given.values() if v is not None]
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["Y"], **attrs)], "resize",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in zip([n for n in names if n], values)],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), values


@pytest.mark.parametrize("attrs, inputs, kind", [
    ({"axes": [2, 3]}, {"scales": [2, 2]}, "accepted"),
    ({"axes": [-1, -2], "mode": "linear"}, {"sizes": [8, 6]}, "accepted"),
    ({"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, {"sizes": [7, 8]}, "accepted"),
    ({"axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}, {"sizes": [5, 8]},
     "accepted"),
    ({"keep_aspect_ratio_policy": "not_larger"}, {"sizes": [1, 2, 6, 8]}, "refused"),  # N, C
    ({"axes": [3]}, {"scales": [2]}, "refused"),
    ({"axes": [2, 3]}, {"scales": [2, 2, 1]}, "refused"),
    ({"axes": [2, 2]}, {"scales": [2, 2]}, "refused"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize", "mode": "linear"},
     {"roi": [0, 0, 0, 0, 1, 1, 1, 1], "scales": [1, 1, 2, 2]}, "refused"),
], ids=["axes", "negative-axes-sizes", "not-larger", "not-smaller", "not-larger-all-axes",
        "one-axis", "too-many-scales", "repeated-axis", "tf-crop-and-resize"])
def test_resize_axes_and_aspect_policy_are_taken_where_a_whole_factor(attrs, inputs, kind):
    """Opset 18's axes and keep_aspect_ratio_policy: taken where they make one whole factor
    on H and W, as the 4-D scales do; else refused naming the node."""
    got, message = outcome(*resize_case(attrs, **inputs))
    assert got == kind, message
    assert kind == "accepted" or message.startswith("node 'Y' (Resize): "), message
