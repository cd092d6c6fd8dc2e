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

from ..plan.adoption import boot_starters
from ..plan.running_training import TRAINING, Trainer, match_of, neighbours
from ..run import adoption, gated, node_read
from ..run.run_context import run_context


def _node_and_vmid(host, vmid) -> tuple[str | None, int | None]:
    if vmid is not None:  # a node host's operation on one of its containers
        return host.name, vmid
    return host.data.get("pct_node"), host.data.get("pct_vmid")


def current_read(host, node: str, vmid: int, fresh: bool = False) -> dict | None:
    """The node read that holds container ``vmid`` in full as of now: the run's last one when
    nothing ran since (``fresh``: never), else a new one (None: no node host, or the read
    failed)."""
    entry = node_read.last_read(host.state, node)
    full = entry is not None and entry.request.ct_detail == "full"
    if not fresh and full and vmid in entry.request.vmids:  # type: ignore[union-attr]
        return entry.doc  # type: ignore[union-attr]
    inventory = getattr(host, "inventory", None)
    node_host = inventory.get_host(node, None) if inventory is not None else None
    if node_host is None:
        return None
    args = run_context(host.state).node_args.get(node)
    return node_read.node_state(node_host, [vmid], "full", args, fresh=fresh) or None


def running_here(host, vmid=None, unit: str | None = None, fresh: bool = False) -> list[Trainer]:
    """The trainings running in CT ``vmid`` (a node host's operation) or in ``host`` (a
    container host's), as of now (see the module's docstring; ``fresh``: read again whatever
    the cache holds); [] outside a run."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, vmid)
    if node is None or ct is None:
        return []
    unit, match = gate_args(host, node, ct, unit)
    return adoption.running_in(node, ct, current_read(host, node, int(ct), fresh), unit, match)


def gate_args(host, node: str, ct, unit: str | None = None) -> tuple[str, dict | None]:
    """(pvegpu's training unit, what identifies a training: ``match_of``) of CT ``ct`` on
    ``node`` by this run's settings: what every gate's check of that container is given."""
    settings = run_context(host.state).settings or {}
    s = settings.get(f"@pct/{node}/{ct}") or settings.get(node) or settings.get(host.name)
    if unit is None:
        unit = f"{s.training.unit_name}.service" if s is not None else ""
    return unit, match_of(s.training, s.python_env) if s is not None else None


def change_when_clear(host, command: str, unit: str) -> tuple[list[Trainer], dict | None]:
    """A container host's disruptive ``command``, made by the command that reads the container
    right before it when nothing its gate waits for runs (:mod:`pvegpu.run.gated`): (the
    trainings running there by that read, the change's outcome, None when it was not sent:
    then the caller's own command makes it, after that read, as before). Outside execution
    (a preview, ``--dry``): the gate's read alone, nothing changed."""
    run = run_context(host.state)
    node, ct = _node_and_vmid(host, None)
    if host.state.is_executing and not run.dry and node is not None:
        trainers, change = gated.gated_change(host, command, *gate_args(host, node, ct, unit))
        if trainers is not None:
            return trainers, change
    return running_here(host, unit=unit, fresh=True), None


def neighbours_here(host, gpus) -> list[Trainer]:
    """GPU processes of other containers or of the node on the node GPUs ``gpus`` of ``host``'s
    container (a container host's operation), as of now (:func:`running_here`'s read)."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, None)
    if node is None or ct is None:
        return []
    return neighbours(int(ct), current_read(host, node, int(ct)) or {}, gpus)


def boot_starters_here(host, unit: str) -> list[str]:
    """What would start a training at boot in ``host``'s container besides pvegpu's ``unit``
    (an enabled unit or timer, an @reboot cron line), as of now."""
    if getattr(host, "state", None) is None:
        return []
    node, ct = _node_and_vmid(host, None)
    if node is None or ct is None:
        return []
    doc = current_read(host, node, int(ct)) or {}
    entry = (doc.get("containers") or {}).get(str(ct)) or {}
    s = (run_context(host.state).settings or {}).get(host.name)
    match = match_of(s.training, s.python_env) if s is not None else {}
    return boot_starters(entry, match, unit)


def wait_for(host, vmid, change: str, trainers: list[Trainer], consent: bool = False) -> None:
    """Record and print that ``change`` waits for the first of ``trainers`` (no command: a
    change that waits is no change, so the run stays converged). With ``consent``
    (restart_training=true) and only trainings to wait for, it is deferred instead: the takeover
    stops them once the new build is verified, and the change is applied after it in this run
    (nothing recorded for the summary); once the node's takeover has run, none follows, and the
    change waits like any other."""
    node, ct = _node_and_vmid(host, vmid)
    ran = run_context(host.state).takeover_ran if getattr(host, "state", None) else set()
    after = (node or host.name) in ran  # the node's takeover has run: none follows
    if consent and all(t.kind == TRAINING for t in trainers) and not after:
        t = trainers[0]
        line = (
            f"CT {ct}: {change} is deferred until {t.what} ({t.named}) is taken over "
            "(restart_training=true: once the new build is verified, in this run)"
        )
        host.log_styled(line, fg="yellow", log_func=logger.warning)
        return
    line = adoption.record_wait(host.state, node or host.name, ct, change, trainers[0])
    host.log_styled(line, fg="yellow", log_func=logger.warning)
