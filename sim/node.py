"""SimNode: a simulated Proxmox VE node on loopback (see sim/README.md).

    with SimNode(tmp_path / "node") as node:
        env = node.inventory_env()          # PVE_HOST/PVE_SSH_PORT/PVE_SSH_KEY/... for the product
        node.run(["pct", "list"])           # a command on the node (not through ssh)

The node is a mount+pid+uts namespace (started with util-linux `unshare`) whose root is an overlay
of this machine's `/`; all writes land in <state>/node/upper. Debian's sshd listens on
127.0.0.1:<free port>. stop() kills the namespace's init (which kills everything inside), checks
the mount namespace is gone and removes the state directory.

Run by hand:  python -m sim.node up [STATE_DIR]   (prints the inventory env, waits for Ctrl-C)
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODEINIT = HERE / "nodeinit.py"
PYTHON = "/usr/bin/python3"  # Debian's python: the one a real node and container have
TEMPLATE_NAME = "debian-12-standard_12.7-1_amd64.tar.zst"  # the PVE 8 profile's template
# A profile is a Proxmox VE release as the sim plays it: `pveversion`, the template in local
# storage and the tree that template unpacks to (None: this machine's own Debian 12 root), and
# pct's behaviour by version (sim/doubles/pct: create defaults, devN hot-plug).
# Template names: proxmox/dab-pve-appliances <dir>/dab.conf (Name_Version_amd64.tar.zst).
PROFILES = {
    "pve8": {"pve_version": "8.4.1"},
    "pve9": {"pve_version": "9.1.1"},
}
# pve-container as installed with each pve-manager release (an up-to-date node): the newest
# pve-container release on the day of that pve-manager release (the `bump version to ...` commits
# of proxmox/pve-manager and proxmox/pve-container; see docs/real-tools.md). A version takes the
# pair of the newest pve-manager at or below it. devN entries came with pve-container 5.0.7.
PVE_CONTAINER_BY_MANAGER = (
    ("8.0.0", "5.0.3"),
    ("8.0.4", "5.0.4"),
    ("8.0.7", "5.0.5"),
    ("8.1.0", "5.0.8"),
    ("8.1.7", "5.0.9"),
    ("8.1.11", "5.0.10"),
    ("8.2.3", "5.1.10"),
    ("8.2.4", "5.1.11"),
    ("8.2.5", "5.2.0"),
    ("8.2.9", "5.2.1"),
    ("8.2.10", "5.2.2"),
    ("8.3.3", "5.2.3"),
    ("8.3.4", "5.2.4"),
    ("8.3.6", "5.2.6"),
    ("9.0.0", "6.0.9"),
    ("9.0.8", "6.0.10"),
    ("9.0.9", "6.0.11"),
    ("9.0.11", "6.0.13"),
    ("9.0.12", "6.0.14"),
    ("9.0.16", "6.0.15"),
    ("9.0.17", "6.0.17"),
    ("9.0.18", "6.0.18"),
    ("9.1.5", "6.0.19"),
    ("9.1.6", "6.1.2"),
)
TEMPLATES = {  # by PVE major: (file name in local storage, Debian release of its tree)
    8: ("debian-12-standard_12.7-1_amd64.tar.zst", None),
    9: ("debian-13-standard_13.1-2_amd64.tar.zst", "trixie"),
}
TREES_IN_NODE = "/var/lib/pve-sim/trees"
# How containers run (see sim/README.md "Containers"): "systemd" (the default: pct start boots the
# tree's real systemd with systemd-nspawn; pct exec enters it) or "exec" (every pct exec is its own
# namespace over the rootfs; no init, so no systemctl works there: no training unit can run).
CT_INITS = ("systemd", "exec")
# The tree a systemd container boots when the profile's template has none (PVE 8: Debian 12).
SYSTEMD_DEFAULT_RELEASE = "bookworm"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def profile_template(pve_version: str) -> tuple[str, str | None]:
    """(template file name, Debian release of its tree or None) of a PVE version.

    >>> profile_template("9.1.1")
    ('debian-13-standard_13.1-2_amd64.tar.zst', 'trixie')
    >>> profile_template("8.4.1")[0]
    'debian-12-standard_12.7-1_amd64.tar.zst'
    """
    major = int(pve_version.split(".")[0])
    return TEMPLATES[max(m for m in TEMPLATES if m <= major)] if major >= 8 else TEMPLATES[8]


def release_pve_container(pve_version: str) -> str:
    """The pve-container a node of that pve-manager version has (PVE_CONTAINER_BY_MANAGER).

    >>> [release_pve_container(v) for v in ("8.0.4", "8.1.4", "8.4.1", "9.1.1")]
    ['5.0.4', '5.0.8', '5.2.6', '6.0.18']
    """

    def key(v):
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    found = [c for m, c in PVE_CONTAINER_BY_MANAGER if key(m) <= key(pve_version)]
    return found[-1] if found else PVE_CONTAINER_BY_MANAGER[0][1]


def template_text(cfg: dict) -> str:
    """The simulated template file: a marker naming the tree `pct create` unpacks (its lower)."""
    text = f"SIMULATED LXC TEMPLATE {cfg['template_name'].split('_')[0]}\n"
    if cfg.get("template_release"):
        text += f"lower: {TREES_IN_NODE}/{cfg['template_release']}\n"
    return text


NODE_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "USER": "root",
    "LOGNAME": "root",
}

CONFIG_KEYS = (
    "gpus",
    "driver_version",
    "pve_version",
    "pve_container",
    "gpu_name",
    "gpu_memory_mib",
    "compute_cap",
    "compute_modes",
    "uvm_major",
    "caps_major",
    "uvm_nodes_at_boot",
    "template",
    "driver_loaded",
    "minor_order",
    "excluded_gpus",
    "template_kmod",
    "apt_mirror",
    "pct_startup_s",
    "gsp_firmware",
    "template_toolchain",
    "storages",
    "fabric_state",
    "fabric_status",
    "fabric_fields",
    "nvswitches",
)
#: what real nvidia-smi prints for fabric.state in CSV (docs/real-tools.md): NVML's four states,
#: a bare N/A (no fabric), [N/A] / [Not Supported] (a value it cannot give); None: N/A
FABRIC_STATE_ANSWERS = (None, "Not Supported", "Not Started", "In Progress", "Completed")
FABRIC_STATE_ANSWERS += ("N/A", "[N/A]", "[Not Supported]")


def check_fabric_state(cfg: dict):
    """Refuse a fabric.state the real tool never prints (a double that prints it would pass
    tests no real node can)."""
    if cfg.get("fabric_state") not in FABRIC_STATE_ANSWERS:
        raise ValueError(f"fabric_state={cfg['fabric_state']!r}: nvidia-smi never prints it")


# Paths (relative to an upper dir) that tree_digest ignores: logs, sim-private state, runtime bits.
DIGEST_SKIP_NODE = (
    "var/log/pve-sim",
    "var/lib/pve-sim",
    "etc/pve-sim",
    "var/log/wtmp",
    "var/log/btmp",
    "var/log/lastlog",
    "var/log/journal",
    "tmp",
    "run",
    "var/lib/pve-sim-systemd/calls.log",
)
DIGEST_SKIP_CT = (
    "tmp",
    "run",
    "var/log/wtmp",
    "var/log/btmp",
    "var/log/lastlog",
    # a booted container's (ct_init="systemd") own state: journal, timer stamps,
    # PrivateTmp= dirs of its services ("*": any entry starting so)
    "var/log/journal",
    "var/lib/systemd",
    "var/tmp/systemd-private-*",
)

_LIVE: set[SimNode] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _stop_all():
    with _LIVE_LOCK:
        nodes = list(_LIVE)
    for n in nodes:
        try:
            n.stop()
        except Exception as e:  # pragma: no cover - best effort at exit
            print(f"sim: stopping {n.state}: {e}", file=sys.stderr)


def _install_handlers():
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread():
        prev = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            _stop_all()
            if callable(prev):
                prev(signum, frame)
            else:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        if prev in (signal.SIG_DFL, None) or callable(prev):
            signal.signal(signal.SIGTERM, on_term)


def _pdeathsig():
    # If the process that started the node dies (even by SIGKILL), unshare gets SIGKILL, and
    # --kill-child then kills the node's init: no node outlives its owner.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mntns_holders(inode: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}/ns/mnt").st_ino == inode:
                out.append(int(d))
        except OSError:
            pass
    return out


def _describe(pids: list[int]) -> list[str]:
    """'<pid> <state> <cmdline>' of each pid (what a failed stop left), for the error message."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            cmd, state = "?", "gone"
        out.append(f"{pid} {state} {cmd[:120]}")
    return out


def _rmtree(path: Path):
    def onerror(func, p, exc):
        try:
            os.chmod(p, 0o700)
            os.chmod(os.path.dirname(p), 0o700)
        except OSError:
            pass
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass

    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=onerror)


class SimNodeError(RuntimeError):
    pass


def cgroup_hierarchies(root: Path = CGROUP_ROOT) -> list[Path]:
    """The mounts a systemd container needs: the unified one alone (cgroup v2), or the
    ``name=systemd`` and unified ones of a hybrid layout, there with the v1 memory controller
    when mounted (a hybrid node's containers are in it too: their memory use); [] when neither
    is there."""
    if (root / "cgroup.controllers").exists():
        return [root]
    found = [root / "systemd", root / "unified"]
    if not all((p / "cgroup.procs").exists() for p in found):
        return []
    return found + [root / "memory"] if (root / "memory" / "cgroup.procs").exists() else found


def _own_cgroup(hierarchy: Path) -> str:
    """This process's cgroup path in ``hierarchy`` (from /proc/self/cgroup)."""
    # the v2 line is "0::<path>"; a v1 hierarchy's names its controllers (or name=systemd)
    want = {"systemd": "name=systemd", "memory": "memory"}.get(hierarchy.name)
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        num, names, path = line.split(":", 2)
        if (want is None and num == "0") or (want is not None and want in names.split(",")):
            return path
    raise SimNodeError(f"no entry for {hierarchy} in /proc/self/cgroup")


def _make_node_cgroups(state: Path, v2_only=False) -> list[Path]:
    """A fresh cgroup directory per hierarchy for one node, under this process's own cgroup
    (v2_only: in the unified hierarchy alone, the only one a cgroup v2 node has)."""
    hierarchies = cgroup_hierarchies()
    if v2_only:
        hierarchies = [h for h in hierarchies if h.name not in ("systemd", "memory")]
    if not hierarchies:
        raise SimNodeError(
            "ct_init='systemd' needs cgroup v2 or the hybrid layout (name=systemd + "
            "unified) mounted under /sys/fs/cgroup"
        )
    tag = hashlib.sha256(str(state).encode()).hexdigest()[:8]
    dirs = []
    for h in hierarchies:
        d = h / _own_cgroup(h).lstrip("/") / f"pve-sim-{os.getpid()}-{tag}"
        d.mkdir(parents=True, exist_ok=True)
        dirs.append(d)
    return dirs


def _join_cgroups(dirs: list[Path]):
    """Move the calling process into dirs (runs in the child before exec)."""
    for d in dirs:
        (d / "cgroup.procs").write_text("0")


def _remove_cgroups(dirs: list[Path], timeout=10.0) -> list[str]:
    """rmdir the node's cgroup trees bottom-up (waits for exiting processes); what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for top in dirs:
            if not top.exists():
                continue
            subdirs = (p for p in top.rglob("*") if p.is_dir())
            for sub in sorted(subdirs, key=lambda p: -len(p.parts)):  # deepest first
                try:
                    sub.rmdir()
                except OSError:
                    pass
            try:
                top.rmdir()
            except OSError:
                left.append(str(top))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class SimNode:
    def __init__(
        self,
        state_dir,
        gpus=8,
        driver_version="580.95.05",
        pve_version=None,
        pve_container=None,
        gpu_name="NVIDIA H200",
        gpu_memory_mib=143771,
        compute_cap="9.0",
        uvm_major=508,
        caps_major=511,
        uvm_nodes_at_boot=True,
        template=True,
        driver_loaded=True,
        hostname="pve1",
        minor_order="pci",
        excluded_gpus=0,
        template_kmod=True,
        apt_mirror=None,
        gsp_firmware=True,
        template_toolchain=True,
        host="127.0.0.1",
        profile="pve8",
        ct_init=None,
        pct_startup_s=0.0,
        cgroup_layout="host",
        storages=None,
        fabric_state=None,
        fabric_status=None,
        fabric_fields=True,
        nvswitches=0,
        pools=("/tank",),
    ):
        """profile: "pve8" (default) or "pve9" (see PROFILES); pve_version overrides its version
        (the template follows the version's major); pve_container overrides the pve-container that
        goes with it (release_pve_container; pct's devN and hot-plug follow it). ct_init:
        "systemd" (the containers boot real systemd) or "exec" (see CT_INITS); default
        $PVE_SIM_CT_INIT, else "systemd". pct_startup_s: a sleep at every `pct` start, standing
        in for real pct's Perl start-up (the benchmark's latency knob; 0 = none). cgroup_layout:
        "host" (this machine's cgroup mounts) or "v2" (the node mounts the unified hierarchy alone
        at /sys/fs/cgroup, as a cgroup v2 node does; on a hybrid machine its controllers stay on
        v1: see sim/README.md). storages:
        `pvesm`'s and `pct create`'s storages ([{name, type, content, total_kib, used_kib,
        avail_kib, enabled, active}]; None: a fresh install's local + local-lvm, see
        sim/pvelxc.py DEFAULT_STORAGES). fabric_state/fabric_status: what nvidia-smi's
        `fabric.state`/`fabric.status` print for every GPU (None: `N/A`, a GPU without an
        NVSwitch fabric; e.g. "Not Started", "In Progress", "Completed" with "Success" or an
        NVML error such as "Insufficient Resources", "Not Supported", "[N/A]"). fabric_fields:
        False is a driver whose nvidia-smi predates the fabric.* fields (exit 2 for them).
        nvswitches: how many NVSwitch devices the nvidia-nvswitch module lists in
        /proc/driver/nvidia-nvswitch/devices/ (an HGX board; 0: none).
        pools: mount points of the node's storage pools, each a filesystem of its own (a ZFS
        pool ``tank`` mounts at /tank), as the node's root filesystem is not; () for a node
        without them, where a data dir under /tank would land on the root filesystem."""
        ct_init = ct_init or os.environ.get("PVE_SIM_CT_INIT") or "systemd"
        if profile not in PROFILES:
            raise TypeError(f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}")
        if cgroup_layout not in ("host", "v2"):
            raise TypeError(f"unknown cgroup_layout {cgroup_layout!r}: use 'host' or 'v2'")
        if ct_init not in CT_INITS:
            raise TypeError(f"unknown ct_init {ct_init!r}: use one of {', '.join(CT_INITS)}")
        pve_version = pve_version or PROFILES[profile]["pve_version"]
        template_name, template_release = profile_template(pve_version)
        if minor_order not in ("pci", "reverse"):
            raise ValueError(f"minor_order={minor_order!r}: use 'pci' or 'reverse'")
        # host: the loopback address sshd listens on (127.0.0.2, ... for a second node in one run)
        if not host.startswith("127."):
            raise SimNodeError(f"host={host!r}: the simulated node listens on loopback only")
        self.host = host
        if ct_init == "systemd" and template_release is None:
            template_release = SYSTEMD_DEFAULT_RELEASE
        self.state = Path(state_dir).resolve()
        self.cfg = {
            "hostname": hostname,
            "gpus": int(gpus),
            "driver_version": driver_version,
            "pve_version": pve_version,
            "pve_container": pve_container or release_pve_container(pve_version),
            "gpu_name": gpu_name,
            "gpu_memory_mib": int(gpu_memory_mib),
            "compute_cap": compute_cap,
            "nvidia_major": 195,
            "uvm_major": int(uvm_major),
            "caps_major": int(caps_major),
            "uvm_nodes_at_boot": bool(uvm_nodes_at_boot),
            "template": bool(template),
            "template_name": template_name,
            "template_release": template_release,
            "template_tree": None,
            "driver_loaded": bool(driver_loaded),
            "ct_init": ct_init,
            "cgroup_layout": cgroup_layout,
            # device minors: "pci" (minor = nvidia-smi index) or "reverse" (minor = count-1-index)
            "minor_order": minor_order,
            # GPUs the kernel module probed but excluded (NVreg_ExcludedGpus): before the listed
            # ones in PCI order, each with a minor and a /proc entry, none in nvidia-smi
            "excluded_gpus": int(excluded_gpus),
            # containers created from now on: kmod in the template or not; the apt mirror URL
            # their sources name (None: no apt source at all; the site is air-gapped)
            "template_kmod": bool(template_kmod),
            "apt_mirror": apt_mirror,
            "pct_startup_s": float(pct_startup_s),
            # the GPUs run GSP firmware (H100/H200 do): /proc's information files say so
            "gsp_firmware": bool(gsp_firmware),
            # containers created from now on: a C compiler and the Python headers in the template
            # (the sim's trees have gcc and libpython3-dev so that tests not about the toolchain
            # need no apt mirror) or not, as in Proxmox's real debian-<N>-standard templates
            "template_toolchain": bool(template_toolchain),
            "storages": storages,
            "fabric_state": fabric_state,
            "fabric_status": fabric_status,
            "fabric_fields": bool(fabric_fields),
            "nvswitches": int(nvswitches),
            "pools": [str(p) for p in pools],
        }
        check_fabric_state(self.cfg)
        self._cgroups: list[Path] = []
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._mntns: int | None = None
        self._port: int | None = None
        self._spawned: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int:
        """PID (as this machine sees it) of the node's init."""
        return self._pid

    @property
    def key_path(self) -> str:
        return str(self.state / "ssh" / "id_ed25519")

    @property
    def known_hosts_path(self) -> str:
        return str(self.state / "ssh" / "known_hosts")

    @property
    def upper(self) -> Path:
        return self.state / "node" / "upper"

    @property
    def running(self) -> bool:
        return self._proc is not None

    def inventory_env(self, ct_id=200) -> dict:
        return {
            "PVE_HOST": self.host,
            "PVE_SSH_PORT": str(self.port),
            "PVE_SSH_USER": "root",
            "PVE_SSH_KEY": self.key_path,
            "PVE_SSH_KNOWN_HOSTS": self.known_hosts_path,
            "CT_ID": str(ct_id),
        }

    def ssh_argv(self, *command: str) -> list[str]:
        """argv for the real ssh client logging into the node (for tests)."""
        return [
            "ssh",
            "-i",
            self.key_path,
            "-o",
            f"UserKnownHostsFile={self.known_hosts_path}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(self.port),
            f"root@{self.host}",
            *command,
        ]

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self, timeout=30.0):
        if self._proc is not None:
            return self
        if os.geteuid() != 0:
            raise SimNodeError("SimNode needs root (mount/pid namespaces, overlayfs, mknod)")
        if self.cfg["template_kmod"] and not os.path.exists("/var/lib/dpkg/info/kmod.list"):
            # containers are overlays of this machine's /: the default template's kmod is ours
            raise SimNodeError(
                "this machine lacks Debian's kmod, which the simulated "
                "containers' template has: apt-get install kmod (.ci/setup does)"
            )
        if (
            self.cfg["template_toolchain"]
            and self.cfg["ct_init"] == "exec"
            and not os.path.exists("/var/lib/dpkg/info/gcc.list")
        ):
            # exec-model containers are overlays of this machine's /: their gcc is ours
            raise SimNodeError(
                "this machine lacks gcc, which the simulated containers' template "
                "has: apt-get install gcc libpython3-dev (.ci/setup does)"
            )
        if self.state.exists() and any(self.state.iterdir()):
            raise SimNodeError(f"state dir {self.state} is not empty")
        _install_handlers()
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._prepare()
            self._launch(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self):
        ssh = self.state / "ssh"
        ssh.mkdir(parents=True)
        for name, comment in (
            ("id_ed25519", "pve-sim-client"),
            ("ssh_host_ed25519_key", "pve-sim-host"),
        ):
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    comment,
                    "-f",
                    str(ssh / name),
                ],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        shutil.copyfile(ssh / "id_ed25519.pub", ssh / "authorized_keys")
        self._port = _free_port()
        (ssh / "sshd_config").write_text(f"""\
Port {self._port}
ListenAddress {self.host}
HostKey /etc/pve-sim/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile /etc/pve-sim/ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
MaxSessions 10
MaxStartups 200:30:400
LoginGraceTime 30
PrintMotd no
PrintLastLog no
UseDNS no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
LogLevel ERROR
""")
        if self.cfg["template_release"]:
            # Built by .ci/setup (or here, on first use); the node bind-mounts it read-only.
            from sim.rootfs import ensure_tree

            self.cfg["template_tree"] = str(ensure_tree(self.cfg["template_release"]))
        hostkey = (ssh / "ssh_host_ed25519_key.pub").read_text().split()
        (ssh / "known_hosts").write_text(f"[{self.host}]:{self._port} {hostkey[0]} {hostkey[1]}\n")
        (self.state / "node.json").write_text(json.dumps(self.cfg, indent=1, sort_keys=True))

    def _launch(self, timeout):
        unshare = [
            "unshare",
            "--mount",
            "--pid",
            "--uts",
            "--fork",
            "--kill-child",
            "--propagation",
            "private",
        ]
        preexec = _pdeathsig
        if self.cfg["ct_init"] == "systemd":
            # The node gets its own cgroup directories and a cgroup namespace rooted there: its
            # containers' cgroups read like a real node's (0::/lxc/<vmid>/...), and stop() can
            # prove none is left behind.
            self._cgroups = _make_node_cgroups(self.state, self.cfg["cgroup_layout"] == "v2")
            unshare.append("--cgroup")
            cgroups = self._cgroups

            def preexec():
                _pdeathsig()
                _join_cgroups(cgroups)

        with open(self.state / "node.log", "ab") as log:  # the child keeps its own copy
            self._proc = subprocess.Popen(
                [*unshare, PYTHON, str(NODEINIT), str(self.state)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=preexec,
                close_fds=True,
            )
        deadline = time.monotonic() + timeout
        ready = self.upper / "var/lib/pve-sim/ready"
        pidfile = self.state / "nodeinit.pid"
        while True:
            if self._proc.poll() is not None:
                raise SimNodeError(
                    f"node init exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            if self._pid is None and pidfile.exists() and pidfile.read_text().strip():
                self._pid = int(pidfile.read_text())
                try:
                    self._mntns = os.stat(f"/proc/{self._pid}/ns/mnt").st_ino
                except OSError:
                    pass
            if ready.exists():
                break
            if time.monotonic() > deadline:
                raise SimNodeError(f"node did not come up in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        # mount ns inode must be read after unshare happened: re-read now that init is running
        self._mntns = os.stat(f"/proc/{self._pid}/ns/mnt").st_ino
        while True:
            try:
                with socket.create_connection((self.host, self._port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SimNodeError(
                        f"sshd not listening on {self._port}:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.05)
        while True:
            r = subprocess.run(
                self.ssh_argv("true"),
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=30,
            )
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SimNodeError(f"ssh login failed: {r.stderr}\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, n=40) -> str:
        try:
            return "\n".join(
                (self.state / "node.log").read_text(errors="replace").splitlines()[-n:]
            )
        except OSError:
            return ""

    def stop(self):
        """Kill the node (every process in its pid namespace), check it is gone, remove the state.
        Idempotent; safe to call from finalizers, atexit and signal handlers."""
        with self._lock:
            proc, self._proc = self._proc, None
            errors = []
            if proc is not None:
                # unshare ignores SIGTERM; the node's init exits on it (and its pid namespace dies
                # with it). SIGKILL to unshare is the fallback: --kill-child then SIGKILLs the init.
                if self._pid is not None and proc.poll() is None:
                    try:
                        os.kill(self._pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
                if self._pid is not None and self._mntns is not None:
                    # bounded waits, generous: under load (CI's parallel workers on two cores)
                    # a node with booted containers takes a while to tear its namespaces down
                    deadline = time.monotonic() + 30
                    while True:
                        holders = _mntns_holders(self._mntns)
                        if not holders:
                            break
                        if time.monotonic() > deadline:
                            # last resort: the node's init, by pid (only if it is still ours)
                            for pid in holders:
                                if pid == self._pid:
                                    try:
                                        os.kill(pid, signal.SIGKILL)
                                    except ProcessLookupError:
                                        pass
                            if time.monotonic() > deadline + 30:
                                errors.append(
                                    "processes still in the node's mount namespace: "
                                    f"{_describe(holders)}"
                                )
                                break
                        time.sleep(0.05)
            for p in list(self._spawned.values()):
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            self._spawned.clear()
            if self._cgroups:
                left = _remove_cgroups(self._cgroups)
                if left:
                    errors.append(f"cgroup directories left: {left}")
                else:
                    self._cgroups = []
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if not errors:
                _rmtree(self.state)
            if errors:
                raise SimNodeError("; ".join(errors))

    # ------------------------------------------------------------------ commands
    def _nsenter(self) -> list[str]:
        if self._proc is None:
            raise SimNodeError("node is not running")
        # -C (systemd containers): a pct start from here finds its cgroups where the node does
        cgroup = ["-C"] if self.cfg["ct_init"] == "systemd" else []
        return ["nsenter", "-t", str(self._pid), "-m", "-p", "-u", *cgroup, "-r", "-w", "--"]

    def run(
        self, argv, input=None, check=False, timeout=120, env=None
    ) -> subprocess.CompletedProcess:
        """Run argv on the node (its namespaces and root; not through ssh; no pct log entry unless
        argv is pct itself). Text in/out unless input is bytes."""
        text = not isinstance(input, bytes)
        e = dict(NODE_ENV)
        if env:
            e.update(env)
        r = subprocess.run(
            self._nsenter() + [str(a) for a in argv],
            input=input,
            capture_output=True,
            text=text,
            env=e,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, argv, r.stdout, r.stderr)
        return r

    def ct_run(self, vmid, argv, input=None, check=False, timeout=120, keep_env=False):
        """Run argv inside container vmid through the same path as `pct exec`, without a pct.log
        entry."""
        return self.run(
            [
                PYTHON,
                "/usr/lib/pve-sim/enter.py",
                "exec",
                str(vmid),
                "--keep-env",
                "1" if keep_env else "0",
                "--",
                *argv,
            ],
            input=input,
            check=check,
            timeout=timeout,
        )

    def read(self, path: str) -> str:
        return self.run(["cat", path], check=True).stdout

    def torch_config(self, **options):
        """The torch double's sim options (torch.json, read by every container's torch on each
        call): e.g. ``register_contexts=True`` (a process lists as a compute process on each GPU
        it uses, ``context_mib`` each, while it lives), ``meet_node_query=True`` (the node's
        ``nvidia-smi --query-compute-apps`` waits for such a context and the process, at exit,
        until it was listed), ``compile_race``. No options: the defaults again."""
        self.run(
            [
                "sh",
                "-c",
                "cat > /var/lib/pve-sim/gpu/torch.json.tmp && "
                "mv /var/lib/pve-sim/gpu/torch.json.tmp /var/lib/pve-sim/gpu/torch.json",
            ],
            input=json.dumps(options),
            check=True,
        )

    def configure(self, **changes):
        """Live-change the node: GPU count/name/memory, driver version, majors, uvm nodes, driver
        loaded."""
        bad = set(changes) - set(CONFIG_KEYS)
        if bad:
            raise TypeError(f"unknown node settings: {sorted(bad)}")
        check_fabric_state({**self.cfg, **changes})
        self.cfg.update(changes)
        for k in ("gpus", "gpu_memory_mib", "uvm_major", "caps_major"):
            self.cfg[k] = int(self.cfg[k])
        self.run(
            [
                "sh",
                "-c",
                "cat > /var/lib/pve-sim/gpu/node.json.tmp && "
                "mv /var/lib/pve-sim/gpu/node.json.tmp /var/lib/pve-sim/gpu/node.json",
            ],
            input=json.dumps(self.cfg, indent=1, sort_keys=True),
            check=True,
        )
        args = ["apply"]
        if changes.get("uvm_nodes_at_boot") is True:
            args.append("--boot")
        self.run([PYTHON, "/usr/lib/pve-sim/simctl.py", *args], check=True)
        tpl = f"/var/lib/vz/template/cache/{self.cfg['template_name']}"
        if "template" in changes:
            if changes["template"]:
                self.run(
                    ["sh", "-c", f"mkdir -p /var/lib/vz/template/cache && cat > {tpl}"],
                    input=template_text(self.cfg),
                    check=True,
                )
            else:
                self.run(["rm", "-f", tpl], check=True)

    # ------------------------------------------------------------------ observation
    def pct_calls(self) -> list[dict]:
        p = self.upper / "var/log/pve-sim/pct.log"
        try:
            lines = p.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def clear_pct_log(self):
        self.run(["sh", "-c", ": > /var/log/pve-sim/pct.log"], check=True)

    def systemctl_calls(self) -> list[dict]:
        """Calls recorded by the node's systemctl double (containers run real systemd)."""
        try:
            lines = (self.upper / "var/lib/pve-sim-systemd/calls.log").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def ct_upper(self, vmid) -> Path:
        return self.state / "ct" / str(vmid) / "upper"

    def tree_digest(self) -> dict:
        """{path: sha256 | 'link:<target>' | 'dir' | 'whiteout' | 'chr:M:m'} over the node's overlay
        upper dir and its pools ('node/...') and every container's upper dir and running flag
        ('ct/<vmid>/...');
        logs, sim-private state, /tmp, /run and __pycache__ are left out."""
        out = {}
        _digest_tree(self.upper, "node", DIGEST_SKIP_NODE, out)
        for point in self.cfg.get("pools", []):  # a pool's files, as if under the node's /
            _digest_tree(pool_dir(self.state, point), "node/" + point.strip("/"), (), out)
        ctroot = self.state / "ct"
        if ctroot.exists():
            for vmid in sorted(os.listdir(ctroot)):
                d = ctroot / vmid
                _digest_tree(d / "upper", f"ct/{vmid}", DIGEST_SKIP_CT, out)
                st = d / "state"
                if st.exists():
                    out[f"ct/{vmid}/.state"] = st.read_text().strip()
        return out

    def fail_device_hotplug(self, *paths: str) -> None:
        """Make pct's devN hot-plug (pve-container >= 6.0.4) of these device paths fail, as a
        failing move_mount would (the sim cannot make a real one fail); none: all succeed again."""
        self.run(
            ["sh", "-c", "cat > /var/lib/pve-sim/hotplug-fail"],
            input="".join(p + "\n" for p in paths),
            check=True,
        )

    # ------------------------------------------------------------------ GPU processes
    def spawn_gpu_process(
        self,
        gpu_index: int,
        cmdline: list[str],
        used_mib: int,
        name: str | None = None,
        cgroup: str | None = None,
    ) -> int:
        """Start a sleeping process on the node whose /proc/<pid>/cmdline is cmdline and register it
        as a compute process on GPU gpu_index using used_mib. Returns its pid as the node sees it.
        cgroup: what the node's /proc/<pid>/cgroup reads, e.g. the process of a container's unit:
        "0::/lxc/200/ns/system.slice/dflash-train.service" (PVE's LXC layout)."""
        name = name or cmdline[0]
        opt = [f"--cgroup={cgroup}"] if cgroup is not None else []
        p = subprocess.Popen(
            self._nsenter()
            + [
                PYTHON,
                "/usr/lib/pve-sim/simctl.py",
                "spawn",
                str(gpu_index),
                str(used_mib),
                name,
                *opt,
                "--",
                *cmdline,
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=NODE_ENV,
            text=True,
        )
        line = p.stdout.readline().strip()
        p.stdout.close()
        if not line.isdigit():
            p.wait(timeout=5)
            raise SimNodeError(f"spawn_gpu_process failed (exit {p.returncode})")
        pid = int(line)
        self._spawned[pid] = p
        return pid

    def register_gpu_process(self, pid: int, gpu_index: int, used_mib: int) -> None:
        """Register a running process of the node (e.g. a container's trainer, by its node pid:
        see node_pid) as a compute process on GPU gpu_index using used_mib; nvidia-smi lists it
        while /proc/<pid> exists, with its real cmdline and cgroup."""
        self.run(
            [
                PYTHON,
                "/usr/lib/pve-sim/simctl.py",
                "register",
                str(pid),
                str(gpu_index),
                str(used_mib),
            ],
            check=True,
        )

    def node_pid(self, vmid: int, ct_pid: int) -> int:
        """The pid the node sees for process ct_pid of a running real-systemd container (the
        NSpid line of /proc/<pid>/status in the container's pid namespace)."""
        out = self.run(
            [PYTHON, "/usr/lib/pve-sim/simctl.py", "node-pid", str(vmid), str(ct_pid)], check=True
        ).stdout.strip()
        return int(out)

    def kill_gpu_process(self, pid: int):
        self.run(["kill", "-9", str(pid)])
        p = self._spawned.pop(pid, None)
        if p is not None:
            p.wait(timeout=10)
        self.run([PYTHON, "/usr/lib/pve-sim/simctl.py", "prune"], check=True)


def _skipped(rel: str, skip: tuple) -> bool:
    """rel is a skip entry, below one, or starts like one that ends in "*"."""
    return any(
        rel == s or rel.startswith(s + "/") or (s.endswith("*") and rel.startswith(s[:-1]))
        for s in skip
    )


def pool_dir(state: Path, point: str) -> Path:
    """The state dir's directory that holds the pool mounted at ``point`` (nodeinit binds it)."""
    return Path(state) / "pools" / point.strip("/").replace("/", "_")


def _digest_tree(root: Path, prefix: str, skip: tuple, out: dict):
    if not root.exists():
        return
    rootlen = len(str(root)) + 1
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = dirpath[rootlen:]
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d == "__pycache__" or _skipped(rel, skip):
                continue
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                out[f"{prefix}/{rel}"] = "link:" + os.readlink(full)
                continue
            out[f"{prefix}/{rel}"] = "dir"
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            if _skipped(rel, skip) or f.endswith(".pyc"):
                continue
            full = os.path.join(dirpath, f)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[f"{prefix}/{rel}"] = "link:" + os.readlink(full)
            elif stat.S_ISCHR(st.st_mode):
                out[f"{prefix}/{rel}"] = (
                    "whiteout"
                    if st.st_rdev == 0
                    else f"chr:{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
                )
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(full, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                out[f"{prefix}/{rel}"] = h.hexdigest() + f":{stat.S_IMODE(st.st_mode):o}"
            else:
                out[f"{prefix}/{rel}"] = "other"


def main(argv=None):
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m sim.node")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a node, print its env, wait for Ctrl-C")
    up.add_argument("state", nargs="?")
    up.add_argument("--gpus", type=int, default=8)
    up.add_argument("--driver-version", default="580.95.05")
    up.add_argument("--profile", default="pve8", choices=sorted(PROFILES))
    up.add_argument("--pve-version", default=None)
    up.add_argument("--pve-container", default=None)
    a = ap.parse_args(argv)
    state = a.state or tempfile.mkdtemp(prefix="pve-sim-")
    with SimNode(
        state,
        gpus=a.gpus,
        driver_version=a.driver_version,
        pve_version=a.pve_version,
        pve_container=a.pve_container,
        profile=a.profile,
    ) as node:
        for k, v in node.inventory_env().items():
            print(f"export {k}={v}")
        print(f"# ssh: {' '.join(node.ssh_argv())}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
