"""The validated settings of the host a deploy file is running for, and its node's outcome.

>>> callable(settings), node_of_name("@pct/10.1.2.6/200", {"pct_node": "10.1.2.6"})
(True, '10.1.2.6')
"""

from __future__ import annotations

from .preflight import check_fleet
from .settings import Settings
from .summary import node_failures


def settings(host) -> Settings:
    """Settings of ``host``, after the fleet-wide preflight has passed (run once per run)."""
    return check_fleet(host.state, host.inventory)[host.name]


def node_of_name(name: str, data) -> str:
    """The node a host belongs to: itself for a node, ``pct_node`` for a container."""
    return data.get("pct_node") or name


def node_problems(host) -> list[str]:
    """Why ``host``'s node must not be touched in this run (empty: go on)."""
    check_fleet(host.state, host.inventory)
    return node_failures(host.state).get(node_of_name(host.name, host.data), [])
