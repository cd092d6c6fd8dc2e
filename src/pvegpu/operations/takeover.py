"""The takeover of the trainings pvegpu did not start, with ``restart_training=true`` only, on the
container's node, after the new build was made and verified and right before pvegpu's unit
starts (deploy.py: the verify stage, then this, then the container changes that waited for it,
then the venv switch and the unit):

1. each recognised training (:mod:`pvegpu.plan.running_training`, asked again now) stopped
   gracefully and whole by the node's stop probe (probes/training_stop.py, roles from
   :mod:`pvegpu.plan.takeover`): launchers held, workers (never their helpers) continued and
   sent SIGTERM at once, up to ``training_stop_timeout_s`` (or the unit's own TimeoutStopSec when
   longer) for their checkpoints; then a unit that is the training stopped and kept from
   starting again by its own manager (`systemctl disable --now`, `stop` for a transient unit,
   `systemctl --user` for a user's); a unit that only started one (cron, ssh, a login) is never
   touched;
2. whatever would start a training at boot (an enabled unit or timer, an ``@reboot`` cron line)
   disabled, so the next boot cannot run two trainers;
3. a read afterwards: if anything of a training still runs, or a process of the container holds
   a training GPU, the run stops there with one line and changes nothing else.

A GPU process that is no training (a Jupyter kernel), a neighbour's, or a state that could not be
read is never stopped: the takeover refuses, and pvegpu's unit does not start.
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from ..facts.probe import probe_command
from ..plan.adoption import disable_starters_script, starter_names
from ..plan.restart_hint import RestartHint, restart_hint
from ..plan.running_training import TRAINING, held_by_pid, match_of, others
from ..plan.takeover import stop_args, stop_groups, unit_uid
from ..plan.unit import unit_file
from ..run.run_context import run_context
from ..settings import Settings
from .leftovers import LEFTOVER_LOG
from .progress import unit_stop_detail, waiting_for, with_progress
from .training_gate import current_read, running_here
from .util import failure, note


def verified_here(state, node: str, vmid: int) -> bool | None:
    """Whether this run verified CT ``vmid``'s new build (None: not known yet, a preview)."""
    verdict = run_context(state).verdicts.get(f"@pct/{node}/{vmid}")
    if verdict is None:
        return None if not state.is_executing else False
    return bool(verdict.ok)


@operation()
def training_taken_over(vmid: int, settings: Settings):
    """Stop (gracefully) and retire every training in CT ``vmid`` that pvegpu's unit did not
    start, and what would start one at boot, when ``restart_training``; once the new build is
    verified (see the module's docstring).

    .. code:: python

        takeover.training_taken_over(name="Take over CT 200's training", vmid=200, settings=s)
    """
    if not settings.policy.restart_training:
        return
    run_context(host.state).takeover_ran.add(host.name)  # what waits from now on truly waits
    unit = unit_file(settings.training)
    foreign = others(running_here(host, vmid, unit))
    doc = current_read(host, host.name, vmid) or {}
    ct = (doc.get("containers") or {}).get(str(vmid)) or {}
    match = match_of(settings.training, settings.python_env)
    units, crons = starter_names(ct, match, unit)
    units = [u for u in units if u not in {t.unit for t in foreign}]  # disabled with their stop
    if not (foreign or units or crons):
        return
    if verified_here(host.state, host.name, vmid) is False:
        host.log_styled(
            f"CT {vmid}: no takeover: its new build was not verified in this run (its lines "
            "say why); what runs there keeps running",
            fg="yellow",
            log_func=logger.warning,
        )
        return
    refused = [t for t in foreign if t.kind != TRAINING]
    if refused:
        t = refused[0]
        yield from failure(
            f"CT {vmid}: no takeover: {t.what} ({t.named}: {t.command}) is there and pvegpu "
            f"never stops it; {t.fix}"
        )
        return
    held, _ = held_by_pid(vmid, doc)
    for group in stop_groups(foreign):
        yield from stop_commands(vmid, group, settings, ct, held)
    if units or crons:
        yield note(
            f"CT {vmid}: disabling what would start a second trainer at boot: "
            + ", ".join([*units, *(f"{c['file']}: {c['line']}" for c in crons)])
        )
        script = disable_starters_script(units, crons)
        yield StringCommand(f"pct exec {vmid} -- sh -c {shlex.quote(script)}")
    yield nothing_left(vmid, unit)


def stop_commands(vmid: int, group: list, settings: Settings, ct: dict, held: dict):
    """The note and the node's stop probe for the trainings of ``group`` (one unit, or process
    trees stopped together) in container ``ct`` (the node's read of it), with progress lines."""
    procs = ct.get("processes") or []
    timeout = settings.training.stop_timeout_s
    t = group[0]
    args = stop_args(vmid, group, procs, held, settings.training.script, timeout, LEFTOVER_LOG)
    launchers = [m["pid"] for m in args["members"] if m["role"] == "launcher"]
    steps = []
    if launchers:
        steps.append(f"its launchers held (SIGSTOP to pid {', '.join(map(str, launchers))})")
    steps.append("SIGCONT and SIGTERM to its workers (not their helpers)")
    if t.unit:
        steps.append(
            f"up to {timeout} s (or its own TimeoutStopSec) to checkpoint, then {t.unit} "
            "stopped and disabled by its manager"
        )
    else:
        steps.append(f"up to {timeout} s to checkpoint, then SIGKILL")
    what = f"{t.what} ({t.named}: {t.command})"
    if len(group) > 1:
        steps[-1:-1] = [f"all {len(group)} at once"]
        what = "the trainings " + ", ".join(f"({g.named}: {g.command})" for g in group)
    yield note(
        f"CT {vmid}: stopping {what} for {unit_file(settings.training)}"
        f" (restart_training=true): {', '.join(steps)}"
    )
    poll = {}
    if t.unit:
        poll = {
            "poll": f"pct exec {vmid} -- systemctl show -p SubState,TimeoutStopUSec "
            f"{shlex.quote(t.unit)}",
            "detail": unit_stop_detail,
        }
    hints = [restart_hint(vmid, g, procs, unit_uid(g, procs), ct.get("live")) for g in group]
    # recorded as the stop starts: a run that fails or is cut short from then on (a takeover,
    # rebuild=container's graceful stop) says how to start each one again
    yield FunctionCommand(record_hints, (hints,), {})
    yield FunctionCommand(mark_stopping, (what,), {})
    yield with_progress(
        StringCommand(probe_command("training_stop", args)),
        waiting_for(
            f"{t.named} in CT {vmid} to checkpoint and exit",
            settings.policy.progress_interval_s,
            f"{timeout} s, then SIGKILL" if not t.unit else None,
            **poll,
        ),
    )
    yield FunctionCommand(mark_stopping, (None,), {})


def record_hints(state, host, hints: list[RestartHint]) -> bool:
    """Record how to start the trainings a stop is about to stop (the run's last line names
    them if it fails or is cut short afterwards)."""
    run_context(state).taken_over.setdefault(host.name, []).extend(hints)
    return True


def mark_stopping(state, host, what: str | None) -> bool:
    """Record (``what``) or clear (None) the training the node's stop is stopping now: an
    interrupted run names it in its last line (pvegpu.startup.interrupt)."""
    stopping = run_context(state).stopping
    if what is None:
        stopping.pop(host.name, None)
    else:
        stopping[host.name] = what
    return True


def nothing_left(vmid: int, unit: str) -> FunctionCommand:
    """A command that reads the container again and fails, with one line, when anything
    pvegpu's unit does not run is still there (a training, a GPU process, an unreadable state)."""

    def check(state, host):
        left = others(running_here(host, vmid, unit, fresh=True))
        if not left:
            return True
        host.log_styled(
            f"CT {vmid}: after the takeover {left[0].what} ({left[0].named}) is still there: "
            f"{unit} is not started and nothing else changes; check the container, then run "
            "the deploy again",
            fg="red",
            log_func=logger.error,
        )
        return False

    return FunctionCommand(check, (), {})


__all__ = ["training_taken_over"]
