#!/usr/bin/python3
"""Enter a simulated container (installed in the node at /usr/lib/pve-sim/enter.py).

    enter.py exec <vmid> [--keep-env 0|1] -- CMD...   run CMD in the container (no pct.log entry)
    enter.py push <vmid> <dest> [--perms P] [--user U] [--group G] < data
    enter.py pull <vmid> <path> > data

Each call: a fresh mount+pid+uts+ipc namespace; the container's root (overlay of the pristine host
root and the container's upper dir, mounted by `pct start`), a tmpfs /dev holding the standard nodes
plus only the devices its config passed through (recorded at start), a fresh /proc with the node's
/proc/devices view and /proc/driver, mpN bind mounts, then chroot and exec. The command is PID 1 of
its pid namespace, so nothing it starts outlives the call. Exit codes follow lxc-attach: the
command's own, 127 when it cannot be found, 126 when it cannot be executed, 128+N on signal N.
The pct double imports this module and calls enter() directly.
"""

import ctypes
import grp
import os
import pwd
import signal
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctsystemd as SD  # noqa: E402
import pvelxc as L  # noqa: E402

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID = 0x20000, 0x04000000, 0x08000000, 0x20000000
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STD_DEVS = (
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
)


def _mknod(path, kind, major, minor, mode, uid=0, gid=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(
        path, (stat.S_IFCHR if kind == "c" else stat.S_IFBLK) | 0o600, os.makedev(major, minor)
    )
    os.chmod(path, mode)
    if uid or gid:
        os.chown(path, uid, gid)


def _setup(vmid, conf):
    """In the child (PID 1 of the new pid namespace): build the container's view and chroot."""
    L.sys_mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
    R = L.ensure_rootfs(vmid)
    # /dev
    L.sys_mount("tmpfs", R + "/dev", "tmpfs", L.MS_NOSUID, "mode=755,size=8m")
    for name, ma, mi in STD_DEVS:
        _mknod(f"{R}/dev/{name}", "c", ma, mi, 0o666)
    for d in ("pts", "shm", "mqueue"):
        os.makedirs(f"{R}/dev/{d}", exist_ok=True)
    L.sys_mount(
        "devpts",
        R + "/dev/pts",
        "devpts",
        L.MS_NOSUID | L.MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620,gid=5",
    )
    os.symlink("pts/ptmx", R + "/dev/ptmx")
    L.sys_mount("tmpfs", R + "/dev/shm", "tmpfs", L.MS_NOSUID | L.MS_NODEV, "mode=1777")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{R}/dev/{name}")
    for dev in L.load_devices(vmid):
        dst = R + dev["dst"]
        if dev["kind"] == "mknod":
            _mknod(
                dst,
                dev["type"],
                dev["major"],
                dev["minor"],
                dev["mode"],
                dev.get("uid", 0),
                dev.get("gid", 0),
            )
        elif dev["kind"] == "bind":
            if not os.path.exists(dev["src"]):
                continue
            if dev["dir"]:
                os.makedirs(dst, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if not os.path.exists(dst):
                    open(dst, "a").close()
            L.sys_mount(dev["src"], dst, None, L.MS_BIND)
            if dev.get("ro"):
                L.sys_mount(None, dst, None, L.MS_BIND | L.MS_REMOUNT | L.MS_RDONLY)
    # /proc, /sys
    os.makedirs(R + "/proc", exist_ok=True)
    L.sys_mount("proc", R + "/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
    L.sys_mount(L.PROC_DEVICES_VIEW, R + "/proc/devices", None, L.MS_BIND)
    if os.path.isdir("/proc/driver"):
        L.sys_mount("/proc/driver", R + "/proc/driver", None, L.MS_BIND | L.MS_REC)
    os.makedirs(R + "/sys", exist_ok=True)
    L.sys_mount("sysfs", R + "/sys", "sysfs", L.MS_RDONLY | L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
    # bind mount points (current config: PVE hotplugs bind mounts)
    for src, mp, ro in L.mountpoints(conf):
        dst = R + "/" + mp.lstrip("/")
        os.makedirs(dst, exist_ok=True)
        if src is None:
            continue
        if not os.path.isdir(src):
            continue
        L.sys_mount(src, dst, None, L.MS_BIND | L.MS_REC)
        if ro:
            L.sys_mount(None, dst, None, L.MS_BIND | L.MS_REMOUNT | L.MS_RDONLY)
    import socket

    socket.sethostname(conf.get("hostname", f"CT{vmid}"))
    os.chroot(R)


def _find(cmd, path):
    if "/" in cmd:
        return cmd
    for d in (path or DEFAULT_PATH).split(":"):
        p = os.path.join(d or ".", cmd)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    for d in (path or DEFAULT_PATH).split(":"):
        p = os.path.join(d or ".", cmd)
        if os.path.exists(p):
            return p
    return cmd


def _lxc_err(vmid, msg):
    sys.stderr.write(
        f"lxc-attach: {vmid}: ../src/lxc/attach.c: lxc_attach_run_command: 1841 {msg}\n"
    )
    sys.stderr.flush()


def _create_file(path, perms, user, group):
    """pct's create_file(): ownership and permissions explicit, not affected by umask."""
    uid = gid = None
    if user is not None:
        if user.isdigit():
            uid = int(user)
        else:
            try:
                uid = pwd.getpwnam(user).pw_uid
            except KeyError:
                raise L.PveError(f"failed to get uid for: {user}") from None
    if group is not None:
        if group.isdigit():
            gid = int(group)
        else:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise L.PveError(f"failed to get gid for: {group}") from None
    if perms is not None:
        try:
            perms = (
                int(perms, 0)
                if not perms.startswith("0") or perms.startswith("0x")
                else int(perms, 8)
            )
        except ValueError:
            raise L.PveError(f"invalid mode: '{perms}'") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0)
        if perms is None:
            um = os.umask(0)
            os.umask(um)
            perms = 0o666 & ~um
    except OSError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        except OSError as e:
            raise L.PveError(f"failed to create file: {path}: {e.strerror}") from None
    if perms is not None:
        os.fchmod(fd, perms)
    if uid is not None or gid is not None:
        st = os.fstat(fd)
        try:
            os.fchown(fd, st.st_uid if uid is None else uid, st.st_gid if gid is None else gid)
        except OSError as e:
            raise L.PveError(f"failed to change file owner: {e.strerror}") from None
    return fd


def _copy_fd(src, dst):
    while True:
        b = os.read(src, 1 << 20)
        if not b:
            break
        mv = memoryview(b)
        while mv:
            n = os.write(dst, mv)
            mv = mv[n:]


def enter(
    vmid,
    mode,
    argv=None,
    env=None,
    keep_cwd=True,
    dest=None,
    perms=None,
    user=None,
    group=None,
    src_fd=None,
    dst_fd=None,
):
    """Run in container vmid; returns an exit status like lxc-attach (exec) or 0/1 (push/pull).
    mode: 'exec' (argv, env), 'push' (copy src_fd to dest inside), 'pull' (copy dest inside to
    dst_fd)."""
    cfg = L.load(vmid)
    conf = cfg.conf
    cwd = os.getcwd() if keep_cwd else "/"
    if SD.enabled():  # a booted container: enter its namespaces instead of making new ones
        if mode == "exec":
            return SD.exec_in(vmid, argv, dict(env or {}), cwd, _lxc_err)
        return SD.transfer(vmid, lambda: _transfer(mode, dest, perms, user, group, src_fd, dst_fd))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if _libc_unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            # fork again: the grandchild is PID 1 of the new pid namespace
            pid2 = os.fork()
            if pid2 == 0:
                try:
                    _child(
                        vmid, conf, mode, argv, env, cwd, dest, perms, user, group, src_fd, dst_fd
                    )
                except L.PveError as e:
                    sys.stderr.write(f"{e}\n")
                    os._exit(1)
                except BaseException as e:  # noqa
                    sys.stderr.write(f"enter: {e}\n")
                    os._exit(1)
                os._exit(0)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _, status = os.waitpid(pid2, 0)
            code = os.waitstatus_to_exitcode(status)
            if code < 0:
                code = 128 - code
        except BaseException as e:  # noqa
            sys.stderr.write(f"enter: {e}\n")
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _libc_unshare(flags):
    return L._libc.unshare(flags)


def _child(vmid, conf, mode, argv, env, cwd, dest, perms, user, group, src_fd, dst_fd):
    _setup(vmid, conf)
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")
    if mode == "exec":
        # We are PID 1 of the call's pid namespace (a stand-in for the container's init): the
        # command runs as our child, so it can be signalled like an attached process; we reap and
        # pass its status.
        pid = os.fork()
        if pid != 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            while True:
                try:
                    done, status = os.waitpid(-1, 0)
                except ChildProcessError:
                    os._exit(1)
                if done == pid:
                    code = os.waitstatus_to_exitcode(status)
                    os._exit(128 - code if code < 0 else code)
        env = dict(env or {})
        exe = _find(argv[0], env.get("PATH"))
        try:
            os.execve(exe, argv, env)
        except FileNotFoundError:
            _lxc_err(vmid, f'No such file or directory - Failed to exec "{argv[0]}"')
            os._exit(127)
        except PermissionError:
            _lxc_err(vmid, f'Permission denied - Failed to exec "{argv[0]}"')
            os._exit(126)
        except OSError as e:
            _lxc_err(vmid, f'{e.strerror} - Failed to exec "{argv[0]}"')
            os._exit(126)
    else:
        _transfer(mode, dest, perms, user, group, src_fd, dst_fd)


def _transfer(mode, dest, perms, user, group, src_fd, dst_fd):
    """push/pull's file work, inside the container's root."""
    os.chdir("/")
    if mode == "push":
        fd = _create_file(dest, perms, user, group)
        _copy_fd(src_fd if src_fd is not None else 0, fd)
        os.close(fd)
    elif mode == "pull":
        try:
            fd = os.open(dest, os.O_RDONLY)
        except OSError as e:
            raise L.PveError(f"failed to open {dest}: {e.strerror}") from None
        _copy_fd(fd, dst_fd if dst_fd is not None else 1)
    else:
        raise ValueError(mode)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    mode, vmid, rest = argv[0], argv[1], argv[2:]
    try:
        if not L.is_running(vmid):
            L.load(vmid)
            raise L.PveError(f"container '{vmid}' not running!")
        if mode == "exec":
            keep_env = True
            while rest and rest[0] != "--":
                if rest[0] == "--keep-env":
                    keep_env = rest[1] not in ("0", "no", "false", "off")
                    rest = rest[2:]
                else:
                    sys.exit(f"enter.py: unknown option {rest[0]}")
            argv2 = rest[1:]
            if keep_env:
                env = dict(os.environ)
                env["PATH"] = "/sbin:/bin:/usr/sbin:/usr/bin"
            else:
                env = {"PATH": DEFAULT_PATH, "HOME": "/root"}
            env["container"] = "lxc"
            return enter(vmid, "exec", argv=argv2, env=env)
        opts = {}
        args = []
        i = 0
        while i < len(rest):
            if rest[i] in ("--perms", "--user", "--group"):
                opts[rest[i][2:]] = rest[i + 1]
                i += 2
            else:
                args.append(rest[i])
                i += 1
        if mode == "push":
            return enter(vmid, "push", dest=args[0], src_fd=0, **opts)
        if mode == "pull":
            return enter(vmid, "pull", dest=args[0], dst_fd=1)
        sys.exit(f"enter.py: unknown mode {mode}")
    except L.PveError as e:
        sys.stderr.write(f"{e}\n")
        return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
