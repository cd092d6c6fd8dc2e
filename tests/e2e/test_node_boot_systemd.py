"""The node's boot units proved in a real boot: a real-systemd container (SimNode(ct_init=
"systemd")) plays the node at boot. It holds the units pvegpu.plan.boot renders for the node
(nvidia-uvm-init.service, nvidia-persistenced.service, modules-load.d/nvidia.conf), the
nvidia-modprobe and nvidia-persistenced doubles, and pve-manager's pve-guests.service unchanged,
whose `pvesh ... startall` is a stand-in that records, when Proxmox would start its guests,
whether every GPU node, nvidiactl and nvidia-uvm exists. Like a cold boot, its /dev starts
without NVIDIA nodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pvegpu.plan.boot import render_modules, render_persistenced_unit, render_uvm_unit
from sim.fixtures import skip_without_real_systemd
from sim.node import SimNode

SIM = Path(__file__).resolve().parents[2] / "sim"
GPUS = 8
RECORD = "/var/log/pve-guests-startall.record"
NODES = [f"/dev/nvidia{i}" for i in range(GPUS)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
# What pve-guests.service's ExecStart runs on a real node starts the onboot guests; here it
# writes down which device nodes exist at that moment.
PVESH = (
    "#!/bin/sh\n: > " + RECORD + "\nfor n in " + " ".join(NODES) + "; do\n"
    '  if [ -c "$n" ]; then echo "present $n"; else echo "missing $n"; fi >> ' + RECORD + "\ndone\n"
)


@pytest.fixture
def node(tmp_path):
    skip_without_real_systemd()
    with SimNode(tmp_path / "node", gpus=GPUS, ct_init="systemd") as node:
        yield node


def push(node, vmid, path, text, mode="0644"):
    node.run(
        ["sh", "-c", f"cat > /tmp/push.tmp && pct push {vmid} /tmp/push.tmp {path} --perms {mode}"],
        input=text,
        check=True,
    )


def boot_record(node, vmid):
    """Reboot the container, wait until its boot is finished, return the pve-guests record."""
    assert node.run(["pct", "reboot", str(vmid)]).returncode == 0
    done = node.ct_run(vmid, ["systemctl", "is-system-running", "--wait"])
    assert done.stdout.strip() in ("running", "degraded"), done.stdout + done.stderr
    active = node.ct_run(vmid, ["systemctl", "is-active", "pve-guests.service"]).stdout
    assert active == "active\n", node.ct_run(vmid, ["systemctl", "status", "pve-guests"]).stdout
    return node.ct_run(vmid, ["cat", RECORD], check=True).stdout.splitlines()


def test_device_nodes_exist_before_pve_guests_starts_in_a_real_boot(node):
    tpl = node.cfg["template_name"]
    assert (
        node.run(
            [
                "pct",
                "create",
                "900",
                f"local:vztmpl/{tpl}",
                "--hostname",
                "pve1",
                "--rootfs",
                "local-lvm:4",
            ]
        ).returncode
        == 0
    )
    assert node.run(["pct", "start", "900"]).returncode == 0
    # the node's tools and state the doubles read (the simulated driver's node.json)
    node.run(["mkdir", "-p", "/tmp/boot"], check=True)
    for double in ("nvidia-modprobe", "nvidia-persistenced"):
        push(node, 900, f"/usr/bin/{double}", (SIM / "doubles" / double).read_text(), "0755")
    node.ct_run(
        900, ["mkdir", "-p", "/var/lib/pve-sim/gpu", "/usr/share/pve-manager/helpers"], check=True
    )
    push(node, 900, "/var/lib/pve-sim/gpu/node.json", node.read("/var/lib/pve-sim/gpu/node.json"))
    push(node, 900, "/usr/bin/pvesh", PVESH, "0755")
    push(
        node,
        900,
        "/lib/systemd/system/pve-guests.service",
        (SIM / "doubles" / "pve-guests.service").read_text(),
    )
    assert node.ct_run(900, ["systemctl", "enable", "pve-guests.service"]).returncode == 0

    # Control: without pvegpu's units the nodes are missing when the guests would start.
    assert boot_record(node, 900) == [f"missing {n}" for n in NODES]

    # The units pvegpu renders for the node, enabled as the deploy enables them.
    push(node, 900, "/etc/systemd/system/nvidia-uvm-init.service", render_uvm_unit(range(GPUS)))
    push(node, 900, "/etc/systemd/system/nvidia-persistenced.service", render_persistenced_unit())
    node.ct_run(900, ["mkdir", "-p", "/etc/modules-load.d"], check=True)
    push(node, 900, "/etc/modules-load.d/nvidia.conf", render_modules())
    enable = node.ct_run(
        900, ["systemctl", "enable", "nvidia-uvm-init.service", "nvidia-persistenced.service"]
    )
    assert enable.returncode == 0, enable.stderr

    assert boot_record(node, 900) == [f"present {n}" for n in NODES]
    # systemd ran them in that order: the device nodes' unit was done before pve-guests began
    done = node.ct_run(
        900,
        [
            "systemctl",
            "show",
            "-p",
            "ActiveEnterTimestampMonotonic",
            "--value",
            "nvidia-uvm-init.service",
        ],
    ).stdout
    began = node.ct_run(
        900,
        [
            "systemctl",
            "show",
            "-p",
            "InactiveExitTimestampMonotonic",
            "--value",
            "pve-guests.service",
        ],
    ).stdout
    assert 0 < int(done) <= int(began), (done, began)
    assert node.run(["pct", "stop", "900"]).returncode == 0
