"""A fake NVIDIA view for unit tests of the torch double, without the simulated node.

    env = make_fake_nvidia_root(tmp_path, gpus=2)
    subprocess.run([python, "-c", "import torch; ..."], env={**os.environ, **env})

Lays out ``<root>/dev/nvidia*``, ``<root>/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> libcuda.so.<v>``
and ``<root>/proc/driver/nvidia/{version,sim/node.json,sim/processes.json}`` as plain files and
returns the env overrides (``PVE_SIM_ROOT``) that point the double at it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-5ac1-7c2d-9e3f-{0x5EED0000 + index:012x}"


def make_fake_nvidia_root(
    root: str | os.PathLike,
    gpus: int = 2,
    driver: str = "580.95.05",
    libcuda: str | None = "same",
    ctl: bool = True,
    uvm: bool = True,
    device_minors=None,
    name: str = "NVIDIA H200",
    memory_total_mib: int = 143771,
    compute_cap: str = "9.0",
    processes=(),
    torch_json: dict | None = None,
    schema: str = "list",
    compute_modes: dict | None = None,
) -> dict[str, str]:
    """Create (or rewrite) the fake tree; ``libcuda=None`` leaves libcuda out, ``"same"`` matches
    the kernel module (``driver``), any other string is a mismatching userspace version.

    ``schema="list"`` writes node.json with a ``gpus`` list of GPU dicts; ``schema="node"`` writes
    it as the simulated node does (``gpus`` a count, ``gpu_name``, ``gpu_memory_mib``,
    ``compute_cap``), leaving names/UUIDs/bus ids to ``/proc/driver/nvidia/gpus/*/information``.
    """
    root = Path(root)
    dev = root / "dev"
    lib = root / "usr/lib/x86_64-linux-gnu"
    nv = root / "proc/driver/nvidia"
    for d in (dev, lib, nv / "sim"):
        d.mkdir(parents=True, exist_ok=True)
    for p in (
        list(dev.glob("nvidia*")) + list(lib.glob("libcuda.so*")) + list(lib.glob("libnvidia-ml*"))
    ):
        p.unlink()
    if ctl:
        (dev / "nvidiactl").touch()
    if uvm:
        (dev / "nvidia-uvm").touch()
        (dev / "nvidia-uvm-tools").touch()
    for minor in range(gpus) if device_minors is None else device_minors:
        (dev / f"nvidia{minor}").touch()
    if libcuda is not None:
        version = driver if libcuda == "same" else libcuda
        (lib / f"libcuda.so.{version}").write_bytes(b"")
        (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
        # NVML, installed with libcuda by the driver (torch.cuda.device_count() asks it first)
        (lib / f"libnvidia-ml.so.{version}").write_bytes(b"")
        (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
    (nv / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Sep 23 09:55:41 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    table = [
        {
            "index": i,
            "name": name,
            "uuid": gpu_uuid(i),
            "memory_total_mib": memory_total_mib,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            "compute_cap": compute_cap,
        }
        for i in range(gpus)
    ]
    shutil.rmtree(nv / "gpus", ignore_errors=True)
    for g in table:
        bus = g["pci_bus_id"][4:].lower()
        (nv / "gpus" / bus).mkdir(parents=True)
        (nv / "gpus" / bus / "information").write_text(
            f"Model: \t\t {g['name']}\nIRQ:   \t\t {200 + g['index']}\nGPU UUID: \t {g['uuid']}\n"
            "Video BIOS: \t 96.00.a5.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {g['index']}\n"
        )
    if schema == "list":
        node = {"driver_version": driver, "gpus": table}
    elif schema == "node":
        node = {
            "driver_version": driver,
            "gpus": gpus,
            "gpu_name": name,
            "gpu_memory_mib": memory_total_mib,
            "compute_cap": compute_cap,
        }
    else:
        raise ValueError(f"schema must be 'list' or 'node', not {schema!r}")
    if compute_modes:
        node["compute_modes"] = {str(k): v for k, v in compute_modes.items()}
    (nv / "sim/node.json").write_text(json.dumps(node, indent=1))
    (nv / "sim/processes.json").write_text(json.dumps(list(processes)))
    torch_file = nv / "sim/torch.json"
    if torch_json is not None:
        torch_file.write_text(json.dumps(torch_json))
    elif torch_file.exists():
        torch_file.unlink()
    return {"PVE_SIM_ROOT": str(root)}
