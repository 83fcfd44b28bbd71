"""The OpenGL ES 2.0 limits a net must fit, in one table, the device profiles, and the checker
that enforces them.

Mesa (llvmpipe) does not enforce these: it offers 32 texture units and allows dynamic
indexing and while loops.  So the workbench checks every model itself before generating
shaders, and the test suite validates the shaders with glslangValidator.

:data:`ES2` (the default) holds the per-program limits every ES 2.0 GPU offers; it leaves the
image size to the runtime's ``GL_MAX_TEXTURE_SIZE`` and the float precision to the caller.
:data:`PROFILES` are named devices (``profile(name)``): they also state the largest texture
and whether fragment shaders have ``highp`` floats.  Each number names its source.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.es2 import plan
from workbench.es2.record import record
from workbench.ir import PACK
from workbench.nets import activations


@dataclass(frozen=True)
class Limits:
    name: str = "ES 2.0"              # how error messages name the limits
    texture_units: int = 8            # samplers one fragment shader may use
    fetches_per_fragment: int = 64    # texture2D calls per fragment (VideoCore IV budget)
    outputs_per_program: int = 4      # channels of one RGBA target
    draw_buffers: int = 1             # RGBA targets one program may write: 1, or with
    #                                   GL_EXT_draw_buffers / WEBGL_draw_buffers up to GL_MAX_DRAW_BUFFERS
    max_texture_size: int | None = None  # largest texture side; None: the runtime's limit
    varying_vectors: int = 8          # the passes use none (the vertex shader writes only gl_Position)
    fragment_uniform_vectors: int = 16  # vec4 uniforms of a fragment shader (a vec2 takes one)
    float_precision: str = "highp"    # "highp": fragment shaders have 32-bit floats; else "mediump"
    sampled_channels: tuple[int, int] | None = None  # input channels one output may read, for
    #                                   (1x1 kernels, larger kernels); None: no budget but the units
    storage: str = "RGBA8"            # activations stored as 8-bit in [0, 1]
    storage_range: tuple = (0.0, 1.0)
    dynamic_indexing: bool = False    # only constant or loop-index expressions as indices
    constant_loop_bounds: bool = True  # for loops with constant bounds; no while/do
    constant_vectors: int | None = None  # vec4 slots a fragment shader's uniforms and literal
    #                                   constants share, where the compiler keeps literals in the
    #                                   uniform file (Vivante); None: literals cost no uniforms
    driver: str | None = None         # the Mesa driver that checks it
    #                                   (:data:`workbench.gl.drivers.DRIVERS`)

    @property
    def channels_per_program(self):
        """Input channels one program can sample: one RGBA texture per texture unit."""
        return self.texture_units * PACK


ES2 = Limits()

# Device profiles.  Sources:
# [ES2]  OpenGL ES 2.0.25 spec, tables 6.18-6.20 "Implementation Dependent Values" (minimums:
#        MAX_TEXTURE_SIZE 64, MAX_TEXTURE_IMAGE_UNITS 8, MAX_VARYING_VECTORS 8,
#        MAX_FRAGMENT_UNIFORM_VECTORS 16), and GLSL ES 1.00 spec section 4.5.2: highp is optional
#        in fragment shaders (GL_FRAGMENT_PRECISION_HIGH); mediump is the guaranteed precision.
#        Tabulated in ANGLE's doc/ResourceLimits.md.
# [VC4]  Beatmup (github.com/lnstadrum/beatmup), core/nnets/conv2d.h, "Raspberry Pi-related
#        constraints": a Pi cannot sample more than 256 channels to compute one output value;
#        in practice about 128 for pointwise convolutions and under 100 for bigger kernels (the
#        driver then fails with GL_OUT_OF_MEMORY 0x505); core/nnets/model.cpp and storage.cpp
#        cap the channels an op samples at 4 * GL_MAX_TEXTURE_IMAGE_UNITS.  Texture size: Mesa
#        vc4, src/gallium/drivers/vc4/vc4_screen.h, VC4_MAX_MIP_LEVELS 12 = 2048x2048.  Texture
#        units: 8, the ES 2.0 minimum the Pi 0-3 reference nets are built for (Mesa vc4 offers
#        16, VC4_MAX_TEXTURE_SAMPLERS, so 8 is the safe value for both Pi drivers).  highp: the
#        QPUs compute in 32-bit float only (VideoCore IV 3D Architecture Reference Guide, Broadcom
#        2013, section "QPU"), so highp is full float32.  sampled_channels (128, 96): Beatmup's
#        practical numbers ("under 100" taken as 96, whole packs); with 8 units a program reads at
#        most 32 channels, so the units bind first.  Fragment uniform vectors: 4095, what Mesa
#        vc4 (Raspberry Pi OS's driver) answers for GL_MAX_FRAGMENT_UNIFORM_VECTORS (`python -m
#        workbench drivers`' GL_MAX_* check); the QPUs read uniforms from a stream, as they
#        read literals, so weights passed as uniforms cost what literals cost.
# [MALI] Arm, "Understanding numerical precision", section "Shader precision"
#        (developer.arm.com/solutions/graphics-and-gaming/developer-guides/learn-the-basics/
#        understanding-numerical-precision/shader-precision): "Mali-400 series GPUs ... do not
#        support highp processing in fragment shaders", every fragment value is fp16.  Texture
#        size: Mesa lima, src/gallium/drivers/lima/lima_screen.h, "max texture size is
#        4096x4096" (LIMA_MAX_MIP_LEVELS 13).  Texture units: 8 (the ES 2.0 minimum; not
#        confirmed here from an Arm document).
# [A3XX] Adreno 3xx (Adreno 305-330): MAX_TEXTURE_SIZE 4096, MAX_TEXTURE_IMAGE_UNITS 16 and highp
#        fragment floats, the values device reports list for Adreno 320 (opengles.gpuinfo.org);
#        the Qualcomm Adreno OpenGL ES Developer Guide (80-NU141-1 B, 2015) covers the family.
#        Not confirmed here from a primary source: check a device report before relying on them.
#        Draw buffers 4: Mesa freedreno, src/gallium/drivers/freedreno/freedreno_util.h,
#        A3XX_MAX_RENDER_TARGETS 4 (screen->max_rts in a3xx/fd3_screen.c); Adreno 3xx are OpenGL
#        ES 3.0 GPUs, where 4 draw buffers are the minimum.  Whether the vendor's ES 2.0 contexts
#        list GL_EXT_draw_buffers was not confirmed: the runtime checks GL_MAX_DRAW_BUFFERS.
# [MRT]  No multiple render targets (draw_buffers 1) on VideoCore IV and Mali-400: Mesa vc4
#        (vc4_screen.c) and lima (lima_screen.c) both answer PIPE_CAP_MAX_RENDER_TARGETS with 1.
#        GL_EXT_draw_buffers / WEBGL_draw_buffers are optional, so the ES 2.0 and WebGL 1.0
#        minimums stay at 1.
# [WEB]  The WebGL 1.0 spec sets no minimums of its own: getParameter answers with the ES 2.0
#        values, so a page may only rely on [ES2].  A net for the web is designed for what nearly
#        every browser offers instead: MAX_TEXTURE_SIZE 4096 is the floor of the browser surveys
#        (webglstats.com, now web3dsurvey.com; MDN "WebGL best practices", section "Understand
#        system limits", developer.mozilla.org/en-US/docs/Web/API/WebGL_API/WebGL_best_practices,
#        lists 4096 as supported by ~all devices; that page was not re-read for this table).
#        Units, varyings, uniforms and precision stay at [ES2] (fragment highp is optional; the
#        page warns when a browser lacks it).
# [GC2000] Vivante GC2000 (i.MX6 Quad), as Mesa etnaviv 22.3.6 drives it: 64 vec4 fragment
#        uniforms (src/gallium/drivers/etnaviv/etnaviv_screen.c, etna_determine_uniform_limits:
#        "taken from gcmCONFIGUREUNIFORMS in the Vivante kernel driver"; a GC2000 of revision
#        0x5108, 168 constants, falls in the 168 / 64 case), and the compiler keeps literal
#        constants in the same file (etnaviv_compiler_nir.c, etna_compile_check_limits counts
#        uniforms.count, immediates included).  Its compiler rejected the SR net's grouped 3x3
#        programs (432 weight literals: "Number of uniforms (111) exceeds maximum 64") while GL
#        reported success; with 2 output channels a program they fit (python -m workbench
#        drivers).  Texture size 8192 (etnaviv: max_texture_size for GC2000's features);
#        highp: Vivante's shader cores compute in fp32.  Draw buffers: etnaviv 22.3 offers 1.
_ES2_MINIMUM = replace(ES2, name="es2-minimum", max_texture_size=64, float_precision="mediump")
PROFILES = {p.name: p for p in (
    _ES2_MINIMUM,                                                              # [ES2]
    replace(_ES2_MINIMUM, name="videocore4", max_texture_size=2048,            # [VC4] [MRT]
            float_precision="highp", sampled_channels=(128, 96), fragment_uniform_vectors=4095,
            driver="vc4"),
    replace(_ES2_MINIMUM, name="mali400", max_texture_size=4096,               # [MALI] [MRT]
            driver="mali400"),
    replace(_ES2_MINIMUM, name="adreno3xx", max_texture_size=4096,             # [A3XX]
            texture_units=16, float_precision="highp", draw_buffers=4, driver="a320"),
    replace(_ES2_MINIMUM, name="gc2000", max_texture_size=8192,                # [GC2000]
            float_precision="highp", constant_vectors=64, driver="gc2000"),
    replace(_ES2_MINIMUM, name="webgl1-minimum", max_texture_size=4096),       # [WEB]
)}


def profile(device=None, draw_buffers=None) -> Limits:
    """The limits of ``device``: a profile name (:data:`PROFILES`), a :class:`Limits`, or None
    for :data:`ES2`, which leaves the render targets per program to the runtime as it leaves
    the texture size: with ``draw_buffers``, ES2 allowing that many."""
    if device is None and draw_buffers is not None:
        return replace(ES2, draw_buffers=draw_buffers)
    if device is None or isinstance(device, Limits):
        return device or ES2
    if device not in PROFILES:
        raise ValueError(f"unknown device profile {device!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[device]


class LimitError(ValueError):
    """A net that breaks an ES 2.0 limit; names the layer, the limit and the value."""


def check(graph, limits: Limits = ES2):
    """Raise :class:`LimitError` for the first op of ``graph`` that breaks a limit; with a
    fixed input size, also for a texture larger than ``limits.max_texture_size``."""
    shapes = graph.shapes(graph.input_size or (64, 64))
    for op in graph.ops:
        record(op).check(op, shapes, limits)
    if graph.input_size:
        check_texture_sizes(graph, graph.input_size, limits)


def check_texture_sizes(graph, hw, limits: Limits = ES2):
    """Every texture of ``graph`` for an input of ``hw = (height, width)`` within
    ``limits.max_texture_size`` (nothing to check when it is None)."""
    if limits.max_texture_size is None:
        return
    for (tensor, _), (w, h, _) in plan.textures(graph, hw).items():
        fits(tensor.split("/")[0], f"texture side of {tensor!r} ({w}x{h}) for a "
              f"{hw[1]}x{hw[0]} input", max(w, h), limits.max_texture_size, limits)


def check_precision(precision, limits: Limits = ES2):
    """The precision a net is compiled for: ``None`` picks the device's; ``"highp"`` on a
    device without highp fragment shaders is refused."""
    precision = precision or limits.float_precision
    if precision == "highp" and limits.float_precision != "highp":
        raise LimitError(f"precision 'highp': {limits.name} fragment shaders have no highp float "
                         "(mediump only); compile for mediump (--precision mediump, "
                         f"es2.Target.of({limits.name!r}, 'mediump'))")
    return precision


def check_draw_buffers(draw_buffers, limits: Limits = ES2) -> int:
    """The render targets per program a net is compiled for: ``None`` picks the device's; more
    than the device has is refused."""
    draw_buffers = limits.draw_buffers if draw_buffers is None else draw_buffers
    if not isinstance(draw_buffers, int) or draw_buffers < 1:
        raise ValueError(f"draw_buffers must be a whole number >= 1, not {draw_buffers!r}")
    if draw_buffers > limits.draw_buffers:
        raise LimitError(f"draw_buffers = {draw_buffers} exceeds the {limits.name} limit of "
                         f"{limits.draw_buffers} (GL_EXT_draw_buffers is optional in ES 2.0)")
    return draw_buffers


@dataclass(frozen=True)
class Target:
    """What a net is compiled for, validated once (:meth:`of`) and handed from the command
    line to the shaders: the device's ``limits``, the shaders' float ``precision``
    (``"highp"`` or ``"mediump"``: the qualifier they declare) and the render targets one
    program may write (``draw_buffers``, 1: plain ES 2.0)."""
    limits: Limits = ES2
    precision: str = "highp"
    draw_buffers: int = 1

    @classmethod
    def of(cls, device=None, precision=None, draw_buffers=None) -> "Target":
        """The target for ``device`` (a profile name, a :class:`Limits`, or None: ES2, which
        takes any ``draw_buffers``), ``precision`` (None: the device's; highp where it has
        none is refused) and ``draw_buffers`` (None: the device's; more is refused)."""
        table = profile(device, draw_buffers)
        return cls(table, check_precision(precision, table),
                   check_draw_buffers(draw_buffers, table))


# A pass's uniforms that only the vertex shader reads (its window's texture coordinates,
# :data:`workbench.es2.shaders.VERTEX_SHADER`): they take no fragment uniform vectors
VERTEX_UNIFORM = "u_v_"


def check_passes(passes, limits: Limits = ES2, graph=None):
    """Per program: the uniform vectors it declares (each vec2 takes a vec4 slot, an array
    one a row), its render
    targets and texture units, and, given the ``graph``, what the op's record checks of one
    program (a convolution program's fetches per fragment: one with several targets reads
    the union of their inputs)."""
    for p in passes:
        vectors = (sum(not name.startswith(VERTEX_UNIFORM) for name in p.uniforms)
                   + sum(len(rows) for rows in p.arrays.values()))
        fits(p.op, "fragment uniform vectors", vectors, limits.fragment_uniform_vectors, limits)
        fits(p.op, "render targets per program", len(p.outputs), limits.draw_buffers, limits)
        fits(p.op, "texture units", len(p.inputs), limits.texture_units, limits)
        op = graph.op(p.op) if graph else None
        if op is not None and record(op).check_program:
            record(op).check_program(op, [pack for _, pack in p.outputs], limits)


def check_storage(layer, activation, limits):
    """Raise :class:`LimitError` unless ``activation`` (a name, or a layer's own:
    :func:`workbench.nets.activations.of`) keeps a layer's output in the range of its 8-bit
    storage."""
    act = activations.get(activation)
    rng = act.output_range
    if rng is None or rng[0] < limits.storage_range[0] or rng[1] > limits.storage_range[1]:
        raise LimitError(f"layer {layer!r}: activation {act.name!r} does not keep the "
                         f"output in {limits.storage_range}, the range of {limits.storage} "
                         "storage; add a bounded activation")


def fits(layer, limit, value, maximum, limits):
    """Raise :class:`LimitError` naming the layer, the limit and the value when ``value``
    exceeds ``maximum``."""
    if value > maximum:
        raise LimitError(f"layer {layer!r}: {limit} = {value} exceeds the {limits.name} limit of "
                         f"{maximum}")


