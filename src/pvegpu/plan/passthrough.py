"""Which NVIDIA device nodes a training container needs, and the config lines that pass them.

Two modes, chosen by what the node supports:

- ``dev``: ``devN: /dev/nvidia0`` entries (pve-container >= 5.0.7, PVE 8.1+), set with `pct set`;
  Proxmox re-reads each node's major:minor at every container start.
- ``lxc``: raw ``lxc.cgroup2.devices.allow`` + ``lxc.mount.entry ... bind,optional,create=file``
  lines for older pve-container, with majors read from the node's /proc/devices (uvm and caps
  majors are dynamic). `pct set` cannot write ``lxc.*`` keys, so these lines are edited in the
  config file (:mod:`pvegpu.plan.lxc_raw`).

>>> wanted_devices({"/dev/nvidia0": {}, "/dev/nvidiactl": {}, "/dev/nvidia-uvm": {},
...                 "/dev/nvidia-uvm-tools": {}, "/dev/nvidia-modeset": {}}, ())
['/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .lxc_raw import (
    DEV_KEY,
    is_our_raw_line,
    raw_bound_paths,
    raw_lines_cover,
    raw_lines_match,
    raw_lxc_lines,
    rewrite_config,
)
from .running_training import UNKNOWN, Trainer, others
from .unit import RUNNING

GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
# NVIDIA devices a user may pass beyond pvegpu's set: kept whoever added them
USER_EXTRA = re.compile(r"^/dev/nvidia-(modeset|caps/.+)$")
CORE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def wanted_devices(
    node_devices: dict,
    extras: tuple[str, ...] | list[str],
    gpu_minors: list[int] | tuple[int, ...] | None = None,
) -> list[str]:
    """Device paths to pass: every GPU node (by minor), the control/uvm nodes, chosen extras.

    GPU nodes come from the GPUs' minor numbers (nvidia-smi) and from the /dev/nvidiaN nodes
    present; the uvm nodes are wanted even when missing on the node (nvidia-modprobe creates them).

    >>> wanted_devices({}, (), gpu_minors=[1, 0])
    ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
    """
    minors = {int(m.group(1)) for p in node_devices if (m := GPU_NODE.match(p))}
    minors |= {int(m) for m in (gpu_minors or []) if m is not None}
    paths = [f"/dev/nvidia{m}" for m in sorted(minors)] + list(CORE_NODES)
    if "nvidia-modeset" in extras:
        paths.append("/dev/nvidia-modeset")
    if "nvidia-caps" in extras:
        paths += sorted(p for p in node_devices if p.startswith("/dev/nvidia-caps/"))
    return paths


def expected_numbers(path: str, node_devices: dict, majors: dict) -> tuple[int, int] | None:
    """major:minor a device path has (or will have once nvidia-modprobe creates it) on the node.

    >>> expected_numbers("/dev/nvidia-uvm-tools", {}, {"nvidia-uvm": 509})
    (509, 1)
    """
    if path in node_devices:
        return node_devices[path]["major"], node_devices[path]["minor"]
    nv = majors.get("nvidia")
    m = GPU_NODE.match(path)
    if m:
        return (nv, int(m.group(1))) if nv is not None else None
    fixed = {
        "/dev/nvidiactl": ("nvidia", 255),
        "/dev/nvidia-modeset": ("nvidia", 254),
        "/dev/nvidia-uvm": ("nvidia-uvm", 0),
        "/dev/nvidia-uvm-tools": ("nvidia-uvm", 1),
    }
    if path in fixed:
        name, minor = fixed[path]
        return (majors[name], minor) if name in majors else None
    return None


def modprobe_args(paths: list[str], node_devices: dict) -> list[list[str]]:
    """`nvidia-modprobe` invocations creating the wanted nodes missing on the node ([] if none).

    A devN path that does not exist blocks `pct set` and `pct start`; raw bind entries are
    ``optional`` and would silently leave the container without the device. As in NVIDIA's
    nvidia-modprobe.c, ``-c N`` makes /dev/nvidiaN (255: nvidiactl), but with ``-u`` every ``-c N``
    is a uvm base minor (``-u -c 0``: nvidia-uvm and nvidia-uvm-tools), so they are two calls.

    >>> modprobe_args(["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"],
    ...               {"/dev/nvidia0": {}})
    [['-c', '1', '-c', '255'], ['-u', '-c', '0']]
    """
    missing = [p for p in paths if p not in node_devices]
    calls: list[list[str]] = []
    nodes: list[str] = []
    for path in missing:
        m = GPU_NODE.match(path)
        if m:
            nodes += ["-c", m.group(1)]
    if "/dev/nvidiactl" in missing:
        nodes += ["-c", "255"]
    if "/dev/nvidia-modeset" in missing:
        nodes.append("-m")
    if nodes:
        calls.append(nodes)
    if any(p.startswith("/dev/nvidia-uvm") for p in missing):
        calls.append(["-u", "-c", "0"])
    return calls


def current_dev_entries(config: dict) -> dict[int, str]:
    """``{N: path}`` of the devN entries in a parsed container config."""
    entries = {}
    for key, value in config.items():
        m = DEV_KEY.match(key)
        if m:
            entries[int(m.group(1))] = value.split(",")[0]
    return entries


def dev_set_args(config: dict, paths: list[str]) -> list[str]:
    """`pct set` arguments that make the devN entries exactly ``paths`` ([] when they already are).

    Non-NVIDIA devN entries are kept; NVIDIA entries still wanted keep their index (an edited
    entry waits for a restart even where an added one is hot-plugged), new paths take indices no
    entry uses, NVIDIA ones not wanted any more are deleted.

    >>> dev_set_args({"dev0": "/dev/nvidia0"}, ["/dev/nvidia0", "/dev/nvidiactl"])
    ['--dev1', '/dev/nvidiactl']
    >>> dev_set_args({"dev0": "/dev/nvidia0", "dev1": "/dev/nvidia1"}, ["/dev/nvidia0"])
    ['--delete', 'dev1']
    >>> dev_set_args({"dev0": "/dev/nvidia-uvm"}, ["/dev/nvidia0", "/dev/nvidia-uvm"])
    ['--dev1', '/dev/nvidia0']
    """
    current = current_dev_entries(config)
    ours = {n: p for n, p in current.items() if p.startswith("/dev/nvidia")}
    if sorted(ours.values()) == sorted(paths) and len(ours) == len(paths):
        return []
    kept: dict[int, str] = {}
    for n, path in sorted(ours.items()):
        if path in paths and path not in kept.values():
            kept[n] = path
    free = (n for n in range(0, 256) if n not in current)
    args: list[str] = []
    for path in paths:
        if path not in kept.values():
            args += [f"--dev{next(free)}", path]
    stale = sorted(n for n in ours if n not in kept)
    if stale:
        args += ["--delete", ",".join(f"dev{n}" for n in stale)]
    return args


def hotplug_additions(config: dict, set_args: list[str]) -> list[str] | None:
    """The paths ``set_args`` only adds as new devN keys (what pve-container >= 6.0.4 hot-plugs
    into a running container), or None when it also edits or deletes an entry (those wait for
    the next start).

    >>> hotplug_additions({"dev0": "/dev/nvidia0"}, ["--dev1", "/dev/nvidia1"])
    ['/dev/nvidia1']
    >>> hotplug_additions({"dev0": "/dev/nvidia0"}, ["--dev0", "/dev/nvidia1"]) is None
    True
    """
    added = []
    it = iter(set_args)
    for flag in it:
        value = next(it, "")
        if flag == "--delete" or flag[2:] in config:
            return None
        added.append(value.split(",")[0])
    return added


def set_calls(set_args: list[str], hotplug: bool) -> list[list[str]]:
    """The `pct set` calls for ``set_args``: one devN per call where the node hot-plugs them
    (``hotplug``), else one call. pve-container >= 6.0.4 writes no config when one hot-plug of
    a call fails, while the devices hot-plugged before it stay in the container: one per call
    keeps config and container in step.

    >>> set_calls(["--dev1", "/dev/nvidia1", "--dev2", "/dev/nvidia2"], True)
    [['--dev1', '/dev/nvidia1'], ['--dev2', '/dev/nvidia2']]
    >>> set_calls(["--dev1", "/dev/nvidia1", "--delete", "dev0"], False)
    [['--dev1', '/dev/nvidia1', '--delete', 'dev0']]
    """
    if not set_args:
        return []
    if not hotplug:
        return [set_args]
    return [set_args[i : i + 2] for i in range(0, len(set_args), 2)]


def graceful_shutdown(vmid: int, unit: str, stop_timeout_s: int) -> str:
    """The shell line that shuts container ``vmid`` down without cutting a checkpoint: pvegpu's
    training ``unit``, if in any running state (``deactivating`` included: a stop in progress is
    joined), stopped first with `systemctl stop` (its own TimeoutStopSec), then `pct shutdown`
    with a timeout longer than that and no ``--forceStop``: a container that does not stop in
    time fails the step (pct: "container did not stop") rather than being killed.

    >>> line = graceful_shutdown(200, "t.service", 900)
    >>> "pct exec 200 -- systemctl stop t.service" in line, line.endswith("--timeout 960")
    (True, True)
    >>> "forceStop" in line or "pct stop" in line
    False
    """
    u = shlex.quote(unit)
    return (
        f"case $(pct exec {vmid} -- systemctl show -p ActiveState --value {u} 2>/dev/null) in "
        f"active|activating|reloading|deactivating) pct exec {vmid} -- systemctl stop {u} "
        f"|| exit 1;; esac; pct shutdown {vmid} --timeout {stop_timeout_s + 60}"
    )


def hotplug_shell(
    vmid: int, args: list[str], blocker: str | None, shutdown: str | None = None
) -> str:
    """One devN hot-plug (`pct set <vmid> --devN <path>`) as a shell line that treats a failed
    hot-plug as "restart needed", never as done: pct then wrote nothing and the device is not in
    the container, so the container is shut down (``shutdown``: :func:`graceful_shutdown`), the
    entry set (a stopped container takes it into its config) and started; where a restart is not
    allowed (``blocker``: the training runs), the host fails with that line instead.

    >>> print(hotplug_shell(200, ["--dev5", "/dev/nvidia5"], None)[:46])
    pct set 200 --dev5 /dev/nvidia5 || { echo 'hot
    >>> "exit 1" in hotplug_shell(200, ["--dev5", "/dev/nvidia5"], "CT 200 must restart ...")
    True
    """
    call = " ".join(["pct", "set", str(vmid), *(shlex.quote(a) for a in args)])
    if blocker is not None:
        return f"{call} || {{ echo {shlex.quote(blocker)} >&2; exit 1; }}"
    said = f"{hotplug_failure(args)}: restarting CT {vmid} to pass it through"
    down = f"{{ {shutdown}; }}" if shutdown else f"pct shutdown {vmid} --timeout 960"
    restart = f"{down} && {call} && pct start {vmid}"
    return f"{call} || {{ echo {shlex.quote(said)} >&2; {restart}; }}"


def hotplug_failure(args: list[str]) -> str:
    """The restart reason a failed hot-plug of ``args`` (`--devN <path>`) gives.

    >>> hotplug_failure(["--dev5", "/dev/nvidia5,mode=0666"])
    'hot-plug of /dev/nvidia5 (dev5) failed'
    """
    return f"hot-plug of {args[1].split(',')[0]} ({args[0][2:]}) failed"


# --- the whole plan ------------------------------------------------------------------------------

OUR_DEV = re.compile(r"^/dev/nvidia")


def effective_config(ct: dict) -> dict:
    """The keys the next start uses: the main section with [pve:pending] applied."""
    config = dict(ct.get("config", {}))
    config.update(ct.get("pending", {}))
    for key in ct.get("pending_delete", []):
        config.pop(key, None)
    return config


def pending_ours(ct: dict) -> list[str]:
    """Pending devN changes of NVIDIA devices (they apply only at the next start)."""
    keys = []
    for key, value in ct.get("pending", {}).items():
        if DEV_KEY.match(key) and OUR_DEV.match(value):
            keys.append(key)
    for key in ct.get("pending_delete", []):
        if DEV_KEY.match(key) and OUR_DEV.match(ct.get("config", {}).get(key, "")):
            keys.append(key)
    return sorted(keys)


def stale_live_devices(
    paths: list[str], node_devices: dict, majors: dict, live: dict | None
) -> list[str]:
    """How the running container's NVIDIA nodes differ from the node's (devices are fixed at
    `pct start`, so a uvm module reloaded with a new major leaves the container with dead nodes).

    >>> stale_live_devices(["/dev/nvidia-uvm"], {}, {"nvidia-uvm": 509},
    ...                    {"devices": {"/dev/nvidia-uvm": {"major": 508, "minor": 0}}})
    ['/dev/nvidia-uvm is 508:0 in the container, 509:0 on the node']
    """
    if not live:
        return []
    have = {p: d for p, d in live.get("devices", {}).items() if OUR_DEV.match(p)}
    problems = []
    for path in paths:
        want = expected_numbers(path, node_devices, majors)
        got = have.get(path)
        if got is None:
            problems.append(f"{path} is missing in the container")
        elif want is not None and (got["major"], got["minor"]) != tuple(want):
            problems.append(
                f"{path} is {got['major']}:{got['minor']} in the container, {want[0]}:{want[1]} on "
                "the node"
            )
    for path in sorted(set(have) - set(paths)):
        problems.append(f"{path} is in the container but no longer passed through")
    return problems


@dataclass
class Plan:
    """What `gpu_passthrough` does to one container, computed from the node's facts alone (so the
    preflight and the operation agree)."""

    mode: str
    paths: list[str]
    modprobe: list[list[str]] = field(
        default_factory=list
    )  # nvidia-modprobe calls, [] = none missing
    set_args: list[str] = field(default_factory=list)  # `pct set` args (dev mode)
    new_text: str | None = None  # rewritten config file (raw lines / switching modes)
    pending: list[str] = field(default_factory=list)  # our devN changes waiting for a start
    stale: list[str] = field(default_factory=list)  # live device differences in a running CT
    running: bool = False
    hotplug: list[str] = field(default_factory=list)  # added devN paths a running CT gets at once

    @property
    def changes_config(self) -> bool:
        return bool(self.set_args) or self.new_text is not None

    @property
    def needs_start_for_config(self) -> bool:
        """A config change that a running container only sees after a restart (everything but
        devN additions that the node hot-plugs)."""
        return self.new_text is not None or (bool(self.set_args) and not self.hotplug)

    @property
    def restart_reasons(self) -> list[str]:
        """Why a running container must be restarted (stop + start) to get its GPUs right."""
        if not self.running:
            return []
        reasons = []
        if self.needs_start_for_config:
            reasons.append("its GPU passthrough config changes")
        if self.pending:
            reasons.append(f"pending {', '.join(self.pending)} apply only at start")
        return reasons + self.stale


def restart_blocker(
    vmid: int,
    unit: str,
    live: dict | None,
    reasons: list[str],
    trainers: list[Trainer] | None = None,
) -> str | None:
    """Why a container that must restart for ``reasons`` may not be restarted now: a training
    runs in it (``trainers``, :mod:`pvegpu.plan.running_training`; without them, its training
    unit's state in ``live``), or whether it runs could not be read (None: it may;
    ``restart_training`` skips this). The one wording for the preflight and the passthrough
    operation.

    >>> restart_blocker(200, "t.service", {"unit_active": "active"}, ["x"])[:46]
    'CT 200 must restart to get its GPUs right (x),'
    >>> restart_blocker(200, "t.service", {"unit_active": "inactive"}, ["x"]) is None
    True
    >>> restart_blocker(200, "t.service", {"unit_active": "inactive"}, ["x"],
    ...                 [Trainer(42, "python t.py", "started by hand")]).split(", but ")[1][:57]
    'the running training (pid 42, started by hand) runs in it'
    """
    if live is None:
        return (
            f"CT {vmid} must restart ({'; '.join(reasons)}), but whether {unit} is running "
            f"in it could not be read: check `pct exec {vmid} -- systemctl is-active {unit}`, "
            f"or pass --data restart_training=true"
        )
    foreign = others(trainers or [])
    unknown = [t for t in foreign if t.kind == UNKNOWN]
    if unknown:  # fail closed: consent cannot cover what could not be seen
        return (
            f"CT {vmid} must restart to get its GPUs right ({'; '.join(reasons)}), but "
            f"whether a training runs in it is unknown ({unknown[0].reason}): nothing there "
            f"is restarted until it can be read"
        )
    if foreign:
        return (
            f"CT {vmid} must restart to get its GPUs right ({'; '.join(reasons)}), but "
            f"{foreign[0].what} ({foreign[0].named}) runs in it: stop it first, or pass --data "
            f"restart_training=true"
        )
    if live.get("unit_active") in RUNNING:
        return (
            f"CT {vmid} must restart to get its GPUs right ({'; '.join(reasons)}), but "
            f"{unit} is running in it: stop the training first, or pass --data "
            f"restart_training=true to restart it anyway"
        )
    return None


def version_tuple(text: str | None) -> tuple[int, int, int]:
    """The first three numbers of a Debian package version, zero-padded.

    >>> version_tuple("5.0.7"), version_tuple("8.2"), version_tuple("4.4-4"), version_tuple(None)
    ((5, 0, 7), (8, 2, 0), (4, 4, 4), (0, 0, 0))
    """
    parts = [int(x) for x in re.findall(r"\d+", text or "")[:3]] + [0, 0, 0]
    return parts[0], parts[1], parts[2]


# pve-container 5.0.7 (2023-11-21, commit ce1976b "Add device passthrough") brought devN; PVE 8.1
# shipped it. pve-manager only depends on a pve-container with devN from 8.2.4 (>= 5.1.11).
DEVN_PVE_CONTAINER = (5, 0, 7)
DEVN_PVE_MANAGER = (8, 2, 4)


def devn_supported(state: dict) -> bool:
    """Whether the node's pct takes ``devN`` entries: by its pve-container version; by the
    pve-manager whose dependencies guarantee one when pve-container is unknown.

    >>> devn_supported({"pve_version": "8.1.4", "pve_container": "5.0.8"})
    True
    >>> devn_supported({"pve_version": "8.0.4", "pve_container": "5.0.4"})
    False
    >>> devn_supported({"pve_version": "8.2.2"}), devn_supported({"pve_version": "8.4.1"})
    (False, True)
    """
    if state.get("pve_container"):
        return version_tuple(state["pve_container"]) >= DEVN_PVE_CONTAINER
    return version_tuple(state.get("pve_version")) >= DEVN_PVE_MANAGER


def select_mode(setting: str, state: dict) -> str:
    """``dev`` where the node's pct takes devN entries, ``lxc`` before, unless forced.

    >>> select_mode("auto", {"pve_version": "8.1.4", "pve_container": "5.0.8"})
    'dev'
    >>> select_mode("auto", {"pve_container": "5.0.6"}), select_mode("lxc", {"pve_version": "9.1"})
    ('lxc', 'lxc')
    """
    if setting != "auto":
        return setting
    return "dev" if devn_supported(state) else "lxc"


def device_hotplug(state: dict) -> bool:
    """Whether the node hot-plugs a devN added to a running container: pve-container >= 6.0.4
    (commit "implement device hotplug", PVE 9); by the PVE major when pve-container is unknown.

    >>> device_hotplug({"pve_container": "6.0.18"}), device_hotplug({"pve_container": "5.2.6"})
    (True, False)
    >>> device_hotplug({"pve_version": "9.0.3"}), device_hotplug({"pve_version": "8.4.1"})
    (True, False)
    """
    container = re.findall(r"\d+", state.get("pve_container") or "")
    if len(container) >= 3:
        return tuple(int(x) for x in container[:3]) >= (6, 0, 4)
    major = re.match(r"(\d+)", state.get("pve_version") or "")
    return major is not None and int(major.group(1)) >= 9


def plan_passthrough(setting: str, extras, state: dict, ct: dict) -> Plan:
    """The passthrough changes a container needs against the node's facts.

    ``state`` is the NodeState document, ``ct`` its entry for the container (with ``live`` when
    the container runs and was asked in full).
    """
    devices = state.get("devices", {})
    majors = state.get("majors", {})
    minors = [g.get("minor") for g in state.get("gpus") or [] if g.get("minor") is not None]
    raw = ct.get("raw_lxc", [])
    config = effective_config(ct)
    # NVIDIA devices the user passed beyond ours (nvidia-modeset, nvidia-caps), by raw lines or
    # devN entries, stay passed (a devN one while the node has it: a missing path blocks a start)
    paths = wanted_devices(devices, extras, gpu_minors=minors)
    paths += [p for p in raw_bound_paths(raw) if p not in paths and not GPU_NODE.match(p)]
    paths += [
        p
        for p in current_dev_entries(config).values()
        if p not in paths and USER_EXTRA.match(p) and p in devices
    ]
    mode = select_mode(setting, state)
    plan = Plan(
        mode=mode,
        paths=paths,
        modprobe=modprobe_args(paths, devices),
        running=ct.get("status") == "running",
    )
    text = ct.get("text", "")
    dev_ours = any(DEV_KEY.match(k) and OUR_DEV.match(v) for k, v in config.items())
    numbers = {p: expected_numbers(p, devices, majors) for p in paths}
    if plan.running and not dev_ours and raw_lines_cover(raw, numbers):
        pass  # raw lines already give a running container every device: no forced conversion
    elif mode == "dev":
        plan.set_args = dev_set_args(config, paths)
        if any(is_our_raw_line(k, v, majors) for k, v in raw):
            plan.new_text = rewrite_config(text, [], majors, False)
        plan.pending = pending_ours(ct)
        if plan.running and plan.set_args and device_hotplug(state):
            plan.hotplug = hotplug_additions(ct.get("config", {}), plan.set_args) or []
    else:
        lines = raw_lxc_lines(paths, devices, majors)
        dev_left = any(DEV_KEY.match(k) and OUR_DEV.match(v) for k, v in config.items())
        if not raw_lines_match(raw, lines, majors) or dev_left:
            plan.new_text = rewrite_config(text, lines, majors, True)
    if plan.running:
        stale = stale_live_devices(paths, devices, majors, ct.get("live"))
        # hot-plugged nodes appear in the container with the `pct set`
        arriving = {f"{p} is missing in the container" for p in plan.hotplug}
        plan.stale = [line for line in stale if line not in arriving]
    return plan
