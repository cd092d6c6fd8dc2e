"""Issue 21's preflight of a real site: what a node or its container can lack that the GPU checks
do not see (python3 on the node, the storages a new container needs, a `lock:` on the container,
free space for a build, Fabric Manager on an NVSwitch board). Each is refused before any change,
with one line naming the value and the fix: the sim's tree digest (node and containers) is
unchanged, and no traceback."""

from __future__ import annotations

import json

import pytest

from sim.pvelxc import DEFAULT_STORAGES

T8 = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
# a fresh install's storages (sim.pvelxc.DEFAULT_STORAGES) with a local-lvm too small for a build
SMALL_LVM = [
    DEFAULT_STORAGES[0],
    {**DEFAULT_STORAGES[1], "total_kib": 8388608, "used_kib": 6291456, "avail_kib": 2097152},
]


@pytest.fixture
def node_options():
    return {"ct_init": "exec"}  # no container boots here: the preflight refuses first


def refused_without_change(site, data, line):
    before = site.node.tree_digest()
    run = site.deploy(*data)
    assert run.rc != 0, (data, run.output[-3000:])
    assert line in run.output, (data, line, run.output[-3000:])
    assert "Traceback" not in run.output, run.output[-3000:]
    assert site.node.tree_digest() == before, data
    assert site.node.run(["test", "-e", "/etc/pve/lxc/200.conf"]).returncode == 1, data
    return run


def test_a_node_a_new_container_cannot_live_on_is_refused_before_any_change(site):
    node = site.node
    # a storage that does not exist (a ZFS node has local-zfs, not local-lvm; here the reverse)
    refused_without_change(
        site,
        ["ct_rootfs=local-zfs:128"],
        "127.0.0.1: CT 200 is to be created on storage 'local-zfs' "
        "(ct_rootfs='local-zfs:128'), which does not exist or holds no "
        "container directories (rootdir) on the node; storages for "
        "containers: local-lvm: set ct_rootfs, e.g. ct_rootfs=local-lvm:128",
    )
    # a storage without container directories
    refused_without_change(site, ["ct_rootfs=local:128"], "storage 'local' (ct_rootfs=")
    # too little disk on the rootfs storage
    node.configure(storages=SMALL_LVM)
    refused_without_change(
        site,
        [],
        "127.0.0.1: storage 'local-lvm' (ct_rootfs) has 2.0 GiB available, "
        "CT 200 needs 20 GiB (min_free_gib=20;",
    )
    node.configure(storages=None)
    # an NVSwitch fabric without Fabric Manager
    node.configure(fabric_state="Not Started", fabric_status="N/A")
    refused_without_change(
        site,
        [],
        "127.0.0.1: the GPUs are on an NVSwitch fabric (fabric.state Not "
        "Started) but nvidia-fabricmanager.service is not installed",
    )
    # a pre-Hopper NVSwitch board (HGX A100: fabric.state N/A), its NVSwitches in the
    # nvswitch module's /proc/driver/nvidia-nvswitch/devices/
    node.configure(fabric_state=None, fabric_status=None, nvswitches=2)
    refused_without_change(
        site,
        [],
        "127.0.0.1: the node has 2 NVSwitch device(s) (/proc/driver/nvidia-nvswitch) but "
        "nvidia-fabricmanager.service is not installed",
    )
    node.configure(nvswitches=0)
    # no python3 on the node
    node.run(["mv", "/usr/bin/python3", "/usr/bin/python3.pvegpu-test"], check=True)
    try:
        run = refused_without_change(site, [], "127.0.0.1: python3 is not installed on the node")
        assert "check SSH" not in run.output
    finally:
        node.run(["mv", "/usr/bin/python3.pvegpu-test", "/usr/bin/python3"], check=True)


def test_a_locked_or_full_container_is_refused_before_any_change(site):
    node = site.node
    pct = node.run(["pct", "create", "200", T8, "--rootfs", "local-lvm:32", "--hostname", "ct200"])
    assert pct.returncode == 0, pct.stderr
    node.run(["sh", "-c", "echo 'lock: backup' >> /etc/pve/lxc/200.conf"], check=True)
    before = node.tree_digest()
    run = site.deploy()
    assert run.rc != 0, run.output[-3000:]
    assert (
        "127.0.0.1: CT 200 is locked (backup): pct refuses changes while a backup runs; "
        "wait for it to end (or, if none runs, `pct unlock 200`) and run again"
    ) in run.output
    assert "Traceback" not in run.output
    assert node.tree_digest() == before
    assert node.run(["pct", "unlock", "200"]).returncode == 0
    assert node.run(["pct", "start", "200"]).returncode == 0
    before = node.tree_digest()
    run = site.deploy("min_free_gib=100000")
    assert run.rc != 0, run.output[-3000:]
    assert "127.0.0.1: CT 200 has " in run.output and (
        "GiB free on its root disk, a deploy needs 100000 GiB (min_free_gib=100000;" in run.output
    ), run.output[-3000:]
    assert "Traceback" not in run.output
    assert node.tree_digest() == before


# --- nvidia-persistenced someone else runs (issue 21 item 4) -----------------------------------
UNIT = "/etc/systemd/system/nvidia-persistenced.service"
ADMIN_UNIT = (
    "[Unit]\nDescription=our own persistenced\n\n[Service]\nType=forking\n"
    "ExecStart=/usr/bin/nvidia-persistenced --user nvpd\n\n[Install]\n"
    "WantedBy=multi-user.target\n"
)


def persistenced_changes(node) -> list[list[str]]:
    """The node's systemctl calls that would change nvidia-persistenced.service (reads left out)."""
    text = node.run(["cat", "/var/lib/pve-sim-systemd/calls.log"]).stdout
    calls = [json.loads(line)["argv"] for line in text.splitlines() if line.strip()]
    reads = ("is-active", "is-enabled", "show", "status", "cat")
    return [c for c in calls if "nvidia-persistenced.service" in c and c[0] not in reads]


def node_stage(site):
    """The deploy of the node alone (its boot units), with -y: every operation on the node
    passes (the closing line says converged); its container was left out, so the run ends not
    verified, exit status 1."""
    run = site.pyinfra("deploy.py", extra=["--limit", "127.0.0.1"])
    closing = "pvegpu: 127.0.0.1: converged, not verified: CT 200 was not in this run"
    assert run.rc == 1 and closing in run.output, run.output[-3000:]
    return run


def test_a_persistence_daemon_outside_systemd_is_left_alone(site):
    node = site.node
    # a daemon started by hand (argv[0] nvidia-persistenced), outside any unit
    start = "import os, sys; os.setsid(); os.execvp('sleep', ['nvidia-persistenced', '3600'])"
    pid = node.run(
        ["sh", "-c", f'python3 -c "{start}" >/dev/null 2>&1 & echo $!'], check=True
    ).stdout.strip()
    try:
        run = node_stage(site)
        assert (
            f"127.0.0.1: nvidia-persistenced already runs outside systemd (pid {pid}): left "
            "alone (pvegpu neither writes nor starts nvidia-persistenced.service)"
        ) in run.output
        assert node.run(["test", "-e", UNIT]).returncode == 1  # no second daemon's unit
        assert persistenced_changes(node) == []
        assert (
            node.run(["test", "-e", "/etc/systemd/system/nvidia-uvm-init.service"]).returncode == 0
        )
    finally:
        node.run(["kill", pid])


def test_an_admins_own_persistenced_unit_is_never_overwritten(site):
    node = site.node
    node.run(
        ["sh", "-c", f"mkdir -p /etc/systemd/system && cat > {UNIT}"], input=ADMIN_UNIT, check=True
    )
    run = node_stage(site)
    assert (
        f"127.0.0.1: {UNIT} is not pvegpu's (no pvegpu marker on its first line): left alone "
        "(never rewritten, enabled or started by pvegpu)"
    ) in run.output
    assert node.read(UNIT) == ADMIN_UNIT
    assert persistenced_changes(node) == []


# NVIDIA's unit (package nvidia-fabricmanager-<branch>: /lib/systemd/system), abridged
FM_UNIT = (
    "[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\nType=forking\n"
    "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
    "\n[Install]\nWantedBy=multi-user.target\n"
)


def fabric_manager_version(node, version):
    """A stand-in for NVIDIA's nv-fabricmanager (`--version` as the real one prints it)."""
    node.run(
        ["sh", "-c", "cat > /usr/bin/nv-fabricmanager && chmod 755 /usr/bin/nv-fabricmanager"],
        input=f"#!/bin/sh\necho 'Fabric Manager version is : {version}'\n",
        check=True,
    )


def test_an_nvswitch_board_with_fabric_manager_running_converges_with_it_before_guests(site):
    node = site.node
    node.configure(fabric_state="Completed", fabric_status="Success", nvswitches=4)
    node.run(
        ["sh", "-c", "cat > /lib/systemd/system/nvidia-fabricmanager.service"],
        input=FM_UNIT,
        check=True,
    )
    node.run(["systemctl", "enable", "--now", "nvidia-fabricmanager.service"], check=True)
    # Fabric Manager starts only with the driver's exact version
    fabric_manager_version(node, "580.82.07")
    before = node.tree_digest()
    run = site.pyinfra("deploy.py", extra=["--limit", "127.0.0.1"])
    assert run.rc != 0 and "Traceback" not in run.output, run.output[-3000:]
    assert (
        "127.0.0.1: Fabric Manager 580.82.07 is not the NVIDIA driver 580.95.05: it starts only "
        "with the driver's exact version" in run.output
    ), run.output[-3000:]
    assert node.tree_digest() == before
    fabric_manager_version(node, "580.95.05")
    node_stage(site)
    uvm = node.read("/etc/systemd/system/nvidia-uvm-init.service").splitlines()
    assert (
        "After=nvidia-fabricmanager.service" in uvm and "Wants=nvidia-fabricmanager.service" in uvm
    )
    assert "Before=pve-guests.service" in uvm
    # it waits, bounded, until every GPU has registered with the fabric
    assert any("--query-gpu=fabric.state" in line for line in uvm)
