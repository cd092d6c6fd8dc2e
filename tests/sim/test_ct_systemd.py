"""Real-systemd containers (SimNode(ct_init="systemd"), the default): what only this mode has,
beyond pct's semantics (tests/sim/test_node.py runs those against the default, and again against
the opt-in exec model): hot-plug into a running container, a failed boot, nothing left after
stops, a node that mounts the unified cgroup hierarchy alone."""

import time

import pytest
import test_node

from sim.fixtures import skip_without_real_systemd
from sim.node import SimNode

pct, make_ct = test_node.pct, test_node.make_ct

LEFTOVERS = (
    "ls -d /sys/fs/cgroup/*/lxc/{vmid} /sys/fs/cgroup/lxc/{vmid} /run/pve-sim/ct/{vmid} "
    "2>/dev/null; grep ' /var/lib/pve-sim/ct/{vmid}/' /proc/self/mountinfo; "
    "pgrep -f -- '--machine=[c]t{vmid} '; true"
)


def leftovers(node, vmid):
    return node.run(["sh", "-c", LEFTOVERS.format(vmid=vmid)]).stdout


@pytest.fixture(scope="module")
def systemd_node(tmp_path_factory):
    skip_without_real_systemd()
    node = SimNode(tmp_path_factory.mktemp("pve-sim") / "node", ct_init="systemd")
    try:
        node.start()
        yield node
    finally:
        cgroups = list(node._cgroups)
        node.stop()
        assert not any(d.exists() for d in cgroups), cgroups  # the node's cgroups are gone too


@pytest.fixture(scope="module")
def ct200(systemd_node):
    node = systemd_node
    node.run(["mkdir", "-p", "/tank/dflash"], check=True)
    node.run(["sh", "-c", "echo keep > /tank/dflash/ckpt"], check=True)
    make_ct(node, 200, "--mp0", "/tank/dflash,mp=/data,backup=0")
    return node


def test_pid1_is_systemd_and_mounts_devices_cwd_are_there(ct200):
    node = ct200
    assert pct(node, "exec", "200", "--", "cat", "/proc/1/comm").stdout == "systemd\n"
    assert pct(node, "exec", "200", "--", "cat", "/data/ckpt").stdout == "keep\n"
    # the caller's cwd when the container has it, else /
    assert node.run(["sh", "-c", "cd /etc && pct exec 200 -- pwd"]).stdout == "/etc\n"
    assert node.run(["sh", "-c", "cd /tank && pct exec 200 -- pwd"]).stdout == "/\n"
    # an absolute symlink resolves inside the container (a venv's bin/python -> its base python)
    pct(
        node,
        "exec",
        "200",
        "--",
        "sh",
        "-c",
        "mkdir -p /opt/inside && printf '#!/bin/sh\\necho "
        "inside\\n' > /opt/inside/tool && chmod +x /opt/inside/tool && "
        "ln -sf /opt/inside/tool /root/tool",
    )
    assert node.run(["test", "-e", "/opt/inside"]).returncode == 1
    assert pct(node, "exec", "200", "--", "/root/tool").stdout == "inside\n"
    assert node.ct_run(200, ["/root/tool"]).stdout == "inside\n"
    # the node's /proc/devices view and /proc/driver are there (the torch double reads them)
    r = pct(
        node,
        "exec",
        "200",
        "--",
        "sh",
        "-c",
        "grep -c nvidia /proc/devices; cat /proc/driver/nvidia/version",
    )
    assert r.stdout.startswith("3\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05"), r


def test_hotplug_into_a_running_container(ct200):
    node = ct200
    node.run(["mkdir", "-p", "/srv/ro", "/srv/rw"], check=True)
    r = pct(node, "set", "200", "--mp1", "/srv/ro,mp=/mnt/ro,ro=1", "--mp2", "/srv/rw,mp=/mnt/rw")
    assert r.returncode == 0, r.stderr
    r = pct(node, "exec", "200", "--", "sh", "-c", "touch /mnt/rw/a && echo rw; touch /mnt/ro/a")
    assert r.stdout == "rw\n" and "Read-only file system" in r.stderr
    assert node.run(["test", "-e", "/srv/rw/a"]).returncode == 0
    assert pct(node, "set", "200", "--delete", "mp1,mp2").returncode == 0


def test_failed_boot_reports_and_leaves_nothing(systemd_node):
    node = systemd_node
    make_ct(node, 210, start=False)
    # a tree without an init: nspawn -b finds nothing to boot
    upper = "/var/lib/pve-sim/ct/210/upper"
    node.run(
        [
            "sh",
            "-c",
            f"mkdir -p {upper}/usr/sbin {upper}/usr/lib/systemd && "
            f"mknod {upper}/usr/sbin/init c 0 0 && "
            f"mknod {upper}/usr/lib/systemd/systemd c 0 0",
        ],
        check=True,
    )
    r = pct(node, "start", "210")
    assert r.returncode == 255
    assert "systemd-nspawn exited with 1" in r.stderr
    assert r.stderr.rstrip().endswith("startup for container '210' failed")
    assert pct(node, "status", "210").stdout == "status: stopped\n"
    assert leftovers(node, 210) == ""


def test_stop_shutdown_reboot_leave_nothing(systemd_node):
    node = systemd_node
    make_ct(node, 220)
    boot = ["systemctl", "show", "-p", "UserspaceTimestampMonotonic", "--value"]
    first = pct(node, "exec", "220", "--", *boot).stdout
    assert pct(node, "reboot", "220").returncode == 0
    again = pct(node, "exec", "220", "--", *boot).stdout
    assert again.strip() and first.strip() and again != first  # a new boot of its systemd
    assert pct(node, "shutdown", "220").returncode == 0
    assert leftovers(node, 220) == ""
    assert pct(node, "start", "220").returncode == 0
    assert pct(node, "stop", "220").returncode == 0
    assert leftovers(node, 220) == ""
    assert pct(node, "start", "220").returncode == 0
    assert pct(node, "destroy", "220", "--force").returncode == 0
    assert leftovers(node, 220) == ""


def test_poweroff_and_reboot_from_inside(systemd_node):
    node = systemd_node
    make_ct(node, 230)
    # `systemctl reboot` inside: nspawn boots it again; pct exec reaches the new systemd
    since = ["systemctl", "show", "-p", "UserspaceTimestampMonotonic", "--value"]
    first = pct(node, "exec", "230", "--", *since).stdout
    pct(node, "exec", "230", "--", "systemctl", "reboot")
    deadline = time.monotonic() + 60  # a bound on waiting for the reboot, not a time check
    while True:  # (until then pct exec may reach the old systemd going down)
        again = pct(node, "exec", "230", "--", *since)
        if again.returncode == 0 and again.stdout.strip() and again.stdout != first:
            break
        assert time.monotonic() < deadline, again
        time.sleep(0.2)
    assert pct(node, "exec", "230", "--", "grep", "-c", "nvidia", "/proc/devices").stdout == "3\n"
    # `systemctl poweroff` inside: the container is stopped, cleaned up, and starts again
    pct(node, "exec", "230", "--", "systemctl", "poweroff")
    deadline = time.monotonic() + 60  # a bound on waiting for the poweroff, not a time check
    while pct(node, "status", "230").stdout != "status: stopped\n":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert leftovers(node, 230) == ""
    assert pct(node, "start", "230").returncode == 0
    assert pct(node, "exec", "230", "--", "cat", "/proc/1/comm").stdout == "systemd\n"
    assert pct(node, "stop", "230").returncode == 0


def test_a_node_with_the_unified_hierarchy_alone_boots_and_cleans_up(tmp_path):
    """SimNode(cgroup_layout="v2"): the node mounts cgroup2 alone at /sys/fs/cgroup, as a cgroup
    v2 node does (no name=systemd hierarchy); nspawn and the container's systemd run on it and a
    stop leaves nothing. What this cannot show on a hybrid machine (its controllers stay bound
    to v1, so none is delegated): sim/README.md, "cgroup v2"."""
    skip_without_real_systemd()
    with SimNode(tmp_path / "node", cgroup_layout="v2") as node:
        mounts = node.run(
            ["awk", "$5 ~ /^\\/sys\\/fs\\/cgroup/ {print $5, $9}", "/proc/self/mountinfo"]
        ).stdout
        assert mounts == "/sys/fs/cgroup cgroup2\n", mounts
        make_ct(node, 200)
        assert pct(node, "exec", "200", "--", "cat", "/proc/1/comm").stdout == "systemd\n"
        run = node.ct_run(200, ["systemd-run", "--unit", "probe", "sleep", "300"])
        assert run.returncode == 0, run.stderr
        main = node.ct_run(200, ["systemctl", "show", "-p", "MainPID", "--value", "probe"])
        cgroup = node.read(f"/proc/{node.node_pid(200, int(main.stdout))}/cgroup")
        assert "0::/lxc/200/payload/system.slice/probe.service\n" in cgroup, cgroup
        assert pct(node, "shutdown", "200").returncode == 0
        assert leftovers(node, 200) == ""
