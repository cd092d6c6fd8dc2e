"""``verify()``: one container's facts and its node's against the settings, check by check, into
one :class:`~pvegpu.verification.verdict.Verdict` (the table's rows, problems, warnings and a
summary). Nothing here touches a host; tests/unit/test_verify_checks.py drives every branch.
"""

from __future__ import annotations

from collections.abc import Callable

from ..settings import Settings
from .concurrent_compile import check_compile
from .driver_parity import check_driver_parity
from .free_memory import check_free_memory
from .gpu_rows import arch_list_of, check_gpu_rows, finish_rows
from .inputs import Inputs
from .node import check_node
from .packages import check_packages, drift_report
from .processes import check_compute_processes
from .toolchain import check_toolchain
from .torch_build import check_torch
from .verdict import Verdict

#: The checks in the order their problems are listed (a later one may read an earlier one's).
CHECKS: tuple[Callable[[Verdict, Inputs], None], ...] = (
    check_node,
    check_driver_parity,
    check_torch,
    check_gpu_rows,
    check_compute_processes,
    check_free_memory,
    check_packages,
    check_toolchain,
    check_compile,
    finish_rows,
)


def verify(
    settings: Settings,
    node: dict,
    ct: dict,
    *,
    where: str,
    vmid: int,
    node_name: str = "the node",
    lock: dict[str, str] | None = None,
    lock_source: str | None = None,
    unit: str | None = None,
    deploying: bool = False,
    waiting: tuple[str, ...] = (),
) -> Verdict:
    """Compare one container's facts and its node's with the settings.

    ``deploying``: the verify stage of deploy.py, whose training unit stage runs next. A leftover
    training process on a training GPU (:func:`~pvegpu.verification.processes.cleared_at_start`)
    that stage will clear (the unit is not running, or a pending restart is asked for) is then a
    warning, and its memory counts as free; verify.py (read-only) reports it as a problem whose
    fix is to run deploy.py. ``waiting``: this run's lines of the changes to this container that
    wait for a training (a toolchain install among them makes its absence a warning).

    >>> from pvegpu.settings import defaults
    >>> v = verify(Settings.from_data(defaults()), {}, {}, where="CT 200 on n1", vmid=200)
    >>> [p.check for p in v.problems]
    ['node facts', 'container facts']
    """
    f = Inputs(settings, node, ct, vmid, node_name, lock, lock_source, unit, deploying, waiting)
    v = Verdict(where)
    for check in CHECKS:
        check(v, f)
    v.summary = summary(f)
    return v


def summary(f: Inputs) -> dict:
    """The facts behind the verdict, for the JSON report and ``-v``."""
    rt, ct, node_gpus = f.runtime or {}, f.ct or {}, f.node.get("gpus")
    return {
        "torch": rt.get("version"),
        "torch_expected": f.torch_wanted,
        "cuda": rt.get("cuda"),
        "cudnn": rt.get("cudnn"),
        "nccl": rt.get("nccl"),
        "arch_list": arch_list_of(f),
        "available": f.available,
        "init_error": rt.get("init_error"),
        "device_count": rt.get("device_count"),
        "expected_gpu_count": f.settings.gpus.expected_count,
        "target_gpus": list(f.settings.gpus.targets),
        "drafter_gpus": list(f.settings.gpus.drafters),
        "driver_node": f.node.get("driver_version"),
        "driver_container": ct.get("driver") or {},
        "node_gpu_count": len(node_gpus) if node_gpus is not None else None,
        "container_gpus": ct.get("gpus"),
        "container_gpu_error": ct.get("gpu_error"),
        "compute_apps": f.node.get("compute_apps") or [],
        "unit_active": f.unit_state.active,
        "restart_pending": f.unit_state.pending,
        "venv": ct.get("venv"),
        "venv_real": ct.get("venv_real"),
        "packages": drift_report(f),
        "compile": ct.get("compile"),
        "toolchain": ct.get("toolchain"),
        "verify_level": f.settings.verification.level,
    }
