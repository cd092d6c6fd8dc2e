"""Boot persistence on the node: NVIDIA modules loaded at boot, device nodes created before
Proxmox starts its guests, and nvidia-persistenced.

Rendered from templates/ (``modules-load-nvidia.conf.j2``, ``nvidia-uvm-init.service.j2``,
``nvidia-persistenced.service.j2``) with values read from the node's facts.

>>> print(render_modules(("nvidia-modeset",)), end="")
# Rendered by pvegpu from templates/modules-load-nvidia.conf.j2: NVIDIA modules loaded at boot
# (systemd-modules-load), so the device majors exist before GPU containers start.
nvidia
nvidia_uvm
nvidia_modeset
"""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from ..paths import TEMPLATES
from .template_cache import with_cache

MODULES_LOAD = "/etc/modules-load.d/nvidia.conf"
UVM_UNIT = "nvidia-uvm-init.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
#: NVIDIA Fabric Manager's unit (package nvidia-fabricmanager-<branch>): NVSwitch boards need it
#: running before CUDA works.
FABRICMANAGER_UNIT = "nvidia-fabricmanager.service"
#: nvidia-smi's fabric.state of a GPU still registering with its NVSwitch fabric (NVML
#: nvmlGpuFabricState_t NOT_STARTED, IN_PROGRESS): the boot unit waits for these.
FABRIC_REGISTERING = ("Not Started", "In Progress")
#: fabric.state once registration ended; fabric.status then says how (FABRIC_SUCCESS, else an
#: NVML error such as "Insufficient Resources": the registration failed).
FABRIC_COMPLETED = "Completed"
FABRIC_SUCCESS = "Success"
#: every fabric.state of a GPU on a fabric; any other answer ("Not Supported", N/A, [N/A],
#: [Not Supported]) means no fabric to wait for.
FABRIC_STATES = (*FABRIC_REGISTERING, FABRIC_COMPLETED)
UNIT_DIR = "/etc/systemd/system"


@functools.lru_cache(maxsize=8)  # one Environment per run: it keeps the compiled templates
def _env(templates: Path = TEMPLATES) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return with_cache(env)  # compiled templates kept between runs


def render_modules(extras=()) -> str:
    """/etc/modules-load.d/nvidia.conf: nvidia and nvidia_uvm (+ nvidia_modeset if passed)."""
    modules = ["nvidia", "nvidia_uvm"] + (["nvidia_modeset"] if "nvidia-modeset" in extras else [])
    return _env().get_template("modules-load-nvidia.conf.j2").render(modules=modules)


def uvm_init_commands(gpu_minors, extras=()) -> list[str]:
    """Arguments of the boot-time `nvidia-modprobe` calls: every GPU node and nvidiactl (255),
    then the uvm nodes (with ``-u`` a ``-c N`` is a uvm base minor, so it is a second call).

    >>> uvm_init_commands([0, 1, 2])
    ['-c 0 -c 1 -c 2 -c 255', '-u -c 0']
    """
    nodes = [f"-c {m}" for m in sorted(set(gpu_minors))] + ["-c 255"]
    if "nvidia-modeset" in extras:
        nodes.append("-m")
    return [" ".join(nodes), "-u -c 0"]


def fabric_answer(row: dict) -> str:
    """What one GPU's fabric.state and fabric.status mean, the same for the node probe, the
    preflight and the boot unit's wait: "none" (no fabric to wait for), "registering",
    "registered" or "failed" (Completed with an error status).

    >>> [fabric_answer({"state": s, "status": "N/A"}) for s in ("Not Supported", "[N/A]")]
    ['none', 'none']
    >>> fabric_answer({"state": "Completed", "status": "Insufficient Resources"})
    'failed'
    """
    state = row.get("state")
    if state in FABRIC_REGISTERING:
        return "registering"
    if state == FABRIC_COMPLETED:
        return "registered" if row.get("status") == FABRIC_SUCCESS else "failed"
    return "none"


def on_fabric(state: dict) -> bool:
    """Whether the node is an NVSwitch board: its GPUs report a fabric (the node read's
    ``fabric``), or the nvswitch module lists NVSwitches (``nvswitches``: pre-Hopper boards
    print N/A for fabric.state).

    >>> on_fabric({"fabric": [{"state": "Completed"}]}), on_fabric({"fabric": [{"state": "N/A"}]})
    (True, False)
    >>> on_fabric({"fabric": [{"state": "N/A"}], "nvswitches": ["0000:05:00.0"]})
    True
    """
    rows = state.get("fabric") or []
    return bool(state.get("nvswitches")) or any(fabric_answer(r) != "none" for r in rows)


#: How long the boot unit waits, at most, for the GPUs to register with the NVSwitch fabric
#: (Fabric Manager typically takes well under a minute; the unit fails after this).
FABRIC_WAIT_S = 300


def render_uvm_unit(
    gpu_minors,
    nvidia_modprobe="/usr/bin/nvidia-modprobe",
    extras=(),
    fabric=False,
    nvidia_smi="/usr/bin/nvidia-smi",
    fabric_wait_s=FABRIC_WAIT_S,
) -> str:
    """The boot unit making the device nodes before pve-guests; on an NVSwitch board
    (``fabric``) also ordered after, and pulling in, nvidia-fabricmanager.service, and waiting
    (at most ``fabric_wait_s``) until no GPU is still registering with the fabric: Fabric
    Manager's unit is up before the GPUs are, and CUDA fails until then. The wait reads
    fabric.state as :func:`fabric_answer` does: a failed registration fails the unit at once,
    and an answer without a fabric (or an nvidia-smi without the field) ends the wait.

    >>> "fabric.state,fabric.status" in render_uvm_unit([0, 1], fabric=True)
    True
    """
    minors = sorted(set(gpu_minors))
    nodes = f"nvidia{minors[0]}-{minors[-1]}" if len(minors) > 1 else f"nvidia{(minors or [0])[0]}"
    return (
        _env()
        .get_template("nvidia-uvm-init.service.j2")
        .render(
            nvidia_modprobe=nvidia_modprobe,
            commands=uvm_init_commands(minors, extras),
            gpu_nodes=nodes,
            fabric=fabric,
            nvidia_smi=nvidia_smi,
            fabric_wait_s=int(fabric_wait_s),
            registering="|".join(FABRIC_REGISTERING),
            completed=FABRIC_COMPLETED,
            success=FABRIC_SUCCESS,
        )
    )


def render_persistenced_unit(nvidia_persistenced="/usr/bin/nvidia-persistenced") -> str:
    return (
        _env()
        .get_template("nvidia-persistenced.service.j2")
        .render(nvidia_persistenced=nvidia_persistenced)
    )


def boot_files() -> list[str]:
    """Paths whose digests the node fact reports for the boot-persistence operation."""
    return [MODULES_LOAD, f"{UNIT_DIR}/{UVM_UNIT}", f"{UNIT_DIR}/{PERSISTENCED_UNIT}"]


def manages_persistenced(unit: dict) -> bool:
    """Whether pvegpu writes nvidia-persistenced.service: only when no other unit file exists
    (Debian's nvidia-persistenced package ships one in /lib/systemd/system; then it is only
    enabled).

    >>> manages_persistenced({"paths": []})
    True
    >>> manages_persistenced({"paths": ["/lib/systemd/system/x"]})
    False
    """
    ours = f"{UNIT_DIR}/{PERSISTENCED_UNIT}"
    return all(p == ours for p in unit.get("paths", []))


def persistenced_left_alone(state: dict) -> str | None:
    """Why pvegpu leaves nvidia-persistenced alone on this node (neither writes, enables nor
    starts its unit), else None: a daemon already runs outside systemd (a second one would fail
    to start, and `enable --now` with it), or the unit file at pvegpu's path is an admin's own
    (no pvegpu marker: never overwritten).

    >>> persistenced_left_alone({"persistenced": {"outside_pids": [812], "unit_ours": None}})
    ... # doctest: +NORMALIZE_WHITESPACE
    'nvidia-persistenced already runs outside systemd (pid 812): left alone (pvegpu neither
    writes nor starts nvidia-persistenced.service)'
    >>> persistenced_left_alone({"persistenced": {"outside_pids": [], "unit_ours": True}}) is None
    True
    """
    found = state.get("persistenced") or {}
    pids = found.get("outside_pids") or []
    if pids:
        return (
            f"nvidia-persistenced already runs outside systemd (pid {', '.join(map(str, pids))}): "
            f"left alone (pvegpu neither writes nor starts {PERSISTENCED_UNIT})"
        )
    if found.get("unit_ours") is False:
        return (
            f"{UNIT_DIR}/{PERSISTENCED_UNIT} is not pvegpu's (no pvegpu marker on its first "
            "line): left alone (never rewritten, enabled or started by pvegpu)"
        )
    return None
