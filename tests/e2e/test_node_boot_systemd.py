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


def node_container(node, vmid=900):
    """A running container playing the node at boot: the nvidia-modprobe and
    nvidia-persistenced doubles, the simulated driver's node.json, pve-guests.service unchanged
    with its recording stand-in, enabled."""
    tpl = node.cfg["template_name"]
    create = ["pct", "create", str(vmid), f"local:vztmpl/{tpl}", "--hostname", "pve1"]
    assert node.run([*create, "--rootfs", "local-lvm:4"]).returncode == 0
    assert node.run(["pct", "start", str(vmid)]).returncode == 0
    # the node's tools and state the doubles read (the simulated driver's node.json)
    for double in ("nvidia-modprobe", "nvidia-persistenced"):
        push(node, vmid, f"/usr/bin/{double}", (SIM / "doubles" / double).read_text(), "0755")
    node.ct_run(
        vmid, ["mkdir", "-p", "/var/lib/pve-sim/gpu", "/usr/share/pve-manager/helpers"], check=True
    )
    push(node, vmid, "/var/lib/pve-sim/gpu/node.json", node.read("/var/lib/pve-sim/gpu/node.json"))
    push(node, vmid, "/usr/bin/pvesh", PVESH, "0755")
    push(
        node,
        vmid,
        "/lib/systemd/system/pve-guests.service",
        (SIM / "doubles" / "pve-guests.service").read_text(),
    )
    assert node.ct_run(vmid, ["systemctl", "enable", "pve-guests.service"]).returncode == 0


def test_device_nodes_exist_before_pve_guests_starts_in_a_real_boot(node):
    node_container(node)

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


#: the fabric wait of the test's unit (the deployed one waits FABRIC_WAIT_S, 300 s): any answer
#: that makes it wait to the end fails the unit, as it would on every boot of a real node
WAIT_S = 20
UNIT = "nvidia-uvm-init.service"


def fabric_boot(node, vmid, **fabric):
    """Reboot with the simulated driver's fabric answers set to ``fabric`` (SimNode.configure:
    the container's nvidia-smi reads them live): the unit's result and its fabric lines."""
    node.configure(**fabric)
    assert boot_record(node, vmid) == [f"present {n}" for n in NODES]  # the guests started
    result = node.ct_run(vmid, ["systemctl", "show", "-p", "Result", "--value", UNIT]).stdout
    journal = node.ct_run(vmid, ["journalctl", "-b", "-u", UNIT, "-o", "cat", "--no-pager"])
    return result.strip(), [ln for ln in journal.stdout.splitlines() if "NVSwitch" in ln]


def test_the_fabric_wait_reads_what_real_nodes_answer_in_a_real_boot(node):
    """On an NVSwitch board the boot unit waits for the GPUs' fabric registration. Real nodes
    also answer Not Supported (single-GPU boards, some GB200), [N/A], an unknown field (a driver
    older than fabric.state: exit 2) and Completed with an error status: none of them is waited
    for to the end; a failed registration fails the unit at once with one journal line."""
    node_container(node)
    # the node's nvidia-smi double (the real field lists embedded) and the NVML library it
    # checks against the kernel module's version
    push(node, 900, "/usr/bin/nvidia-smi", node.read("/usr/bin/nvidia-smi"), "0755")
    lib, ver = "/usr/lib/x86_64-linux-gnu", node.cfg["driver_version"]
    link = f"mkdir -p {lib} && : > {lib}/libnvidia-ml.so.{ver} && "
    link += f"ln -sf libnvidia-ml.so.{ver} {lib}/libnvidia-ml.so.1"
    node.ct_run(900, ["sh", "-c", link], check=True)
    unit = render_uvm_unit(range(GPUS), fabric=True, fabric_wait_s=WAIT_S)
    push(node, 900, f"/etc/systemd/system/{UNIT}", unit)
    assert node.ct_run(900, ["systemctl", "enable", UNIT]).returncode == 0
    registered = {"fabric_state": "Completed", "fabric_status": "Success", "fabric_fields": True}
    try:
        assert fabric_boot(node, 900, **registered) == ("success", [])
        for state, status in (("Not Supported", "Success"), ("[N/A]", "[N/A]")):
            assert fabric_boot(node, 900, fabric_state=state, fabric_status=status) == (
                "success",
                [],
            ), state
        old_driver = fabric_boot(node, 900, fabric_state=None, fabric_fields=False)
        assert old_driver == (
            "success",
            ["nvidia-smi has no fabric.state on this driver: not waiting for the NVSwitch fabric"],
        )
        failed = {"fabric_state": "Completed", "fabric_status": "Insufficient Resources"}
        assert fabric_boot(node, 900, fabric_fields=True, **failed) == (
            "exit-code",
            [
                "NVIDIA GPUs failed to register with the NVSwitch fabric (fabric.state, "
                "fabric.status: Completed, Insufficient Resources): CUDA cannot use them; see "
                "journalctl -u nvidia-fabricmanager"
            ],
        )
    finally:
        node.configure(fabric_state=None, fabric_status=None, fabric_fields=True)
    assert node.run(["pct", "stop", "900"]).returncode == 0
