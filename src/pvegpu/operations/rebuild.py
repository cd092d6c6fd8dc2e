"""Rebuilding a polluted venv or container in one command, losing no data.

``--data rebuild=venv`` builds the selected build from scratch beside the live one (uv's cache
stays, so nothing is downloaded again), switches to it, and only then deletes the old builds
(never one a running process uses): an interrupted rebuild leaves the previous build live. ``--data
rebuild=container`` destroys the container (lifting its protection first) and the container
stage re-creates it from the template; the bind-mounted data dir is never touched by `pct destroy`.
Both refuse while the training unit runs, unless ``restart_training=true``.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..facts.pollution import Pollution
from ..guard import delete_command, delete_refusal
from ..locks import desired_pins
from ..pollution_report import pollution_lines
from ..settings import Settings
from ..unit import RUNNING, unit_file
from ..uv_commands import uv_bin
from ..venvs import LOCK_FILE, prune_plan
from .container_fact import BASELINE, container_state, remember
from .util import fail, notice

OURS_IN_USR_LOCAL = ("/usr/local/bin/uv",)


def refuse_while_training(settings: Settings, runner: str) -> str:
    """Shell guard failing with one clear line when the training unit is active.

    ``runner`` is "" inside the container, or "pct exec <vmid> --" on the node.
    """
    if settings.restart_training:
        return ""
    unit = unit_file(settings)
    refusal = (
        f"{unit} is running: rebuild={settings.rebuild} refused; stop it, or add "
        "--data restart_training=true"
    )
    return (
        f"if {runner} systemctl is-active --quiet {unit}; then echo "
        f"{shlex.quote(refusal)}"
        " >&2; exit 1; fi; "
    )


@operation()
def pollution_report(settings: Settings):
    """Print what the requested rebuild removes (observes only: no change).

    .. code:: python

        rebuild.pollution_report(name="Report what rebuild=venv removes", settings=s)
    """
    if not settings.rebuild:
        return
    found = host.get_fact(
        Pollution,
        venv=settings.venv_path,
        uv_bin=uv_bin(settings),
        lock_file=LOCK_FILE,
        baseline=BASELINE,
        usr_local_ours=OURS_IN_USR_LOCAL,
        _ignore_errors=True,  # a container that does not exist yet has nothing to report
    )
    if not found:
        notice("container not reachable: nothing to report before the rebuild")
        return
    lines = pollution_lines(found, desired_pins(settings))
    scope = (
        "the venv (every build)"
        if settings.rebuild == "venv"
        else "the whole container: venv, /usr/local, apt packages"
    )
    notice(
        f"rebuild={settings.rebuild} replaces {scope}; differences found:",
        *(f"  {line}" for line in lines or ["none (the rebuild starts from scratch anyway)"]),
    )
    return
    yield


@operation()
def venv_rebuild_allowed(settings: Settings):
    """With ``rebuild=venv``, refuse (one line, nothing changed) while the training unit runs,
    unless ``restart_training=true``. The rebuild itself never deletes the live venv: the python
    env stage builds the fresh one beside it and switches; ``old_builds_removed`` deletes the old
    builds only after that switch.

    .. code:: python

        rebuild.venv_rebuild_allowed(name="Check that rebuild=venv may run", settings=s)
    """
    if settings.rebuild != "venv" or settings.restart_training:
        return
    unit = unit_file(settings)
    if container_state(settings).get("unit_active") in RUNNING:
        yield fail(
            f"{unit} is running: rebuild={settings.rebuild} refused; stop it, or add "
            "--data restart_training=true"
        )


@operation()
def old_builds_removed(settings: Settings):
    """With ``rebuild=venv``, after the switch to the fresh build: delete every other pvegpu
    build (not uv's cache, not compile caches), never the live one, never one in use.

    .. code:: python

        rebuild.old_builds_removed(name="Delete the builds rebuild=venv replaced", settings=s)
    """
    if settings.rebuild != "venv":
        return
    state = container_state(settings)
    remove, in_use = prune_plan(state, replace(settings, keep_venvs=1))
    for name in in_use:
        notice(f"keeping {settings.venvs_dir}/{name}: a running process uses it")
    if not remove:
        return
    V = settings.venvs_dir.rstrip("/")
    # Through the delete guard: only build dirs pvegpu named (a wrong venvs_dir must not cost data).
    paths = [f"{V}/{name}" for name in remove if delete_refusal(f"{V}/{name}", V) is None]
    if not paths:
        return
    yield StringCommand(delete_command(paths, venvs_dir=V))
    remember(lambda doc: [doc.get("venvs", {}).pop(name, None) for name in remove])


@operation()
def container_destroyed(vmid: int, settings: Settings):
    """With ``rebuild=container``, destroy the container so the container stage re-creates it.

    Protection is lifted here and only here; `pct destroy --purge` leaves bind-mount sources
    (the data dir) alone. A bind mount makes `pct snapshot` impossible, and a rollback would roll
    back storage-backed data too, so no snapshot is taken.

    .. code:: python

        rebuild.container_destroyed(name="Destroy CT 200 for rebuild", vmid=200, settings=s)
    """
    if settings.rebuild != "container":
        return
    runner = f"pct exec {vmid} --"
    yield StringCommand(
        f"if pct status {vmid} >/dev/null 2>&1; then "
        f"if pct status {vmid} | grep -q running; then {refuse_while_training(settings, runner)}"
        f"pct stop {vmid}; fi; "
        f"pct set {vmid} --protection 0 && pct destroy {vmid} --purge; fi"
    )


@operation()
def baseline_recorded(settings: Settings):
    """Record the container's apt packages once, right after creation, so a later pollution
    report can tell which were added by hand.

    .. code:: python

        rebuild.baseline_recorded(name="Record CT package baseline", settings=s)
    """
    # Read in the python env stage's composite fact (no command of its own): the stage reuses it.
    if container_state(settings).get("baseline_exists"):
        return
    yield StringCommand(
        f"mkdir -p {BASELINE.rsplit('/', 1)[0]} && dpkg-query -W -f '${{Package}}\\n' > "
        f"{BASELINE}.tmp"
        f" && mv {BASELINE}.tmp {BASELINE}"
    )
    remember(lambda doc: doc.update(baseline_exists=True))
