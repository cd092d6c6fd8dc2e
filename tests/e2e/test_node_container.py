"""Stages 1 and 2 in depth: node boot persistence, container lifecycle, GPU passthrough in both
modes, driver parity, data that survives, and preflight failures that change nothing."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.__main__ import site_env

ROOT = Path(__file__).resolve().parents[2]

TORCH_SEES = "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())"
UNIT_FILES = (
    "/etc/modules-load.d/nvidia.conf",
    "/etc/systemd/system/nvidia-uvm-init.service",
    "/etc/systemd/system/nvidia-persistenced.service",
)


def deploy_counted(site, *data: str):
    """A deploy with pyinfra's --debug log: returns the run and the commands it ran on the node
    itself (container commands travel as `pct exec <vmid> -- env -i ...` and are left out)."""
    argv = [
        sys.executable,
        "-m",
        "pyinfra",
        "inventory.py",
        "deploy.py",
        "-y",
        "--json",
        "--debug",
        *site.base_data,
    ]
    for kv in data:
        argv += ["--data", kv]
    p = subprocess.run(
        argv,
        cwd=ROOT,
        env=site_env(site.node),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    commands = re.findall(r"Running command on [^:]+: \(pty=\w+\) (.*)", p.stderr)
    node = [
        c
        for c in commands
        if not re.search(r"^\S*sh -c '?pct exec \d+ -- env -i|^pct exec \d+ -- env -i", c)
    ]
    return p.returncode, json.loads(p.stdout), node, p.stdout + p.stderr


def describe(command: str) -> str:
    """A short, readable form of a logged command (probes: their name and arguments)."""
    m = re.search(r"b64decode\(\W*([A-Za-z0-9+/=]{40,})", command)
    if m:
        source = base64.b64decode(m.group(1)).decode()
        return "probe " + source.splitlines()[0][:160] + " " + source.splitlines()[1][:40]
    return command[:160]


def torch_sees(site) -> str:
    return site.ct("/root/venv/bin/python", "-c", TORCH_SEES).stdout.strip()


def ct_major(site, path) -> int:
    return int(site.ct("stat", "-c", "%t", path).stdout.strip(), 16)


def assert_failed_without_change(site, run, before, *lines):
    assert run.rc != 0
    for line in lines:
        assert line in run.output, run.output[-3000:]
    assert "Traceback" not in run.output
    assert site.node.tree_digest() == before


# PVE 8.1 with its pve-container 5.0.8: devN entries exist there (pve-container 5.0.7), so auto
# mode uses them; the other PVE 8 tests run 8.4.1.
@pytest.mark.parametrize("node_options", [{"pve_version": "8.1.4", "uvm_nodes_at_boot": False}])
def test_devn_mode_from_nothing_to_verified_then_idempotent_guarded_and_preflighted(site):
    node = site.node
    assert "pve-container: 5.0.8" in node.run(["pveversion", "-v"]).stdout.splitlines()
    assert node.run(["test", "-e", "/dev/nvidia-uvm"]).returncode == 1  # as after a cold boot

    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]

    # Container: created with explicit flags, the data mount and protection, running, GPUs in.
    conf = node.read("/etc/pve/lxc/200.conf")
    # `--unprivileged 0` writes no line: pve-container writes `unprivileged: 1` only when true
    assert not any(line.startswith("unprivileged:") for line in conf.splitlines()), conf
    for line in (
        "features: nesting=1",
        "protection: 1",
        "onboot: 1",
        "mp0: /tank/dflash,mp=/data,backup=0",
        "hostname: dflash-train",
        "cores: 32",
    ):
        assert line in conf.splitlines(), conf
    devs = sorted(
        v
        for k, v in (ln.split(": ", 1) for ln in conf.splitlines() if ": " in ln)
        if re.fullmatch(r"dev\d+", k)
    )
    assert devs == sorted(
        [f"/dev/nvidia{i}" for i in range(8)]
        + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    )
    assert "lxc." not in conf and "[pve:pending]" not in conf
    create = next(c["argv"] for c in node.pct_calls() if c["argv"][:2] == ["create", "200"])
    assert create[create.index("--unprivileged") + 1] == "0"
    assert node.run(["pct", "status", "200"]).stdout.strip() == "status: running"
    assert torch_sees(site) == "True 8"
    # Driver parity: the container's userspace is exactly the kernel module's version.
    module = re.search(
        r"Kernel Module\s+(\S+)", site.ct("cat", "/proc/driver/nvidia/version").stdout
    )[1]
    assert (
        site.ct("readlink", "/usr/lib/x86_64-linux-gnu/libcuda.so.1").stdout.strip()
        == f"libcuda.so.{module}"
    )
    assert (
        site.ct("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout.split()[
            0
        ]
        == module
    )

    # Node: uvm nodes created, boot persistence written, enabled (real WantedBy links), valid.
    assert node.run(["test", "-c", "/dev/nvidia-uvm"]).returncode == 0
    assert node.read("/etc/modules-load.d/nvidia.conf").split("\n")[2:4] == ["nvidia", "nvidia_uvm"]
    uvm_unit = node.read("/etc/systemd/system/nvidia-uvm-init.service")
    assert (
        "Before=pve-guests.service" in uvm_unit
        and "ExecStart=/usr/bin/nvidia-modprobe -u -c 0" in uvm_unit
    )
    for unit in ("nvidia-uvm-init.service", "nvidia-persistenced.service"):
        assert (
            node.run(
                ["test", "-L", f"/etc/systemd/system/multi-user.target.wants/{unit}"]
            ).returncode
            == 0
        )
        assert node.run(["systemctl", "is-active", unit]).stdout.strip() == "active"
    verify = node.run(["systemd-analyze", "verify", *UNIT_FILES[1:]])
    assert [ln for ln in verify.stderr.splitlines() if "nvidia" in ln] == [], verify.stderr

    # Data survives: written in the container, it lives on the node's bind-mounted directory.
    site.ct("sh", "-c", "mkdir -p /data/checkpoints && echo step-1 > /data/checkpoints/last")
    assert node.read("/tank/dflash/checkpoints/last") == "step-1\n"
    # Protection: a stray destroy refuses.
    destroy = node.run(["pct", "destroy", "200", "--force"])
    assert destroy.returncode != 0 and "protection mode enabled" in destroy.stderr

    # Converged: zero changes, within the node-command budget (DESIGN: <= 8).
    node.clear_pct_log()
    rc, doc, node_commands, output = deploy_counted(site)
    assert rc == 0, output[-4000:]
    assert doc["results"]["totals"]["success"] == 0, doc
    assert len(node_commands) <= 8, "\n".join(describe(c) for c in node_commands)
    probe_pct = [c["argv"][0] for c in node.pct_calls() if c["argv"][1:2] == ["200"]]
    print(f"no-op re-run: {len(node_commands)} node commands, pct calls {probe_pct}")

    # Preflight: an unfit node stops the run with one line per problem, and nothing changes
    # (a forced devN mode on a pve-container older than 5.0.7 among them).
    node.configure(gpus=7, driver_version="570.86.10", pve_container="5.0.6")
    before = node.tree_digest()
    run = site.deploy("passthrough_mode=dev")
    assert_failed_without_change(
        site,
        run,
        before,
        "node GPU count: expected 8 (expected_gpu_count); found 7 listed by nvidia-smi",
        "driver for cu130: expected >= 580.65.06 (CUDA 13.0); found 570.86.10 on node",
        "passthrough_mode=dev needs pve-container >= 5.0.7 (devN entries), the node has "
        "pve-container 5.0.6: upgrade pve-container or set passthrough_mode=lxc",
    )
    node.configure(gpus=8, driver_version="580.95.05", pve_container="5.0.8")

    # The uvm module comes back with another major while training runs: the container's nodes
    # are stale and it must restart, which the preflight refuses without restart_training.
    node.configure(uvm_major=509)
    assert torch_sees(site).startswith("False"), "stale uvm node must break CUDA"
    before = node.tree_digest()
    run = site.deploy()
    assert_failed_without_change(
        site,
        run,
        before,
        "CT 200 must restart to get its GPUs right (/dev/nvidia-uvm is 508:0 in the container, "
        "509:0 on the node",
        "dflash-train.service is running in it",
    )
    third = site.deploy("restart_training=true")
    assert third.rc == 0, third.output[-4000:]
    assert ct_major(site, "/dev/nvidia-uvm") == 509
    assert torch_sees(site) == "True 8"
    assert node.read("/tank/dflash/checkpoints/last") == "step-1\n"

    # Lifting protection by hand and destroying the container leaves the data on the node.
    for argv in (["set", "200", "--protection", "0"], ["destroy", "200", "--force", "--purge"]):
        assert node.run(["pct", *argv]).returncode == 0
    assert node.run(["test", "-e", "/etc/pve/lxc/200.conf"]).returncode == 1
    assert node.read("/tank/dflash/checkpoints/last") == "step-1\n"


# PVE 8.0.4 with its pve-container 5.0.4: no devN entries yet (they came with 5.0.7).
@pytest.mark.parametrize("node_options", [{"pve_version": "8.0.4"}])
def test_raw_lxc_mode_on_pve_8_0_and_a_changed_uvm_major_is_repaired(site):
    node = site.node
    assert "pve-container: 5.0.4" in node.run(["pveversion", "-v"]).stdout.splitlines()
    first = site.deploy()
    assert first.rc == 0, first.output[-4000:]
    conf = node.read("/etc/pve/lxc/200.conf")
    assert not re.search(r"^dev\d+:", conf, re.M)
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" in conf
    assert "lxc.cgroup2.devices.allow: c 508:* rwm" in conf
    assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in conf
    assert torch_sees(site) == "True 8"

    # Training stopped; a driver upgrade and reboot later, the uvm module has major 509 and the
    # kernel module is 580.105.08: the config is rewritten (no stale major left), the container
    # restarted, its userspace mismatch reported and repaired; CUDA works again.
    site.ct("systemctl", "stop", "dflash-train.service")
    node.configure(uvm_major=509, driver_version="580.105.08")
    assert torch_sees(site).startswith("False")
    second = site.deploy()
    assert second.rc == 0, second.output[-4000:]
    conf2 = node.read("/etc/pve/lxc/200.conf")
    assert "c 509:* rwm" in conf2 and "508" not in conf2
    rest = [ln for ln in conf.splitlines() if not ln.startswith("lxc.")]
    assert [ln for ln in conf2.splitlines() if not ln.startswith("lxc.")] == rest  # all else kept
    assert ct_major(site, "/dev/nvidia-uvm") == 509
    assert (
        "CT 200: kernel module 580.105.08, userspace libcuda 580.95.05, libnvidia-ml 580.95.05: "
        "reinstalling" in second.output
    )
    assert (
        site.ct("readlink", "/usr/lib/x86_64-linux-gnu/libcuda.so.1").stdout.strip()
        == "libcuda.so.580.105.08"
    )
    assert torch_sees(site) == "True 8"
    third = site.deploy()
    assert third.rc == 0 and third.changed == 0, third.output[-4000:]
