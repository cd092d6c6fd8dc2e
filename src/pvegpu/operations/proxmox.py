"""Node-side operations on Proxmox containers: lifecycle, GPU passthrough, driver parity.

Each reads the node's composite ``NodeState`` fact when it runs and yields commands only when
the container differs from the desired state.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from ..facts.proxmox import NodeState
from ..passthrough import (
    dev_set_args,
    raw_lines_match,
    raw_lxc_lines,
    rewrite_config,
    wanted_devices,
)
from ..settings import Settings
from ..variants import driver_tuple
from .util import fail, write_file_command


def node_state(settings: Settings, vmid: int) -> tuple[dict, dict]:
    state = host.get_fact(
        NodeState, vmids=[vmid], installer_dir=settings.nvidia_installer_dir,
        data_dir=settings.data_dir_node,
    )
    return state, state.get("containers", {}).get(str(vmid), {})


def wait_exec(vmid: int) -> StringCommand:
    """Wait until `pct exec` answers in a freshly started container (its init may lag)."""
    return StringCommand(
        f"i=0; until pct exec {vmid} -- true >/dev/null 2>&1; do i=$((i+1)); "
        f"[ $i -ge 60 ] && echo 'CT {vmid} started but pct exec does not answer after 60 s' >&2 "
        f"&& exit 1; sleep 1; done"
    )


def create_args(settings: Settings, vmid: int) -> list[str]:
    """`pct create` argv. ``--unprivileged`` is always explicit: its default flipped in PVE 9."""
    return [
        "pct", "create", str(vmid), settings.ct_template,
        "--hostname", settings.ct_hostname,
        "--cores", str(settings.ct_cores),
        "--memory", str(settings.ct_memory_mib),
        "--swap", str(settings.ct_swap_mib),
        "--rootfs", settings.ct_rootfs,
        "--net0", settings.ct_net0,
        "--unprivileged", "1" if settings.ct_unprivileged else "0",
        "--features", settings.ct_features,
        "--mp0", f"{settings.data_dir_node},mp={settings.data_dir_ct},backup=0",
        "--onboot", "1" if settings.ct_onboot else "0",
        "--protection", "1" if settings.ct_protection else "0",
        "--ostype", "debian",
    ]


@operation()
def container_present(vmid: int, settings: Settings):
    """Create the container from the configured template when it does not exist.

    .. code:: python

        proxmox.container_present(name="Create CT 200 when missing", vmid=200, settings=s)
    """
    state, ct = node_state(settings, vmid)
    if ct.get("exists"):
        return
    template_file = settings.ct_template.split("/")[-1]
    if state and template_file not in state.get("templates", []):
        yield fail(
            f"template {settings.ct_template} is not on node {host.name}: download it with "
            f"`pveam download local {template_file}` or set ct_template"
        )
        return
    yield StringCommand(*(shlex.quote(a) for a in create_args(settings, vmid)))


@operation()
def gpu_passthrough(vmid: int, settings: Settings):
    """Pass every NVIDIA device node the container needs, with majors read from the node.

    .. code:: python

        proxmox.gpu_passthrough(name="Pass GPUs through to CT 200", vmid=200, settings=s)

    Missing uvm nodes are created first (`nvidia-modprobe -u -c 0`): a devN path that does not
    exist blocks the container's start.
    """
    state, ct = node_state(settings, vmid)
    if not ct.get("exists"):
        return  # preview of a container that is created earlier in this run
    devices = state.get("devices", {})
    paths = wanted_devices(devices, settings.passthrough_extra_devices)
    if any(p.startswith("/dev/nvidia-uvm") and p not in devices for p in paths):
        yield "nvidia-modprobe -u -c 0"
    mode = passthrough_mode(settings, state)
    if mode == "dev":
        args = dev_set_args(ct.get("config", {}), paths)
        has_raw = any(k.startswith("lxc.") and v.startswith(("/dev/nvidia", "c ")) for k, v in ct.get("raw_lxc", []))
        if has_raw:  # switching from lxc mode: drop our raw lines first
            yield write_file_command(
                f"/etc/pve/lxc/{vmid}.conf", rewrite_config(ct["text"], [], state.get("majors", {}), False)
            )
        if args:
            yield StringCommand("pct", "set", str(vmid), *(shlex.quote(a) for a in args))
    else:
        majors = state.get("majors", {})
        lines = raw_lxc_lines(paths, devices, majors)
        dev_left = any(k.startswith("dev") and v.startswith("/dev/nvidia") for k, v in ct.get("config", {}).items())
        if not raw_lines_match(ct.get("raw_lxc", []), lines, majors) or dev_left:
            yield write_file_command(
                f"/etc/pve/lxc/{vmid}.conf", rewrite_config(ct["text"], lines, majors, True)
            )


def passthrough_mode(settings: Settings, state: dict) -> str:
    """``dev`` on PVE >= 8.2 (devN entries), ``lxc`` before, unless set explicitly."""
    if settings.passthrough_mode != "auto":
        return settings.passthrough_mode
    version = state.get("pve_version") or "0.0"
    return "dev" if driver_tuple(version)[:2] >= (8, 2) else "lxc"


@operation()
def container_running(vmid: int, settings: Settings):
    """Start the container when it is stopped, then wait until `pct exec` answers.

    `pct start` fails on a running container, so the status is checked first.
    """
    _, ct = node_state(settings, vmid)
    if ct.get("status") == "running":
        return
    yield f"pct start {vmid}"
    yield wait_exec(vmid)


@operation()
def driver_userspace(vmid: int, settings: Settings):
    """Install exactly the node's driver version as userspace in the container.

    Uses the same NVIDIA .run installer as the node, with ``--no-kernel-modules`` (the kernel
    module is the node's): libcuda, libnvidia-ml and nvidia-smi then match the module to the patch
    level, which CUDA requires ("Driver/library version mismatch" / CUDA error 999 otherwise).
    """
    state, ct = node_state(settings, vmid)
    node_driver = state.get("driver_version")
    if not ct.get("exists") or ct.get("libcuda") == node_driver or not node_driver:
        return
    installer = state.get("installer")
    if not installer:
        yield fail(
            f"container {vmid} needs NVIDIA userspace {node_driver} (has {ct.get('libcuda') or 'none'}), "
            f"but NVIDIA-Linux-x86_64-{node_driver}.run is not in {settings.nvidia_installer_dir} on "
            f"node {host.name}: copy the installer of the node's driver there"
        )
        return
    name = installer.rsplit("/", 1)[-1]
    target = f"/root/{name}"
    # pct push exits 0 even when the copy fails inside the container: check the result.
    yield StringCommand(
        f"pct push {vmid} {shlex.quote(installer)} {shlex.quote(target)} && "
        f"pct exec {vmid} -- sh -c {shlex.quote(f'test -s {target} && sh {target} --silent --no-kernel-modules; rc=$?; rm -f {target}; exit $rc')}"
    )
