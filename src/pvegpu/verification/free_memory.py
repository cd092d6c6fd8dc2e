"""Each training GPU has ``min_free_gpu_mib`` free, counting the memory of the training's own
processes (:func:`pvegpu.verification.processes.counts_as_own`) as free.

>>> from pvegpu.settings import Settings, defaults
>>> f = Inputs(Settings.from_data(defaults()), {}, {}, vmid=200)
>>> v = Verdict("CT 200 on n1")
>>> v.rows.append({"gpu": 0, "uuid": "GPU-A", "free_mib": 100})
>>> check_free_memory(v, f)
>>> v.problems[0].found
'100 MiB free'
"""

from __future__ import annotations

from ..facts.gpus import normalize_uuid
from .inputs import Inputs
from .processes import own_memory
from .verdict import Problem, Verdict


def check_free_memory(v: Verdict, f: Inputs) -> None:
    """Free memory of each training GPU's row (after :func:`check_gpu_rows`) is enough."""
    own_used = own_memory(f)
    needed = f.settings.min_free_gpu_mib
    for row in v.rows:
        i = row["gpu"]
        if i not in f.role_of or row["free_mib"] is None:
            continue
        usable = row["free_mib"] + own_used.get(normalize_uuid(row["uuid"]), 0)
        if usable < needed:
            v.problems.append(
                Problem(
                    f"GPU {i} ({f.role_of[i]}) memory",
                    f">= {needed} MiB free (min_free_gpu_mib)",
                    f"{row['free_mib']} MiB free",
                    "free the GPU (see its compute processes: nvidia-smi on the node)",
                    gpu=i,
                )
            )
            v.note(i, "low free memory")
