"""The node's facts: readable, an NVIDIA driver new enough for the build, nvidia-smi listing
``expected_gpu_count`` GPUs. Deploy's preflight (:func:`pvegpu.startup.preflight.node_problems`)
runs the same driver and GPU-count checks, so both word these problems alike.

>>> from pvegpu.settings import Settings, defaults
>>> v = Verdict("n1")
>>> check_node_driver(v, Settings.from_data(defaults()), {"driver_version": "570.86.10"}, "n1")
>>> v.problems[0].found
'570.86.10 on node n1'
"""

from __future__ import annotations

from ..settings import Settings
from ..variants import driver_fit
from .inputs import Inputs
from .verdict import Problem, Verdict


def check_node(v: Verdict, f: Inputs) -> None:
    """The node answered, its driver fits the build, and it lists the expected GPUs."""
    if not f.node:
        v.problems.append(
            Problem(
                "node facts",
                f"readable facts of node {f.node_name}",
                "none (not reachable)",
                f"check SSH to {f.node_name}",
            )
        )
    else:
        check_node_driver(v, f.settings, f.node, f.node_name)
    check_node_gpus(v, f.settings, f.node, f.node_name)


def check_node_driver(v: Verdict, settings: Settings, node: dict, node_name: str) -> None:
    """An NVIDIA driver is loaded on the node, new enough for ``torch_variant`` (NVIDIA CUDA
    release notes, table 3: CUDA 12.8 >= 570.26, 12.x minor-version compatibility from 525.60.13
    with reduced features, a warning; CUDA 13.0 >= 580.65.06)."""
    variant = settings.torch.spec
    driver = node.get("driver_version")
    if not driver:
        v.problems.append(
            Problem(
                "node driver",
                f"an NVIDIA driver >= {variant.min_driver} loaded on {node_name}",
                "none (/proc/driver/nvidia/version missing)",
                f"install the NVIDIA driver >= {variant.min_driver} on the node and reboot",
            )
        )
        return
    fit = driver_fit(variant, driver)
    if fit == "too_old":
        v.problems.append(
            Problem(
                f"driver for {settings.torch.variant}",
                f">= {variant.min_driver} (CUDA {variant.cuda})",
                f"{driver} on node {node_name}",
                f"upgrade the node's NVIDIA driver to >= {variant.min_driver} (then deploy.py "
                "matches the container), or set torch_variant to a build the driver supports",
            )
        )
    elif fit == "reduced":
        v.warnings.append(
            f"driver {driver} runs {settings.torch.variant} only in CUDA minor-version "
            f"compatibility mode (reduced features); >= {variant.min_driver} recommended"
        )


def check_node_gpus(v: Verdict, settings: Settings, node: dict, node_name: str) -> None:
    """nvidia-smi works on a node with a driver, and lists exactly ``expected_gpu_count`` GPUs
    (more is as wrong as fewer)."""
    gpus = node.get("gpus")
    if node.get("driver_version") and gpus is None:
        v.problems.append(
            Problem(
                "node GPUs",
                f"nvidia-smi on {node_name} lists the GPUs",
                " ".join(node.get("gpu_error") or []) or "nvidia-smi failed",
                "fix the node's driver install (nvidia-smi must work on the node)",
            )
        )
    elif gpus is not None and len(gpus) != settings.gpus.expected_count:
        v.problems.append(
            Problem(
                "node GPU count",
                f"{settings.gpus.expected_count} (expected_gpu_count)",
                f"{len(gpus)} listed by nvidia-smi on {node_name}",
                "check the GPUs (nvidia-smi -L on the node) or set expected_gpu_count",
            )
        )
