"""Rebuilding a polluted venv or container in one command, losing no data.

``--data rebuild=venv`` builds the selected build from scratch beside the live one (uv's cache
stays, so nothing is downloaded again), switches to it, and only then deletes the old builds
(never one a running process uses): an interrupted rebuild leaves the previous build live. ``--data
rebuild=container`` destroys the container (lifting its protection first) and the container
stage re-creates it from the template; the bind-mounted data dir is never touched by `pct destroy`.
Both refuse while the training unit runs, unless ``restart_training=true``.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..facts.pollution import Pollution
from ..guard import delete_command, delete_refusal
from ..locks import desired_pins
from ..plan.adoption import purge_lines
from ..plan.passthrough import graceful_shutdown
from ..plan.pollution_report import pollution_lines
from ..plan.running_training import TRAINING, Trainer, blocking, held_by_pid, others
from ..plan.takeover import stop_groups
from ..plan.unit import RUNNING, unit_file
from ..plan.uv_commands import uv_bin
from ..plan.venvs import LOCK_FILE, prune_plan
from ..settings import PythonEnvSettings, RunPolicy, Settings, TorchSettings, TrainingSettings
from .container_fact import BASELINE, container_state, remember
from .progress import waiting_for, with_progress
from .takeover import stop_commands
from .training_gate import current_read, running_here
from .util import failure, notice

OURS_IN_USR_LOCAL = ("/usr/local/bin/uv",)


def refusal_line(policy: RunPolicy, trainer: Trainer) -> str:
    """The refusal of a rebuild under a training pvegpu did not start.

    >>> from pvegpu.plan.running_training import HAND
    >>> refusal_line(RunPolicy("container", False, 600, 10), Trainer(42, "p t.py", HAND))[:61]
    'rebuild=container refused while the running training is there'
    """
    fix = (
        "stop it, or add --data restart_training=true" if trainer.kind == TRAINING else trainer.fix
    )
    return (
        f"rebuild={policy.rebuild} refused while {trainer.what} is there ({trainer.named}); {fix}"
    )


@operation()
def pollution_report(policy: RunPolicy, torch: TorchSettings, python_env: PythonEnvSettings):
    """Print what the requested rebuild (``policy.rebuild``) removes: the live venv's packages
    (``python_env``) against the pins ``torch`` asks for, and what was added to the container
    (observes only: no change).

    .. code:: python

        rebuild.pollution_report(name="Report what rebuild=venv removes", policy=s.policy,
                                 torch=s.torch, python_env=s.python_env)
    """
    if not policy.rebuild:
        return
    found = host.get_fact(
        Pollution,
        venv=python_env.venv_path,
        uv_bin=uv_bin(python_env),
        lock_file=LOCK_FILE,
        baseline=BASELINE,
        usr_local_ours=OURS_IN_USR_LOCAL,
        _ignore_errors=True,  # a container that does not exist yet has nothing to report
    )
    if not found:
        notice("container not reachable: nothing to report before the rebuild")
        return
    lines = pollution_lines(found, desired_pins(torch))
    scope = (
        "the venv (every build)"
        if policy.rebuild == "venv"
        else "the whole container: venv, /usr/local, apt packages"
    )
    notice(
        f"rebuild={policy.rebuild} replaces {scope}; differences found:",
        *(f"  {line}" for line in lines or ["none (the rebuild starts from scratch anyway)"]),
    )
    return
    yield


@operation()
def venv_rebuild_allowed(policy: RunPolicy, training: TrainingSettings):
    """With ``rebuild=venv``, refuse (one line, nothing changed) while the training unit
    (``training.unit_name``) runs, unless ``restart_training=true``. The rebuild itself never
    deletes the live venv: the python env stage builds the fresh one beside it and switches;
    ``old_builds_removed`` deletes the old builds only after that switch.

    .. code:: python

        rebuild.venv_rebuild_allowed(name="Check that rebuild=venv may run", policy=s.policy,
                                     training=s.training)
    """
    if policy.rebuild != "venv":
        return
    unit = unit_file(training)
    foreign = blocking(running_here(host, unit=unit), policy.restart_training)
    if foreign:
        yield from failure(refusal_line(policy, foreign[0]))
        return
    if not policy.restart_training and container_state().get("unit_active") in RUNNING:
        yield from failure(
            f"{unit} is running: rebuild={policy.rebuild} refused; stop it, or add "
            "--data restart_training=true"
        )


@operation()
def old_builds_removed(policy: RunPolicy, torch: TorchSettings, python_env: PythonEnvSettings):
    """With ``rebuild=venv``, after the switch to the fresh build (``torch.build_name``): delete
    every other pvegpu build in ``python_env.venvs_dir`` (not uv's cache, not compile caches),
    never the live one, never one in use.

    .. code:: python

        rebuild.old_builds_removed(name="Delete the builds rebuild=venv replaced",
                                   policy=s.policy, torch=s.torch, python_env=s.python_env)
    """
    if policy.rebuild != "venv":
        return
    state = container_state()
    remove, in_use = prune_plan(state, torch.build_name, 1)
    for name in in_use:
        notice(f"keeping {python_env.venvs_dir}/{name}: a running process uses it")
    if not remove:
        return
    V = python_env.venvs_dir.rstrip("/")
    # Through the delete guard: only build dirs pvegpu named (a wrong venvs_dir must not cost data).
    paths = [f"{V}/{name}" for name in remove if delete_refusal(f"{V}/{name}", V) is None]
    if not paths:
        return
    yield StringCommand(delete_command(paths, venvs_dir=V))
    remember(lambda doc: [doc.get("venvs", {}).pop(name, None) for name in remove])


@operation()
def container_destroyed(vmid: int, settings: Settings):
    """With ``rebuild=container``, destroy the container so the container stage re-creates it;
    refused while a training runs there (ours or another), unless ``restart_training``: then
    every training pvegpu did not start is stopped as the takeover stops it, pvegpu's unit is
    stopped under its own TimeoutStopSec, the container shut down with a timeout longer than
    that (never `pct stop`, never ``--forceStop``), its protection lifted (here and only here)
    and `pct destroy --purge` run, which also takes what the plan listed (backup jobs naming it,
    replication, HA, the firewall file; storage-backed volumes only with ``destroy_volumes``,
    checked by the preflight). The data dir is a bind mount and survives. A bind mount makes
    `pct snapshot` impossible, and a rollback would roll back storage-backed data too, so no
    snapshot is taken.

    .. code:: python

        rebuild.container_destroyed(name="Destroy CT 200 for rebuild", vmid=200, settings=s)
    """
    policy, training = settings.policy, settings.training
    if policy.rebuild != "container":
        return
    unit = unit_file(training)
    trainers = running_here(host, vmid, unit)
    refused = blocking(trainers, policy.restart_training)
    if refused:
        yield from failure(refusal_line(policy, refused[0]))
        return
    if any(t.ours for t in trainers) and not policy.restart_training:
        yield from failure(
            f"{unit} is running: rebuild={policy.rebuild} refused; stop it, or add "
            "--data restart_training=true"
        )
        return
    doc = current_read(host, host.name, vmid) or {}
    ct = (doc.get("containers") or {}).get(str(vmid)) or {}
    if not ct.get("exists"):
        return
    for line in purge_lines(ct, vmid):
        notice(f"rebuild=container: {line}")
    held, _ = held_by_pid(vmid, doc)
    for group in stop_groups(others(trainers)):
        yield from stop_commands(vmid, group, settings, ct, held)
    if ct.get("status") == "running":
        yield with_progress(
            StringCommand(graceful_shutdown(vmid, unit, training.stop_timeout_s)),
            waiting_for(
                f"CT {vmid} to shut down (its training unit stopped first)",
                policy.progress_interval_s,
                f"{training.stop_timeout_s + 60} s",
            ),
        )
    yield StringCommand(f"pct set {vmid} --protection 0 && pct destroy {vmid} --purge")


@operation()
def baseline_recorded():
    """Record the container's apt packages once, right after creation, so a later pollution
    report can tell which were added by hand. Needs no settings.

    .. code:: python

        rebuild.baseline_recorded(name="Record CT package baseline")
    """
    # Read in the python env stage's composite fact (no command of its own): the stage reuses it.
    if container_state().get("baseline_exists"):
        return
    yield StringCommand(
        f"mkdir -p {BASELINE.rsplit('/', 1)[0]} && dpkg-query -W -f '${{Package}}\\n' > "
        f"{BASELINE}.tmp"
        f" && mv {BASELINE}.tmp {BASELINE}"
    )
    remember(lambda doc: doc.update(baseline_exists=True))
