# Which GPUs the verification probe may make a CUDA context on, decided in the container before
# its first CUDA call (sent in front of probes/verification.py; stdlib only). A CUDA context costs
# device memory (300-500 MiB: docs/real-tools.md), so the probe makes none on a GPU anyone uses:
# one with memory in use (memory.used is device-wide: the node's, a neighbour container's and
# this container's processes all count), one with a compute process of this container (NVML lists
# this container's own processes by their pid here, from driver 535.113.01), one nvidia-smi did
# not report, and every GPU when nvidia-smi could not be read. Fail closed: the probe is given
# the GPUs that may take a context (an allowlist), never the ones that may not.
# tests/unit/test_training_held.py; the controller's view: pvegpu.verification.training_gpus.
import os

from pvegpu.probes.prelude import split_argv  # sent as the prelude (probes/verification.py's)

CONTEXT_FLOOR_MIB = 64  # MiB in use: below one context (hundreds), above an idle GPU (0-few)
UNIT_RUNNING = ("active", "activating", "reloading", "deactivating")


def short_uuid(uuid):
    """A GPU UUID as torch and nvidia-smi compare: no ``GPU-``, lower case (None: none)."""
    text = str(uuid or "").strip().lower()
    return (text[4:] if text.startswith("gpu-") else text) or None


def is_training_argv(argv, matcher):
    """argv[1] the training script, argv[0] the python of venv_path or of a build under
    venvs_dir (the controller's copy: pvegpu.verification.processes.is_training_command)."""
    if not matcher or len(argv) < 2 or argv[1] != matcher.get("script"):
        return False
    py = argv[0]
    return py in matcher.get("pythons", []) or (
        py.endswith("/bin/python")
        and any(py.startswith(p) for p in matcher.get("python_under", []))
    )


def training_pids(matcher, proc="/proc"):
    """Pids of this container's processes that run the training command (argv decoded as the
    node probe decodes it: the same process is a training, or not, in both)."""
    found = []
    for name in os.listdir(proc) if os.path.isdir(proc) else []:
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as f:
                argv = split_argv(f.read())
        except OSError:
            continue  # not a process, or gone
        if name.isdigit() and is_training_argv(argv, matcher):
            found.append(int(name))
    return sorted(found)


def used_by_uuid(text):
    """{short uuid: MiB} from ``nvidia-smi --query-gpu=uuid,memory.used`` (csv, noheader,
    nounits); a row whose figure is not a number ([N/A], [Unknown Error]) is None."""
    found = {}
    for line in (text or "").splitlines():
        uuid, sep, used = line.partition(",")
        if sep and short_uuid(uuid):
            found[short_uuid(uuid)] = int(used) if used.strip().isdigit() else None
    return found


def apps_by_uuid(text, own_pid=None):
    """{short uuid: [pid, ...]} from ``nvidia-smi --query-compute-apps=gpu_uuid,pid`` (csv,
    noheader, nounits) run in the container: its own compute processes, by their pid here
    (``own_pid``, this probe, left out)."""
    found = {}
    for line in (text or "").splitlines():
        uuid, _, pid = line.partition(",")
        pid = pid.strip()
        if short_uuid(uuid) and pid.isdigit() and int(pid) != own_pid:
            found.setdefault(short_uuid(uuid), []).append(int(pid))
    return found


def training_running(unit_active, pids):
    """The unit is in a running state, or a process runs the training command."""
    return unit_active in UNIT_RUNNING or bool(pids)


def held_why(used, apps, floor=CONTEXT_FLOOR_MIB):
    """{short uuid: why no CUDA context may be made there} of every GPU nvidia-smi reported
    (``used``: :func:`used_by_uuid`; ``apps``: :func:`apps_by_uuid`); None for either: it could
    not be read, and the caller makes no context anywhere."""
    why = {}
    for uuid, mib in (used or {}).items():
        if mib is None:
            why[uuid] = "memory in use unknown (nvidia-smi printed no figure)"
        elif (apps or {}).get(uuid):
            pids = ", ".join(str(p) for p in apps[uuid])
            why[uuid] = f"compute process of this container (pid {pids})"
        elif mib >= floor:
            why[uuid] = f"{mib} MiB in use (another process, a neighbour container or the node)"
    return why


def context_ok(used, apps, floor=CONTEXT_FLOOR_MIB):
    """Short UUIDs (sorted) of the GPUs that may take a CUDA context: reported by nvidia-smi,
    with less than ``floor`` MiB in use and no compute process; none when either read failed."""
    if used is None or apps is None:
        return []
    why = held_why(used, apps, floor)
    return sorted(u for u in used if u not in why)


def held_gpus(running, used, floor=CONTEXT_FLOOR_MIB):
    """Short UUIDs (sorted) with ``floor`` MiB or more in use (or no figure), whether or not a
    training runs here (``running`` is kept for the report only)."""
    return sorted(u for u, mib in (used or {}).items() if mib is None or mib >= floor)


def compile_refusal(held, consent=False):
    """The line that refuses verify_level=compile while any GPU is in use (None: it may run):
    it compiles and allocates on every GPU, so it runs only where nothing holds a GPU."""
    if not held:
        return None
    return (
        f"verify_level=compile: refused, {len(held)} GPU(s) in use (a training, another "
        "process, a neighbour container or the node): it compiles and allocates on every GPU; "
        "run it on a stopped stack (deploy.py --data restart_training=true stops pvegpu's unit "
        "for it)"
    )
