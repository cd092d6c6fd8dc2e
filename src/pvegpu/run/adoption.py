"""The trainings running in each container, from the node read every gate is given, and the
changes that wait for them (:mod:`pvegpu.plan.running_training`): every gate asks here, the
summary reports here.

Nothing is kept between reads: each gate decides from the node read that is current when it
asks (pvegpu.operations.training_gate reads the node again when any operation ran since).

.. code:: python

    trainers = running_in("pve1", 200, node_doc, "dflash-train.service", match)
    if others(trainers) and not restart_training:
        record_wait(state, "pve1", 200, "the venv switch", others(trainers)[0])
"""

from __future__ import annotations

from ..plan.running_training import Trainer, running_in_read, waiting_line
from .run_context import run_context


def running_in(node: str, vmid, doc: dict | None, unit: str, match: dict | None) -> list:
    """The trainings running in CT ``vmid`` of ``node`` by the node read ``doc`` (None or a read
    that failed: one training of unknown state, see :func:`running_in_read`)."""
    return running_in_read(vmid, doc, unit, match)


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
