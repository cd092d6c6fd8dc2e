"""What a person reads (one table per container and a verdict line) and what a machine reads
(the JSON report of ``--data verify_report=<path>``), from a :class:`pvegpu.verification.Verdict`.

>>> from pvegpu.verification import Verdict
>>> v = Verdict("CT 200 on n1", rows=[{"gpu": 0, "node_gpu": 0, "name": "NVIDIA H200",
...     "total_mib": 143771, "free_mib": 143771, "role": "target", "status": "ok"}],
...     summary={"torch": "2.11.0+cu130", "cuda": "13.0", "device_count": 1,
...              "expected_gpu_count": 1, "driver_node": "580.95.05"})
>>> print("\\n".join(table(v)))  # doctest: +NORMALIZE_WHITESPACE
CT 200 on n1: torch 2.11.0+cu130, CUDA 13.0, driver 580.95.05 (node)
 GPU  node  name         total MiB  free MiB  role    status
   0     0  NVIDIA H200     143771    143771  target  ok
>>> verdict_line(v)
'VERIFIED CT 200 on n1: torch 2.11.0+cu130 sees 1/1 GPUs, driver 580.95.05 on node and container'
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..verification import Verdict
from ..verification.toolchain import toolchain_text
from ..verification.training_gpus import memory_sources
from ..version import VERSION

COLUMNS = [
    ("GPU", "gpu", ">"),
    ("node", "node_gpu", ">"),
    ("name", "name", "<"),
    ("total MiB", "total_mib", ">"),
    ("free MiB", "free_mib", ">"),
    ("role", "role", "<"),
    ("status", "status", "<"),
]


def _cell(value) -> str:
    return "-" if value is None or value == "" else str(value)


def header(v: Verdict) -> str:
    s = v.summary
    parts = [f"torch {s.get('torch') or 'missing'}"]
    if s.get("cuda"):
        parts.append(f"CUDA {s['cuda']}")
    if s.get("cudnn"):
        parts.append(f"cuDNN {s['cudnn']}")
    if s.get("nccl"):
        parts.append(f"NCCL {s['nccl']}")
    ctr = (s.get("driver_container") or {}).get("libcuda")
    if s.get("driver_node"):
        if not s.get("driver_container"):
            parts.append(f"driver {s['driver_node']} (node)")
        elif ctr == s["driver_node"]:
            parts.append(f"driver {s['driver_node']} (node = container)")
        else:
            parts.append(f"driver {s['driver_node']} (node), {ctr or 'none'} (container)")
    if s.get("venv"):
        real = s.get("venv_real")
        parts.append(f"venv {s['venv']}" + (f" -> {real}" if real and real != s["venv"] else ""))
    if s.get("toolchain"):
        parts.append(toolchain_text(s["toolchain"]))
    comp = s.get("compile")
    if comp and comp.get("seconds") is not None:
        parts.append(
            f"compile check {comp['seconds']} s on {len(comp.get('threads') or [])} threads"
        )
    return f"{v.where}: " + ", ".join(parts)


def table(v: Verdict) -> list[str]:
    """The header line and one line per GPU (container CUDA index and node index)."""
    rows = [[_cell(r.get(key)) for _, key, _ in COLUMNS] for r in v.rows]
    widths = [
        max([len(title)] + [len(r[n]) for r in rows]) for n, (title, _, _) in enumerate(COLUMNS)
    ]

    def fmt(cells):
        out = []
        for n, (cell, (_, _, align)) in enumerate(zip(cells, COLUMNS)):
            last = n == len(COLUMNS) - 1
            out.append(
                cell if last else (cell.rjust(widths[n]) if align == ">" else cell.ljust(widths[n]))
            )
        return " " + "  ".join(out).rstrip()

    return [header(v), fmt([t for t, _, _ in COLUMNS]), *(fmt(r) for r in rows), *memory_sources(v)]


def verdict_line(v: Verdict) -> str:
    s = v.summary
    if v.ok:
        line = (
            f"VERIFIED {v.where}: torch {s.get('torch')} sees {s.get('device_count')}/"
            f"{s.get('expected_gpu_count')} GPUs"
        )
        if s.get("target_gpus") is not None:
            line += f" ({len(s['target_gpus'])} target, {len(s.get('drafter_gpus') or [])} drafter)"
        if s.get("driver_node"):
            line += f", driver {s['driver_node']} on node and container"
        if s.get("packages"):
            line += f", venv = {s['packages']['basis']}"
        if (s.get("compile") or {}).get("ok"):
            line += ", concurrent torch.compile ok"
        return line
    n = len(v.problems)
    return f"NOT VERIFIED {v.where}: {n} problem{'s' if n != 1 else ''}"


def report_document(verdicts: dict[str, Verdict], settings: dict | None = None) -> dict:
    """The JSON report: overall verdict, pvegpu's version, then per host its verdict, problems,
    GPUs and facts."""
    return {
        "pvegpu_version": VERSION,
        "verdict": "pass" if all(v.ok for v in verdicts.values()) else "fail",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": settings or {},
        "hosts": {name: v.as_dict() for name, v in sorted(verdicts.items())},
    }


def write_report(path: str | os.PathLike, document: dict) -> Path:
    """Write the report atomically (temp file + rename) on the controller."""
    target = Path(path).expanduser()
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, target)
    return target
