#!/usr/bin/python3
"""Sim-private helper run inside the node (installed at /usr/lib/pve-sim/simctl.py).

    simctl.py apply [--boot]    make /dev, /proc views and the node's driver userspace match
                                node.json
    simctl.py prune             drop processes.json entries whose process is gone
    simctl.py spawn GPU MIB NAME [--cgroup=LINE] -- CMDLINE...
                                a sleeping "GPU compute process" whose /proc/<pid>/cmdline is
                                CMDLINE (and whose /proc/<pid>/cgroup reads LINE, e.g. a container
                                unit's "0::/lxc/200/ns/system.slice/x.service", as PVE's LXC
                                layout has it)

Only the sim uses this; product code never calls it.
"""

import ctypes
import fcntl
import json
import os
import shutil
import stat
import sys
import time

GPU_DIR = "/var/lib/pve-sim/gpu"
NODE_JSON = GPU_DIR + "/node.json"
PROCS_JSON = GPU_DIR + "/processes.json"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
DOUBLES = "/usr/lib/pve-sim/doubles"
SMI_FIELDS = "/usr/lib/pve-sim/nvidia-smi-fields"
PROC_DEVICES_VIEW = "/run/pve-sim/proc-devices"
PROC_DEVICES_BASE = "/run/pve-sim/proc-devices.base"

# Typical HGX 8-GPU bus numbers; more GPUs continue the pattern.
BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]


# Excluded GPUs (NVreg_ExcludedGpus) sit before the listed ones in PCI order, on these buses.
EXCLUDED_BUS = 0x07


def kernel_minor(cfg, position):
    """The device minor of the kernel's GPU at ``position`` in PCI order (excluded GPUs first).

    The kernel module numbers minors in its own probe order, which need not be PCI order (a
    public report shows nvidia-smi index 3 with Device Minor 0): ``minor_order`` "reverse"
    gives the first GPU the highest minor.
    """
    order = cfg.get("minor_order", "pci")
    total = int(cfg["gpus"]) + int(cfg.get("excluded_gpus", 0))
    if order == "reverse":
        return total - 1 - position
    if order != "pci":
        raise SystemExit(f"minor_order={order!r}: use 'pci' or 'reverse'")
    return position


def gpu_minor(cfg, index):
    """The device minor (N of /dev/nvidiaN) of the GPU nvidia-smi numbers ``index`` (PCI order
    among the GPUs NVML lists). With every GPU listed the minors are a permutation of 0..N-1,
    which a confusion of index and minor leaves the same as a set; an excluded GPU keeps its
    minor and leaves a gap (nv_pci_probe numbers it before nv_check_and_exclude_gpu), so code
    that takes the index for the minor misses a GPU there."""
    return kernel_minor(cfg, int(cfg.get("excluded_gpus", 0)) + index)


def excluded_list(cfg):
    """The GPUs the kernel module probed but excluded: a minor and a /proc entry each, no
    nvidia-smi row (NVML counts them apart: nvmlGetExcludedDeviceCount)."""
    out = []
    for j in range(int(cfg.get("excluded_gpus", 0))):
        h = "%08x" % (0x5A1EE000 + j)
        out.append(
            {
                "index": None,
                "minor": kernel_minor(cfg, j),
                "uuid": f"GPU-{h}-5157-4e4f-9d1a-{0x0C0FFEEE0000 + j:012x}",
                "pci_bus_id": f"00000000:{EXCLUDED_BUS + j:02X}:00.0",
                "name": cfg["gpu_name"],
                "excluded": True,
            }
        )
    return out


def gpu_list(cfg):
    out = []
    for i in range(int(cfg["gpus"])):
        bus = BUSES[i] if i < len(BUSES) else 0xE0 + i
        h = "%08x" % (0x5A1E0000 + i * 0x1111)
        out.append(
            {
                "index": i,
                "minor": gpu_minor(cfg, i),
                "uuid": f"GPU-{h}-5157-4e4f-9d1a-{0x0C0FFEE00000 + i:012x}",
                "pci_bus_id": f"00000000:{bus:02X}:00.0",
                "name": cfg["gpu_name"],
                "memory_total_mib": int(cfg["gpu_memory_mib"]),
                "compute_cap": cfg["compute_cap"],
            }
        )
    return out


def firmware_line(driver, gsp_firmware):
    """The `GPU Firmware:` line of a GPU's information file, or "" when none is printed.

    With GSP firmware it holds the firmware's version (the driver's). Without it, drivers
    before 590.44.01 print no line and 590.44.01 on print `N/A` (nv-procfs.c: the 580 branch,
    580.142 included, still tests `firmware_version[0] != '\\0'`).

    >>> firmware_line("580.95.05", False), firmware_line("590.48.01", False)
    ('', 'GPU Firmware: \\t N/A\\n')
    """
    if gsp_firmware:
        return f"GPU Firmware: \t {driver}\n"
    always = tuple(int(x) for x in driver.split(".")) >= (590, 44, 1)
    return "GPU Firmware: \t N/A\n" if always else ""


def gpu_information(g, bus, driver, gsp_firmware=True):
    """/proc/driver/nvidia/gpus/<bus>/information as the kernel module prints it
    (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info);
    the `GPU Firmware:` line: firmware_line.
    """
    return (
        f"Model: \t\t {g['name']}\n"
        f"IRQ:   \t\t {200 + g['minor']}\n"
        f"GPU UUID: \t {g['uuid']}\n"
        "Video BIOS: \t 96.00.a5.00.01\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        f"Bus Location: \t {bus}\n"
        f"Device Minor: \t {g['minor']}\n"
        + firmware_line(driver, gsp_firmware)
        + f"GPU Excluded:\t {'Yes' if g.get('excluded') else 'No'}\n"
    )


def nvswitch_procfs(count):
    """/proc/driver/nvidia-nvswitch/devices/<dddd:bb:dd.f>/information of ``count`` NVSwitches,
    as the nvidia-nvswitch module prints it (open-gpu-kernel-modules procfs_nvswitch.c
    nv_procfs_read_device_info); nothing at all without NVSwitches."""
    base = "/proc/driver/nvidia-nvswitch"
    shutil.rmtree(base, ignore_errors=True)
    for i in range(count):
        bus = f"0000:{0x05 + i:02x}:00.0"
        _write(
            f"{base}/devices/{bus}/information",
            f"BIOS Version: 96.10.6d.00.01\nUUID: SWX-{i:08x}-5ac1-7c2d-9e3f-5eed0000000{i % 10}\n"
            f"Physical location ID: {i:04x}\n",
        )


def load_cfg():
    with open(NODE_JSON) as f:
        return json.load(f)


def _mknod(path, major, minor, mode=0o666):
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
            os.chmod(path, mode)
            return
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    os.chmod(path, mode)


def _rm(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:  # O_TRUNC keeps the inode: bind mounts of the file see the change
        f.write(text)


def _mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def apply(boot=False):
    cfg = load_cfg()
    loaded = cfg.get("driver_loaded", True)
    gpus = gpu_list(cfg)
    nv = int(cfg.get("nvidia_major", 195))
    uvm = int(cfg["uvm_major"])
    caps = int(cfg["caps_major"])

    gj = json.dumps(gpus, indent=1)
    if not os.path.exists(GPU_DIR + "/gpus.json") or _read(GPU_DIR + "/gpus.json") != gj:
        with open(GPU_DIR + "/gpus.json.tmp", "w") as f:
            f.write(gj)
        os.replace(GPU_DIR + "/gpus.json.tmp", GPU_DIR + "/gpus.json")

    # --- /dev ---
    for name in os.listdir("/dev"):
        minors = {g["minor"] for g in gpus + excluded_list(cfg)}
        stray = name.startswith("nvidia") and name[6:].isdigit() and int(name[6:]) not in minors
        if stray or (not loaded and name.startswith("nvidia") and name[6:].isdigit()):
            _rm("/dev/" + name)
    if loaded:
        for g in gpus:
            _mknod(f"/dev/nvidia{g['minor']}", nv, g["minor"])
        _mknod("/dev/nvidiactl", nv, 255)
        _mknod("/dev/nvidia-modeset", nv, 254)
        for name, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
            if os.path.lexists("/dev/" + name) or (boot and cfg.get("uvm_nodes_at_boot", True)):
                _mknod("/dev/" + name, uvm, minor)
        _mknod("/dev/nvidia-caps/nvidia-cap1", caps, 1, 0o400)
        _mknod("/dev/nvidia-caps/nvidia-cap2", caps, 2, 0o444)
    else:
        for name in ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
            _rm("/dev/" + name)
        shutil.rmtree("/dev/nvidia-caps", ignore_errors=True)

    # --- /proc/devices view ---
    if not os.path.exists(PROC_DEVICES_BASE):
        shutil.copyfile(PROC_DEVICES_VIEW, PROC_DEVICES_BASE)
    base = _read(PROC_DEVICES_BASE)
    chr_part, _, blk_part = base.partition("\nBlock devices:")
    lines = chr_part.split("\n")
    head, entries = lines[0], [e for e in lines[1:] if e.strip()]
    entries = [e for e in entries if "nvidia" not in e]
    if loaded:
        entries += [f"{nv:3d} nvidia", f"{uvm:3d} nvidia-uvm", f"{caps:3d} nvidia-caps"]
    entries.sort(key=lambda e: int(e.split()[0]))
    _write(PROC_DEVICES_VIEW, head + "\n" + "\n".join(entries) + "\n\nBlock devices:" + blk_part)

    # --- /proc/driver/nvidia ---
    pdn = "/proc/driver/nvidia"
    if loaded:
        ver = cfg["driver_version"]
        _write(
            pdn + "/version",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  Tue Sep 23 10:14:39 UTC 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n",
        )
        want = {g["pci_bus_id"][4:].lower(): g for g in gpus + excluded_list(cfg)}
        os.makedirs(pdn + "/gpus", exist_ok=True)
        for d in os.listdir(pdn + "/gpus"):
            if d not in want:
                shutil.rmtree(pdn + "/gpus/" + d)
        for bus, g in want.items():
            _write(
                f"{pdn}/gpus/{bus}/information",
                gpu_information(g, bus, ver, cfg.get("gsp_firmware", True)),
            )
        os.makedirs(pdn + "/sim", exist_ok=True)
        if not _mounted(pdn + "/sim"):
            os.system(f"mount --bind {GPU_DIR} {pdn}/sim")
    else:
        if os.path.exists(pdn + "/sim") and _mounted(pdn + "/sim"):
            os.system(f"umount {pdn}/sim")
        shutil.rmtree(pdn, ignore_errors=True)

    nvswitch_procfs(int(cfg.get("nvswitches") or 0) if loaded else 0)

    # --- node driver userspace (a real driver upgrade replaces it together with the module) ---
    ver = cfg["driver_version"]
    install_userspace("/", ver)
    for name in os.listdir("/root"):
        if (
            name.startswith("NVIDIA-Linux-x86_64-")
            and name.endswith(".run")
            and name != f"NVIDIA-Linux-x86_64-{ver}.run"
        ):
            _rm("/root/" + name)
    run = f"/root/NVIDIA-Linux-x86_64-{ver}.run"
    src = _read(DOUBLES + "/nvidia-installer.run").replace("@VERSION@", ver)
    src += smi_source()
    if not os.path.exists(run) or _read(run) != src:
        _write(run, src)
        os.chmod(run, 0o755)


def smi_source():
    """The nvidia-smi double with the real field lists embedded (a container that runs the copy
    the .run installed has no sim directory to read them from)."""
    lists = {}
    for kind in ("gpu", "compute-apps"):
        with open(f"{SMI_FIELDS}/query-{kind}-fields.txt") as f:
            lists[kind] = [line.strip() for line in f if line.strip()]
    src = _read(DOUBLES + "/nvidia-smi")
    return src.replace("\nFIELD_LISTS = None\n", f"\nFIELD_LISTS = {lists!r}\n", 1)


def install_userspace(root, ver):
    """Same layout as the .run double installs (kept in sync with
    sim/doubles/nvidia-installer.run)."""
    lib = os.path.join(root, LIBDIR.lstrip("/"))
    os.makedirs(lib, exist_ok=True)
    for name in os.listdir(lib):
        if (
            (name.startswith("libcuda.so.") or name.startswith("libnvidia-ml.so."))
            and not name.endswith(ver)
            and name not in ("libcuda.so.1", "libnvidia-ml.so.1")
        ):
            _rm(os.path.join(lib, name))
    for base in ("libcuda.so", "libnvidia-ml.so"):
        p = os.path.join(lib, f"{base}.{ver}")
        content = f"SIMULATED NVIDIA {base} {ver}\n"
        if not os.path.exists(p) or _read(p) != content:
            _write(p, content)
        for link, target in ((f"{base}.1", f"{base}.{ver}"), (base, f"{base}.1")):
            lp = os.path.join(lib, link)
            if not (os.path.islink(lp) and os.readlink(lp) == target):
                _rm(lp)
                os.symlink(target, lp)
    smi = os.path.join(root, "usr/bin/nvidia-smi")
    src = smi_source()
    if not os.path.exists(smi) or _read(smi) != src:
        _write(smi, src)
    os.chmod(smi, 0o755)


def proc_starttime(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _alive(p):
    lock = p.get("lock")
    if not lock:
        return os.path.exists(f"/proc/{p['pid']}")
    try:
        fd = os.open(os.path.join(GPU_DIR, lock), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def spawn(argv):
    gpu, mib, name = int(argv[0]), int(argv[1]), argv[2]
    rest = argv[3:]
    cgroup = None
    if rest and rest[0].startswith("--cgroup="):
        cgroup = rest.pop(0).split("=", 1)[1]
    assert rest[0] == "--"
    cmdline = rest[1:]
    pid = os.getpid()
    # Make /proc/<pid>/cmdline exactly CMDLINE: PR_SET_MM_MAP with arg_start/arg_end pointing at our
    # own buffer (PR_SET_MM_ARG_START would need CAP_SYS_RESOURCE, which sandboxes often drop).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p

    class MMMap(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_uint64)
            for n in (
                "start_code",
                "end_code",
                "start_data",
                "end_data",
                "start_brk",
                "brk",
                "start_stack",
                "arg_start",
                "arg_end",
                "env_start",
                "env_end",
            )
        ] + [("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]

    f = _read("/proc/self/stat").rsplit(")", 1)[1].split()
    g = lambda n: int(f[n - 3])  # noqa: E731  (proc(5) field numbers)
    buf = b"\0".join(a.encode() for a in cmdline) + b"\0"
    cbuf = ctypes.create_string_buffer(buf, len(buf))
    addr = ctypes.addressof(cbuf)
    m = MMMap(
        g(26),
        g(27),
        g(45),
        g(46),
        g(47),
        libc.sbrk(0),
        g(28),
        addr,
        addr + len(buf),
        g(50),
        g(51),
        None,
        0,
        0xFFFFFFFF,
    )
    if libc.prctl(35, 14, ctypes.byref(m), ctypes.sizeof(m), 0) != 0:  # PR_SET_MM, PR_SET_MM_MAP
        sys.exit(f"prctl(PR_SET_MM_MAP) failed: {os.strerror(ctypes.get_errno())}")
    libc.prctl(15, os.path.basename(cmdline[0]).encode()[:15], 0, 0, 0)  # PR_SET_NAME
    # liveness, checkable from any namespace: we hold an flock on procs/<pid>.lock while alive
    os.makedirs(GPU_DIR + "/procs", exist_ok=True)
    lockrel = f"procs/{pid}.lock"
    if cgroup is not None:
        # The node's view of the process's cgroup (no cgroup tree is made): a file bind-mounted
        # over /proc/<pid>/cgroup in the node's (private) mount namespace.
        cgfile = os.path.join(GPU_DIR, f"procs/{pid}.cgroup")
        with open(cgfile, "w") as f:
            f.write(cgroup.rstrip("\n") + "\n")
        if os.system(f"mount --bind {cgfile} /proc/{pid}/cgroup") != 0:
            sys.exit("mount --bind over /proc/<pid>/cgroup failed")
    # held open (and flock'ed) for this process's life: the lock is how prune sees it alive
    alive = open(os.path.join(GPU_DIR, lockrel), "w")  # noqa: SIM115
    fcntl.flock(alive, fcntl.LOCK_EX)
    entry = {"pid": pid, "gpu_index": gpu, "used_mib": mib, "name": name, "lock": lockrel}
    _update_procs(lambda procs: [p for p in procs if _alive(p)] + [entry])
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
    os.close(1)
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)
    while True:
        time.sleep(3600)


def _update_procs(change):
    """Read processes.json, apply ``change`` (list -> list), write it back atomically, under the
    table's lock."""
    with open(PROCS_JSON + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            procs = json.loads(_read(PROCS_JSON))
        except (OSError, ValueError):
            procs = []
        new = change(procs)
        if new != procs:
            with open(PROCS_JSON + ".tmp", "w") as f:
                json.dump(new, f, indent=1)
            os.replace(PROCS_JSON + ".tmp", PROCS_JSON)


def prune():
    """Drop processes.json entries whose process is gone."""

    def drop_dead(procs):
        keep = [p for p in procs if _alive(p)]
        for p in procs:
            if p not in keep and p.get("lock"):
                _rm(os.path.join(GPU_DIR, p["lock"]))
        return keep

    _update_procs(drop_dead)


def register(argv):
    """A running node process as a compute process (SimNode.register_gpu_process); its name is its
    argv[0], as nvidia-smi shows a path. A watcher holds the entry's lock while the process lives
    (same start time: a reused pid is another process), so every pid namespace can tell whether it
    still lives: the container's nvidia-smi counts its memory (memory.used is device-wide) and
    lists it by container pid when it is that container's own."""
    pid, gpu, mib = (int(a) for a in argv[:3])
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        name = f.read().split(b"\0")[0].decode(errors="replace")
    started = _start_time(pid)
    lock = f"reg-{pid}-{gpu}-{started}.lock"
    entry = {"pid": pid, "gpu_index": gpu, "used_mib": mib, "name": name, "lock": lock}
    # the process's own pid namespace and innermost pid: what a container's nvidia-smi lists it by
    try:
        entry["ct_pidns"] = os.stat(f"/proc/{pid}/ns/pid").st_ino
        with open(f"/proc/{pid}/status") as f:
            entry["ct_pid"] = int(next(ln.split()[-1] for ln in f if ln.startswith("NSpid:")))
    except (OSError, StopIteration, ValueError):
        pass
    held = os.pipe()
    child = os.fork()
    if child == 0:  # the watcher: detached, holds the lock until the process is gone
        os.setsid()
        if os.fork():
            os._exit(0)
        fd = os.open(os.path.join(GPU_DIR, lock), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(held[1], b"1")
        devnull = os.open("/dev/null", os.O_RDWR)
        for n in (0, 1, 2, held[0], held[1]):
            os.dup2(devnull, n)
        while _start_time(pid) == started:
            time.sleep(0.2)
        os._exit(0)
    os.close(held[1])
    os.waitpid(child, 0)
    os.read(held[0], 1)  # the lock is held before the entry is listed
    os.close(held[0])
    _update_procs(lambda procs: [p for p in procs if _alive(p)] + [entry])


def _start_time(pid):
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def node_pid(argv):
    """Print the node pid of process ct_pid of real-systemd container vmid: the process in the
    pid namespace of the container's PID 1 whose innermost NSpid is ct_pid."""
    vmid, ct_pid = argv[0], argv[1]
    with open(f"/run/pve-sim/ct/{vmid}/init.pid") as f:
        ns = os.stat(f"/proc/{int(f.read())}/ns/pid").st_ino
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{d}/ns/pid").st_ino != ns:
                continue
            with open(f"/proc/{d}/status") as f:
                nspid = next(line.split()[1:] for line in f if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if nspid[-1] == ct_pid:
            print(d)
            return
    sys.exit(f"no process {ct_pid} in CT {vmid}")


def main():
    cmd = sys.argv[1]
    if cmd == "prune":
        prune()
    elif cmd == "register":
        register(sys.argv[2:])
    elif cmd == "node-pid":
        node_pid(sys.argv[2:])
    elif cmd == "apply":
        apply(boot="--boot" in sys.argv)
    elif cmd == "spawn":
        spawn(sys.argv[2:])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
