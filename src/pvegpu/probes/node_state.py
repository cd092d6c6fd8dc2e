# Probe: the whole GPU-relevant state of a Proxmox node, as one JSON line.
# Runs on the node with its system python3 (stdlib only), after probes/ct_view.py (each container's
# own view: start_view, container_view), probes/ct_processes.py (each container's processes,
# what `pct destroy --purge` takes) and probes/node_site.py (the NVSwitch fabric, Fabric Manager,
# the storages): pvegpu.facts.probe prepends them. ARGS (a JSON string) is
# prepended:
# {"vmids": [200], "installer_dir": "/root", "data_dir": "/tank/dflash",
#  "boot_files": ["/etc/modules-load.d/nvidia.conf", ...], "units": ["nvidia-persistenced.service"],
#  "ct_detail": "none" | "reads" | "status" | "full", "unit_name": "dflash-train.service",
#  "installer_tools": ["ldconfig", "grep", ...], "reads": {"200": ["<container shell line>", ...]}}
#
# ct_detail decides what is asked of each container (every pct call pays Perl start-up on a real
# node): "none" reads only its config file; "status" adds `pct status`; "full" runs ONE `pct exec`
# that reports the container's own view (driver version, userspace libraries, device nodes as the
# container sees them, the training unit's state). A stopped container answers that exec with
# "container '<vmid>' not running!", which is its status; only an unexpected answer costs a second
# call (`pct status`). That exec also runs, after the view, the container reads the controller
# folds into it ("reads": {vmid: [shell command, ...]}, pvegpu.run.ct_reads): each one's stdout and
# exit status come back under the container's "reads". The execs start before the node's own
# commands and run beside them. "reads" (verify.py's) runs only the folded reads in that one exec,
# without the view (a container without reads is not entered); its status is the exec's answer.
import glob
import hashlib
import json
import os
import re
import shutil

from pvegpu.probes.prelude import (  # sent as the prelude
    STARTED,
    as_text,
    read,
    read_bytes,
    run,
    split_argv,
    start_early,
)

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
)


PVEVERSION = ["pveversion", "-v"]


def pve_versions():
    code, out, _ = run(PVEVERSION)
    versions = {}
    if code == 0:
        for line in out.splitlines():
            name, _, rest = line.partition(":")
            versions[name.strip()] = rest.strip().split(" ")[0]
    manager = versions.get("pve-manager", "")
    m = re.match(r"(\d+\.\d+(?:\.\d+)?)", manager)
    return {
        "pve_version": m.group(1) if m else None,
        "pve_container": versions.get("pve-container"),
    }


def driver():
    return module_version(read("/proc/driver/nvidia/version"))  # noqa: F821 (ct_view)


# nvidia-smi has no minor field (see its --help-query-gpu); the minor comes from the kernel module.
GPU_FIELDS = ["index", "name", "uuid", "memory.total", "pci.bus_id", "driver_version"]
PROC_GPUS = "/proc/driver/nvidia/gpus"


def pci_key(text):
    """(domain, bus, device, function) of a PCI address in any spelling, else None: nvidia-smi
    prints 00000000:83:00.0, the kernel module's directory is 0000:83:00.0 (case differs too)."""
    m = re.fullmatch(
        r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])",
        (text or "").strip(),
    )
    if not m:
        return None
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))


def info_minor(text):
    """The N of /dev/nvidiaN in a /proc/driver/nvidia/gpus/<bus>/information text
    ("Device Minor: \t 3", nv-procfs.c), else None."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Device Minor" and value.strip().isdigit():
            return int(value.strip())
    return None


def proc_minors(base=PROC_GPUS):
    """PCI key -> device minor of every GPU the kernel module lists."""
    found = {}
    for bus in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        key, minor = pci_key(bus), info_minor(read(os.path.join(base, bus, "information")))
        if key is not None and minor is not None:
            found[key] = minor
    return found


SMI_GPUS = ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"]
# process_name last: nvidia-smi prints it unquoted, so a row splits at most 3 times (a comma in
# a process's name would otherwise make an extra value and drop the process).
SMI_APPS = [
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory,gpu_uuid,process_name",
    "--format=csv,noheader,nounits",
]


def gpus():
    code, out, err = run(SMI_GPUS)
    if code != 0:
        return None, (err or out).strip().splitlines()[:1], None
    rows, smi_driver, minors = [], None, proc_minors(PROC_GPUS)
    for line in out.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_FIELDS):
            continue
        row = dict(zip(GPU_FIELDS, cells))
        smi_driver = smi_driver or row["driver_version"]
        rows.append(
            {
                "index": int(row["index"]),
                "name": row["name"],
                "uuid": row["uuid"],
                "memory_total_mib": int(row["memory.total"])
                if row["memory.total"].isdigit()
                else None,
                "pci_bus_id": row["pci.bus_id"],
                # never the index: a public report shows index 3 with Device Minor 0
                "minor": minors.get(pci_key(row["pci.bus_id"])),
            }
        )
    return rows, [], smi_driver


PF_EXITING = 0x4  # include/linux/sched.h: set before the exit releases the process's memory


def exiting(pid):
    """Whether process ``pid`` is gone or exiting (zombie, dead, or PF_EXITING in the flags of
    /proc/<pid>/stat): its cmdline then reads empty. A live process's empty cmdline is not."""
    stat = read(f"/proc/{pid}/stat")
    if stat is None:
        return True
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0] in ("Z", "X", "x") or bool(int(fields[6]) & PF_EXITING)


def compute_apps():
    """[{pid, name, gpu_uuid, used_mib, cmdline, argv, cgroup}] of every compute process on the
    node's GPUs (node pids); None when nvidia-smi could not say (a failed query is never "no
    process": the callers fail closed)."""
    code, out, _ = run(SMI_APPS)
    if code != 0:
        return None
    apps = []
    for line in out.strip().splitlines():
        cells = [c.strip() for c in line.split(",", 3)]
        if len(cells) == 4 and cells[0].isdigit():
            # bytes: an argument that is not UTF-8 (a Latin-1 file name) is a process to list
            raw = read_bytes(f"/proc/{cells[0]}/cmdline")
            if not raw and exiting(cells[0]):
                continue  # it exited since nvidia-smi listed it: its contexts go with it
            raw = raw or b""
            apps.append(
                {
                    "pid": int(cells[0]),
                    "name": cells[3],
                    "gpu_uuid": cells[2],
                    "used_mib": int(cells[1]) if cells[1].isdigit() else None,
                    "cmdline": as_text(raw.replace(b"\0", b" ")).strip(),
                    # exact argv (the verify stage matches the training command on it)
                    "argv": split_argv(raw),
                    # whose it is: PVE's LXC layout, e.g. 0::/lxc/200/ns/system.slice/x.service
                    "cgroup": (read(f"/proc/{cells[0]}/cgroup") or "").strip(),
                }
            )
    return apps


# NVSwitch boards (HGX H100/H200 SXM) register each GPU with the fabric through NVIDIA Fabric
# Manager: nvidia-smi prints NVML's nvmlGpuFabricState_t ("Not Supported", "Not Started",
# "In Progress", "Completed") and, once completed, its status ("Success" or an NVML error);
# other GPUs print N/A. A separate call: a driver without these fields fails the query.
def devices():
    found = {}
    for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isdir(path):
            continue
        found[path] = {"major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}
    return found


def char_majors():
    majors, section = {}, None
    for line in (read("/proc/devices") or "").splitlines():
        if line.startswith("Character devices"):
            section = "char"
        elif line.startswith("Block devices"):
            section = "block"
        elif section == "char":
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                majors[parts[1]] = int(parts[0])
    return majors


def parse_config(text):
    """A /etc/pve/lxc/<vmid>.conf: main-section keys, raw lxc.* lines in order, and the
    [pve:pending] section (values the next start applies, and keys it deletes)."""
    keys, raw, pending, pending_delete = {}, [], {}, []
    section = "main"
    for line in text.splitlines():
        if line.startswith("["):
            section = "pending" if line.strip() == "[pve:pending]" else "snapshot"
            continue
        if not line.strip() or line.startswith("#") or section == "snapshot":
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if section == "pending":
            if key == "delete":
                pending_delete = [x for x in re.split(r"[,;\s]+", value) if x]
            else:
                pending[key] = value
        elif key.startswith("lxc."):
            raw.append([key, value])
        else:
            keys[key] = value
    return keys, raw, pending, pending_delete


def container(vmid, detail, unit, view=None):
    text = read(f"/etc/pve/lxc/{vmid}.conf")
    if text is None:
        return {"exists": False}
    keys, raw, pending, pending_delete = parse_config(text)
    info = {
        "exists": True,
        "status": None,
        "config": keys,
        "raw_lxc": raw,
        "text": text,
        "pending": pending,
        "pending_delete": pending_delete,
        "live": None,
        "libcuda": None,
    }
    if A.get("recreate"):  # rebuild=container: what goes with it
        info["purge"] = purge_refs(vmid)  # noqa: F821 (probes/ct_processes.py)
    status = None
    if detail == "reads":  # the folded reads alone (verify.py's): no view, no `pct status`
        if view is not None:
            info["status"], _, reads = container_view(view)  # noqa: F821 (probes/ct_view.py)
            if reads:
                info["reads"] = reads
        return info
    if detail == "full":
        if view is None:
            view = start_view(  # noqa: F821
                vmid, unit, [], A.get("installer_tools", []), A.get("build_dir")
            )
        status, info["live"], reads = container_view(view)  # noqa: F821 (probes/ct_view.py)
        if reads:
            info["reads"] = reads
        if info["live"]:
            info["libcuda"] = info["live"]["libs"].get("libcuda.so.1")
    if status is None and detail in ("status", "full"):
        code, out, _ = run(["pct", "status", str(vmid)])
        status = out.strip().split(":")[-1].strip() if code == 0 else "unknown"
    info["status"] = status
    if detail == "full" and status == "running":
        procs = container_processes_or_error(vmid)  # noqa: F821 (probes/ct_processes.py)
        info["processes"], info["processes_error"] = procs
        info["memory_current"], info["memory_cgroup"] = memory_current(vmid)  # noqa: F821
    return info


def file_digest(path):
    data = read(path)
    return None if data is None else hashlib.sha256(data.encode()).hexdigest()


def unit_state(name):
    """Unit file location and enablement read from the filesystem, like systemd resolves them;
    activity from one `systemctl is-active` for all units (below)."""
    paths = [os.path.join(d, name) for d in UNIT_DIRS if os.path.exists(os.path.join(d, name))]
    path = paths[0] if paths else None
    wanted_by = []
    if path:
        for line in (read(path) or "").splitlines():
            k, _, v = line.partition("=")
            if k.strip() in ("WantedBy", "RequiredBy"):
                wanted_by += v.split()
    enabled = bool(wanted_by) and all(
        os.path.lexists(f"/etc/systemd/system/{t}.wants/{name}")
        or os.path.lexists(f"/etc/systemd/system/{t}.requires/{name}")
        for t in wanted_by
    )
    return {"path": path, "paths": paths, "enabled": enabled, "active": None}


def is_active_argv(found):
    """The one `systemctl is-active` of the units whose files exist, else None."""
    present = [n for n, state in found.items() if state["path"]]
    return ["systemctl", "is-active", *present] if present else None


def units(found):
    """``found`` (unit_state of each name) with each present unit's activity."""
    argv = is_active_argv(found)
    if argv:
        _, out, _ = run(argv)
        for name, state in zip(argv[2:], out.split()):
            found[name]["active"] = state
    return found


detail = A.get("ct_detail", "full")
reads = folded_reads(A)  # noqa: F821 (probes/ct_view.py: on stdin when sent there)
changes, check = gated_changes(A)  # noqa: F821 (probes/ct_gate.py: on stdin, with the reads)
# every container's exec first: its Perl start-up and reads overlap the node's own commands
views = {
    v: start_view(  # noqa: F821 (probes/ct_view.py)
        v,
        A.get("unit_name"),
        reads.get(str(v), []),
        A.get("installer_tools", []),
        A.get("build_dir"),
        whole=detail == "full",
        change=(changes.get(str(v)) or {}).get("line") if detail == "full" else None,
    )
    for v in A.get("vmids", [])
    if (detail == "full" or (detail == "reads" and reads.get(str(v))))
    and os.path.exists(f"/etc/pve/lxc/{v}.conf")
}
unit_files = {n: unit_state(n) for n in A.get("units", [])}
contents = storage_contents(A.get("vmids", []))  # noqa: F821 (probes/node_site.py)
start_early(PVEVERSION, SMI_GPUS, SMI_APPS, *filter(None, [is_active_argv(unit_files)]))
start_early(SMI_FABRIC, *(pvesm_status_argv(c) for c in contents))  # noqa: F821 (node_site)
drv = driver()
gpu_rows, gpu_error, smi_driver = gpus()
fabric_rows, switches = fabric() if gpu_rows else [], nvswitches()  # noqa: F821 (node_site)
on_fabric = bool(switches) or any(r["state"] in FABRIC_STATES for r in fabric_rows)  # noqa: F821
doc = {
    **pve_versions(),
    "driver_version": drv,
    "driver_version_smi": smi_driver,
    "gpus": gpu_rows,
    "gpu_error": gpu_error,
    # None: unknown (nvidia-smi failed), never "no process"
    "compute_apps": compute_apps() if gpu_rows is not None else None,
    "devices": devices(),
    "majors": char_majors(),  # every character major by driver name
    "containers": {
        str(v): container(v, detail, A.get("unit_name"), views.get(v)) for v in A.get("vmids", [])
    },
    "installer": None,
    "data_dir_exists": os.path.isdir(A.get("data_dir", "/nonexistent")),
    "data_dir_places": {p: data_dir_place(p) for p in A.get("data_dirs", [])},  # noqa: F821
    "boot_files": {p: file_digest(p) for p in A.get("boot_files", [])},
    "units": units(unit_files),
    "tools": {t: shutil.which(t) for t in ("nvidia-modprobe", "nvidia-persistenced")},
    "templates": sorted(os.listdir("/var/lib/vz/template/cache"))
    if os.path.isdir("/var/lib/vz/template/cache")
    else [],
    "path_kinds": {p: path_kind(p) for p in A.get("paths", [])},  # noqa: F821 (node_site)
    "fabric": fabric_rows,
    "nvswitches": switches,
    "fabricmanager_version": fabricmanager_version() if on_fabric else None,  # noqa: F821
    "storages": storages(contents),  # noqa: F821 (probes/node_site.py)
    "persistenced": persistenced(A.get("persistenced_unit")),  # noqa: F821 (node_site)
}
if drv:
    candidate = os.path.join(A.get("installer_dir", "/root"), f"NVIDIA-Linux-x86_64-{drv}.run")
    doc["installer"] = candidate if os.path.isfile(candidate) else None
run_gated(doc, views, changes, check)  # noqa: F821 (probes/ct_gate.py)
for leftover in STARTED.values():  # compute apps when nvidia-smi failed: not needed
    leftover.kill()
    leftover.communicate()
print(json.dumps(doc, sort_keys=True))
