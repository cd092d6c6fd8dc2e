"""The container reads the preflight folds into its read of a node (see :mod:`pvegpu.run.ct_reads`):
the operations' own first reads of each training container, with their own arguments.

.. code:: python

    ct_reads = preflight_reads(inventory, settings, node_host.name, vmids)
    node_read.node_state(node_host, vmids, "full", node_read_args(s), paths, ct_reads)
"""

from __future__ import annotations

from pyinfra.api import FactBase

from ..facts.python_env import ContainerState
from ..facts.verification import ContainerVerification
from ..run.ct_reads import folded_commands, within_budget
from ..run.run_context import run_context
from .checks import verification_args
from .container_fact import container_state_args


def preflight_reads(inventory, settings: dict, node_name: str, vmids) -> dict[str, list[str]]:
    """{vmid: [shell line, ...]}: what the preflight folds into its read of ``node_name``, for
    each training container there: its ``ContainerState`` and, unless ``verify_level=compile``
    (which may run for minutes), its ``ContainerVerification``."""
    wanted = {str(v) for v in vmids}
    found: dict[str, list[str]] = {}
    for ct_host in inventory.get_group("training_cts", []):
        vmid = str(ct_host.data.get("pct_vmid"))
        if ct_host.data.get("pct_node") != node_name or vmid not in wanted:
            continue
        s = settings[ct_host.name]
        reads = [(ContainerState, container_state_args(s)), *verification_reads(s)]
        found[vmid] = folded_commands(ct_host, reads)
    return within_budget(found)


def state_reads_of(node_host, vmids) -> dict[str, list[str]]:
    """{vmid: [shell line]}: each training container's ``ContainerState`` read, to fold into a
    read of ``node_host`` made during the run (its containers' next operation reads it first
    when no operation ran since: a cold deploy's first container read)."""
    settings = run_context(node_host.state).settings or {}
    wanted, found = {str(v) for v in vmids}, {}
    for ct_host in node_host.inventory.get_group("training_cts", []):
        vmid, s = str(ct_host.data.get("pct_vmid")), settings.get(ct_host.name)
        if ct_host.data.get("pct_node") == node_host.name and vmid in wanted and s is not None:
            found[vmid] = folded_commands(ct_host, [(ContainerState, container_state_args(s))])
    return within_budget(found)


def verification_reads_of(ct_host) -> list[tuple[type[FactBase], dict]]:
    """``verification_reads`` with ``ct_host``'s settings in this run (none outside a run)."""
    state = getattr(ct_host, "state", None)
    if state is None:
        return []
    return verification_reads((run_context(state).settings or {}).get(ct_host.name))


def verification_reads(settings) -> list[tuple[type[FactBase], dict]]:
    """The verify stage's read of a training container, to fold into a command that runs anyway
    (none with ``verify_level=compile``: its check may run for minutes)."""
    if settings is None or settings.verification.level == "compile":
        return []
    return [(ContainerVerification, verification_args(settings))]
