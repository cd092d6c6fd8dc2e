"""The gate every change under a running training passes (issue: first contact with a node that
already trains): which trainings run in the container (:mod:`pvegpu.run.adoption`, read once per
run with the node read), and recording a change that waits for them (one line each, and the
node's summary line at the end of the run).

.. code:: python

    trainers = running_here(host, vmid)  # a node operation's; running_here(host) a container's
    if others(trainers) and not policy.restart_training:
        wait_for(host, vmid, "the venv switch", others(trainers))
"""

from __future__ import annotations

from pyinfra import logger

from ..plan.running_training import Trainer
from ..run import adoption, node_read
from ..run.run_context import run_context


def _node_and_vmid(host, vmid) -> tuple[str | None, int | None]:
    if vmid is not None:  # a node host's operation on one of its containers
        return host.name, vmid
    return host.data.get("pct_node"), host.data.get("pct_vmid")


def running_here(host, vmid=None, unit: str | None = None) -> list[Trainer]:
    """The trainings running in CT ``vmid`` (a node host's operation) or in ``host`` (a
    container host's), from the run's first full read of the node (the preflight's); [] outside
    a run."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, vmid)
    if node is None or ct is None:
        return []
    entry = node_read.last_read(host.state, node)
    doc = entry.doc if entry is not None and entry.request.ct_detail == "full" else None
    if unit is None:
        settings = run_context(host.state).settings or {}
        s = settings.get(node) or settings.get(host.name)
        unit = f"{s.training.unit_name}.service" if s is not None else ""
    return adoption.running_in(host.state, node, ct, doc, unit)


def wait_for(host, vmid, change: str, trainers: list[Trainer]) -> None:
    """Record and print that ``change`` waits for the first of ``trainers`` (no command: a
    change that waits is no change, so the run stays converged)."""
    node, ct = _node_and_vmid(host, vmid)
    line = adoption.record_wait(host.state, node or host.name, ct, change, trainers[0])
    host.log_styled(line, fg="yellow", log_func=logger.warning)
