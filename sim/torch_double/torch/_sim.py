"""What the double's CUDA "sees": computed from the filesystem of wherever it runs.

Everything is read on each call (no caching), from:
- ``<root>/dev/nvidiactl``, ``<root>/dev/nvidia-uvm``, ``<root>/dev/nvidia<N>`` (minor order),
- ``<root>/usr/lib/x86_64-linux-gnu/libcuda.so.1`` and the ``libcuda.so.<ver>`` it links to,
- ``<nvidia>/version`` (the kernel module's version line), ``<nvidia>/gpus/*/information``,
- ``<nvidia>/sim/node.json``, ``<nvidia>/sim/processes.json``, ``<nvidia>/sim/torch.json``
  (the node's ``/var/lib/pve-sim/gpu``, bind-mounted there by the sim),

where ``<root>`` is ``$PVE_SIM_ROOT`` (default ``/``) and ``<nvidia>`` is ``$PVE_SIM_NVIDIA_DIR``
(default ``<root>/proc/driver/nvidia``). Only the simulation sets those variables.
"""

from __future__ import annotations

import json
import os
import re
import stat

from . import _build
from ._variants import DRIVER_CUDA, VARIANTS

VARIANT = VARIANTS[_build.VARIANT]
MIB = 1024 * 1024
_TRIGGERED = " (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)"

MSG_NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
    "installed a driver from http://www.nvidia.com/Download/index.aspx"
)
MSG_TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version {found}). Please update your "
    "GPU driver by downloading and installing a new version from the URL: "
    "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
    "install a PyTorch version that has been compiled with your version of the CUDA driver."
)
MSG_MISMATCH = (
    "Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 803: system has unsupported "
    "display driver / cuda driver combination"
)
MSG_UNKNOWN = (
    "CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing "
    "env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be "
    "zero."
)
MSG_NO_GPUS = "No CUDA GPUs are available"

# SM counts of the GPUs the sim knows; node.json may give "multi_processor_count" instead.
_SM_COUNTS = {
    "H200": 132,
    "H100 80GB HBM3": 132,
    "H100": 132,
    "B200": 148,
    "A100": 108,
    "L40S": 142,
    "L4": 58,
    "RTX 4090": 128,
}


def root() -> str:
    return os.environ.get("PVE_SIM_ROOT") or "/"


def path(*parts: str) -> str:
    return os.path.join(root(), *parts)


def nvidia_dir() -> str:
    return os.environ.get("PVE_SIM_NVIDIA_DIR") or path("proc", "driver", "nvidia")


def _read_json(name: str, default):
    try:
        with open(os.path.join(nvidia_dir(), "sim", name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def kernel_module_version() -> str | None:
    """The loaded kernel module's version, from ``/proc/driver/nvidia/version``."""
    try:
        with open(os.path.join(nvidia_dir(), "version")) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def libcuda_version() -> str | None:
    """Version of the userspace libcuda that ``libcuda.so.1`` resolves to, or None if absent."""
    libdir = path("usr", "lib", "x86_64-linux-gnu")
    link = os.path.join(libdir, "libcuda.so.1")
    current = link
    for _ in range(8):  # follow the ldconfig link chain inside libdir
        if not os.path.islink(current):
            break
        current = os.path.join(libdir, os.path.basename(os.readlink(current)))
    if not os.path.isfile(current):
        return None
    m = re.fullmatch(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)", os.path.basename(current))
    if m:
        return m.group(1)
    # libcuda.so.1 is a plain file: take the single libcuda.so.<ver> beside it, if any.
    found = [
        m.group(1)
        for n in sorted(os.listdir(libdir))
        if (m := re.fullmatch(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)", n))
    ]
    return found[0] if len(found) == 1 else None


def driver_cuda_int(driver: str) -> int:
    """What cudaDriverGetVersion() reports for a driver: 570.x -> 12080, 580.x -> 13000."""
    branch = version_tuple(driver)[0]
    result = 0
    for floor, cuda in DRIVER_CUDA:
        if branch >= floor:
            result = cuda
    return result


def _minor(dev_path: str, name_number: int) -> int:
    try:
        st = os.stat(dev_path)
    except OSError:
        return name_number
    if stat.S_ISCHR(st.st_mode):
        return os.minor(st.st_rdev)
    return name_number


def node_info() -> dict:
    data = _read_json("node.json", {})
    return data if isinstance(data, dict) else {}


def _proc_gpus() -> list[dict]:
    """GPUs as the kernel module lists them: ``<nvidia>/gpus/<bus>/information``."""
    base = os.path.join(nvidia_dir(), "gpus")
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for bus in buses:
        try:
            with open(os.path.join(base, bus, "information")) as f:
                text = f.read()
        except OSError:
            continue
        info = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                info[key.strip()] = value.strip()
        if info.get("GPU Excluded") == "Yes":
            continue  # NVreg_ExcludedGpus: the driver keeps it away from CUDA and NVML
        location = info.get("Bus Location", bus)
        gpu = {
            "name": info.get("Model", "NVIDIA Graphics Device"),
            "uuid": info.get("GPU UUID", ""),
            "pci_bus_id": "0000" + location if location.count(":") == 2 else location,
        }
        if info.get("Device Minor", "").isdigit():
            gpu["minor"] = int(info["Device Minor"])
        out.append(gpu)
    return out


def gpu_table() -> list[dict]:
    """Every GPU of the node with its facts.

    From ``sim/node.json`` when its ``gpus`` is a list of GPU dicts; otherwise (the node's own
    config: ``gpus`` is a count) names, UUIDs, bus ids and minors come from the kernel's
    ``<nvidia>/gpus/*/information`` and memory / compute capability from node.json's
    ``gpu_memory_mib`` / ``compute_cap``.
    """
    cfg = node_info()
    listed = cfg.get("gpus")
    if isinstance(listed, list):
        gpus = [dict(g) for g in listed if isinstance(g, dict)]
    else:
        gpus = _proc_gpus()
        for g in gpus:
            g.setdefault(
                "memory_total_mib", cfg.get("gpu_memory_mib", cfg.get("memory_total_mib", 0))
            )
            g.setdefault("compute_cap", cfg.get("compute_cap", "9.0"))
        # nvidia-smi's index is the GPU's position in PCI order; the minor is the kernel's own
        for i, g in enumerate(sorted(gpus, key=lambda g: _pci_key(g["pci_bus_id"]))):
            g["index"] = i
            g.setdefault("minor", i)
    for i, g in enumerate(gpus):
        g.setdefault("minor", g.get("index", i))
        g.setdefault("index", g["minor"])
    return gpus


def _gpu_by_minor() -> dict[int, dict]:
    return {int(g["minor"]): g for g in gpu_table()}


def physical_gpus() -> list[dict]:
    """GPUs whose /dev/nvidiaN node is present here, in minor order, with their node facts."""
    devdir = path("dev")
    try:
        names = os.listdir(devdir)
    except OSError:
        return []
    known = _gpu_by_minor()
    found = []
    for name in names:
        m = re.fullmatch(r"nvidia(\d+)", name)
        if not m:
            continue
        minor = _minor(os.path.join(devdir, name), int(m.group(1)))
        gpu = known.get(minor)
        if gpu is None:
            if known:
                continue  # a device node with no GPU behind it: open() fails, CUDA skips it
            gpu = {"index": minor, "name": "NVIDIA Graphics Device"}
        found.append((minor, gpu))
    # CUDA_DEVICE_ORDER=PCI_BUS_ID numbers devices in PCI order. The default, FASTEST_FIRST, leaves
    # the order of equal GPUs unspecified (CUDA Programming Guide, environment variables): the
    # double then takes minor order, so code that forgets PCI_BUS_ID sees a different numbering
    # whenever minors are not in PCI order.
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        found.sort(key=lambda x: _pci_key(str(x[1].get("pci_bus_id", ""))))
    else:
        found.sort(key=lambda x: x[0])
    return [dict(gpu, minor=minor) for minor, gpu in found]


def _pci_key(bus_id: str) -> tuple:
    """(domain, bus, device, function) of ``00000000:83:00.0`` or ``0000:83:00.0``."""
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])", bus_id.strip())
    if not m:
        return (1 << 32, bus_id)
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))


def _apply_visible_devices(gpus: list[dict]) -> list[dict]:
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus
    chosen: list[dict] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            break
        pick = None
        if re.fullmatch(r"\d+", item):
            i = int(item)
            if i < len(gpus):
                pick = gpus[i]
        elif item.startswith("GPU-"):
            matches = [g for g in gpus if str(g.get("uuid", "")).startswith(item)]
            if len(matches) == 1:
                pick = matches[0]
        if pick is None or pick in chosen:
            break  # CUDA stops parsing at the first invalid entry
        chosen.append(pick)
    return chosen


class CudaState:
    """Outcome of CUDA initialisation: ``error`` (None if fine) and the visible devices."""

    def __init__(self, error: str | None, devices: list[dict], silent: bool = False):
        self.error = error
        self.devices = devices
        self.silent = silent


def probe() -> CudaState:
    libcuda = libcuda_version()
    if libcuda is None:
        return CudaState(MSG_NO_DRIVER, [])
    floor = VARIANT["compat_driver"] or VARIANT["min_driver"]
    if version_tuple(libcuda) < version_tuple(floor):
        return CudaState(MSG_TOO_OLD.format(found=driver_cuda_int(libcuda)), [])
    module = kernel_module_version()
    if module is None or not os.path.exists(path("dev", "nvidiactl")):
        return CudaState(MSG_NO_DRIVER, [])
    if module != libcuda:
        return CudaState(MSG_MISMATCH, [])
    if not os.path.exists(path("dev", "nvidia-uvm")) or _uvm_major_stale():
        return CudaState(MSG_UNKNOWN, [])
    devices = _apply_visible_devices([g for g in physical_gpus() if not cuda_unusable(g)])
    if not devices:
        # cudaErrorNoDevice: torch reports zero devices without a warning.
        return CudaState(MSG_NO_GPUS, [], silent=True)
    return CudaState(None, devices)


def cuda_unusable(gpu: dict) -> bool:
    """A GPU NVML lists but CUDA does not enumerate (torch.json ``cuda_unusable``: node indexes or
    UUIDs), as one in an Xid error state that needs a reset: torch.cuda.device_count(), which
    asks NVML first, counts it; torch._C._cuda_getDeviceCount() (cudaGetDeviceCount) does not."""
    marked = {str(x).lower() for x in torch_config().get("cuda_unusable") or []}
    return str(gpu.get("index")) in marked or str(gpu.get("uuid", "")).lower() in marked


def nvml_count() -> int:
    """What torch's ``_device_count_nvml()`` returns: NVML's device count here
    (``nvmlDeviceGetCount_v2``: every GPU this process can open, whether CUDA can use it or not),
    trimmed as torch trims it by ``CUDA_VISIBLE_DEVICES``; -1 when NVML cannot start (no
    libnvidia-ml.so.1, or one that is not the kernel module's version), and torch falls back to
    cudaGetDeviceCount."""
    lib = os.path.realpath(path("usr", "lib", "x86_64-linux-gnu", "libnvidia-ml.so.1"))
    m = re.fullmatch(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)", os.path.basename(lib))
    module = kernel_module_version()
    if not os.path.isfile(lib) or not m or module is None or m.group(1) != module:
        return -1  # nvmlInit: no library, or "Driver/library version mismatch"
    if not os.path.exists(path("dev", "nvidiactl")):
        return -1  # nvmlInit talks to the driver through /dev/nvidiactl
    gpus = physical_gpus()
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return len(gpus)
    if spec.startswith("GPU-"):
        return len(_apply_visible_devices(gpus))
    count = 0
    for item in spec.split(","):  # torch's _parse_visible_devices, then the trim to NVML's count
        digits = re.match(r"\s*(\d+)", item)
        if not digits or int(digits.group(1)) >= len(gpus):
            break
        count += 1
    return count


def has_context(gpu: dict) -> bool:
    """Whether this process has made ``gpu``'s primary context (cuDevicePrimaryCtxGetState)."""
    return gpu.get("index") in _opened


def _uvm_major_stale() -> bool:
    """A /dev/nvidia-uvm whose major is not the loaded nvidia-uvm module's (the module was reloaded
    with another dynamic major after the node was made): open() fails, CUDA reports error 999."""
    try:
        st = os.stat(path("dev", "nvidia-uvm"))
        with open(path("proc", "devices")) as f:
            text = f.read()
    except OSError:
        return False
    if not stat.S_ISCHR(st.st_mode):
        return False
    m = re.search(r"^\s*(\d+) nvidia-uvm$", text, re.M)
    return bool(m) and int(m.group(1)) != os.major(st.st_rdev)


def warning_text(state: CudaState) -> str:
    return "CUDA initialization: " + state.error + _TRIGGERED


def _listed_alive(p: dict) -> bool:
    """Whether a processes.json entry's process still lives, as far as this process can tell: a
    held lock (spawned processes, contexts), or, for a registered process of this very container
    (``ct_pidns``/``ct_pid``), its pid here (the driver frees a process's memory when it exits);
    other registered processes count as alive (their node pid is not visible here)."""
    if p.get("lock") and not _lock_held(p["lock"]):
        return False
    if p.get("ct_pidns") is not None and p.get("ct_pidns") == _pidns():
        return os.path.exists(f"/proc/{p.get('ct_pid')}")
    return True


def used_mib(gpu: dict) -> int:
    procs = _read_json("processes.json", [])
    if isinstance(procs, dict):
        procs = procs.get("processes", [])
    total = 0
    index = gpu.get("index")
    for p in procs if isinstance(procs, list) else []:
        if not isinstance(p, dict) or p.get("dead") or p.get("alive") is False:
            continue
        if not _listed_alive(p):
            continue  # its process is gone (nvidia-smi does not count it either)
        if p.get("gpu", p.get("gpu_index")) == index:
            total += int(p.get("used_mib", 0))
    return total


def sm_count(gpu: dict) -> int:
    if "multi_processor_count" in gpu:
        return int(gpu["multi_processor_count"])
    name = str(gpu.get("name", ""))
    for key, count in _SM_COUNTS.items():
        if key in name:
            return count
    return 108


def capability(gpu: dict) -> tuple[int, int]:
    cap = str(gpu.get("compute_cap", "9.0"))
    major, _, minor = cap.partition(".")
    return int(major), int(minor or 0)


def torch_config() -> dict:
    data = _read_json("torch.json", {})
    return data if isinstance(data, dict) else {}


# ---- CUDA contexts as compute processes (opt-in: ``{"register_contexts": true}`` in torch.json)
# The real CUDA runtime creates a context on a device at its first real use (torch: mem_get_info,
# an allocation); from then until the process exits, NVML (nvidia-smi --query-compute-apps on the
# node) lists the process on that GPU with its used memory. The double adds a processes.json entry
# per device: the node pid is not visible from the container, so the entry names the process by
# its pid namespace (inode) and pid there, and the node's nvidia-smi double resolves it; a held
# flock on ``ctx-<ns>-<pid>.lock`` keeps it alive (as spawned processes' locks do).
# ``"meet_node_query": true`` makes the double wait at exit until the node's nvidia-smi has listed
# it (``<lock>.seen``), so a test sees the overlap deterministically.
_contexts: dict[int, object] = {}
_MEET_TIMEOUT_S = 120
# Devices this process has a context on (always tracked, registered or not).
_opened: set = set()

# The real runtime's errors when it cannot create a context (CUDA Runtime API, cudaError_t:
# cudaErrorMemoryAllocation "out of memory", cudaErrorDevicesUnavailable "CUDA-capable device(s)
# is/are busy or unavailable"), as torch raises them (c10/cuda/CUDAException: "CUDA error: <text>"
# then its advice lines).
_ADVICE = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
MSG_OOM = "CUDA error: out of memory" + _ADVICE
MSG_BUSY = "CUDA error: CUDA-capable device(s) is/are busy or unavailable" + _ADVICE
DEFAULT_CONTEXT_MIB = 500


def compute_mode(gpu: dict) -> str:
    """The GPU's compute mode as nvidia-smi prints it (node.json ``compute_modes``, keyed by the
    node's index): ``Default``, ``Exclusive_Process`` or ``Prohibited``."""
    modes = node_info().get("compute_modes") or {}
    return str(modes.get(str(gpu.get("index")), "Default"))


def _others_on(gpu: dict) -> list[dict]:
    """Live compute processes on ``gpu`` other than this process (processes.json)."""
    procs = _read_json("processes.json", [])
    if isinstance(procs, dict):
        procs = procs.get("processes", [])
    ns, me = _pidns(), os.getpid()
    found = []
    for p in procs if isinstance(procs, list) else []:
        if not isinstance(p, dict) or p.get("dead") or p.get("alive") is False:
            continue
        if p.get("gpu", p.get("gpu_index")) != gpu.get("index"):
            continue
        if p.get("pidns") == ns and p.get("ns_pid") == me:
            continue
        if not _listed_alive(p):
            continue
        found.append(p)
    return found


def _pidns() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _lock_held(lock: str) -> bool:
    import fcntl

    try:
        fd = os.open(os.path.join(nvidia_dir(), "sim", lock), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False  # nobody holds it: its process is gone
    except OSError:
        return True
    finally:
        os.close(fd)


def open_context(gpu: dict) -> None:
    """This process's CUDA context on ``gpu``, created at the first call that needs one (like
    the runtime's primary context): refused as the real runtime refuses it (Prohibited, or
    Exclusive_Process with another compute process there: busy; less free memory than a context
    takes: out of memory); then recorded in ``<nvidia>/sim/contexts.log`` (every context, for
    tests) and, with ``register_contexts``, listed as a compute process (:func:`hold_context`)."""
    index = gpu.get("index")
    if index in _opened:
        return
    mode = compute_mode(gpu)
    if mode == "Prohibited" or (mode == "Exclusive_Process" and _others_on(gpu)):
        raise RuntimeError(MSG_BUSY)
    total = int(gpu.get("memory_total_mib", gpu.get("memory_mib", 0)))
    need = int(torch_config().get("context_mib", DEFAULT_CONTEXT_MIB))
    if total - used_mib(gpu) < need:
        raise RuntimeError(MSG_OOM)
    _opened.add(index)
    _record_context(gpu)
    hold_context(gpu)


def _record_context(gpu: dict) -> None:
    """One line per context created, in ``<nvidia>/sim/contexts.log`` (best effort)."""
    line = {
        "pidns": _pidns(),
        "ns_pid": os.getpid(),
        "gpu_index": gpu.get("index"),
        "uuid": gpu.get("uuid"),
    }
    try:
        with open(os.path.join(nvidia_dir(), "sim", "contexts.log"), "a") as f:
            f.write(json.dumps(line) + "\n")
    except OSError:
        pass


_register_own: list[bool] = []


def register_own_contexts() -> None:
    """List this process's contexts as compute processes whatever torch.json says. The sim's
    stand-in trainers call it (sim/__main__.py ``TRAIN_PY``, sim/trainer.py): a training holds
    its GPUs on the simulated node as a real one does, while pvegpu's own probes keep torch.json's
    default (a test opts in with ``register_contexts``)."""
    _register_own.append(True)


def hold_context(gpu: dict) -> None:
    """Register this process as a compute process on ``gpu`` (once per device), if asked."""
    cfg = torch_config()
    index = gpu.get("index")
    if not (cfg.get("register_contexts") or _register_own) or index in _contexts:
        return
    import atexit
    import fcntl
    import sys

    sim = os.path.join(nvidia_dir(), "sim")
    ns = os.stat("/proc/self/ns/pid").st_ino
    lock = f"ctx-{ns}-{os.getpid()}-{index}.lock"
    # held open (and flock'ed) until exit: the lock is how the node sees this context alive
    fd = open(os.path.join(sim, lock), "w")  # noqa: SIM115
    fcntl.flock(fd, fcntl.LOCK_EX)
    _contexts[index] = fd
    with open("/proc/self/cmdline", "rb") as f:
        name = f.read().split(b"\0")[0].decode(errors="replace") or sys.executable
    entry = {
        "pid": None,
        "pidns": ns,
        "ns_pid": os.getpid(),
        "gpu_index": index,
        "used_mib": int(cfg.get("context_mib", 500)),
        "name": name,
        "lock": lock,
    }
    _update_processes(sim, lambda procs: procs + [entry])
    if len(_contexts) == 1:
        atexit.register(_release_contexts, sim, bool(cfg.get("meet_node_query")))


def _update_processes(sim: str, change) -> None:
    """processes.json changed under its lock (the same one simctl takes)."""
    import fcntl

    table = os.path.join(sim, "processes.json")
    with open(table + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            with open(table) as f:
                procs = json.load(f)
        except (OSError, ValueError):
            procs = []
        with open(table + ".tmp", "w") as f:
            json.dump(change(procs), f, indent=1)
        os.replace(table + ".tmp", table)


def _release_contexts(sim: str, meet: bool) -> None:
    """At exit: (meet_node_query) wait until the node listed a context, then drop the entries."""
    import time

    locks = {os.path.basename(fd.name) for fd in _contexts.values()}
    deadline = time.monotonic() + _MEET_TIMEOUT_S
    while meet and time.monotonic() < deadline:
        if any(os.path.exists(os.path.join(sim, lk + ".seen")) for lk in locks):
            break
        time.sleep(0.05)
    _update_processes(sim, lambda procs: [p for p in procs if p.get("lock") not in locks])
    for fd in _contexts.values():
        fd.close()
    for lk in locks:
        for name in (lk, lk + ".seen"):
            try:
                os.unlink(os.path.join(sim, name))
            except OSError:
                pass
    _contexts.clear()
