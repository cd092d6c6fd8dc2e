# Action script (not a read-only probe): on the Proxmox NODE, find leftover GPU compute processes of
# the training on the training GPUs and end them; leave every other process alone.
# Runs with the node's system python3 (stdlib only). ARGS (a JSON string) is prepended:
# {"vmid": 200, "unit": "dflash-train.service", "gpus": [0, 1, ...],
#  "match": {"script": "/data/dflash/train.py", "pythons": ["/root/venv/bin/python"],
#            "python_under": ["/root/venvs/"]}, "term_wait_s": 30,
#  "log": "/var/log/pvegpu/training-leftovers.log"}
#
# Only the node sees which process holds which GPU (nvidia-smi in an LXC container lists none), and
# the container's processes as the node's: /proc/<pid>/cmdline is the argv the unit's ExecStart ran,
# /proc/<pid>/cgroup names the container and unit (PVE: 0::/lxc/<vmid>/ns/system.slice/<unit>).
# A process is a leftover only when it holds a training GPU and sits in this container's
# training unit's cgroup (the unit is stopped when this runs, so whatever is left there is left
# over). A process running the training command anywhere else is a training pvegpu did not start
# (pvegpu.plan.running_training: it waits, or is taken over with consent), and a process of the
# node or of another container is never pvegpu's to end. Each pid is checked again right before
# each signal.
# SIGTERM first (the script may checkpoint), SIGKILL after term_wait_s. Every signal sent is
# appended to `log` (one JSON line). Prints one JSON line: killed, remaining, foreign, error.
import json
import os
import re
import signal
import subprocess
import time

from pvegpu.probes.prelude import proc_argv, read  # sent as the prelude

A = json.loads(ARGS)  # noqa: F821 (prepended by pvegpu.facts.probe)
MATCH = A["match"]


def is_training_argv(argv):
    if len(argv) < 2 or argv[1] != MATCH["script"]:
        return False
    python = argv[0]
    return python in MATCH["pythons"] or (
        python.endswith("/bin/python") and any(python.startswith(p) for p in MATCH["python_under"])
    )


def smi(query):
    p = subprocess.run(
        ["nvidia-smi", query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if p.returncode != 0:
        raise RuntimeError(
            (p.stderr or p.stdout).strip().splitlines()[:1] or [f"exit {p.returncode}"]
        )
    return [
        [c.strip() for c in line.split(",")]
        for line in p.stdout.strip().splitlines()
        if line.strip()
    ]


def bus_key(bus_id):
    """(domain, bus, device, function) of a PCI bus id such as ``00000000:83:00.0``."""
    return tuple(int(x, 16) for x in re.split(r"[:.]", bus_id.strip()))


def cuda_numbers(rows):
    """GPU UUID -> the number CUDA gives it in the container (CUDA_DEVICE_ORDER=PCI_BUS_ID: PCI
    bus order; the container has every node GPU), from ``index,uuid,pci.bus_id`` rows. Never
    nvidia-smi's index: NVML promises no order for it."""
    ranked = sorted((r for r in rows if len(r) == 3), key=lambda r: bus_key(r[2]))
    return {r[1]: number for number, r in enumerate(ranked)}


def other_container(pid):
    """The vmid of another container whose cgroup holds pid (PVE: /lxc/<vmid>/...), else None."""
    text = read(f"/proc/{pid}/cgroup")  # the prelude's: a byte that is not UTF-8 never raises
    if text is None:
        return None
    m = re.search(r"/lxc(?:\.payload)?[./](\d+)(?:/|$)", text, re.M)
    return m.group(1) if m and m.group(1) != str(A["vmid"]) else None


def in_unit(pid):
    """In this container's training unit's cgroup."""
    lines = (read(f"/proc/{pid}/cgroup") or "").splitlines()
    return any(
        f"/lxc/{A['vmid']}/" in line and line.rstrip().endswith("/" + A["unit"]) for line in lines
    )


def other_unit(pid):
    """The name of another service of this container whose cgroup holds pid, else None."""
    lines = (read(f"/proc/{pid}/cgroup") or "").splitlines()
    for line in lines:
        path = line.rstrip().rsplit(":", 1)[-1]
        if f"/lxc/{A['vmid']}/" not in path + "/":
            continue
        last = path.rsplit("/", 1)[-1]
        if last.endswith(".service") and last != A["unit"]:
            return last
    return None


def is_training(pid):
    """A leftover of the training unit: in its cgroup in this container (see the header)."""
    return other_container(pid) is None and in_unit(pid)


def alive(pid):
    stat = read(f"/proc/{pid}/stat")  # comm (in it) is the program's file name: any bytes
    try:
        return stat is not None and stat.rsplit(")", 1)[1].split()[0] != "Z"
    except IndexError:
        return False


def log(entry):
    try:
        os.makedirs(os.path.dirname(A["log"]), exist_ok=True)
        with open(A["log"], "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError:
        pass


def signal_all(pids, sig, found):
    sent = []
    for pid in pids:
        if alive(pid) and is_training(pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            sent.append(pid)
            log(
                {
                    "time": round(time.time(), 3),
                    "vmid": A["vmid"],
                    "pid": pid,
                    "signal": signal.Signals(sig).name,
                    "gpus": found[pid]["gpus"],
                    "argv": found[pid]["argv"],
                }
            )
    return sent


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


doc: dict = {"killed": [], "remaining": [], "foreign": [], "error": None}
try:
    uuid_to_cuda = cuda_numbers(smi("--query-gpu=index,uuid,pci.bus_id"))
    apps = smi("--query-compute-apps=pid,gpu_uuid,used_memory")
except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
    doc["error"] = f"nvidia-smi on the node failed: {e}"
    apps, uuid_to_cuda = [], {}
found: dict = {}
foreign: dict = {}
for cells in apps:
    if len(cells) < 2 or not cells[0].isdigit():
        continue
    pid, gpu = int(cells[0]), uuid_to_cuda.get(cells[1])
    if gpu not in A["gpus"]:
        continue
    target = found if is_training(pid) else foreign
    entry = target.setdefault(pid, {"pid": pid, "gpus": [], "argv": proc_argv(pid) or []})
    entry["gpus"].append(gpu)
leftovers = sorted(found)
if leftovers:
    termed = signal_all(leftovers, signal.SIGTERM, found)
    survivors = wait_gone(termed, A.get("term_wait_s", 30))
    if survivors:
        wait_gone(signal_all(survivors, signal.SIGKILL, found), 10)
    doc["remaining"] = [found[p] for p in leftovers if alive(p) and is_training(p)]
    doc["killed"] = [found[p] for p in leftovers if found[p] not in doc["remaining"]]
doc["foreign"] = [foreign[p] for p in sorted(foreign)]
print(json.dumps(doc, sort_keys=True))
