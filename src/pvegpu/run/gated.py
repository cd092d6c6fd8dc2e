"""A disruptive change made by the very command that reads the container right before it.

The gates read a container again right before each disruptive step (a training started since the
run's last read must be seen), then make the step: two remote commands back to back (a node
read with its ``pct exec``, then the change's own ``pct exec``). A gated change is one: the node
read's exec into the container runs the change after its view, and only when the gates' check,
run on the node on that very read, finds no training the change must wait for
(:func:`pvegpu.plan.running_training.running_in_read`, the function the controller's gates ask;
its module and the modules it imports travel with the read, as the probes do: pvegpu is not
installed on the node). Between the read and the change nothing waits for the controller, so
the step follows its check sooner than before.

Fail closed: a check that cannot run on the node (an exception, a container view not read), an
exec that never reached its gate, a probe that ended before its word: nothing changes. The
controller then decides from the same read as before this existed (its own check on the
returned document), and makes the change as its own command only when that check is clear.

.. code:: python

    trainers, change = gated_change(host, "mv -T /root/venv.tmp /root/venv")
    if change and change["ran"]: ...  # made, right after the read: change["rc"], ["output"]
"""

from __future__ import annotations

import functools
from importlib import resources

from ..plan.running_training import Trainer
from ..plan.unit import RUNNING
from . import adoption, node_read
from .ct_reads import command_line
from .run_context import run_context

#: The check the node runs, and the modules of pvegpu.plan it imports (in that order).
CHECK = "pvegpu.plan.running_training"
MODULES = ("cgroup_origin", "process_tree", "starts_training", "running_training")
#: Constants of a module the check imports that is not sent (it needs jinja2).
STUBS = {"pvegpu.plan.unit": {"RUNNING": list(RUNNING)}}


@functools.cache
def check_bundle() -> dict:
    """What the node probe loads to run the check (probes/ct_gate.py ``check_module``)."""
    plan = resources.files("pvegpu.plan")
    return {
        "packages": ["pvegpu", "pvegpu.plan"],
        "stubs": STUBS,
        "modules": [[f"pvegpu.plan.{n}", plan.joinpath(f"{n}.py").read_text()] for n in MODULES],
        "check": CHECK,
    }


def gated_change(
    ct_host, command: str, unit: str, match: dict | None
) -> tuple[list[Trainer] | None, dict | None]:
    """Read ``ct_host``'s container again (its node, in full) and, in the same command, run
    ``command`` in it when no training runs there that the change must wait for (``unit``:
    pvegpu's training unit, ``match``: :func:`pvegpu.plan.running_training.match_of`).

    Returns (the trainings the controller's own check finds on that read, the change's outcome:
    ``ran``, ``rc``, ``output``, ``clear``, ``check_error``; None when it was not sent: no node
    host, a command that must run through the connector), or (None, None) when nothing was read
    (the caller gates as before)."""
    node, vmid = ct_host.data.get("pct_node"), ct_host.data.get("pct_vmid")
    inventory = getattr(ct_host, "inventory", None)
    node_host = inventory.get_host(node, None) if inventory is not None and node else None
    line = command_line(ct_host, command) if node_host is not None else None
    if node_host is None or line is None or vmid is None:
        return None, None
    act = {
        "changes": {str(vmid): {"line": line, "unit": unit, "match": match}},
        "check": check_bundle(),
    }
    args = run_context(ct_host.state).node_args.get(node)
    doc = node_read.node_state(node_host, [int(vmid)], "full", args, act=act) or None
    trainers = adoption.running_in(node, vmid, doc, unit, match)
    entry = ((doc or {}).get("containers") or {}).get(str(vmid)) or {}
    return trainers, entry.get("change")
