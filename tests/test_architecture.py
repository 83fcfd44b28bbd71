"""The package's shape: imports flow one way (docs/design.md, "Architecture"), and the GL
worker processes never load TensorFlow."""
import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import ir
from workbench.ir import registry

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

# Lowest first; a unit imports only from its own unit and from lower layers.  Units of one
# layer do not import each other (the back ends es2 and es31).
LAYERS = [
    {"files", "folders", "tables", "timings", "glsl_text", "references", "figures", "quiet"},
    {"gl"},
    {"data"},
    {"nets"},
    {"ir"},
    {"es2", "es31"},
    {"web"},
    {"studies"},
    {"run"},
    {"widgets", "__main__"},
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The workbench modules ``path`` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("workbench")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workbench"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).exists()
                      or (PACKAGE.parent / (f"{node.module}.{a.name}".replace(".", "/") + ".py")).exists()}
    return found


def unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def test_every_module_has_a_layer():
    assert {unit(m) for m in GRAPH if unit(m)} <= set(LAYER_OF)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if unit(m)))
def test_imports_flow_down(module):
    mine = unit(module)
    wrong = []
    for target in GRAPH[module]:
        theirs = unit(target)
        if theirs is None or theirs == mine:
            continue
        same_layer = LAYER_OF[theirs] == LAYER_OF[mine] != 0  # shared helpers may share
        if LAYER_OF[theirs] > LAYER_OF[mine] or same_layer or mine == "gl":
            wrong.append(target)
    assert not wrong, f"{module} imports {wrong}: imports must flow to lower layers only"


def test_no_import_cycles():
    modules = {m: {t for t in targets if t in GRAPH and t != m} for m, targets in GRAPH.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of the code
    for m in modules:
        modules[m] = {t for t in modules[m] if not (t.startswith(m + ".") or m.startswith(t + "."))}
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for t in modules[m]:
            if state.get(t) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in modules:
        if m not in state:
            visit(m, [m])


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: a data module importing the ES 2.0 back end is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from workbench.es2 import net\n")
    assert "workbench.es2" in imports(bad)
    assert LAYER_OF["es2"] > LAYER_OF["data"]


def frameworks_loaded(probe: str) -> list[str]:
    """Run ``probe`` (Python source) in a fresh process; which of TensorFlow and Keras it
    loaded (it must exit 0)."""
    probe += "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'keras'}))\n"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def test_the_onnx_front_end_does_not_load_tensorflow():
    """``workbench.ir.onnx`` (every module of the package) lowers the shipped ONNX classifier
    in a fresh process without loading TensorFlow or Keras."""
    package = sorted(f"workbench.ir.onnx.{p.stem}" for p in (PACKAGE / "ir" / "onnx").glob("*.py")
                     if p.stem != "__init__")
    probe = ("import sys\n"
             "from workbench.ir.onnx import from_onnx\n"
             f"from_onnx({str(PACKAGE.parent / 'models' / 'cifar10_plain.onnx')!r})\n"
             f"assert not set({package!r}) - set(sys.modules), 'a module not imported'\n")
    assert frameworks_loaded(probe) == []


@pytest.mark.gl
def test_an_onnx_net_and_a_saved_net_run_without_tensorflow(tmp_path):
    """Generating GLSL needs no TensorFlow: the shipped ONNX classifier compiled, run, saved
    and loaded again in a fresh process loads neither TensorFlow nor Keras (~2.4 s of start-up
    before, through the Keras front end and the activations' TF forms)."""
    model = PACKAGE.parent / "models" / "cifar10_plain.onnx"
    probe = ("import sys, numpy as np, onnx\n"
             "from workbench import es2\n"
             f"net = es2.compile(onnx.load({str(model)!r}))\n"
             f"net.save({str(tmp_path / 'net')!r})\n"
             "x = np.random.default_rng(0).random((32, 32, 3)).astype(np.float32)\n"
             f"assert (es2.load({str(tmp_path / 'net')!r}).run(x) == net.run(x)).all()\n")
    assert frameworks_loaded(probe) == []


@pytest.mark.gl
def test_upscale_with_an_onnx_model_loads_no_tensorflow(tmp_path):
    """`python -m workbench upscale --model sr.onnx`: it loaded TensorFlow and Keras (5.0 s
    for a 64x64 picture here, 2.7 s without) through the model-name table, the model-file
    reader and the deploy study's imports."""
    import onnx
    from PIL import Image

    from workbench.ir.to_onnx import to_onnx
    from workbench.nets.models import load_model, reference_sr

    model = tmp_path / "sr.onnx"
    onnx.save(to_onnx(ir.from_keras(load_model(reference_sr())), 17), model)
    Image.new("RGB", (24, 16), (90, 140, 200)).save(tmp_path / "in.png")
    probe = ("import sys\n"
             "from workbench.__main__ import main\n"
             f"assert main(['upscale', '--model', {str(model)!r}, {str(tmp_path / 'in.png')!r}, "
             f"{str(tmp_path / 'out.png')!r}]) == 0\n")
    assert frameworks_loaded(probe) == []
    assert Image.open(tmp_path / "out.png").size == (48, 32)


@pytest.mark.gl
def test_upscale_from_a_saved_shader_folder_loads_no_tensorflow(tmp_path):
    """`python -m workbench upscale --model <saved folder> --reference HR`, the fast loop
    (issue 57): neither TensorFlow nor Keras is imported, PSNR included."""
    from PIL import Image

    from workbench import es2
    from workbench.nets.models import load_model, reference_sr

    es2.compile(load_model(reference_sr())).save(tmp_path / "net")
    Image.new("RGB", (24, 16), (90, 140, 200)).save(tmp_path / "in.png")
    Image.new("RGB", (48, 32), (90, 140, 200)).save(tmp_path / "hr.png")
    probe = ("import sys\n"
             "from workbench.__main__ import main\n"
             f"assert main(['upscale', '--model', {str(tmp_path / 'net')!r}, "
             f"{str(tmp_path / 'in.png')!r}, {str(tmp_path / 'out.png')!r}, "
             f"'--reference', {str(tmp_path / 'hr.png')!r}]) == 0\n")
    assert frameworks_loaded(probe) == []
    assert Image.open(tmp_path / "out.png").size == (48, 32)


@pytest.mark.parametrize("module", ["workbench.gl.fragment", "workbench.gl.compute"])
def test_gl_workers_do_not_load_tensorflow(module, tmp_path):
    """The GL workers run as ``python -m`` children; TensorFlow and llvmpipe both carry LLVM
    and crash together, so a worker must never load TensorFlow or Keras.  The worker serves
    until its stdin closes (here at once), then the probe lists what was imported."""
    out = tmp_path / "modules.txt"
    probe = ("import runpy, sys, pathlib\n"
             f"runpy.run_module({module!r}, run_name='__main__')\n"
             f"pathlib.Path({str(out)!r}).write_text('\\n'.join(sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", probe], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = out.read_text().split("\n")
    assert "workbench.gl" in loaded and "numpy" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in ("tensorflow", "keras")]
    assert not heavy, f"{module} loaded {heavy[:5]}"


OP_TYPES = tuple(ir.OP_TYPES)  # every IR op type (Conv ... Dense, Upsample, Add, Concat)
# The consumers of IR ops, each with its op table (workbench.ir.registry.Table), by the
# module that fills it.
CONSUMERS = {"the ES 2.0 back end": "workbench.es2",
             "the ONNX writer (workbench.ir.to_onnx)": "workbench.ir.to_onnx",
             "the scale folding (workbench.ir.lowering.Scales.fold)": "workbench.ir.lowering",
             "the ES 3.1 back end": "workbench.es31",
             "the TF.js peer": "workbench.web.tfjs"}
# Where asking an op its type is the job: the lowerings (Keras; ONNX, and its mirror that
# writes IR graphs as ONNX), the ES 2.0 and ES 3.1 back ends' records (a module per op
# each).  Elsewhere a consumer asks its table.
OP_TYPE_HOMES = ("workbench/ir/lower.py", "workbench/ir/keras_layers.py", "workbench/ir/onnx/",
                 "workbench/ir/lowering.py", "workbench/ir/to_onnx.py",
                 "workbench/es2/ops/", "workbench/es31/ops/")


def test_every_op_type_has_an_entry_in_every_consumers_table():
    """A new IR op type needs an entry in each consumer's table (docs/design.md, "How to add
    an op"); a prepared form of an op (es2's Gemv) takes its IR type's entry."""
    for module in CONSUMERS.values():
        importlib.import_module(module)
    tables = {t.consumer: t for t in registry.TABLES}
    assert set(CONSUMERS) <= set(tables)
    ir_tables = [t for t in tables.values()
                 if any(issubclass(k, tuple(ir.OP_TYPES.values())) for k in t.entries)]
    assert set(CONSUMERS) <= {t.consumer for t in ir_tables}
    missing = {t.consumer: [n for n, kind in ir.OP_TYPES.items() if t.get(kind) is None]
               for t in ir_tables}
    assert not any(missing.values()), f"IR op types without an entry: {missing}"


def test_a_table_refuses_in_one_line_naming_the_op_and_the_consumer():
    table = registry.Table("a test consumer", what="op")
    table.add(ir.Conv)(1)
    gemv = type("Gemv", (ir.Dense,), {})
    table.add(ir.Dense)(2)
    assert table.get(gemv) == 2 and table.key(gemv) is ir.Dense
    pool = ir.Pool("p", "image", "max", 2, 2, "valid")
    with pytest.raises(registry.NotTaken, match=r"^op 'p' \(Pool\): not taken by a test "
                                                r"consumer; taken: Conv, Dense$"):
        table.of(pool)
    registry.TABLES.remove(table)


def op_type_tests(path: Path) -> list[int]:
    """Lines of ``path`` that test an IR op's type: ``isinstance(x, Conv)``,
    ``isinstance(x, ir.Dense)``, ``type(op) is ir.Conv``, or a table keyed by op type."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            kinds = node.args[1]
            names = [getattr(k, "attr", getattr(k, "id", None))
                     for k in (kinds.elts if isinstance(kinds, ast.Tuple) else [kinds])]
        elif isinstance(node, ast.Dict):
            names = [getattr(k, "attr", None) for k in node.keys if isinstance(k, ast.Attribute)
                     and getattr(k.value, "id", None) == "ir"]
        elif isinstance(node, ast.Compare) and any(isinstance(o, ast.Is) for o in node.ops):
            names = [getattr(c, "attr", None) for c in node.comparators]
        if any(n in OP_TYPES for n in names):
            found.append(node.lineno)
    return found


def test_no_op_type_tests_outside_the_op_records():
    """One op, one place: outside the lowerings and the op records nothing asks an op its
    type; it asks its op table (docs/design.md, "How to add an op")."""
    root = PACKAGE.parent
    tested = {p.relative_to(root).as_posix(): op_type_tests(p) for p in PACKAGE.rglob("*.py")}
    tested = {p: lines for p, lines in tested.items() if lines}
    outside = {p: lines for p, lines in tested.items() if not p.startswith(OP_TYPE_HOMES)}
    assert not outside, f"op types tested outside the op records: {outside}"
    assert set(tested) >= {"workbench/ir/lower.py", "workbench/ir/to_onnx.py"}  # it sees them


# Fields some IR op types have and others not: asking an op for one by getattr / hasattr is
# asking its kind (ir.ops.Op answers what any consumer may ask: reads, activation, residual,
# storage, anchor_storage, rgb_output, nearest).
_FIELDS = [{f.name for f in dataclasses.fields(t)} for t in ir.OP_TYPES.values()]
KIND_FIELDS = set.union(*_FIELDS) - set.intersection(*_FIELDS)


def form_fields() -> set[str]:
    """The fields a back end's prepared form adds to its IR op (es2's ConvForm: ``split``,
    ``order``, ``out_bits``, ...; Gemv: ``number``, ``block``, ...): asking an op for one by
    getattr / hasattr asks whether it is formed, which its type answers (prepare forms every
    op of it); only the op records read those fields."""
    from workbench.es2.record import RECORDS

    return set().union(*({f.name for f in dataclasses.fields(r.prepared)}
                         - {f.name for f in dataclasses.fields(ir_type)}
                         for ir_type, r in RECORDS.entries.items() if r.prepared))


PROBED_FIELDS = KIND_FIELDS | form_fields()


# Where, outside the homes of op-type tests, an op is asked for a field whose name a variable
# holds (``getattr(op, name)``), and why the name is always one the op has.
VARIABLE_PROBE_HOMES = {
    "workbench/nets/activations.py": "an activation's parameters (PARAMETERS: a PRelu's "
    "activation_slope, activation_zero) of the op whose activation it is (a Conv, an Add)",
    "workbench/web/tfjs.py": "the same PRelu parameters for the peer, None where an Add has "
    "no activation_zero (calibration makes a stored Add a Conv)",
}


def _probes(path: Path):
    """``getattr(x, name, ...)`` and ``hasattr(x, name)`` calls of ``path``."""
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr",
                                                                                 "hasattr")
            and len(node.args) >= 2]


def attribute_probes(path: Path) -> list[int]:
    """Lines of ``path`` that probe an op for another kind's field, or a prepared form's:
    ``getattr(op, "chroma_from", None)``, ``hasattr(op, "interpolation")``, ``getattr(op,
    "split", 1)``."""
    return [node.lineno for node in _probes(path)
            if isinstance(node.args[1], ast.Constant) and node.args[1].value in PROBED_FIELDS]


def variable_probes(path: Path) -> list[int]:
    """Lines of ``path`` that ask an op (a variable named ``op``, as the code names IR ops)
    for a field named by a variable: ``getattr(op, name)``, ``hasattr(op, f.name)``."""
    return [node.lineno for node in _probes(path)
            if getattr(node.args[0], "id", None) == "op"
            and not isinstance(node.args[1], ast.Constant)]


def test_no_attribute_probes_outside_the_op_records():
    """An op or its record answers "RGB output?", "nearest?", "what do you read?" (issue
    41): nothing outside the homes of op-type tests probes an op for a field of some kinds,
    or for a field of the back end's form of it (issue 59: prepare forms every op)."""
    root = PACKAGE.parent
    probed = {p.relative_to(root).as_posix(): attribute_probes(p) for p in PACKAGE.rglob("*.py")}
    outside = {p: lines for p, lines in probed.items() if lines and not p.startswith(OP_TYPE_HOMES)}
    assert not outside, f"ops probed for another kind's field outside the op records: {outside}"
    assert {"chroma_from", "interpolation", "anchor", "kernel"} <= KIND_FIELDS
    assert {"split", "order", "out_bits", "zero_border", "number", "block"} <= PROBED_FIELDS
    assert "name" not in KIND_FIELDS and "input" not in KIND_FIELDS  # every op has them


def test_no_variable_attribute_probes_outside_their_homes():
    """``getattr(op, name)`` may ask any field of any kind (issue 59): only the homes of
    op-type tests and :data:`VARIABLE_PROBE_HOMES` ask an op so."""
    root = PACKAGE.parent
    probed = {p.relative_to(root).as_posix(): variable_probes(p) for p in PACKAGE.rglob("*.py")}
    probed = {p: lines for p, lines in probed.items() if lines}
    outside = {p: lines for p, lines in probed.items()
               if not p.startswith(OP_TYPE_HOMES) and p not in VARIABLE_PROBE_HOMES}
    assert not outside, f"ops asked for a field named by a variable: {outside}"
    assert set(VARIABLE_PROBE_HOMES) <= set(probed), "a home that no longer probes: drop it"


def test_the_attribute_probe_checker_finds_each_form(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('a = getattr(op, "chroma_from", None)\nb = hasattr(op, "interpolation")\n'
                   'c = getattr(op, "name")\nd = op.anchor\ne = getattr(op, "anchor")\n')
    assert attribute_probes(bad) == [1, 2, 5]
    bad.write_text('a = getattr(op, "split", 1)\nb = hasattr(op, "order")\n'
                   'c = getattr(op, "out_bits", 8)\nd = op.split\n'
                   'e = getattr(op, "number", None)\n')
    assert attribute_probes(bad) == [1, 2, 3, 5]
    bad.write_text('a = getattr(op, name)\nb = hasattr(op, f.name)\nc = getattr(op, "x", 1)\n'
                   'd = getattr(self, name)\ne = getattr(op, FIELDS[k], None)\n')
    assert variable_probes(bad) == [1, 2, 5]


def test_the_op_type_checker_finds_each_form(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from workbench import ir\nfrom workbench.ir import Dense\n"
                   "a = isinstance(op, ir.Conv)\nb = isinstance(op, (int, Dense))\n"
                   "c = {ir.DepthToSpace: 1}\nd = type(op) is ir.Dense\ne = isinstance(op, int)\n")
    assert op_type_tests(bad) == [3, 4, 5, 6]


MAX_PARAMETERS = 10


def parameter_counts(path: Path) -> list[tuple[str, int, int]]:
    """``(function, line, parameters)`` of every function of ``path``: ``self`` and ``cls``
    not counted, ``*args`` and ``**kwargs`` one each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            count = len(names) - (names[:1] in (["self"], ["cls"])) + (a.vararg is not None) \
                + (a.kwarg is not None)
            found.append((node.name, node.lineno, count))
    return sorted(found, key=lambda f: f[1])


def test_no_function_takes_more_than_ten_parameters():
    """Issue 59: what belongs together travels as one value (``es2.Options``,
    ``pipeline.Places``) rather than as a long list of parameters."""
    root = PACKAGE.parent
    over = {f"{p.relative_to(root).as_posix()}:{name}": f"line {line}: {count} parameters"
            for p in sorted(PACKAGE.rglob("*.py")) for name, line, count in parameter_counts(p)
            if count > MAX_PARAMETERS}
    assert not over, f"functions over {MAX_PARAMETERS} parameters: {dict(sorted(over.items()))}"


def test_the_parameter_counter_counts_each_kind(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class A:\n    def f(self, a, /, b, *c, d, **e): pass\n"
                   "    def g(cls): pass\ndef h(x, y=1): pass\nasync def k(*a): pass\n")
    assert parameter_counts(bad) == [("f", 2, 5), ("g", 3, 0), ("h", 4, 2), ("k", 5, 1)]
