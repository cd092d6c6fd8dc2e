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
from ..plan.installer_tools import (
    install_kmod_script,
    missing_installer_line,
    missing_tools_line,
    plan_tools,
)
from ..plan.passthrough import (
    graceful_shutdown,
    hotplug_failure,
    hotplug_shell,
    plan_passthrough,
    restart_blocker,
    set_calls,
)
from ..plan.running_training import others
from ..plan.toolchain import install_toolchain_script, toolchain_lacks, toolchain_packages
from ..plan.unit import unit_file
from ..run import node_read
from ..run.run_context import run_context
from ..settings import ContainerSettings, GpuSettings, RunPolicy, TrainingSettings
from .preview import show, show_file, show_files, show_pct_set
from .progress import Progress, ProgressCommand, waiting_for, with_progress
from .training_gate import running_here, wait_for
from .util import failure, note, write_file_command


def read_state(vmids=(), ct_detail: str = "none") -> dict:
    """The node's state: the run's last read of it (the preflight's, on a converged node) while
    no operation of the run has run a command since, else read now (pvegpu.run.node_read) with the
    probe arguments the preflight read this node with."""
    args = run_context(host.state).node_args.get(host.name)
    return node_read.node_state(host, vmids, ct_detail, args)


def node_state(vmid: int, ct_detail: str = "full") -> tuple[dict, dict]:
    state = read_state([vmid], ct_detail)
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


def mount_spec(container: ContainerSettings) -> str:
    """The data mount point: a node directory bind-mounted into the container. ``backup=0``:
    vzdump leaves it out (checkpoints and datasets are backed up on their own schedule)."""
    return f"{container.data_dir_node},mp={container.data_dir_ct},backup=0"


def create_args(container: ContainerSettings, vmid: int, template: str) -> list[str]:
    """`pct create` argv. ``--unprivileged`` is always explicit: its default flipped in PVE 9
    (pve-container 6, "api: create: default to unprivileged containers")."""
    return [
        "pct",
        "create",
        str(vmid),
        template,
        "--hostname",
        container.hostname,
        "--cores",
        str(container.cores),
        "--memory",
        str(container.memory_mib),
        "--swap",
        str(container.swap_mib),
        "--rootfs",
        container.rootfs,
        "--net0",
        container.net0,
        "--unprivileged",
        "1" if container.unprivileged else "0",
        "--features",
        container.features,
        "--mp0",
        mount_spec(container),
        "--onboot",
        "1" if container.onboot else "0",
        "--protection",
        "1" if container.protection else "0",
        "--ostype",
        "debian",
        # pvegpu's mark (shown beside the name in the web UI): a container without it was not
        # made by pvegpu, which then changes it only with --data adopt=true
        "--tags",
        TAG,
    ]


def parse_mount(value: str) -> tuple[str, dict]:
    """``(source, options)`` of an mpN value (a Proxmox property string)."""
    parts = value.split(",")
    return parts[0].rstrip("/"), dict(p.split("=", 1) for p in parts[1:] if "=" in p)


def data_mount_key(config: dict, container: ContainerSettings) -> str | None:
    """The one mpN entry that is the data mount: a bind mount (node path source) of
    ``data_dir_node`` or at ``data_dir_ct``. When either setting changes, this entry is edited,
    never a second one added beside it.

    >>> from pvegpu.settings import Settings, defaults
    >>> data_mount_key({"mp0": "local-lvm:vm-200-disk-1,mp=/data", "mp3": "/tank/dflash,mp=/old"},
    ...                Settings.from_data(defaults()).container)
    'mp3'
    """
    mps = sorted((int(k[2:]), k) for k in config if k.startswith("mp") and k[2:].isdigit())
    for _, key in mps:
        source, opts = parse_mount(config[key])
        if source.startswith("/") and (
            source == container.data_dir_node.rstrip("/")
            or opts.get("mp", "").rstrip("/") == container.data_dir_ct
        ):
            return key
    return None


def data_mount_current(config: dict, key: str | None, container: ContainerSettings) -> bool:
    """The data mount entry mounts ``data_dir_node`` at ``data_dir_ct``."""
    if key is None:
        return False
    source, opts = parse_mount(config[key])
    target = opts.get("mp", "").rstrip("/")
    return source == container.data_dir_node and target == container.data_dir_ct


#: What pct takes for a key a container's config does not name (pve-container's defaults).
SET_DEFAULTS = {"onboot": "0", "swap": "512", "memory": "512"}


def settings_args(config: dict, container: ContainerSettings) -> list[str]:
    """`pct set` args converging an existing container's hotpluggable settings: cores, memory,
    swap, onboot, the data mount, and protection (only ever raised here: only rebuild=container
    lifts it). Hostname, network, features and the root disk are left as created.

    >>> from pvegpu.settings import Settings, defaults
    >>> s = Settings.from_data(defaults()).container
    >>> settings_args({"cores": "32", "memory": "262144", "swap": "0", "onboot": "1",
    ...                "protection": "1", "mp0": "/tank/dflash,mp=/data,backup=0"}, s)
    []
    >>> settings_args({"cores": "8", "memory": "262144", "swap": "0", "onboot": "1",
    ...                "mp0": "local-lvm:vm-200-disk-1,mp=/scratch"}, s)
    ['--cores', '32', '--protection', '1', '--mp1', '/tank/dflash,mp=/data,backup=0']
    """
    args: list[str] = []
    want = {
        "cores": str(container.cores),
        "memory": str(container.memory_mib),
        "swap": str(container.swap_mib),
        "onboot": "1" if container.onboot else "0",
    }
    for key, value in want.items():
        if config.get(key, SET_DEFAULTS.get(key)) != value:
            args += [f"--{key}", value]
    if container.protection and config.get("protection") != "1":
        args += ["--protection", "1"]
    mp = data_mount_key(config, container)
    if not data_mount_current(config, mp, container):
        mp = mp or f"mp{next(n for n in range(256) if f'mp{n}' not in config)}"
        args += [f"--{mp}", mount_spec(container)]
    return args


# --- node ---------------------------------------------------------------------------------------


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
    for path, text in wanted.items():
        if digests.get(path) != text_digest(text):
            yield StringCommand("mkdir", "-p", shlex.quote(path.rsplit("/", 1)[0]))
            yield write_file_command(path, text, mode="0644")
            wrote_unit = wrote_unit or path.endswith(".service")
    if wrote_unit:
        yield "systemctl daemon-reload"
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
        yield StringCommand("systemctl", "enable", "--now", *todo)


# --- container ----------------------------------------------------------------------------------


LOWERABLE = ("cores", "memory", "swap")
MIB = 1024 * 1024


def lowered(config: dict, args: list[str]) -> list[str]:
    """The resources ``args`` (`pct set` args) lower against ``config``: cores, memory, swap.

    >>> lowered({"cores": "16", "memory": "131072", "swap": "512"},
    ...         ["--cores", "32", "--memory", "262144", "--swap", "0"])
    ['swap']
    """
    pairs = dict(zip(args[::2], args[1::2]))
    defaults = {"swap": "512", "memory": "512", "cores": "0"}
    found = []
    for key in LOWERABLE:
        want, have = pairs.get(f"--{key}"), config.get(key, defaults[key])
        if want is not None and have.isdigit() and (int(have) == 0 or int(want) < int(have)):
            found.append(key)
    return found


def resized(args: list[str]) -> list[str]:
    """The resources (cores, memory, swap) ``args`` (`pct set` args) set.

    >>> resized(["--cores", "32", "--onboot", "1"])
    ['cores']
    """
    return [key for key in LOWERABLE if f"--{key}" in args[::2]]


def without(args: list[str], keys: list[str]) -> list[str]:
    """``args`` (`pct set` args, flag-value pairs) without the flags of ``keys``.

    >>> without(["--cores", "32", "--swap", "0"], ["swap"])
    ['--cores', '32']
    """
    pairs = list(zip(args[::2], args[1::2]))
    return [x for flag, value in pairs if flag[2:] not in keys for x in (flag, value)]


def memory_below_use(
    vmid: int, memory_mib: int, used: int | None, cgroup: str | None = "v2"
) -> str | None:
    """The refusal of a memory limit under what the container uses now: cgroup v2 takes
    memory.max without a check, then the kernel reclaims and OOM-kills inside the container;
    cgroup v1 (``cgroup="v1"``) reclaims what it can and then refuses the limit (EBUSY), so
    `pct set` fails.

    >>> memory_below_use(200, 1024, 3 * 1024 ** 3)[:60]
    'CT 200 uses 3072 MiB of memory now: ct_memory_mib=1024 would'
    """
    if used is None or memory_mib * MIB >= used:
        return None
    effect = (
        "make `pct set` fail (cgroup v1 refuses a limit below use, EBUSY, after reclaiming "
        "what it can)"
        if cgroup == "v1"
        else "have the kernel reclaim and OOM-kill in it"
    )
    return (
        f"CT {vmid} uses {used // MIB} MiB of memory now: ct_memory_mib={memory_mib} would "
        f"{effect}; set ct_memory_mib >= {-(-used // MIB)} (or free memory in the container "
        "first)"
    )


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


@operation()
def compile_toolchain(vmid: int, policy: RunPolicy | None = None):
    """Give the container what torch.compile's Triton compiles with: a C compiler and the
    headers of the Python its venvs are made from, from the container's own apt sources.

    .. code:: python

        proxmox.compile_toolchain(name="CT 200's C compiler and Python headers", vmid=200)

    Triton builds a small C extension at its first CUDA kernel (triton/runtime/build.py: ``$CC``,
    else gcc, else clang, with ``-I`` the Python headers); Proxmox's standard templates have
    neither, so a training that compiles flex_attention crash-loops without them.
    """
    _state, ct = node_state(vmid, "full")
    live = ct.get("live")
    if not ct.get("exists") or not live:
        return  # not created yet (preview) or not running
    toolchain = live.get("toolchain")
    packages = toolchain_packages(toolchain)
    if not packages:
        return
    # no wait for a running training: libpython3.X-dev is pinned to the installed stdlib's
    # version (install_toolchain_script), so the install never changes its interpreter
    line = (
        f"CT {vmid} lacks {toolchain_lacks(toolchain)}, which torch.compile (Triton) needs: "
        f"installing {' '.join(packages)} from the container's apt sources"
    )
    show(f"installs (apt) in CT {vmid}: {' '.join(packages)}", [line])
    yield note(line)
    script = install_toolchain_script(vmid, packages)
    yield StringCommand(f"pct exec {vmid} -- sh -c {shlex.quote(script)}")


@operation()
def driver_userspace(
    vmid: int, gpus: GpuSettings, progress_interval_s: int = 10, policy: RunPolicy | None = None
):
    """Install exactly the kernel module's version as NVIDIA userspace in the container, with
    the node's installer from ``gpus.installer_dir`` (nvidia_installer_dir), saying every
    ``progress_interval_s`` how long the installer has run.

    .. code:: python

        proxmox.driver_userspace(name="CT 200's NVIDIA userspace", vmid=200, gpus=s.gpus,
                                 progress_interval_s=s.policy.progress_interval_s)

    The target is the version the container itself sees in /proc/driver/nvidia/version (the
    node's module). libcuda, libnvidia-ml and nvidia-smi must match it to the patch level, or CUDA
    fails ("Driver/library version mismatch" / CUDA error 999). A mismatch is reported as a fact,
    then repaired with the same NVIDIA .run installer as the node's, with ``--no-kernel-modules``,
    after checking the utilities that installer needs (kmod's are installed with apt).
    """
    state, ct = node_state(vmid, "full")
    live = ct.get("live")
    if not ct.get("exists") or not live:
        return  # not created yet (preview) or not running: nothing to compare
    target = live.get("driver_version") or state.get("driver_version")
    if not target:
        return
    wrong = userspace_mismatch(live, target)
    if not wrong:
        return
    # under any training pvegpu did not start (deferred past the takeover with consent), and
    # under pvegpu's own unit while it holds a GPU (its libcuda would change under it); a unit
    # of ours that holds none cannot be using CUDA through libraries that do not match the
    # node's module (e.g. it came up at the boot of this very restart)
    trainers = running_here(host, vmid)
    consent = bool(policy and policy.restart_training)
    ours = [t for t in trainers if t.ours and t.gpus]
    blockers = others(trainers) or ([] if consent else ours)
    if blockers:
        change = f"the NVIDIA userspace reinstall ({', '.join(wrong)})"
        wait_for(host, vmid, change, blockers, consent)
        return
    installer = state.get("installer") if state.get("driver_version") == target else None
    if not installer:
        has = ", ".join(wrong)
        yield from failure(missing_installer_line(vmid, target, has, gpus.installer_dir))
        return
    # nvidia-installer aborts without these, even with --no-kernel-modules: check them first
    # (read by the same container probe), install kmod's when only those are missing.
    action, missing = plan_tools(live.get("missing_tools"))
    show(
        f"installs NVIDIA userspace {target} in CT {vmid} (now: {', '.join(wrong)})",
        ["kmod (apt), which the NVIDIA installer needs"] if action == "install_kmod" else [],
    )
    if action == "fail":
        yield from failure(missing_tools_line(vmid, missing))
        return
    if action == "install_kmod":
        yield note(
            f"CT {vmid} lacks {', '.join(missing)} (kmod), which the NVIDIA installer "
            f"needs: installing kmod from the container's apt sources"
        )
        yield StringCommand(
            f"pct exec {vmid} -- sh -c {shlex.quote(install_kmod_script(vmid, missing))}"
        )
    yield note(f"CT {vmid}: kernel module {target}, userspace {', '.join(wrong)}: reinstalling")
    yield with_progress(
        installer_command(vmid, installer),
        Progress(f"CT {vmid}: installing NVIDIA userspace {target}", progress_interval_s),
    )


def userspace_mismatch(live: dict, target: str) -> list[str]:
    """What of the container's NVIDIA userspace (its own view, ``live``) is not ``target``.

    >>> userspace_mismatch({"libs": {"libcuda.so.1": "580.95.05"}, "nvidia_smi": True},
    ...                    "580.95.05")
    ['libnvidia-ml missing']
    """
    libs = live.get("libs", {})
    found = {"libcuda": libs.get("libcuda.so.1"), "libnvidia-ml": libs.get("libnvidia-ml.so.1")}
    wrong = [f"{name} {ver or 'missing'}" for name, ver in found.items() if ver != target]
    if not live.get("nvidia_smi"):
        wrong.append("nvidia-smi missing")
    return wrong


def installer_command(vmid: int, installer: str) -> StringCommand:
    """Copy the node's ``installer`` (.run) into the container and run it for the userspace
    only, deleting the copy afterwards."""
    target_path = f"/root/{installer.rsplit('/', 1)[-1]}"
    script = (
        f"test -s {target_path} && sh {target_path} --silent --no-kernel-modules; rc=$?; "
        f"rm -f {target_path}; exit $rc"
    )
    # pct push exits 0 even when the copy fails inside the container: the script checks it.
    return StringCommand(
        f"pct push {vmid} {shlex.quote(installer)} {shlex.quote(target_path)} && "
        f"pct exec {vmid} -- sh -c {shlex.quote(script)}"
    )
