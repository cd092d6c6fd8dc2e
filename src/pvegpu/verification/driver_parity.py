"""The container's NVIDIA userspace (libcuda, libnvidia-ml, nvidia-smi) is exactly the node's
kernel module version: CUDA refuses a mismatch.

>>> from pvegpu.settings import Settings, defaults
>>> v = Verdict("CT 200 on n1")
>>> check_driver_parity(v, Inputs(Settings.from_data(defaults()),
...     {"driver_version": "580.95.05"}, {"driver": {"libcuda": "580.82.07"}}, vmid=200))
>>> v.problems[0].found
'libcuda 580.82.07 in CT 200'
"""

from __future__ import annotations

from .inputs import Inputs
from .verdict import Problem, Verdict


def check_driver_parity(v: Verdict, f: Inputs) -> None:
    """Each userspace library the container reports equals the node's driver version; an
    nvidia-smi failure in the container that says more is a warning."""
    node_driver = f.node.get("driver_version")
    if f.ct and node_driver:
        _check_userspace(v, f.ct.get("driver") or {}, node_driver, f.vmid)
    error = f.ct.get("gpu_error") if f.ct else None
    if error and "not installed" not in error and ("mismatch" in error or not f.ct.get("gpus")):
        v.warnings.append(f"nvidia-smi in CT {f.vmid}: {error}")


def _check_userspace(v: Verdict, drv: dict, node_driver: str, vmid: int) -> None:
    found = {
        "libcuda": drv.get("libcuda"),
        "libnvidia-ml": drv.get("libnvidia_ml"),
        "nvidia-smi": drv.get("smi"),
    }
    if not found["libcuda"]:
        v.problems.append(
            Problem(
                "driver parity",
                f"libcuda.so.{node_driver} in CT {vmid} (= node)",
                f"no libcuda.so.1 in CT {vmid}",
                f"run deploy.py (installs NVIDIA-Linux-x86_64-{node_driver}.run "
                "--no-kernel-modules in the container)",
            )
        )
        return
    differ = {k: x for k, x in found.items() if x and x != node_driver}
    if differ:
        v.problems.append(
            Problem(
                "driver parity",
                f"container userspace {node_driver} (= node's module)",
                ", ".join(f"{k} {x}" for k, x in differ.items()) + f" in CT {vmid}",
                "run deploy.py: it installs the node driver's exact userspace",
            )
        )
