"""Shared by the pct double and enter.py inside the simulated node (/usr/lib/pve-sim/pvelxc.py).

Container config files in the real format (/etc/pve/lxc/<vmid>.conf, i.e.
/etc/pve/nodes/<node>/lxc/<vmid>.conf), locks, container state and the device list a start records.
"""

import contextlib
import ctypes
import fcntl
import json
import os
import re
import socket
import stat

NODE = socket.gethostname()
CONF_DIR = "/etc/pve/lxc"
CT_ROOT = "/var/lib/pve-sim/ct"
GPU_DIR = "/var/lib/pve-sim/gpu"
HOSTROOT = "/var/lib/pve-sim/hostroot"
LOCK_DIR = "/run/lock/lxc"
PCT_LOG = "/var/log/pve-sim/pct.log"
PROC_DEVICES_VIEW = "/run/pve-sim/proc-devices"

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


class PveError(Exception):
    """An error real pct reports with `die "...\\n"` (stderr, exit 255)."""


def sys_mount(src, dst, fstype=None, flags=0, data=None):
    r = _libc.mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} -> {dst} ({fstype}, {data}): {os.strerror(e)}")


def sys_umount(path, flags=MNT_DETACH):
    if _libc.umount2(path.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount {path}: {os.strerror(e)}")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def pve_version():
    try:
        with open(GPU_DIR + "/node.json") as f:
            return json.load(f)["pve_version"]
    except (OSError, ValueError, KeyError):
        return "8.4.1"


def pve_container():
    """The node's pve-container version (node.json; the sim's node writes it), which pct's
    behaviour follows: devN entries from 5.0.7, devN hot-plug from 6.0.4."""
    try:
        with open(GPU_DIR + "/node.json") as f:
            return json.load(f)["pve_container"]
    except (OSError, ValueError, KeyError):
        return "6.0.18" if version_tuple(pve_version()) >= (9,) else "5.2.6"


# A fresh PVE install's storage.cfg (pve-manager's installer): `local` (dir /var/lib/vz:
# iso,vztmpl,backup) and `local-lvm` (lvmthin: rootdir,images); a ZFS install has `local-zfs`
# (zfspool: rootdir,images) instead. Sizes in KiB (pvesm status prints KiB).
DEFAULT_STORAGES = [
    {
        "name": "local",
        "type": "dir",
        "content": ["iso", "vztmpl", "backup"],
        "total_kib": 98497780,
        "used_kib": 12582912,
        "avail_kib": 80862004,
        "enabled": True,
        "active": True,
    },
    {
        "name": "local-lvm",
        "type": "lvmthin",
        "content": ["rootdir", "images"],
        "total_kib": 1793064960,
        "used_kib": 10485760,
        "avail_kib": 1782579200,
        "enabled": True,
        "active": True,
    },
]


def storages():
    """The node's storages (node.json "storages", set per test; else DEFAULT_STORAGES)."""
    try:
        with open(GPU_DIR + "/node.json") as f:
            found = json.load(f).get("storages")
    except (OSError, ValueError):
        found = None
    return {s["name"]: s for s in (found if found is not None else DEFAULT_STORAGES)}


def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


# ----------------------------------------------------------------------------- config


class Config:
    """A container config: main section, raw lxc.* entries, description, pending and snapshots."""

    def __init__(self):
        self.description = []  # lines
        self.conf = {}
        self.lxc = []  # [(key, value)]
        self.pending = {}
        self.pending_delete = []
        self.snapshots = {}  # name -> Config

    @classmethod
    def parse(cls, text):
        top = cls()
        cur = top
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            m = re.match(r"^\[([^\]]+)\]$", line)
            if m:
                name = m.group(1)
                cur = "pending" if name == "pve:pending" else top.snapshots.setdefault(name, cls())
                continue
            if cur == "pending":
                m = re.match(r"^(\S+?):\s*(.*)$", line)
                if m:
                    if m.group(1) == "delete":
                        top.pending_delete = [x for x in re.split(r"[,;\s]+", m.group(2)) if x]
                    else:
                        top.pending[m.group(1)] = m.group(2)
                continue
            if line.startswith("#"):
                cur.description.append(line[1:])
                continue
            m = re.match(r"^(lxc\.[A-Za-z0-9_.\-]+)\s*[:=]\s*(.*)$", line)
            if m:
                cur.lxc.append((m.group(1), m.group(2)))
                continue
            m = re.match(r"^(\S+?):\s*(.*)$", line)
            if m:
                cur.conf[m.group(1)] = m.group(2)
        return top

    def _section(self):
        out = "".join(f"#{d}\n" for d in self.description)
        for k in sorted(self.conf):
            out += f"{k}: {self.conf[k]}\n"
        for k, v in self.lxc:
            out += f"{k}: {v}\n"
        return out

    def dump(self):
        out = self._section()
        if self.pending or self.pending_delete:
            out += "\n[pve:pending]\n"
            for k in sorted(self.pending):
                out += f"{k}: {self.pending[k]}\n"
            if self.pending_delete:
                out += f"delete: {','.join(self.pending_delete)}\n"
        for name in sorted(self.snapshots):
            out += f"\n[{name}]\n" + self.snapshots[name]._section()
        return out

    def with_pending(self):
        """The config as `pct config` (without --current) shows it: pending values applied."""
        c = dict(self.conf)
        c.update(self.pending)
        for k in self.pending_delete:
            c.pop(k, None)
        return c

    def apply_pending(self):
        self.conf.update(self.pending)
        for k in self.pending_delete:
            self.conf.pop(k, None)
        self.pending = {}
        self.pending_delete = []


def conf_path(vmid):
    return f"{CONF_DIR}/{vmid}.conf"


def exists(vmid):
    return os.path.exists(conf_path(vmid))


def load(vmid):
    try:
        with open(conf_path(vmid)) as f:
            return Config.parse(f.read())
    except FileNotFoundError:
        raise PveError(
            f"Configuration file 'nodes/{NODE}/lxc/{vmid}.conf' does not exist"
        ) from None


def write(vmid, cfg):
    os.makedirs(os.path.realpath(CONF_DIR), exist_ok=True)
    tmp = conf_path(vmid) + f".tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(cfg.dump())
    os.replace(tmp, conf_path(vmid))


@contextlib.contextmanager
def lock_config(vmid):
    os.makedirs(LOCK_DIR, exist_ok=True)
    with open(f"{LOCK_DIR}/pve-config-{vmid}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def parse_propstring(value, default_key):
    """'a,b=c,d=e' -> {default_key: 'a', 'b': 'c', ...} (PVE property string)."""
    out = {}
    for i, part in enumerate(value.split(",")):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
        elif i == 0:
            out[default_key] = part.strip()
        else:
            raise ValueError("value without key, but schema does not define a default key")
    return out


# ----------------------------------------------------------------------------- container state


def ct_dir(vmid):
    return f"{CT_ROOT}/{vmid}"


def rootfs(vmid):
    return f"{ct_dir(vmid)}/rootfs"


def is_running(vmid):
    try:
        with open(ct_dir(vmid) + "/state") as f:
            running = f.read().strip() == "running"
    except FileNotFoundError:
        return False
    if running and _powered_off_inside(vmid):
        return False
    return running


def _powered_off_inside(vmid):
    """A real-systemd container that powered itself off: cleaned up and marked stopped."""
    try:
        import ctsystemd  # (it imports this module: imported here, where it is installed)
    except ImportError:
        return False
    if not ctsystemd.enabled() or not ctsystemd.gone(vmid):
        return False
    # no config lock here: callers may hold it (flock on a second open file would deadlock);
    # the clean-up is idempotent
    ctsystemd.power_off(vmid, clean=False)
    set_state(vmid, "stopped")
    return True


def set_state(vmid, state):
    with open(ct_dir(vmid) + "/state", "w") as f:
        f.write(state + "\n")


def lower(vmid):
    """The container's base tree (what its template unpacked to): `pct create` records it."""
    try:
        with open(ct_dir(vmid) + "/lower") as f:
            return f.read().strip() or HOSTROOT
    except FileNotFoundError:
        return HOSTROOT


def ensure_rootfs(vmid, run_tmpfs=True):
    """Mount the container's root (overlay: pristine host root + the container's upper dir) in the
    node's mount namespace, with a /run tmpfs that lives as long as the container runs (unless
    run_tmpfs is False: a booted container's init mounts its own)."""
    d = ct_dir(vmid)
    r = rootfs(vmid)
    if mounted(r):
        return r
    for sub in ("upper", "work", "rootfs"):
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    sys_mount(
        "overlay", r, "overlay", 0, f"lowerdir={lower(vmid)},upperdir={d}/upper,workdir={d}/work"
    )
    if not run_tmpfs:
        return r
    os.makedirs(r + "/run", exist_ok=True)
    sys_mount("tmpfs", r + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
    os.makedirs(r + "/run/lock", exist_ok=True)
    return r


def release_rootfs(vmid):
    r = rootfs(vmid)
    while mounted(r + "/run"):
        sys_umount(r + "/run")
    while mounted(r):
        sys_umount(r)


# ----------------------------------------------------------------------------- devices


def cgroup_allows(rules, kind, major, minor):
    """lxc.cgroup2.devices.allow rules: 'a', 'c 195:* rwm', 'c *:* rwm', 'c 195:0 rw'."""
    for rule in rules:
        rule = rule.strip()
        if rule == "a":
            return True
        m = re.match(r"^([abc])\s+(\*|\d+):(\*|\d+)(?:\s+(\S+))?$", rule)
        if not m:
            continue
        t, ma, mi, _ = m.groups()
        if t not in ("a", kind):
            continue
        if ma != "*" and int(ma) != major:
            continue
        if mi != "*" and int(mi) != minor:
            continue
        return True
    return False


def compute_devices(conf, lxc):
    """What a start passes into the container, as (kind, dst, spec) entries.

    devN:      the node path is stat()ed; a missing path fails the start (PveError).
    lxc.mount.entry binds of device nodes appear only if an lxc.cgroup2.devices.allow rule allows
    their major:minor (otherwise the cgroup would deny them: the sim hides them); 'optional'
    entries whose source is missing are skipped, others fail the start.
    """
    out = []
    for key in sorted(conf, key=lambda k: (len(k), k)):
        if not re.match(r"^dev\d+$", key):
            continue
        d = parse_propstring(conf[key], "path")
        path = d.get("path", "")
        try:
            st = os.stat(path)
        except OSError:
            raise PveError(f"Device {path} does not exist") from None
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            raise PveError(f"{path} is not a device")
        mode = int(d["mode"], 8) if "mode" in d else stat.S_IMODE(st.st_mode)
        out.append(
            {
                "kind": "mknod",
                "dst": path,
                "type": "c" if stat.S_ISCHR(st.st_mode) else "b",
                "major": os.major(st.st_rdev),
                "minor": os.minor(st.st_rdev),
                "mode": mode,
                "uid": int(d.get("uid", 0)),
                "gid": int(d.get("gid", 0)),
            }
        )
    rules = [v for k, v in lxc if k in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow")]
    for k, v in lxc:
        if k != "lxc.mount.entry":
            continue
        parts = v.split()
        if len(parts) < 4:
            continue
        src, dst, _fstype, opts = parts[:4]
        optl = opts.split(",")
        if "bind" not in optl and "rbind" not in optl:
            continue
        dst = "/" + dst.lstrip("/")
        try:
            st = os.stat(src)
        except OSError:
            if "optional" in optl:
                continue
            raise PveError(f'Failed to mount "{src}" onto "{dst}"') from None
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            t = "c" if stat.S_ISCHR(st.st_mode) else "b"
            if not cgroup_allows(rules, t, os.major(st.st_rdev), os.minor(st.st_rdev)):
                continue
            out.append(
                {
                    "kind": "mknod",
                    "dst": dst,
                    "type": t,
                    "major": os.major(st.st_rdev),
                    "minor": os.minor(st.st_rdev),
                    "mode": stat.S_IMODE(st.st_mode),
                    "uid": st.st_uid,
                    "gid": st.st_gid,
                }
            )
        elif stat.S_ISDIR(st.st_mode):
            out.append({"kind": "bind", "src": src, "dst": dst, "dir": True, "ro": "ro" in optl})
        else:
            out.append({"kind": "bind", "src": src, "dst": dst, "dir": False, "ro": "ro" in optl})
    return out


def save_devices(vmid, devices):
    with open(ct_dir(vmid) + "/devices.json", "w") as f:
        json.dump(devices, f, indent=1)


def load_devices(vmid):
    try:
        with open(ct_dir(vmid) + "/devices.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def mountpoints(conf):
    """Bind mount points (mpN with an absolute host path) -> [(src, mp, ro)]."""
    out = []
    for key in sorted(conf, key=lambda k: (len(k), k)):
        if not re.match(r"^mp\d+$", key):
            continue
        d = parse_propstring(conf[key], "volume")
        vol = d.get("volume", "")
        mp = d.get("mp")
        if not mp:
            continue
        if vol.startswith("/"):
            out.append((vol, mp, d.get("ro") in ("1", "yes", "true", "on")))
        else:
            # storage-backed volume: a directory under the container's state, like a subvol
            out.append((None, mp, d.get("ro") in ("1", "yes", "true", "on")))
    return out


# ----------------------------------------------------------------------------- dpkg of a tree


def stanza_package(stanza):
    m = re.match(r"Package: (\S+)", stanza.lstrip("\n"))
    return m.group(1) if m else None


def installed_packages(lower):
    """dpkg's installed packages of the tree at `lower`: {name: (version, [dependency names])}
    (Depends and Pre-Depends; of alternatives the first one installed)."""
    with open(f"{lower}/var/lib/dpkg/status") as f:
        stanzas = f.read().split("\n\n")
    fields = {}
    for st in stanzas:
        name = stanza_package(st)
        if name and re.search(r"^Status: install ok installed$", st, re.M):
            fields[name] = dict(re.findall(r"^([\w-]+): (.*)$", st, re.M))
    out = {}
    for name, f in fields.items():
        deps = []
        for key in ("Pre-Depends", "Depends"):
            for group in filter(None, (g.strip() for g in f.get(key, "").split(","))):
                alts = [re.split(r"[\s(:]", a.strip(), maxsplit=1)[0] for a in group.split("|")]
                deps.append(next((a for a in alts if a in fields), alts[0]))
        out[name] = (f.get("Version"), deps)
    return out


# Where the sim's trees got their compiler and Python headers (sim/rootfs.py PACKAGES); a real
# debian-12/13-standard template has neither (Priority optional).
TOOLCHAIN_ROOTS = ("gcc", "libpython3-dev")


def toolchain_packages(lower):
    """{name: version} of the packages only the toolchain needs in the tree at `lower`: the
    dependency closure of TOOLCHAIN_ROOTS less everything the rest of the tree needs."""
    installed = installed_packages(lower)

    def closure(roots):
        seen, todo = set(), [r for r in roots if r in installed]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += [d for d in installed[name][1] if d in installed]
        return seen

    tool = closure(TOOLCHAIN_ROOTS)
    base = closure([n for n in installed if n not in tool])
    return {n: installed[n][0] for n in sorted(tool - base)}
