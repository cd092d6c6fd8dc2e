# The GPUs a running training holds, decided in the container before the verification probe's
# first CUDA call (sent in front of probes/verification.py; stdlib only). A CUDA context costs
# device memory (docs/real-tools.md), so the probe makes none there. The node's compute-apps list
# is read beside this probe, not before, and NVML lists no process inside the container: so, a
# training runs here (unit active or the training command) and the GPU has memory in use.
# tests/unit/test_training_held.py; the controller's view: pvegpu.verification.training_gpus.
import os

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
    """Pids of this container's processes that run the training command."""
    found = []
    for name in os.listdir(proc) if os.path.isdir(proc) else []:
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue  # not a process, or gone
        if name.isdigit() and is_training_argv(argv, matcher):
            found.append(int(name))
    return sorted(found)


def used_by_uuid(text):
    """{short uuid: MiB} from ``nvidia-smi --query-gpu=uuid,memory.used`` (csv, noheader,
    nounits); unreadable rows left out."""
    found = {}
    for line in (text or "").splitlines():
        uuid, _, used = line.partition(",")
        if short_uuid(uuid) and used.strip().isdigit():
            found[short_uuid(uuid)] = int(used)
    return found


def training_running(unit_active, pids):
    """The unit is in a running state, or a process runs the training command."""
    return unit_active in UNIT_RUNNING or bool(pids)


def held_gpus(running, used, floor=CONTEXT_FLOOR_MIB):
    """Short UUIDs (sorted) with ``floor`` MiB or more in use while a training runs; else none."""
    return sorted(u for u, mib in used.items() if mib >= floor) if running else []


def compile_refusal(held, consent):
    """The line that refuses verify_level=compile beside a training (None: it may run)."""
    if not held or consent:
        return None
    return (
        f"verify_level=compile: refused on {len(held)} GPU(s) held by the running training "
        "(it compiles and allocates on every GPU: a check for a stopped stack)"
    )
