"""The training systemd unit in the container: rendered, enabled, started when not running, and
never restarted mid-run unless ``restart_training=true``. The live venv switches to a new build
in the same command that installs its unit (``live_build_and_unit``), after verify.

A training run lasts weeks. When the unit file or the venv build changed while the unit runs, the
deploy leaves it running and prints that a restart is pending (no change is reported, so a
converged re-run still reports zero changes). The running unit's own start record tells what it
runs: its ``ExecStartPre`` writes the unit file's digest, the venv link target and the build's
time to ``/run/pvegpu-<unit>/started`` (see templates/training.service.j2 and pvegpu.plan.unit); the
deploy compares that with what a start now would run.

Every start the deploy makes (the first, after a failure, or a requested restart) is preceded by
clearing leftover training processes on the training GPUs: compute processes whose argv is the
unit's ExecStart (also a stalled run started by hand) or whose cgroup is the unit's in this
container; never another command's, never another container's (probes/training_leftovers.py).
Only the node sees GPU processes (nvidia-smi in an LXC container lists none), so that step runs on
the container's node host, through the node's own connection, inside the container's operation:
stop -> clear -> start stay in one ordered sequence, with no barrier or node task file needed.
"""

from __future__ import annotations

import shlex
import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from ..plan.running_training import BOOT, TRAINING, Trainer, others
from ..plan.start_watch import watch_script
from ..plan.unit import (
    RUNNING,
    build_env_path,
    digest,
    renamed_unit_line,
    render_build_env,
    render_unit,
    running_other_units,
    start_command,
    unit_file,
    unit_path,
    unit_plan,
)
from ..plan.venvs import aside_path
from ..run.ct_reads import ChangeThenRead, change_then_read_script, keep_reads, split_reads
from ..run.run_context import mark_container_only, run_context
from ..settings import Settings
from .container_fact import container_state, remember, state_reads
from .leftovers import LEFTOVER_LOG, clear_leftovers_command, gpu_list  # noqa: F401 (re-export)
from .preview import show, show_file
from .progress import Progress, ProgressCommand, unit_stop_progress, with_progress
from .python_env import live_switch
from .training_gate import (
    boot_starters_here,
    change_when_clear,
    neighbours_here,
    running_here,
    wait_for,
)
from .util import failure, notice, write_file_command
from .venv_moves import aside_note, moved_record


def start_state(settings: Settings, state: dict) -> tuple[str, list[str]]:
    """(ActiveState, reasons a restart is pending) of the unit, from the container fact."""
    built = (state.get("venvs", {}).get(settings.torch.build_name) or {}).get("built")
    return unit_plan(settings, state.get("unit_active"), state.get("unit_started"), built)


def stop_and_wait_command(settings: Settings, unit_name: str | None = None) -> ProgressCommand:
    """Stop the unit (``unit_name``, default the training unit) and wait until systemd reports
    it down (`systemctl stop` blocks through the stop timeout and SIGKILL; the loop makes sure
    nothing is still deactivating), saying every ``progress_interval_s`` how long it has waited."""
    name = unit_name or unit_file(settings.training)
    unit = shlex.quote(name)
    command = StringCommand(
        f"systemctl stop {unit} && for i in $(seq 1 60); do "
        f"case $(systemctl show -p ActiveState --value {unit}) in "
        "active|activating|deactivating|reloading) sleep 1 ;; *) exit 0 ;; esac; done; "
        f"echo {shlex.quote(name + ' did not stop')} >&2; exit 1"
    )
    return with_progress(command, unit_stop_progress(name, settings.policy.progress_interval_s))


@operation()
def live_build_and_unit(settings: Settings):
    """Make the verified build live and install its unit, in one container command: write the
    build's training settings file when it differs (``plan.unit.render_build_env``: its compile
    cache dir, token_budget, max_batch_size), point ``venv_path`` at the selected build
    (:func:`pvegpu.operations.python_env.live_switch`: one ``rename()``), then write the rendered
    unit when it differs and reload systemd. The unit is the same for every variant (it reads
    the build's file when it starts), so a swap between built variants rewrites nothing. A running
    unit keeps running (it runs the build its start resolved; daemon-reload never restarts it);
    ``unit_running`` decides about restarts. Takes the whole ``settings``: the unit is rendered
    from the torch, python env, GPU, container and training parts.

    .. code:: python

        training.live_build_and_unit(
            name="Switch /root/venv to torch-2.11.0-cu130, install dflash-train.service",
            settings=s)

    It runs after verify accepted the build (deploy.py's stage order), so a build that fails
    verification never becomes the live venv nor the unit's. The switch and a replaced unit file
    patch the shared container fact (the unit's state, start record and enablement stay), so
    ``unit_running`` reuses it instead of reading it again. A unit file that was missing may
    change what ``systemctl is-enabled`` says: then the fact is read again.
    """
    mark_container_only(host)
    state = container_state()
    build = settings.torch.build_name
    env_text = render_build_env(settings)
    env = []
    if ((state.get("venvs") or {}).get(build) or {}).get("train_env") != digest(env_text):
        env = [str(write_file_command(build_env_path(settings), env_text, mode="0644"))]
    now = time.time()  # the switch's, and where a venv made by hand goes aside
    switch, switched = live_switch(state, settings.torch, settings.python_env, now)
    unit_name = unit_file(settings.training)
    text = render_unit(settings)
    unit = []
    if state.get("unit_digest") != digest(text):
        write = write_file_command(unit_path(settings.training), text, mode="0644")
        unit = [str(write), "systemctl daemon-reload"]
    # the build's settings before the link: whatever starts from the link finds them
    command = " && ".join([*env, *switch, *unit])
    # a new unit file may change what `systemctl is-enabled` says: the container's state is read
    # again, in the same exec right after the change (pvegpu.run.ct_reads.change_then_read)
    reads = [] if state.get("unit_digest") or not unit else list(state_reads(settings))
    venv = settings.python_env.venv_path
    what = f"the switch of {venv} to {settings.torch.build_name}"
    # asked now, not at preflight, and read again even when no command ran since the last read
    # (a verify_level=compile check can take minutes): a training started during the build or
    # the verification is seen; after a takeover whatever still runs keeps its venv too. The
    # read's own command makes the switch when its check on the node finds none
    # (pvegpu.run.gated); a venv made by hand is named first, so it switches on its own.
    made, foreign = switch_gate(state, bool(switch), command, reads, unit_name)
    if made is not None and made.get("ran") and foreign:
        # never: the node's check and this one are one function on one read
        yield from failure(f"{what} ran, yet this run finds {foreign[0].named} there: report it")
        return
    if foreign:
        # the build is built and verified beside it; what runs from venv_path is left alone
        wait_for(host, None, what, foreign)
        switch, switched = [], None
    if not (env or switch or unit):
        return
    show_live_change(
        state, settings, env_text if env else None, bool(switch), text if unit else None
    )
    if made is not None and made.get("ran"):
        if made.get("rc") != 0:
            output = [*(made.get("output") or []), *(made.get("errors") or [])]
            yield from failure(f"{what} failed (exit {made.get('rc')}):", *output)
            return
        yield made_by_read(what, reads, made.get("output") or [])
    else:
        if switch and state.get("venv_path_is_dir"):
            yield aside_note(venv, aside_path(venv, now))
        command = " && ".join([*env, *switch, *unit])
        yield ChangeThenRead(change_then_read_script(command, reads), reads) if reads else command
    moved = moved_record(state, venv, now) if switch else None
    if moved is not None:  # a restart hint names the venv where it is now
        yield moved
    if unit and not state.get("unit_digest"):
        return  # a new unit file: the fact is read again (see above)

    remember(live_change_update(build, env_text if env else None, switched, text if unit else None))


def switch_gate(state: dict, switch: bool, command: str, reads: list[str], unit_name: str):
    """(what the gate's read made, or None; the trainings not pvegpu's it found) right before the
    switch: the read's own command makes the change when its check on the node finds none
    (:mod:`pvegpu.run.gated`); a venv made by hand is only read (its move is named first)."""
    if not switch:
        return None, []
    if state.get("venv_path_is_dir"):
        return None, others(running_here(host, unit=unit_name, fresh=True))
    change = change_then_read_script(command, reads) if reads else command
    trainers, made = change_when_clear(host, change, unit_name)
    return made, others(trainers)


def live_change_update(build: str, env_text: str | None, switched, unit_text: str | None):
    """The update of the container document after ``live_build_and_unit``'s change: the
    build's settings file (``env_text``), the switch (``switched``), the unit (``unit_text``)."""

    def update(doc):
        if env_text is not None:  # the build's link and its real dir are one entry each
            venvs = doc.setdefault("venvs", {})
            for name in {build, (venvs.get(build) or {}).get("real")} - {None}:
                venvs.setdefault(name, {})["train_env"] = digest(env_text)
        if switched:
            switched(doc)
        if unit_text is not None:
            doc.update(unit_digest=digest(unit_text))

    return update


def show_live_change(
    state: dict, settings: Settings, env_text: str | None, switch: bool, unit_text: str | None
) -> None:
    """Show what ``live_build_and_unit`` changes: the build's settings file (``env_text``), the
    live venv's link (``switch``), the unit file (``unit_text``); None/False: not changed."""
    if env_text is not None:
        entry = (state.get("venvs") or {}).get(settings.torch.build_name) or {}
        show_file(build_env_path(settings), env_text, exists=entry.get("train_env") is not None)
    if switch:
        venv = settings.python_env.venv_path
        show(f"{venv}: {state.get('venv_link') or '(none)'} -> {settings.build_venv}")
    if unit_text is not None:
        show_file(unit_path(settings.training), unit_text, exists=bool(state.get("unit_digest")))


def made_by_read(what: str, reads: list[str], output: list[str]) -> FunctionCommand:
    """The command that stands for a change the gate's read made in its own command
    (:mod:`pvegpu.run.gated`): nothing more runs, and the operation counts as a change. The
    ``reads`` that ran after the change in that command (their ``output``) serve the next
    operation, as :func:`pvegpu.run.ct_reads.change_then_read`'s do."""

    def made(state, host):
        logger.debug(f"{host.name}: {what} was made by the read right before it")
        if reads:
            keep_reads(state, host, split_reads(output, reads))
        return True

    return FunctionCommand(made, (), {})


def old_units_retired(settings: Settings, state: dict):
    """Commands that stop and disable the training units of an earlier ``training_unit_name``
    (found by their pvegpu marker), before the new unit starts: a running one only with consent
    (``unit_running`` refuses without), stopped, cleared of its own leftovers, then disabled."""
    for name, found in sorted((state.get("other_units") or {}).items()):
        if found.get("active") in RUNNING:
            notice(
                f"{name} was the training unit before training_unit_name="
                f"{settings.training.unit_name}: stopping and disabling it "
                "(restart_training=true)"
            )
            yield stop_and_wait_command(settings, name)
            yield clear_leftovers_command(settings, name)
        if found.get("enabled") == "enabled":
            yield f"systemctl disable {shlex.quote(name)}"


def stopping_line(unit: str) -> str:
    """The line a deploy fails with while the unit is being stopped.

    >>> stopping_line("dflash-train.service")[:55]
    'dflash-train.service is stopping (deactivating): not st'
    """
    return (
        f"{unit} is stopping (deactivating): not started; run deploy.py again once it has "
        f"stopped (`systemctl is-active {unit}` in the container says inactive or failed)"
    )


@operation()
def stopped_for_compile_check(settings: Settings):
    """Stop the running training unit before ``verify_level=compile``, with consent
    (``restart_training=true``) only: the compile check compiles and allocates on every GPU, so
    it is refused beside a training (``probes/training_held.py``); stopped first, the check runs
    on free GPUs, and the unit starts again after verify (``unit_running``), or at once when the
    verification fails (``checks.verified``), on the build the live venv still points at.

    .. code:: python

        training.stopped_for_compile_check(name="Stop dflash-train.service for the compile "
                                           "check", settings=s)
    """
    policy, level = settings.policy, settings.verification.level
    if level != "compile" or not policy.restart_training:
        return
    if container_state().get("unit_active") not in RUNNING:
        return
    unit = unit_file(settings.training)
    notice(
        f"{unit}: stopping it (its checkpoint first) for verify_level=compile, which compiles on "
        "every GPU (restart_training=true); it starts again after the verification"
    )
    run_context(host.state).stopped_for_compile.add(host.name)
    yield stop_and_wait_command(settings)


def beside_others(settings: Settings, unit: str, enable: bool, start: bool):
    """Whether the unit may be enabled and started (``yield from``: (enable, go on)): asked now
    (a training may have started during the run, or outlived a takeover), never a second trainer
    on the same GPUs and checkpoints, nor one at the next boot; a training pvegpu did not start
    is no leftover: nothing is cleared. Records what waits; fails after a takeover that left
    one."""
    # read again right before it acts, however recent the run's last read (see the switch)
    foreign = others(running_here(host, unit=unit, fresh=True)) if enable or start else []
    if start and not foreign:  # another container's or the node's process on a training GPU
        foreign = neighbours_here(host, settings.gpus.training)
    starters = boot_starters_here(host, unit) if enable and not foreign else []
    if starters:  # never enabled beside what would start a second trainer at boot
        if settings.policy.restart_training:
            yield from failure(f"{unit} not enabled: {starters[0]} still starts a training at boot")
            return enable, False
        boot = Trainer(None, starters[0], starters[0], kind=BOOT)
        wait_for(host, None, f"systemctl enable {unit}", [boot])
        enable = False
    if not foreign:
        return enable, True
    if settings.policy.restart_training and foreign[0].kind == TRAINING:
        yield from failure(
            f"{unit} not started: {foreign[0].what} ({foreign[0].named}) still runs after "
            "the takeover; stop it, then run the deploy again"
        )
        return enable, False
    if enable:
        wait_for(host, None, f"systemctl enable {unit}", foreign)
    if start:
        wait_for(host, None, f"the start of {unit}", foreign)
    return enable, False


@operation()
def unit_running(settings: Settings):
    """Enable the unit; start it when it is not running; restart it only when asked
    (``restart_training``). Takes the whole ``settings``: whether a restart is pending compares
    the running unit with the one rendered now (see ``live_build_and_unit``).

    .. code:: python

        training.unit_running(name="Enable and start dflash-train.service", settings=s)

    - another pvegpu training unit (an earlier ``training_unit_name``) runs: refuse without
      ``restart_training=true``; with it, stop it, clear its leftovers and disable it first;
    - being stopped (deactivating): fail the host with one line, start nothing (run again once
      it has stopped);
    - not running: clear leftover training processes on the training GPUs, then start;
    - running what a start now would run: nothing;
    - running an outdated unit or venv build: leave it running and print that a restart is
      pending (no change), unless ``restart_training=true``: then stop, wait until it is down,
      clear leftover training processes on the training GPUs, start.
    """
    unit = unit_file(settings.training)
    state = container_state()
    enable = state.get("unit_enabled") != "enabled"
    start = state.get("unit_active") not in RUNNING
    enable, go_on = yield from beside_others(settings, unit, enable, start)
    if not go_on:
        return
    running_old = running_other_units(state.get("other_units"))
    if running_old and not settings.policy.restart_training:
        yield from failure(renamed_unit_line(settings, host.name, running_old))
        return
    if enable:
        yield f"systemctl enable {shlex.quote(unit)}"
    yield from old_units_retired(settings, state)
    active, reasons = start_state(settings, state)
    if active == "deactivating":
        # A stop (maybe a 15-minute checkpoint) is in progress and someone asked for it: the deploy
        # neither starts it nor interferes; one that leaves no training running fails, not passes.
        yield from failure(stopping_line(unit))
        return
    if active not in RUNNING:
        yield clear_leftovers_command(settings)
        yield start_command(settings)
        yield from watched(settings)
        return
    if not reasons:
        return
    if not settings.policy.restart_training:
        if host.state.is_executing:  # the node's closing line says so too
            run_context(host.state).restart_pending[host.name] = list(reasons)
        notice(
            f"{unit} keeps running; restart pending ({'; '.join(reasons)}).",
            "To restart it (stop, clear leftover training processes, start), run the deploy with "
            "--data restart_training=true",
        )
        return
    yield stop_and_wait_command(settings)
    yield clear_leftovers_command(settings)
    yield start_command(settings)
    yield from watched(settings)


def watched(settings: Settings):
    """The watch after a start: the unit stays active with no automatic restart for
    ``training_start_watch_s`` (:mod:`pvegpu.plan.start_watch`), with progress lines; a trainer
    that does not come up fails the run with the journal's last lines."""
    seconds = settings.training.start_watch_s
    if seconds <= 0:
        return
    unit = unit_file(settings.training)
    vmid = host.data.get("pct_vmid")
    yield with_progress(
        watch_script(unit, seconds, vmid, gpus=bool(settings.gpus.training)),
        Progress(
            f"CT {vmid}: watching {unit} come up",
            settings.policy.progress_interval_s,
            f"{seconds} s",
        ),
    )


__all__ = ["live_build_and_unit", "stopped_for_compile_check", "unit_running"]
