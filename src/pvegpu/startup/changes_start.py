"""When a previewed deploy's changes start: the node's deploy lock, then its preflight again.

A preview (deploy.py without -y) and ``--dry`` (with -y too) change nothing, so they take no
lock and never wait behind a running deploy (:func:`pvegpu.startup.node_lock.lock_at_start`,
:func:`pvegpu.startup.node_lock.is_dry`). When the user goes
on, deploy.py's first operation (``fleet.node_ready``) calls :func:`changes_start` for each host:
the node's lock is taken then (waiting ``deploy_lock_wait_s`` for another deploy, as at a -y
run's start), and the node is read and preflighted again under it. What the preview read may be
stale by then (another deploy, a training started while the prompt was open), so nothing of it
is kept: the trainings, the changes that wait for them and the cached reads of the node and its
containers are read again. A -y run took the lock before its one read: nothing more happens.

.. code:: python

    problems = changes_start(host)  # in an operation's body, at execution
"""

from __future__ import annotations

from gevent.lock import Semaphore

from ..run.run_context import node_of_host, run_context
from .preflight import preflight_nodes


def changes_start(host) -> list[str]:
    """The problems of ``host``'s node now that changes start (empty: go on). In a run that
    previewed without the lock, the node's first host here takes the lock and preflights the
    node again; the node's other hosts wait for that and share its outcome."""
    state = host.state
    run = run_context(state)
    node = node_of_host(host)
    if not run.lock_deferred or run.node_failures.get(node) or run.dry:
        # a -y run, a node the preview refused, or --dry (with -y too: pyinfra generates the
        # operations for its plan, but no change starts, so it never waits for the lock)
        return run.node_failures.get(node, [])
    node_host = host.inventory.get_host(node, None)
    if node_host is None:
        return []
    with run.start_checks.setdefault(node, Semaphore()):
        if node not in run.node_locks and node not in run.node_failures:
            forget_node(run, node)
            inventory = NodeInventory(host.inventory, node)
            found = preflight_nodes(state, inventory, run.settings, [node_host], lock=True)
            run.node_failures[node] = [line for lines in found.values() for line in lines]
    return run.node_failures.get(node, [])


def forget_node(run, node: str) -> None:
    """Drop what this run read of ``node`` and its containers (the preview's reads)."""
    for key in [k for k in run.facts.entries if node_of_host(k[1]) == node]:
        del run.facts.entries[key]
    for key in [k for k in run.trainers if k[0] == node]:
        del run.trainers[key]
    run.waiting.pop(node, None)
    run.waiting_for.pop(node, None)


class NodeInventory:
    """An inventory's view of one node: its training containers only (the preflight of one node
    reads no other node)."""

    def __init__(self, inventory, node: str):
        self.inventory, self.node = inventory, node

    def get_host(self, name, default=None):
        return self.inventory.get_host(name, default)

    def get_group(self, name, default=None):
        hosts = self.inventory.get_group(name, default)
        if name != "training_cts" or hosts is None:
            return hosts
        return [h for h in hosts if h.data.get("pct_node") == self.node]
