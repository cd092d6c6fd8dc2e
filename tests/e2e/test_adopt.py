"""First contact with a node that already trains (issue 20): CT 200 made by hand the way the
community guides write it (raw lxc GPU lines with the node's majors, nvidia-modeset too, 16 cores,
128 GiB, the data dir bind-mounted at /data), the NVIDIA userspace from the node's .run, /root/venv
a venv made by hand (torch 2.11.0+cu130 plus a leftover of another tool), and a training running
from it: (a) started by hand (setsid nohup), (b) under the users' own train.service.

The plain deploy adopts the node without disturbing the run: the trainer's pid, the container's
init, /root/venv, cores/memory and the data dir stay; no second trainer; the pending summary.
The trainer is a stand-in that registers its GPUs on the node by its node pid and, on SIGTERM,
takes ``checkpoint_s`` (a file in its checkpoint dir) to write its checkpoint.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from sim.fixtures import skip_without_real_systemd
from sim.trainer import TRAINER

CKPT_NODE = "/tank/dflash/checkpoints"  # /data/checkpoints in CT 200
TRAIN_NODE = "/tank/dflash/dflash/train.py"
TRAIN_ARGV = [
    "/root/venv/bin/python",
    "/data/dflash/train.py",
    "--checkpoint-dir",
    "/data/checkpoints",
]


USERS_UNIT = """\
[Unit]
Description=dflash training (made by hand)

[Service]
ExecStart=/root/venv/bin/python /data/dflash/train.py --checkpoint-dir /data/checkpoints
TimeoutStopSec=900

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(params=["pve8", "pve9"])
def node_options(request):
    skip_without_real_systemd()
    return {"ct_init": "systemd", "profile": request.param}


def wait_for(what, fetch, done=bool, timeout=180):
    """Poll fetch() until done(value) (a bound on waiting, never an assertion on time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(0.2)


def ckpt_files(site, prefix):
    out = site.node.run(["sh", "-c", f"cd {CKPT_NODE} && ls {prefix}-* 2>/dev/null"]).stdout
    return sorted(out.split())


def handmade_ct(site):
    """CT 200 as the users made it, running, with their venv and userspace (no training yet)."""
    node = site.node
    template = node.run(["sh", "-c", "ls /var/lib/vz/template/cache"], check=True).stdout.split()[0]
    node.run(
        [
            "pct",
            "create",
            "200",
            f"local:vztmpl/{template}",
            "--hostname",
            "dflash",
            "--cores",
            "16",
            "--memory",
            "131072",
            "--rootfs",
            "local-lvm:64",
            "--net0",
            "name=eth0,bridge=vmbr0,ip=dhcp",
            "--unprivileged",
            "0",
            "--features",
            "nesting=1",
            "--mp0",
            "/tank/dflash,mp=/data",
            "--ostype",
            "debian",
        ],
        check=True,
    )
    majors = {}
    for line in node.read("/proc/devices").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    devices = [f"/dev/nvidia{i}" for i in range(node.cfg["gpus"])] + [
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    lines = [
        f"lxc.cgroup2.devices.allow: c {majors['nvidia']}:* rwm",
        f"lxc.cgroup2.devices.allow: c {majors['nvidia-uvm']}:* rwm",
    ]
    lines += [f"lxc.mount.entry: {d} {d[1:]} none bind,optional,create=file" for d in devices]
    node.run(
        ["sh", "-c", "cat >> /etc/pve/lxc/200.conf"], input="\n".join(lines) + "\n", check=True
    )
    node.run(["pct", "start", "200"], check=True)
    wait_for("CT 200's exec", lambda: site.ct("true").returncode == 0)
    driver = node.cfg["driver_version"]
    run = f"/root/NVIDIA-Linux-x86_64-{driver}.run"
    node.run(["pct", "push", "200", run, "/root/nvidia.run"], check=True)
    installed = site.ct("sh", "/root/nvidia.run", "--silent", "--no-kernel-modules")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    venv = node.ct_run(
        200,
        [
            "sh",
            "-c",
            "python3 -m venv /root/venv && /root/venv/bin/pip install -q --no-cache-dir "
            f"--index-url {site.index.torch_index_base}/cu130 "
            f"--extra-index-url {site.index.package_index_url} torch==2.11.0+cu130 && "
            "mkdir -p /root/venv/lib/old_tool && echo leftover > /root/venv/lib/old_tool/x",
        ],
        timeout=600,
    )
    assert venv.returncode == 0, venv.stdout + venv.stderr
    node.run(["sh", "-c", f"cat > {TRAIN_NODE}"], input=TRAINER, check=True)
    if node.cfg["pve_version"].startswith("9."):
        site.base_data += ["--data", "python_version=3.13"]


def start_by_hand(site) -> int:
    known = set(ckpt_files(site, "started"))
    site.ct(
        "sh",
        "-c",
        "cd /root && setsid nohup " + " ".join(TRAIN_ARGV) + " >/dev/null 2>&1 </dev/null &",
    )
    new = wait_for("the hand-started trainer", lambda: set(ckpt_files(site, "started")) - known)
    return int(new.pop().split("-")[1])


def start_users_unit(site) -> int:
    site.node.ct_run(
        200, ["sh", "-c", "cat > /etc/systemd/system/train.service"], input=USERS_UNIT, check=True
    )
    assert site.ct("systemctl", "daemon-reload").returncode == 0
    assert site.ct("systemctl", "enable", "--now", "train.service").returncode == 0
    new = wait_for("train.service's trainer", lambda: ckpt_files(site, "started"))
    return int(new[0].split("-")[1])


def trainers(site) -> list[int]:
    """Container pids running the training script, less their DataLoader-like helpers (forked
    with the trainer's very argv: the ones whose parent runs it too)."""
    out = site.ct(
        "sh",
        "-c",
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null "
        "| grep -q '^[^ ]*python[^ ]* /data/dflash/train.py' && "
        "echo ${p#/proc/} $(sed 's/.*) //' $p/stat | cut -d' ' -f2); done",
    ).stdout
    pairs = [line.split() for line in out.splitlines() if len(line.split()) == 2]
    pids = {int(p) for p, _ in pairs}
    return sorted(int(p) for p, ppid in pairs if int(ppid) not in pids)


def data_digest(site) -> str:
    return site.node.run(
        ["sh", "-c", "cd /tank/dflash && find . -type f | sort | xargs sha256sum"], check=True
    ).stdout


def snapshot(site, pid):
    conf = site.node.read("/etc/pve/lxc/200.conf")
    keys = dict(line.split(": ", 1) for line in conf.split("\n[")[0].splitlines() if ": " in line)
    return {
        "alive": site.ct("test", "-d", f"/proc/{pid}").returncode == 0,
        "init": site.node.node_pid(200, 1),
        "venv": site.ct("readlink", "-f", "/root/venv").stdout.strip(),
        "venv_is_dir": site.ct("test", "-d", "/root/venv", "-a", "!", "-L", "/root/venv").returncode
        == 0,
        "cores": keys.get("cores"),
        "memory": keys.get("memory"),
        "data": data_digest(site),
        "trainers": trainers(site),
    }


@pytest.mark.parametrize("how", ["by hand", "users' unit"])
def test_a_plain_deploy_adopts_a_node_that_trains_without_disturbing_the_run(site, how):
    handmade_ct(site)
    pid = start_by_hand(site) if how == "by hand" else start_users_unit(site)
    node_pid = site.node.node_pid(200, pid)
    for gpu in (0, 1):
        site.node.register_gpu_process(node_pid, gpu, used_mib=2000)
    before = snapshot(site, pid)
    assert before["alive"] and before["trainers"] == [pid] and before["venv_is_dir"]

    # the preview (no -y) shows the adoption plan first and changes nothing
    preview = site.deploy("adopt=true", yes=False)
    assert f"CT 200 already trains (pid {node_pid}" in preview.output, preview.output[-6000:]
    for line in (
        "CT 200 cores: 16 -> 32: waits for --data restart_training=true",
        "CT 200 memory: 131072 -> 262144: waits for",
        "GPU passthrough: the container's own lines pass every device: kept",
        "/root/venv -> /root/venvs/torch-2.11.0-cu130",
        "dflash-train.service: installed now; enabled and started: waits for --data restart",
    ):
        assert line in preview.output, preview.output[-6000:]

    # a container pvegpu did not create: a plain deploy shows the plan and changes nothing
    refused = site.deploy()
    assert refused.rc != 0, refused.output[-6000:]
    assert (
        "CT 200 was not created by pvegpu (no 'pvegpu' tag): nothing is changed in it without "
        "consent" in refused.output
    ), refused.output[-6000:]
    assert snapshot(site, pid) == before
    run = site.deploy("adopt=true")
    assert run.rc == 0, run.output[-6000:]
    after = snapshot(site, pid)
    assert after == before, run.output[-6000:]
    assert "tags: pvegpu" in site.node.read("/etc/pve/lxc/200.conf")
    started_by = "started by hand" if how == "by hand" else "under train.service"
    # (the trainer and its 2 DataLoader-like helpers)
    summary = re.search(
        rf"pvegpu: {re.escape(site.node.host)}: converged; (\d+) changes wait "
        rf"for the running training \(pid {node_pid}, {started_by}, 3 processes\): rerun "
        "with --data restart_training=true to apply them",
        run.output,
    )
    assert summary, run.output[-6000:]
    waits = re.findall(r"CT 200: .* waits for the running training", run.output)
    assert int(summary.group(1)) == len(set(waits)) > 0, waits
    assert (
        f"the start of dflash-train.service waits for the running training (pid {node_pid}"
        in run.output
    )
    assert "switch of /root/venv" in run.output
    assert site.ct("systemctl", "is-active", "dflash-train.service").stdout.strip() != "active"
    assert site.ct("systemctl", "is-enabled", "dflash-train.service").stdout.strip() != "enabled"
    # a second plain deploy: no change (what waits is no change), the same summary
    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]
    assert summary.group(0) in again.output
    # verify.py names the same training, not a leftover, and changes nothing
    check = site.pyinfra("verify.py")
    assert f"is held by the running training (pid {node_pid}, {started_by})" in check.output, (
        check.output[-6000:]
    )
    assert "leftover" not in check.output
    assert snapshot(site, pid) == before


def stop_story(site) -> str:
    """What the node recorded of a takeover's stop, for a failure message (issue 41: this test
    failed once in CI, the stop cut about 20 s into the checkpoint, cause not found): every
    signal the stop sent (its log), each pct call about train.service or that failed or took a
    second or more (when, how long, its exit status), the checkpoint dir, and train.service's
    journal in CT 200."""
    node = site.node
    calls = []
    for line in node.run(["cat", "/var/log/pve-sim/pct.log"]).stdout.splitlines():
        c = json.loads(line)
        argv = " ".join(c["argv"])
        if c["exit"] or c["duration"] >= 1 or " train.service" in argv:
            calls.append(f"{c['time']:.1f} +{c['duration']:.1f} s, exit {c['exit']}: {argv[:160]}")
    parts = {
        "signals sent (the node's signal log)": node.run(
            ["cat", "/var/log/pvegpu/training-leftovers.log"]
        ).stdout,
        "pct calls about train.service, failed or >= 1 s": "\n".join(calls),
        "checkpoint dir": node.run(["ls", "-l", "--time-style=+%s.%N", CKPT_NODE]).stdout,
        "train.service's journal": site.ct(
            "journalctl", "--no-pager", "-o", "short-unix", "-u", "train.service"
        ).stdout,
    }
    return "".join(f"\n--- {k}:\n{v.strip()}" for k, v in parts.items())


@pytest.mark.parametrize("how", ["by hand", "users' unit"])
def test_the_takeover_with_consent_lets_the_trainer_checkpoint_and_ends_with_one_trainer(site, how):
    """restart_training=true: the trainer gets SIGTERM and finishes a checkpoint that takes
    longer than 30 s (the old leftover clearing's SIGKILL), the users' unit is disabled, the
    hand-made venv is kept aside, and pvegpu's unit runs the only trainer, from a clean venv."""
    handmade_ct(site)
    pid = start_by_hand(site) if how == "by hand" else start_users_unit(site)
    node_pid = site.node.node_pid(200, pid)
    site.node.register_gpu_process(node_pid, 0, used_mib=2000)
    site.node.run(["sh", "-c", f"echo 40 > {CKPT_NODE}/checkpoint_s"], check=True)

    run = site.deploy("restart_training=true", "progress_interval_s=5", "adopt=true")
    assert run.rc == 0, run.output[-6000:] + stop_story(site)
    saved = ckpt_files(site, "checkpoint")
    assert saved == [f"checkpoint-{pid}"], run.output[-6000:] + stop_story(site)
    # the 40 s checkpoint is not silent: progress lines while the stop waits for it
    # the trainer and its 2 DataLoader-like helpers
    named = (
        f"pid {node_pid}, under train.service, 3 processes"
        if how == "users' unit"
        else (f"pid {node_pid}, started by hand, 3 processes")
    )
    assert f"waiting for {named} in CT 200 to checkpoint and exit: " in run.output, run.output[
        -6000:
    ]
    assert f"CT 200: stopping the running training ({named}: " in run.output
    if how == "users' unit":
        assert "then train.service stopped and disabled by its manager" in run.output
        assert site.ct("systemctl", "is-enabled", "train.service").stdout.strip() == "disabled"
        assert site.ct("systemctl", "is-active", "train.service").stdout.strip() != "active"
    else:
        assert (
            "SIGCONT and SIGTERM to its workers (not their helpers), up to 900 s to checkpoint"
            in run.output
        )
    assert "/root/venv is a venv made by hand (" in run.output
    aside = site.ct("sh", "-c", "ls -d /root/venv.pre-pvegpu.*").stdout.split()
    assert len(aside) == 1
    assert site.ct("test", "-f", f"{aside[0]}/lib/old_tool/x").returncode == 0
    assert site.ct("readlink", "/root/venv").stdout.strip().startswith("/root/venvs/")
    unit_pid = int(
        site.ct("systemctl", "show", "-p", "MainPID", "--value", "dflash-train.service").stdout
    )
    assert unit_pid > 0
    assert trainers(site) == [unit_pid]
    cgroup = site.node.read(f"/proc/{site.node.node_pid(200, unit_pid)}/cgroup")
    assert "system.slice/dflash-train.service" in cgroup
    again = site.deploy()
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]
    assert "converged and verified" in again.output
