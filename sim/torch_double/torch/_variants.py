"""Variant table of the torch double: what each CUDA build of torch 2.11 reports and needs.

Read by ``sim/wheels.py`` (by file path, without importing the package) to stamp each wheel, and
by the double at run time. Driver minimums: NVIDIA CUDA Toolkit release notes, table 3 ("CUDA
Toolkit and Corresponding Driver Versions"): CUDA 12.8 GA >= 570.26, and from 525.60.13 under 12.x
minor-version compatibility (reduced features); CUDA 13.0 >= 580.65.06.
"""

VARIANTS = {
    "cu128": {
        "cuda": "12.8",
        "min_driver": "570.26",
        # cudart 12.8 runs on any 12.x driver (minor-version compatibility).
        "compat_driver": "525.60.13",
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
        "cudnn": 91002,
        "nccl": (2, 27, 3),
        # torch 2.11+cu128: concurrent torch.compile from several threads trips the global
        # FX-tracing flag ("Detected that you are using FX to symbolically trace ...").
        "compile_race": True,
    },
    "cu130": {
        "cuda": "13.0",
        "min_driver": "580.65.06",
        "compat_driver": None,
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"],
        "cudnn": 91300,
        "nccl": (2, 27, 7),
        "compile_race": False,
    },
}

# The unlabeled PyPI wheel (torch==2.11.0) is the CUDA 13.0 build.
UNLABELED_VARIANT = "cu130"

# cudaDriverGetVersion() by driver branch: the highest CUDA version a driver supports, as torch
# prints it in "found version NNNNN". (branch floor, cuda int), ascending.
DRIVER_CUDA = [
    (450, 11000),
    (455, 11010),
    (460, 11020),
    (465, 11030),
    (470, 11040),
    (495, 11050),
    (510, 11060),
    (515, 11070),
    (520, 11080),
    (525, 12000),
    (530, 12010),
    (535, 12020),
    (545, 12030),
    (550, 12040),
    (555, 12050),
    (560, 12060),
    (565, 12070),
    (570, 12080),
    (575, 12090),
    (580, 13000),
    (590, 13010),
]
