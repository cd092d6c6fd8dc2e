"""Per-node outcome of a fleet run: a node that failed its preflight (or whose deploy lock is
held) stops only its own hosts; the others go on (see pvegpu.startup.preflight.check_fleet). The
run's last operation makes the exit status match each node's closing line
(:mod:`pvegpu.output.outcome`)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from ..output.outcome import decide, ok
from ..output.summary import node_run
from ..run.run_context import run_context
from .util import fail


@operation()
def node_ready(problems: list[str], at_start=None):
    """Fail this host, changing nothing, when its node failed the preflight; else nothing.
    ``at_start(host)``: the node's problems when changes start (a previewed run takes the node's
    deploy lock then and preflights it again: :mod:`pvegpu.startup.changes_start`).

    .. code:: python

        fleet.node_ready(name="Preflight of 127.0.0.1 passed", problems=[])
    """
    if at_start is not None and host.state.is_executing:
        problems = at_start(host)
    if not problems:
        return
    if not host.state.is_executing:
        # a preview: the lines were printed when the run was prepared; a failed check is not
        # a change to make (yielding would list it among the changes)
        host.log_styled("preflight failed: nothing will be changed here", fg="red")
        return
    yield fail(
        f"preflight failed ({len(problems)} problem(s) printed above): nothing was "
        "changed on this node or its containers"
    )


@operation()
def node_outcome():
    """On a node host, at the end of a deploy: fail it when its closing line is one a run may
    not exit 0 with (a container not verified because it was left out of the run, say) and no
    host of the node failed already. Changes nothing; a preview decides nothing.

    .. code:: python

        fleet.node_outcome(name="Every container of this node verified in this run")
    """
    state = host.state
    recorder = run_context(state).summary
    if not state.is_executing or "pve_hosts" not in host.groups or recorder is None:
        return
    r = node_run(state, host, recorder)
    name, line = decide(r)
    mine = {host.name, *r.containers}
    if not ok(name) and not any(h.name in mine for h in state.failed_hosts):
        run_context(state).failed_for_outcome.add(host.name)
        yield fail(line.split(": ", 2)[2])  # without "pvegpu: <node>: ", which the summary says
