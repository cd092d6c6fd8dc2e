# Prelude of the node probe (node_state.py, which pvegpu.facts.probe appends): every process of a
# container as the node sees it (the controller decides who is a training, from the whole tree:
# pvegpu.plan.running_training), and what `pct destroy --purge` takes along.
import os
import re

from pvegpu.probes.prelude import as_text, proc_argv, read, read_bytes  # sent as the prelude


def cfg_sections(text):
    """[(header, [body line, ...])] of a Proxmox section config (jobs.cfg, replication.cfg,
    ha/resources.cfg: a "type: id" line, then indented "key value" lines)."""
    found = []
    for line in (text or "").splitlines():
        if line and not line[0].isspace() and ":" in line:
            found.append((line.strip(), []))
        elif found and line.strip():
            found[-1][1].append(line.strip())
    return found


def purge_refs(vmid):
    """What `pct destroy --purge` takes along besides the container (admin guide, pct:
    "Destroying a container"): backup jobs that list it, its replication jobs, its HA resource,
    and (always) its firewall file."""
    jobs = []
    for header, body in cfg_sections(read("/etc/pve/jobs.cfg")):
        for line in body:
            key, _, value = line.partition(" ")
            if key == "vmid" and str(vmid) in [v.strip() for v in value.split(",")]:
                jobs.append(header.split(":", 1)[1].strip())
    replication = [
        h.split(":", 1)[1].strip()
        for h, _ in cfg_sections(read("/etc/pve/replication.cfg"))
        if re.fullmatch(rf"{vmid}-\d+", h.split(":", 1)[1].strip())
    ]
    ha = any(h == f"ct: {vmid}" for h, _ in cfg_sections(read("/etc/pve/ha/resources.cfg")))
    return {
        "backup_jobs": jobs,
        "replication": replication,
        "ha": ha,
        "firewall": os.path.exists(f"/etc/pve/firewall/{vmid}.fw"),
    }


LXC_CGROUP = r"/lxc(?:\.payload)?[./]{vmid}(?:/|$)"
# The environment a restart hint repeats (pvegpu.plan.restart_hint): what decides where and how a
# training runs (its GPUs, NCCL, torch, threads, caches, the venv a shell activated, ranks set by
# hand), never a secret (a name with a TOKEN/KEY/SECRET/PASSWORD/AUTH part: HF_TOKEN,
# WANDB_API_KEY). PATH only beside VIRTUAL_ENV (an activated venv runs `python` from its bin/).
ENV_KEPT = re.compile(
    r"(CUDA_|NCCL_|TORCH|PYTORCH_|OMP_|MKL_|NVIDIA_|HF_|TRANSFORMERS_|TOKENIZERS_|WANDB_|"
    r"TRITON_|PYTHON|LD_LIBRARY_PATH$|MASTER_(ADDR|PORT)$|(LOCAL_)?(RANK|WORLD_SIZE)$|VIRTUAL_ENV$)"
)
ENV_SECRET = re.compile(r"(^|_)(TOKEN|KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)")


def proc_fields(pid):
    """pid's state, ppid, process group, session and start time (/proc/<pid>/stat, fields 3-6
    and 22: counted after the ")" that ends the command name, which may hold spaces), its
    innermost pid (NSpid: its pid in the container), or None when it is gone or a zombie."""
    stat = read(f"/proc/{pid}/stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return None
    nspid = None
    for line in (read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("NSpid:") and line.split()[1:]:
            nspid = int(line.split()[-1])
    return {
        "state": fields[0],
        "ppid": int(fields[1]),
        "pgid": int(fields[2]),
        "sid": int(fields[3]),
        "start": int(fields[19]),
        "ct_pid": nspid,
    }


def kept_env(pid):
    """{name: value} of pid's environment that a restart hint repeats (``ENV_KEPT``, no secret;
    PATH beside VIRTUAL_ENV); {} when /proc/<pid>/environ cannot be read."""
    env = {}
    for item in (read_bytes(f"/proc/{pid}/environ") or b"").split(b"\0"):
        name, sep, value = as_text(item).partition("=")
        if sep:
            env[name] = value
    found = {k: v for k, v in env.items() if ENV_KEPT.match(k) and not ENV_SECRET.search(k)}
    if "VIRTUAL_ENV" in found and "PATH" in env:
        found["PATH"] = env["PATH"]
    return found


def container_processes(vmid):
    """Every process of container ``vmid`` (its cgroup, PVE's /lxc/<vmid>/..., lxc's monitor
    left out) as the node sees it: node pid, ppid, process group, session, state, start time,
    its pid in the container, argv, working directory (as the container names it: readlink of
    /proc/<pid>/cwd gives the path in the process's own mount namespace), cgroup and the part of
    its environment a restart hint repeats (:func:`kept_env`). Who is a
    training is decided on the controller (pvegpu.plan.running_training), from the whole tree:
    a launcher's workers, a wrapper loop, a unit between restarts. A process that exits during
    the scan is left out."""
    found = []
    mine = re.compile(LXC_CGROUP.format(vmid=vmid), re.M)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        cgroup = read(f"/proc/{pid}/cgroup") or ""
        if not mine.search(cgroup) or "/lxc.monitor" in cgroup:
            continue
        argv = proc_argv(pid) or []
        fields = proc_fields(pid)
        if fields is None:
            continue
        try:
            # the link's own bytes (fsencode undoes readlink's decoding), as the argv's
            cwd = as_text(os.fsencode(os.readlink(f"/proc/{pid}/cwd")))
        except OSError:
            cwd = None
        found.append(
            dict(fields, pid=int(pid), argv=argv, cwd=cwd, cgroup=cgroup.strip(), env=kept_env(pid))
        )
    return found


def container_processes_or_error(vmid):
    """(processes, None) or (None, why they could not be read): unreadable is never "none"."""
    try:
        return container_processes(vmid), None
    except Exception as e:  # noqa: BLE001 - any failure of the scan: the caller fails closed
        return None, f"the node's /proc could not be scanned: {e}"


def memory_current(vmid):
    """(bytes the container's cgroup uses now, "v2" or "v1"): cgroup v2 ``memory.current``, else
    (a node booted with the legacy/hybrid hierarchy) v1's ``memory.usage_in_bytes`` of the
    memory controller; both count page cache, as the limit does. (None, None) when neither can
    be read. The hierarchy matters: a limit below use OOM-kills on v2, fails (EBUSY) on v1."""
    for path, version in (
        (f"/sys/fs/cgroup/lxc/{vmid}/memory.current", "v2"),
        (f"/sys/fs/cgroup/memory/lxc/{vmid}/memory.usage_in_bytes", "v1"),
    ):
        text = read(path)
        if text and text.strip().isdigit():
            return int(text.strip()), version
    return None, None
