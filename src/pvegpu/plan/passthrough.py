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
from dataclasses import dataclass, field

from .hotplug import (
    graceful_shutdown as graceful_shutdown,
)
from .hotplug import (
    hotplug_additions as hotplug_additions,
)
from .hotplug import (
    hotplug_failure as hotplug_failure,
)
from .hotplug import (
    hotplug_shell as hotplug_shell,
)
from .hotplug import (
    set_calls as set_calls,
)
from .lxc_raw import (
    DEV_KEY,
    is_our_raw_line,
    raw_bound_paths,
    raw_lines_cover,
    raw_lines_match,
    raw_lxc_lines,
    rewrite_config,
)
from .pve_versions import (
    DEVN_PVE_CONTAINER as DEVN_PVE_CONTAINER,
)
from .pve_versions import (
    DEVN_PVE_MANAGER as DEVN_PVE_MANAGER,
)
from .pve_versions import (
    device_hotplug as device_hotplug,
)
from .pve_versions import (
    devn_supported as devn_supported,
)
from .pve_versions import (
    select_mode as select_mode,
)
from .pve_versions import (
    version_tuple as version_tuple,
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
