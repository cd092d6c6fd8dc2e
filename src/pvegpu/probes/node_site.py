# Prelude of the node probe (node_state.py, which pvegpu.facts.probe appends): the node's NVSwitch
# fabric and Fabric Manager (pvegpu.plan.boot, pvegpu.startup.site_preflight decide with them) and
# its storages (`pvesm status` per content type a deploy needs).
import os
import re

from pvegpu.probes.prelude import as_text, read, read_bytes, run  # sent as the prelude

SMI_FABRIC = ["nvidia-smi", "--query-gpu=uuid,fabric.state,fabric.status", "--format=csv,noheader"]


def fabric():
    """[{uuid, state, status}] per GPU, each answer as printed (Not Supported, [N/A], ...:
    pvegpu.plan.boot.fabric_answer says what it means); [] when nvidia-smi cannot say (a driver
    older than the fields answers `Field "fabric.state" is not a valid field to query.`, exit 2;
    no GPU)."""
    code, out, _ = run(SMI_FABRIC)
    rows = []
    for line in out.strip().splitlines() if code == 0 else []:
        uuid, _, rest = line.partition(",")
        state, _, status = rest.rpartition(",")
        if state:
            rows.append({"uuid": uuid.strip(), "state": state.strip(), "status": status.strip()})
    return rows


# Pre-Hopper NVSwitch boards (HGX A100/V100) need Fabric Manager too but print N/A for
# fabric.state: the NVSwitches themselves are listed by the nvidia-nvswitch module
# (open-gpu-kernel-modules kernel-open/nvidia/procfs_nvswitch.c: devices/<dddd:bb:dd.f>/).
NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"
# fabric.state of a GPU that registers with a fabric (pvegpu.plan.boot.FABRIC_STATES; the
# probe runs alone on the node, so a copy, kept equal by tests/unit/test_boot_units.py)
FABRIC_STATES = ("Not Started", "In Progress", "Completed")
# `nv-fabricmanager --version` prints "Fabric Manager version is : 535.161.08"
FM_VERSION = ["nv-fabricmanager", "--version"]


def nvswitches():
    """The node's NVSwitch devices (PCI addresses), [] without the nvswitch module."""
    try:
        return sorted(os.listdir(NVSWITCH_DIR))
    except OSError:
        return []


def fabricmanager_version():
    """Fabric Manager's version (it must equal the driver's), None when not installed."""
    code, out, _ = run(FM_VERSION)
    found = re.search(r"Fabric Manager version is\s*:\s*(\S+)", out) if code == 0 else None
    return found.group(1) if found else None


# First line of the nvidia-persistenced unit pvegpu renders (its template)


def pvesm_status_argv(content):
    return ["pvesm", "status", "--content", content]


def parse_pvesm_status(out):
    """{storage: {type, status, avail_kib}} from `pvesm status` (pve-storage PVE/CLI/pvesm.pm
    print_status: Name, Type, Status, Total (KiB), Used (KiB), Available (KiB), %)."""
    found = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 7 and parts[5].isdigit():
            found[parts[0]] = {"type": parts[1], "status": parts[2], "avail_kib": int(parts[5])}
    return found


def storages(contents):
    """{content type: {storage: ...} or None when pvesm failed} for each of ``contents``."""
    found = {}
    for content in contents:
        code, out, _ = run(pvesm_status_argv(content))
        found[content] = parse_pvesm_status(out) if code == 0 else None
    return found


def storage_contents(vmids):
    """The content types to list (rootdir, vztmpl) when a container is to be created: one is
    missing or ``recreate`` (rebuild=container); else none (no pvesm call)."""
    missing = any(not os.path.exists(f"/etc/pve/lxc/{v}.conf") for v in vmids)
    args = A  # noqa: F821 (the node probe's ARGS, read when it runs)
    return list(args.get("storage_contents") or []) if missing or args.get("recreate") else []


PERSISTENCED_MARKER = "# Rendered by pvegpu from templates/nvidia-persistenced.service.j2"


def persistenced_outside_systemd():
    """Pids of the node's nvidia-persistenced daemons not run by nvidia-persistenced.service
    (started by hand, an init script, another unit; argv[0]'s name, as comm is cut at 15
    characters), leaving out containers' processes (PVE's /lxc/<vmid>/ cgroups)."""
    found = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        raw = read_bytes(f"/proc/{pid}/cmdline")  # bytes: any argv, UTF-8 or not, is read
        if not raw or os.path.basename(as_text(raw.split(b"\0")[0])) != "nvidia-persistenced":
            continue
        cgroup = read(f"/proc/{pid}/cgroup") or ""
        if "/lxc/" in cgroup or "/nvidia-persistenced.service" in cgroup:
            continue
        found.append(int(pid))
    return found


def persistenced(unit_path):
    """{outside_pids, unit_ours}: daemons outside systemd, and whether the unit file at pvegpu's
    path is pvegpu's own (True), an admin's (False) or absent (None)."""
    text = read(unit_path) if unit_path else None
    ours = None if text is None else text.startswith(PERSISTENCED_MARKER)
    return {"outside_pids": persistenced_outside_systemd(), "unit_ours": ours}


def data_dir_place(path):
    """Where a data dir is or would be made: whether its parent exists, and whether it (or its
    parent, while it does not exist) is on the root filesystem (the same device as /)."""
    parent = os.path.dirname(path.rstrip("/")) or "/"
    try:
        on_root = os.stat(path if os.path.isdir(path) else parent).st_dev == os.stat("/").st_dev
    except OSError:
        on_root = None
    return {"parent_exists": os.path.isdir(parent), "on_root_fs": on_root}


def path_kind(path):
    """As `[ -f ]` / `[ -d ]` see it (symlinks followed): the training paths' check."""
    return "file" if os.path.isfile(path) else "directory" if os.path.isdir(path) else "missing"
