"""workbench.es2.glslang: Khronos' glslangValidator under the OpenGL ES 2.0 limits.

The validator is a hard requirement (`make test` installs it via tools/system_deps.sh): when it is
missing these tests FAIL with the install command. Set WORKBENCH_SKIP_GLSLANG=1 to skip them instead
(e.g. without root).
"""
import os
import subprocess

import pytest

from workbench.es2 import glslang
from workbench.es2.glslang import ShaderValidationError

HEADER = """#version 100
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
#else
precision mediump float;
#endif
"""

VALID_FRAG = HEADER + """
uniform sampler2D u_input0;
uniform sampler2D u_input1;
uniform sampler2D u_input2;
uniform vec4 u_weights[4];
uniform vec2 u_texel;
varying vec2 v_uv;

void main() {
    vec4 acc = vec4(0.0);
    for (int i = 0; i < 4; i++) {
        vec2 uv = v_uv + vec2(float(i - 2), 0.0) * u_texel;
        acc += u_weights[i] * (texture2D(u_input0, uv) + texture2D(u_input1, uv));
    }
    gl_FragColor = clamp(acc + texture2D(u_input2, v_uv), 0.0, 1.0);
}
"""

VALID_VERT = """#version 100
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
"""


def _frag(body):
    return HEADER + "varying vec2 v_uv;\n" + body


# name -> (source, a piece of glslang's log that says why)
REFUSED = {
    "while_loop": (_frag("""
        void main() { float a = 0.0; int i = 0;
            while (i < 4) { a += 0.25; i++; }
            gl_FragColor = vec4(a); }"""), "while loops not available"),
    "do_while_loop": (_frag("""
        void main() { float a = 0.0;
            do { a += 0.25; } while (a < 1.0);
            gl_FragColor = vec4(a); }"""), "do-while loops not available"),
    "non_constant_loop_bound": (_frag("""
        uniform int u_n;
        void main() { float a = 0.0;
            for (int i = 0; i < u_n; i++) { a += 0.25; }
            gl_FragColor = vec4(a); }"""), "inductive-loop condition"),
    "loop_index_modified": (_frag("""
        void main() { float a = 0.0;
            for (int i = 0; i < 4; i++) { a += 0.25; i += 1; }
            gl_FragColor = vec4(a); }"""), "inductive loop index modified"),
    "dynamic_uniform_index": (_frag("""
        uniform vec4 u_weights[4];
        void main() { int k = int(v_uv.x * 4.0);
            gl_FragColor = u_weights[k]; }"""), "Non-constant-index-expression"),
    "dynamic_sampler_index": (_frag("""
        uniform sampler2D u_inputs[4];
        uniform int u_k;
        void main() { gl_FragColor = texture2D(u_inputs[u_k], v_uv); }"""),
        "Non-constant-index-expression"),
    "syntax_error": (_frag("""
        void main() { gl_FragColor = vec4(1.0) }"""), "syntax error"),
    "no_main": (_frag("""
        float helper(float x) { return x; }"""), "Missing entry point"),
    "recursion": (_frag("""
        float f(float x) { return x > 0.0 ? f(x - 1.0) : x; }
        void main() { gl_FragColor = vec4(f(v_uv.x)); }"""), "Recursion"),
}


def require_validator():
    """Fail (not skip) without glslangValidator, unless WORKBENCH_SKIP_GLSLANG is set."""
    if os.environ.get("WORKBENCH_SKIP_GLSLANG", "") not in ("", "0"):
        pytest.skip("WORKBENCH_SKIP_GLSLANG is set")
    if not glslang.available():
        pytest.fail(f"{glslang.EXECUTABLE} is missing: install the Debian package "
                    f"{glslang.PACKAGE!r}:\n  {glslang.INSTALL_COMMAND}\n"
                    "or set WORKBENCH_SKIP_GLSLANG=1 to skip these tests.", pytrace=False)


def test_limits_file_holds_the_es2_minimums_and_no_relaxation():
    values = dict(line.split() for line in glslang.limits_config().splitlines())
    expected = dict(MaxVertexAttribs=8, MaxVertexUniformVectors=128, MaxVaryingVectors=8,
                    MaxVertexTextureImageUnits=0, MaxCombinedTextureImageUnits=8,
                    MaxTextureImageUnits=8, MaxFragmentUniformVectors=16, MaxDrawBuffers=1)
    for key, value in expected.items():
        assert int(values[key]) == value, key
    relaxations = ["nonInductiveForLoops", "whileLoops", "doWhileLoops", "generalUniformIndexing",
                   "generalAttributeMatrixVectorIndexing", "generalVaryingIndexing",
                   "generalSamplerIndexing", "generalVariableIndexing",
                   "generalConstantMatrixVectorIndexing"]
    for key in relaxations:
        assert int(values[key]) == 0, key


def test_limits_file_lists_every_limit_glslang_knows():
    require_validator()
    # A .conf replaces glslang's whole table: a name left out would silently become 0.
    dump = subprocess.run([glslang.EXECUTABLE, "-c"], capture_output=True, text=True,
                          check=True).stdout
    known = {line.split()[0] for line in dump.splitlines() if line.strip()}
    ours = {line.split()[0] for line in glslang.limits_config().splitlines()}
    assert known <= ours, f"missing from es2_limits.conf: {sorted(known - ours)}"


def test_valid_fragment_shader_passes():
    require_validator()
    glslang.validate(VALID_FRAG, stage="frag", name="valid_frag")


def test_valid_vertex_shader_passes():
    require_validator()
    glslang.validate(VALID_VERT, stage="vert", name="valid_vert")


def test_warnings_are_accepted():
    require_validator()
    source = VALID_FRAG.replace("#version 100\n",
                                "#version 100\n#extension GL_EXT_no_such_thing : enable\n")
    glslang.validate(source, name="with_warning")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused(name):
    require_validator()
    source, why = REFUSED[name]
    with pytest.raises(ShaderValidationError) as info:
        glslang.validate(source, stage="frag", name=name)
    message = str(info.value)
    assert repr(name) in message
    assert why in message
    assert info.value.names == [name]


def test_glslang_does_not_count_samplers_or_uniform_vectors():
    """Known gap, pinned so the docs stay true: glslang accepts 9 samplers
    (> MaxTextureImageUnits 8) and 17 vec4 uniforms (> MaxFragmentUniformVectors 16) in one
    fragment shader. Those two limits must be enforced by the workbench's own limits table.
    If this test fails, glslang started checking them: update workbench/es2/glslang.py,
    es2_limits.conf and these tests."""
    require_validator()
    samplers = "".join(f"uniform sampler2D u_s{i};\n" for i in range(9))
    fetches = "".join(f"    acc += texture2D(u_s{i}, v_uv);\n" for i in range(9))
    nine_samplers = _frag(samplers + "void main() {\n    vec4 acc = vec4(0.0);\n" + fetches
                          + "    gl_FragColor = acc;\n}\n")
    many_uniforms = _frag("""uniform vec4 u_w[17];
        void main() { vec4 acc = vec4(0.0);
            for (int i = 0; i < 17; i++) { acc += u_w[i]; }
            gl_FragColor = acc; }""")
    glslang.validate_many({"nine_samplers": nine_samplers, "seventeen_vec4": many_uniforms})


def test_validate_many_reports_every_failing_name():
    require_validator()
    shaders = {"good": VALID_FRAG,
               "while_loop": REFUSED["while_loop"][0],
               "syntax_error": REFUSED["syntax_error"][0]}
    with pytest.raises(ShaderValidationError) as info:
        glslang.validate_many(shaders)
    assert info.value.names == ["while_loop", "syntax_error"]
    message = str(info.value)
    assert "'while_loop'" in message and "'syntax_error'" in message and "'good'" not in message
    assert "while loops not available" in message and "syntax error" in message


def test_validate_many_accepts_all_valid():
    require_validator()
    glslang.validate_many({"a": VALID_FRAG, "b": VALID_FRAG})


def test_stage_and_version_are_checked():
    with pytest.raises(ValueError, match="stage"):
        glslang.validate(VALID_FRAG, stage="comp")
    with pytest.raises(ValueError, match="#version 100"):
        glslang.validate("#version 310 es\nvoid main() {}\n", name="es31")


def test_missing_validator_names_the_package(monkeypatch):
    monkeypatch.setattr(glslang.shutil, "which", lambda name: None)
    assert not glslang.available()
    with pytest.raises(RuntimeError) as info:
        glslang.validate(VALID_FRAG)
    message = str(info.value)
    assert "glslang-tools" in message and "apt-get install" in message
