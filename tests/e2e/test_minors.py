"""The lifecycle on a node whose device minors are NOT in nvidia-smi's index order.

A real kernel module numbers /dev/nvidiaN in its own probe order (a public report shows nvidia-smi
index 3 with ``Device Minor: 0``). Here ``minor_order="reverse"``, on both Proxmox VE profiles:
nvidia-smi's GPU 0 (PCI order, bus 18) is /dev/nvidia7, GPU 7 (bus DB) is /dev/nvidia0.
Passthrough and the boot unit work with minors; CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID), roles,
verification and the leftover cleanup work with PCI order. As long as every GPU is listed the
minors are a permutation of the indexes, so the set of nodes passed through is the same either
way; the last test leaves a gap (an excluded GPU), where taking one for the other fails.
"""

import json
import re

import pytest

UNIT = "dflash-train.service"
UNIT_CGROUP = f"0::/lxc/200/ns/system.slice/{UNIT}"
TRAINING = [
    "/root/venv/bin/python",
    "/data/dflash/train.py",
    "--target-gpus",
    "0,1,2,3,4",
    "--drafter-gpus",
    "5,6,7",
    "--token-budget",
    "49152",
    "--max-batch-size",
    "48",
    "--dataset-dir",
    "/data/datasets",
    "--checkpoint-dir",
    "/data/checkpoints",
    "--resume",
]


@pytest.fixture(params=["pve8", "pve9"])
def node_options(request):
    """Both Proxmox VE profiles: PVE 9 passes the GPUs through under devN hot-plug rules."""
    return {"minor_order": "reverse", "profile": request.param}


def smi_gpus(site):
    """The node's GPUs as nvidia-smi lists them: (index, UUID without `GPU-`, parsed PCI bus id)."""
    out = site.node.run(
        ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"]
    ).stdout
    rows = (line.split(", ") for line in out.splitlines())
    return [
        (int(i), u.removeprefix("GPU-"), tuple(int(x, 16) for x in re.split("[:.]", bus)))
        for i, u, bus in rows
    ]


def alive(site, pid):
    return site.node.run(["test", "-d", f"/proc/{pid}"]).returncode == 0


def test_lifecycle_with_minors_in_reverse_pci_order(site, tmp_path):
    node = site.node
    # The node really numbers them in reverse: nvidia-smi's GPU 0 is /dev/nvidia7.
    info = node.read("/proc/driver/nvidia/gpus/0000:18:00.0/information")
    assert "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 7\n" in info
    assert (
        "Minor Number                                       : 7"
        in node.run(["nvidia-smi", "-q", "-i", "0"]).stdout
    )

    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]

    # Passthrough: every GPU's /dev/nvidiaN, and the container sees each as the node does.
    conf = node.read("/etc/pve/lxc/200.conf")
    assert all(f"/dev/nvidia{m}\n" in conf or f"/dev/nvidia{m}," in conf for m in range(8)), conf
    for m in range(8):
        st = site.ct("stat", "-c", "%t:%T", f"/dev/nvidia{m}").stdout.strip()
        assert st == f"c3:{m:x}", (m, st)
    # The boot unit creates every GPU node by minor.
    boot = node.read("/etc/systemd/system/nvidia-uvm-init.service")
    assert "-c 0 -c 1 -c 2 -c 3 -c 4 -c 5 -c 6 -c 7 -c 255" in boot, boot

    # Verification: CUDA device i (CUDA_DEVICE_ORDER=PCI_BUS_ID) is the node's i-th GPU in PCI
    # bus order, joined by UUID (nothing promises nvidia-smi's index follows PCI order); each row
    # names the node GPU of the same UUID; roles follow the CUDA numbering.
    report = tmp_path / "verify.json"
    ok = site.pyinfra("verify.py", f"verify_report={report}")
    assert ok.rc == 0, ok.output[-4000:]
    host = json.loads(report.read_text())["hosts"]["@pct/127.0.0.1/200"]
    by_pci = sorted(smi_gpus(site), key=lambda g: g[2])
    assert [g["uuid"].removeprefix("GPU-") for g in host["gpus"]] == [u for _, u, _ in by_pci]
    assert [g["node_gpu"] for g in host["gpus"]] == [i for i, _, _ in by_pci]
    assert [g["role"] for g in host["gpus"]] == ["target"] * 5 + ["drafter"] * 3

    # A second deploy changes nothing.
    second = site.deploy()
    assert second.rc == 0 and second.changed == 0, second.output[-4000:]

    # A stale process on nvidia-smi's GPU 3 (/dev/nvidia4) is named as GPU 3, a target.
    stale = node.spawn_gpu_process(3, ["/usr/bin/python3", "/root/notebook.py"], used_mib=1000)
    check = site.pyinfra("verify.py")
    assert check.rc != 0
    assert (
        f"GPU 3 (target) free: expected no compute process but the training unit's; found pid "
        f"{stale} " in check.output
    ), check.output[-4000:]
    node.kill_gpu_process(stale)

    # While the unit is stopped: a leftover of pvegpu's unit (in its cgroup) on GPU 0 is cleared;
    # the training command run by the node on GPU 7 (/dev/nvidia0, a drafter) is not pvegpu's:
    # it is never touched, and verification fails naming it and how to end it.
    site.ct("systemctl", "stop", UNIT)
    foreign = node.spawn_gpu_process(7, TRAINING, used_mib=1000)
    own = node.spawn_gpu_process(0, TRAINING, used_mib=1000, cgroup=UNIT_CGROUP)
    cleared = site.deploy()
    assert cleared.rc != 0, cleared.output[-4000:]
    assert f"leftover training process {own} on GPU 0: cleared before the unit starts" in (
        cleared.output
    )
    assert (
        f"GPU 7 (drafter) free: expected no compute process but the training unit's; found pid "
        f"{foreign} " in cleared.output
    ), cleared.output[-4000:]
    # a failed verification lets nothing go live: the unit's stage (and its clearing) waits
    assert alive(site, foreign) and alive(site, own)
    node.kill_gpu_process(foreign)
    started = site.deploy()
    assert started.rc == 0, started.output[-4000:]
    assert f"ended leftover training process {own} on GPU 0" in started.output
    assert not alive(site, own)
    assert site.ct("systemctl", "is-active", UNIT).stdout == "active\n"


@pytest.mark.parametrize("node_options", [{"excluded_gpus": 1}])
def test_an_excluded_gpu_leaves_a_gap_in_the_minors_that_passthrough_follows(site, tmp_path):
    """With every GPU listed, minors are a permutation of nvidia-smi's indexes, so taking one for
    the other passes the same set of nodes through. A GPU excluded by NVreg_ExcludedGpus keeps
    its minor and /proc entry (nv_pci_probe numbers it before nv_check_and_exclude_gpu) while
    NVML does not list it: here it is first in PCI order with /dev/nvidia0, nvidia-smi's GPUs
    0-7 are /dev/nvidia1-8, and code that takes the index for the minor passes the excluded GPU
    through and misses /dev/nvidia8 (verify then finds 7 GPUs and one it does not know)."""
    node = site.node
    info = node.read("/proc/driver/nvidia/gpus/0000:07:00.0/information")
    assert "Device Minor: \t 0\n" in info and "GPU Excluded:\t Yes\n" in info
    assert "Device Minor: \t 1\n" in node.read("/proc/driver/nvidia/gpus/0000:18:00.0/information")
    assert sorted(i for i, _, _ in smi_gpus(site)) == list(range(8))

    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    for m in range(1, 9):
        assert site.ct("stat", "-c", "%t:%T", f"/dev/nvidia{m}").stdout.strip() == f"c3:{m:x}"
    assert site.ct("test", "-e", "/dev/nvidia0").returncode == 1
    boot = node.read("/etc/systemd/system/nvidia-uvm-init.service")
    assert "-c 1 -c 2 -c 3 -c 4 -c 5 -c 6 -c 7 -c 8 -c 255" in boot, boot

    report = tmp_path / "verify.json"
    ok = site.pyinfra("verify.py", f"verify_report={report}")
    assert ok.rc == 0, ok.output[-4000:]
    host = json.loads(report.read_text())["hosts"]["@pct/127.0.0.1/200"]
    by_pci = sorted(smi_gpus(site), key=lambda g: g[2])
    assert [g["uuid"].removeprefix("GPU-") for g in host["gpus"]] == [u for _, u, _ in by_pci]
    assert site.deploy().changed == 0
