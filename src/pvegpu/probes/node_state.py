# Probe: the whole GPU-relevant state of a Proxmox node, as one JSON line.
# Runs on the node with its system python3 (stdlib only). ARGS (a JSON string) is prepended:
# {"vmids": [200], "installer_dir": "/root", "data_dir": "/tank/dflash",
#  "boot_files": ["/etc/modules-load.d/nvidia.conf", ...]}
import glob
import hashlib
import json
import os
import re
import subprocess

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)


def run(argv, timeout=120):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def pve_versions():
    code, out, _ = run(["pveversion", "-v"])
    versions = {}
    if code == 0:
        for line in out.splitlines():
            name, _, rest = line.partition(":")
            versions[name.strip()] = rest.strip().split(" ")[0]
    manager = versions.get("pve-manager", "")
    m = re.match(r"(\d+\.\d+(?:\.\d+)?)", manager)
    return {"pve_version": m.group(1) if m else None, "pve_container": versions.get("pve-container")}


def driver():
    text = read("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


GPU_FIELDS = ["index", "name", "uuid", "memory.total", "pci.bus_id", "driver_version"]


def gpus():
    code, out, err = run(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if code != 0:
        return None, (err or out).strip().splitlines()[:1]
    rows = []
    for line in out.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_FIELDS):
            continue
        row = dict(zip(GPU_FIELDS, cells))
        rows.append(
            {
                "index": int(row["index"]),
                "name": row["name"],
                "uuid": row["uuid"],
                "memory_total_mib": int(row["memory.total"]) if row["memory.total"].isdigit() else None,
                "pci_bus_id": row["pci.bus_id"],
            }
        )
    return rows, []


def compute_apps():
    code, out, _ = run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
         "--format=csv,noheader,nounits"]
    )
    apps = []
    if code == 0:
        for line in out.strip().splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) == 4 and cells[0].isdigit():
                cmdline = (read(f"/proc/{cells[0]}/cmdline") or "").replace("\0", " ").strip()
                apps.append({"pid": int(cells[0]), "name": cells[1], "gpu_uuid": cells[3],
                             "used_mib": int(cells[2]) if cells[2].isdigit() else None,
                             "cmdline": cmdline,
                             # whose it is: PVE's LXC layout, e.g. 0::/lxc/200/ns/system.slice/x.service
                             "cgroup": (read(f"/proc/{cells[0]}/cgroup") or "").strip()})
    return apps


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
    """Main section of a /etc/pve/lxc/<vmid>.conf: keys, plus raw lxc.* lines in order."""
    keys, raw = {}, []
    for line in text.splitlines():
        if line.startswith("["):
            break
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key.startswith("lxc."):
            raw.append([key, value])
        else:
            keys[key] = value
    return keys, raw


def container(vmid):
    path = f"/etc/pve/lxc/{vmid}.conf"
    text = read(path)
    if text is None:
        return {"exists": False}
    keys, raw = parse_config(text)
    code, out, _ = run(["pct", "status", str(vmid)])
    status = out.strip().split(":")[-1].strip() if code == 0 else "unknown"
    info = {"exists": True, "status": status, "config": keys, "raw_lxc": raw, "text": text,
            "pending": "[pve:pending]" in text, "libcuda": None}
    if status == "running":
        code, out, _ = run(["pct", "exec", str(vmid), "--", "readlink",
                            "/usr/lib/x86_64-linux-gnu/libcuda.so.1"])
        m = re.search(r"libcuda\.so\.(\d+(?:\.\d+)+)", out) if code == 0 else None
        info["libcuda"] = m.group(1) if m else None
    return info


def file_digest(path):
    data = read(path)
    return None if data is None else hashlib.sha256(data.encode()).hexdigest()


drv = driver()
gpu_rows, gpu_error = gpus()
doc = {
    **pve_versions(),
    "driver_version": drv,
    "gpus": gpu_rows,
    "gpu_error": gpu_error,
    "compute_apps": compute_apps() if gpu_rows is not None else [],
    "devices": devices(),
    "majors": char_majors(),  # every character major by driver name
    "containers": {str(v): container(v) for v in A.get("vmids", [])},
    "installer": None,
    "data_dir_exists": os.path.isdir(A.get("data_dir", "/nonexistent")),
    "boot_files": {p: file_digest(p) for p in A.get("boot_files", [])},
    "templates": sorted(os.listdir("/var/lib/vz/template/cache"))
    if os.path.isdir("/var/lib/vz/template/cache") else [],
}
if drv:
    candidate = os.path.join(A.get("installer_dir", "/root"), f"NVIDIA-Linux-x86_64-{drv}.run")
    doc["installer"] = candidate if os.path.isfile(candidate) else None
print(json.dumps(doc, sort_keys=True))
