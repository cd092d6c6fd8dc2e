"""Node-side operations: boot persistence, container lifecycle, GPU passthrough, driver parity.

Each reads the node's composite ``NodeState`` fact (served from the run's last read while nothing
changed since: pvegpu.run.node_read), when it runs (pyinfra 3 runs operation
bodies at execution time), asking only for what it compares (container status and the
container's own view cost a `pct` call each on a real node), and yields commands only when the
node or container differs from the desired state.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..digests import text_digest
from ..plan import boot
from ..plan.adoption import TAG, tags_of, tags_with_ours
from ..plan.ct_template import default_template
from ..plan.passthrough import (
    graceful_shutdown,
    hotplug_failure,
    hotplug_shell,
    plan_passthrough,
    restart_blocker,
    set_calls,
)
from ..plan.pct_args import (  # noqa: F401 (re-exported: tests and the adoption plan use them)
    LOWERABLE,
    SET_DEFAULTS,
    create_args,
    lowered,
    memory_below_use,
    resized,
    settings_args,
    without,
)
from ..plan.running_training import others
from ..plan.unit import unit_file
from ..run import node_read
from ..run.run_context import run_context
from ..settings import ContainerSettings, GpuSettings, RunPolicy, TrainingSettings
from .folded_reads import state_reads_of
from .preview import show, show_file, show_files, show_pct_set
from .progress import Progress, ProgressCommand, waiting_for, with_progress
from .training_gate import running_here, wait_for
from .util import failure, note, write_file_command


def read_state(vmids=(), ct_detail: str = "none", fresh: bool = False) -> dict:
    """The node's state: the run's last read of it (the preflight's, on a converged node) while
    no operation of the run has run a command since, else read now (pvegpu.run.node_read) with the
    probe arguments the preflight read this node with; a read in full folds each container's
    state read in its exec (its python env stage reads it first: pvegpu.run.ct_reads); ``fresh``:
    read now whatever the run's cache holds."""
    args = run_context(host.state).node_args.get(host.name)
    reads = state_reads_of(host, vmids) if ct_detail == "full" else None
    return node_read.node_state(host, vmids, ct_detail, args, ct_reads=reads or None, fresh=fresh)


def node_state(vmid: int, ct_detail: str = "full", fresh: bool = False) -> tuple[dict, dict]:
    """(the node's read, CT ``vmid``'s part of it); ``fresh``: read now (:func:`read_state`)."""
    state = read_state([vmid], ct_detail, fresh) if fresh else read_state([vmid], ct_detail)
    return state, state.get("containers", {}).get(str(vmid), {})


def wait_exec(vmid: int, interval_s: int) -> ProgressCommand:
    """Wait until `pct exec` answers in a freshly started container (its init may lag), saying
    every ``interval_s`` how long it has waited."""
    command = StringCommand(
        f"i=0; until pct exec {vmid} -- true >/dev/null 2>&1; do i=$((i+1)); "
        f"[ $i -ge 60 ] && echo 'CT {vmid} started but pct exec does not answer after 60 s' >&2 "
        f"&& exit 1; sleep 1; done"
    )
    return with_progress(
        command, waiting_for(f"`pct exec` to answer in CT {vmid}", interval_s, "about 60 s")
    )


@operation()
def boot_persistence(gpus: GpuSettings):
    """NVIDIA modules at boot, device nodes before guests start, nvidia-persistenced running.
    ``gpus``: its ``extra_devices`` (passthrough_extra_devices) are loaded and created too.

    .. code:: python

        proxmox.boot_persistence(name="NVIDIA devices ready at every boot", gpus=s.gpus)

    - /etc/modules-load.d/nvidia.conf: nvidia, nvidia_uvm (systemd-modules-load);
    - nvidia-uvm-init.service: oneshot `nvidia-modprobe` creating every GPU node, nvidiactl and
      the uvm nodes, ordered Before=pve-guests.service (a missing devN path blocks the start of an
      onboot container after a cold boot), enabled and started;
    - nvidia-persistenced.service: enabled and started; written from NVIDIA's sample only when no
      unit file exists (the .run driver ships none; Debian's package does); left alone where a
      daemon runs outside systemd or the unit at our path is an admin's (no pvegpu marker).
    """
    state = read_state()
    if not state:
        return
    digests = state.get("boot_files", {})
    tools = state.get("tools", {})
    units = state.get("units", {})
    minors = [g["minor"] for g in state.get("gpus") or [] if g.get("minor") is not None]
    minors = minors or [
        int(p[len("/dev/nvidia") :])
        for p in state.get("devices", {})
        if p[len("/dev/nvidia") :].isdigit()
    ]
    wanted = {
        boot.MODULES_LOAD: boot.render_modules(gpus.extra_devices),
        f"{boot.UNIT_DIR}/{boot.UVM_UNIT}": boot.render_uvm_unit(
            minors,
            tools.get("nvidia-modprobe") or "/usr/bin/nvidia-modprobe",
            gpus.extra_devices,
            fabric=boot.on_fabric(state),
        ),
    }
    # a daemon outside systemd or an admin's own unit: left alone (the preflight reports it)
    foreign = boot.persistenced_left_alone(state) is not None
    persistenced = None if foreign else tools.get("nvidia-persistenced")
    pers_unit = {} if foreign else units.get(boot.PERSISTENCED_UNIT, {})
    if persistenced and boot.manages_persistenced(pers_unit):
        wanted[f"{boot.UNIT_DIR}/{boot.PERSISTENCED_UNIT}"] = boot.render_persistenced_unit(
            persistenced
        )
    wrote_unit = False
    show_files(wanted, digests)  # every change shown before the first command
    # one node command, its steps in order, stopping at the first that fails
    steps: list[str] = []
    for path, text in wanted.items():
        if digests.get(path) != text_digest(text):
            steps.append(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])}")
            steps.append(str(write_file_command(path, text, mode="0644")))
            wrote_unit = wrote_unit or path.endswith(".service")
    if wrote_unit:
        steps.append("systemctl daemon-reload")
    enable = [boot.UVM_UNIT]
    if persistenced or pers_unit.get("path"):
        enable.append(boot.PERSISTENCED_UNIT)
    todo = [
        u
        for u in enable
        if wrote_unit
        or not units.get(u, {}).get("enabled")
        or units.get(u, {}).get("active") != "active"
    ]
    if todo:
        steps.append(shlex.join(["systemctl", "enable", "--now", *todo]))
    if steps:
        yield StringCommand(" && ".join(steps))


# --- container ----------------------------------------------------------------------------------


def existing_args(
    vmid: int,
    ct: dict,
    container: ContainerSettings,
    policy: RunPolicy | None,
    training: TrainingSettings | None,
) -> tuple[list[str], str | None]:
    """(the `pct set` args for an existing container now, a refusal): what waits for a running
    training is left out (and recorded as waiting); a memory limit under its use is refused."""
    config = ct.get("config") or {}
    args = settings_args(config, container)
    if TAG not in tags_of(config):  # adopted (or made before the tag)
        args += ["--tags", tags_with_ours(config.get("tags"))]
    lower = lowered(config, args)
    if "memory" in lower:
        _, full = node_state(vmid, "full")
        refusal = memory_below_use(
            vmid, container.memory_mib, full.get("memory_current"), full.get("memory_cgroup")
        )
        if refusal:
            return [], refusal
    consent = bool(policy and policy.restart_training)
    trainers = running_here(host, vmid, unit_file(training) if training else None)
    # before the takeover (restart_training=true: once the new build is verified) every
    # training pvegpu did not start, or a state that could not be read, holds its resources as
    # its owner set them; they are applied after it, in this run. Under our own unit only a
    # lowering waits (a raised limit is safe).
    blockers = others(trainers)
    held = resized(args) if blockers else lower if trainers and not consent else []
    for key in held:
        flag = args.index(f"--{key}")
        what = "lowers" if key in lower else "changes"
        change = f"pct set {vmid} --{key} {args[flag + 1]} ({what} {key})"
        wait_for(host, vmid, change, blockers or trainers, consent)
    args = without(args, held)
    return args, None


@operation()
def container_present(
    vmid: int,
    container: ContainerSettings,
    policy: RunPolicy | None = None,
    training: TrainingSettings | None = None,
    progress_interval_s: int = 10,
):
    """Create the container from ``container`` (the ``ct_*`` settings and the data mount) when it
    does not exist (saying every ``progress_interval_s`` how long `pct create` has run: it
    unpacks the template); on an existing one, converge cores, memory, swap, onboot, the data
    mount and protection with `pct set`. The data directory on the node (``data_dir_node``) is
    created first.

    .. code:: python

        proxmox.container_present(name="CT 200 exists", vmid=200, container=s.container)
    """
    state, ct = node_state(vmid, "none")
    args: list[str] = []
    if ct.get("exists"):
        args, refusal = existing_args(vmid, ct, container, policy, training)
        if refusal:
            yield from failure(refusal)
            return
        show_pct_set(vmid, ct.get("config", {}), args, SET_DEFAULTS)
    if state and not state.get("data_dir_exists"):
        # Before the container can mount it (`pct start` fails on a missing bind-mount source).
        # pvegpu never removes it: `pct destroy` leaves bind-mount sources alone.
        show(f"creates {container.data_dir_node} (data_dir_node)")
        yield StringCommand("mkdir", "-p", shlex.quote(container.data_dir_node))
    if ct.get("exists"):
        if args:
            yield StringCommand("pct", "set", str(vmid), *(shlex.quote(a) for a in args))
        return
    template = default_template(
        container.template, state.get("pve_version"), state.get("templates", [])
    )
    template_file = template.split("/")[-1]
    if state and template_file not in state.get("templates", []):
        yield from failure(
            f"template {template} is not on node {host.name}: download it with "
            f"`pveam download local {template_file}` or set ct_template"
        )
        return
    yield with_progress(
        StringCommand(*(shlex.quote(a) for a in create_args(container, vmid, template))),
        Progress(f"creating CT {vmid} from {template_file}", progress_interval_s),
    )


@operation()
def gpu_passthrough(vmid: int, gpus: GpuSettings, policy: RunPolicy, training: TrainingSettings):
    """Pass every NVIDIA device node the container needs, with majors read from the node, and
    run the container with them (start it when stopped). ``gpus``: ``passthrough_mode`` and
    ``extra_devices``; ``policy.restart_training`` and ``training.unit_name``: whether a running
    training may be restarted.

    .. code:: python

        proxmox.gpu_passthrough(name="Pass GPUs through to CT 200 and run it", vmid=200,
                                gpus=s.gpus, policy=s.policy, training=s.training)

    Missing device nodes are created first (`nvidia-modprobe`): a devN path that does not exist
    blocks the container's start. ``devN:`` entries are set with `pct set` (pve-container >=
    5.0.7); raw ``lxc.*`` lines (older nodes) are edited in the config file, everything else
    kept. Devices of a running container are fixed at its start: when the passthrough changed, or
    the container's nodes no longer match the node's (a reloaded uvm module gets a new major), it
    is restarted — never while the training unit runs, unless ``restart_training`` is true.
    """
    state, ct = node_state(vmid, "full")
    if not ct.get("exists"):
        return  # preview of a container that is created earlier in this run
    plan = plan_passthrough(gpus.passthrough_mode, gpus.extra_devices, state, ct)
    reasons = plan.restart_reasons
    if reasons:
        trainers = running_here(host, vmid, unit_file(training))
        blocker = restart_blocker(vmid, unit_file(training), ct.get("live"), reasons, trainers)
        blockers = others(trainers)
        if blocker and blockers:
            change = f"the restart of CT {vmid} ({'; '.join(reasons)})"
            wait_for(host, vmid, change, blockers, policy.restart_training)
            return
        if blocker and not policy.restart_training:
            yield from failure(blocker)
            return
    if plan.new_text is not None:
        show_file(f"/etc/pve/lxc/{vmid}.conf", plan.new_text, True, old=ct.get("text", ""))
    show_pct_set(vmid, ct.get("config", {}), plan.set_args)
    for args in plan.modprobe:
        yield modprobe_command(args)
    if plan.new_text is not None:
        yield write_file_command(f"/etc/pve/lxc/{vmid}.conf", plan.new_text)
    hotplug = bool(plan.hotplug)
    for args in set_calls(plan.set_args, hotplug):
        if hotplug:
            blocker = hotplug_blocker(vmid, args, ct, policy, training)
            down = graceful_shutdown(vmid, unit_file(training), training.stop_timeout_s)
            yield StringCommand(hotplug_shell(vmid, args, blocker, down))
        else:
            yield StringCommand("pct", "set", str(vmid), *(shlex.quote(a) for a in args))
    if hotplug:  # answers at once unless a failed hot-plug restarted the container
        yield wait_exec(vmid, policy.progress_interval_s)
    if reasons:
        yield note(f"restarting CT {vmid}: {'; '.join(reasons)}")
        limit = training.stop_timeout_s + 60
        # pvegpu's unit stopped first under its own TimeoutStopSec (its checkpoint), never a
        # forced stop: a container that does not shut down in time fails this step
        yield with_progress(
            StringCommand(graceful_shutdown(vmid, unit_file(training), training.stop_timeout_s)),
            waiting_for(
                f"CT {vmid} to shut down (its training unit stopped first)",
                policy.progress_interval_s,
                f"{limit} s",
            ),
        )
    if reasons or not plan.running:
        # `pct start` fails on a running container: the status was read first (ct_detail=full).
        yield f"pct start {vmid}"
        yield wait_exec(vmid, policy.progress_interval_s)


def modprobe_command(args: list[str]) -> StringCommand:
    """``nvidia-modprobe <args>``, failing with one line that says what it means."""
    call = f"nvidia-modprobe {' '.join(args)}"
    message = (
        f"{call} failed on {host.name}: the NVIDIA device nodes cannot be created "
        f"(is the driver's module loaded? check dmesg)"
    )
    return StringCommand(f"{call} || {{ echo {shlex.quote(message)} >&2; exit 1; }}")


def hotplug_blocker(
    vmid: int, args: list[str], ct: dict, policy: RunPolicy, training: TrainingSettings
) -> str | None:
    """Why the container may not restart should the hot-plug of ``args`` fail (None: it may)."""
    if policy.restart_training:
        return None
    unit = unit_file(training)
    trainers = running_here(host, vmid, unit)
    return restart_blocker(vmid, unit, ct.get("live"), [hotplug_failure(args)], trainers)
