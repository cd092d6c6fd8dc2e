"""The one entry point of deploy.py and verify.py (``begin``), and what their tasks ask the run:
the settings of the host a deploy file runs for, and its node's preflight outcome.

>>> callable(begin), node_of_name("@pct/10.1.2.6/200", {"pct_node": "10.1.2.6"})
(True, '10.1.2.6')
"""

from __future__ import annotations

import sys

from ..output.summary import node_failures
from ..run.run_context import run_context
from ..settings import Settings
from . import interrupt, pyinfra_per_operation
from .preflight import check_fleet, validate_fleet
from .stack_files import deploy_files, register_deploy_files

MODES = ("deploy", "verify")


def begin(host, mode: str = "deploy") -> Settings:
    """Start (or join) this run as ``mode`` and return ``host``'s settings. Every host's settings
    are validated first, once per run; a deploy also takes each node's deploy lock and
    preflights it (``preflight.check_fleet``); a verify changes nothing and prints its verdict in
    the preview too (without -y)."""
    # the calling deploy file and its tasks: pyinfra's stack walk per operation skips module scans
    register_deploy_files(deploy_files(sys._getframe(1).f_code.co_filename))
    pyinfra_per_operation.install()
    return _begin(host, mode)


def _begin(host, mode: str) -> Settings:
    assert mode in MODES, mode
    run = run_context(host.state)
    run.mode = mode
    if mode == "verify":
        return validate_fleet(host.state, host.inventory)[host.name]
    interrupt.install(host.state)  # a deploy cut short ends with a true line, 130 or 143
    return check_fleet(host.state, host.inventory)[host.name]


def settings(host) -> Settings:
    """Settings of ``host`` in this run (a run not begun yet begins as a deploy)."""
    run = run_context(host.state)
    if run.settings is None:
        return _begin(host, "deploy")
    return run.settings[host.name]


def container_settings(node_host, vmid) -> Settings:
    """Settings of the node's training container ``vmid`` in this run: its own host's (a fleet
    file's ``containers:`` entry may give it its own), else the node's (no such host in the run).
    """
    node = settings(node_host)
    own = (run_context(node_host.state).settings or {}).get(f"@pct/{node_host.name}/{vmid}")
    return own or node


def node_of_name(name: str, data) -> str:
    """The node a host belongs to: itself for a node, ``pct_node`` for a container."""
    return data.get("pct_node") or name


def node_problems(host) -> list[str]:
    """Why ``host``'s node must not be touched in this run (empty: go on)."""
    check_fleet(host.state, host.inventory)
    return node_failures(host.state).get(node_of_name(host.name, host.data), [])
