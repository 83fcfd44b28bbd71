"""Published numbers the workbench reproduces or compares with, in one place (sources in
docs/design.md, "Reference systems").  Units in the names; PSNR in dB on Y601 (BT.601
studio-range luma, ``crop_border = scale``) with ``bicubic_aa`` low resolution."""

# x2 SR net of the reference article (7,340 parameters, 32 programs)
SR_PARAMETERS = 7340
SR_PROGRAMS = 32
SR_PI3_MS = 130.0                 # 256x256 -> 512x512 on a Raspberry Pi 3
SR_PI_ZERO_MS = 171.0             # the same on a Raspberry Pi Zero W
SR_PI3_COMPILE_S = (3.5, 4.0)     # compile + link of every shader on a Pi 3
SR_DEVICES_PSNR_DB = 45.8         # outputs of a Pi, a phone and a desktop GPU agree within this

# Published x2 PSNR, Set5 / Set14 (bicubic_aa, Y601); parameters
SR_PUBLISHED = {
    "bicubic": {"parameters": 0, "Set5": 33.66, "Set14": 30.24},
    "SRCNN": {"parameters": 57_000, "Set5": 36.66, "Set14": 32.42},
    "FSRCNN-s": {"parameters": 4_000, "Set5": 36.57, "Set14": 32.28},
    "FSRCNN": {"parameters": 12_000, "Set5": 37.00, "Set14": 32.63},
    "SESR-M3": {"parameters": 9_000, "Set5": 37.21, "Set14": 32.70},
    "SESR-M5": {"parameters": 13_500, "Set5": 37.39, "Set14": 32.84},
}

# 120-class dogs classifier at 385x385
DOGS120_PARAMETERS = 225_112
DOGS120_MULTIPLY_ADDS_M = 398.4   # per image
DOGS120_TEXEL_FETCHES_M = 27.9    # RGBA texel fetches per image
DOGS120_TEXTURE_MB = 6.0          # texture memory stays below this
DOGS120_TOP1_TF = 72.28           # % top-1 in Keras
DOGS120_TOP1_GPU = 72.13          # % top-1 through the ES 2.0 shaders
DOGS120_PI_ZERO_MS = 595.0        # per image on a Pi Zero W
DOGS120_PI3BPLUS_MS = 328.0       # per image on a Pi 3 B+

# Convolution-algorithm study on a Tegra K1: 3x3 conv, 3 -> 16 channels, ms; (width, height)
CONV_STUDY_MS = {(32, 32): {"direct": 2.3, "im2col_gemm": 4.2},
                 (1600, 1200): {"direct": 2404.0, "im2col_gemm": 1696.0}}
