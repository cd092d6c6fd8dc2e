#!/usr/bin/env python3
"""PID 1 of a simulated Proxmox node (run by sim.node.SimNode under unshare).

    unshare --mount --pid --uts --fork --kill-child --propagation private \
        python3 sim/nodeinit.py <state_dir>

Builds the node's root (an overlay of this machine's `/`), pivots into it, installs the doubles,
creates the NVIDIA device nodes and /proc views, then runs Debian's sshd on 127.0.0.1 and reaps
children until sshd exits or SIGTERM arrives. Everything the node writes lands in
<state>/node/upper; the real `/` is never modified.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def sh(*argv):
    subprocess.run(argv, check=True)


def mount(src, dst, fstype=None, opts=None, flags=()):
    argv = ["mount"]
    if fstype:
        argv += ["-t", fstype]
    argv += list(flags)
    if opts:
        argv += ["-o", opts]
    argv += [src, dst]
    sh(*argv)


def set_opaque(path):
    os.makedirs(path, exist_ok=True)
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def mount_cgroups(target, v2_only=False):
    """The node's cgroup hierarchies, like this machine's (cgroup v2, or hybrid: a tmpfs holding
    name=systemd and unified), seen from the node's cgroup namespace (SimNode put the node in its
    own cgroup directories first), so systemd-nspawn can give each container its own. v2_only:
    the unified hierarchy alone, as a cgroup v2 node mounts it (SimNode(cgroup_layout="v2"))."""
    if v2_only or os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        mount("cgroup2", target, "cgroup2", "nosuid,nodev,noexec")
        return
    hierarchies = [
        ("systemd", "cgroup", "none,name=systemd,nosuid,nodev,noexec"),
        ("unified", "cgroup2", "nosuid,nodev,noexec"),
    ]
    # the v1 memory controller, when this machine has it: the containers' memory use
    # (memory.usage_in_bytes under memory/lxc/<vmid>, as on a hybrid Proxmox node)
    if os.path.exists("/sys/fs/cgroup/memory/cgroup.procs"):
        hierarchies.append(("memory", "cgroup", "memory,nosuid,nodev,noexec"))
    mount("tmpfs", target, "tmpfs", "mode=755,size=64k")
    for name, fstype, opts in hierarchies:
        os.makedirs(os.path.join(target, name))
        mount("cgroup", os.path.join(target, name), fstype, opts)


def main():
    state = os.path.abspath(sys.argv[1])
    # /proc is still the host's proc here, so /proc/self names our pid as the host sees it.
    host_pid = int(os.readlink("/proc/self"))
    with open(os.path.join(state, "nodeinit.pid"), "w") as f:
        f.write(str(host_pid))
    with open(os.path.join(state, "node.json")) as f:
        cfg = json.load(f)

    socket.sethostname(cfg.get("hostname", "pve1"))
    upper = os.path.join(state, "node", "upper")
    work = os.path.join(state, "node", "work")
    root = os.path.join(state, "node", "root")
    for d in (upper, work, root):
        os.makedirs(d, exist_ok=True)
    # A real PVE node has an empty /usr/local and a fresh /root: hide this machine's.
    for d in ("usr/local", "root"):
        set_opaque(os.path.join(upper, d))
    for d in ("bin", "etc", "games", "include", "lib", "man", "sbin", "share", "src"):
        os.makedirs(os.path.join(upper, "usr/local", d), exist_ok=True)
    os.chmod(os.path.join(upper, "root"), 0o700)
    # The node's resolver is loopback, where nothing answers: a name lookup by the code under test
    # (node, or a container, whose resolv.conf pct copies from here) never leaves this machine.
    os.makedirs(os.path.join(upper, "etc"), exist_ok=True)
    resolv = os.path.join(upper, "etc", "resolv.conf")
    if os.path.lexists(resolv):
        os.unlink(resolv)
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1\n")
    for name in (".bashrc", ".profile"):
        if os.path.exists("/etc/skel/" + name):
            shutil.copy("/etc/skel/" + name, os.path.join(upper, "root", name))

    mount("overlay", root, "overlay", f"lowerdir=/,upperdir={upper},workdir={work}")
    R = lambda p: os.path.join(root, p.lstrip("/"))  # noqa: E731

    mount("proc", R("/proc"), "proc", "nosuid,nodev,noexec")
    mount("sysfs", R("/sys"), "sysfs", "ro,nosuid,nodev,noexec")
    if cfg.get("ct_init") == "systemd":
        mount_cgroups(R("/sys/fs/cgroup"), cfg.get("cgroup_layout") == "v2")
    mount("tmpfs", R("/dev"), "tmpfs", "mode=755,size=16m")
    for name, major, minor, mode in (
        ("null", 1, 3, 0o666),
        ("zero", 1, 5, 0o666),
        ("full", 1, 7, 0o666),
        ("random", 1, 8, 0o666),
        ("urandom", 1, 9, 0o666),
        ("tty", 5, 0, 0o666),
    ):
        p = R("/dev/" + name)
        os.mknod(p, 0o600 | 0o020000, os.makedev(major, minor))
        os.chmod(p, mode)
    os.makedirs(R("/dev/pts"))
    os.makedirs(R("/dev/shm"))
    os.makedirs(R("/dev/char"))  # udev's; nvidia-modprobe links every node it makes there
    mount("devpts", R("/dev/pts"), "devpts", "newinstance,ptmxmode=0666,mode=620,gid=5")
    os.symlink("pts/ptmx", R("/dev/ptmx"))
    mount("tmpfs", R("/dev/shm"), "tmpfs", "mode=1777")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, R("/dev/" + name))
    mount("tmpfs", R("/tmp"), "tmpfs", "mode=1777")
    mount("tmpfs", R("/run"), "tmpfs", "mode=755")
    for d in ("/run/sshd", "/run/lock/lxc", "/run/pve-sim"):
        os.makedirs(R(d), exist_ok=True)

    # Pristine view of this machine's root: the lower layer of every container.
    hostroot = R("/var/lib/pve-sim/hostroot")
    os.makedirs(hostroot, exist_ok=True)
    mount("/", hostroot, flags=["--bind"])
    mount("none", hostroot, opts="remount,bind,ro")
    # Container dirs live on the host fs (overlay cannot be an overlay's upper layer).
    ctdir = R("/var/lib/pve-sim/ct")
    os.makedirs(ctdir, exist_ok=True)
    os.makedirs(os.path.join(state, "ct"), exist_ok=True)
    mount(os.path.join(state, "ct"), ctdir, flags=["--bind"])
    # Storage pools: a ZFS pool (tank) mounts at /tank, a filesystem of its own, not the root's.
    # Each is a directory of the state dir (the same layout as sim.node.pool_dir) bound there.
    for point in cfg.get("pools", []):
        backing = os.path.join(state, "pools", point.strip("/").replace("/", "_"))
        os.makedirs(backing, exist_ok=True)
        os.makedirs(R(point), exist_ok=True)
        mount(backing, R(point), flags=["--bind"])
    # The template's base tree (a cached debootstrap tree, sim/rootfs.py), read-only.
    if cfg.get("template_tree"):
        tree = R(f"/var/lib/pve-sim/trees/{cfg['template_release']}")
        os.makedirs(tree, exist_ok=True)
        mount(cfg["template_tree"], tree, flags=["--bind"])
        mount("none", tree, opts="remount,bind,ro")

    # /proc views: /proc/devices is a bind-mounted regular file, /proc/driver a tmpfs.
    with open("/proc/devices") as src, open(R("/run/pve-sim/proc-devices"), "w") as f:
        f.write(src.read())
    mount(R("/run/pve-sim/proc-devices"), R("/proc/devices"), flags=["--bind"])
    mount("tmpfs", R("/proc/driver"), "tmpfs", "mode=755,size=1m")

    # Sim files, doubles, ssh.
    install(state, root, cfg)

    # Into the node's root for good.
    os.chdir(root)
    sh("pivot_root", ".", ".")
    sh("umount", "-l", ".")
    os.chdir("/")
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
        }
    )
    subprocess.run(
        ["/usr/bin/python3", "/usr/lib/pve-sim/simctl.py", "apply", "--boot"], check=True
    )

    sshd = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/pve-sim/ssh/sshd_config"],
        stdin=subprocess.DEVNULL,
    )
    with open(os.path.join("/var/lib/pve-sim", "ready"), "w") as f:
        f.write(str(sshd.pid))

    def on_term(signum, frame):
        raise SystemExit(0)  # (os.wait() would be retried after a handler that returns)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            time.sleep(0.5)
            continue
        if pid == sshd.pid:
            break
    # PID 1 exiting kills every process of the node's pid namespace.
    sys.exit(0)


def install(state, root, cfg):
    R = lambda p: os.path.join(root, p.lstrip("/"))  # noqa: E731
    D = os.path.join(HERE, "doubles")

    def put(src, dst, mode=0o755):
        os.makedirs(os.path.dirname(R(dst)), exist_ok=True)
        if os.path.lexists(R(dst)):
            os.unlink(R(dst))
        shutil.copyfile(src, R(dst))
        os.chmod(R(dst), mode)

    put(os.path.join(D, "pct"), "/usr/sbin/pct")
    put(os.path.join(D, "pveversion"), "/usr/bin/pveversion")
    put(os.path.join(D, "pvesm"), "/usr/sbin/pvesm")
    put(os.path.join(D, "nvidia-modprobe"), "/usr/bin/nvidia-modprobe")
    # The node's PID 1 is this script, not systemd: its systemctl is the double (containers
    # boot real systemd and use their tree's own).
    put(os.path.join(D, "systemctl"), "/usr/bin/systemctl")
    # The .run driver installs the persistence daemon (no unit file: see the double's docstring).
    put(os.path.join(D, "nvidia-persistenced"), "/usr/bin/nvidia-persistenced")
    # pve-manager's unit that starts onboot guests (pve-manager: services/pve-guests.service).
    put(os.path.join(D, "pve-guests.service"), "/lib/systemd/system/pve-guests.service", 0o644)
    for name in ("nvidia-smi", "nvidia-installer.run"):
        put(os.path.join(D, name), "/usr/lib/pve-sim/doubles/" + name)
    for name in ("query-gpu-fields.txt", "query-compute-apps-fields.txt"):  # nvidia-smi's own
        put(
            os.path.join(HERE, "nvidia-smi-fields", name),
            "/usr/lib/pve-sim/nvidia-smi-fields/" + name,
            0o644,
        )
    put(os.path.join(HERE, "enter.py"), "/usr/lib/pve-sim/enter.py", 0o644)
    put(os.path.join(HERE, "simctl.py"), "/usr/lib/pve-sim/simctl.py", 0o644)
    put(os.path.join(HERE, "pvelxc.py"), "/usr/lib/pve-sim/pvelxc.py", 0o644)
    put(os.path.join(HERE, "debarchive.py"), "/usr/lib/pve-sim/debarchive.py", 0o644)
    put(os.path.join(HERE, "ctsystemd.py"), "/usr/lib/pve-sim/ctsystemd.py", 0o644)

    gpu = R("/var/lib/pve-sim/gpu")
    os.makedirs(gpu, exist_ok=True)
    with open(os.path.join(gpu, "node.json"), "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
    with open(os.path.join(gpu, "processes.json"), "w") as f:
        json.dump([], f)
    os.makedirs(R("/var/log/pve-sim"), exist_ok=True)
    open(R("/var/log/pve-sim/pct.log"), "a").close()

    # Proxmox layout: /etc/pve/nodes/<node>/lxc with /etc/pve/lxc -> nodes/<node>/lxc
    node = cfg.get("hostname", "pve1")
    os.makedirs(R(f"/etc/pve/nodes/{node}/lxc"), exist_ok=True)
    if not os.path.lexists(R("/etc/pve/lxc")):
        os.symlink(f"nodes/{node}/lxc", R("/etc/pve/lxc"))
    if cfg.get("template", True):
        tdir = R("/var/lib/vz/template/cache")
        os.makedirs(tdir, exist_ok=True)
        sys.path.insert(0, os.path.dirname(HERE))
        from sim.node import template_text

        with open(os.path.join(tdir, cfg["template_name"]), "w") as f:
            f.write(template_text(cfg))

    # ssh: our own host key, config and authorized key (copied from the state dir).
    sshdir = R("/etc/pve-sim/ssh")
    os.makedirs(sshdir, exist_ok=True)
    for name in (
        "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub",
        "sshd_config",
        "authorized_keys",
    ):
        shutil.copyfile(os.path.join(state, "ssh", name), os.path.join(sshdir, name))
    os.chmod(os.path.join(sshdir, "ssh_host_ed25519_key"), 0o600)


if __name__ == "__main__":
    main()
