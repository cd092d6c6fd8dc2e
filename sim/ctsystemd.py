"""Real-systemd containers (node.json "ct_init": "systemd"; /usr/lib/pve-sim/ctsystemd.py).

`pct start` boots the container's rootfs (the overlay `pct create` set up over a cached Debian
tree) with systemd-nspawn, real systemd as its PID 1; `pct exec` enters it with
`nsenter -t <PID 1> -a`; `pct stop` kills PID 1, `pct shutdown`/`reboot` send it lxc's halt
signal for systemd (SIGRTMIN+3) and wait. The pct double and enter.py call this module only
in that mode; the exec model stays in enter.py.

What nspawn needs on a machine without systemd as PID 1 (issue 12, measured): `--keep-unit
--register=no` (no host manager to ask for a scope), its own cgroup directory in every hierarchy
before exec (it puts itself in `supervisor/` and the container in `payload/` below the cgroup it
runs in), `--console=passive`. The node's network is shared (no --private-network), so the
loopback package indexes are reachable. nspawn refuses bind sources for /proc targets, so the
node's /proc/devices view and /proc/driver are attached after boot with open_tree/move_mount.

Per running container: /run/pve-sim/ct/<vmid>/{monitor.pid,nspawn.pid,init.pid,dev/} (monitor:
this module's `monitor`, which boots the container again after a reboot from inside; dev/: the
passed device nodes, made with the config's mode/uid/gid and bound over /dev/<path>), cgroups
/sys/fs/cgroup/<hierarchy>/lxc/<vmid>, console log /var/log/pve-sim/ct-<vmid>.console.log.
"""

import ctypes
import json
import os
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pvelxc as L  # noqa: E402

RUN_DIR = "/run/pve-sim/ct"
CGROUP_ROOT = "/sys/fs/cgroup"
MEMORY = CGROUP_ROOT + "/memory"  # a v1 controller: nspawn makes no payload/ there
CONSOLE_LOG = "/var/log/pve-sim/ct-{vmid}.console.log"
HALT_SIGNAL = signal.SIGRTMIN + 3  # lxc: what a clean shutdown sends an init that blocks it
BOOT_TIMEOUT = 60.0
NSENTER = "/usr/bin/nsenter"
NSPAWN = "/usr/bin/systemd-nspawn"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 0x4
AT_EMPTY_PATH, MOUNT_ATTR_RDONLY = 0x1000, 0x1
AT_FDCWD, CLONE_NEWNS = -100, 0x00020000


class BootError(L.PveError):
    """The container did not come up (message: what nspawn said)."""


def enabled():
    """True when the node runs its containers with real systemd."""
    try:
        with open(L.GPU_DIR + "/node.json") as f:
            return json.load(f).get("ct_init") == "systemd"
    except (OSError, ValueError):
        return False


def run_dir(vmid):
    return f"{RUN_DIR}/{vmid}"


def hierarchies():
    """Cgroup mounts a container gets a directory in: unified (v2), or name=systemd + unified,
    and the v1 memory controller where the node mounted it (its memory use, as lxc does)."""
    if os.path.exists(CGROUP_ROOT + "/cgroup.controllers"):
        return [CGROUP_ROOT]
    found = [f"{CGROUP_ROOT}/systemd", f"{CGROUP_ROOT}/unified"]
    return found + [MEMORY] if os.path.exists(MEMORY + "/cgroup.procs") else found


def cgroup_dirs(vmid):
    """/sys/fs/cgroup/<h>/lxc/<vmid>: PVE's container cgroup path (lxc.cgroup.dir.container)."""
    return [f"{h}/lxc/{vmid}" for h in hierarchies()]


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid):
    """pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def init_pid(vmid):
    """PID (node view) of the container's systemd, or None when it is not up. After a reboot
    from inside (`systemctl reboot`) nspawn boots the container again itself: the new PID 1 is
    found, waited for and given the /proc views again."""
    pid = _read_int(run_dir(vmid) + "/init.pid")
    if pid and _alive(pid):
        return pid
    nspawn = _read_int(run_dir(vmid) + "/nspawn.pid")
    if not (nspawn and _alive(nspawn)):
        return None
    deadline = time.monotonic() + BOOT_TIMEOUT
    while _alive(nspawn) and time.monotonic() < deadline:
        pid = _container_child(nspawn)
        if (
            pid
            and pid != _read_int(run_dir(vmid) + "/init.pid")
            and os.path.exists(f"/proc/{pid}/root/run/systemd/private")
        ):
            _attach_proc_views(pid)
            _write(run_dir(vmid) + "/init.pid", pid)
            return pid
        time.sleep(0.05)
    return None


def gone(vmid):
    """The container was started but its monitor has exited (a poweroff from inside)."""
    mon = _read_int(run_dir(vmid) + "/monitor.pid")
    return mon is not None and not _alive(mon)


# ----------------------------------------------------------------------------- start


def _stage_devices(vmid, devices):
    """Device nodes with the config's mode/uid/gid under the run dir; nspawn binds them over
    /dev/<path> before the container's init runs. -> nspawn --bind options."""
    binds = []
    for dev in devices:
        if dev["kind"] == "mknod":
            staged = run_dir(vmid) + "/dev" + dev["dst"]
            os.makedirs(os.path.dirname(staged), exist_ok=True)
            kind = stat.S_IFCHR if dev["type"] == "c" else stat.S_IFBLK
            os.mknod(staged, kind | 0o600, os.makedev(dev["major"], dev["minor"]))
            os.chmod(staged, dev["mode"])
            os.chown(staged, dev.get("uid", 0), dev.get("gid", 0))
            binds.append(f"--bind={staged}:{dev['dst']}")
        elif dev["kind"] == "bind" and os.path.exists(dev["src"]):
            binds.append(f"--bind{'-ro' if dev.get('ro') else ''}={dev['src']}:{dev['dst']}")
    return binds


def _mount_binds(vmid, conf, root):
    """mpN entries: host paths bound in (ro when asked); storage volumes are dirs in the rootfs."""
    binds = []
    for src, mp, ro in L.mountpoints(conf):
        os.makedirs(root + "/" + mp.lstrip("/"), exist_ok=True)
        if src is not None and os.path.isdir(src):
            binds.append(f"--bind{'-ro' if ro else ''}={src}:{mp}")
    return binds


def nspawn_argv(vmid, conf, root, binds):
    """The systemd-nspawn command line of a container boot.

    >>> nspawn_argv(200, {"hostname": "gpu"}, "/r", ["--bind=/a:/b"])[-4:]
    ['--machine=ct200', '--hostname=gpu', '--bind=/a:/b', '--boot']
    """
    return [
        NSPAWN,
        "--quiet",
        "--keep-unit",
        "--register=no",
        "--console=passive",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        f"--directory={root}",
        f"--machine=ct{vmid}",
        f"--hostname={conf.get('hostname', f'CT{vmid}')}",
        *binds,
        "--boot",
    ]


def _join_cgroups(vmid):
    """In the child before exec: into the container's own cgroup directories (made first)."""
    for d in cgroup_dirs(vmid):
        with open(d + "/cgroup.procs", "w") as f:
            f.write("0")


def start(vmid, conf, devices):
    """Boot the container; returns once its systemd accepts systemctl (its private socket).
    Raises BootError (nothing left behind) when it does not come up."""
    root = L.ensure_rootfs(vmid, run_tmpfs=False)
    rd = run_dir(vmid)
    os.makedirs(rd, exist_ok=True)
    try:
        binds = _stage_devices(vmid, devices) + _mount_binds(vmid, conf, root)
        for d in cgroup_dirs(vmid):
            os.makedirs(d, exist_ok=True)
        log_path = CONSOLE_LOG.format(vmid=vmid)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        # Container systemd 256+ refuses cgroup v1; the unified hierarchy works for 252 too.
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        open(log_path, "wb").close()  # this start only: its tail explains a failure
        # The monitor (like lxc's) runs nspawn, and again when the container rebooted itself.
        proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "monitor",
                str(vmid),
                log_path,
                "--",
                *nspawn_argv(vmid, conf, root, binds),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=lambda: _join_cgroups(vmid),
        )
        _write(rd + "/monitor.pid", proc.pid)
        pid = _wait_booted(vmid, proc, log_path)
        _attach_proc_views(pid)
        _write(rd + "/init.pid", pid)
    except BaseException:
        power_off(vmid, clean=False)
        raise
    return pid


def _attach_proc_views(pid):
    """The node's /proc/devices view and /proc/driver, inside (what the torch double reads)."""
    attach(pid, L.PROC_DEVICES_VIEW, "/proc/devices")
    if os.path.isdir("/proc/driver"):
        attach(pid, "/proc/driver", "/proc/driver")


def _write(path, value):
    with open(path, "w") as f:
        f.write(f"{value}\n")


def _container_child(nspawn_pid):
    """nspawn's child in another pid namespace: the container's PID 1 (node view)."""
    try:
        with open(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
        own = os.stat(f"/proc/{nspawn_pid}/ns/pid").st_ino
    except OSError:
        return None
    for kid in kids:
        try:
            if os.stat(f"/proc/{kid}/ns/pid").st_ino != own:
                return kid
        except OSError:
            continue
    return None


def _wait_booted(vmid, proc, log_path):
    """Wait until PID 1 of the container has its manager socket (systemctl works from then on)."""
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise BootError(f"systemd-nspawn exited with {proc.returncode}: {_tail(log_path)}")
        nspawn = _read_int(run_dir(vmid) + "/nspawn.pid")
        pid = _container_child(nspawn) if nspawn else None
        if pid and os.path.exists(f"/proc/{pid}/root/run/systemd/private"):
            return pid
        if time.monotonic() > deadline:
            raise BootError(f"container did not boot in {BOOT_TIMEOUT:.0f}s: {_tail(log_path)}")
        time.sleep(0.05)


REBOOT_EXIT = 133  # systemd-nspawn(1): the container rebooted (systemd-nspawn@.service restarts)


def monitor(vmid, log_path, argv):
    """Run nspawn until the container stops; boot it again when it rebooted itself (what LXC
    does for a container's own reboot). -> nspawn's last exit status."""
    while True:
        with open(log_path, "ab") as log:
            p = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        _write(run_dir(vmid) + "/nspawn.pid", p.pid)
        code = p.wait()
        if code != REBOOT_EXIT:
            return code


def _tail(path, n=5):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().splitlines()[-n:])
    except OSError:
        return ""


def _check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def attach(pid, src, dst, ro=False):
    """Bind node path src over dst inside the running container of PID 1 pid (open_tree +
    move_mount: a plain bind cannot cross mount namespaces). Runs in a forked child."""
    is_dir = os.path.isdir(src)  # (the node's /proc is out of sight once inside)
    child = os.fork()
    if child == 0:
        try:
            fd = _check(
                _libc.syscall(
                    SYS_OPEN_TREE,
                    AT_FDCWD,
                    src.encode(),
                    OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC,
                ),
                "open_tree",
            )
            if ro:
                attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
                _check(
                    _libc.syscall(
                        SYS_MOUNT_SETATTR,
                        fd,
                        b"",
                        AT_EMPTY_PATH | AT_RECURSIVE,
                        ctypes.byref(attr),
                        ctypes.c_size_t(ctypes.sizeof(attr)),
                    ),
                    "mount_setattr",
                )
            ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
            _check(_libc.setns(ns, CLONE_NEWNS), "setns")
            if not os.path.exists(dst):
                if is_dir:
                    os.makedirs(dst, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    open(dst, "a").close()
            _check(
                _libc.syscall(
                    SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, dst.encode(), MOVE_MOUNT_F_EMPTY_PATH
                ),
                "move_mount",
            )
        except BaseException as e:  # noqa
            sys.stderr.write(f"attach {src} -> {dst}: {e}\n")
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    if status != 0:
        raise L.PveError(f"could not attach {src} to container at {dst}")


def hotplug_devices(vmid, devices):
    """New device nodes in a running container (PVE 9 devN hot-plug): staged, then attached."""
    pid = init_pid(vmid)
    if not pid:
        return
    for dev in devices:
        if dev["kind"] != "mknod":
            continue
        staged = run_dir(vmid) + "/dev" + dev["dst"]
        if os.path.lexists(staged):
            continue
        _stage_devices(vmid, [dev])
        attach(pid, staged, dev["dst"])


def hotplug_mounts(vmid, entries):
    """New bind mount points in a running container (pve-container hot-plugs a new mpN)."""
    pid = init_pid(vmid)
    if not pid:
        return
    for src, mp, ro in L.mountpoints(entries):
        if src is not None and os.path.isdir(src):
            attach(pid, src, mp, ro)


# ----------------------------------------------------------------------------- stop


def power_off(vmid, clean, timeout=None, kill_after=True):
    """Stop the container and remove everything its run left (cgroups, staged nodes, rootfs
    mount). clean: lxc's halt signal, then wait up to timeout (default 60 s, lxc-stop's);
    after that SIGKILL when kill_after, else PveError("container did not stop")."""
    mon = _read_int(run_dir(vmid) + "/monitor.pid")
    pid = init_pid(vmid)
    if pid and clean:
        os.kill(pid, HALT_SIGNAL)
        if not _wait_gone(mon, 60 if timeout is None else timeout) and not kill_after:
            raise L.PveError("container did not stop")
    pid = init_pid(vmid)
    if pid:
        os.kill(pid, signal.SIGKILL)  # PID 1 dying takes its whole pid namespace with it
    for proc in (mon, _read_int(run_dir(vmid) + "/nspawn.pid")):
        if proc and _alive(proc) and not _wait_gone(proc, 30):
            os.kill(proc, signal.SIGKILL)
            _wait_gone(proc, 10)
    _remove_cgroups(vmid)
    _remove_tree(run_dir(vmid))
    L.release_rootfs(vmid)


def _wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while pid and _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _remove_cgroups(vmid):
    """rmdir lxc/<vmid> bottom-up in every hierarchy; processes still there are killed first
    (only the container's own can be: it is the only one in that subtree)."""
    for top in cgroup_dirs(vmid):
        deadline = time.monotonic() + 10
        while os.path.isdir(top):
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                for pid in _read_pids(dirpath):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise L.PveError(f"cgroup {top} could not be removed")
            if os.path.isdir(top):
                time.sleep(0.05)


def _read_pids(cgdir):
    try:
        with open(cgdir + "/cgroup.procs") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _remove_tree(path):
    for dirpath, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(dirpath, name))
        for name in dirs:
            p = os.path.join(dirpath, name)
            os.unlink(p) if os.path.islink(p) else os.rmdir(p)
    if os.path.isdir(path):
        os.rmdir(path)


# ----------------------------------------------------------------------------- exec, push, pull

PROBLEMS = {0: None, 1: "noexec", 2: "missing"}


def _find_inside(pid, cmd, path):
    """What execvp would find inside: None, "noexec" or "missing". Checked in a child chrooted
    into the container's root, so absolute symlinks (a venv's bin/python) resolve there."""
    cands = [cmd] if "/" in cmd else [os.path.join(d or ".", cmd) for d in path.split(":")]
    child = os.fork()
    if child == 0:
        code = 2
        try:
            os.chroot(f"/proc/{pid}/root")
            os.chdir("/")
            if any(os.path.isfile(c) and os.access(c, os.X_OK) for c in cands):
                code = 0
            elif any(os.path.exists(c) for c in cands):
                code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return PROBLEMS.get(os.waitstatus_to_exitcode(status), "missing")


def exec_in(vmid, argv, env, cwd, lxc_err):
    """`pct exec` into the running container: nsenter into all its namespaces, root and the
    caller's cwd when the container has it (else /); exit codes like lxc-attach (127 missing,
    126 not executable, 128+N on signal N). The process joins the container's cgroup."""
    pid = init_pid(vmid)
    if not pid:
        raise L.PveError(f"container '{vmid}' not running!")
    problem = _find_inside(pid, argv[0], env.get("PATH", ""))
    if problem == "missing":
        lxc_err(vmid, f'No such file or directory - Failed to exec "{argv[0]}"')
        return 127
    if problem == "noexec":
        lxc_err(vmid, f'Permission denied - Failed to exec "{argv[0]}"')
        return 126
    wd = cwd if cwd.startswith("/") and os.path.isdir(f"/proc/{pid}/root{cwd}") else "/"
    cmd = [NSENTER, "-t", str(pid), "-a", "-r", f"--wd=/proc/{pid}/root{wd}", "--", *argv]
    payload = [d if d.startswith(MEMORY + "/") else d + "/payload" for d in cgroup_dirs(vmid)]

    def into_container_cgroup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for d in payload:
            try:
                with open(d + "/cgroup.procs", "w") as f:
                    f.write("0")
            except OSError:
                pass

    sys.stdout.flush()
    sys.stderr.flush()
    p = subprocess.Popen(cmd, env=env, preexec_fn=into_container_cgroup)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = p.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    return 128 - code if code < 0 else code


def transfer(vmid, fn):
    """Run fn() (push/pull's file work) in a child inside the container's mount namespace
    (its root and /, where the container's own /tmp tmpfs and mounts are). -> fn's exit code."""
    pid = init_pid(vmid)
    if not pid:
        raise L.PveError(f"container '{vmid}' not running!")
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
            _check(_libc.setns(ns, CLONE_NEWNS), "setns")
            os.chdir("/")
            fn()
            code = 0
        except L.PveError as e:
            sys.stderr.write(f"{e}\n")
        except BaseException as e:  # noqa
            sys.stderr.write(f"enter: {e}\n")
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    # python3 ctsystemd.py monitor <vmid> <console log> -- <nspawn argv...>
    if len(sys.argv) > 5 and sys.argv[1] == "monitor" and sys.argv[4] == "--":
        sys.exit(monitor(sys.argv[2], sys.argv[3], sys.argv[5:]))
    sys.exit(__doc__)
