"""One table row per CUDA device torch sees: its node GPU (by UUID), model, memory and whether the
build's arch list runs it; then the rows of training GPUs torch lacks and of node GPUs it does
not show.

>>> arch_covers("9.0", ["sm_80", "sm_90"]), arch_covers("8.6", ["sm_80"])
('sm_90', 'sm_80')
"""

from __future__ import annotations

import re

from ..facts.gpus import normalize_uuid
from .inputs import Inputs
from .training_gpus import FROM_SMI, context_free, held_reason
from .verdict import Problem, Verdict

#: Relative difference tolerated between torch's and nvidia-smi's total memory of one GPU
#: (cudaDeviceProp.totalGlobalMem and NVML's memory.total can differ by reserved memory).
MEMORY_TOLERANCE = 0.02


def arch_covers(capability: str | None, arch_list: list[str]) -> str | None:
    """How a build's arch list runs a GPU of ``capability`` ("9.0"): ``sm_90`` (exact), ``sm_80``
    (a cubin of the same major and a lower or equal minor runs: CUDA C++ Programming Guide,
    "Binary Compatibility"), ``compute_80`` (PTX of an equal or lower capability, JIT-compiled),
    or None. Arch-specific cubins (``sm_90a``) run only on exactly that capability.

    >>> arch_covers("9.0", ["sm_80", "sm_90"]), arch_covers("8.6", ["sm_80"])
    ('sm_90', 'sm_80')
    >>> arch_covers("12.0", ["sm_90", "sm_100"]) is None
    True
    """
    if not capability or not re.fullmatch(r"\d+\.\d+", capability):
        return None
    major, minor = (int(x) for x in capability.split("."))
    best = None
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch)
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "sm":
            if (a_major, a_minor) == (major, minor):
                return arch
            if not suffix and a_major == major and a_minor < minor and best is None:
                best = arch
        elif not suffix and (a_major, a_minor) <= (major, minor) and best is None:
            best = arch
    return best


def arch_list_of(f: Inputs) -> list[str]:
    """The CUDA archs the venv's torch build carries (``torch.cuda.get_arch_list()``)."""
    return list((f.runtime or {}).get("arch_list") or [])


def check_gpu_rows(v: Verdict, f: Inputs) -> None:
    """Each CUDA device is readable, is a node GPU (by UUID) of the same model and memory, and
    the build runs its compute capability; each gets a row of the table."""
    arch_list = arch_list_of(f)
    for d in f.devices:
        i: int = d["index"]  # torch_inner numbers every device it lists
        g = f.by_uuid.get(normalize_uuid(d.get("uuid")))
        if d.get("error"):
            v.problems.append(
                Problem(
                    f"GPU {i}",
                    "its properties readable by torch",
                    d["error"],
                    "check the GPU on the node (nvidia-smi -q) and its passthrough",
                    gpu=i,
                )
            )
            v.note(i, "unreadable")
        if f.node.get("gpus") is not None and g is None:
            v.problems.append(
                Problem(
                    f"GPU {i} identity",
                    "a UUID the node's nvidia-smi lists",
                    f"{d.get('uuid') or 'no UUID'}",
                    "check the passthrough maps the node's GPUs (pct config; run deploy.py)",
                    gpu=i,
                )
            )
            v.note(i, "unknown to node")
        elif g is not None:
            _check_same_gpu(v, i, d, g)
        _check_arch(v, i, d.get("capability"), arch_list)
        row = _device_row(d, g, f.role_of.get(i, "-"))
        if context_free(d):  # in use: the probe made no context there
            row["free_mib"], row["memory_from"] = smi_free_mib(f, d, g), FROM_SMI
            row["no_context_why"] = held_reason(f.ct, d.get("uuid"))
        v.rows.append(row)


def smi_free_mib(f: Inputs, d: dict, g: dict | None) -> int | None:
    """Free memory of CUDA device ``d`` by nvidia-smi (memory.free is device-wide): the
    container's own row of its UUID, else the node's GPU ``g``; None when neither says.

    >>> f = Inputs(None, {}, {"gpus": [{"uuid": "GPU-AB", "memory_free_mib": 7}]}, vmid=200)
    >>> smi_free_mib(f, {"uuid": "gpu-ab"}, {"memory_free_mib": 9}), smi_free_mib(f, {}, None)
    (7, None)
    """
    uuid = normalize_uuid(d.get("uuid"))
    for row in (f.ct or {}).get("gpus") or []:
        if (
            uuid
            and normalize_uuid(row.get("uuid")) == uuid
            and row.get("memory_free_mib") is not None
        ):
            return row["memory_free_mib"]
    return (g or {}).get("memory_free_mib")


def _check_same_gpu(v: Verdict, i: int, d: dict, g: dict) -> None:
    """CUDA device ``d`` and node GPU ``g`` (same UUID) agree on model and total memory."""
    if g.get("name") and d.get("name") and g["name"] != d["name"]:
        v.problems.append(
            Problem(
                f"GPU {i} model",
                f"{g['name']} (node GPU {g['index']})",
                d["name"],
                "check which GPU is passed through (pct config)",
                gpu=i,
            )
        )
        v.note(i, "model differs")
    tot, node_tot = d.get("total_mib"), g.get("memory_total_mib")
    if tot and node_tot and abs(tot - node_tot) > MEMORY_TOLERANCE * node_tot:
        v.problems.append(
            Problem(
                f"GPU {i} memory",
                f"{node_tot} MiB total (node GPU {g['index']})",
                f"{tot} MiB in torch",
                "check the GPU (MIG mode? nvidia-smi -q on the node)",
                gpu=i,
            )
        )
        v.note(i, "memory differs")


def _check_arch(v: Verdict, i: int, cap: str | None, arch_list: list[str]) -> None:
    """The build's arch list runs compute capability ``cap`` (see :func:`arch_covers`)."""
    if cap and arch_list and arch_covers(cap, arch_list) is None:
        v.problems.append(
            Problem(
                f"GPU {i} arch",
                f"sm_{cap.replace('.', '')} in the build's arch list",
                f"{' '.join(arch_list)} for compute capability {cap}",
                "choose a torch_variant built for this GPU",
                gpu=i,
            )
        )
        v.note(i, f"sm_{cap.replace('.', '')} unsupported")


def _device_row(d: dict, g: dict | None, role: str) -> dict:
    """The table row of CUDA device ``d`` (its node GPU ``g``, if known); status comes last."""
    return {
        "gpu": d["index"],
        "node_gpu": g.get("index") if g else None,
        "name": d.get("name"),
        "uuid": d.get("uuid"),
        "total_mib": d.get("total_mib"),
        "free_mib": d.get("free_mib"),
        "capability": d.get("capability"),
        "role": role,
    }


def finish_rows(v: Verdict, f: Inputs) -> None:
    """Each row's status (its notes, else ``problem`` or ``ok``), then a row for each training GPU
    torch lacks and for each node GPU it does not show."""
    problems_by_gpu = {p.gpu for p in v.problems if p.gpu is not None}
    for row in v.rows:
        row["status"] = "; ".join(v.notes.get(row["gpu"], [])) or (
            "problem" if row["gpu"] in problems_by_gpu else "ok"
        )
    for i in sorted(f.role_of):
        if i not in {r["gpu"] for r in v.rows} and f.available:
            v.rows.append(_missing_row(i, f.role_of[i]))
    matched = {f.by_uuid[u].get("index") for u in _device_uuids(f) if u in f.by_uuid}
    for g in f.node.get("gpus") or []:
        if not f.available:
            v.rows.append(_node_only_row(g, "not visible (CUDA unavailable)"))
        elif g.get("index") not in matched:
            notes_here = v.node_notes.get(g.get("index"), [])
            v.rows.append(_node_only_row(g, "; ".join(["not passed through", *notes_here])))


def _device_uuids(f: Inputs) -> list[str | None]:
    return [normalize_uuid(d.get("uuid")) for d in f.devices]


def _missing_row(i: int, role: str) -> dict:
    """A table row for a training GPU torch does not show."""
    return {
        "gpu": i,
        "node_gpu": None,
        "name": None,
        "uuid": None,
        "total_mib": None,
        "free_mib": None,
        "capability": None,
        "role": role,
        "status": "missing",
    }


def _node_only_row(g: dict, status: str) -> dict:
    """A table row for a node GPU the container's torch does not show."""
    return {
        "gpu": None,
        "node_gpu": g.get("index"),
        "name": g.get("name"),
        "uuid": g.get("uuid"),
        "total_mib": g.get("memory_total_mib"),
        "free_mib": None,
        "capability": None,
        "role": "-",
        "status": status,
    }
