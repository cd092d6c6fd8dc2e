"""The trainings running in each container, read once per run, and the changes that wait for
them (:mod:`pvegpu.plan.running_training`): every gate asks here, the summary reports here.

.. code:: python

    trainers = running_in(state, "pve1", 200, node_doc, "dflash-train.service")
    if others(trainers) and not restart_training:
        record_wait(state, "pve1", 200, "the venv switch", others(trainers)[0])
"""

from __future__ import annotations

from ..plan.running_training import Trainer, running_training, waiting_line
from .run_context import run_context


def running_in(state, node: str, vmid, doc: dict | None, unit: str) -> list[Trainer]:
    """The trainings running in CT ``vmid`` of ``node``: from the run's first full read of the
    node (``doc``, when none was kept yet; None: only what was kept, else [])."""
    trainers = run_context(state).trainers
    key = (node, int(vmid))
    if key not in trainers and doc:
        ct = (doc.get("containers") or {}).get(str(vmid)) or {}
        if ct.get("live") is None and ct.get("status") == "running":
            return []  # the container's view could not be read: not kept, asked again
        trainers[key] = running_training(int(vmid), ct, doc, unit)
    return trainers.get(key, [])


def forget(state, node: str, vmid) -> None:
    """After a takeover stopped the trainings: the next gate reads again."""
    run_context(state).trainers.pop((node, int(vmid)), None)


def record_wait(state, node: str, vmid, change: str, trainer: Trainer) -> str:
    """Record that ``change`` waits for ``trainer`` (once per change and node): -> its line."""
    run = run_context(state)
    line = waiting_line(int(vmid), change, trainer)
    lines = run.waiting.setdefault(node, [])
    if line not in lines:
        lines.append(line)
    run.waiting_for.setdefault(node, trainer)
    return line


def waiting(state, node: str) -> tuple[list[str], Trainer | None]:
    """(the lines of the changes that wait on ``node``, the training they wait for)."""
    run = run_context(state)
    return run.waiting.get(node, []), run.waiting_for.get(node)
