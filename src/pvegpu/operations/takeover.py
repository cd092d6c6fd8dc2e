"""The takeover of a training pvegpu did not start, with ``restart_training=true`` only, before
any other change to its container (issue: first contact with a node that already trains):

1. a users' own unit: `systemctl stop` (systemd honours the unit's own TimeoutStopSec), then
   `systemctl disable`, named in the output, so the next boot cannot start two trainers;
2. a training started by hand: SIGTERM to its process group, up to ``training_stop_timeout_s``
   (the same value as pvegpu's unit's TimeoutStopSec) for its checkpoint, then SIGKILL;

then the container stage's waiting changes, the venv switch and pvegpu's unit start go ahead.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..plan.running_training import HAND, other_units, others, stop_by_hand_script
from ..plan.unit import unit_file
from ..settings import RunPolicy, TrainingSettings
from .progress import unit_stop_detail, waiting_for, with_progress
from .training import LEFTOVER_LOG
from .training_gate import running_here
from .util import note


@operation()
def training_taken_over(vmid: int, policy: RunPolicy, training: TrainingSettings):
    """Stop (gracefully) and retire every training in CT ``vmid`` that pvegpu's unit did not
    start, when ``policy.restart_training``; nothing otherwise (the changes wait, see
    :mod:`pvegpu.operations.training_gate`).

    .. code:: python

        takeover.training_taken_over(name="Take over CT 200's training", vmid=200,
                                     policy=s.policy, training=s.training)
    """
    unit = unit_file(training)
    foreign = others(running_here(host, vmid, unit))
    if not foreign or not policy.restart_training:
        return
    for name in other_units(foreign):
        pids = ", ".join(str(t.pid) for t in foreign if t.started_by == name)
        yield note(
            f"CT {vmid}: stopping {name} (pid {pids}; its own TimeoutStopSec) and disabling it: "
            f"{unit} takes the training over (restart_training=true)"
        )
        q = shlex.quote(name)
        # `systemctl stop` blocks while the training writes its checkpoint: say how long it has
        # waited and what systemd reports (the unit's own TimeoutStopSec), every interval
        yield with_progress(
            StringCommand(f"pct exec {vmid} -- systemctl stop {q}"),
            waiting_for(
                f"{name} in CT {vmid} to stop (a training writes its checkpoint)",
                policy.progress_interval_s,
                poll=f"pct exec {vmid} -- systemctl show -p SubState,TimeoutStopUSec {q}",
                detail=unit_stop_detail,
            ),
        )
        yield StringCommand(f"pct exec {vmid} -- systemctl disable {q}")
    for t in foreign:
        if t.started_by != HAND or t.pid is None:
            continue
        yield note(
            f"CT {vmid}: stopping the training started by hand (pid {t.pid}: {t.command}): "
            f"SIGTERM, up to {training.stop_timeout_s} s to checkpoint, then SIGKILL"
        )
        script = stop_by_hand_script(
            t, training.script, training.stop_timeout_s, vmid=vmid, log=LEFTOVER_LOG
        )
        yield with_progress(
            StringCommand(script),
            waiting_for(
                f"the training started by hand in CT {vmid} (pid {t.pid}) to checkpoint and exit",
                policy.progress_interval_s,
                f"{training.stop_timeout_s} s, then SIGKILL",
            ),
        )


__all__ = ["training_taken_over"]
