"""The venv's torch: present, importable, the configured build and CUDA version, CUDA available,
and every GPU the settings name visible to it.

>>> torch_problems({"present": True, "version": "2.11.0+cu128", "cuda": "12.8", "available": True,
...                 "device_count": 8}, "2.11.0", "cu130", "13.0", 8)[0]
... # doctest: +NORMALIZE_WHITESPACE
'torch is 2.11.0+cu128, expected 2.11.0+cu130: run deploy.py (it rebuilds the venv for
torch_variant=cu130)'
"""

from __future__ import annotations

from ..facts.gpus import normalize_uuid
from ..settings import Settings
from .inputs import Inputs
from .verdict import Problem, Verdict


def torch_problems(
    rt: dict, version: str, variant: str, cuda: str, expected_count: int
) -> list[str]:
    """What is wrong with a torch runtime fact, given the configured build (the python env stage
    checks a new venv with this before switching to it)."""
    want = f"{version}+{variant}"
    if not rt:
        return ["torch runtime could not be read (container not reachable): run deploy.py"]
    if not rt.get("present"):
        return [f"no venv python at {rt.get('python')}: run deploy.py to build the venv"]
    if rt.get("import_error"):
        return [
            f"torch does not import in {rt.get('python')} ({rt['import_error']}): run deploy.py "
            "--data rebuild=venv"
        ]
    problems = []
    if rt.get("version") != want:
        problems.append(
            f"torch is {rt.get('version')}, expected {want}: run deploy.py "
            f"(it rebuilds the venv for torch_variant={variant})"
        )
    if rt.get("cuda") != cuda:
        problems.append(f"torch.version.cuda is {rt.get('cuda')}, expected {cuda} for {variant}")
    if not rt.get("available"):
        problems.append(
            f"CUDA is not available to torch ({rt.get('init_error') or 'no reason given'}): "
            "check the driver parity and the GPU passthrough (run deploy.py)"
        )
    elif rt.get("device_count") != expected_count:
        problems.append(
            f"torch sees {rt.get('device_count')} GPUs, expected {expected_count}: check the "
            "passthrough of every /dev/nvidiaN to the container"
        )
    return problems


def check_torch(v: Verdict, f: Inputs) -> None:
    """The container answered, its venv exists and imports torch, the build is the configured
    one, CUDA is available and torch sees the GPUs."""
    ct = f.ct
    if not ct:
        v.problems.append(
            Problem(
                "container facts",
                f"CT {f.vmid} answers",
                "no answer",
                f"start CT {f.vmid} (pct start {f.vmid}) or run deploy.py",
            )
        )
        return
    if not ct.get("present"):
        v.problems.append(
            Problem(
                "venv",
                f"{ct.get('venv')} with torch {f.torch_wanted}",
                f"no {ct.get('python')}",
                "run deploy.py (it builds the venv and links it)",
            )
        )
        return
    rt = ct["torch"]  # the probe reads torch whenever the venv's python is present
    if rt.get("import_error"):
        v.problems.append(
            Problem(
                "torch import",
                f"import torch works in {ct.get('venv')}",
                rt["import_error"],
                "run deploy.py --data rebuild=venv",
            )
        )
        return
    _check_build(v, f, rt)
    if f.available:
        _check_device_count(v, f, rt)
        return
    reason = rt.get("init_error") or "is_available() is False, no CUDA device visible"
    v.problems.append(
        Problem(
            "CUDA init",
            "torch.cuda.is_available() is True",
            f"CUDA error: {reason}",
            _cuda_fix(reason, f.settings, f.vmid),
        )
    )


def _check_build(v: Verdict, f: Inputs, rt: dict) -> None:
    """The torch build is the configured one, for the variant's CUDA (one line: a wrong build
    explains its CUDA version)."""
    want, venv, cuda = f.torch_wanted, f.ct.get("venv"), f.settings.variant.cuda
    if rt.get("version") != want:
        v.problems.append(
            Problem(
                "torch build",
                want,
                f"{rt.get('version')} in {venv}",
                f"run deploy.py (switches {venv} to {want}; the other build is kept for rollback)",
            )
        )
    elif rt.get("cuda") != cuda:
        v.problems.append(
            Problem(
                "torch CUDA",
                f"torch.version.cuda {cuda} ({f.settings.torch_variant})",
                str(rt.get("cuda")),
                "run deploy.py --data rebuild=venv",
            )
        )


def _check_device_count(v: Verdict, f: Inputs, rt: dict) -> None:
    """torch sees ``expected_gpu_count`` devices, and a device for each GPU with a role."""
    devices = f.devices
    count = rt.get("device_count", len(devices))
    expected = f.settings.expected_gpu_count
    if count != expected:
        seen = {normalize_uuid(d.get("uuid")) for d in devices}
        missing = sorted(g["index"] for u, g in f.by_uuid.items() if u not in seen)
        detail = f" (node GPU {', '.join(map(str, missing))} not passed through)" if missing else ""
        v.problems.append(
            Problem(
                "GPU count",
                f"{expected} GPUs visible to torch (expected_gpu_count)",
                f"{count}{detail}",
                f"pass every /dev/nvidiaN through to CT {f.vmid}: run deploy.py",
            )
        )
    for i in sorted(f.role_of):
        if i >= count:
            v.problems.append(
                Problem(
                    f"GPU {i} ({f.role_of[i]})",
                    f"CUDA device {i} present in CT {f.vmid}",
                    f"only {count} devices (0..{count - 1})",
                    f"pass the node's GPUs through to CT {f.vmid}: run deploy.py",
                    gpu=i,
                )
            )


def _cuda_fix(error: str, settings: Settings, vmid: int) -> str:
    low = error.lower()
    if "too old" in low:
        return (
            f"upgrade the node's NVIDIA driver to >= {settings.variant.min_driver}, then run "
            "deploy.py (matches the container's userspace), or set torch_variant to a build "
            "the driver supports"
        )
    if "mismatch" in low or "803" in low or "unsupported display driver" in low:
        return "run deploy.py: it installs the node driver's exact userspace into the container"
    if "found no nvidia driver" in low or "no nvidia driver" in low:
        return (
            f"run deploy.py: CT {vmid} needs libcuda.so.1 from the node driver's .run "
            "installer and /dev/nvidiactl passed through"
        )
    if "unknown error" in low or "999" in low:
        return (
            f"pass /dev/nvidia-uvm through to CT {vmid} (on the node: nvidia-modprobe -u -c 0), "
            "then run deploy.py"
        )
    return f"check the driver parity and the GPU passthrough of CT {vmid}: run deploy.py"
