"""Checks that run before any change anywhere: settings of every host, then each node's GPUs.

``check_fleet`` is called from the top of deploy.py. It raises one PreflightError listing every
problem (one line each: the fact, the value found, the fix), so a bad run stops before the first
operation executes.
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from .facts.proxmox import NodeState
from .settings import Settings, load_all
from .training_preflight import training_path_problems
from .variants import driver_fit


class PreflightError(PyinfraError):
    """The node cannot run the selected build; nothing was changed."""


def node_problems(settings: Settings, state: dict, node: str) -> tuple[list[str], list[str]]:
    """(problems, warnings) of one node's facts against the settings.

    >>> from pvegpu.settings import defaults
    >>> problems, _ = node_problems(Settings.from_data(defaults()),
    ...                             {"driver_version": "570.86.10", "gpus": [{}] * 8}, "n1")
    >>> problems[0].split(":")[:2]
    ['n1', ' driver 570.86.10 is too old for cu130 (needs >= 580.65.06)']
    """
    problems, warnings = [], []
    driver = state.get("driver_version")
    if not driver:
        problems.append(
            f"{node}: no NVIDIA driver loaded (/proc/driver/nvidia/version missing): install the "
            f"NVIDIA driver >= {settings.variant.min_driver} on the node and reboot"
        )
    else:
        fit = driver_fit(settings.variant, driver)
        if fit == "too_old":
            problems.append(
                f"{node}: driver {driver} is too old for {settings.torch_variant} "
                f"(needs >= {settings.variant.min_driver}): upgrade the node's driver or set "
                f"torch_variant to one it supports"
            )
        elif fit == "reduced":
            warnings.append(
                f"{node}: driver {driver} runs {settings.torch_variant} only in CUDA minor-version "
                f"compatibility mode (reduced features); >= {settings.variant.min_driver} recommended"
            )
    gpus = state.get("gpus")
    if driver and gpus is None:
        problems.append(f"{node}: nvidia-smi failed ({' '.join(state.get('gpu_error') or []) or 'no output'}): fix the driver install")
    elif driver and len(gpus) != settings.expected_gpu_count:
        problems.append(
            f"{node}: nvidia-smi lists {len(gpus)} GPUs, expected_gpu_count is "
            f"{settings.expected_gpu_count}: check the GPUs (nvidia-smi -L) or set expected_gpu_count"
        )
    return problems, warnings


def check_fleet(state, inventory) -> dict[str, Settings]:
    """Validate settings of every host and the GPUs of every node, once per run (cached on the
    run's State)."""
    cached = getattr(state, "pvegpu_settings", None)
    if cached is not None:
        return cached
    settings = load_all(list(inventory))
    problems = []
    for node_host in inventory.get_group("pve_hosts", []):
        s = settings[node_host.name]
        facts = node_host.get_fact(
            NodeState, vmids=node_host.data.get("pve_ct_ids") or [],
            installer_dir=s.nvidia_installer_dir, data_dir=s.data_dir_node,
        )
        if not facts:
            problems.append(f"{node_host.name}: node facts could not be read: check SSH to the node")
            continue
        found, warnings = node_problems(s, facts, node_host.name)
        problems += found
        for line in warnings:
            logger.warning(f"--> warning: {line}")
    problems += training_path_problems(inventory, settings)
    if problems:
        raise PreflightError("preflight failed, nothing was changed:\n" + "\n".join(problems))
    state.pvegpu_settings = settings
    return settings
