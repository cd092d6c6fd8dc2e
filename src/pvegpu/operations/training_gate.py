"""The gate every change under a running training passes: which trainings run in the container
(:mod:`pvegpu.plan.running_training`), asked again before each disruptive step, and recording a
change that waits for them (one line each, and the node's summary line at the end of the run).

The answer comes from the node read that is current when the gate asks: the run's last read of
the node while no operation of the node's hosts has run since (a converged run and a swap back
pay nothing more), else a new read of the node and that container (one node command with one
``pct exec``), so a training started during the run's build, or a users' unit that came back
between restarts, is seen before the step. A read that fails is a training of unknown state.

.. code:: python

    trainers = running_here(host, vmid)  # a node operation's; running_here(host) a container's
    if others(trainers) and not policy.restart_training:
        wait_for(host, vmid, "the venv switch", others(trainers))
"""

from __future__ import annotations

from pyinfra import logger

from ..plan.running_training import Trainer, match_of, neighbours
from ..run import adoption, node_read
from ..run.run_context import run_context


def _node_and_vmid(host, vmid) -> tuple[str | None, int | None]:
    if vmid is not None:  # a node host's operation on one of its containers
        return host.name, vmid
    return host.data.get("pct_node"), host.data.get("pct_vmid")


def current_read(host, node: str, vmid: int) -> dict | None:
    """The node read that holds container ``vmid`` in full as of now: the run's last one when
    nothing ran since, else a new one (None: no node host, or the read failed)."""
    entry = node_read.last_read(host.state, node)
    if entry is not None and entry.request.ct_detail == "full" and vmid in entry.request.vmids:
        return entry.doc
    inventory = getattr(host, "inventory", None)
    node_host = inventory.get_host(node, None) if inventory is not None else None
    if node_host is None:
        return None
    args = run_context(host.state).node_args.get(node)
    return node_read.node_state(node_host, [vmid], "full", args) or None


def running_here(host, vmid=None, unit: str | None = None) -> list[Trainer]:
    """The trainings running in CT ``vmid`` (a node host's operation) or in ``host`` (a
    container host's), as of now (see the module's docstring); [] outside a run."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, vmid)
    if node is None or ct is None:
        return []
    settings = run_context(host.state).settings or {}
    s = settings.get(f"@pct/{node}/{ct}") or settings.get(node) or settings.get(host.name)
    if unit is None:
        unit = f"{s.training.unit_name}.service" if s is not None else ""
    match = match_of(s.training, s.python_env) if s is not None else None
    return adoption.running_in(node, ct, current_read(host, node, int(ct)), unit, match)


def neighbours_here(host, gpus) -> list[Trainer]:
    """GPU processes of other containers or of the node on the node GPUs ``gpus`` of ``host``'s
    container (a container host's operation), as of now (:func:`running_here`'s read)."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, None)
    if node is None or ct is None:
        return []
    return neighbours(int(ct), current_read(host, node, int(ct)) or {}, gpus)


def wait_for(host, vmid, change: str, trainers: list[Trainer]) -> None:
    """Record and print that ``change`` waits for the first of ``trainers`` (no command: a
    change that waits is no change, so the run stays converged)."""
    node, ct = _node_and_vmid(host, vmid)
    line = adoption.record_wait(host.state, node or host.name, ct, change, trainers[0])
    host.log_styled(line, fg="yellow", log_func=logger.warning)
