"""Verification: pure comparisons of a training container's facts and its node's with the
settings; each problem is one line (expectation, fact, fix). Nothing here touches a host.

:func:`verify` runs the checks in order over one :class:`Verdict`, one module each: the node
(:mod:`.node`, shared with deploy's preflight), driver parity, the torch build, the GPU rows,
the compute processes, free memory, the venv's packages and the concurrent compile.
"""

from .concurrent_compile import FX_RACE
from .gpu_rows import MEMORY_TOLERANCE, arch_covers
from .inputs import Inputs, roles
from .node import check_node_driver, check_node_gpus
from .packages import SEED_PACKAGES, package_drift, pin_seeds, required_closure
from .pipeline import verify
from .processes import (
    app_argv,
    cleared_at_start,
    is_own_process,
    is_training_command,
    process_owner,
)
from .torch_build import torch_problems
from .verdict import Problem, Verdict

__all__ = [
    "FX_RACE",
    "MEMORY_TOLERANCE",
    "SEED_PACKAGES",
    "Inputs",
    "Problem",
    "Verdict",
    "app_argv",
    "arch_covers",
    "check_node_driver",
    "check_node_gpus",
    "cleared_at_start",
    "is_own_process",
    "is_training_command",
    "package_drift",
    "pin_seeds",
    "process_owner",
    "required_closure",
    "roles",
    "torch_problems",
    "verify",
]
