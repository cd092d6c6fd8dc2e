"""Per-node outcome of a fleet run: a node that failed its preflight (or whose deploy lock is
held) stops only its own hosts; the others go on. See pvegpu.startup.preflight.check_fleet."""

from __future__ import annotations

from pyinfra.api import operation

from .util import fail


@operation()
def node_ready(problems: list[str]):
    """Fail this host, changing nothing, when its node failed the preflight; else nothing.

    .. code:: python

        fleet.node_ready(name="Preflight of 127.0.0.1 passed", problems=[])
    """
    if problems:
        # The lines themselves were printed once when the run was prepared (also in a preview).
        yield fail(
            f"preflight failed ({len(problems)} problem(s) printed above): nothing was "
            "changed on this node or its containers"
        )
