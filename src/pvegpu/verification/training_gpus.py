"""Verification beside a running training: which GPUs a training of this container holds, and
where each GPU's figures came from.

A CUDA context costs device memory (docs/real-tools.md, "CUDA contexts"), so the container's
torch probe makes none on a GPU a training holds: name, total memory and capability come from
``cudaGetDeviceProperties`` (no context), free memory from nvidia-smi. The probe decides inside
the container, before its first CUDA call (``probes/training_held.py``: a training runs there and
the GPU has memory in use), since the node's compute-apps list is read beside it, not before.
:func:`held_by_training` asks the same question of the node's list (by cgroup:
:func:`pvegpu.verification.processes.process_owner`), for a caller that has the node's read
before the container's (not verify's reads today, which run side by side).

>>> held_by_training([{"gpu_uuid": "GPU-AB", "cgroup": "0::/lxc/200/ns/system.slice/t.service"},
...                   {"gpu_uuid": "GPU-CD", "cgroup": "0::/lxc/201/ns/user.slice"}], 200,
...                  "t.service")
{'ab'}
"""

from __future__ import annotations

from ..facts.gpus import normalize_uuid
from .processes import is_own_probe, process_owner
from .verdict import Verdict

#: Where a row's free memory came from (the JSON report's ``memory_from``; rows without it:
#: torch.cuda.mem_get_info, in a CUDA context of the probe).
FROM_SMI = "nvidia-smi (no CUDA context: the GPU is in use, or its use could not be read)"


def held_by_training(compute_apps: list[dict], vmid: int, unit: str | None) -> set[str]:
    """Node GPUs (normalized UUIDs) on which the node's compute-apps list shows a process of
    container ``vmid``: its training unit's, or any other of its processes (pvegpu's own marked
    torch probe excepted). The one place that decides it on the controller; a wider notion of a
    running training can replace it.

    >>> held_by_training([{"gpu_uuid": "GPU-AB", "cgroup": "0::/lxc/200/ns/init.scope"}], 200,
    ...                  None)
    {'ab'}
    >>> held_by_training([{"gpu_uuid": "GPU-AB"}], 200, None)  # a process of the node
    set()
    """
    held = set()
    for app in compute_apps:
        if process_owner(app, vmid, unit) not in ("unit", "container"):
            continue
        if is_own_probe(app, vmid, unit):
            continue
        u = normalize_uuid(app.get("gpu_uuid"))
        if u:
            held.add(u)
    return held


def context_free(device: dict) -> bool:
    """The probe made no CUDA context on this device (a training holds it)."""
    return device.get("context") is False


def held_reason(ct: dict | None, uuid: str | None) -> str:
    """Why the probe made no CUDA context on the GPU ``uuid`` (its ``held_why``), for the report.

    >>> held_reason({"beside_training": {"held_why": {"ab": "2000 MiB in use"}}}, "GPU-AB")
    '2000 MiB in use'
    >>> held_reason({"beside_training": {"held_why": {"*": "nvidia-smi failed"}}}, "GPU-AB")
    'nvidia-smi failed'
    """
    why = ((ct or {}).get("beside_training") or {}).get("held_why") or {}
    u = normalize_uuid(uuid)
    return why.get(u or "") or why.get("*") or "not reported by nvidia-smi in the container"


def memory_sources(v: Verdict) -> list[str]:
    """The table's footnote: which GPUs' free memory came from nvidia-smi rather than torch,
    and why the probe made no CUDA context there (one line per GPU)."""
    smi = [r for r in v.rows if r.get("memory_from") == FROM_SMI]
    if not smi:
        return []
    lines = [
        f" GPU {', '.join(str(r['gpu']) for r in smi)}: free MiB from nvidia-smi, "
        "name/total/capability from cudaGetDeviceProperties; no CUDA context made:"
    ]
    lines += [f"   GPU {r['gpu']}: {r.get('no_context_why') or 'in use'}" for r in smi]
    return lines
